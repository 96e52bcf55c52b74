"""Tool calls reach each chat template as objects, whatever the client sent (OpenAI's JSON text)."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from training.backends.cpu import prompt_token_ids, sft_example  # noqa: E402
from training.data.fit import template_messages  # noqa: E402
from training.models.registry import PACKAGED, installed, model_dir  # noqa: E402

ARGUMENTS = {"test_command": "python -m pytest -q", "timeout_s": 30}


def conversation(arguments: Any) -> list[dict[str, Any]]:
    call = {"id": "call_1", "type": "function", "function": {"name": "run_tests", "arguments": arguments}}
    return [
        {"role": "user", "content": "make the tests pass"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "1 failed"},
    ]


def tokenizers() -> list[Any]:
    params = [pytest.param("tiny-qwen2", id="tiny-qwen2")]
    for name, model in sorted(PACKAGED.items()):
        marks = pytest.mark.skipif(not installed(model), reason=f"rlide models fetch {name}")
        params.append(pytest.param(name, id=name, marks=marks))
    return params


def load(name: str) -> Any:
    if name == "tiny-qwen2":
        from training.backends.tiny import build_tokenizer

        return build_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir(PACKAGED[name]))


@pytest.mark.parametrize("name", tokenizers())
def test_json_text_arguments_render_as_the_object_the_model_wrote(name: str) -> None:
    tokenizer = load(name)
    as_text = prompt_token_ids(tokenizer, conversation(json.dumps(ARGUMENTS)))
    as_object = prompt_token_ids(tokenizer, conversation(ARGUMENTS))
    assert as_text == as_object
    rendered = tokenizer.decode(as_text)
    assert '"test_command": "python -m pytest -q"' in rendered and '\\"test_command\\"' not in rendered
    # SFT labels come from the same rendering.
    assert sft_example(tokenizer, conversation(json.dumps(ARGUMENTS)), None) == sft_example(
        tokenizer, conversation(ARGUMENTS), None
    )


def test_only_json_objects_are_parsed_and_nothing_else_changes() -> None:
    for arguments in ("not json", "[1, 2]", '"a string"'):
        assert template_messages(conversation(arguments)) == conversation(arguments)
    messages = conversation(json.dumps(ARGUMENTS))
    snapshot = json.dumps(messages)
    parsed = template_messages(messages)
    assert parsed[1]["tool_calls"][0]["function"]["arguments"] == ARGUMENTS
    assert parsed[0] is messages[0] and json.dumps(messages) == snapshot  # the caller's messages untouched
