"""How big a tool result is on the wire, and fitting a result's long texts into the server's limit.

MCPServer sends a tool's pydantic result twice: as structured content, and as a text block holding
the same object as indented JSON; the message escapes that block's text once more. A character of
program output or code thus costs 2 characters of the result (a letter) to 6 (a newline, a quote, a
backslash). A fixed share of the limit per text either wastes it or overflows it: `run_code` with
both streams full, or with output made of quotes and newlines, used to come back as a size error,
and so did `search_code` with its default 10 results from real code.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

import pydantic_core
from mcp_types import CallToolResult
from pydantic import BaseModel

FIT_TRIES = 6
FIT_MARGIN = 0.95  # aim a little under the limit: a budget is a cap per text, not a prediction

Result = TypeVar("Result", bound=BaseModel)


def result_chars(result: dict[str, Any]) -> int:
    """The size of a `tools/call` result that `middleware.ResultSizeLimit` holds to the limit: both
    representations, as the JSON they travel in."""
    content = json.dumps(result.get("content"), ensure_ascii=False, default=str)
    structured = json.dumps(result.get("structuredContent"), ensure_ascii=False, default=str)
    return len(content) + len(structured)


def model_result_chars(model: BaseModel) -> int:
    """`result_chars` of the result MCPServer makes of a tool that returns `model`."""
    text = pydantic_core.to_json(model, indent=2).decode()
    structured = model.model_dump(mode="json")
    return result_chars({"content": [{"type": "text", "text": text}], "structuredContent": structured})


def call_result_chars(result: CallToolResult) -> int:
    """`result_chars` of a tool that builds its own `CallToolResult` (sent as it is)."""
    return result_chars(result.model_dump(mode="json", by_alias=True, exclude_none=True))


def fit_result(
    build: Callable[[int], Result],
    limit: int,
    longest: int,
    measure: Callable[[Result], int] = model_result_chars,
) -> Result:
    """`build(budget)` makes the result with each of its long texts cut to at most `budget`
    characters (every text the same cap: each hit keeps its fair share, and says what was cut);
    `longest` is the longest of those texts. Returns the first result that fits `limit` (as
    `measure` counts it), scaling only the part of the result the budget governs: what is left at
    budget 0 (field names, ids, the notes of what was cut) is fixed, and with many hits it is most
    of the limit. After `FIT_TRIES`, the budget-0 result, which fits whenever anything can (the
    middleware reports one whose fixed part alone is over the limit)."""
    result = build(longest)
    size = measure(result)
    if size <= limit:
        return result
    floor = build(0)
    fixed = measure(floor)
    budget = longest
    for _ in range(FIT_TRIES):
        if fixed >= limit or size <= fixed:
            break
        budget = int(budget * (limit - fixed) / (size - fixed) * FIT_MARGIN)
        result = build(budget)
        size = measure(result)
        if size <= limit:
            return result
    return floor


def clip(text: str | None, limit: int) -> str | None:
    """`text` cut to `limit` characters, saying how many were left out."""
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f"... [{len(text) - limit} more characters]"


def fit_count(build: Callable[[int], Result], limit: int, count: int) -> Result:
    """The result of the first n <= `count` items that fits `limit` (`build(n)` makes it): a listing
    answers with fewer items and a next offset instead of a size error. Never fewer than one item (a
    single item over the limit is the middleware's to report)."""
    result = build(count)
    while count > 1:
        size = model_result_chars(result)
        if size <= limit:
            break
        count = max(1, min(count - 1, int(count * limit / size * FIT_MARGIN)))
        result = build(count)
    return result
