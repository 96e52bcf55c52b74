"""A GPU run is served and evaluated by the server its worker published, over real HTTP: here a cpu
gateway on a real port stands in for ART's vLLM (it names each checkpoint `student@{step}` and
returns token ids), and `rlide policy serve`'s gateway and `rlide eval`'s engine for a `local` run
forward to it (training/backends/served.py, gateway/engines.policy_engine)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")
import httpx  # noqa: E402
import uvicorn  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from episodes.store import EpisodeStore  # noqa: E402
from tests.training.proxied import assert_proxied_turn_recorded  # noqa: E402
from training.backends.base import BackendConfig, BackendError  # noqa: E402
from training.backends.served import Served, publish, published  # noqa: E402
from training.gateway.app import Gateway, build_gateway  # noqa: E402
from training.gateway.engines import ProxyEngine, TransformersEngine, policy_engine  # noqa: E402


@pytest.fixture
def upstream(tmp_path: Path, store: EpisodeStore) -> Iterator[str]:
    """The stand-in policy server on 127.0.0.1, on a free port; its base URL."""
    gateway = Gateway(TransformersEngine(BackendConfig(path=tmp_path / "upstream"), reload_interval_s=0.0), store)
    server = uvicorn.Server(uvicorn.Config(gateway.app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the stand-in server did not start"
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    thread.join(timeout=30)


def test_a_gpu_run_is_served_by_the_server_its_worker_published(tmp_path: Path, upstream: str) -> None:
    config = BackendConfig(backend="local", path=tmp_path / "art", base_model="Qwen/Qwen2.5-1.5B-Instruct", run="gpu-1")
    database_url = str(tmp_path / "proxy.db")
    with pytest.raises(BackendError, match=r"published no policy server.*rlide train --daemon --run gpu-1.*--upstream"):
        build_gateway(config, database_url)

    publish(config.model_dir(), Served(base_url=upstream, model="student", api_key="unused"))
    assert published(config.model_dir()) == Served(upstream, "student", "unused")
    (config.model_dir() / "served.json").write_text("{not json")
    with pytest.raises(BackendError, match="is not a policy server record.*rewrites it when it starts"):
        build_gateway(config, database_url)
    publish(config.model_dir(), Served(base_url=upstream, model="student", api_key="unused"))
    gateway = build_gateway(config, database_url)
    assert_proxied_turn_recorded(gateway, step=0, recorded="student-gpu-1")
    # The context length the upstream states for its model (the cpu engine: the model's positions)
    # is what the proxy states, so an agent sizes its history to it (aider read 0 before).
    [upstream_length] = {m["max_model_len"] for m in httpx.get(f"{upstream}/models").json()["data"]}
    assert isinstance(upstream_length, int) and upstream_length > 0
    listed = TestClient(gateway.app).get("/v1/models").json()["data"]
    assert [m["max_model_len"] for m in listed] == [upstream_length, upstream_length]
    gateway.store.close()

    # eval's engine is the same choice; --upstream overrides what the run published.
    engine = policy_engine(config, committed=lambda: None)
    assert isinstance(engine, ProxyEngine) and engine.refresh() == 0
    given = policy_engine(BackendConfig(path=tmp_path / "art"), upstream=upstream)
    assert isinstance(given, ProxyEngine) and given.upstream_model == "student"
    assert isinstance(policy_engine(BackendConfig(path=tmp_path / "cpu")), TransformersEngine)


def test_a_cpu_endpoint_decodes_with_the_threads_it_is_given(tmp_path: Path) -> None:
    import torch

    from training.gateway.engines import serving_threads

    assert (serving_threads(1), serving_threads(2), serving_threads(16)) == (1, 1, 8)
    before = torch.get_num_threads()
    try:
        engine = policy_engine(BackendConfig(path=tmp_path / "art"), threads=1)
        assert torch.get_num_threads() == 1
        answer = engine.complete(
            [{"role": "user", "content": "Say a word."}], n=1, max_tokens=3, temperature=0.0, seed=0, tools=None
        )
        assert len(answer.completion_token_ids[0]) >= 1
        TransformersEngine(BackendConfig(path=tmp_path / "art"))  # `rlide eval`'s: the process's setting stays
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
