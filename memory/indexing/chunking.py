"""Split a source file into search chunks.

With a tree-sitter grammar, a chunk is one definition (function, class, method, type) with its
decorators and doc comment span; a class too big for one chunk becomes a header chunk (its
signature and fields) plus one chunk per method, each carrying the class signature as context.
Code between definitions and files without a grammar are cut into line windows.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tree_sitter import Language, Node, Parser

MAX_CHUNK_CHARS = 2400  # about 600 tokens of code; longer definitions are windowed
MIN_CHUNK_CHARS = 40  # lone braces and one-line gaps are not worth a chunk
WINDOW_LINES = 60
WINDOW_OVERLAP = 10


@dataclass(frozen=True)
class ChunkSpan:
    start_line: int  # 1-based, inclusive
    end_line: int
    kind: str  # function | class | method | type | window | header
    symbol: str  # qualified name, "" for windows
    signature: str  # first line(s) of the definition, or of the enclosing class for methods
    text: str


@dataclass(frozen=True)
class LanguageSpec:
    load: Callable[[], Any]
    definitions: frozenset[str]  # node types that become one chunk
    containers: frozenset[str] = frozenset()  # definitions whose body is split when too big
    wrappers: frozenset[str] = frozenset()  # decorators / export / template around a definition
    bodies: frozenset[str] = field(default_factory=lambda: frozenset({"block", "body"}))


def _py() -> Any:
    import tree_sitter_python

    return tree_sitter_python.language()


def _js() -> Any:
    import tree_sitter_javascript

    return tree_sitter_javascript.language()


def _ts() -> Any:
    import tree_sitter_typescript

    return tree_sitter_typescript.language_typescript()


def _tsx() -> Any:
    import tree_sitter_typescript

    return tree_sitter_typescript.language_tsx()


def _go() -> Any:
    import tree_sitter_go

    return tree_sitter_go.language()


def _rust() -> Any:
    import tree_sitter_rust

    return tree_sitter_rust.language()


def _java() -> Any:
    import tree_sitter_java

    return tree_sitter_java.language()


def _c() -> Any:
    import tree_sitter_c

    return tree_sitter_c.language()


def _cpp() -> Any:
    import tree_sitter_cpp

    return tree_sitter_cpp.language()


_JS_DEFS = frozenset(
    {
        "function_declaration",
        "generator_function_declaration",
        "class_declaration",
        "method_definition",
        "lexical_declaration",
        "interface_declaration",
        "type_alias_declaration",
        "enum_declaration",
        "abstract_class_declaration",
        "module",
        "internal_module",
    }
)
_JS_CONTAINERS = frozenset({"class_declaration", "abstract_class_declaration", "internal_module", "module"})
_C_DEFS = frozenset({"function_definition", "struct_specifier", "enum_specifier", "union_specifier", "type_definition"})

SPECS: dict[str, LanguageSpec] = {
    "python": LanguageSpec(
        _py,
        frozenset({"function_definition", "class_definition"}),
        frozenset({"class_definition"}),
        frozenset({"decorated_definition"}),
    ),
    "javascript": LanguageSpec(_js, _JS_DEFS, _JS_CONTAINERS, frozenset({"export_statement"})),
    "typescript": LanguageSpec(_ts, _JS_DEFS, _JS_CONTAINERS, frozenset({"export_statement"})),
    "tsx": LanguageSpec(_tsx, _JS_DEFS, _JS_CONTAINERS, frozenset({"export_statement"})),
    "go": LanguageSpec(_go, frozenset({"function_declaration", "method_declaration", "type_declaration"})),
    "rust": LanguageSpec(
        _rust,
        frozenset(
            {
                "function_item",
                "impl_item",
                "struct_item",
                "enum_item",
                "trait_item",
                "mod_item",
                "macro_definition",
                "union_item",
            }
        ),
        frozenset({"impl_item", "trait_item", "mod_item"}),
        frozenset({"attribute_item"}),
    ),
    "java": LanguageSpec(
        _java,
        frozenset(
            {
                "class_declaration",
                "interface_declaration",
                "enum_declaration",
                "record_declaration",
                "method_declaration",
                "constructor_declaration",
                "annotation_type_declaration",
            }
        ),
        frozenset({"class_declaration", "interface_declaration", "enum_declaration", "record_declaration"}),
    ),
    "c": LanguageSpec(_c, _C_DEFS),
    "cpp": LanguageSpec(
        _cpp,
        _C_DEFS | {"class_specifier", "namespace_definition", "template_declaration"},
        frozenset({"class_specifier", "struct_specifier", "namespace_definition"}),
        frozenset({"template_declaration"}),
    ),
}
# Where a definition sits inside a declaration statement (C `struct x {..};`), chunk the statement.
_C_STATEMENTS = frozenset({"declaration", "expression_statement"})


def has_grammar(language: str) -> bool:
    return language in SPECS


def chunk_text(text: str, language: str) -> list[ChunkSpan]:
    """Chunks of one file's text; windows when there is no grammar or parsing fails."""
    if not text.strip():
        return []
    if language in SPECS:
        try:
            return _Chunker(text, SPECS[language]).run()
        except (ValueError, RecursionError) as exc:  # tree-sitter refuses; fall back, keep going
            # Imported here: the indexer's worker processes import this module, and structlog
            # (with rich) is 0.2 s of a worker's start for a line it rarely writes.
            import structlog

            structlog.get_logger(__name__).warning("chunking.parse_failed", language=language, error=str(exc))
    lines = text.splitlines()
    return _windows(lines, 1, len(lines), "", "")


def _windows(lines: list[str], first: int, last: int, symbol: str, signature: str) -> list[ChunkSpan]:
    """Overlapping line windows over lines[first-1 : last], each under MAX_CHUNK_CHARS."""
    out: list[ChunkSpan] = []
    start = first
    while start <= last:
        end, size = start, 0
        while end <= last and end - start < WINDOW_LINES:
            size += len(lines[end - 1]) + 1
            if size > MAX_CHUNK_CHARS and end > start:
                break
            end += 1
        end -= 1
        body = "\n".join(lines[start - 1 : end])
        if len(body.strip()) >= MIN_CHUNK_CHARS:
            kind = "window" if not symbol else "part"
            out.append(ChunkSpan(start, end, kind, symbol, signature, body))
        if end >= last:
            break
        start = max(end + 1 - WINDOW_OVERLAP, start + 1)
    return out


class _Chunker:
    def __init__(self, text: str, spec: LanguageSpec) -> None:
        self.src = text.encode("utf-8")
        self.lines = text.splitlines()
        self.spec = spec
        self.out: list[ChunkSpan] = []

    def run(self) -> list[ChunkSpan]:
        tree = _parser_for(self.spec).parse(self.src)
        self._children(tree.root_node, [], "")
        self.out.sort(key=lambda c: (c.start_line, c.end_line))
        return self.out

    def _text(self, node: Node) -> str:
        return self.src[node.start_byte : node.end_byte].decode("utf-8", errors="replace")

    def _definition(self, node: Node) -> Node | None:
        """The definition a top-level child stands for (unwrapping decorators, export, template)."""
        if node.type in self.spec.definitions:
            if node.type == "lexical_declaration" and not self._declares_function(node):
                return None
            return node
        if node.type in self.spec.wrappers or node.type in _C_STATEMENTS:
            for child in node.named_children:
                inner = self._definition(child)
                if inner is not None:
                    return inner
        return None

    @staticmethod
    def _declares_function(node: Node) -> bool:
        # `const f = () => ...` and `const C = class {...}` are definitions; `const x = 1` is not.
        for decl in node.named_children:
            value = decl.child_by_field_name("value")
            if value is not None and value.type in {
                "arrow_function",
                "function_expression",
                "function",
                "class",
                "generator_function",
            }:
                return True
        return False

    def _name(self, node: Node) -> str:
        named = node.child_by_field_name("name")
        if named is None:
            for key in ("declarator", "type"):
                named = node.child_by_field_name(key)
                if named is not None:
                    break
        if named is None and node.type in {"lexical_declaration", "type_declaration"}:
            first = node.named_children[0] if node.named_children else None
            named = first.child_by_field_name("name") if first is not None else None
        while named is not None and named.type not in {
            "identifier",
            "type_identifier",
            "field_identifier",
            "property_identifier",
            "qualified_identifier",
            "destructor_name",
            "operator_name",
            "scoped_identifier",
            "namespace_identifier",
        }:
            inner = named.child_by_field_name("declarator") or named.child_by_field_name("name")
            if inner is None:
                inner = next((c for c in named.named_children if "identifier" in c.type), None)
            named = inner
        return self._text(named) if named is not None else ""

    def _signature(self, node: Node) -> str:
        body = self._body(node)
        end = body.start_byte if body is not None else node.end_byte
        head = self.src[node.start_byte : end].decode("utf-8", errors="replace").strip()
        return (
            head.splitlines()[0][:200]
            if len(head.splitlines()) == 1
            else " ".join(line.strip() for line in head.splitlines()[:4])[:300]
        )

    def _body(self, node: Node) -> Node | None:
        body = node.child_by_field_name("body")
        if body is None:
            for child in node.named_children:
                if child.type in {
                    "class_body",
                    "declaration_list",
                    "field_declaration_list",
                    "interface_body",
                    "enum_body",
                    "statement_block",
                    "block",
                    "compound_statement",
                }:
                    return child
        return body

    def _children(self, parent: Node, scope: list[str], context: str, skip_until: int = 0) -> None:
        gap_start: int | None = None
        for child in parent.named_children:
            definition = self._definition(child)
            if definition is None:
                if gap_start is None:
                    gap_start = child.start_point[0] + 1
                continue
            if gap_start is not None:
                self._gap(max(gap_start, skip_until + 1), child.start_point[0], scope, context)
                gap_start = None
            self._emit(child, definition, scope, context)
        if gap_start is not None:
            self._gap(
                max(gap_start, skip_until + 1),
                parent.end_point[0] + 1 if parent.parent is None else parent.end_point[0],
                scope,
                context,
            )

    def _gap(self, first: int, last: int, scope: list[str], context: str) -> None:
        last = min(last, len(self.lines))
        if last >= first:
            self.out.extend(_windows(self.lines, first, last, ".".join(scope), context))

    def _emit(self, outer: Node, definition: Node, scope: list[str], context: str) -> None:
        name = self._name(definition)
        symbol = ".".join([*scope, name]) if name else ".".join(scope)
        signature = self._signature(definition)
        first, last = outer.start_point[0] + 1, outer.end_point[0] + 1
        if outer.end_point[1] == 0 and last > first:  # node ends at column 0 of the next line
            last -= 1
        text = self._text(outer)
        kind = self._kind(definition, scope)
        full_signature = f"{context} :: {signature}" if context else signature
        if len(text) <= MAX_CHUNK_CHARS:
            self.out.append(ChunkSpan(first, last, kind, symbol, full_signature, text))
            return
        body = self._body(definition)
        if definition.type in self.spec.containers and body is not None:
            # Too big for one chunk: a header (signature, docstring, fields up to the first nested
            # definition), then each member on its own with the class signature as context.
            nested = [c for c in body.named_children if self._definition(c) is not None]
            header_last = nested[0].start_point[0] if nested else last
            for part in _windows(self.lines, first, header_last, symbol, full_signature):
                self.out.append(ChunkSpan(part.start_line, part.end_line, "header", symbol, full_signature, part.text))
            self._children(body, [*scope, name] if name else scope, signature, skip_until=header_last)
            return
        self.out.extend(_windows(self.lines, first, last, symbol, full_signature))

    def _kind(self, definition: Node, scope: list[str]) -> str:
        t = definition.type
        if "class" in t or t in {"impl_item", "trait_item", "interface_declaration", "record_declaration"}:
            return "class"
        if "function" in t or "method" in t or "constructor" in t or t == "lexical_declaration":
            return "method" if scope else "function"
        return "type"


@functools.cache
def _parser_cache() -> dict[int, Parser]:
    return {}


def _parser_for(spec: LanguageSpec) -> Parser:
    cache = _parser_cache()
    key = id(spec)
    if key not in cache:
        cache[key] = Parser(Language(spec.load()))
    return cache[key]


def chunk_id(path: str, span: ChunkSpan) -> str:
    """Stable id: the same text at the same place in the same file keeps its id (and vector)."""
    digest = hashlib.sha1(f"{path}\0{span.start_line}\0{span.text}".encode()).hexdigest()
    return digest[:24]
