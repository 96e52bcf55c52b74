"""The LLM judge (ART's RULER via litellm), run offline through litellm's own mock responses."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("art", reason="the training extra is not installed")
pytest.importorskip("openai")

from episodes.codec import encode_item  # noqa: E402
from tests.logdata import make_choice  # noqa: E402
from training.data.groups import Group, Trajectory, filter_groups  # noqa: E402
from training.data.judge import JudgeConfig, judge_group  # noqa: E402


def _trajectory(answer: str, reward: float) -> Trajectory:
    items = [
        {"role": "system", "content": "Answer with a number."},
        {"role": "user", "content": "What is 6 * 7?"},
        encode_item(make_choice(answer, [1, 2], [-0.5, -0.25])),
    ]
    return Trajectory(messages_and_choices=items, reward=reward, policy_step=0)


def _verdict(*scores: float) -> str:
    return json.dumps(
        {
            "scores": [
                {"trajectory_id": str(i + 1), "explanation": f"#{i + 1}", "score": s} for i, s in enumerate(scores)
            ]
        }
    )


def test_the_judge_gives_a_tied_group_a_learning_signal() -> None:
    group = Group("g1", [_trajectory("42", 1.0), _trajectory("forty-two, I think", 1.0)])
    assert filter_groups([group], current_step=0, max_staleness=2).zero_variance == 1  # the verifier ties them

    judge = JudgeConfig("openai/gpt-4o-mini", weight=0.5, extra_litellm_params={"mock_response": _verdict(0.9, 0.4)})
    judged = judge_group(group, judge)

    assert [t.reward for t in judged.trajectories] == pytest.approx([0.5 * 1 + 0.5 * 0.8, 0.5 * 1 + 0.5 * -0.2])
    assert [t.metadata["judge_score"] for t in judged.trajectories] == [0.9, 0.4]
    assert [t.metadata["verifier_reward"] for t in judged.trajectories] == [1.0, 1.0]
    assert judged.metadata["judge"] == "openai/gpt-4o-mini"
    assert filter_groups([judged], current_step=0, max_staleness=2).kept == [judged]
    assert [t.reward for t in group.trajectories] == [1.0, 1.0]  # the input group is untouched


def test_a_failing_judge_leaves_the_verifier_rewards() -> None:
    group = Group("g2", [_trajectory("42", 1.0), _trajectory("41", -1.0)])
    judged = judge_group(group, JudgeConfig("openai/gpt-4o-mini", extra_litellm_params={"mock_response": "not json"}))
    assert [t.reward for t in judged.trajectories] == [1.0, -1.0]
    assert "judge_error" in judged.metadata


def test_a_judge_weight_outside_the_unit_interval_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        JudgeConfig("openai/gpt-4o-mini", weight=1.5)
