"""Concurrent requests to a cpu endpoint are decoded together (`TransformersEngine`, `cpu.sample_batch`):
each answer is the one its request gets alone, a batch is formed when requests wait, one bad request
fails alone, and every turn recorded through the endpoint keeps its own prompt and logprobs. The real
tiny model (float32), real threads, a real uvicorn for the HTTP path."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
import httpx  # noqa: E402

from episodes.store import EpisodeStore  # noqa: E402
from tests.training.gateway.test_policy_auth import uvicorn_on_loopback  # noqa: E402
from training.backends.base import BackendConfig  # noqa: E402
from training.backends.cpu import Asked, prompt_token_ids, sample_batch, sample_choices  # noqa: E402
from training.gateway.app import Gateway  # noqa: E402
from training.gateway.engines import BadRequest, TransformersEngine  # noqa: E402

PROMPTS = ["Count to three.", "Name a colour, then a fruit, then an animal, in that order please.", "Hi"]


def _messages(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


@pytest.fixture
def engine(tmp_path: Path) -> TransformersEngine:
    return TransformersEngine(BackendConfig(path=tmp_path / "art", dtype="float32"), reload_interval_s=60.0)


def test_a_batch_answers_each_prompt_as_it_is_answered_alone(engine: TransformersEngine) -> None:
    model, tokenizer = engine._model, engine._tokenizer
    asked = [Asked(prompt_token_ids(tokenizer, _messages(text)), max_tokens=12) for text in PROMPTS]
    asked.append(Asked(asked[0].prompt_ids, max_tokens=3, stop=None))  # its own, shorter budget
    together = sample_batch(model, tokenizer, asked, temperature=0.0)
    for request, choice in zip(asked, together, strict=True):
        [alone], _ = sample_choices(
            model, tokenizer, [], n=1, max_tokens=request.max_tokens, temperature=0.0, prompt_ids=request.prompt_ids
        )
        assert choice.logprobs is not None and alone.logprobs is not None
        assert [t.token for t in choice.logprobs.content] == [t.token for t in alone.logprobs.content]
        assert [t.logprob for t in choice.logprobs.content] == pytest.approx(
            [t.logprob for t in alone.logprobs.content], abs=1e-4
        )
        assert (choice.message.content, choice.finish_reason) == (alone.message.content, alone.finish_reason)
    assert len(together[-1].logprobs.content) <= 3  # type: ignore[union-attr]


def test_requests_that_wait_are_decoded_together_and_a_bad_one_fails_alone(engine: TransformersEngine) -> None:
    alone = {
        text: engine.complete(_messages(text), n=1, max_tokens=16, temperature=0.0, seed=None, tools=None)
        for text in PROMPTS
    }
    engine.batch_sizes.clear()
    gate = threading.Barrier(len(PROMPTS) * 2 + 1)

    def ask(text: str) -> Any:
        gate.wait()
        if text == "too long":
            try:
                engine.complete(_messages("word " * 50_000), n=1, max_tokens=4, temperature=0.0, seed=None, tools=None)
            except BadRequest as exc:
                return exc
        return engine.complete(_messages(text), n=1, max_tokens=16, temperature=0.0, seed=None, tools=None)

    asked = [*PROMPTS, *PROMPTS, "too long"]
    with ThreadPoolExecutor(len(asked)) as pool:
        answers = list(pool.map(ask, asked))
    for text, answer in zip(asked, answers, strict=True):
        if text == "too long":
            assert isinstance(answer, BadRequest) and answer.code == "context_length_exceeded"
            continue
        assert answer.completion_token_ids == alone[text].completion_token_ids, text
        assert answer.prompt_token_ids == alone[text].prompt_token_ids
    assert sum(engine.batch_sizes.values()) < len(PROMPTS) * 2  # some were decoded together
    assert max(engine.batch_sizes) > 1


def test_turns_recorded_from_one_batch_keep_their_own_prompts_and_logprobs(
    engine: TransformersEngine, store: EpisodeStore
) -> None:
    with uvicorn_on_loopback(Gateway(engine, store).app) as base:
        started = [httpx.post(f"{base}/episodes", json={"task": text}).json() for text in PROMPTS]

        def ask(index: int) -> dict[str, Any]:
            body = {"model": "student", "messages": _messages(PROMPTS[index]), "max_tokens": 10, "temperature": 0}
            answer = httpx.post(f"{started[index]['base_url']}/chat/completions", json=body, timeout=120)
            assert answer.status_code == 200, answer.text
            return dict(answer.json())

        with ThreadPoolExecutor(len(PROMPTS)) as pool:
            answers = list(pool.map(ask, range(len(PROMPTS))))
    for index, episode in enumerate(started):
        [turn] = store.turns.policy_turns(episode["episode_id"])
        alone = engine.complete(_messages(PROMPTS[index]), n=1, max_tokens=10, temperature=0.0, seed=None, tools=None)
        assert turn.prompt_token_ids == alone.prompt_token_ids  # its own prompt, not the batch's padded one
        assert turn.completion_token_ids == alone.completion_token_ids[0]
        assert answers[index]["choices"][0]["message"]["content"] == alone.choices[0]["message"]["content"]
