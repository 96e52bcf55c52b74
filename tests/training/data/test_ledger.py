"""The ledger of what a run trained on: appended durably, read back strictly, matched by id or prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.data.ledger import LEDGER_FILE, LedgerError, read_trained, record_trained, trained_overlap

PROMPT = 'def add(a, b):\n    """Return a + b."""\n'


def test_each_trained_conversation_is_one_line_with_its_user_texts(tmp_path: Path) -> None:
    model_dir = tmp_path / "models" / "student"  # created on the first record
    assert read_trained(model_dir) == [] and trained_overlap(model_dir, [("t", PROMPT)]) == []
    record_trained(
        model_dir,
        step=2,
        algorithm="sft",
        items=[
            ("episode/ep_1", [{"role": "system", "content": "s"}, {"role": "user", "content": "line\none"}]),
            (None, [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]),
        ],
    )
    record_trained(model_dir, step=3, algorithm="grpo", items=[])  # nothing trained: nothing written
    lines = (model_dir / LEDGER_FILE).read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [
        {"step": 2, "algorithm": "sft", "task_id": "episode/ep_1", "user": ["line\none"]},
        {"step": 2, "algorithm": "sft", "task_id": None, "user": ["a\nb"]},
    ]


def test_overlap_is_by_task_id_or_by_the_prompt_inside_a_user_message(tmp_path: Path) -> None:
    wrapped = "Complete this:\n\n" + PROMPT.replace("    ", "\t") + "\nin a python block"
    record_trained(tmp_path, step=1, algorithm="grpo", items=[("HumanEval/7", [{"role": "user", "content": wrapped}])])
    tasks = [("HumanEval/7", "something else"), ("mine/add", PROMPT), ("mine/sub", PROMPT.replace("+", "-"))]
    assert trained_overlap(tmp_path, tasks) == ["HumanEval/7", "mine/add"]
    assert trained_overlap(tmp_path, [("mine/blank", "  \n")]) == []  # an empty prompt matches by id only


def test_a_torn_last_line_was_never_recorded_and_is_cut_before_the_next_append(tmp_path: Path) -> None:
    record_trained(tmp_path, step=1, algorithm="sft", items=[("a", [{"role": "user", "content": "one"}])])
    with open(tmp_path / LEDGER_FILE, "ab") as fh:  # what a crash in the middle of an append leaves
        fh.write(b'{"step": 2, "algorithm": "sft", "task_id": "b", "us')
    assert [t.task_id for t in read_trained(tmp_path)] == ["a"]
    record_trained(tmp_path, step=2, algorithm="sft", items=[("c", [{"role": "user", "content": "two"}])])
    assert [t.task_id for t in read_trained(tmp_path)] == ["a", "c"]
    assert (tmp_path / LEDGER_FILE).read_bytes().count(b"\n") == 2


def test_a_damaged_line_inside_the_ledger_is_an_error_not_a_skip(tmp_path: Path) -> None:
    record_trained(tmp_path, step=1, algorithm="sft", items=[("a", [{"role": "user", "content": "one"}])])
    with open(tmp_path / LEDGER_FILE, "ab") as fh:
        fh.write(b'{"step": "two"}\n')
    with pytest.raises(LedgerError, match="line 2 is not a trained conversation"):
        trained_overlap(tmp_path, [("a", "one")])
