"""The dashboard says, when a preference is recorded, whether its pair trains on the configured
student and why not: over two attempts recorded through a real MCP session, counted with the real
Qwen2.5-Coder tokenizer, through the real HTTP API and in a real headless Chromium."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from mcp_server.dashboard.api import DashboardApi
from mcp_server.dashboard.app import Dashboard
from tests.mcp_server.dashboard.browser import headless_chromium, require_chromium, screenshot, served, wait_for
from tests.training.data.recorded import NEEDS_BWRAP, NEEDS_QWEN, Attempts, have_bwrap, qwen_folder, record_attempts


@pytest.fixture(scope="module")
def attempts(tmp_path_factory: pytest.TempPathFactory) -> Attempts:
    if not have_bwrap():
        pytest.skip(NEEDS_BWRAP)
    if qwen_folder() is None:
        pytest.skip(NEEDS_QWEN)
    return record_attempts(tmp_path_factory.mktemp("attempts"))


@pytest.fixture
def dashboard(attempts: Attempts) -> Iterator[Dashboard]:
    board = Dashboard(attempts.settings)
    yield board
    board.close()


def client_for(board: Dashboard, student: str | None, max_seq_len: int | None = None) -> TestClient:
    """The dashboard's own routes, its API told the student (as `Dashboard` should from the settings)."""
    board.api = DashboardApi(
        board.store, board.settings.home / "memory", "log", student=student, max_seq_len=max_seq_len
    )
    return TestClient(Starlette(routes=board.routes(None)), base_url="http://127.0.0.1:8765")


def prefer(http: TestClient, attempts: Attempts, verdict: str = "b") -> dict[str, Any]:
    body = {"a": attempts.left, "b": attempts.fixed, "verdict": verdict, "author": "ana"}
    response = http.post("/api/preferences", json=body)
    assert response.status_code == 200, response.text
    training: dict[str, Any] = response.json()["training"]
    return training


def test_a_pair_that_fits_once_condensed_is_said_to_train(attempts: Attempts, dashboard: Dashboard) -> None:
    # 2,048 tokens: the honest fix as recorded is about 4,600, so it trains only condensed.
    training = prefer(client_for(dashboard, str(qwen_folder()), 2048), attempts)
    assert training == {"trainable": True, "kind": None, "reason": None}


def test_a_pair_too_long_even_condensed_is_said_not_to_train_and_why(attempts: Attempts, dashboard: Dashboard) -> None:
    training = prefer(client_for(dashboard, str(qwen_folder()), 300), attempts)
    assert training["trainable"] is False and training["kind"] == "too_long"
    assert "max_seq_len=300" in training["reason"] and attempts.fixed in training["reason"]
    assert [p.verdict.value for p in dashboard.store.preferences.list()][-1] == "b"  # recorded all the same


def test_both_bad_and_an_unknown_student_say_so(attempts: Attempts, dashboard: Dashboard) -> None:
    both = prefer(client_for(dashboard, str(qwen_folder())), attempts, "both_bad")
    assert both["trainable"] is False and both["kind"] == "no_order" and "better episode" in both["reason"]
    unchecked = prefer(client_for(dashboard, None), attempts)
    assert unchecked["trainable"] is None and unchecked["reason"].startswith("not checked")
    tiny = prefer(client_for(dashboard, "tiny-qwen2"), attempts)
    assert tiny["trainable"] is None and "builds its tokenizer per run" in tiny["reason"]


def test_checking_a_pair_keeps_the_server_process_free_of_torch(attempts: Attempts) -> None:
    """The dashboard runs in the MCP server's process, which never imports torch or transformers."""
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from episodes.store import EpisodeStore\n"
        "from mcp_server.dashboard.api import DashboardApi\n"
        f"store = EpisodeStore.open({attempts.settings.episode_db_url!r})\n"
        f"store.preferences.prefer({attempts.left!r}, {attempts.fixed!r}, 'b', author='ana')\n"
        f"api = DashboardApi(store, Path('.'), 'log', student={str(qwen_folder())!r}, max_seq_len=2048)\n"
        f"result = api._pair_training({attempts.left!r}, {attempts.fixed!r})\n"
        "print(json.dumps([result, sorted(m for m in ('torch', 'transformers', 'art') if m in sys.modules)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result, heavy = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["trainable"] is True and heavy == []


def test_the_compare_view_shows_why_a_pair_will_not_train(attempts: Attempts, dashboard: Dashboard) -> None:
    require_chromium()
    client_for(dashboard, str(qwen_folder()), 300)
    with served(Starlette(routes=dashboard.routes(None))) as port, headless_chromium() as chrome:
        chrome.get(f"http://127.0.0.1:{port}/#/compare/{attempts.left}/{attempts.fixed}")
        from selenium.webdriver.common.by import By

        def by(test: str) -> list[Any]:
            return list(chrome.find_elements(By.CSS_SELECTOR, f'[data-test="{test}"]'))

        wait_for(lambda: by("prefer-b"), what="the compare view")
        by("prefer-b")[0].click()
        note = wait_for(lambda: by("preference-training")[0].text, what="the training note")
        screenshot(chrome, "preference-will-not-train")
        assert note.startswith("this pair will not train (too_long): episode ") and "max_seq_len=300" in note
        # Shown as text: the note is a text node, never markup.
        assert by("preference-training")[0].get_attribute("innerHTML") == note.replace("&", "&amp;").replace(
            "<", "&lt;"
        ).replace(">", "&gt;")
