"""A real headless Chromium (Debian's `chromium` and `chromium-driver`, installed by scripts/setup.sh)
driven through selenium, for the dashboard's tests and its first-paint benchmark."""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
def headless_chromium(width: int = 1400, height: int = 1000, *extra_args: str) -> Iterator[Any]:
    """A headless Chromium; `extra_args` are more command-line switches (`--host-resolver-rules=...`)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = require_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     f"--window-size={width},{height}", "--disable-extensions", "--no-first-run",
                     *extra_args):  # fmt: skip
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


@contextmanager
def served(app: Any) -> Iterator[int]:
    """`app` (ASGI) served by uvicorn on a free loopback port in a thread, as `rlide dashboard` and
    `rlide policy serve` serve theirs; yields the port."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, name="served-app", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), what="the server to listen")
        assert server.started, "the server did not start"
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def attacker_site(pages: dict[str, str]) -> Iterator[str]:
    """Another web site on this machine (loopback, its own port: another origin, as a local dev server
    is) serving `pages` (path -> HTML); yields its origin."""

    class Pages(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            page = pages.get(self.path)
            body = (page or "not found").encode()
            self.send_response(200 if page is not None else 404)
            self.send_header("content-type", "text/html; charset=utf-8")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the stdlib's name)
            pass

    site = ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=site.serve_forever, name="attacker-site", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{site.server_address[1]}"
    finally:
        site.shutdown()
        site.server_close()
