"""Each export format on a real episode log built with EpisodeStore."""

from __future__ import annotations

import io
import json

import pytest

from episodes.records import EpisodeStatus, RewardSource, StateKind
from episodes.store import EpisodeStore
from tests.logdata import external_episode, policy_episode
from training.data.export import ExportError, dpo_pairs, dpo_records, export

pytest.importorskip("openai")  # policy turns are built from real `Choice` objects


@pytest.fixture
def log(store: EpisodeStore) -> EpisodeStore:
    external_episode(store, "make the config parser accept comments", 1.0)
    external_episode(store, "make the config parser accept comments", -1.0, status=EpisodeStatus.failure)
    external_episode(store, "make the config  parser accept comments", 0.5)  # same task, other spacing
    policy_episode(store, "fix the failing test", 1.0, seed=0.0)
    policy_episode(store, "fix the failing test", -1.0, seed=0.5)
    store.start_episode("still open")  # open episodes are never exported
    implicit = store.start_episode("(implicit) calls", implicit=True)
    store.end_episode(implicit.id, EpisodeStatus.success)
    return store


def run(store: EpisodeStore, fmt: str, min_reward: float | None = None, view: str = "trace") -> list[dict]:
    out = io.StringIO()
    n = export(store, fmt, min_reward, out, view=view)  # type: ignore[arg-type]
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert n == len(lines)
    return lines


def test_sft_keeps_successes_in_trl_tool_call_layout(log: EpisodeStore) -> None:
    records = run(log, "sft")
    assert len(records) == 3
    ext = next(r for r in records if r["messages"][0]["content"].startswith("make the config parser"))
    roles = [m["role"] for m in ext["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    call = ext["messages"][1]["tool_calls"][0]
    assert call["type"] == "function"
    assert call["function"] == {"name": "search_code", "arguments": {"query": "parse config"}}  # episode_id dropped
    assert ext["messages"][2]["tool_call_id"] == call["id"]
    assert {t["function"]["name"] for t in ext["tools"]} == {"search_code", "run_tests"}  # no bookkeeping tools
    # The server's own schemas (descriptions, required fields), not types guessed from the calls.
    search = next(t["function"] for t in ext["tools"] if t["function"]["name"] == "search_code")
    assert search["description"].startswith("Search the workspace's code")
    assert search["parameters"]["required"] == ["query"]
    assert "episode_id" not in search["parameters"]["properties"] and "k" in search["parameters"]["properties"]
    pol = next(r for r in records if r["messages"][1]["content"] == "fix the failing test")
    assert [m["role"] for m in pol["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert pol["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"path": "tests/"}
    assert pol["messages"][-1]["content"] == "fixed (0.0)"
    assert len(run(log, "sft", min_reward=0.8)) == 2
    assert len(run(log, "sft", min_reward=-1.0)) == 5


def test_the_answer_view_keeps_the_task_and_the_final_answer_only(log: EpisodeStore) -> None:
    # An external success whose agent never answered (tool calls, no summary): a trace, no answer.
    silent = log.start_episode("rename the loader", client="cursor")
    log.add_step(
        silent.id, tool="search_code", arguments={"query": "loader"}, result_summary="x", error=None, duration_ms=1
    )
    log.end_episode(silent.id, EpisodeStatus.success)
    log.add_reward(silent.id, RewardSource.tests, 1.0, verified=True)

    traces = run(log, "sft")
    answers = run(log, "sft", view="answer")
    assert len(traces) == 4 and len(answers) == 3
    assert not any(r["messages"][0]["content"] == "rename the loader" for r in answers)
    for record in answers:
        assert "tools" not in record
        assert [m["role"] for m in record["messages"]][-2:] == ["user", "assistant"]
        assert not record["messages"][-1].get("tool_calls")
        trace = next(t for t in traces if t["messages"][:-1][: len(record["messages"]) - 1] == record["messages"][:-1])
        assert record["messages"][-1] == trace["messages"][-1]  # the same final answer, nothing between
    ext = next(r for r in answers if r["messages"][0]["content"].startswith("make the config parser"))
    assert ext["messages"] == [
        {"role": "user", "content": "make the config parser accept comments"},
        {"role": "assistant", "content": "done: make the config parser accept comments (+1.0)"},
    ]
    assert len(run(log, "sft", min_reward=-1.0, view="answer")) == 5  # the reward filter is the same


DIFF = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
BLOCKS = "calc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE"


@pytest.mark.parametrize(
    ("summary", "answer"),
    [
        ("Fixed the sign in add.", f"Fixed the sign in add.\n\n```diff\n{DIFF}```"),  # prose: the diff is the change
        (BLOCKS, BLOCKS),  # the change in SEARCH/REPLACE blocks already: not written twice
        (f"```diff\n{DIFF}```", f"```diff\n{DIFF}```"),
    ],
)
def test_the_final_answer_states_the_change_once(store: EpisodeStore, summary: str, answer: str) -> None:
    episode = store.start_episode("fix add", workspace="/ws", client="cursor")
    store.add_workspace_state(
        episode.id, StateKind.end, commit="c0ffee", files={"calc.py": "x"}, omitted=[], diff=DIFF, solution=DIFF
    )
    store.end_episode(episode.id, EpisodeStatus.success, summary=summary)
    store.add_reward(episode.id, RewardSource.tests, 1.0, verified=True)
    [record] = run(store, "sft", view="answer")
    assert record["messages"] == [{"role": "user", "content": "fix add"}, {"role": "assistant", "content": answer}]


def test_a_view_other_than_trace_is_for_sft_only(log: EpisodeStore) -> None:
    for fmt in ("dpo", "art"):
        with pytest.raises(ExportError, match="sft format only"):
            run(log, fmt, view="answer")
    with pytest.raises(ExportError, match="unknown sft view 'diff'"):
        run(log, "sft", view="diff")


def test_sft_records_render_with_a_chat_template(log: EpisodeStore) -> None:
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    from training.backends.tiny import build_tokenizer

    tok = build_tokenizer()
    for record in run(log, "sft"):
        text = tok.apply_chat_template(record["messages"], tools=record.get("tools"), tokenize=False)
        assert "<tool_call>" in text


def test_dpo_pairs_episodes_of_the_same_task_by_reward(log: EpisodeStore) -> None:
    pairs = run(log, "dpo")
    assert len(pairs) == 4  # task A: 1>0.5, 1>-1, 0.5>-1; task B: 1>-1
    for pair in pairs:
        assert pair["score_chosen"] > pair["score_rejected"]
        assert pair["prompt"][-1]["role"] == "user"
        assert pair["chosen"][0]["role"] == "assistant" and pair["rejected"][0]["role"] == "assistant"
    assert len(run(log, "dpo", min_reward=0.8)) == 3
    assert all({t["function"]["name"] for t in pair["tools"]} >= {"search_code"} for pair in pairs[:3])
    wide = dpo_records(log, min_margin=0.6)  # 1 over 0.5 is too close to say which was better
    assert sorted((p["score_chosen"], p["score_rejected"]) for p in wide) == [(0.5, -1.0), (1.0, -1.0), (1.0, -1.0)]


def test_dpo_pairs_episodes_that_share_a_start_state_and_verifier_whatever_the_wording(store: EpisodeStore) -> None:
    def attempt(task: str, reward: float, bug: str, command: str = "python -m pytest -q") -> str:
        status = EpisodeStatus.success if reward > 0 else EpisodeStatus.failure
        episode = external_episode(store, task, reward, status=status)
        diff = f"--- a/parse.py\n+++ b/parse.py\n@@ -1 +1 @@\n-ok\n+{bug}\n"
        store.add_workspace_state(
            episode, StateKind.start, commit="c0ffee", files={"parse.py": bug}, omitted=[], diff=diff
        )
        store.set_verifier(episode, command, project=None, commit="c0ffee", environment=None)
        return episode

    fixed = attempt("fix the crash in parse", 1.0, "crash on empty")
    reworded = attempt("parse() crashes on empty input, fix it", -1.0, "crash on empty")
    attempt("fix the crash in parse", -1.0, "crash on None")  # the same words, another bug
    attempt("fix the crash in parse", -1.0, "crash on empty", "python -m pytest -q -k parse")  # another verifier
    pairs = dpo_pairs(store)
    assert [(p.chosen, p.rejected) for p in pairs] == [(fixed, reworded)]
    assert pairs[0].record["prompt"][-1]["content"] == "fix the crash in parse"
    assert sorted(len(r["trajectories"]) for r in run(store, "art")) == [1, 1, 2]


def test_art_groups_round_trip_to_real_choices(log: EpisodeStore) -> None:
    from openai.types.chat.chat_completion import Choice

    records = run(log, "art")
    assert len(records) == 2
    assert sorted(len(r["trajectories"]) for r in records) == [2, 3]
    assert run(log, "art", min_reward=1.5) == []
    pytest.importorskip("art")
    from training.data.export import load_art_groups

    out = io.StringIO()
    export(log, "art", None, out)
    groups = load_art_groups(io.StringIO(out.getvalue()))
    policy = next(g for g in groups if len(g.trajectories) == 2)
    choices = [x for t in policy.trajectories for x in t.messages_and_choices if isinstance(x, Choice)]
    assert len(choices) == 4
    assert sorted(t.reward for t in policy.trajectories) == [-1.0, 1.0]
    assert {c.logprobs.content[0].logprob for c in choices} >= {-0.5, -1.0, -0.125}


def test_unknown_format_is_refused(log: EpisodeStore) -> None:
    with pytest.raises(ExportError, match="sft, dpo, art"):
        export(log, "csv", None, io.StringIO())
