"""An in-process fake of the turbopuffer HTTP endpoints that memory.stores.turbopuffer uses.

It is plugged in through the client's own `http_client=` option as an `httpx2` transport, so the
real `turbopuffer` client code (serialisation, paths, errors, retries) runs unchanged. It follows
the public API docs: namespaces appear on first write, every document of a namespace with vectors
must carry one, `$dist` is the cosine distance for ANN and the BM25 score for text ranking,
multi-query `rerank_by: ["RRF", {...}]` fuses subquery rows into one result.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
from collections import Counter
from typing import Any

import httpx2

from memory.ranking import glob_match

_NS_PATH = re.compile(r"^/v[12]/namespaces/([A-Za-z0-9_.\-]{1,128})(/query)?$")


class FakeTurbopuffer(httpx2.BaseTransport):
    def __init__(self) -> None:
        self.namespaces: dict[str, dict[str, dict[str, Any]]] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path) for assertions

    # -- transport ------------------------------------------------------------------------------
    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append((request.method, request.url.path))
        if not request.headers.get("authorization", "").startswith("Bearer "):
            return self._error(401, "missing API key")
        match = _NS_PATH.match(request.url.path)
        if match is None:
            return self._error(404, f"no route {request.url.path}")
        name, is_query = match.group(1), match.group(2) is not None
        try:
            if request.method == "DELETE" and not is_query:
                if name not in self.namespaces:
                    return self._error(404, f"namespace {name} not found")
                del self.namespaces[name]
                return self._json({"status": "OK"})
            body = json.loads(request.read() or b"{}")
            if request.method == "POST" and not is_query:
                return self._json(self._write(name, body))
            if request.method == "POST" and is_query:
                if name not in self.namespaces:
                    return self._error(404, f"namespace {name} not found")
                if "queries" in body:
                    return self._json(self._multi_query(name, body))
                return self._json({**self._query(name, body), **self._billing()})
        except ValueError as exc:
            return self._error(400, str(exc))
        return self._error(405, "method not allowed")

    @staticmethod
    def _json(payload: dict[str, Any]) -> httpx2.Response:
        return httpx2.Response(200, json=payload)

    @staticmethod
    def _error(status: int, message: str) -> httpx2.Response:
        return httpx2.Response(status, json={"status": "error", "error": message})

    @staticmethod
    def _billing() -> dict[str, Any]:
        return {
            "billing": {"billable_logical_bytes_queried": 0, "billable_logical_bytes_returned": 0},
            "performance": {
                "approx_namespace_size": 0,
                "cache_hit_ratio": 1.0,
                "cache_temperature": "hot",
                "exhaustive_search_count": 0,
                "query_execution_ms": 0,
                "server_total_ms": 0,
            },
        }

    # -- writes ---------------------------------------------------------------------------------
    def _write(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        docs = self.namespaces.setdefault(name, {})
        affected = 0
        for doc_id in body.get("deletes", []):
            affected += docs.pop(str(doc_id), None) is not None
        if "delete_by_filter" in body:
            for doc_id in [i for i, d in docs.items() if _matches(d, body["delete_by_filter"])]:
                del docs[doc_id]
                affected += 1
        schema = body.get("schema", {})
        for row in body.get("upsert_rows", []):
            doc_id = str(row["id"])
            if len(doc_id.encode()) > 64:
                raise ValueError(f"document id longer than 64 bytes: {doc_id}")
            if "vector" not in row or row["vector"] is None:
                raise ValueError("a namespace with a vector index needs a vector on every document")
            for column, spec in schema.items():
                pre_tokenized = spec.get("full_text_search", {}).get("tokenizer") == "pre_tokenized_array"
                value = row.get(column, [])
                if pre_tokenized and (not isinstance(value, list) or not all(isinstance(t, str) for t in value)):
                    raise ValueError(f"{column} must be an array of strings for pre_tokenized_array")
            docs[doc_id] = dict(row, id=doc_id, vector=_vector(row["vector"]))
            affected += 1
        return {
            "status": "OK",
            "message": "ok",
            "rows_affected": affected,
            "billing": {"billable_logical_bytes_written": 0},
        }

    # -- queries --------------------------------------------------------------------------------
    def _query(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        docs = [d for d in self.namespaces[name].values() if _matches(d, body.get("filters"))]
        if "aggregate_by" in body:
            aggregations = {}
            for label, spec in body["aggregate_by"].items():
                if list(spec) != ["Count"]:
                    raise ValueError(f"unsupported aggregate {spec}")
                aggregations[label] = len(docs)
            return {"aggregations": aggregations}
        rank_by = body.get("rank_by")
        if rank_by is None:
            raise ValueError("rank_by is required unless aggregate_by is given")
        limit = body.get("top_k", body.get("limit", 10))
        if isinstance(limit, dict):
            limit = limit.get("total", 10)
        ranked = self._rank(name, docs, rank_by)[:limit]
        include = body.get("include_attributes", False)
        return {"rows": [_project(doc, include, dist) for doc, dist in ranked]}

    def _rank(
        self, name: str, docs: list[dict[str, Any]], rank_by: list[Any]
    ) -> list[tuple[dict[str, Any], float | None]]:
        if len(rank_by) == 3 and rank_by[1] == "ANN":
            query = _vector(rank_by[2])
            return sorted(((d, _cosine_distance(d["vector"], query)) for d in docs), key=lambda x: x[1])
        if len(rank_by) == 2 and rank_by[1] in ("asc", "desc"):
            ordered = sorted(docs, key=lambda d: str(d.get(rank_by[0])), reverse=rank_by[1] == "desc")
            return [(d, None) for d in ordered]
        scores = self._text_scores(name, docs, rank_by)
        ranked = [(d, scores[d["id"]]) for d in docs if scores.get(d["id"], 0.0) > 0]
        return sorted(ranked, key=lambda x: (-x[1], x[0]["id"]))

    def _text_scores(self, name: str, docs: list[dict[str, Any]], clause: list[Any]) -> dict[str, float]:
        op = clause[0]
        if op == "Sum":
            total: Counter[str] = Counter()
            for sub in clause[1]:
                total.update(self._text_scores(name, docs, sub))
            return dict(total)
        if op == "Product":
            weight, sub = clause[1], clause[2]
            return {k: weight * v for k, v in self._text_scores(name, docs, sub).items()}
        if len(clause) == 3 and clause[1] == "BM25":
            return self._bm25(name, docs, clause[0], clause[2])
        raise ValueError(f"unsupported rank_by {clause}")

    def _bm25(
        self, name: str, docs: list[dict[str, Any]], column: str, query: Any, k1: float = 1.2, b: float = 0.75
    ) -> dict[str, float]:
        if not isinstance(query, list):
            raise ValueError("BM25 on a pre_tokenized_array column takes an array of tokens")
        corpus = [d for d in self.namespaces[name].values() if column in d]  # IDF over the namespace
        n = len(corpus) or 1
        avg = sum(len(d[column]) for d in corpus) / n or 1.0
        df = Counter(t for d in corpus for t in set(d[column]))
        scores: dict[str, float] = {}
        for d in docs:
            tf = Counter(d.get(column, []))
            length = len(d.get(column, []))
            score = 0.0
            for term in set(query):
                if tf[term]:
                    idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                    score += idf * tf[term] * (k1 + 1) / (tf[term] + k1 * (1 - b + b * length / avg))
            if score:
                scores[d["id"]] = score
        return scores

    def _multi_query(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        results = [self._query(name, q) for q in body["queries"]]
        rerank = body.get("rerank_by")
        if rerank is None:
            return {"results": results, **self._billing()}
        if rerank[0] != "RRF":
            raise ValueError(f"unsupported rerank_by {rerank}")
        params = rerank[1] if len(rerank) > 1 else {}
        k = params.get("rank_constant", 60)
        weights = params.get("weights") or [1.0] * len(results)
        if len(weights) != len(results) or k <= 0:
            raise ValueError("RRF needs one positive weight per subquery and rank_constant > 0")
        fused: dict[str, float] = {}
        rows: dict[str, dict[str, Any]] = {}
        for result, weight in zip(results, weights, strict=True):
            for rank, row in enumerate(result["rows"], start=1):
                fused[row["id"]] = fused.get(row["id"], 0.0) + weight / (k + rank)
                rows.setdefault(row["id"], {key: v for key, v in row.items() if key != "$dist"})
        order = sorted(fused, key=lambda i: -fused[i])[: body.get("limit", 10)]
        return {"results": [{"rows": [dict(rows[i], **{"$dist": fused[i]}) for i in order]}], **self._billing()}


def _vector(value: Any) -> list[float]:
    """The API takes vectors as JSON arrays or as base64 of little-endian f32 (the client's default)."""
    if isinstance(value, str):
        packed = base64.b64decode(value, validate=True)
        return list(struct.unpack(f"<{len(packed) // 4}f", packed))
    if not isinstance(value, list):
        raise ValueError("vector must be an array of numbers or a base64 string")
    return [float(x) for x in value]


def _project(doc: dict[str, Any], include: Any, dist: float | None) -> dict[str, Any]:
    if include is True:
        row = {k: v for k, v in doc.items() if k != "vector"}
    else:
        row = {"id": doc["id"], **{k: doc[k] for k in (include or []) if k in doc}}
    if dist is not None:
        row["$dist"] = dist
    return row


def _cosine_distance(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    na = math.sqrt(sum(x * x for x in a)) or 1.0
    nb = math.sqrt(sum(y * y for y in b)) or 1.0
    return 1.0 - dot / (na * nb)


def _matches(doc: dict[str, Any], flt: Any) -> bool:
    if flt is None:
        return True
    if flt[0] in ("And", "Or"):
        results = (_matches(doc, sub) for sub in flt[1])
        return all(results) if flt[0] == "And" else any(results)
    if flt[0] == "Not":
        return not _matches(doc, flt[1])
    attr, op, value = flt
    have = doc.get(attr)
    if op == "Eq":
        return bool(have == value)
    if op == "NotEq":
        return bool(have != value)
    if op == "In":
        return have in value
    if op == "Gt":
        return have is not None and have > value
    if op == "Lt":
        return have is not None and have < value
    if op == "Glob":
        if "{" in value:  # rlide expands braces itself: whether the real Glob takes them was never checked
            raise ValueError(f"this fake takes no braces in a Glob: {value!r}")
        return isinstance(have, str) and glob_match(value, have)
    raise ValueError(f"unsupported filter operator {op}")
