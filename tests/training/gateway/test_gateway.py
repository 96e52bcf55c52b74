"""The policy endpoint through the real OpenAI client; recorded turns train the policy exactly."""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("art")
openai = pytest.importorskip("openai")

from starlette.testclient import TestClient  # noqa: E402

from episodes.codec import decode_choice  # noqa: E402
from episodes.db import SQLiteDatabase  # noqa: E402
from episodes.records import EpisodeStatus, RewardSource  # noqa: E402
from episodes.rewards import OUTCOME_REWARD, combine  # noqa: E402
from episodes.store import EpisodeStore  # noqa: E402
from training.backends.base import BackendConfig  # noqa: E402
from training.data.groups import groups_from_log  # noqa: E402
from training.gateway.app import Gateway  # noqa: E402
from training.gateway.engines import TransformersEngine  # noqa: E402
from training.worker.config import WorkerConfig  # noqa: E402
from training.worker.loop import train  # noqa: E402


@pytest.fixture
def setup(tmp_path: Path, store: EpisodeStore) -> tuple[Gateway, TestClient, BackendConfig]:
    config = BackendConfig(path=tmp_path / "art")
    gateway = Gateway(TransformersEngine(config, reload_interval_s=0.0), store)
    return gateway, TestClient(gateway.app), config


def _smollm2_installed() -> bool:
    from training.models.registry import PACKAGED, installed

    return installed(PACKAGED["smollm2-135m-instruct"]) is not None


@pytest.fixture(
    params=[
        "tiny-qwen2",
        pytest.param(
            "smollm2-135m-instruct",
            marks=pytest.mark.skipif(not _smollm2_installed(), reason="rlide models fetch smollm2-135m-instruct"),
        ),
    ]
)
def model_setup(request: pytest.FixtureRequest, tmp_path: Path, store: EpisodeStore) -> tuple[Gateway, TestClient]:
    """The endpoint on the tiny model, and on a real pretrained one with its own chat template."""
    config = BackendConfig(path=tmp_path / "art", base_model=request.param, dtype="float32")
    gateway = Gateway(TransformersEngine(config, reload_interval_s=0.0), store)
    return gateway, TestClient(gateway.app)


JSON = {"content-type": "application/json"}


def client_for(http: TestClient, episode_id: str | None = None) -> openai.OpenAI:
    base = f"http://testserver/episodes/{episode_id}/v1" if episode_id else "http://testserver/v1"
    return openai.OpenAI(base_url=base, api_key="unused", http_client=http, max_retries=0)


def test_models_and_plain_completions(setup: tuple[Gateway, TestClient, BackendConfig]) -> None:
    _, http, _ = setup
    models = client_for(http).models.list()
    assert [m.id for m in models.data] == ["student", "student@0"]  # the alias, and the step as ART's vLLM names it
    resp = client_for(http).chat.completions.create(
        model="student", messages=[{"role": "user", "content": "hi"}], max_tokens=5, n=2, seed=3
    )
    assert len(resp.choices) == 2 and resp.choices[0].logprobs is None
    assert resp.usage.completion_tokens > 0 and resp.system_fingerprint == "student@0"
    # vLLM's return_token_ids: the prompt's ids and each choice's, where vLLM puts them.
    raw = http.post(
        "/v1/chat/completions",
        json={"model": "student@0", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
              "logprobs": True, "return_tokens_as_token_ids": True, "return_token_ids": True},
    ).json()  # fmt: skip
    [choice] = raw["choices"]
    assert len(raw["prompt_token_ids"]) == raw["usage"]["prompt_tokens"]
    assert choice["token_ids"] == [int(t["token"].split(":")[1]) for t in choice["logprobs"]["content"]]
    assert "token_ids" not in resp.choices[0].model_dump() or resp.choices[0].model_dump()["token_ids"] is None
    for wrong in ("gpt-9", "student@1"):
        with pytest.raises(openai.NotFoundError, match=r"serves 'student' \(student@0\)"):
            client_for(http).chat.completions.create(model=wrong, messages=[{"role": "user", "content": "hi"}])


def test_episode_calls_are_recorded_exactly_and_train(setup: tuple[Gateway, TestClient, BackendConfig]) -> None:
    gateway, http, config = setup
    store = gateway.store
    episodes, totals = [], []
    # A verified tests reward (this test is the trusted in-process judge: it writes through the store,
    # as rlide's own verifier does; a reward sent to /end is only a claim) beside the outcome reward
    # MCP's end_episode would record: the episode's reward is their weighted mean (`episodes.rewards`).
    for i, (outcome, reward) in enumerate([(EpisodeStatus.success, 1.0), (EpisodeStatus.failure, -0.5)]):
        started = http.post("/episodes", json={"task": "Write a number."})
        assert started.status_code == 201
        episode_id = started.json()["episode_id"]
        assert started.json()["base_url"].endswith(f"/episodes/{episode_id}/v1")
        oai = client_for(http, episode_id)
        messages = [{"role": "user", "content": "Write a number."}]
        first = oai.chat.completions.create(model="student", messages=messages, max_tokens=6, logprobs=True, seed=i)
        messages += [
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "Longer."},
        ]
        second = oai.chat.completions.create(
            model="student", messages=messages, max_tokens=6, logprobs=True, seed=10 + i
        )
        turns = store.turns.policy_turns(episode_id)
        assert len(turns) == 2
        stored = decode_choice(turns[1].choice)
        assert stored.logprobs.content == second.choices[0].logprobs.content  # bit-exact through HTTP and SQLite
        assert turns[1].completion_token_ids == [int(t.token.split(":")[1]) for t in stored.logprobs.content]
        assert turns[0].prompt_token_ids and turns[0].checkpoint_step == 0 and turns[0].model == "student@0"
        # The second turn continues the first: the log stores only what it adds and reads it back whole.
        with store.db.transaction(write=False) as cur:
            prefix = cur.execute(
                "SELECT prefix_turn_id, prefix_messages, prefix_tokens, request, prompt_token_ids FROM policy_turns"
                " WHERE id = ?",
                (turns[1].id,),
            ).fetchone()
        earlier = [*turns[0].prompt_token_ids, *(turns[0].completion_token_ids or [])]
        assert prefix[:3] == (turns[0].id, 1, len(earlier)) and turns[1].prompt_token_ids[: len(earlier)] == earlier
        assert json.loads(prefix[3])["messages"] == turns[1].request["messages"][1:]
        assert json.loads(prefix[4]) == turns[1].prompt_token_ids[len(earlier) :]
        ended = http.post(f"/episodes/{episode_id}/end", json={"outcome": outcome.value})
        assert ended.status_code == 200 and (ended.json()["turn_count"], ended.json()["step_count"]) == (2, 0)
        store.add_reward(episode_id, RewardSource.tests, reward, "the test's verifier", verified=True)
        total = combine({RewardSource.tests: reward, RewardSource.outcome: OUTCOME_REWARD[outcome]})
        assert store.get_episode(episode_id).reward_total == pytest.approx(total)
        totals.append(store.get_episode(episode_id).reward_total)
        episodes.append(episode_id)

    # The worker claims the recorded episodes as a GRPO group; ART maps the stored logprobs back
    # onto the exact tokens (recomputed logprobs match), and the gateway then serves step 1.
    cfg = WorkerConfig(database_url=store.url, backend=config, scenarios=None, group_size=2)
    report = train(cfg, once=True)
    assert (report.steps_trained, report.groups_trained, report.step) == (1, 1, 1)
    [record] = store.runs.training_steps("default")
    assert record.metrics["losses/max_logprob_drift"] < 1e-4
    assert record.reward_mean == pytest.approx(sum(totals) / 2)
    assert groups_from_log(store, run="default", group_size=2) == []  # consumed
    assert client_for(http).models.list().data[0].model_extra["checkpoint_step"] == 1
    resp = client_for(http).chat.completions.create(model="student", messages=[{"role": "user", "content": "x"}])
    assert resp.system_fingerprint == "student@1"
    # An agent that pinned the checkpoint before keeps it through the grace period (`PINNED_GRACE_S`),
    # recorded as that step's turn, so its attempt is one policy's.
    episode_id = http.post("/episodes", json={"task": "Write a number."}).json()["episode_id"]
    pinned = client_for(http, episode_id).chat.completions.create(
        model="student@0", messages=[{"role": "user", "content": "x"}], max_tokens=4
    )
    assert pinned.system_fingerprint == "student@0"
    [turn] = store.turns.policy_turns(episode_id)
    assert (turn.model, turn.checkpoint_step) == ("student@0", 0)
    # Without a grace period (or past it) the name is served no more: a 404 naming what is.
    fresh = TestClient(Gateway(TransformersEngine(config, grace_s=0.0), store).app)
    with pytest.raises(openai.NotFoundError, match="served no more.*student@1"):
        client_for(fresh).chat.completions.create(model="student@0", messages=[{"role": "user", "content": "x"}])


def test_a_redacted_turn_is_still_continued_token_in_token_out(
    setup: tuple[Gateway, TestClient, BackendConfig],
) -> None:
    """The log holds the completion redacted, the client echoes it as sent: the conversation still
    continues the stored turn, and the engine splices the exact earlier tokens instead of
    re-tokenizing the text."""
    from episodes.redaction import redact
    from training.gateway.engines import PriorTurn

    gateway, _, _ = setup
    engine = gateway.engine
    assert isinstance(engine, TransformersEngine)
    said = "deploy with AKIAIOSFODNN7EXAMPLE"
    first = [{"role": "user", "content": "which key? ghp_" + "A1b2" * 9}]
    prior = PriorTurn(
        messages=redact(first), content=redact(said), prompt_token_ids=[5, 6, 7], completion_token_ids=[8, 9]
    )
    assert prior.content == "deploy with [REDACTED:aws_access_key]"
    follow = [*first, {"role": "assistant", "content": said}, {"role": "user", "content": "thanks"}]
    assert prior.continued_by(redact(follow))
    ids = engine.continued_prompt_ids(follow, None, prior)
    assert ids is not None and ids[:5] == [5, 6, 7, 8, 9]
    other = [*first, {"role": "assistant", "content": "something else"}, {"role": "user", "content": "thanks"}]
    assert not prior.continued_by(redact(other))
    assert not prior.continued_by(redact(follow[:2]))  # nothing after the echoed answer


def teach(
    engine: TransformersEngine, messages: list[dict[str, str]], tools: list[dict[str, object]], text: str
) -> None:
    """Train the served model (all its weights, in place) until greedy decoding answers `messages`
    with exactly `text`: the way to make a model write a given tool call (the tiny one writes
    noise; SmolLM2 answers prose)."""
    import torch

    model, tok = engine._model, engine._tokenizer  # type: ignore[attr-defined]
    from training.backends.cpu import prompt_token_ids

    prompt = prompt_token_ids(tok, messages, tools)
    target = torch.tensor([*tok.encode(text, add_special_tokens=False), tok.eos_token_id])
    ids = torch.tensor([[*prompt, *target.tolist()]])
    weights = list(model.parameters())
    for w in weights:
        w.requires_grad_(True)
    optimizer = torch.optim.Adam(weights, lr=3e-3)
    for _ in range(300):
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
        loss = torch.nn.functional.cross_entropy(logits, target)
        if bool((logits.argmax(-1) == target).all()) and loss.item() < 0.1:  # a margin for cached decoding
            break
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    else:
        raise AssertionError(f"the model did not learn to write {text!r} (loss {loss.item():.3f})")
    for w in weights:
        w.requires_grad_(False)
    model.eval()


@pytest.mark.timeout(900)  # teaching SmolLM2 the call takes about a minute on 2 idle cores
def test_a_tool_call_the_student_writes_is_answered_as_tool_calls_and_continued_token_in_token_out(
    model_setup: tuple[Gateway, TestClient],
) -> None:
    """The model writes a Hermes tool call; a request that offers tools gets it as OpenAI
    `tool_calls` (plain and streamed), one that says tool_choice "none" gets the text. The agent
    sends the call back with its arguments re-serialized: that still continues the recorded turn,
    so the next prompt splices the exact sampled tokens; other arguments do not."""
    gateway, http = model_setup
    engine = gateway.engine
    assert isinstance(engine, TransformersEngine)
    tools: list[dict[str, object]] = [{"type": "function", "function": {"name": "run"}}]
    messages = [{"role": "user", "content": "Go."}]
    written = 'ok<tool_call>{"name": "run", "arguments": {"n": 1}}</tool_call>'
    teach(engine, messages, tools, written)
    ask = {"model": "student", "messages": messages, "tools": tools, "max_tokens": 80, "temperature": 0}

    as_text = client_for(http).chat.completions.create(**ask, tool_choice="none")  # type: ignore[call-overload]
    assert as_text.choices[0].message.content == written and as_text.choices[0].message.tool_calls is None
    streamed: dict[str, str] = {"name": "", "arguments": ""}
    for chunk in client_for(http).chat.completions.create(**ask, stream=True):  # type: ignore[call-overload]
        for delta_call in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            streamed["name"] += delta_call.function.name or ""
            streamed["arguments"] += delta_call.function.arguments or ""
        if chunk.choices and chunk.choices[0].finish_reason:
            assert chunk.choices[0].finish_reason == "tool_calls"
    assert streamed == {"name": "run", "arguments": '{"n": 1}'}

    def first_turn() -> tuple[str, str]:
        episode_id = http.post("/episodes", json={"task": "go"}).json()["episode_id"]
        resp = client_for(http, episode_id).chat.completions.create(**ask)  # type: ignore[call-overload]
        choice = resp.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content == "ok"
        [made] = choice.message.tool_calls
        assert made.id.startswith("chatcmpl-tool-") and made.function.name == "run"
        assert json.loads(made.function.arguments) == {"n": 1}
        return episode_id, made.id

    def continue_with(episode_id: str, call_id: str, arguments: str) -> bool:
        """Whether the second turn's prompt starts with the first turn's exact prompt and completion."""
        echoed = {"id": call_id, "type": "function", "function": {"name": "run", "arguments": arguments}}
        follow = [
            *messages,
            {"role": "assistant", "content": "ok", "tool_calls": [echoed]},
            {"role": "tool", "tool_call_id": call_id, "content": "1 passed"},
        ]
        client_for(http, episode_id).chat.completions.create(**{**ask, "messages": follow, "max_tokens": 4})  # type: ignore[call-overload]
        first, second = gateway.store.turns.policy_turns(episode_id)
        assert first.choice["__choice__"]["message"]["tool_calls"][0]["function"]["arguments"] == '{"n": 1}'
        earlier = [*(first.prompt_token_ids or []), *(first.completion_token_ids or [])]
        return (second.prompt_token_ids or [])[: len(earlier)] == earlier

    assert continue_with(*first_turn(), '{"n":1}')  # compact, as many clients re-serialize
    assert not continue_with(*first_turn(), '{"n": 2}')  # not the call the policy made: re-tokenized


def test_a_stop_string_ends_the_completion_where_it_starts(setup: tuple[Gateway, TestClient, BackendConfig]) -> None:
    """The same seed with a stop string taken from the middle of the free answer: the answer is cut
    before it, and its tokens (recorded with their logprobs) are the free answer's up to the token
    that completed the stop string."""
    gateway, http, _ = setup
    messages = [{"role": "user", "content": "Write a number."}]
    free = client_for(http).chat.completions.create(
        model="student", messages=messages, max_tokens=24, logprobs=True, seed=7
    )
    text = free.choices[0].message.content or ""
    k = next(i for i in range(1, len(text) - 1) if text[i : i + 2].isalpha() and text.find(text[i : i + 2]) == i)
    episode_id = http.post("/episodes", json={"task": "stop"}).json()["episode_id"]
    stopped = client_for(http, episode_id).chat.completions.create(
        model="student", messages=messages, max_tokens=24, logprobs=True, seed=7, stop=[text[k : k + 2], "never-seen"]
    )
    assert stopped.choices[0].message.content == text[:k] and stopped.choices[0].finish_reason == "stop"
    ids = [t.token for t in stopped.choices[0].logprobs.content]
    free_ids = [t.token for t in free.choices[0].logprobs.content]
    assert 0 < len(ids) < len(free_ids) and free_ids[: len(ids)] == ids
    [turn] = gateway.store.turns.policy_turns(episode_id)
    assert [f"token_id:{t}" for t in turn.completion_token_ids or []] == ids


def test_a_small_top_p_samples_the_most_likely_tokens(setup: tuple[Gateway, TestClient, BackendConfig]) -> None:
    """Nucleus sampling with a nucleus of one token is greedy decoding, whatever the seed; the
    logprobs stay the tokens' under the whole distribution (what the trainer recomputes)."""
    _, http, _ = setup
    oai, messages = client_for(http), [{"role": "user", "content": "Write a number."}]

    def answer(**options: object) -> tuple[list[str], list[float]]:
        resp = oai.chat.completions.create(model="student", messages=messages, max_tokens=12, logprobs=True, **options)
        content = resp.choices[0].logprobs.content
        return [t.token for t in content], [t.logprob for t in content]

    greedy_tokens, greedy_logprobs = answer(temperature=0)
    free = [answer(seed=seed)[0] for seed in (1, 2)]
    assert free[0] != free[1]  # sampling at top_p=1 does depend on the seed
    for seed in (1, 2):
        tokens, logprobs = answer(seed=seed, top_p=1e-6)
        assert tokens == greedy_tokens
        assert logprobs == pytest.approx(greedy_logprobs, abs=1e-5)


def test_a_prompt_past_the_models_context_is_refused_and_an_answer_stops_at_it(
    setup: tuple[Gateway, TestClient, BackendConfig],
) -> None:
    """Past its positions the model would still compute, on positions it never trained on. Through a
    proxy the upstream's refusal reaches the client as the same 400 (agents shorten their history on
    it), not as a 502 they would retry."""
    from training.gateway.engines import ProxyEngine

    gateway, http, _ = setup
    context = gateway.engine._model.config.max_position_embeddings  # type: ignore[attr-defined]
    proxy = TestClient(Gateway(ProxyEngine("http://testserver/v1", "student", http_client=http), gateway.store).app)
    for server in (http, proxy):
        with pytest.raises(openai.BadRequestError, match="maximum context length is 1024 tokens") as refused:
            client_for(server).chat.completions.create(
                model="student", messages=[{"role": "user", "content": "word " * context}], max_tokens=4
            )
        assert refused.value.code == "context_length_exceeded"
    near = [{"role": "user", "content": "w" * (context - 40)}]
    resp = client_for(http).chat.completions.create(model="student", messages=near, max_tokens=500, temperature=0)
    assert resp.usage.total_tokens == context and resp.choices[0].finish_reason == "length"


def test_a_proxy_forwards_sampling_options_to_its_upstream(setup: tuple[Gateway, TestClient, BackendConfig]) -> None:
    """What the agent asked for (top_p, tool_choice, response_format, vLLM's top_k) reaches the server
    behind the proxy, which honors what it can: here top_p, so a one-token nucleus is greedy."""
    from training.gateway.engines import ProxyEngine

    gateway, _, _ = setup
    upstream = TestClient(gateway.app)
    forwarded: list[dict[str, object]] = []
    upstream.event_hooks["request"].append(
        lambda request: forwarded.append(json.loads(request.content)) if request.method == "POST" else None
    )
    proxy = TestClient(Gateway(ProxyEngine("http://testserver/v1", "student", http_client=upstream), gateway.store).app)
    messages = [{"role": "user", "content": "Write a number."}]
    greedy = client_for(proxy).chat.completions.create(model="student", messages=messages, max_tokens=8, temperature=0)
    nucleus = client_for(proxy).chat.completions.create(
        model="student",
        messages=messages,
        max_tokens=8,
        seed=5,
        top_p=1e-6,
        tool_choice="none",
        response_format={"type": "text"},
        extra_body={"top_k": 3},
    )
    assert nucleus.choices[0].message.content == greedy.choices[0].message.content
    sent = forwarded[-1]
    assert sent["top_p"] == 1e-6 and sent["tool_choice"] == "none" and sent["top_k"] == 3
    assert sent["response_format"] == {"type": "text"} and "top_p" not in forwarded[0]
    # An upstream that serves no such model is the proxy's fault, said as such.
    engine = ProxyEngine("http://testserver/v1", "student", upstream_model="gpt-9", http_client=upstream)
    misconfigured = TestClient(Gateway(engine, gateway.store).app)
    with pytest.raises(openai.InternalServerError, match="upstream policy server serves no checkpoint of it"):
        client_for(misconfigured).chat.completions.create(model="student", messages=messages, max_tokens=2)


def test_episode_route_refusals(setup: tuple[Gateway, TestClient, BackendConfig]) -> None:
    gateway, http, _ = setup
    body = {"model": "student", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    assert http.post("/episodes/ep_missing/v1/chat/completions", json=body).status_code == 404
    external = gateway.store.start_episode("the IDE's model acts here")
    assert http.post(f"/episodes/{external.id}/v1/chat/completions", json=body).status_code == 409
    # Its verified reward is rlide's run of the project's tests: no caller of this endpoint ends it.
    refused = http.post(f"/episodes/{external.id}/end", json={"outcome": "success", "reward": 1})
    assert refused.status_code == 409 and "end_episode" in refused.json()["error"]["message"]
    assert gateway.store.get_episode(external.id).status is EpisodeStatus.open
    policy = http.post("/episodes", json={"task": "t"}).json()["episode_id"]
    assert http.post(f"/episodes/{policy}/v1/chat/completions", json={**body, "n": 2}).status_code == 400
    assert http.post(f"/episodes/{policy}/v1/chat/completions", content=b"{nope", headers=JSON).status_code == 400
    assert http.post("/episodes", json={}).status_code == 400
    assert http.post(f"/episodes/{policy}/end", json={"outcome": "won"}).status_code == 400
    assert http.post(f"/episodes/{policy}/end", json={"outcome": "aborted"}).status_code == 200
    assert http.post(f"/episodes/{policy}/v1/chat/completions", json=body).status_code == 409


def test_proxy_engine_records_an_upstream_servers_tokens(setup: tuple[Gateway, TestClient, BackendConfig]) -> None:
    """A gateway in front of another OpenAI-compatible server (here: a cpu gateway standing in for ART's
    vLLM: it serves `student@{step}` and returns token ids). The proxy asks for the step the log
    committed, records the upstream's prompt and completion ids, and follows the upstream to the
    next committed step; an upstream a step ahead of the log (a crash) is refused with the fix."""
    from training.gateway.engines import ProxyEngine

    upstream, upstream_http, config = setup
    sent: list[dict[str, object]] = []
    upstream_http.event_hooks["request"].append(
        lambda request: sent.append(json.loads(request.content)) if request.method == "POST" else None
    )
    committed = lambda: upstream.store.runs.get_run("default").step if upstream.store.runs.list_runs() else None  # noqa: E731
    engine = ProxyEngine("http://testserver/v1", "student", http_client=upstream_http, committed=committed)
    proxy = Gateway(engine, upstream.store)
    http = TestClient(proxy.app)
    for i, reward in enumerate([1.0, 0.0]):
        episode_id = http.post("/episodes", json={"task": "Write a number."}).json()["episode_id"]
        resp = client_for(http, episode_id).chat.completions.create(
            model="student",
            messages=[{"role": "user", "content": "Write a number."}],
            max_tokens=6,
            seed=i,
            logprobs=True,
        )
        [turn] = proxy.store.turns.policy_turns(episode_id)
        assert turn.completion_token_ids == [int(t.token.split(":")[1]) for t in resp.choices[0].logprobs.content]
        assert turn.checkpoint_step == 0 and turn.model == "student@0" and sent[-1]["model"] == "student@0"
        assert sent[-1]["return_token_ids"] is True
        assert (
            turn.prompt_token_ids
            == upstream.engine.complete(  # type: ignore[attr-defined]
                [{"role": "user", "content": "Write a number."}], n=1, max_tokens=1, temperature=0, seed=0, tools=None
            ).prompt_token_ids
        )
        http.post(f"/episodes/{episode_id}/end", json={"outcome": "success"})
        proxy.store.add_reward(episode_id, RewardSource.tests, reward, "the test's verifier", verified=True)
    report = train(WorkerConfig(database_url=proxy.store.url, backend=config, scenarios=None, group_size=2), once=True)
    assert report.steps_trained == 1
    [record] = proxy.store.runs.training_steps("default")
    assert record.metrics["losses/max_logprob_drift"] < 1e-4
    assert proxy.engine.refresh() == 1  # the upstream now serves the new, committed checkpoint
    # A crash between saving step 2 and committing it: the upstream serves student@2, the log says 1.
    shutil.copytree(config.checkpoint_dir(1), config.checkpoint_dir(2))
    assert upstream.engine.refresh() == 2
    with pytest.raises(openai.InternalServerError, match=r"serves student@2, and the log's run is at step 1: restart"):
        client_for(http).models.list()


def test_a_turn_into_an_episode_ended_elsewhere_is_refused_and_not_recorded(
    setup: tuple[Gateway, TestClient, BackendConfig],
) -> None:
    """After its first turn the gateway reads nothing before sampling; the write itself refuses a
    turn into an episode that was ended meanwhile by another process (the MCP server)."""
    gateway, http, _ = setup
    episode_id = http.post("/episodes", json={"task": "t"}).json()["episode_id"]
    body = {"model": "student", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    assert http.post(f"/episodes/{episode_id}/v1/chat/completions", json=body).status_code == 200
    assert gateway.last_turns.get(episode_id) is not None
    other = EpisodeStore.open(gateway.store.url)
    other.end_episode(episode_id, EpisodeStatus.failure)
    other.close()
    refused = http.post(f"/episodes/{episode_id}/v1/chat/completions", json=body)
    assert refused.status_code == 409
    assert "has ended (failure)" in refused.json()["error"]["message"]
    assert len(gateway.store.turns.policy_turns(episode_id)) == 1
    assert gateway.last_turns.get(episode_id) is None


def test_a_turn_waits_for_another_writer_instead_of_failing(setup: tuple[Gateway, TestClient, BackendConfig]) -> None:
    """When another process holds the log's write lock, the turn is written once the lock is
    released (within `busy_timeout`), not dropped or failed."""
    gateway, http, _ = setup
    episode_id = http.post("/episodes", json={"task": "t"}).json()["episode_id"]
    body = {"model": "student", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
    assert isinstance(gateway.store.db, SQLiteDatabase)
    blocker = sqlite3.connect(gateway.store.db.path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.5, blocker.execute, ("COMMIT",))
    release.start()
    started = time.monotonic()
    resp = http.post(f"/episodes/{episode_id}/v1/chat/completions", json=body)
    waited = time.monotonic() - started
    release.join()
    blocker.close()
    assert resp.status_code == 200, resp.text
    assert waited >= 0.5  # it waited for the lock rather than giving up
    [turn] = gateway.store.turns.policy_turns(episode_id)
    assert turn.completion_token_ids is not None and len(turn.completion_token_ids) >= 1
