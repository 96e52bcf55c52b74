"""The dashboard in a real headless Chromium, served by a real `rlide serve --http` over a log that a
real cpu training run (the tiny model, three GRPO steps on toy scenarios) and an eval wrote to.

Each view leaves a screenshot under .test-artifacts/dashboard/ (RLIDE_SCREENSHOTS)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from episodes.records import EpisodeStatus, RewardSource, Verdict
from episodes.store import EpisodeStore
from tests.mcp_server.dashboard.browser import headless_chromium, require_chromium, screenshot, wait_for
from tests.mcp_server.dashboard.seed import HOSTILE, seed

pytestmark = [pytest.mark.timeout(240), pytest.mark.training]  # the charts come from a real cpu run


def _by(chrome: Any, test: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return chrome.find_elements(By.CSS_SELECTOR, f'[data-test="{test}"]')


def _click(chrome: Any, test: str, what: str) -> None:
    """Click the first `test` element, found afresh on each try: the list and training views redraw
    on every poll, so an element found a moment ago may be gone (stale) by the click."""
    wait_for(lambda: _by(chrome, test)[0].click() or True, what=what)


def _train_for_real(rlide_exe: Path, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [str(rlide_exe), "train", "--daemon", "--max-steps", "3", "--scenarios", "toy"],
        env=env, capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_list_open_rate_exclude_compare_prefer_and_training_charts(
    rlide_home: Path, rlide_exe: Path, rlide_env: dict[str, str], http_server: Any, tmp_path: Path
) -> None:
    require_chromium()
    import os

    env = {**os.environ, **rlide_env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    report = _train_for_real(rlide_exe, env)
    assert report["steps_trained"] == 3
    store = EpisodeStore.open(f"sqlite:///{rlide_home / 'episodes.db'}")
    ids = seed(store)
    store.runs.record_eval(
        "default",
        "humaneval-heldout",
        {"tasks": "humaneval", "split": "heldout", "model": "student@3", "checkpoint_step": 3, "n": 33, "passed": 5,
         "pass_at_1": 5 / 33, "ci95": {"low": 0.07, "high": 0.31}},
    )  # fmt: skip
    server = http_server()
    base = f"http://127.0.0.1:{server.port}/"

    with headless_chromium() as chrome:
        # -- the list: every episode, newest first; a hostile task is text, not markup -----------------
        chrome.get(base)
        wait_for(lambda: len(_by(chrome, "episode-row")) == 5, what="5 rows")
        assert chrome.title == "rlide"  # the <img onerror>/<script> of the hostile task never ran
        wait_for(lambda: any(HOSTILE[:40] in row.text for row in _by(chrome, "episode-row")), what="the task as text")
        wait_for(lambda: _by(chrome, "count")[0].text == "5", what="the total")
        screenshot(chrome, "01-episodes")

        # -- filter by task text and reward, in SQL -----------------------------------------------------
        chrome.get(base + "#/episodes?q=calc.py&min_reward=0.5")
        wait_for(lambda: [r.get_attribute("data-id") for r in _by(chrome, "episode-row")] == [ids.good], what="filter")

        # -- open one: diff rendered as a diff, the timeline, a long result folded -------------------------
        _click(chrome, "episode-row", "the filtered row")
        wait_for(lambda: _by(chrome, "episode-id"), what="the episode view")
        added = chrome.find_elements("css selector", '[data-test="diff"] .add')
        assert any(a.text == "+    return a + b" for a in added)
        assert len(_by(chrome, "step")) == 2
        assert "5009 characters" in chrome.page_source
        screenshot(chrome, "02-episode")

        # -- rate it ------------------------------------------------------------------------------------------
        rating = chrome.find_element("css selector", 'input[name="rating"]')
        rating.clear()
        rating.send_keys("-0.5")
        chrome.find_element("css selector", 'input[name="rating-comment"]').send_keys("fixed, but slowly")
        _by(chrome, "rate")[0].click()
        wait_for(lambda: any("feedback" in r.text and "-0.50" in r.text for r in _by(chrome, "reward")), what="rating")
        feedback = [r for r in store.detail(ids.good).rewards if r.source is RewardSource.feedback]
        assert [(r.value, r.comment) for r in feedback] == [(-0.5, "fixed, but slowly")]
        [rated] = [c for c in store.curation_log(ids.good) if c.action.value == "rate"]
        assert rated.detail["author"]  # the page sends who rated (the server's user by default)

        # -- the monitor's flag, shown with why, and cleared by a person -------------------------------------------
        wait_for(lambda: "touches_tests" in _by(chrome, "flags")[0].text, what="the flag")
        _by(chrome, "clear-flags")[0].click()
        wait_for(lambda: store.get_episode(ids.good).flags == 0, what="the flags cleared")
        wait_for(lambda: "cleared by" in _by(chrome, "flags")[0].text, what="the page, redrawn")

        # -- exclude it from training ---------------------------------------------------------------------------
        _by(chrome, "exclude")[0].click()
        wait_for(lambda: "Include in training" in _by(chrome, "exclude")[0].text, what="excluded")
        assert store.get_episode(ids.good).excluded
        _by(chrome, "exclude")[0].click()
        wait_for(lambda: not store.get_episode(ids.good).excluded, what="included again")

        # -- compare the two attempts at the task and prefer one ----------------------------------------------
        wait_for(lambda: "Exclude from training" in _by(chrome, "exclude")[0].text, what="the page, redrawn")
        _click(chrome, "compare-link", "a comparable episode to click")
        wait_for(lambda: len(_by(chrome, "side")) == 2, what="the comparison")
        screenshot(chrome, "03-compare")
        _by(chrome, "prefer-a")[0].click()
        wait_for(lambda: "A is better" in _by(chrome, "verdict-status")[0].text, what="the verdict")
        [preference] = store.preferences.list()
        assert (preference.episode_a, preference.episode_b, preference.verdict) == (ids.good, ids.bad, Verdict.a)

        # -- a policy episode's tokens, coloured by probability --------------------------------------------------
        chrome.get(base + f"#/episode/{ids.policy}")
        tokens = wait_for(lambda: _by(chrome, "tokens"), what="tokens")
        assert len(tokens[0].find_elements("css selector", "span")) == 3

        # -- one episode of 200 steps -------------------------------------------------------------------------
        chrome.get(base + f"#/episode/{ids.long}")
        wait_for(lambda: len(_by(chrome, "step")) == 200, what="200 steps")
        screenshot(chrome, "04-episode-200-steps")

        # -- training: charts drawn by the page from the real run's steps, and the eval --------------------------
        chrome.get(base + "#/training")

        def drawn() -> dict[str, Any]:
            points = {
                c.get_attribute("data-title"): len(c.find_elements("css selector", "circle.pt"))
                for c in _by(chrome, "chart")
            }
            return {**points, "served": _by(chrome, "served-step")[0].text, "evals": len(_by(chrome, "eval-row"))}

        charts = wait_for(lambda: drawn() if _by(chrome, "eval-row") else None, what="charts")
        assert (charts["reward per step"], charts["pass@1 by checkpoint"]) == (3, 1) and charts["loss"] >= 3, charts
        assert (charts["served"], charts["evals"]) == ("3", 1), charts
        screenshot(chrome, "05-training")

        # -- updates without a reload: a new episode appears in the open list ------------------------------------
        chrome.get(base + "#/episodes")
        wait_for(lambda: len(_by(chrome, "episode-row")) == 5, what="the list")
        late = store.start_episode("arrived while the page was open")
        store.end_episode(late.id, EpisodeStatus.success)
        wait_for(lambda: _by(chrome, "episode-row")[0].get_attribute("data-id") == late.id, 10, "the poll")

        # -- delete, after a confirmation --------------------------------------------------------------------------
        chrome.get(base + f"#/episode/{ids.hostile}")
        wait_for(lambda: _by(chrome, "delete"), what="the delete button")[0].click()
        chrome.switch_to.alert.dismiss()  # "cancel" deletes nothing
        assert store.get_episode(ids.hostile).id == ids.hostile
        _by(chrome, "delete")[0].click()
        chrome.switch_to.alert.accept()
        wait_for(lambda: chrome.current_url.endswith("#/episodes"), what="back to the list")
        assert [c.action.value for c in store.curation_log(ids.hostile)] == ["delete"]

        # -- the index view ---------------------------------------------------------------------------------------
        chrome.get(base + "#/index")
        wait_for(lambda: "Code index" in chrome.page_source, what="the index view")
        screenshot(chrome, "06-index")
    store.close()
