"""A real headless Chromium (Debian's `chromium` and `chromium-driver`, installed by scripts/setup.sh)
driven through selenium, for the dashboard's tests and its first-paint benchmark."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCREENSHOTS = Path(os.environ.get("RLIDE_SCREENSHOTS", ROOT / ".test-artifacts" / "dashboard"))
"""Where the tests leave a picture of each view (git-ignored), to be looked at."""


def chromium_paths() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def require_chromium() -> tuple[str, str]:
    found = chromium_paths()
    if found is None:
        pytest.skip(
            "no chromium/chromedriver: scripts/setup.sh installs them (apt-get install chromium chromium-driver)"
        )
    return found


@contextmanager
def headless_chromium(width: int = 1400, height: int = 1000) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = require_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--window-size={width},{height}", "--disable-extensions", "--no-first-run"):  # fmt: skip
        options.add_argument(argument)
    chrome = webdriver.Chrome(options=options, service=Service(driver))
    try:
        yield chrome
    finally:
        chrome.quit()


def wait_for(condition: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # a stale element mid-render: try again
            last = exc
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}" + (f" (last error: {last})" if last else ""))


def screenshot(chrome: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    chrome.save_screenshot(str(path))
    return path
