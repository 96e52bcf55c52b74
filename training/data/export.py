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

`fit` (a `training.data.fit.StudentFit`: the student's tokenizer, chat template and max_seq_len):
sft and dpo records are condensed to it (`training.data.condense`: tool results and user messages
cut, the assistant's turns never), both views and both formats alike; what does not fit even then
is set aside with its reason. The `*_selection` functions return what was set aside, counted by
reason (`SetAside`), so a caller can say why nothing trained.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Literal, TextIO

from episodes.codec import CHOICE_TAG, as_message
from episodes.preferences import situation_key
from episodes.records import Episode, EpisodeSource, Preference
from episodes.store import EpisodeStore
from training.data.condense import fit_messages
from training.data.conversations import external_conversation, policy_conversation
from training.data.fit import Selection, SetAsideReason, StudentFit, Unusable
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


def _sft(conv: _Conversation, view: SftView, fit: StudentFit | None) -> dict[str, Any] | Unusable:
    if view == "answer":
        answer = conv.answer
        if answer is None:
            return Unusable(SetAsideReason.no_conversation, "no final answer to imitate (no summary or diff recorded)")
        messages, tools = [*conv.prompt, answer], None
    else:
        messages, tools = conv.prompt + conv.completion, conv.tools or None
    if fit is not None:
        fitted = fit_messages(messages, tools, fit)
        if fitted.messages is None:
            detail = f"episode {conv.episode.id}: {fitted.reason}"
            return Unusable.too_long(detail, fitted.original_tokens, fit.max_tokens)
        messages = fitted.messages
    return {"messages": messages, **({"tools": tools} if tools else {})}


def sft_example(
    store: EpisodeStore, episode: Episode, view: SftView = "trace", fit: StudentFit | None = None
) -> dict[str, Any] | Unusable:
    """The `sft` record of one ended episode (no reward filter), condensed to `fit`, or why it
    cannot be imitated; what the worker's SFT steps train on."""
    conv = _conversation(store, episode)
    if conv is None:
        return Unusable(SetAsideReason.no_conversation, "no conversation to imitate (no tool calls or answer recorded)")
    return _sft(conv, view, fit)


def sft_selection(
    store: EpisodeStore, min_reward: float | None = None, view: SftView = "trace", fit: StudentFit | None = None
) -> Selection[dict[str, Any]]:
    selection: Selection[dict[str, Any]] = Selection([])
    for conv in _conversations(store):
        if conv.reward is None or (conv.reward < min_reward if min_reward is not None else conv.reward <= 0):
            continue
        record = _sft(conv, view, fit)
        if isinstance(record, Unusable):
            selection.set_aside.add(record.reason, record.detail)
        else:
            selection.items.append(record)
    return selection


def sft_records(
    store: EpisodeStore, min_reward: float | None = None, view: SftView = "trace", fit: StudentFit | None = None
) -> list[dict[str, Any]]:
    return sft_selection(store, min_reward, view, fit).items


@dataclass(frozen=True)
class PreferencePair:
    chosen: str
    """The better episode's id."""
    rejected: str
    record: dict[str, Any]
    """Its `dpo` record."""


def _common_prompt(chosen: _Conversation, rejected: _Conversation) -> bool:
    """One prompt both answers answer: the same messages (whitespace aside), or, for two episodes
    of the IDE's model, each prompt being the task alone (they are of one situation, so one job
    in other words: the chosen side's words are the prompt)."""

    def words(prompt: list[dict[str, Any]]) -> list[tuple[Any, str]]:
        return [(m.get("role"), " ".join(str(m.get("content") or "").split())) for m in prompt]

    if words(chosen.prompt) == words(rejected.prompt):
        return True
    return all(c.episode.source is EpisodeSource.external and len(c.prompt) == 1 for c in (chosen, rejected))


def _pair_record(
    chosen: _Conversation, rejected: _Conversation, fit: StudentFit | None, **extra: Any
) -> dict[str, Any] | Unusable:
    """The `dpo` record of a pair, each side condensed to `fit` after the shared prompt."""
    if not _common_prompt(chosen, rejected):
        return Unusable(
            SetAsideReason.no_common_prompt,
            f"{chosen.episode.id} and {rejected.episode.id} start from different prompts"
            f" ({len(chosen.prompt)} and {len(rejected.prompt)} messages): DPO compares two answers to one prompt",
        )
    tools = {t["function"]["name"]: t for t in [*chosen.tools, *rejected.tools]}
    listed = list(tools.values()) or None
    sides = []
    for conv in (chosen, rejected):
        completion = conv.completion
        if fit is not None:
            fitted = fit_messages(chosen.prompt + completion, listed, fit, frozen=len(chosen.prompt))
            if fitted.messages is None:
                detail = f"episode {conv.episode.id}: {fitted.reason}"
                return Unusable.too_long(detail, fitted.original_tokens, fit.max_tokens)
            completion = fitted.messages[len(chosen.prompt) :]
        sides.append(completion)
    return {
        "prompt": chosen.prompt,
        "chosen": sides[0],
        "rejected": sides[1],
        "score_chosen": chosen.reward,
        "score_rejected": rejected.reward,
        **extra,
        **({"tools": listed} if listed else {}),
    }


def _trainable_conversation(store: EpisodeStore, episode: Episode) -> _Conversation | Unusable:
    """The episode's conversation as training reads it (`terminal_episodes`' filter), or why not."""
    if episode.excluded:
        return Unusable(SetAsideReason.no_conversation, f"episode {episode.id} is excluded from training")
    if not episode.status.is_terminal:
        return Unusable(SetAsideReason.no_conversation, f"episode {episode.id} is still open")
    if not store.train_unverified and (not episode.verified or episode.flags):
        why = "has a monitor flag no person cleared" if episode.flags else "has no verified reward (tests or a rating)"
        return Unusable(SetAsideReason.unverified_reward, f"episode {episode.id} {why}: training leaves it out")
    conv = _conversation(store, episode)
    if conv is None:
        return Unusable(SetAsideReason.no_conversation, f"episode {episode.id} has no conversation to learn from")
    return conv


def _human_pair(
    store: EpisodeStore, preference: Preference, by_id: dict[str, _Conversation], fit: StudentFit | None
) -> PreferencePair | Unusable:
    order = preference.chosen_rejected
    if order is None:
        return Unusable(SetAsideReason.no_order, "'both bad' names no better episode: DPO needs one")
    for episode_id in order:
        if episode_id not in by_id:
            conv = _trainable_conversation(store, store.get_episode(episode_id))
            if isinstance(conv, Unusable):
                return conv
            by_id = {**by_id, episode_id: conv}
    human = {"source": "human", "author": preference.author, "preference_id": preference.id}
    record = _pair_record(by_id[order[0]], by_id[order[1]], fit, preference=human)
    return record if isinstance(record, Unusable) else PreferencePair(order[0], order[1], record)


def preference_problem(store: EpisodeStore, episode_a: str, episode_b: str, fit: StudentFit | None) -> Unusable | None:
    """Why the standing preference between two episodes cannot train (on `fit`'s student), or None
    when its pair trains: what the dashboard says when a preference is recorded."""
    preference = store.preferences.standing().get(frozenset((episode_a, episode_b)))
    if preference is None:
        return Unusable(SetAsideReason.no_conversation, "no standing preference between these episodes")
    pair = _human_pair(store, preference, {}, fit)
    return pair if isinstance(pair, Unusable) else None


def dpo_selection(
    store: EpisodeStore,
    min_reward: float | None = None,
    min_margin: float = MIN_MARGIN,
    fit: StudentFit | None = None,
) -> Selection[PreferencePair]:
    """Human preferences first (`episodes.preferences`: the latest verdict of each compared pair, with
    its author; no reward filter, the person decided), then pairs of comparable episodes
    (`situation_key`: one start state and verifier, else one task) whose rewards differ by
    `min_margin` or more, the better first, at most MAX_PAIRS_PER_TASK per situation, leaving out
    any pair a person judged (their verdict, "both bad" included, stands over the rewards); each
    condensed to `fit`. What `dpo` exports and the worker's DPO steps use."""
    convs = _conversations(store)
    by_id = {c.episode.id: c for c in convs}
    judged = store.preferences.standing()
    selection: Selection[PreferencePair] = Selection([])
    for preference in judged.values():
        pair = _human_pair(store, preference, by_id, fit)
        if isinstance(pair, Unusable):
            selection.set_aside.add(pair.reason, pair.detail)
        else:
            selection.items.append(pair)
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
                record = _pair_record(chosen, rejected, fit)
                if isinstance(record, Unusable):
                    selection.set_aside.add(record.reason, record.detail)
                    continue
                selection.items.append(PreferencePair(chosen.episode.id, rejected.episode.id, record))
                per_task += 1
    return selection


def dpo_pairs(
    store: EpisodeStore, min_reward: float | None = None, min_margin: float = MIN_MARGIN, fit: StudentFit | None = None
) -> list[PreferencePair]:
    return dpo_selection(store, min_reward, min_margin, fit).items


def dpo_records(
    store: EpisodeStore, min_reward: float | None = None, min_margin: float = MIN_MARGIN, fit: StudentFit | None = None
) -> list[dict[str, Any]]:
    return [pair.record for pair in dpo_pairs(store, min_reward, min_margin, fit)]


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


def export(
    store: EpisodeStore,
    fmt: str,
    min_reward: float | None,
    out: TextIO,
    *,
    view: SftView = "trace",
    fit: StudentFit | None = None,
) -> int:
    """Write `fmt` records as JSON lines to `out` (sft and dpo condensed to `fit`); return how many
    were written.

    Wired as `rlide episodes export --format sft|dpo|art [--min-reward R] [--view trace|answer] [-o FILE]`.
    """
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if view not in SFT_VIEWS:
        raise ExportError(f"unknown sft view {view!r}: choose one of {', '.join(SFT_VIEWS)}")
    if view != "trace" and fmt != "sft":
        raise ExportError(f"--view {view} applies to the sft format only, not {fmt}")
    if fmt == "sft":
        records = sft_records(store, min_reward, view, fit)
    elif fmt == "dpo":
        records = dpo_records(store, min_reward, fit=fit)
    else:
        records = art_records(store, min_reward)
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
