"""Episode logs filled the way the server and the gateway fill them (shared by the episode-log and training tests)."""

from __future__ import annotations

from typing import Any

from episodes.policy_turns import EncodedTurn
from episodes.records import EpisodeSource, EpisodeStatus, RewardSource, StateKind
from episodes.store import EpisodeStore


def make_choice(
    content: str | None, token_ids: list[int], logprobs: list[float], *, tool_call: dict[str, Any] | None = None
) -> Any:
    from openai.types.chat.chat_completion import Choice, ChoiceLogprobs
    from openai.types.chat.chat_completion_message import ChatCompletionMessage
    from openai.types.chat.chat_completion_token_logprob import ChatCompletionTokenLogprob

    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_call is not None:
        message["tool_calls"] = [tool_call]
    return Choice(
        finish_reason="tool_calls" if tool_call else "stop",
        index=0,
        message=ChatCompletionMessage.model_validate(message),
        logprobs=ChoiceLogprobs(
            content=[
                ChatCompletionTokenLogprob(token=f"token_id:{t}", logprob=lp, bytes=[65], top_logprobs=[])
                for t, lp in zip(token_ids, logprobs, strict=True)
            ]
        ),
    )


def external_episode(
    store: EpisodeStore, task: str, reward: float, *, status: EpisodeStatus = EpisodeStatus.success
) -> str:
    ep = store.start_episode(task, workspace="/ws", client="cursor")
    store.add_step(
        ep.id, tool="start_episode", arguments={"task": task}, result_summary="ok", error=None, duration_ms=1
    )
    store.add_step(
        ep.id,
        tool="search_code",
        arguments={"query": "parse config", "episode_id": ep.id},
        result_summary="config.py:12 def parse",
        error=None,
        duration_ms=3.5,
    )
    store.add_step(
        ep.id,
        tool="run_tests",
        arguments={"path": "tests/", "verbose": True},
        result_summary=None,
        error="1 failed" if reward < 0 else None,
        duration_ms=900,
    )
    store.end_episode(ep.id, status, summary=f"done: {task} ({reward:+})")
    # What rlide's own run of the project's tests on the end state records: the episode's evidence.
    store.add_reward(ep.id, RewardSource.tests, reward, "measured on the end state", verified=True)
    return ep.id


def replayable(store: EpisodeStore, episode_id: str, *, commit: str = "c0ffee", workspace: str = "/ws") -> None:
    """Give an episode what the MCP server records for a replay (no run here): a start state at
    `commit` with the bug as an uncommitted edit, and the project's verifier established from it."""
    store.add_workspace_state(
        episode_id, StateKind.start, commit=commit, files={"calc.py": "def add(a, b):\n    return a - b\n"},
        omitted=[], diff="",
    )  # fmt: skip
    store.set_verifier(episode_id, "python -m pytest", project={}, commit=commit, environment=None)
    store.establish_verifier(
        episode_id, {"tests/test_calc.py::test_add"}, set(), {"tests/test_calc.py": None}, {"source": "tests"}
    )


def policy_episode(
    store: EpisodeStore,
    task: str,
    reward: float,
    *,
    seed: float = 0.0,
    checkpoint_step: int = 3,
    model: str = "student",
) -> str:
    """A two-turn episode through the policy endpoint: a tool call, its result, then an answer;
    `model`: the recorded model, as the endpoint of a run names it (`student-RUN@{step}`)."""
    from episodes.codec import encode_choice

    ep = store.start_episode(task, source=EpisodeSource.policy, client="gateway")
    first = make_choice(
        None,
        [11, 12, 13],
        [-0.5 - seed, -0.25, -1e-7],
        tool_call={
            "id": "call_1",
            "type": "function",
            "function": {"name": "run_tests", "arguments": '{"path": "tests/"}'},
        },
    )
    request1 = {
        "messages": [{"role": "system", "content": "You fix code."}, {"role": "user", "content": task}],
        "tools": [{"type": "function", "function": {"name": "run_tests", "parameters": {"type": "object"}}}],
    }
    store.turns.add_policy_turn(
        ep.id,
        EncodedTurn.of(
            model=model,
            request=request1,
            choice=encode_choice(first),
            checkpoint_step=checkpoint_step,
            prompt_token_ids=[1, 2, 3],
            completion_token_ids=[11, 12, 13],
        ),
    )
    second = make_choice(f"fixed ({seed})", [21, 22], [-0.125 - seed, -2.0])
    request2 = {
        "messages": [
            *request1["messages"],
            {"role": "assistant", "content": None, "tool_calls": [first.message.tool_calls[0].model_dump()]},
            {"role": "tool", "tool_call_id": "call_1", "content": "2 passed"},
        ],
        "tools": request1["tools"],
    }
    store.turns.add_policy_turn(
        ep.id,
        EncodedTurn.of(
            model=model,
            request=request2,
            choice=encode_choice(second),
            checkpoint_step=checkpoint_step,
            completion_token_ids=[21, 22],
        ),
    )
    store.end_episode(ep.id, EpisodeStatus.success if reward > 0 else EpisodeStatus.failure)
    store.add_reward(ep.id, RewardSource.tests, reward, verified=True)  # as rlide's own verifier records it
    return ep.id


class CannedEngine:
    """A real `PolicyEngine` (no torch): every completion is the same scripted answer, split into
    `pieces` (one token each, ids `token_ids`), with per-token logprobs and bytes the way the cpu
    engine reports them. It remembers each call's messages and prior turn."""

    model_id = "student"

    def __init__(
        self,
        pieces: list[str] | None = None,
        *,
        token_ids: list[int] | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
        prompt_token_ids: list[int] | None = None,
        context_length: int | None = 32768,
    ) -> None:
        self.pieces = pieces or ["4", "2"]
        self.context_length = context_length
        self.token_ids = token_ids or [100 + i for i in range(len(self.pieces))]
        self.logprobs = [-0.5 / (i + 1) - 1e-9 * i for i in range(len(self.pieces))]
        self.tool_calls = tool_calls
        self.prompt_token_ids = prompt_token_ids or [1, 2, 3]
        self.calls: list[tuple[list[dict[str, Any]], Any]] = []
        self.max_tokens: list[int] = []
        self.stops: list[list[str] | None] = []
        self.options: list[dict[str, Any]] = []  # top_p and the forwarded options of each call

    @property
    def checkpoint_step(self) -> int:
        return 0

    def refresh(self) -> int:
        return 0

    def at_step(self, step: int) -> CannedEngine | None:
        return self if step == 0 else None

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        n: int,
        max_tokens: int,
        temperature: float,
        seed: int | None,
        tools: list[dict[str, Any]] | None,
        prior: Any = None,
        stop: list[str] | None = None,
        top_p: float = 1.0,
        options: dict[str, Any] | None = None,
    ) -> Any:
        from training.gateway.engines import Completion

        self.calls.append((messages, prior))
        self.max_tokens.append(max_tokens)
        self.stops.append(stop)
        self.options.append({"top_p": top_p, **(options or {})})
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.pieces)}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        logprobs = [
            {"token": f"token_id:{t}", "logprob": lp, "bytes": list(piece.encode()), "top_logprobs": []}
            for t, lp, piece in zip(self.token_ids, self.logprobs, self.pieces, strict=True)
        ]
        choice = {
            "index": 0,
            "finish_reason": "tool_calls" if self.tool_calls else "stop",
            "message": message,
            "logprobs": {"content": logprobs, "refusal": None},
        }
        return Completion(
            choices=[{**choice, "index": i} for i in range(n)],
            prompt_token_ids=list(self.prompt_token_ids),
            completion_token_ids=[list(self.token_ids) for _ in range(n)],
            checkpoint_step=0,
        )
