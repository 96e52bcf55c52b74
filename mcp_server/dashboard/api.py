"""The dashboard's JSON API: what the page reads and every action it takes.

Each action calls the same `EpisodeStore` method as the CLI and the Python API (`rlide episodes
rate|relabel|exclude|include|delete|prefer`), so it is recorded in the log's curation history like
any other change. Bad input gets 400 with `{"error": ...}` saying what to send (413 for a body too
large, 415 for one not sent as `application/json`: `common.json_body`), and changes nothing; an
unknown episode gets 404. The store is only touched on worker threads: the event loop keeps
answering while SQLite reads.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import unquote_to_bytes

import anyio
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from common.json_body import JsonBodyError, read_json
from episodes.codec import CHOICE_TAG
from episodes.db import EpisodeNotFound, StoreError
from episodes.records import EpisodeSource, EpisodeStatus, EvalRecord, Verdict
from episodes.rows import EpisodeQuery
from episodes.run_records import PolicyTurn
from episodes.store import EpisodeStore

if TYPE_CHECKING:
    from training.data.fit import StudentFit

PAGE_MAX = 200
FOLD_CHARS = 2_000
"""A step's result or arguments longer than this come folded: the page asks for the rest."""
DIFF_MAX_CHARS = 200_000
TOKENS_MAX = 4_000
MAX_BODY_BYTES = 256 * 1024
"""Largest action body read: the longest is a rating or a deletion with a 4,000-character comment."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


B = TypeVar("B", bound=_Body)


class RateBody(_Body):
    value: float = Field(ge=-1.0, le=1.0)
    comment: str | None = Field(None, max_length=4_000)
    author: str = Field(min_length=1, max_length=200)


class RelabelBody(_Body):
    status: Literal["success", "failure", "aborted"]
    note: str | None = Field(None, max_length=4_000)


class ExcludeBody(_Body):
    excluded: bool
    reason: str | None = Field(None, max_length=4_000)


class ClearFlagsBody(_Body):
    author: str = Field(min_length=1, max_length=200)
    comment: str | None = Field(None, max_length=4_000)


class DeleteBody(_Body):
    confirm: str = Field(description="The episode's id again: a deletion cannot be undone.")
    reason: str | None = Field(None, max_length=4_000)


class PreferBody(_Body):
    a: str
    b: str
    verdict: Verdict
    author: str = Field(min_length=1, max_length=200)
    comment: str | None = Field(None, max_length=4_000)


class PreferencesParams(_Body):
    episode: str | None = Field(None, max_length=200)


class ListParams(_Body):
    status: EpisodeStatus | None = None
    source: EpisodeSource | None = None
    min_reward: float | None = Field(None, ge=-1.0, le=1.0)
    max_reward: float | None = Field(None, ge=-1.0, le=1.0)
    q: str | None = Field(None, max_length=500)
    since: datetime | None = None
    until: datetime | None = None
    excluded: bool | None = None
    limit: int = Field(50, ge=1, le=PAGE_MAX)
    offset: int = Field(0, ge=0, le=10_000_000)

    def query(self) -> EpisodeQuery:
        return EpisodeQuery(
            status=self.status,
            source=self.source,
            min_reward=self.min_reward,
            max_reward=self.max_reward,
            text=self.q or None,
            since=self.since,
            until=self.until,
            excluded=self.excluded,
        )


class BadRequest(Exception):
    pass


@dataclass(frozen=True)
class Call:
    """One API request as a handler sees it: path parameters, query string, JSON body (None on GET)."""

    path: dict[str, Any]
    query: dict[str, str]
    body: Any = None

    def parse(self, model: type[B]) -> B:
        if not isinstance(self.body, dict):
            raise BadRequest("send a JSON object as the request body (Content-Type: application/json)")
        return model.model_validate(self.body)


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _fold(text: str | None) -> dict[str, Any]:
    if text is None:
        return {"text": None, "chars": 0, "folded": False}
    return {"text": text[:FOLD_CHARS], "chars": len(text), "folded": len(text) > FOLD_CHARS}


def _query_problem(request: Request) -> str | None:
    """Why the query string cannot be read as one value per parameter (None: it can). Starlette
    decodes invalid UTF-8 into U+FFFD, and keeps only the last of a repeated parameter."""
    try:
        unquote_to_bytes(request.scope["query_string"].replace(b"+", b" ")).decode()
    except UnicodeDecodeError:
        return "the query string is not valid UTF-8 once %-decoded"
    twice = sorted({k for k in request.query_params if len(request.query_params.getlist(k)) > 1})
    return f"the query names {', '.join(twice)} more than once: send each parameter once" if twice else None


def _endpoint(handler: Callable[[Call], Any]) -> Callable[[Request], Awaitable[Response]]:
    """`handler` run on a worker thread; its errors become 400/404/409 JSON."""

    async def endpoint(request: Request) -> Response:
        body = None
        if request.method in ("POST", "DELETE"):
            try:
                body = await read_json(request, MAX_BODY_BYTES)
            except JsonBodyError as exc:
                return _error(exc.status, str(exc))
        refused = _query_problem(request)
        if refused is not None:
            return _error(400, refused)
        call = Call(dict(request.path_params), {k: v for k, v in request.query_params.items() if v != ""}, body)
        try:
            result = await anyio.to_thread.run_sync(handler, call)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
            return _error(400, problems)
        except (BadRequest, ValueError) as exc:
            return _error(400, str(exc))
        except EpisodeNotFound as exc:
            return _error(404, str(exc))
        except StoreError as exc:
            return _error(409, str(exc))
        return JSONResponse(result)

    return endpoint


class DashboardApi:
    """The API over one episode log; `memory_dir` is where the code indexes live; `student` the
    base model training trains (the `training_base_model` setting) and `max_seq_len` its limit
    (None: the model's context, capped as a run that names none is), against which a recorded
    preference is checked."""

    def __init__(
        self,
        store: EpisodeStore,
        memory_dir: Path,
        log_url: str,
        *,
        student: str | None = None,
        max_seq_len: int | None = None,
    ) -> None:
        self.store = store
        self.memory_dir = memory_dir
        self.log_url = log_url
        self.student = student
        self.max_seq_len = max_seq_len
        self._fit: StudentFit | None = None

    def routes(self) -> list[Route]:
        e = _endpoint
        return [
            Route("/api/whoami", e(self.whoami)),
            Route("/api/episodes", e(self.list_episodes)),
            Route("/api/episodes/count", e(self.count_episodes)),
            Route("/api/episodes/{episode_id}", e(self.episode), methods=["GET"]),
            Route("/api/episodes/{episode_id}", e(self.delete), methods=["DELETE"]),
            Route("/api/episodes/{episode_id}/steps/{step_id:int}", e(self.step)),
            Route("/api/episodes/{episode_id}/comparable", e(self.comparable)),
            Route("/api/episodes/{episode_id}/rate", e(self.rate), methods=["POST"]),
            Route("/api/episodes/{episode_id}/relabel", e(self.relabel), methods=["POST"]),
            Route("/api/episodes/{episode_id}/exclude", e(self.exclude), methods=["POST"]),
            Route("/api/episodes/{episode_id}/clear-flags", e(self.clear_flags), methods=["POST"]),
            Route("/api/preferences", e(self.preferences), methods=["GET"]),
            Route("/api/preferences", e(self.prefer), methods=["POST"]),
            Route("/api/training", e(self.training)),
            Route("/api/training/{run}", e(self.training_run)),
            Route("/api/index", e(self.index)),
        ]

    # -- episodes ------------------------------------------------------------------------------------

    def whoami(self, call: Call) -> dict[str, Any]:
        return {"author": getpass.getuser(), "log": self.log_url}

    def list_episodes(self, call: Call) -> dict[str, Any]:
        params = ListParams.model_validate(call.query)
        page = self.store.list_episodes(params.query(), limit=params.limit + 1, offset=params.offset)
        return {
            "episodes": [e.model_dump(mode="json") for e in page[: params.limit]],
            "limit": params.limit,
            "offset": params.offset,
            "has_more": len(page) > params.limit,
        }

    def count_episodes(self, call: Call) -> dict[str, Any]:
        return {"count": self.store.count_episodes(ListParams.model_validate(call.query).query())}

    def episode(self, call: Call) -> dict[str, Any]:
        episode_id = call.path["episode_id"]
        detail = self.store.detail(episode_id)
        steps = [
            {
                "id": s.id,
                "tool": s.tool,
                "arguments": _fold(json.dumps(s.arguments, indent=1, ensure_ascii=False)),
                "result": _fold(s.result),
                "error": s.error,
                "duration_ms": s.duration_ms,
                "created_at": s.created_at.isoformat(),
            }
            for s in detail.steps
        ]
        states = [
            {"kind": st.kind.value, "commit": st.commit, "diff": st.diff[:DIFF_MAX_CHARS], "omitted": st.omitted,
             "created_at": st.created_at.isoformat()}
            for st in self.store.workspace_states(episode_id)
        ]  # fmt: skip
        verifier = detail.verifier.model_dump(mode="json", exclude={"trusted_files"}) if detail.verifier else None
        return {
            "episode": detail.episode.model_dump(mode="json"),
            "steps": steps,
            "rewards": [r.model_dump(mode="json") for r in detail.rewards],
            "verifier": verifier,
            "flags": [f.model_dump(mode="json") for f in detail.flags],
            "solution": None if detail.solution is None else detail.solution[:DIFF_MAX_CHARS],
            "states": states,
            "turns": [_turn(t) for t in self.store.turns.policy_turns(episode_id)],
            "history": [c.model_dump(mode="json") for c in self.store.curation_log(episode_id)],
            "preferences": [p.model_dump(mode="json") for p in self.store.preferences.list(episode_id)],
        }

    def step(self, call: Call) -> dict[str, Any]:
        detail = self.store.detail(call.path["episode_id"])
        found = next((s for s in detail.steps if s.id == call.path["step_id"]), None)
        if found is None:
            raise BadRequest(f"episode {detail.episode.id} has no step {call.path['step_id']}")
        return {"id": found.id, "arguments": found.arguments, "result": found.result, "error": found.error}

    def comparable(self, call: Call) -> dict[str, Any]:
        """Other ended episodes of the same task (the candidates to compare with), newest first."""
        episode = self.store.get_episode(call.path["episode_id"])
        others = [e for e in self.store.same_task(episode.id, limit=50) if e.status.is_terminal]
        return {"episodes": [e.model_dump(mode="json") for e in others]}

    # -- actions -------------------------------------------------------------------------------------

    def rate(self, call: Call) -> dict[str, Any]:
        body = call.parse(RateBody)
        self.store.rate_episode(call.path["episode_id"], body.value, body.comment, author=body.author)
        return self.store.get_episode(call.path["episode_id"]).model_dump(mode="json")

    def relabel(self, call: Call) -> dict[str, Any]:
        body = call.parse(RelabelBody)
        return self.store.relabel_episode(call.path["episode_id"], EpisodeStatus(body.status), body.note).model_dump(
            mode="json"
        )

    def exclude(self, call: Call) -> dict[str, Any]:
        body = call.parse(ExcludeBody)
        episode = self.store.exclude_episode(call.path["episode_id"], excluded=body.excluded, reason=body.reason)
        return episode.model_dump(mode="json")

    def clear_flags(self, call: Call) -> dict[str, Any]:
        """A person read the flagged change: the episode may be trained on (its reward stays what it is)."""
        body = call.parse(ClearFlagsBody)
        self.store.clear_flags(call.path["episode_id"], author=body.author, comment=body.comment)
        return self.store.get_episode(call.path["episode_id"]).model_dump(mode="json")

    def delete(self, call: Call) -> dict[str, Any]:
        body = call.parse(DeleteBody)
        episode_id = call.path["episode_id"]
        if body.confirm != episode_id:
            raise BadRequest(f"to delete {episode_id}, send its id again as `confirm`")
        self.store.delete_episode(episode_id, body.reason)
        return {"deleted": episode_id}

    def preferences(self, call: Call) -> dict[str, Any]:
        episode_id = PreferencesParams.model_validate(call.query).episode
        return {"preferences": [p.model_dump(mode="json") for p in self.store.preferences.list(episode_id)]}

    def prefer(self, call: Call) -> dict[str, Any]:
        """Record the preference, and say whether its pair trains on the student, and if not why."""
        body = call.parse(PreferBody)
        preference = self.store.preferences.prefer(
            body.a, body.b, body.verdict, author=body.author, comment=body.comment
        )
        return preference.model_dump(mode="json") | {"training": self._pair_training(body.a, body.b)}

    def _pair_training(self, a: str, b: str) -> dict[str, Any]:
        """{"trainable": true|false|null, "reason": why not (or why it was not checked), "kind"}."""
        from training.data.export import preference_problem
        from training.data.fit import FitError, student_fit

        if self.student is None:
            return {"trainable": None, "kind": None, "reason": "not checked: no student model is configured"}
        try:
            if self._fit is None:
                self._fit = student_fit(self.student, self.max_seq_len)
            problem = preference_problem(self.store, a, b, self._fit)
        except FitError as exc:
            return {"trainable": None, "kind": None, "reason": f"not checked against the student: {exc}"}
        if problem is None:
            return {"trainable": True, "kind": None, "reason": None}
        return {"trainable": False, "kind": problem.reason.value, "reason": problem.detail}

    # -- training and index --------------------------------------------------------------------------

    def training(self, call: Call) -> dict[str, Any]:
        from training.worker.status import honest_state

        runs = []
        for run in self.store.runs.list_runs():
            state, message, _ = honest_state(run)  # a killed worker's run is not listed as training
            runs.append(run.model_copy(update={"state": state, "message": message}).model_dump(mode="json"))
        return {
            "runs": runs,
            "evals": [_eval(e) for e in self.store.runs.evals()],
        }

    def training_run(self, call: Call) -> dict[str, Any]:
        from training.worker.status import read_status, step_algorithm

        name = call.path["run"]
        status = read_status(self.store, name)
        steps = [
            {"step": s.step, "algorithm": step_algorithm(s.metrics), "reward_mean": s.reward_mean,
             "reward_std": s.reward_std, "groups_trained": s.groups_trained,
             "groups_skipped_zero_variance": s.groups_skipped_zero_variance,
             "groups_skipped_stale": s.groups_skipped_stale, "metrics": s.metrics,
             "created_at": s.created_at.isoformat()}
            for s in self.store.runs.training_steps(name, limit=100_000)
        ]  # fmt: skip
        return {
            "status": status.model_dump(mode="json"),
            "steps": steps,
            "evals": [_eval(e) for e in self.store.runs.evals(name)],
        }

    def index(self, call: Call) -> dict[str, Any]:
        from memory.catalog import indexed_workspaces

        return {"workspaces": [asdict(s) for s in indexed_workspaces(self.memory_dir)]}


def _eval(record: EvalRecord) -> dict[str, Any]:
    return record.model_dump(mode="json", exclude={"report"}) | {"ci95": record.report.get("ci95")}


def _turn(turn: PolicyTurn) -> dict[str, Any]:
    """A policy turn as the page shows it: the answer, and each sampled token with its logprob."""
    choice = turn.choice.get(CHOICE_TAG, turn.choice)
    content = ((choice.get("logprobs") or {}).get("content")) or []
    tokens = [{"token": t.get("token", ""), "logprob": t.get("logprob")} for t in content[:TOKENS_MAX]]
    return {
        "id": turn.id,
        "model": turn.model,
        "checkpoint_step": turn.checkpoint_step,
        "message": choice.get("message"),
        "finish_reason": choice.get("finish_reason"),
        "tokens": tokens,
        "tokens_total": len(content),
        "created_at": turn.created_at.isoformat(),
    }
