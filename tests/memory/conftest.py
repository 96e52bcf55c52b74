from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memory.embedding.embedders import CachedEmbedder, EmbeddingCache, OnnxMiniLM
from memory.indexing.chunking import chunk_text
from memory.indexing.prepare import make_records
from memory.stores.base import FileState, Store


def index_text(store: Store, path: str, text: str, language: str = "python") -> int:
    """Chunk `text` as the file `path` and write it to `store`, as a sync would; new chunks written."""
    records = make_records(path, language, chunk_text(text, language))
    return store.replace_file(FileState(path, len(text), 1, f"sha-{hash(text)}", language), records)


FIXTURE_FILES: dict[str, str] = {
    "app/users.py": '''"""User accounts."""

import hashlib


class UserRepository:
    """Stores users in memory."""

    def __init__(self):
        self.users = {}

    def add_user(self, name, password):
        """Create a user with a hashed password."""
        self.users[name] = hashlib.sha256(password.encode()).hexdigest()

    def check_password(self, name, password):
        return self.users.get(name) == hashlib.sha256(password.encode()).hexdigest()


def parse_csv_line(line):
    """Split one line of comma separated values."""
    return [field.strip() for field in line.split(",")]
''',
    "web/server.ts": """import http from "http";

export function startServer(port: number): http.Server {
  const server = http.createServer((req, res) => res.end("ok"));
  server.listen(port);
  return server;
}

export class RateLimiter {
  private hits = new Map<string, number>();
  allow(ip: string): boolean {
    const n = (this.hits.get(ip) ?? 0) + 1;
    this.hits.set(ip, n);
    return n < 100;
  }
}
""",
    "cmd/main.go": """package main

import "fmt"

// fibonacci returns the n-th Fibonacci number.
func fibonacci(n int) int {
	if n < 2 {
		return n
	}
	return fibonacci(n-1) + fibonacci(n-2)
}

func main() {
	fmt.Println(fibonacci(10))
}
""",
    "README.md": "# Demo\n\nA small demo project used by the memory tests. It has users, a web server and maths.\n",
    ".gitignore": "ignored/\n*.log\n",
    "ignored/secret.py": "def leaked_secret_function():\n    return 'should never be indexed'\n",
    "debug.log": "log line that should not be indexed at all, not even once\n",
    "node_modules/lib/index.js": "function vendoredThing() { return 'vendored code is skipped'; }\n",
}


def write_repo(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture(autouse=True)
def rlide_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "rlide-home"
    monkeypatch.setenv("RLIDE_HOME", str(home))
    return home


@pytest.fixture(scope="session")
def minilm() -> OnnxMiniLM:
    return OnnxMiniLM()


@pytest.fixture
def embedder(minilm: OnnxMiniLM, tmp_path: Path) -> CachedEmbedder:
    return CachedEmbedder(minilm, EmbeddingCache(tmp_path / "embeddings.sqlite"))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return write_repo(tmp_path / "repo", FIXTURE_FILES)


def make_store(kind: str, tmp_path: Path, model_id: str, dim: int) -> Store:
    if kind == "sqlite":
        from memory.stores.sqlite import SQLiteStore

        return SQLiteStore(tmp_path / "index.sqlite", model_id=model_id, dim=dim)
    pytest.importorskip("turbopuffer", reason="the turbopuffer extra is not installed")
    import httpx2

    from memory.stores.turbopuffer import TurbopufferStore, make_client
    from tests.memory.fake_turbopuffer import FakeTurbopuffer

    fake = FakeTurbopuffer()
    client = make_client(
        api_key="test-key", region=None, base_url="http://turbopuffer.fake", http_client=httpx2.Client(transport=fake)
    )
    store = TurbopufferStore(client, "rlide-test", model_id=model_id, dim=dim)
    store.fake = fake  # type: ignore[attr-defined]
    return store


@pytest.fixture(params=["sqlite", "turbopuffer"])
def store(request: pytest.FixtureRequest, tmp_path: Path, minilm: OnnxMiniLM) -> Iterator[Store]:
    s = make_store(request.param, tmp_path, minilm.model_id, minilm.dim)
    yield s
    s.close()
