"""The episode log against both backends: SQLite (embedded) and a real PostgreSQL server."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from episodes.db import EpisodeClosed, EpisodeNotFound, SQLiteDatabase, StoreError, connect
from episodes.migrations import MIGRATIONS, Migration, applied, migrate
from episodes.policy_turns import EncodedTurn
from episodes.records import EpisodeSource, EpisodeStatus, RewardSource
from episodes.redaction import redact
from episodes.rows import MAX_TEXT_CHARS
from episodes.store import EpisodeStore
from tests.postgres_server import PostgresServer

FROZEN_V1 = Path(__file__).parents[1] / "data" / "episodes-0001.sqlite"


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'episodes.db'}"
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return server.create_database()


@pytest.fixture
def store(store_url: str) -> Iterator[EpisodeStore]:
    s = EpisodeStore.open(store_url)
    yield s
    s.close()


def test_episode_lifecycle(store: EpisodeStore) -> None:
    ep = store.start_episode("fix the flaky test", workspace="/ws", client="cursor", session_key="s1")
    assert ep.status is EpisodeStatus.open and ep.step_count == 0 and ep.reward_total is None
    store.add_step(
        ep.id, tool="run_tests", arguments={"cmd": "pytest"}, result_summary="3 passed", error=None, duration_ms=12.5
    )
    store.add_reward(ep.id, RewardSource.tests, 1.0, "3 passed", verified=True)
    store.add_reward(ep.id, RewardSource.feedback, -0.5, verified=True)  # a person's rating: evidence
    ended = store.end_episode(ep.id, EpisodeStatus.success, "done")
    assert ended.status is EpisodeStatus.success and ended.ended_at is not None and ended.summary == "done"
    # The weighted mean of its components (tests 0.5, feedback 0.2: episodes.rewards), not their sum.
    assert ended.step_count == 1 and ended.reward_total == pytest.approx((0.5 - 0.1) / 0.7) and ended.verified
    with pytest.raises(EpisodeClosed, match="already ended with status success"):
        store.end_episode(ep.id, EpisodeStatus.failure)
    assert store.get_episode(ep.id).status is EpisodeStatus.success  # the refused end changed nothing

    detail = store.detail(ep.id)
    assert [s.tool for s in detail.steps] == ["run_tests"]
    assert detail.steps[0].arguments == {"cmd": "pytest"} and detail.steps[0].duration_ms == 12.5
    assert [(r.source, r.value) for r in detail.rewards] == [(RewardSource.tests, 1.0), (RewardSource.feedback, -0.5)]


def test_missing_episode_is_reported_not_created(store: EpisodeStore) -> None:
    with pytest.raises(EpisodeNotFound):
        store.get_episode("ep_nope")
    with pytest.raises(EpisodeNotFound):
        store.end_episode("ep_nope", EpisodeStatus.success)
    with pytest.raises(EpisodeNotFound):
        store.add_step("ep_nope", tool="x", arguments={}, result_summary=None, error=None, duration_ms=0)
    with pytest.raises(EpisodeNotFound):
        store.add_reward("ep_nope", RewardSource.feedback, 1.0)
    assert store.list_episodes() == []


@pytest.mark.parametrize("bad_id", ["\ud800", "a\udfffb", "ép_1"])
def test_an_id_no_episode_can_have_is_not_found_rather_than_a_crash(store: EpisodeStore, bad_id: str) -> None:
    """A lone surrogate (JSON's "\\ud800" in a tool argument) cannot be sent to SQLite at all."""
    with pytest.raises(EpisodeNotFound):
        store.get_episode(bad_id)
    with pytest.raises(EpisodeNotFound):
        store.end_episode(bad_id, EpisodeStatus.success)
    with pytest.raises(EpisodeNotFound):
        store.add_step(bad_id, tool="x", arguments={}, result_summary=None, error=None, duration_ms=0)
    with pytest.raises(EpisodeNotFound):
        store.add_reward(bad_id, RewardSource.feedback, 1.0)
    with pytest.raises(EpisodeNotFound):
        store.turns.turn_context(bad_id)
    with pytest.raises(EpisodeNotFound):
        store.turns.add_policy_turn(bad_id, EncodedTurn.of(model="m", request={}, choice={}))
    with pytest.raises(EpisodeNotFound):
        store.detail(bad_id)


def test_rewards_outside_the_range_are_refused(store: EpisodeStore) -> None:
    ep = store.start_episode("t")
    for bad in (1.01, -2.0):
        with pytest.raises(ValueError, match=r"\[-1, 1\]"):
            store.add_reward(ep.id, RewardSource.judge, bad)
    # The database enforces it too, for writers that bypass the store.
    with pytest.raises(StoreError), store.db.transaction(write=True) as cur:
        cur.execute("INSERT INTO rewards (episode_id, source, value, created_at) VALUES (?, 'judge', 3.0, 0)", (ep.id,))
    assert store.get_episode(ep.id).reward_total is None
    with pytest.raises(ValueError, match="not open"):
        store.end_episode(ep.id, EpisodeStatus.open)


def test_secrets_are_redacted_before_storage(store: EpisodeStore) -> None:
    ep = store.start_episode("deploy with OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx1234")
    store.add_step(
        ep.id,
        tool="run_code",
        arguments={
            "code": "requests.get(url, headers={'Authorization': 'Bearer abcdefghijklmnop12345678'})",
            "env": {"api_key": "hunter2hunter2"},
        },
        result_summary="connected to postgresql://admin:s3cretpw@db.internal:5432/prod",
        error="ghp_0123456789abcdefghijklmnopqrstuvwxyz0 rejected",
        duration_ms=1,
    )
    store.add_reward(ep.id, RewardSource.feedback, 1, "works; my password=letmein123")
    detail = store.detail(ep.id)
    stored = detail.model_dump_json()
    for secret in (
        "sk-proj-abcdefghijklmnopqrstuvwx1234",
        "abcdefghijklmnop12345678",
        "hunter2hunter2",
        "s3cretpw",
        "ghp_0123456789abcdefghijklmnopqrstuvwxyz0",
        "letmein123",
    ):
        assert secret not in stored
    assert "[REDACTED:" in detail.episode.task and "postgresql://admin:[REDACTED" in (
        detail.steps[0].result_summary or ""
    )


def test_workspace_files_sent_with_every_call_are_stored_once(store: EpisodeStore) -> None:
    """An agent sends its files with every run_tests: each long text lands in the log once, the
    steps read back whole, and a secret in a file is redacted before it is stored at all."""
    ep = store.start_episode("fix the parser")
    module = "def parse(text):\n    return text.split()\n" * 40
    secret = "ghp_" + "Z9y8" * 9
    calls = [
        {
            "files": {"parse.py": module, f"test_{n}.py": f"# case {n}\n" + "assert parse('a b')\n" * 80, "x.py": "1"},
            "test_command": "pytest -q",
            "settings": [{"env": f"TOKEN={secret}\n" + "DEBUG=1\n" * 200}],
        }
        for n in range(4)
    ]
    for arguments in calls:
        store.add_step(ep.id, tool="run_tests", arguments=arguments, result_summary="ok", error=None, duration_ms=9)
    steps = store.detail(ep.id).steps
    assert [s.arguments for s in steps] == [redact(a) for a in calls]
    assert secret not in str(steps) and "[REDACTED:" in steps[0].arguments["settings"][0]["env"]
    with store.db.transaction(write=False) as cur:
        blobs = [r[0] for r in cur.execute("SELECT text FROM blobs").fetchall()]
        rows = [r[0] for r in cur.execute("SELECT arguments FROM steps WHERE episode_id = ?", (ep.id,)).fetchall()]
    assert len(blobs) == 1 + 4 + 1  # the module and the env once, each call's own test file
    assert all(secret not in text for text in blobs)
    assert all(len(row) < 600 for row in rows)  # the texts are refs in the step rows

    with store.db.transaction(write=True) as cur:
        cur.execute("DELETE FROM blobs WHERE text LIKE ?", ("%case 2%",))
    with pytest.raises(StoreError, match=f"step {steps[2].id} of episode {ep.id} refers to a text the log does not"):
        store.detail(ep.id)


def test_long_text_is_clipped_with_a_marker(store: EpisodeStore) -> None:
    ep = store.start_episode("t")
    store.add_step(
        ep.id, tool="x", arguments={}, result_summary="a" * (MAX_TEXT_CHARS + 500), error=None, duration_ms=1
    )
    summary = store.detail(ep.id).steps[0].result_summary or ""
    assert summary.startswith("a" * MAX_TEXT_CHARS) and summary.endswith("[500 more characters not stored]")


def test_list_filters_orders_and_pages(store: EpisodeStore) -> None:
    ids = []
    for i in range(5):
        ep = store.start_episode(f"task {i}")
        ids.append(ep.id)
        time.sleep(0.002)  # distinct created_at, so the order is defined
    store.end_episode(ids[1], EpisodeStatus.failure)
    newest_first = [e.id for e in store.list_episodes()]
    assert newest_first == ids[::-1]
    assert [e.id for e in store.list_episodes(status=EpisodeStatus.failure)] == [ids[1]]
    assert [e.id for e in store.list_episodes(limit=2, offset=2)] == ids[::-1][2:4]
    assert store.list_episodes(source=EpisodeSource.policy) == []


def test_idle_open_episodes_time_out(store: EpisodeStore) -> None:
    old = store.start_episode("abandoned")
    with store.db.transaction(write=True) as cur:
        cur.execute("UPDATE episodes SET updated_at = updated_at - 10000 WHERE id = ?", (old.id,))
    fresh = store.start_episode("active")
    assert len(store.expire_idle(3600)) == 1
    assert store.get_episode(old.id).status is EpisodeStatus.timeout
    assert store.get_episode(fresh.id).status is EpisodeStatus.open


def test_migrations_apply_once_on_a_blank_log(store_url: str) -> None:
    db = connect(store_url)
    try:
        assert migrate(db) == [m.name for m in MIGRATIONS]
        assert migrate(db) == []
        assert applied(db) == sorted(m.name for m in MIGRATIONS)
    finally:
        db.close()


def test_a_frozen_old_log_is_migrated_with_its_data(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    shutil.copy(FROZEN_V1, path)
    store = EpisodeStore.open(str(path))
    try:
        assert applied(store.db) == [m.name for m in MIGRATIONS]
        ep = store.get_episode("ep_frozen1")
        assert (ep.task, ep.status, ep.source, ep.step_count, ep.reward_total) == (
            "fix the parser",
            EpisodeStatus.success,
            EpisodeSource.external,
            1,
            1.0,
        )
        assert store.detail(ep.id).steps[0].arguments == {"task": "fix the parser"}
        assert store.integrity_check() == []
    finally:
        store.close()


def test_a_log_from_a_newer_rlide_is_refused(tmp_path: Path) -> None:
    db = SQLiteDatabase(tmp_path / "new.db")
    migrate(db, (*MIGRATIONS, Migration("9999_from_the_future", ("CREATE TABLE future (x INTEGER)",))))
    with pytest.raises(StoreError, match="newer rlide"):
        migrate(db)
    db.close()


def test_concurrent_first_opens_migrate_once(store_url: str) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def opener() -> None:
        try:
            barrier.wait()
            EpisodeStore.open(store_url).close()
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    db = connect(store_url)
    assert applied(db) == sorted(m.name for m in MIGRATIONS)
    db.close()


def test_unsupported_urls_are_explained() -> None:
    with pytest.raises(StoreError, match="sqlite:///PATH or postgresql://"):
        connect("mysql://root:pw@localhost/x")
    with pytest.raises(StoreError) as info:
        connect("postgresql://u:topsecret@127.0.0.1:1/db")
    assert "topsecret" not in str(info.value)


@pytest.mark.timeout(20)  # a hang guard: a write that waited would sit out the 30 s busy timeout
def test_a_write_that_would_wait_says_so_instead(tmp_path: Path) -> None:
    import sqlite3

    from episodes.db import StoreBusy

    store = EpisodeStore.open(str(tmp_path / "e.db"))
    ep = store.start_episode("t")
    other = sqlite3.connect(tmp_path / "e.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process is writing
    try:
        with pytest.raises(StoreBusy):
            store.add_step(ep.id, tool="x", arguments={}, result_summary=None, error=None, duration_ms=1, wait=False)
        done = threading.Event()

        def waiting_write() -> None:
            store.add_step(ep.id, tool="y", arguments={}, result_summary=None, error=None, duration_ms=1)
            done.set()

        writer = threading.Thread(target=waiting_write)
        writer.start()
        assert not done.wait(0.3)  # the waiting write waits for the lock ...
    finally:
        other.execute("COMMIT")
        other.close()
    writer.join(10)
    assert done.is_set()  # ... and lands once it is free
    assert [s.tool for s in store.detail(ep.id).steps] == ["y"]
    store.close()


def test_postgres_writes_never_run_in_place(postgres_server: PostgresServer) -> None:
    from episodes.db import StoreBusy

    store = EpisodeStore.open(postgres_server.create_database())
    ep = store.start_episode("t")
    with pytest.raises(StoreBusy):
        store.add_step(ep.id, tool="x", arguments={}, result_summary=None, error=None, duration_ms=1, wait=False)
    store.close()
