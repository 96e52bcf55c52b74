"""rlide's one settings object: `RLIDE_*` environment variables over an optional `rlide.toml`.

The TOML file is `$RLIDE_CONFIG` if set, else `$RLIDE_HOME/rlide.toml`. Environment variables win
over the file. All state lives under `home`, so one variable (or one test fixture) moves it all.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from common.http_auth import requires_token
from episodes.db import mask_url_password
from episodes.records import RewardSource
from episodes.rewards import COMPONENTS, DEFAULT_WEIGHTS, RewardWeights
from memory.embedding.onnx_model import MinilmVariant

DEFAULT_HOME = Path("~/.local/share/rlide")


def expand_path(path: Path) -> Path:
    """`path` with `~` expanded, made absolute and resolved; a `ValueError` that says why when it
    cannot be (`~name` of an unknown user, a symlink loop), so that pydantic reports it as a bad
    setting instead of crashing."""
    try:
        return path.expanduser().resolve()
    except (OSError, RuntimeError) as exc:
        raise ValueError(f"{str(path)[:200]!r} cannot be used as a path ({exc})") from exc


def implicit_workspace(cwd: Path, home: Path) -> Path | None:
    """The directory the server was started in, as its workspace, unless it is the filesystem root,
    the user's home or a folder above it. Hosts start servers there (Claude Desktop in `/`, Claude
    Code's desktop app in `~`), and indexing or sending that to a sandbox would read a whole machine,
    or every dotfile (`~/.ssh`, `~/.aws`), into search results the agent sees."""
    if cwd.parent == cwd or home.is_relative_to(cwd):
        return None
    return cwd


def _weights(given: dict[RewardSource, float]) -> RewardWeights:
    return replace(DEFAULT_WEIGHTS, **{source.value: weight for source, weight in given.items()})


def config_file() -> Path:
    explicit = os.environ.get("RLIDE_CONFIG")
    if explicit:
        return expand_path(Path(explicit))
    return expand_path(Path(os.environ.get("RLIDE_HOME", str(DEFAULT_HOME)))) / "rlide.toml"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RLIDE_", extra="forbid", validate_default=True)

    home: Path = Field(DEFAULT_HOME, description="Directory holding all of rlide's state.")
    database_url: str | None = Field(
        None, description="Episode log: sqlite:///PATH or postgresql://... Default: SQLite under home."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_file: Path | None = Field(None, description="Write logs here instead of stderr.")
    log_format: Literal["console", "json"] = "console"
    http_host: str = Field("127.0.0.1", description="Bind address for `rlide serve --http`.")
    http_port: int = Field(8765, ge=1, le=65535)
    http_token: SecretStr | None = Field(
        None, description="Bearer token required by the HTTP transport; mandatory off loopback."
    )
    max_result_chars: int = Field(20_000, ge=1_000, description="Largest text a tool returns to the model.")
    episode_idle_timeout_s: float = Field(
        4 * 3600, gt=0, description="Open episodes idle this long are marked timeout."
    )
    reward_weights: dict[RewardSource, float] = Field(
        default_factory=lambda: {source: DEFAULT_WEIGHTS.of(source) for source in COMPONENTS},
        description="How an episode's reward components (tests, outcome, feedback, judge) combine: their "
        "weighted mean (JSON object; a component left out keeps its default weight). docs/rewards.md.",
    )

    workspace: Path | None = Field(
        None, description="Workspace the search tools serve (default: the server's working directory)."
    )
    allowed_roots: list[Path] = Field(
        default_factory=list,
        description="Extra directories index_workspace may index (JSON list). The workspace is always allowed.",
    )
    sandbox: Literal["bwrap", "bwrap-fresh", "docker", "unsafe-local"] = Field(
        "bwrap", description="Where run_code/run_tests run. unsafe-local has no isolation: only by explicit choice."
    )
    pool_envs: int = Field(4, ge=1, le=256, description="Sandboxed environments in the execution pool.")
    test_command: str | None = Field(
        None,
        min_length=1,
        description="The served project's test command (a shell command) instead of rlide's trusted pytest runner;"
        " a project's `[tool.rlide] test_command` wins. Episodes are verified with it: see docs/rewards.md.",
    )
    test_memory_mb: int | None = Field(
        None, ge=64, le=65536, description="Memory a verifier's run of the suite may hold (default 2048)."
    )
    test_timeout_s: float | None = Field(
        None, gt=0, le=600, description="Time a verifier's run of the suite may take (default 300)."
    )
    train_unverified: bool = Field(
        False,
        description="Also train on episodes with no verified reward (only claims: the agent's outcome, its own"
        " rating) or with monitor flags nobody cleared. Off: claims alone never become training data.",
    )
    memory_store: Literal["sqlite", "turbopuffer"] = Field("sqlite", description="Code index store.")
    http_max_body_mb: int = Field(
        32,
        ge=1,
        le=1024,
        description="Largest request body the HTTP transport takes, in MiB (run_code/run_tests files travel in it);"
        " a larger one is refused with 413 naming this setting.",
    )
    index_on_start: bool = Field(
        True,
        description="Index the served workspace in the background when the server starts (keyword search first,"
        " embeddings after), so the first search_code answers.",
    )
    memory_embedder: Literal["onnx-minilm", "openai", "none"] = Field(
        "onnx-minilm", description="onnx-minilm ships in a package; openai uses an OpenAI-compatible endpoint."
    )
    memory_minilm_variant: MinilmVariant = Field(
        "int8-matmul",
        description="MiniLM graph: int8-matmul (prepared once per machine, ~2x faster) or shipped (as packaged).",
    )
    memory_dense_exact_up_to: int | None = Field(
        None,
        ge=0,
        description="Dense search scores every vector up to this many chunks (default 20000); above, it "
        "prefilters on 128 principal components and re-scores the best 40 per result exactly.",
    )
    turbopuffer_api_key: SecretStr | None = None
    turbopuffer_region: str | None = None
    embeddings_base_url: str = "https://api.openai.com/v1"
    embeddings_model: str = "text-embedding-3-small"
    embeddings_api_key: SecretStr | None = None
    training_backend: Literal["cpu", "local", "serverless", "tinker", "art-cpu"] = Field(
        "cpu",
        description="Trainer: cpu (any causal LM with LoRA, no GPU), local (ART on a GPU), serverless (W&B), tinker,"
        " art-cpu (the local adapter over a CPU stand-in of ART's LocalBackend: docs/gpu.md).",
    )
    training_base_model: str = Field(
        "tiny-qwen2",
        description="Base model of the student: tiny-qwen2 (built on the spot; tests), a packaged offline model"
        " (`rlide models list`, e.g. qwen2.5-coder-0.5b-instruct), a local model folder, or a Hugging Face id.",
    )
    policy_host: str = Field("127.0.0.1", description="Bind address for `rlide policy serve`.")
    policy_port: int = Field(8766, ge=1, le=65535, description="Port of the OpenAI-compatible policy endpoint.")
    policy_threads: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="Torch threads a cpu policy endpoint decodes with (default: half the cores, at least one, since"
        " the agents it serves share the machine).",
    )
    policy_token: SecretStr | None = Field(
        None,
        description="Bearer token (an OpenAI client's api_key) for the policy endpoint; mandatory off loopback.",
    )
    episode: SecretStr | None = Field(
        None,
        description="The episode this MCP server's tool calls go to when the agent names none, instead of an"
        " implicit one: the api_key (or episode_id) the policy endpoint's POST /episodes returned, for an agent"
        " run whose model is the student, so its model turns and tool calls are one episode. The session's end"
        " does not end it.",
    )

    @property
    def weights(self) -> RewardWeights:
        return _weights(self.reward_weights)

    @field_validator("reward_weights", mode="after")
    @classmethod
    def _check_weights(cls, value: dict[RewardSource, float]) -> dict[RewardSource, float]:
        _weights(value)  # RewardWeights refuses a negative one
        return value

    @field_validator("home", "log_file", "workspace", mode="after")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        return None if value is None else expand_path(value)

    @field_validator("allowed_roots", mode="after")
    @classmethod
    def _expand_all(cls, value: list[Path]) -> list[Path]:
        return [expand_path(p) for p in value]

    @property
    def served_workspace(self) -> Path | None:
        """`workspace`, else the directory the server was started in (`implicit_workspace`): None
        when that is `/`, the home directory or above it."""
        return self.workspace or implicit_workspace(Path.cwd().resolve(), Path.home().resolve())

    def no_workspace_reason(self) -> str:
        """Why no workspace is served, and what to do about it: for tool errors and the start-up log."""
        return (
            f"no workspace is served: rlide was started in {Path.cwd()}, which it never indexes or sends to a"
            " sandbox unasked (hosts such as Claude Desktop start servers in / or in your home); set"
            " RLIDE_WORKSPACE to your project in the server's environment (`rlide install <host> --workspace"
            " PATH`), or name a folder under RLIDE_ALLOWED_ROOTS"
        )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=config_file()))

    @property
    def episode_db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'episodes.db'}"

    @property
    def http_requires_token(self) -> bool:
        return requires_token(self.http_host)

    def public_dict(self) -> dict[str, object]:
        """The settings as shown to a person: secrets masked, passwords in URLs hidden."""
        data = self.model_dump(mode="json")
        for secret in ("http_token", "policy_token", "episode", "turbopuffer_api_key", "embeddings_api_key"):
            data[secret] = "***" if getattr(self, secret) else None
        data["database_url"] = mask_url_password(self.episode_db_url)
        data["config_file"] = str(config_file())
        return data


def load_settings(**overrides: object) -> Settings:
    return Settings(**overrides)  # type: ignore[arg-type]
