"""Training data out of the episode log: SFT chat sets, DPO preference pairs, ART trajectory groups.

    sft  {"messages": [...], "tools": [...]}                 TRL SFTTrainer's conversational layout;
                                                            tool calls as {"type": "function",
                                                            "function": {"name", "arguments": {dict}}};
                                                            view `answer`: the task and the final
                                                            answer only, {"messages": [user, assistant]}
    dpo  {"prompt": [...], "chosen": [...], "rejected": [...], "tools"}  TRL DPOTrainer's conversational
                                                            layout, pairs of comparable episodes (one
                                                            start state and verifier, else one task)
                                                            whose rewards differ by MIN_MARGIN or more,
                                                            after the pairs people chose (`preference`)
    art  {"trajectories": [{"messages_and_choices", "tools", "reward", "metadata"}], "metadata"}
                                                            one line per situation (as dpo pairs them);
                                                            policy turns keep their
                                                            `Choice` (codec-tagged, logprobs exact);
                                                            tool-call arguments as JSON strings (OpenAI)

Conversations are rebuilt from episodes by `training.data.conversations`.

`min_reward`: sft keeps episodes whose reward total is >= it (default: > 0, i.e. successes);
dpo requires it of the chosen side; art keeps task groups whose best episode reaches it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Literal, TextIO

from episodes.codec import CHOICE_TAG, as_message
from episodes.preferences import situation_key
from episodes.records import Episode, EpisodeSource
from episodes.store import EpisodeStore
from training.data.conversations import external_conversation, policy_conversation
from training.data.groups import Group, Trajectory, to_art

Format = Literal["sft", "dpo", "art"]
FORMATS: tuple[str, ...] = ("sft", "dpo", "art")
SftView = Literal["trace", "answer"]
SFT_VIEWS: tuple[str, ...] = ("trace", "answer")
"""What an `sft` record of an episode holds. `trace`: the whole conversation, every tool call and
result (a student that will act as an agent with these tools). `answer`: the task and the episode's
final answer (its summary and the diff of its verified work): a student that answers directly
learns what the work was without imitating calls it will not make, at a tenth of the tokens."""

MAX_PAIRS_PER_TASK = 16
MIN_MARGIN = 0.5
"""The least reward gap between a DPO pair's chosen and rejected episodes: two rewards closer than
that (on [-1, 1]) say little about which episode was better."""


class ExportError(ValueError):
    pass


# -- conversations ---------------------------------------------------------------------------------


def _split_prompt(items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Leading non-assistant messages are the prompt; the rest (from the first choice) the completion."""
    for i, item in enumerate(items):
        if CHOICE_TAG in item or item.get("role") == "assistant":
            return items[:i], items[i:]
    return items, []


def _sft_message(item: dict[str, Any]) -> dict[str, Any]:
    """A chat message in TRL's layout: choices become assistant turns, tool-call arguments dicts."""
    msg = dict(as_message(item))
    if msg.get("tool_calls"):
        calls = []
        for call in msg["tool_calls"]:
            fn = dict(call.get("function") or {})
            if isinstance(fn.get("arguments"), str):
                try:
                    fn["arguments"] = json.loads(fn["arguments"])
                except json.JSONDecodeError:
                    fn["arguments"] = {"_raw": fn["arguments"]}
            calls.append({"id": call.get("id"), "type": "function", "function": fn})
        msg["tool_calls"] = calls
        msg["content"] = msg.get("content") or ""
    elif msg.get("role") == "assistant" and msg.get("content") is None:
        msg["content"] = ""
    return msg


class _Conversation:
    """One episode as prompt + completion in both layouts the exporters need."""

    def __init__(self, store: EpisodeStore, episode: Episode) -> None:
        self.episode = episode
        self.reward = episode.reward_total
        turns = store.turns.policy_turns(episode.id) if episode.source is EpisodeSource.policy else []
        if turns:
            items, tools, _ = policy_conversation(turns)
            self.prompt_items, self.completion_items = _split_prompt(items)
            self.tools = tools or []
        else:
            detail = store.detail(episode.id)
            self.prompt_items, self.completion_items, self.tools = external_conversation(detail, arguments_as="json")
        self.prompt = [_sft_message(m) for m in self.prompt_items]
        self.completion = [_sft_message(m) for m in self.completion_items]

    @property
    def usable(self) -> bool:
        return bool(self.prompt) and bool(self.completion)

    @property
    def answer(self) -> dict[str, Any] | None:
        """The final assistant message when it is an answer (text, not a tool call)."""
        last = self.completion[-1] if self.completion else None
        if last is None or last.get("role") != "assistant" or last.get("tool_calls") or not last.get("content"):
            return None
        return last


def _conversation(store: EpisodeStore, episode: Episode) -> _Conversation | None:
    """The episode's conversation, or None when there is nothing to learn from (an implicit
    episode, an empty task, no prompt or no completion)."""
    if episode.implicit or not episode.task.strip():
        return None
    conv = _Conversation(store, episode)
    return conv if conv.usable else None


def _conversations(store: EpisodeStore) -> list[_Conversation]:
    return [c for c in (_conversation(store, e) for e in store.terminal_episodes()) if c is not None]


def _by_situation(store: EpisodeStore, convs: list[_Conversation]) -> dict[str, list[_Conversation]]:
    """Rewarded conversations grouped by `_situation`; only the pairing exporters pay its queries."""
    groups: dict[str, list[_Conversation]] = defaultdict(list)
    for conv in convs:
        if conv.reward is not None:
            groups[situation_key(store, conv.episode)].append(conv)
    return groups


# -- records ---------------------------------------------------------------------------------------


def _sft(conv: _Conversation, view: SftView) -> dict[str, Any] | None:
    if view == "answer":
        answer = conv.answer
        return None if answer is None else {"messages": [*conv.prompt, answer]}
    record: dict[str, Any] = {"messages": conv.prompt + conv.completion}
    if conv.tools:
        record["tools"] = conv.tools
    return record


def sft_record(store: EpisodeStore, episode: Episode, view: SftView = "trace") -> dict[str, Any] | None:
    """The `sft` record of one ended episode (no reward filter), or None when it has nothing to
    imitate in that view; what the worker's SFT steps train on."""
    conv = _conversation(store, episode)
    return None if conv is None else _sft(conv, view)


def sft_records(store: EpisodeStore, min_reward: float | None = None, view: SftView = "trace") -> list[dict[str, Any]]:
    records = []
    for conv in _conversations(store):
        if conv.reward is None or (conv.reward < min_reward if min_reward is not None else conv.reward <= 0):
            continue
        record = _sft(conv, view)
        if record is not None:
            records.append(record)
    return records


@dataclass(frozen=True)
class PreferencePair:
    chosen: str
    """The better episode's id."""
    rejected: str
    record: dict[str, Any]
    """Its `dpo` record."""


def _pair_record(chosen: _Conversation, rejected: _Conversation, **extra: Any) -> dict[str, Any]:
    tools = {t["function"]["name"]: t for t in [*chosen.tools, *rejected.tools]}
    return {
        "prompt": chosen.prompt,
        "chosen": chosen.completion,
        "rejected": rejected.completion,
        "score_chosen": chosen.reward,
        "score_rejected": rejected.reward,
        **extra,
        **({"tools": list(tools.values())} if tools else {}),
    }


def dpo_pairs(
    store: EpisodeStore, min_reward: float | None = None, min_margin: float = MIN_MARGIN
) -> list[PreferencePair]:
    """Human preferences first (`episodes.preferences`: the latest verdict of each compared pair, with
    its author; no reward filter, the person decided), then pairs of comparable episodes
    (`situation_key`: one start state and verifier, else one task) whose rewards differ by
    `min_margin` or more, the better first, at most MAX_PAIRS_PER_TASK per situation, leaving out
    any pair a person judged (their verdict, "both bad" included, stands over the rewards). What
    `dpo` exports and the worker's DPO steps use."""
    convs = _conversations(store)
    by_id = {c.episode.id: c for c in convs}
    judged = store.preferences.standing()
    pairs = []
    for preference in judged.values():
        order = preference.chosen_rejected
        if order is None or order[0] not in by_id or order[1] not in by_id:
            continue
        human = {"source": "human", "author": preference.author, "preference_id": preference.id}
        pairs.append(PreferencePair(*order, _pair_record(by_id[order[0]], by_id[order[1]], preference=human)))
    for group in _by_situation(store, convs).values():
        ranked = sorted(group, key=lambda c: (-(c.reward or 0.0), c.episode.created_at))
        per_task = 0
        for i, chosen in enumerate(ranked):
            assert chosen.reward is not None
            if min_reward is not None and chosen.reward < min_reward:
                break
            for rejected in ranked[i + 1 :]:
                assert rejected.reward is not None
                if chosen.reward - rejected.reward < min_margin or per_task >= MAX_PAIRS_PER_TASK:
                    continue
                if frozenset((chosen.episode.id, rejected.episode.id)) in judged:
                    continue
                pairs.append(PreferencePair(chosen.episode.id, rejected.episode.id, _pair_record(chosen, rejected)))
                per_task += 1
    return pairs


def dpo_records(
    store: EpisodeStore, min_reward: float | None = None, min_margin: float = MIN_MARGIN
) -> list[dict[str, Any]]:
    return [pair.record for pair in dpo_pairs(store, min_reward, min_margin)]


def art_records(store: EpisodeStore, min_reward: float | None = None) -> list[dict[str, Any]]:
    records = []
    for convs in _by_situation(store, _conversations(store)).values():
        if min_reward is not None and max(c.reward or 0.0 for c in convs) < min_reward:
            continue
        records.append(
            {
                "trajectories": [
                    {
                        "messages_and_choices": c.prompt_items + c.completion_items,
                        "tools": c.tools or None,
                        "reward": c.reward,
                        "metadata": {"episode_id": c.episode.id, "source": c.episode.source.value},
                    }
                    for c in convs
                ],
                "metadata": {"task": " ".join(convs[0].episode.task.split())[:500]},
            }
        )
    return records


def export(store: EpisodeStore, fmt: str, min_reward: float | None, out: TextIO, *, view: SftView = "trace") -> int:
    """Write `fmt` records as JSON lines to `out`; return how many were written.

    Wired as `rlide episodes export --format sft|dpo|art [--min-reward R] [--view trace|answer] [-o FILE]`.
    """
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if view not in SFT_VIEWS:
        raise ExportError(f"unknown sft view {view!r}: choose one of {', '.join(SFT_VIEWS)}")
    if view != "trace" and fmt != "sft":
        raise ExportError(f"--view {view} applies to the sft format only, not {fmt}")
    if fmt == "sft":
        records = sft_records(store, min_reward, view)
    else:
        records = {"dpo": dpo_records, "art": art_records}[fmt](store, min_reward)
    for record in records:
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return len(records)


def load_art_groups(lines: TextIO) -> list[Any]:
    """Read `art` export lines back as ART `TrajectoryGroup`s with real `Choice`s (imports ART)."""
    groups = []
    for n, line in enumerate(lines):
        if not line.strip():
            continue
        data = json.loads(line)
        groups.append(
            Group(
                key=f"file:{n}",
                trajectories=[
                    Trajectory(
                        messages_and_choices=t["messages_and_choices"],
                        reward=float(t["reward"]),
                        tools=t.get("tools"),
                        metadata=t.get("metadata") or {},
                    )
                    for t in data["trajectories"]
                ],
                metadata=data.get("metadata") or {},
            )
        )
    return to_art(groups)
