"""`Choice` objects with logprobs survive storage exactly; a plain pydantic round-trip does not."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("openai")

from openai.types.chat.chat_completion import Choice  # noqa: E402

from episodes import codec  # noqa: E402
from episodes.store import EpisodeStore  # noqa: E402
from tests.logdata import make_choice, policy_episode  # noqa: E402

ODD_LOGPROBS = [-0.1, -1 / 3, -2.220446049250313e-16, -123.456789012345678]


def test_pydantic_round_trip_loses_choices_and_the_codec_keeps_them() -> None:
    art_trajectories = pytest.importorskip("art.trajectories")
    choice = make_choice("x = 1", [5, 6, 7, 8], ODD_LOGPROBS)
    traj = art_trajectories.Trajectory(messages_and_choices=[{"role": "user", "content": "hi"}, choice], reward=1.0)
    assert isinstance(traj.messages_and_choices[1], Choice)
    naive = art_trajectories.Trajectory.model_validate_json(traj.model_dump_json())
    assert not isinstance(naive.messages_and_choices[1], Choice)  # the trap this codec exists for

    restored = codec.loads(codec.dumps(traj.messages_and_choices))
    assert restored[0] == {"role": "user", "content": "hi"}
    assert isinstance(restored[1], Choice)
    assert restored[1] == choice
    assert [t.logprob for t in restored[1].logprobs.content] == ODD_LOGPROBS  # bit-exact floats
    assert [t.token for t in restored[1].logprobs.content] == [f"token_id:{i}" for i in (5, 6, 7, 8)]


def test_choices_survive_the_episode_log(store: EpisodeStore) -> None:
    episode_id = policy_episode(store, "fix the parser", 1.0, seed=1 / 7)
    turns = store.turns.policy_turns(episode_id)
    assert [t.checkpoint_step for t in turns] == [3, 3]
    assert turns[0].completion_token_ids == [11, 12, 13]
    restored = codec.decode_choice(turns[1].choice)
    assert isinstance(restored, Choice)
    assert restored.logprobs.content[0].logprob == -0.125 - 1 / 7
    first = codec.decode_choice(turns[0].choice)
    assert first.message.tool_calls[0].function.name == "run_tests"


def test_codec_rejects_what_it_cannot_store() -> None:
    with pytest.raises(codec.CodecError):
        codec.encode_item({"content": "no role"})
    with pytest.raises(codec.CodecError):
        codec.decode_choice({"role": "user"})
    with pytest.raises(codec.CodecError):
        codec.loads(json.dumps({"not": "a list"}))
