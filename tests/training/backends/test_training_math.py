"""The training math on a real (tiny) model with Qwen2.5's own chat template, a multi-turn tool
episode sampled through the policy endpoint's engine: the trained sequence is token for token what
was sampled (cpu trainer and what ART is handed), its logprobs agree, the importance ratio is 1 at
the first step in the default dtype, tool schemas render alike for sampling, SFT and DPO, DPO's
reference is the policy it starts from, the KL term is k3 against the base, and tokens sampled at
a temperature are scored at it."""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("art")
pytest.importorskip("peft")

from openai.types.chat.chat_completion import Choice, ChoiceLogprobs  # noqa: E402
from openai.types.chat.chat_completion_message import ChatCompletionMessage  # noqa: E402
from openai.types.chat.chat_completion_token_logprob import ChatCompletionTokenLogprob  # noqa: E402

from episodes.codec import encode_choice  # noqa: E402
from tests.training.backends.run_tests_tool import TOOLS  # noqa: E402
from training.backends.base import BackendConfig  # noqa: E402
from training.backends.cpu import (  # noqa: E402
    CpuBackend,
    prompt_token_ids,
    sample_choices,
    scored_logprobs,
    sft_example,
    weights_dtype,
)
from training.data.groups import Group, Trajectory, to_art  # noqa: E402
from training.gateway.engines import PriorTurn, TransformersEngine  # noqa: E402
from training.gateway.tool_calls import with_tool_calls  # noqa: E402

QWEN_TEMPLATE = Path(__file__).with_name("qwen2_5_chat_template.jinja")
"""Qwen2.5-Instruct's chat template as shipped with Qwen2.5-Coder-0.5B-Instruct (Apache-2.0)."""
TASK = [{"role": "user", "content": "make the tests pass"}]
CALL = '<tool_call>\n{"name": "run_tests", "arguments": {"test_command": "pytest -q"}}\n</tool_call>'
TEMPERATURE = 0.7


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer from-config Qwen2 and a small BPE tokenizer with Qwen2.5's real chat template, saved
    as a model folder: the cpu backend treats it as a pretrained model (its default dtype is bf16
    where the CPU computes it natively, as for Qwen2.5-Coder-0.5B)."""
    from training.backends.tiny import build_model, build_tokenizer

    folder = tmp_path_factory.mktemp("tiny-qwen-template")
    tokenizer = build_tokenizer(seed=0)
    tokenizer.chat_template = QWEN_TEMPLATE.read_text()
    build_model(tokenizer, seed=0).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def config(base_dir: Path, tmp_path: Path, **changes: Any) -> BackendConfig:
    return replace(BackendConfig(path=tmp_path / "art", base_model=str(base_dir), lora_rank=4), **changes)


def tempered_logprobs(model: Any, prompt: list[int], ids: list[int], temperature: float) -> Any:
    """The logprob of each of `ids` after `prompt` under the policy at `temperature`, computed here."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(1, torch.tensor(ids).unsqueeze(1)).squeeze(1)


def forced_choice(
    model: Any, tokenizer: Any, prompt: list[int], text: str, temperature: float
) -> tuple[dict[str, Any], list[int]]:
    """Turn 1 as the endpoint answers it (`with_tool_calls` of a dumped choice): a random 2-layer
    model does not write a tool call, so its tokens are the call's, each recorded with the logprob
    the policy gives it at `temperature`, as the sampler records a token it drew."""
    ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
    logps = tempered_logprobs(model, prompt, ids, temperature)
    content = [
        ChatCompletionTokenLogprob(token=f"token_id:{t}", logprob=float(lp), bytes=[], top_logprobs=[])
        for t, lp in zip(ids, logps, strict=True)
    ]
    choice = Choice(
        finish_reason="stop",
        index=0,
        message=ChatCompletionMessage(role="assistant", content=text),
        logprobs=ChoiceLogprobs(content=content),
        temperature=temperature,  # type: ignore[call-arg]
    )
    return with_tool_calls(choice.model_dump(mode="json")), ids


def two_turn_group(cfg: BackendConfig, temperature: float = TEMPERATURE) -> tuple[Group, list[list[int]], list[int]]:
    """A group of two 2-turn episodes sampled through the policy endpoint's engine: turn 1 a tool call,
    then its result, then turn 2 sampled on the spliced prompt (`PriorTurn`) as the gateway does.
    Also each episode's whole sampled sequence (turn 2's prompt ids + its completion ids) and turn 1's
    span in it (start, end)."""
    engine = TransformersEngine(cfg, reload_interval_s=0.0)
    tok = engine._tokenizer
    prompt1 = prompt_token_ids(tok, TASK, TOOLS)
    turn1, completion1 = forced_choice(engine._model, tok, prompt1, CALL, temperature)
    calls = turn1["message"]["tool_calls"]
    assert calls and calls[0]["function"]["name"] == "run_tests"  # the endpoint parsed the call out
    echoed = {"role": "assistant", "content": turn1["message"]["content"], "tool_calls": calls}
    result = {"role": "tool", "tool_call_id": calls[0]["id"], "content": "1 failed: test_add"}
    messages2 = [*TASK, echoed, result]
    prior = PriorTurn(TASK, turn1["message"]["content"], prompt1, completion1, calls)
    assert prior.continued_by(messages2)
    second = engine.complete(messages2, n=2, max_tokens=6, temperature=temperature, seed=5, tools=TOOLS, prior=prior)
    assert second.prompt_token_ids[: len(prompt1) + len(completion1)] == prompt1 + completion1  # spliced
    trajectories = [
        Trajectory([*TASK, encode_choice(turn1), result, encode_choice(c)], reward=float(i), tools=TOOLS)
        for i, c in enumerate(second.choices)
    ]
    sequences = [second.prompt_token_ids + ids for ids in second.completion_token_ids]
    return Group(key="g", trajectories=trajectories), sequences, [len(prompt1), len(prompt1) + len(completion1)]


def started(cfg: BackendConfig) -> CpuBackend:
    CpuBackend.check(cfg)  # as `make_backend` does (it undoes ART's transformers patch)
    backend = CpuBackend(cfg)
    backend.start()
    return backend


def test_a_multi_turn_tool_episode_trains_on_exactly_the_tokens_sampled(base_dir: Path, tmp_path: Path) -> None:
    """Turn 1's call is in its sampled tokens once, not again as the template renders `tool_calls`;
    the trainer's sequence is turn 2's prompt as the endpoint spliced it plus turn 2's tokens, both
    turns scored, and their recomputed logprobs equal the sampled ones (float32)."""
    cfg = config(base_dir, tmp_path, dtype="float32")
    group, sequences, (start, end) = two_turn_group(cfg, temperature=1.0)
    backend = started(cfg)
    result = backend.train([group])
    assert result.metrics["losses/max_logprob_drift"] < 1e-4, result.metrics
    tokenized = backend.tokenize_art(to_art([group]))
    assert sorted(r.token_ids for r in tokenized) == sorted(sequences)
    for r in tokenized:
        mask = [i for i, m in enumerate(r.assistant_mask) if m]
        prompt2 = len(r.token_ids) - (len(mask) - (end - start))
        assert mask == [*range(start, end), *range(prompt2, len(r.token_ids))]  # both turns, nothing else


def test_what_the_art_adapters_hand_art_tokenizes_onto_the_sampled_tokens(base_dir: Path, tmp_path: Path) -> None:
    """ART's own backends (local, serverless, tinker) get the groups from `ArtBackendAdapter.train`:
    ART's tokenizer, run on exactly what it hands over, rebuilds the sampled sequences."""
    from art.preprocessing.tokenize import tokenize_trajectory_groups
    from transformers import AutoTokenizer

    from training.backends._art_common import ArtBackendAdapter

    cfg = config(base_dir, tmp_path, dtype="float32")
    group, sequences, _ = two_turn_group(cfg)
    handed: list[Any] = []

    class RecordingArt:
        """ART's `Backend.train` and the model calls the adapter makes after it."""

        async def train(self, model: Any, groups: list[Any], **options: Any) -> Any:
            handed.extend(groups)
            return None

    class Model:
        async def get_step(self) -> int:
            return 1

        async def log(self, **kwargs: Any) -> None:
            return None

    adapter = ArtBackendAdapter(cfg)
    adapter._art_backend, adapter._model = RecordingArt(), Model()
    adapter.train([group])
    adapter.close()
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    results = tokenize_trajectory_groups(tokenizer, handed, allow_training_without_logprobs=False, scale_rewards=True)
    assert sorted(r.token_ids for r in results) == sorted(sequences)


def test_the_first_step_is_on_policy_in_the_default_dtype(base_dir: Path, tmp_path: Path) -> None:
    """In the default dtype (bf16 on a CPU that computes it), the sampler's KV-cache decode and the
    trainer's full forward disagree by float error; the old logprobs of the ratio are the trainer's
    own before the update, so every importance ratio of the first step is 1."""
    cfg = config(base_dir, tmp_path)
    native_bf16 = bool(torch.cpu._is_avx512_bf16_supported())
    assert weights_dtype(cfg) == (torch.bfloat16 if native_bf16 else torch.float32)
    group, _, _ = two_turn_group(cfg, temperature=1.0)
    backend = started(cfg)
    result = backend.train([group])
    assert result.metrics["losses/max_ratio_deviation"] < 1e-6, result.metrics
    assert math.isfinite(result.metrics["losses/max_logprob_drift"])  # the sampler's drift is still reported


def test_sft_and_dpo_render_tools_as_the_sampler_does(base_dir: Path) -> None:
    """A client's tool definitions with their keys in another order: the sampler renders the
    canonical form, and so do SFT and DPO, so they train on the prompt the policy is shown."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(base_dir)
    function = TOOLS[0]["function"]
    shuffled = [{"function": {k: function[k] for k in ("parameters", "description", "name")}, "type": "function"}]
    prompt = prompt_token_ids(tok, TASK, shuffled)
    assert prompt == prompt_token_ids(tok, TASK, TOOLS)
    conversation = [*TASK, {"role": "assistant", "content": "done"}]
    for first in (0, 1):  # SFT scores every assistant turn; DPO the completion's (after the prompt)
        ids, labels = sft_example(tok, conversation, shuffled, first=first)
        assert ids[: len(prompt)] == prompt
        assert all(label == -100 for label in labels[: len(prompt)])


def test_dpo_starts_from_the_current_policy_not_the_base(base_dir: Path, tmp_path: Path) -> None:
    """After an SFT step has moved the policy, a DPO step's reference is that policy: its loss is
    log 2 (policy = reference), and the step raises the policy's margin for the chosen answer."""
    backend = started(config(base_dir, tmp_path, learning_rate=5e-2))
    sft = [{"messages": [*TASK, {"role": "assistant", "content": "call run tests"}]}]
    backend.train_sft(sft)
    pair = {
        "prompt": TASK,
        "chosen": [{"role": "assistant", "content": "run the tests"}],
        "rejected": [{"role": "assistant", "content": "no"}],
        "tools": TOOLS,
    }
    first = backend.train_dpo([pair])
    assert first.metrics["losses/dpo_loss"] == pytest.approx(math.log(2), abs=1e-6)
    second = backend.train_dpo([pair])
    assert second.metrics["logps/margin"] > first.metrics["logps/margin"]


def k3_to_base(backend: CpuBackend, group: Group) -> float:
    """The k3 estimate of KL(policy || base) over the group's sampled tokens, averaged over them."""
    total, count = 0.0, 0
    for r in backend.tokenize_art(to_art([group])):
        ids, scored = torch.tensor(r.token_ids), torch.tensor(r.assistant_mask).bool()
        with torch.no_grad():
            _, new = scored_logprobs(backend.model, ids, scored)
            with backend.model.disable_adapter():
                _, ref = scored_logprobs(backend.model, ids, scored)
        total += float((torch.exp(ref - new) - (ref - new) - 1).sum())
        count += len(new)
    return total / count


def test_the_grpo_kl_term_is_k3_to_the_base_averaged_over_tokens(base_dir: Path, tmp_path: Path) -> None:
    """With `kl_penalty_coef`, the loss adds coef x the mean k3 estimate of KL(policy || base) over the
    batch's sampled tokens (reported as `losses/kl`), which pulls the policy back: from the same
    moved policy, a step with the term ends closer to the base than one without."""
    moved = tmp_path / "moved"
    mover = started(config(base_dir, moved, learning_rate=5e-2, dtype="float32"))
    mover.train_sft([{"messages": [*TASK, {"role": "assistant", "content": "call run tests"}]}])
    group, _, _ = two_turn_group(config(base_dir, moved, dtype="float32"), temperature=1.0)
    after = {}
    for coef in (0.0, 5.0):
        run = tmp_path / f"kl-{coef}"
        cfg = config(base_dir, run, learning_rate=5e-2, dtype="float32", kl_penalty_coef=coef)
        shutil.copytree(mover.config.checkpoint_dir(1), cfg.checkpoint_dir(1))  # the same moved policy
        backend = started(cfg)
        before = k3_to_base(backend, group)
        assert before > 0
        result = backend.train([group])
        if coef:
            assert result.metrics["losses/kl"] == pytest.approx(before, rel=1e-4)
        after[coef] = k3_to_base(backend, group)
    assert after[5.0] < after[0.0]


def test_tokens_sampled_at_a_temperature_are_recorded_and_scored_at_it(base_dir: Path, tmp_path: Path) -> None:
    """The recorded logprob of a token drawn at temperature T is its logprob under the tempered
    distribution it was drawn from; the trainer scores it at T, so the two agree."""
    cfg = config(base_dir, tmp_path, dtype="float32")
    backend = started(cfg)
    choices, prompt = sample_choices(backend.model, backend.tokenizer, TASK, n=2, max_tokens=6, temperature=0.5, seed=2)
    for choice in choices:
        ids = [int(t.token.removeprefix("token_id:")) for t in choice.logprobs.content]
        tempered = tempered_logprobs(backend.model, prompt, ids, 0.5)
        recorded = torch.tensor([t.logprob for t in choice.logprobs.content])
        assert torch.allclose(recorded, tempered, atol=1e-4)
        assert json.loads(choice.model_dump_json())["temperature"] == 0.5
    group = Group(
        key="t", trajectories=[Trajectory([*TASK, encode_choice(c)], reward=float(i)) for i, c in enumerate(choices)]
    )
    assert backend.train([group]).metrics["losses/max_logprob_drift"] < 1e-4
