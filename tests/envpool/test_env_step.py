"""`CodingEnv.step` survives any verifier failure: a candidate whose output makes the verifier
raise earns nothing, the step says why, and the env (and the pool worker that hosts it) goes on."""

from __future__ import annotations

import numpy as np
import pytest
import structlog

from envpool.env import CodingEnv, encode_bytes
from envpool.pool import EnvPool, PoolState
from envpool.tasks import load_humaneval
from envpool.tasks.humaneval import CodingTask
from envpool.verifiers.values import OUTPUTS_MARK, Run, Verdict
from tests.envpool.conftest import requires_bwrap

pytestmark = requires_bwrap
ACTION_BYTES = 8192
TASKS = list(load_humaneval()[:2])
DEEP = 200_000

# On its first call, prints a results line nested 200,000 deep and ends the program before it can
# print its own: that is the line the value verifier reads.
DEEP_RESULTS = f"""    import os, sys
    sys.stdout.write("\\n" + {OUTPUTS_MARK!r} + "[" * {DEEP} + "]" * {DEEP} + "\\n")
    sys.stdout.flush()
    os._exit(0)
"""


class ExitStatusVerifier:
    """A real verifier (the program's exit status) that fails on output it cannot read: a line
    `VERDICT <text>` whose text is not a word it knows."""

    def __call__(self, task: CodingTask, answer: str, run: Run, /) -> Verdict:
        ok, stdout = run(task.program(answer), task.timeout_s)
        for line in stdout.splitlines():
            if line.startswith("VERDICT "):
                word = line.split(" ", 1)[1]
                if word not in ("pass", "fail"):
                    raise ValueError(f"cannot read the verdict {word}")
                return Verdict(word == "pass", "")
        return Verdict(ok, "" if ok else "it exited non-zero")


def test_a_candidate_that_breaks_the_value_verifier_earns_nothing_and_the_env_goes_on() -> None:
    env = CodingEnv(tasks=TASKS, sandbox="bwrap")
    try:
        with structlog.testing.capture_logs() as logs:
            obs, reward, terminated, truncated, info = env.step(encode_bytes(DEEP_RESULTS, ACTION_BYTES))
        assert (reward, terminated, truncated) == (0.0, True, False)
        assert info["reward"] == 0.0 and info["next_task_id"] == TASKS[1].task_id
        # Either the verifier refuses the line itself, or step() reports the verifier's failure.
        assert info["detail"], info
        failed = [entry for entry in logs if entry["event"] == "coding_env.verifier_error"]
        assert bool(info["verifier_error"]) == bool(failed)
        _, reward, _, _, info = env.step(encode_bytes(TASKS[1].canonical_solution, ACTION_BYTES))
        assert (reward, info["verifier_error"]) == (1.0, "")
    finally:
        env.close()


def test_a_verifier_that_raises_is_recorded_logged_and_earns_nothing() -> None:
    env = CodingEnv(tasks=TASKS, sandbox="bwrap", verifier=ExitStatusVerifier())
    try:
        hostile = "    print('VERDICT all of them,\\x1b[2J please')\n    return True\n"
        with structlog.testing.capture_logs() as logs:
            _, reward, terminated, _, info = env.step(encode_bytes(hostile, ACTION_BYTES))
        assert (reward, terminated, info["reward"]) == (0.0, True, 0.0)
        # The candidate's text is quoted with its escape character escaped (no terminal control).
        assert info["verifier_error"].startswith("ValueError: cannot read the verdict all of them,\\x1b[2J please")
        assert "test_env_step.py" in info["verifier_error"]  # where the verifier raised
        assert info["status"] == "error"  # the run itself ended as runs do (an assertion of the check)
        assert info["detail"] and info["next_task_id"] == TASKS[1].task_id
        [entry] = [e for e in logs if e["event"] == "coding_env.verifier_error"]
        assert entry["log_level"] == "error" and entry["task_id"] == TASKS[0].task_id
        assert entry["error"] == info["verifier_error"]
        # The env goes on: the next task is judged as usual.
        _, reward, _, _, info = env.step(encode_bytes(TASKS[1].canonical_solution, ACTION_BYTES))
        assert (reward, info["verifier_error"]) == (1.0, "")
    finally:
        env.close()


@pytest.mark.timeout(60)
def test_a_verifier_failure_does_not_stop_a_pool_worker() -> None:
    """Through the pufferlib pool: the worker whose env's verifier raised answers its next step."""
    with EnvPool(num_envs=2, num_workers=2, tasks=TASKS, verifier=ExitStatusVerifier()) as pool:
        _, infos = pool.reset()
        serving = {info["env_id"]: info["task_id"] for info in infos}
        by_id = {t.task_id: t for t in TASKS}
        breaking = "    print('VERDICT maybe')\n    return []\n"
        answers = [breaking if serving[e] == TASKS[0].task_id else by_id[serving[e]].canonical_solution for e in (0, 1)]
        pool.send(np.stack([encode_bytes(a, ACTION_BYTES) for a in answers]))
        _, rewards, _, _, infos, _, _ = pool.recv()
        errors = {info["env_id"]: info["verifier_error"] for info in infos}
        assert errors[0].startswith("ValueError: cannot read the verdict maybe") and errors[1] == ""
        assert {info["env_id"]: float(r) for info, r in zip(infos, rewards, strict=True)} == {0: 0.0, 1: 1.0}
        for info in infos:
            serving[info["env_id"]] = info["next_task_id"]
        pool.send(np.stack([encode_bytes(by_id[serving[e]].canonical_solution, ACTION_BYTES) for e in (0, 1)]))
        _, rewards, _, _, infos, _, _ = pool.recv()
        assert rewards.tolist() == [1.0, 1.0] and [i["verifier_error"] for i in infos] == ["", ""]
        assert pool.state is PoolState.STEPPING
