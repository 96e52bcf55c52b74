"""Time to first paint of the dashboard over a large episode log, in a real headless Chromium. Prints JSON.

A fresh episode log (a temp dir used as RLIDE_HOME) is filled with N episodes by plain SQL in a few
big transactions, straight into the tables `EpisodeStore.open` creates (the store API writes one
transaction per row: far too slow for 100,000), plus one episode of 200 steps written through the
real store API (`add_step`). Then `rlide dashboard` serves it, and one headless Chromium loads, R
times, each from about:blank (a fresh page load):
  list           #/episodes                                until one [data-test="episode-row"] exists
  list_filtered  #/episodes?q=<word in ~1% of tasks>&min_reward=0.5   (the same)
  episode        #/episode/<the 200-step episode>          until 200 [data-test="step"] exist
For each: the wall time from `driver.get` to the moment polling sees them, and the page's own clock
(`performance.now()`, ms since navigation start): first-contentful-paint, when a MutationObserver
installed before the page's scripts saw them in the DOM, the frame after that (rows painted), and
when the polling read them. The baseline, on the same log: `rlide episodes list` (default limit 20)
and `rlide episodes list --limit 50 --json` as subprocesses, and the JSON API alone (urllib).
All figures are min/median/max ms over R (raw samples too). The machine is shared: the JSON carries
the load average before and after.

    python benchmarks/dashboard_paint.py [--episodes 100000] [--repeat 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from episodes.records import EpisodeStatus, RewardSource  # noqa: E402
from episodes.store import EpisodeStore  # noqa: E402

RLIDE = ROOT / ".venv" / "bin" / "rlide"
READY_LINE = "Uvicorn running on"
LONG_STEPS = 200
RARE_WORD = "flaky"
"""In about 1% of the tasks, and in no other task: the filtered list searches for it."""
DAY = 86_400.0

VERBS = ("Fix", "Refactor", "Add tests for", "Speed up", "Document", "Type-annotate", "Remove dead code in",
         "Handle errors in", "Port", "Simplify", "Split", "Rename the helpers in")  # fmt: skip
THINGS = ("the parser", "the CSV exporter", "the retry loop", "the cache layer", "the HTTP client", "the CLI",
          "date handling", "the config loader", "the search index", "the scheduler", "the auth middleware",
          "the plotting code", "the migration runner", "unicode handling", "the job queue", "logging")  # fmt: skip
MODULES = ("core", "utils", "api", "models", "views", "storage", "cli", "server", "client", "io", "net", "jobs")
DETAILS = ("", "; keep the public API unchanged", " so that the failing test in tests/ passes",
           "; the issue has a reproducer", " (see the traceback in the issue)", " without new dependencies",
           "; it breaks on Windows paths", "; a user reports it hangs on large inputs")  # fmt: skip
TOOLS = ("search_code", "read_file", "run_tests", "apply_patch", "list_files", "grep")
STATUSES = (("success", 0.45), ("failure", 0.33), ("aborted", 0.08), ("timeout", 0.07), ("open", 0.07))
CLIENTS = ("claude-code", "cursor", "vscode", "zed")


# -- the episode log -----------------------------------------------------------------------------


def _task(rng: random.Random) -> str:
    task = f"{rng.choice(VERBS)} {rng.choice(THINGS)} in {rng.choice(MODULES)}/{rng.choice(MODULES)}.py"
    task += rng.choice(DETAILS)
    if rng.random() < 0.01:
        task += f" ({RARE_WORD} on CI)"
    return task


def _reward(rng: random.Random, status: str) -> tuple[str, float, int]:
    """(source, value, verified) of an episode's one reward, roughly as its status suggests."""
    if status == "success":
        value = rng.choice((1.0, 1.0, 1.0, 0.8, 0.6, 0.5))
    elif status == "failure":
        value = rng.choice((-1.0, -1.0, -0.5, 0.0, 0.2))
    else:
        value = round(rng.uniform(-1.0, 1.0), 2)
    source = rng.choices(("tests", "outcome", "feedback", "judge"), (0.6, 0.2, 0.1, 0.1))[0]
    return source, value, int(source == "tests")


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _insert(conn: sqlite3.Connection, table: str, names: tuple[str, ...], rows: list[tuple[Any, ...]]) -> None:
    sql = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
    conn.executemany(sql, rows)


def bulk_fill(db_path: Path, n: int, *, seed: int = 7, batch: int = 25_000) -> dict[str, int]:
    """N episodes (most with one or two steps and one reward) in transactions of `batch` episodes."""
    rng = random.Random(seed)
    now = time.time()
    conn = sqlite3.connect(db_path, isolation_level=None)
    needed = {
        "episodes": {"id", "task", "workspace", "client", "source", "status", "summary", "created_at",
                     "updated_at", "ended_at"},
        "steps": {"episode_id", "tool", "arguments", "result_summary", "error", "duration_ms", "created_at"},
        "rewards": {"episode_id", "source", "value", "comment", "created_at", "verified"},
    }  # fmt: skip
    for table, names in needed.items():
        missing = names - _columns(conn, table)
        if missing:
            raise SystemExit(f"the episode log's {table} table has no {sorted(missing)}: update this benchmark")
    episode_names = ("id", "task", "workspace", "client", "source", "status", "summary", "created_at",
                     "updated_at", "ended_at")  # fmt: skip
    step_names = ("episode_id", "tool", "arguments", "result_summary", "error", "duration_ms", "created_at")
    reward_names = ("episode_id", "source", "value", "comment", "created_at", "verified")
    statuses, weights = zip(*STATUSES, strict=True)
    counts = {"episodes": 0, "steps": 0, "rewards": 0, "with_rare_word": 0}
    try:
        for start in range(0, n, batch):
            episodes, steps, rewards = [], [], []
            for _ in range(start, min(n, start + batch)):
                episode_id = f"ep_{rng.getrandbits(80):020x}"
                created = now - rng.uniform(0.0, 90 * DAY) - 3_600.0  # older than the long episode
                status = rng.choices(statuses, weights)[0]
                source = "policy" if rng.random() < 0.1 else "external"
                task = _task(rng)
                counts["with_rare_word"] += RARE_WORD in task
                t = created
                for k in range(rng.choice((0, 1, 1, 2, 2, 2)) if rng.random() < 0.95 else 0):
                    t += rng.uniform(0.5, 90.0)
                    tool = rng.choice(TOOLS)
                    error = "exit status 1: 2 tests failed" if rng.random() < 0.05 else None
                    result = f"{tool} #{k}: " + " ".join(rng.choice(THINGS) for _ in range(rng.randint(3, 12)))
                    arguments = json.dumps({"query": rng.choice(THINGS), "path": f"{rng.choice(MODULES)}.py"})
                    steps.append((episode_id, tool, arguments, result, error, rng.uniform(2.0, 3_000.0), t))
                ended = None if status == "open" else t + rng.uniform(1.0, 60.0)
                if status != "open" and rng.random() < 0.85:
                    r_source, value, verified = _reward(rng, status)
                    rewards.append((episode_id, r_source, value, f"{r_source}: {value:+.2f}", ended, verified))
                summary = None if status == "open" else f"{status}: {rng.choice(DETAILS) or 'done'}"
                workspace = f"/home/dev/src/{rng.choice(MODULES)}-{rng.randint(1, 40)}"
                episodes.append((episode_id, task, workspace, rng.choice(CLIENTS), source, status, summary, created,
                                 ended or t, ended))  # fmt: skip
            conn.execute("BEGIN IMMEDIATE")
            _insert(conn, "episodes", episode_names, episodes)
            _insert(conn, "steps", step_names, steps)
            _insert(conn, "rewards", reward_names, rewards)
            conn.execute("COMMIT")
            counts["episodes"] += len(episodes)
            counts["steps"] += len(steps)
            counts["rewards"] += len(rewards)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return counts


def long_episode(store: EpisodeStore, steps: int) -> str:
    """One episode of `steps` tool calls, each with a result of a few hundred characters, through the store API."""
    rng = random.Random(11)
    episode = store.start_episode(
        f"Fix {RARE_WORD} timeouts in the job queue: a long session of {steps} tool calls", workspace="/home/dev/q"
    )
    for i in range(steps):
        tool = TOOLS[i % len(TOOLS)]
        lines = [f"{tool} call {i}: {rng.choice(THINGS)} in {rng.choice(MODULES)}.py line {rng.randint(1, 900)}"]
        while sum(len(line) + 1 for line in lines) < rng.randint(250, 500):
            lines.append(f"  {rng.choice(MODULES)}.py:{rng.randint(1, 900)}: {rng.choice(THINGS)} {rng.choice(VERBS)}")
        store.add_step(
            episode.id,
            tool=tool,
            arguments={"query": rng.choice(THINGS), "step": i},
            result_summary="\n".join(lines),
            error=None,
            duration_ms=rng.uniform(5.0, 2_000.0),
        )
    store.add_reward(episode.id, RewardSource.tests, 1.0, "2 failing tests now pass", verified=True)
    store.end_episode(episode.id, EpisodeStatus.success, "fixed the flaky timeouts")
    return episode.id


def fill_log(home: Path, n: int) -> dict[str, Any]:
    db_path = home / "episodes.db"
    url = f"sqlite:///{db_path}"
    started = time.perf_counter()
    EpisodeStore.open(url).close()  # creates the tables (the migrations)
    migrated = time.perf_counter()
    counts = bulk_fill(db_path, n)
    bulk = time.perf_counter()
    store = EpisodeStore.open(url)
    try:
        long_id = long_episode(store, LONG_STEPS)
        api_done = time.perf_counter()
        total = store.count_episodes()
        long_steps = len(store.detail(long_id).steps)
    finally:
        store.close()
    if total != n + 1:
        raise SystemExit(f"the log holds {total} episodes, not {n + 1}")
    if long_steps != LONG_STEPS:
        raise SystemExit(f"episode {long_id} has {long_steps} steps, not {LONG_STEPS}")
    size = sum(p.stat().st_size for p in home.glob("episodes.db*"))
    return {
        "long_id": long_id,
        "fill_seconds": round(api_done - started, 2),
        "fill_breakdown_s": {
            "migrations": round(migrated - started, 3),
            "bulk_sql": round(bulk - migrated, 2),
            f"store_api_{LONG_STEPS}_steps": round(api_done - bulk, 2),
        },
        "rows": {**counts, "long_episode_steps": long_steps, "count_episodes": total},
        "db_size_mb": round(size / 1e6, 1),
    }


# -- the dashboard -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(home: Path) -> dict[str, str]:
    """This process's environment without the developer's RLIDE_* settings, pointed at `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIDE_")}
    return {**env, "RLIDE_HOME": str(home)}


@contextmanager
def dashboard(home: Path, timeout: float = 60.0) -> Iterator[int]:
    """`rlide dashboard` on a free port, until uvicorn says it listens; stopped on the way out."""
    port = _free_port()
    proc = subprocess.Popen(
        [str(RLIDE), "dashboard", "--port", str(port)],
        env=_env(home),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    ready = threading.Event()
    lines: list[str] = []

    def read() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode(errors="replace")
            lines.append(line)
            if READY_LINE in line:
                ready.set()
        ready.set()  # EOF: it is gone

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not ready.wait(timeout) or proc.poll() is not None:
            raise SystemExit(f"rlide dashboard did not come up on port {port}:\n{''.join(lines)[-4000:]}")
        yield port
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        reader.join(timeout=5)


# The page's own clock: installed before any of the page's scripts, it notes when the rows (or all the
# steps) first exist in the DOM, and the frame after (a rAF, then a task: the frame has been painted).
OBSERVER_JS = """
(() => {
  const marks = (window.__bench = {});
  const frame = (name) => requestAnimationFrame(() => setTimeout(() => { marks[name] = performance.now(); }, 0));
  const check = () => {
    if (marks.rows === undefined && document.querySelector('[data-test="episode-row"]')) {
      marks.rows = performance.now(); frame("rows_frame");
    }
    if (marks.steps === undefined && document.querySelectorAll('[data-test="step"]').length >= STEPS) {
      marks.steps = performance.now(); frame("steps_frame");
    }
  };
  new MutationObserver(check).observe(document, { childList: true, subtree: true });
})();
"""

READ_JS = """
const fcp = performance.getEntriesByType("paint").find((e) => e.name === "first-contentful-paint");
const nav = performance.getEntriesByType("navigation")[0];
return { now: performance.now(), fcp: fcp ? fcp.startTime : null, marks: window.__bench || {},
         load: nav ? nav.loadEventEnd : null };
"""


def _count(driver: Any, selector: str) -> int:
    return int(driver.execute_script(f"return document.querySelectorAll('{selector}').length"))


def load_once(driver: Any, url: str, selector: str, need: int, mark: str, timeout: float = 120.0) -> dict[str, float]:
    """One fresh load of `url` (from about:blank), until `need` elements match `selector`."""
    driver.get("about:blank")
    start = time.perf_counter()
    driver.get(url)
    returned = time.perf_counter()
    deadline = start + timeout
    while True:
        try:
            found = _count(driver, selector)
        except Exception:  # mid-navigation: try again
            found = 0
        if found >= need:
            seen = time.perf_counter()
            page = driver.execute_script(READ_JS)
            break
        if time.perf_counter() > deadline:
            raise SystemExit(f"{url}: {need} {selector} did not appear within {timeout:.0f} s (found {found})")
        time.sleep(0.005)
    frame_deadline = time.perf_counter() + 5.0
    while f"{mark}_frame" not in page["marks"] and time.perf_counter() < frame_deadline:
        time.sleep(0.01)
        page = driver.execute_script(READ_JS)
    marks = page["marks"]
    return {
        "wall_ms": (seen - start) * 1e3,
        "driver_get_returned_ms": (returned - start) * 1e3,
        "fcp_ms": page["fcp"],
        "dom_ms": marks.get(mark),
        "painted_ms": marks.get(f"{mark}_frame"),
        "polled_page_ms": page["now"] if marks.get(mark) is None else None,
        "load_event_ms": page["load"],
    }


def browser_figures(port: int, long_id: str, filtered_query: str, repeat: int) -> dict[str, Any]:
    from tests.mcp_server.dashboard.browser import headless_chromium

    base = f"http://127.0.0.1:{port}/"
    views: dict[str, tuple[str, str, int, str]] = {
        "list": (base + "#/episodes", '[data-test="episode-row"]', 1, "rows"),
        "list_filtered": (base + f"#/episodes?{filtered_query}", '[data-test="episode-row"]', 1, "rows"),
        "episode": (base + f"#/episode/{long_id}", '[data-test="step"]', LONG_STEPS, "steps"),
    }
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in views}
    extra: dict[str, Any] = {}
    with headless_chromium() as driver:
        extra["chromium"] = driver.capabilities.get("browserVersion")
        js = OBSERVER_JS.replace("STEPS", str(LONG_STEPS))
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": js})
        for _ in range(repeat):  # interleaved, so drift in the machine's load hits every view alike
            for name, (url, selector, need, mark) in views.items():
                samples[name].append(load_once(driver, url, selector, need, mark))
        driver.get(base + "#/episodes")
        wait = time.perf_counter() + 30
        while _count(driver, '[data-test="episode-row"]') == 0 and time.perf_counter() < wait:
            time.sleep(0.05)
        extra["rows_shown_on_list"] = _count(driver, '[data-test="episode-row"]')
        count_deadline = time.perf_counter() + 60
        text = ""
        while not text and time.perf_counter() < count_deadline:
            text = driver.execute_script(
                "const c = document.querySelector('[data-test=\"count\"]'); return c ? c.textContent : '';"
            )
            time.sleep(0.05)
        extra["count_shown_on_list"] = text
    figures: dict[str, Any] = {}
    for name, runs in samples.items():
        keys = (
            "wall_ms",
            "driver_get_returned_ms",
            "fcp_ms",
            "dom_ms",
            "painted_ms",
            "polled_page_ms",
            "load_event_ms",
        )
        figures[name] = {"url": views[name][0].replace(base, "/")}
        for key in keys:
            values = [r[key] for r in runs if r[key] is not None]
            if values:
                figures[name][key] = stats(values)
    return {"views": figures, **extra}


# -- the baseline --------------------------------------------------------------------------------


def timed(fn: Callable[[], Any], repeat: int) -> tuple[list[float], Any]:
    samples, last = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        last = fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples, last


def cli_figures(home: Path, repeat: int) -> dict[str, Any]:
    env = _env(home)
    commands = {
        "rlide episodes list": [str(RLIDE), "episodes", "list"],
        "rlide episodes list --limit 50 --json": [str(RLIDE), "episodes", "list", "--limit", "50", "--json"],
    }
    out: dict[str, Any] = {}
    for name, argv in commands.items():

        def run(argv: list[str] = argv) -> subprocess.CompletedProcess[str]:
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
            return done

        samples, done = timed(run, repeat)
        lines = done.stdout.count("\n")
        shown = len(json.loads(done.stdout)) if "--json" in argv else lines
        out[name] = {**stats(samples), "episodes_shown": shown}
    return out


def api_figures(port: int, long_id: str, filtered_query: str, repeat: int) -> dict[str, Any]:
    base = f"http://127.0.0.1:{port}"
    paths = {
        "GET /api/episodes?limit=50": "/api/episodes?limit=50",
        f"GET /api/episodes/{long_id}": f"/api/episodes/{long_id}",
        f"GET /api/episodes?{filtered_query}&limit=50": f"/api/episodes?{filtered_query}&limit=50",
        "GET /api/episodes/count": "/api/episodes/count",
        f"GET /api/episodes/count?{filtered_query}": f"/api/episodes/count?{filtered_query}",
        f"GET /api/episodes/{long_id}/comparable": f"/api/episodes/{long_id}/comparable",
    }
    out: dict[str, Any] = {}
    for name, path in paths.items():

        def get(path: str = path) -> bytes:
            with urllib.request.urlopen(base + path, timeout=300) as response:
                return response.read()

        samples, body = timed(get, repeat)
        out[name] = {**stats(samples), "bytes": len(body)}
    return out


# -- the report ----------------------------------------------------------------------------------


def stats(values: list[float]) -> dict[str, Any]:
    return {
        "min": round(min(values), 1),
        "median": round(statistics.median(values), 1),
        "max": round(max(values), 1),
        "samples": [round(v, 1) for v in values],
    }


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=100_000, help="episodes written by plain SQL")
    parser.add_argument("--repeat", type=int, default=5, help="fresh page loads (and CLI/API runs) per figure")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    if not RLIDE.exists():
        raise SystemExit(f"{RLIDE} is missing: run scripts/setup.sh")

    report: dict[str, Any] = {
        "benchmark": "dashboard_paint",
        "machine": {
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_average_before": _load(),
        },  # fmt: skip
        "episodes": args.episodes,
        "repeat": args.repeat,
    }
    filtered_query = f"q={RARE_WORD}&min_reward=0.5"
    home = Path(tempfile.mkdtemp(prefix="rlide-dashboard-paint-"))
    try:
        fill = fill_log(home, args.episodes)
        long_id = fill.pop("long_id")
        report.update(fill)
        report["long_episode"] = {"id": long_id, "steps": LONG_STEPS}
        report["filtered_query"] = filtered_query
        report["machine"]["load_average_after_fill"] = _load()
        with dashboard(home) as port:
            report["browser"] = browser_figures(port, long_id, filtered_query, args.repeat)
            report["machine"]["load_average_after_browser"] = _load()
            report["api"] = api_figures(port, long_id, filtered_query, args.repeat)
        report["cli"] = cli_figures(home, args.repeat)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    report["machine"]["load_average_after"] = _load()
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    main()
