"""Episodes longer than the student's context are condensed, not dropped: on real pytest output, on
two attempts recorded through a real MCP session, counted with the real Qwen2.5-Coder tokenizer."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from episodes.records import Verdict
from episodes.store import EpisodeStore
from tests.training.data.recorded import (
    FAILING,
    NEEDS_BWRAP,
    NEEDS_QWEN,
    Attempts,
    have_bwrap,
    qwen_folder,
    record_attempts,
)
from training.data.condense import condense_file_read, condense_search, condense_test_output, fit_messages
from training.data.export import dpo_selection, sft_example, sft_selection
from training.data.fit import SetAsideReason, StudentFit, Unusable

LIMIT = 2048
"""Half of Qwen's default 4,096: the honest fix recorded below is about 4,600 tokens as it happened."""

LIBRARY = """import pytest


@pytest.mark.parametrize("n", range(150))
def test_ok(n):
    assert n >= 0


def chunk(xs, n):
    return [xs[i : i + n] for i in range(0, len(xs) - 1, n)]


def test_chunk_keeps_the_last():
    assert chunk([1, 2, 3], 2) == [[1, 2], [3]]
"""


def real_pytest(tmp_path: Path, *args: str) -> str:
    (tmp_path / "test_lib.py").write_text(LIBRARY)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *args, "test_lib.py"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:]
    return done.stdout


@pytest.mark.parametrize("args", [(), ("-v",)], ids=["dots", "verbose"])
def test_real_pytest_output_keeps_failures_tracebacks_and_summary(tmp_path: Path, args: tuple[str, ...]) -> None:
    output = real_pytest(tmp_path, *args)
    condensed = condense_test_output(output)
    assert len(condensed) < len(output)
    assert "FAILED test_lib.py::test_chunk_keeps_the_last" in condensed  # the failing test id
    assert ">       assert chunk([1, 2, 3], 2) == [[1, 2], [3]]" in condensed  # its traceback
    assert re.search(r"^E\s+(AssertionError: )?assert \[\[1, 2\]\] == \[\[1, 2\], \[3\]\]", condensed, re.M)
    assert re.search(r"^=+ 1 failed, 150 passed in [\d.]+s =+$", condensed, re.M)  # the summary line
    assert "PASSED" not in condensed and not re.search(r"^test_lib\.py \.+", condensed, re.M)  # no progress
    assert re.match(r"\[\.\.\. \d+ progress, passing-test and header lines cut\]", condensed)
    assert condense_test_output(condensed) == condensed  # nothing left to cut: the same text


def test_search_results_keep_the_hits_the_agent_opened() -> None:
    results = "\n\n".join(
        [
            "3 results for 'chunk' (hybrid)",
            "1. chunks/__init__.py:4-6  chunked  (relevance 0.91)\n```python\ndef chunked(items, size):\n```",
            "2. docs/usage.md:1-9  [doc]  (relevance 0.40)\n```markdown\n# Chunks\n```",
            "3. tests/test_chunks.py:10-12  test_the_last_chunk_is_kept  [test]  (relevance 0.30)\n```python\n```",
        ]
    )
    later = (
        '{"path": "chunks/__init__.py", "old": "len(items) - 1"}\n--- a/chunks/__init__.py\n+++ b/chunks/__init__.py'
    )
    condensed = condense_search(results, later)
    assert condensed.startswith("3 results for 'chunk' (hybrid)")
    assert "1. chunks/__init__.py:4-6" in condensed
    assert "docs/usage.md" not in condensed and "tests/test_chunks.py" not in condensed
    assert condensed.endswith("[... 2 hits cut: their files were not opened later]")
    grep = "chunks/__init__.py:6:    return [items[i : i + size]\nsetup.py:3:name='chunks'\nREADME.md:1:# chunks"
    assert condense_search(grep, later).split("\n") == [
        "chunks/__init__.py:6:    return [items[i : i + size]", "[... 2 hits cut: their files were not opened later]"
    ]  # fmt: skip


def test_a_long_file_read_keeps_the_region_later_edited() -> None:
    body = [f"def helper_{n}(x):\n    return x * {n} + {n}\n" for n in range(60)]
    body.insert(
        30, "def chunked(items, size):\n    return [items[i : i + size] for i in range(0, len(items) - 1, size)]\n"
    )
    lines = "".join(body).split("\n")
    numbered = "\n".join(f"{n:>4}\t{line}" for n, line in enumerate(lines, start=1))  # as `cat -n` reads it
    diff = (
        "--- a/chunks.py\n+++ b/chunks.py\n@@ -61,2 +61,2 @@\n def chunked(items, size):\n"
        "-    return [items[i : i + size] for i in range(0, len(items) - 1, size)]\n"
        "+    return [items[i : i + size] for i in range(0, len(items), size)]\n"
    )
    condensed = condense_file_read(numbered, diff).split("\n")
    edited = next(n for n, line in enumerate(lines) if "len(items) - 1" in line)
    kept = [line for line in condensed if not line.startswith("[...")]
    assert kept == numbered.split("\n")[edited - 1 - 3 : edited + 1 + 3]  # the edit, its def and 3 lines around
    assert condensed[0] == f"[... lines 1-{edited - 4} cut: not edited or cited later]"
    assert condensed[-1] == f"[... lines {edited + 5}-{len(lines)} cut: not edited or cited later]"


# -- two attempts recorded through MCP, counted with the student's tokenizer -------------------------


@pytest.fixture(scope="module")
def attempts(tmp_path_factory: pytest.TempPathFactory) -> Attempts:
    if not have_bwrap():
        pytest.skip(NEEDS_BWRAP)
    return record_attempts(tmp_path_factory.mktemp("attempts"))


@pytest.fixture
def log(attempts: Attempts) -> Iterator[EpisodeStore]:
    store = EpisodeStore.open(attempts.settings.episode_db_url, attempts.settings.weights)
    yield store
    store.close()


@pytest.fixture(scope="module")
def qwen() -> Path:
    folder = qwen_folder()
    if folder is None:
        pytest.skip(NEEDS_QWEN)
    return folder


def fit_of(qwen: Path, limit: int = LIMIT) -> StudentFit:
    return StudentFit.of_folder(qwen, limit, model="qwen")


def assistant_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages if m["role"] == "assistant"]


def test_the_counter_is_the_trainers_count(attempts: Attempts, log: EpisodeStore, qwen: Path) -> None:
    transformers = pytest.importorskip("transformers")
    record = sft_example(log, log.get_episode(attempts.fixed))
    assert isinstance(record, dict)
    tokenizer = transformers.AutoTokenizer.from_pretrained(qwen)
    text = tokenizer.apply_chat_template(record["messages"], tools=record["tools"], tokenize=False)
    expected = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert fit_of(qwen).count(record["messages"], record["tools"]) == expected


def test_a_recorded_episode_longer_than_the_student_is_condensed_to_fit(
    attempts: Attempts, log: EpisodeStore, qwen: Path
) -> None:
    fit = fit_of(qwen)
    episode = log.get_episode(attempts.fixed)
    whole = sft_example(log, episode)
    assert isinstance(whole, dict)
    assert fit.count(whole["messages"], whole["tools"]) > LIMIT  # as recorded, SFT would set it aside
    condensed = sft_example(log, episode, fit=fit)
    assert isinstance(condensed, dict)
    assert fit.count(condensed["messages"], condensed["tools"]) <= LIMIT
    assert assistant_turns(condensed["messages"]) == assistant_turns(whole["messages"])  # what is trained on
    assert [m["role"] for m in condensed["messages"]] == [m["role"] for m in whole["messages"]]
    tool_text = "\n".join(m["content"] for m in condensed["messages"] if m["role"] == "tool")
    assert FAILING in tool_text and "1 failed, 400 passed" in tool_text and "401 passed" in tool_text
    assert "progress, passing-test and header lines cut" in tool_text
    assert tool_text.count(" PASSED") < "\n".join(m["content"] for m in whole["messages"]).count(" PASSED")
    assert sft_example(log, episode, fit=fit) == condensed  # deterministic


def test_too_long_even_condensed_is_set_aside_with_the_reason(
    attempts: Attempts, log: EpisodeStore, qwen: Path
) -> None:
    fit = fit_of(qwen, 300)
    example = sft_example(log, log.get_episode(attempts.fixed), fit=fit)
    assert isinstance(example, Unusable) and example.reason is SetAsideReason.too_long
    assert "max_seq_len=300 of qwen" in example.detail and attempts.fixed in example.detail
    selection = sft_selection(log, fit=fit)
    assert selection.items == [] and selection.set_aside.counts == {SetAsideReason.too_long: 1}
    assert selection.set_aside.line().startswith("set aside: 1 too_long (episode ")
    # The answer view is condensed the same way, and fits where the trace cannot.
    answer = sft_example(log, log.get_episode(attempts.fixed), "answer", fit=fit)
    assert isinstance(answer, dict) and fit.count(answer["messages"], None) <= 300


def test_the_pair_a_person_preferred_trains_once_condensed(attempts: Attempts, log: EpisodeStore, qwen: Path) -> None:
    fit = fit_of(qwen)
    log.preferences.prefer(attempts.left, attempts.fixed, Verdict.b, author="ana")
    selection = dpo_selection(log, fit=fit)
    human = [p for p in selection.items if "preference" in p.record]
    assert [(p.chosen, p.rejected) for p in human] == [(attempts.fixed, attempts.left)]
    record = human[0].record
    for side in ("chosen", "rejected"):
        assert fit.count(record["prompt"] + record[side], record["tools"]) <= LIMIT
    uncut = dpo_selection(log).items[0].record  # without a fit: as before, longer than the student
    assert fit.count(uncut["prompt"] + uncut["chosen"], uncut["tools"]) > LIMIT
    assert assistant_turns(record["chosen"]) == assistant_turns(uncut["chosen"])
    assert record["prompt"] == uncut["prompt"]  # the shared prompt is never cut

    too_small = dpo_selection(log, fit=fit_of(qwen, 300))
    assert too_small.items == [] and too_small.set_aside.counts[SetAsideReason.too_long] == 1


def test_condensing_never_touches_assistant_turns_or_a_frozen_prompt(qwen: Path) -> None:
    fit = fit_of(qwen, 400)
    messages = [
        {"role": "user", "content": "task: " + "context " * 300},
        {"role": "assistant", "content": "reading " * 50},
        {"role": "tool", "tool_call_id": "c", "content": "line\n" * 2000},
        {"role": "assistant", "content": "done"},
    ]
    frozen = fit_messages(messages, None, fit, frozen=1)
    assert frozen.messages is None and frozen.reason is not None and "max_seq_len=400" in frozen.reason
    free = fit_messages(messages, None, fit)
    assert free.messages is not None and free.tokens <= 400 < free.original_tokens and free.condensed == 2
    assert [m for m in free.messages if m["role"] == "assistant"] == [messages[1], messages[3]]
