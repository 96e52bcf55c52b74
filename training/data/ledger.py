"""What a run trained on, so that an eval can check it never grades the model on its own lessons.

Every training step (SFT, GRPO, DPO) appends one JSON line per conversation it trained on to
`{model_dir}/trained_on.jsonl`:

    {"step": 3, "algorithm": "grpo", "task_id": "HumanEval/12", "user": ["<each user message's text>"]}

`task_id` is the scenario's id (or the episode's) when the caller knows it. The file lives next
to the checkpoints it describes, so it travels and is deleted with them. `trained_overlap` answers
`rlide eval`'s question: which of these tasks did the run see? The same task id, or the task's
prompt inside a trained user message (a scenario's message embeds the prompt among instructions),
compared with whitespace collapsed.

Durability: a step's lines are appended in one write, flushed and fsynced before `record_trained`
returns. A crash during the write leaves at most a torn last line without its newline: it was never
recorded (the call did not return), readers skip it, and the next append cuts it off first, so it
cannot glue itself to the next line. Any other line that does not read back is an error, not a
skip: a check that silently weakens would let an eval grade trained tasks.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

LEDGER_FILE = "trained_on.jsonl"


class LedgerError(RuntimeError):
    """The ledger has a line that does not read back as a trained conversation."""


class TrainedConversation(BaseModel):
    step: int
    algorithm: str
    task_id: str | None
    user: list[str]
    """The text of the conversation's user messages, in order."""


def record_trained(
    model_dir: Path, *, step: int, algorithm: str, items: Iterable[tuple[str | None, list[dict[str, Any]]]]
) -> None:
    """Append one line per (task id or None, chat messages) the run trained on at `step`, durably."""
    lines = "".join(  # one line each: JSON escapes the newlines inside strings
        TrainedConversation(
            step=step, algorithm=algorithm, task_id=task_id, user=_user_texts(messages)
        ).model_dump_json()
        + "\n"
        for task_id, messages in items
    )
    if not lines:
        return
    model_dir.mkdir(parents=True, exist_ok=True)
    path = model_dir / LEDGER_FILE
    created = not path.exists()
    with open(path, "a+b") as fh:
        _cut_torn_tail(fh)
        fh.write(lines.encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())
    if created:  # the new file's name is durable only once its directory is
        directory = os.open(model_dir, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def _user_texts(messages: list[dict[str, Any]]) -> list[str]:
    """The text of each user message: a string content, or its text parts joined (OpenAI's list form)."""
    texts = []
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if isinstance(content, str):
            texts.append(content)
    return texts


def _cut_torn_tail(fh: Any) -> None:
    """Truncate a last line left without its newline by a crash mid-append (never recorded)."""
    size = fh.seek(0, os.SEEK_END)
    if size == 0:
        return
    fh.seek(size - 1)
    if fh.read(1) == b"\n":
        return
    end = size
    while end > 0:  # back to just after the last newline
        start = max(0, end - 65536)
        fh.seek(start)
        chunk = fh.read(end - start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            fh.truncate(start + newline + 1)
            return
        end = start
    fh.truncate(0)


def read_trained(model_dir: Path) -> list[TrainedConversation]:
    """Every conversation the run at `model_dir` recorded (none if it recorded nothing)."""
    path = model_dir / LEDGER_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = data.split(b"\n")
    if not data.endswith(b"\n"):
        lines.pop()  # the torn tail of an append that did not return
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append(TrainedConversation.model_validate_json(line))
        except ValidationError as exc:
            raise LedgerError(f"{path} line {number} is not a trained conversation: {exc.errors()[0]['msg']}") from exc
    return out


def _normalized(text: str) -> str:
    return " ".join(text.split())


def trained_overlap(model_dir: Path, tasks: Sequence[tuple[str, str]]) -> list[str]:
    """The ids of the (task id, prompt) tasks the run at `model_dir` trained on, in the order given:
    a trained conversation with the same task id, or a trained user message containing the task's
    prompt (whitespace collapsed; an empty prompt matches by id only)."""
    trained = read_trained(model_dir)
    ids = {t.task_id for t in trained if t.task_id is not None}
    # One search through the distinct messages, NUL-separated so that a match does not span two of them.
    haystack = "\0".join({_normalized(text) for t in trained for text in t.user})
    overlap = []
    for task_id, prompt in tasks:
        needle = _normalized(prompt)
        if task_id in ids or (needle and needle in haystack):
            overlap.append(task_id)
    return overlap


__all__ = ["LEDGER_FILE", "LedgerError", "TrainedConversation", "read_trained", "record_trained", "trained_overlap"]
