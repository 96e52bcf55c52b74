"""The ranking rules of a developer's question (memory.reranking), on a real index of a small project
whose tests, docs and changelog all talk about the same thing as its code."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memory.config import MemoryConfig
from memory.errors import QueryError
from memory.reranking import ChunkKind, literal_overlap, path_kind, read_query, rerank
from memory.service import MemoryService
from memory.stores.base import Hit

FILES = {
    "tokenkit/errors.py": '''
class TokenExpired(Exception):
    """Raised when a token is older than max_age: the token age and max_age are kept."""

    def __init__(self, message, age=None):
        super().__init__(message)
        self.age = age
''',
    "tokenkit/tokens.py": '''
import time

from tokenkit.errors import TokenExpired


def check_age(issued_at, max_age, now=None):
    """Refuse a token whose age is above max_age."""
    age = (now or time.time()) - issued_at
    if age > max_age:
        raise TokenExpired(f"token age {age:.0f} > {max_age} seconds", age=age)
    return age


def sign(value, key):
    return value + "." + key[::-1]
''',
    "tests/test_tokens.py": """
import pytest

from tokenkit.errors import TokenExpired
from tokenkit.tokens import check_age


def test_check_age_refuses_an_old_token():
    with pytest.raises(TokenExpired, match="token age 15 > 10 seconds"):
        check_age(0, 10, now=15)


def test_check_age_returns_the_age():
    assert check_age(0, 10, now=5) == 5
""",
    "docs/usage.rst": """
Token age
=========

``check_age`` refuses a token whose age is above ``max_age`` with ``TokenExpired``:
"token age 15 > 10 seconds". Check the token age before trusting it.
""",
    "CHANGES.rst": """
1.2.0
-----
- The token age check now says "token age 15 > 10 seconds" instead of "expired".
""",
}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryService]:
    root = tmp_path_factory.mktemp("tokenkit")
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text.lstrip())
    data = tmp_path_factory.mktemp("data")
    with MemoryService(MemoryConfig(workspace=root, data_dir=data, embedder="onnx-minilm")) as svc:
        svc.index_workspace()
        yield svc


def _paths(service: MemoryService, query: str, mode: str = "hybrid", **kw: str) -> list[str]:
    return [f"{h.path}:{h.symbol}" for h in service.search_code(query, k=5, mode=mode, **kw).results]  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["hybrid", "keyword"])
@pytest.mark.parametrize(
    "query",
    [
        "tokenkit.errors.TokenExpired: token age 15 > 10 seconds",
        'Traceback (most recent call last):\n  File "app.py", line 3, in load\nTokenExpired: token age 99 > 60 seconds',
        'why do I get "token age 40 > 30 seconds"',
    ],
)
def test_a_pasted_error_finds_where_it_is_raised(service: MemoryService, query: str, mode: str) -> None:
    # The test asserting the message, the docs and the changelog quoting it, and the exception
    # class all mention it; the code that raises it comes first.
    assert _paths(service, query, mode)[0] == "tokenkit/tokens.py:check_age"


@pytest.mark.parametrize("mode", ["hybrid", "keyword"])
def test_a_test_of_x_ranks_below_x_unless_tests_are_asked_for(service: MemoryService, mode: str) -> None:
    found = _paths(service, "where is the token age checked against max_age", mode)
    assert found[0] == "tokenkit/tokens.py:check_age"
    assert all(not p.startswith(("tests/", "docs/", "CHANGES")) for p in found[:2]), found
    asked = _paths(service, "which test covers the token age check", mode)
    assert asked[0].startswith("tests/test_tokens.py")


def test_kind_filters_and_each_hit_says_its_kind(service: MemoryService) -> None:
    tests = service.search_code("token age", k=5, kind="test").results
    assert tests and {h.kind for h in tests} == {"test"}
    docs = service.search_code("token age", k=5, kind="doc").results
    assert {h.path for h in docs} == {"docs/usage.rst", "CHANGES.rst"}
    code = service.search_code("token age", k=5, kind="code").results
    assert {h.kind for h in code} == {"code"} and "tokenkit/tokens.py" in {h.path for h in code}
    with pytest.raises(QueryError, match="kind 'tests' is unknown"):
        service.search_code("token age", kind="tests")


def test_path_kinds() -> None:
    assert path_kind("src/pkg/core.py") is ChunkKind.code
    for test in ("tests/test_core.py", "pkg/tests/helpers.py", "test_core.py", "core_test.go", "conftest.py"):
        assert path_kind(test) is ChunkKind.test, test
    for doc in ("docs/conf.py", "README.md", "CHANGES.rst", "HISTORY", "examples/basic.py", "releasenotes/x.yaml"):
        assert path_kind(doc) is ChunkKind.doc, doc
    assert path_kind("src/latest/contest.py") is ChunkKind.code  # words that merely contain "test"


def test_reading_a_query() -> None:
    error = read_query("itsdangerous.exc.BadSignature: Signature b'x' does not match")
    assert error.is_error and error.error_names == ("itsdangerous.exc.BadSignature",)
    assert read_query("KeyError: 'missing'").is_error
    assert read_query('  File "/app/x.py", line 12, in unsign').traceback_functions == ("unsign",)
    plain = read_query("Note: how are keys rotated")
    assert not plain.is_error and not plain.wants_tests and not plain.wants_docs
    assert read_query("how do I freeze time in my tests").wants_tests is False
    assert read_query("which tests cover key rotation").wants_tests
    assert read_query("where is this documented").wants_docs


def test_literal_overlap_reads_fstrings_and_percent_formats() -> None:
    code = 'raise X(f"Signature age {age} > {max_age} seconds")\nlog.warning("retrying %s after %d s", fn, n)'
    assert literal_overlap(code, ("Signature age 15 > 10 seconds",)) == len("Signature age") + len("seconds")
    assert literal_overlap(code, ("retrying fetch after 3 s",)) == len("retrying") + len("after")
    assert literal_overlap(code, ("nothing alike",)) == 0


def _hit(chunk: str, path: str, symbol: str, score: float) -> Hit:
    return Hit(chunk, path, 1, 10, "python", symbol, "def f(): pass", score)


def test_a_name_written_as_code_prefers_its_symbol() -> None:
    assert read_query("does stop_before_delay count the next sleep").identifiers == ("stop_before_delay",)
    assert read_query("how does TTLCache expire items").identifiers == ("TTLCache",)
    assert read_query("How are keys rotated").identifiers == ()
    hits = [
        _hit("use", "retry.py", "Retrying.__call__", 0.9),  # mentions the name
        _hit("def", "stop.py", "stop_before_delay.__call__", 0.6),  # is it
    ]
    assert [h.chunk_id for h, _ in rerank(read_query("what does stop_before_delay do"), hits, 2)] == ["def", "use"]


def test_one_slot_per_symbol() -> None:
    hits = [
        _hit("a1", "core.py", "Cache.get", 0.9),
        _hit("a2", "core.py", "Cache.get", 0.8),  # the same method's second chunk
        _hit("b", "core.py", "Cache.set", 0.7),
        _hit("c", "other.py", "Cache.get", 0.6),  # another file's symbol of that name
    ]
    assert [h.chunk_id for h, _ in rerank(read_query("cache get"), hits, 10)] == ["a1", "b", "c"]


def test_an_error_query_on_an_empty_workspace_is_fine(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    with MemoryService(MemoryConfig(workspace=tmp_path / "ws", data_dir=tmp_path / "d", embedder="none")) as svc:
        svc.index_workspace()
        assert svc.search_code("ValueError: bad", k=3).results == []
