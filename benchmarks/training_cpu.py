"""CPU training figures: seconds per GRPO step, trainer tokens/s, reward per step, gateway overhead.

    python benchmarks/training_cpu.py [--steps 8] [--requests 2000] [--http-rounds 2000] [--out DIR]

Prints one JSON object; writes DIR/training_cpu.json and DIR/training_cpu_reward.png.
The trainer is the real `cpu` backend (tiny Qwen2, ART tokenize/pack/loss, LoRA) driven by the
real worker on the toy task. Gateway overhead is measured against a bare endpoint that calls the
same engine, so the difference is the gateway's own work; the engine is a constant one so model
time does not drown the figure. Twice: in-process over ASGI (`gateway`: precise, but whatever runs
after an answer counts), and over loopback HTTP to uvicorn in a child process (`gateway_http`:
what a client sees, with the noise of two processes and the network stack; the client is a bare
socket, so its own work is the same for every URL). Beside the recorded route, `gateway_http` also
times its floors (`FloorGateway`): the episode route recording nothing, and recording only a raw
append to a file.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from episodes.policy_turns import EncodedTurn  # noqa: E402
from episodes.rows import json_text  # noqa: E402
from episodes.store import EpisodeStore  # noqa: E402
from training.backends.base import BackendConfig  # noqa: E402
from training.gateway.app import Gateway, completion_response  # noqa: E402
from training.gateway.engines import Completion, PriorTurn  # noqa: E402


def train_figures(workdir: Path, steps: int) -> dict[str, Any]:
    from training.worker.config import WorkerConfig
    from training.worker.loop import train

    cfg = WorkerConfig(
        database_url=str(workdir / "episodes.db"), backend=BackendConfig(path=workdir / "art"), max_steps=steps
    )
    started = time.perf_counter()
    report = train(cfg, daemon=True)
    wall = time.perf_counter() - started
    store = EpisodeStore.open(cfg.database_url)
    records = store.runs.training_steps(cfg.run)
    store.close()
    step_s = [r.metrics["perf/step_seconds"] for r in records]
    return {
        "steps": report.steps_trained,
        "wall_seconds_including_start": round(wall, 2),
        "seconds_per_step_median": round(statistics.median(step_s), 3),
        "sample_seconds_per_step_median": round(
            statistics.median(r.metrics["perf/sample_seconds"] for r in records), 3
        ),
        "train_seconds_per_step_median": round(statistics.median(r.metrics["perf/train_seconds"] for r in records), 3),
        "trainer_tokens_per_second_median": round(
            statistics.median(r.metrics["perf/tokens_per_second"] for r in records), 1
        ),
        "tokens_per_step_median": statistics.median(r.metrics["perf/tokens"] for r in records),
        "reward_per_step": [round(r.reward_mean or 0.0, 4) for r in records],
        "groups_trained": report.groups_trained,
        "groups_skipped_zero_variance": report.groups_skipped_zero_variance,
        "groups_skipped_stale": report.groups_skipped_stale,
    }


class ConstantEngine:
    """A `PolicyEngine` that answers instantly, so only the HTTP layers are timed. By default a
    3-token answer to a 20-token prompt; `tokens`/`prompt_tokens` make it an agent's real turn."""

    model_id = "student"
    checkpoint_step = 0

    def __init__(self, tokens: int = 3, prompt_tokens: int = 20) -> None:
        ids = [5, 6, 2] if tokens == 3 else [(7 * i) % 32000 for i in range(tokens)]
        lp = [
            {
                "token": f"token_id:{i}",
                "logprob": -0.5 if tokens == 3 else -1 / (k + 3),
                "bytes": [65],
                "top_logprobs": [],
            }
            for k, i in enumerate(ids)
        ]
        self.completion = Completion(
            choices=[
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "42" if tokens == 3 else "x = 1\n" * (tokens // 4)},
                    "logprobs": {"content": lp, "refusal": None},
                }
            ],
            prompt_token_ids=list(range(prompt_tokens)),
            completion_token_ids=[ids],
            checkpoint_step=0,
        )

    def refresh(self) -> int:
        return 0

    def complete(
        self,
        messages: Any,
        *,
        n: int,
        max_tokens: int,
        temperature: float,
        seed: Any,
        tools: Any,
        prior: PriorTurn | None = None,
        stop: list[str] | None = None,
        top_p: float = 1.0,
        options: dict[str, Any] | None = None,
    ) -> Completion:
        return self.completion


async def _time_requests(
    app: Any, path: str, body: dict[str, Any] | Callable[[], dict[str, Any]], n: int
) -> list[float]:
    """Median-ready timings of `n` POSTs; `body` may be a function giving each request its own."""
    import httpx

    next_body = body if callable(body) else lambda: body
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        for _ in range(50):  # warm up
            await client.post(path, json=next_body())
        times = []
        for _ in range(n):
            payload = next_body()
            t = time.perf_counter()
            resp = await client.post(path, json=payload)
            times.append(time.perf_counter() - t)
            if resp.status_code != 200:
                raise RuntimeError(f"{path}: {resp.status_code} {resp.text}")
    return times


def bare_app_of(engine: ConstantEngine) -> Any:
    """ "Calling the endpoint directly": the same engine behind one plain Starlette route."""
    import anyio
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def bare(request: Request) -> JSONResponse:
        body = await request.json()
        completion = await anyio.to_thread.run_sync(
            lambda: engine.complete(body["messages"], n=1, max_tokens=8, temperature=1.0, seed=None, tools=None)
        )
        return JSONResponse(completion_response("student", completion, True))

    return Starlette(routes=[Route("/v1/chat/completions", bare, methods=["POST"])])


def gateway_figures(workdir: Path, n: int) -> dict[str, Any]:
    engine = ConstantEngine()
    # An agent's real turn: 256 tokens with logprobs after a ~6,000-token conversation (the long body).
    agent_engine = ConstantEngine(tokens=256, prompt_tokens=6000)
    store = EpisodeStore.open(str(workdir / "gateway.db"))
    gateway = Gateway(engine, store)
    agent_gateway = Gateway(agent_engine, store)

    bare_app = bare_app_of(engine)
    bare_agent_app = bare_app_of(agent_engine)
    body = {
        "model": "student",
        "messages": [{"role": "user", "content": "Write a number."}],
        "max_tokens": 8,
        "logprobs": True,
    }
    # An agent's later turns carry the whole conversation: 40 messages of code-like text, 24 KB,
    # of which the last is new with each request (the turns before it were seen by earlier calls).
    line = "    result = compute_reward(episode, verifier=tests)  # check the tool output here\n"
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}\n" + line * 7} for i in range(39)]
    turns = itertools.count()

    def long_body() -> dict[str, Any]:
        last = {"role": "user", "content": f"turn {next(turns)}\n" + line * 7}
        return {**body, "messages": [*history, last]}

    from episodes.records import EpisodeSource

    episode = store.start_episode("bench", source=EpisodeSource.policy)
    long_episode = store.start_episode("bench long", source=EpisodeSource.policy)
    recorded = f"/episodes/{episode.id}/v1/chat/completions"
    recorded_long = f"/episodes/{long_episode.id}/v1/chat/completions"
    agent_episode = store.start_episode("bench agent", source=EpisodeSource.policy)
    recorded_agent = f"/episodes/{agent_episode.id}/v1/chat/completions"

    async def run_all() -> dict[str, list[float]]:
        # Interleave rounds so drift in machine load hits every case alike.
        out: dict[str, list[float]] = {
            "bare": [],
            "gateway": [],
            "gateway_recorded": [],
            "bare_long": [],
            "gateway_recorded_long": [],
            "bare_agent": [],
            "gateway_recorded_agent": [],
        }
        rounds = 4
        for _ in range(rounds):
            out["bare"] += await _time_requests(bare_app, "/v1/chat/completions", body, n // rounds)
            out["gateway"] += await _time_requests(gateway.app, "/v1/chat/completions", body, n // rounds)
            out["gateway_recorded"] += await _time_requests(gateway.app, recorded, body, n // (4 * rounds))
            out["bare_long"] += await _time_requests(bare_app, "/v1/chat/completions", long_body, n // (4 * rounds))
            out["gateway_recorded_long"] += await _time_requests(
                gateway.app, recorded_long, long_body, n // (4 * rounds)
            )
            out["bare_agent"] += await _time_requests(
                bare_agent_app, "/v1/chat/completions", long_body, n // (4 * rounds)
            )
            out["gateway_recorded_agent"] += await _time_requests(
                agent_gateway.app, recorded_agent, long_body, n // (4 * rounds)
            )
        return out

    times = asyncio.run(run_all())
    # What the log holds per agent turn (each repeats a 25 KB conversation and 6,000 prompt ids),
    # against the size of the same turn whole: turns store only what they add to the one before.
    with store.db.transaction(write=False) as cur:
        stored = [
            r[0]
            for r in cur.execute(
                "SELECT length(request) + length(choice) + coalesce(length(prompt_token_ids), 0)"
                " + coalesce(length(completion_token_ids), 0) FROM policy_turns WHERE episode_id = ?",
                (agent_episode.id,),
            )
        ]
    whole = [
        sum(len(json_text(v)) for v in (t.request, t.choice, t.prompt_token_ids, t.completion_token_ids))
        for t in store.turns.policy_turns(agent_episode.id)
    ]
    # For context: what one durable policy-turn write costs on its own (the recorded path's floor).
    choice = {"__choice__": engine.completion.choices[0]}

    def write_turns(count: int) -> None:
        for _ in range(count):
            store.turns.add_policy_turn(
                episode.id,
                EncodedTurn.of(
                    model="m",
                    request=body,
                    choice=choice,
                    prompt_token_ids=list(range(20)),
                    completion_token_ids=[5, 6, 2],
                ),
            )

    write_turns(20)  # warm-up
    t = time.perf_counter()
    write_turns(200)
    write_us = (time.perf_counter() - t) / 200 * 1e6
    store.close()
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    return {
        "requests": {k: len(v) for k, v in times.items()},
        "bare_endpoint_us_median": round(med["bare"], 1),
        "gateway_us_median": round(med["gateway"], 1),
        "gateway_recorded_us_median": round(med["gateway_recorded"], 1),
        "gateway_overhead_us": round(med["gateway"] - med["bare"], 1),
        "gateway_recorded_overhead_us": round(med["gateway_recorded"] - med["bare"], 1),
        "long_request_bytes": len(json.dumps(long_body())),
        "bare_endpoint_long_us_median": round(med["bare_long"], 1),
        "gateway_recorded_long_overhead_us": round(med["gateway_recorded_long"] - med["bare_long"], 1),
        "bare_endpoint_agent_turn_us_median": round(med["bare_agent"], 1),
        "gateway_recorded_agent_turn_overhead_us": round(med["gateway_recorded_agent"] - med["bare_agent"], 1),
        "agent_turn_log_bytes_median": statistics.median(stored),
        "agent_turn_whole_bytes_median": statistics.median(whole),
        "sqlite_turn_write_us": round(write_us, 1),
        "goal_overhead_us": 50,
    }


class FloorGateway(Gateway):
    """The gateway with its recording taken out, as lower bounds for the recorded route: an episode
    request is routed, parsed and sampled like any other and then records nothing, or (`journal`)
    only appends the raw turn's JSON to a file, which is the least any recording design has to do
    on the request path for a turn the client received to outlive a killed process (redaction,
    encoding and the log's write could all come after the answer)."""

    def __init__(self, engine: ConstantEngine, store: EpisodeStore, journal: Path | None) -> None:
        super().__init__(engine, store)
        self._journal = None if journal is None else os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def _complete(self, episode_id: str | None, args: dict[str, Any]) -> Completion:
        completion = self.engine.complete(**args)
        if episode_id is not None and self._journal is not None:
            turn = [episode_id, time.time(), args, completion.choices[0], completion.prompt_token_ids]
            os.write(self._journal, orjson.dumps([*turn, completion.completion_token_ids[0]]) + b"\n")
        return completion


def serve_http(database: str) -> None:
    """The `--serve-http` child: the bare endpoint, the gateway and its two `FloorGateway`s over
    one constant engine, each on its own loopback port, served by uvicorn in one event loop;
    prints the ports, then serves."""
    import socket

    import uvicorn

    engine = ConstantEngine()
    store = EpisodeStore.open(database)
    journal = Path(database).with_suffix(".journal")
    apps = [
        bare_app_of(engine),
        Gateway(engine, store).app,
        FloorGateway(engine, store, None).app,
        FloorGateway(engine, store, journal).app,
    ]
    sockets = []
    for _ in apps:
        sock = socket.socket()
        # Accepted connections inherit it. Without it, on sockets handed to uvicorn, a reply written
        # in two parts waited out the client's delayed ACK: 40 ms a request here.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
    print(json.dumps([sock.getsockname()[1] for sock in sockets]), flush=True)

    async def serve_all() -> None:
        servers = [uvicorn.Server(uvicorn.Config(app, log_level="warning")) for app in apps]
        await asyncio.gather(*(server.serve(sockets=[sock]) for server, sock in zip(servers, sockets, strict=True)))

    asyncio.run(serve_all())


class KeepAliveClient:
    """One keep-alive HTTP/1.1 connection that sends one prepared POST again and again. The client's
    own work per request is a send and a read, the same for every URL: httpx spent ~1 ms of Python
    per request here, and more on a longer URL, which the episode routes have."""

    def __init__(self, port: int, path: str, body: bytes) -> None:
        import socket

        for _ in range(100):  # until the server listens
            try:
                self._sock = socket.create_connection(("127.0.0.1", port))
                break
            except ConnectionRefusedError:
                time.sleep(0.1)
        else:
            raise RuntimeError(f"nothing listens on port {port}")
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        self._request = f"{head}content-length: {len(body)}\r\n\r\n".encode() + body
        self._path = path

    def post(self) -> None:
        self._sock.sendall(self._request)
        data = b""
        while b"\r\n\r\n" not in data:
            data += self._recv()
        head, body = data.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        while len(body) < int(headers["content-length"]):
            body += self._recv()
        if not lines[0].startswith("HTTP/1.1 200"):
            raise RuntimeError(f"{self._path}: {lines[0]} {body[:300]!r}")

    def _recv(self) -> bytes:
        chunk = self._sock.recv(65536)
        if not chunk:
            raise RuntimeError(f"{self._path}: the server closed the connection")
        return chunk

    def close(self) -> None:
        self._sock.close()


def http_gateway_figures(workdir: Path, rounds: int) -> dict[str, Any]:
    """The gateway's overhead as a client over loopback HTTP sees it: uvicorn in a child process,
    one `KeepAliveClient` per kind of request (bare, unrecorded, recorded, and the recorded route's
    two floors, `FloorGateway`), one request of each kind per round in an order that rotates;
    overheads are medians of the per-round differences, so drift in the machine's speed cancels."""
    import subprocess

    from episodes.records import EpisodeSource

    database = str(workdir / "http.db")
    store = EpisodeStore.open(database)
    episode = store.start_episode("bench http", source=EpisodeSource.policy)
    store.close()
    child = subprocess.Popen(
        [sys.executable, "-P", __file__, "--serve-http", database], stdout=subprocess.PIPE, text=True
    )
    clients: dict[str, KeepAliveClient] = {}
    try:
        assert child.stdout is not None
        bare_port, gateway_port, floor_port, journal_port = json.loads(child.stdout.readline())
        episode_path = f"/episodes/{episode.id}/v1/chat/completions"
        body = {"model": "student", "messages": [{"role": "user", "content": "Write a number."}], "logprobs": True}
        for key, port, path in [
            ("bare", bare_port, "/v1/chat/completions"),
            ("unrecorded", gateway_port, "/v1/chat/completions"),
            ("recorded", gateway_port, episode_path),
            ("episode_route_only", floor_port, episode_path),
            ("journal_append_only", journal_port, episode_path),
        ]:
            clients[key] = KeepAliveClient(port, path, json.dumps(body).encode())
        order = list(clients.items())
        for _ in range(200):  # warm up
            for _, client in order:
                client.post()
        times: dict[str, list[float]] = {key: [] for key in clients}
        for i in range(rounds):
            for key, client in order[i % len(order) :] + order[: i % len(order)]:  # each kind first as often
                t = time.perf_counter()
                client.post()
                times[key].append(time.perf_counter() - t)
    finally:
        for client in clients.values():
            client.close()
        child.terminate()
        child.wait()

    def overhead(key: str) -> float:
        return round(statistics.median(a - b for a, b in zip(times[key], times["bare"], strict=True)) * 1e6, 1)

    return {
        "rounds": rounds,
        "bare_endpoint_us_median": round(statistics.median(times["bare"]) * 1e6, 1),
        "gateway_overhead_us": overhead("unrecorded"),
        "gateway_recorded_overhead_us": overhead("recorded"),
        "floor_episode_route_overhead_us": overhead("episode_route_only"),
        "floor_journal_append_overhead_us": overhead("journal_append_only"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--http-rounds", type=int, default=2000, help="rounds of the loopback HTTP figures (0: none)")
    parser.add_argument("--serve-http", metavar="DATABASE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_http:
        serve_http(args.serve_http)
        return
    import logging

    import structlog

    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    with tempfile.TemporaryDirectory(prefix="rlide-bench-") as tmp:
        work = Path(tmp)
        figures: dict[str, Any] = {
            "benchmark": "training_cpu",
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
        }
        figures["gateway"] = gateway_figures(work, args.requests)
        if args.http_rounds:
            figures["gateway_http"] = http_gateway_figures(work, args.http_rounds)
        if not args.skip_training:
            figures["training"] = train_figures(work, args.steps)
    args.out.mkdir(parents=True, exist_ok=True)
    if "training" in figures:
        from training.worker.plot import plot_series

        rewards = figures["training"]["reward_per_step"]
        png = plot_series(
            {"toy task": list(enumerate(rewards, start=1))},
            args.out / "training_cpu_reward.png",
            title="tiny Qwen2 on CPU, GRPO (ART loss): reward per step",
        )
        figures["training"]["png"] = str(png)
    (args.out / "training_cpu.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
