"""A policy turn is stored as what it adds to an earlier turn of its episode, and reads back whole."""

from __future__ import annotations

import json
from typing import Any

import pytest

from episodes.db import StoreError
from episodes.policy_turns import EncodedTurn, TurnPrefix, common_prefix_length
from episodes.records import EpisodeSource, EpisodeStatus
from episodes.redaction import redact
from episodes.run_records import PolicyTurn, TurnContext
from episodes.store import EpisodeStore

KEY = "sk-" + "q" * 32
TOOLS = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": {"type": "object"}}} for i in range(20)]


def choice(text: str) -> dict[str, Any]:
    return {"__choice__": {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None}}


def agent_session() -> list[tuple[dict[str, Any], list[int], list[int]]]:
    """(request, prompt ids, completion ids) of an agent's turns: each resends the conversation
    plus its answer and a new message, then it starts over, then edits an earlier message."""
    turns = []
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You code."}, {"role": "user", "content": KEY}]
    prompt = [1, 2, 3, 4]
    for n in range(5):
        completion = [100 + n, 101 + n]
        turns.append(({"messages": list(messages), "tools": TOOLS, "params": {"seed": n}}, list(prompt), completion))
        messages += [{"role": "assistant", "content": f"answer {n}"}, {"role": "tool", "content": f"ran {n} {KEY}"}]
        prompt = [*prompt, *completion, 7, 8, n]
    restart = [{"role": "system", "content": "You code."}, {"role": "user", "content": "another task"}]
    turns.append(({"messages": restart, "tools": None, "params": {"seed": 9}}, [1, 2, 9], [5]))
    edited = [*restart, {"role": "assistant", "content": "answer 5"}, {"role": "user", "content": "more"}]
    turns.append(({"messages": edited, "tools": None, "params": {"seed": 10}}, [1, 2, 9, 5, 6], [7]))
    compacted = [restart[0], {"role": "user", "content": "summary of the above"}, edited[-1]]
    turns.append(({"messages": compacted, "tools": None, "params": {"seed": 11}}, [1, 2, 11], [8]))
    return turns


def record(store: EpisodeStore, episode_id: str, *, after: str | None) -> list[int]:
    """The agent session recorded turn after turn. `after`: None stores each turn whole; "memory"
    continues from the context the last turn left (a gateway's `LastTurns`); "log" reads it back
    from the log before every turn (a gateway restarted between any two turns)."""
    context = store.turns.turn_context(episode_id)
    ids = []
    for request, prompt, completion in agent_session():
        turn = EncodedTurn.of(
            model="m@0",
            request=request,
            choice=choice("ok"),
            prompt_token_ids=prompt,
            completion_token_ids=completion,
            after=None if after is None else context,
        )
        ids.append(store.turns.add_policy_turn(episode_id, turn, open_policy_only=True))
        context = turn.context(ids[-1]) if after == "memory" else store.turns.turn_context(episode_id)
    return ids


def stored_rows(store: EpisodeStore, episode_id: str) -> list[tuple[Any, ...]]:
    with store.db.transaction(write=False) as cur:
        return list(
            cur.execute(
                "SELECT prefix_turn_id, prefix_messages, prefix_tokens, request, prompt_token_ids FROM policy_turns"
                " WHERE episode_id = ? ORDER BY id",
                (episode_id,),
            ).fetchall()
        )


def comparable(turns: list[PolicyTurn]) -> list[tuple[Any, ...]]:
    return [(t.request, t.choice, t.prompt_token_ids, t.completion_token_ids, t.model) for t in turns]


@pytest.mark.parametrize("after", ["memory", "log"])
def test_an_agent_session_is_stored_once_and_reads_back_whole(any_store: EpisodeStore, after: str) -> None:
    store = any_store
    whole = store.start_episode("t", source=EpisodeSource.policy)
    chained = store.start_episode("t", source=EpisodeSource.policy)
    record(store, whole.id, after=None)
    ids = record(store, chained.id, after=after)

    expected = [(redact(r), choice("ok"), p, c, "m@0") for r, p, c in agent_session()]
    assert comparable(store.turns.policy_turns(whole.id)) == expected
    assert comparable(store.turns.policy_turns(chained.id)) == expected

    rows = stored_rows(store, chained.id)
    prefixes = [(r[0], r[1], r[2]) for r in rows]
    assert prefixes == [
        (None, 0, 0),
        *[(ids[n], 2 + 2 * n, 4 + 5 * n + 2) for n in range(4)],  # the conversation, answer included
        (ids[4], 1, 2),  # a new task: the system message and the first prompt ids
        (ids[5], 2, 4),  # continues it
        (ids[6], 1, 2),  # an earlier message edited: only the shared head is left out
    ]
    previous_tools: Any = "none yet"
    for row, (request, prompt, _) in zip(rows, agent_session(), strict=True):
        stored = json.loads(row[3])
        assert stored["messages"] == redact(request["messages"][row[1] :])
        assert ("tools" in stored) == (request["tools"] != previous_tools)
        previous_tools = request["tools"]
        assert json.loads(row[4]) == prompt[row[2] :]
        assert KEY not in row[3]
    # The log grows with what each turn adds: the fifth turn's row is no larger than the second's.
    assert len(rows[4][3]) + len(rows[4][4]) <= len(rows[1][3]) + len(rows[1][4]) + 4
    assert sum(len(r[3]) for r in rows) < sum(len(r[3]) for r in stored_rows(store, whole.id)) / 3


def test_a_turn_after_a_stale_context_names_the_turn_it_extends(any_store: EpisodeStore) -> None:
    """Two gateways serving one conversation: the second records a turn the first has not seen,
    then the first records one that extends its own (now older) last turn."""
    store = any_store
    episode = store.start_episode("t", source=EpisodeSource.policy)

    def turn(said: list[str], answer: str, prompt: list[int], after: TurnContext | None) -> EncodedTurn:
        messages = [{"role": ("user", "assistant")[i % 2], "content": text} for i, text in enumerate(said)]
        return EncodedTurn.of(
            model="m",
            request={"messages": messages},
            choice=choice(answer),
            prompt_token_ids=prompt,
            completion_token_ids=[prompt[-1] + 1],
            after=after,
        )

    first = turn(["a"], "b", [1, 2], None)
    first_id = store.turns.add_policy_turn(episode.id, first)
    seen_by_one = first.context(first_id)
    store.turns.add_policy_turn(episode.id, turn(["a", "x"], "y", [1, 2, 3, 4], store.turns.turn_context(episode.id)))
    late = turn(["a", "b"], "c", [1, 2, 3, 6], seen_by_one)
    store.turns.add_policy_turn(episode.id, late)
    assert late.prefix == TurnPrefix(first_id, 1, 3)
    turns = store.turns.policy_turns(episode.id)
    assert [t.prompt_token_ids for t in turns] == [[1, 2], [1, 2, 3, 4], [1, 2, 3, 6]]
    assert turns[2].request["messages"][1] == {"role": "assistant", "content": "b"}
    assert store.turns.turn_context(episode.id).last_prompt_token_ids == [1, 2, 3, 6]


def test_a_turn_whose_prefix_is_not_in_its_episode_is_a_clear_error(store: EpisodeStore) -> None:
    episode = store.start_episode("t", source=EpisodeSource.policy)
    ids = record(store, episode.id, after="memory")
    with store.db.transaction(write=True) as cur:
        cur.execute("UPDATE policy_turns SET prefix_turn_id = ? WHERE id = ?", (ids[-1] + 100, ids[2]))
    with pytest.raises(StoreError, match=f"policy turn {ids[2]} .* extends turn {ids[-1] + 100}"):
        store.turns.policy_turns(episode.id)


def test_no_prefix_without_a_previous_turn_with_token_ids() -> None:
    request = {"messages": [{"role": "user", "content": "a"}], "tools": None}
    without_ids = TurnContext(EpisodeSource.policy, EpisodeStatus.open)  # its last turn had no token ids
    assert TurnPrefix.between(None, request, [1]) == (None, request, [1])
    assert TurnPrefix.between(without_ids, request, [1]) == (None, request, [1])


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [([], [], 0), ([1, 2, 3], [1, 2, 3], 3), ([1, 2, 3], [1, 2], 2), ([1, 2, 3], [1, 9, 3], 1), ([5], [6], 0)],
)
def test_common_prefix_length(a: list[int], b: list[int], expected: int) -> None:
    assert common_prefix_length(a, b) == expected == common_prefix_length(b, a)


def test_common_prefix_length_agrees_with_a_plain_loop_on_long_lists() -> None:
    base = list(range(5000))
    for cut in (0, 1, 2499, 4998, 4999):
        other = [*base[:cut], -1, *base[cut + 1 :]]
        assert common_prefix_length(base, other) == cut
