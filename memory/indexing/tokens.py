"""Code-aware tokens for full-text search, shared by every store.

Identifiers are kept whole *and* split on case changes and underscores, so `getUserName`,
`get_user_name` and the words "get user name" all meet. The stores index the token string we
produce here instead of trusting a server-side tokenizer, which keeps SQLite FTS5 and turbopuffer's
`pre_tokenized_array` column ranking the same words.
"""

from __future__ import annotations

import re

# Word bytes stay, every other byte (punctuation, UTF-8 of non-ASCII text) becomes a space: a word
# is a run of ASCII letters, digits and underscores. One C pass over the text, then bytes.split().
_WORD_BYTES = bytes(b if chr(b).isascii() and (chr(b).isalnum() or chr(b) == "_") else 32 for b in range(256))
_DIGITS = b"0123456789"
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")

# English glue words plus code words present in nearly every chunk: matching them costs time
# and adds nothing to BM25.
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "can",
        "could",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "should",
        "so",
        "such",
        "than",
        "that",
        "the",
        "their",
        "then",
        "there",
        "these",
        "this",
        "those",
        "to",
        "was",
        "were",
        "when",
        "where",
        "which",
        "while",
        "will",
        "with",
        "would",
        "you",
        "your",
        "we",
        "our",
        "not",
        "no",
        "self",
        "def",
        "return",
        "none",
        "true",
        "false",
        "cls",
        "var",
        "let",
        "const",
        "function",
        "func",
        "fn",
        "pub",
        "end",
    ]
)


def _stem(word: str) -> str:
    # A deliberately tiny English s-stemmer: docstrings say "returns the files", code says
    # `return file`. Heavier stemming mangled identifiers in tests.
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def split_identifier(word: str) -> list[str]:
    """`parseHTTPResponse_v2` -> ["parse", "http", "response", "v2"] (lowercase parts)."""
    parts: list[str] = []
    for piece in word.split("_"):
        if piece:
            parts.extend(p.lower() for p in _CAMEL.findall(piece))
    return parts


def _expand(word: str) -> str:
    """An identifier's tokens joined by spaces: whole, then its parts; "" when all are stopwords."""
    out: list[str] = []
    parts = split_identifier(word)
    whole = word.lower().strip("_")
    if len(parts) > 1 and whole not in STOPWORDS:
        out.append(whole)
    for part in parts:
        if len(part) > 1 and part not in STOPWORDS:
            out.append(_stem(part))
    return " ".join(out)


def _expand_word(word: bytes) -> bytes:
    """`_expand` of one word; a leading run of digits is a number of its own: `2to3` is 2, to3."""
    rest = word.lstrip(_DIGITS)
    if not rest or len(rest) == len(word):
        return _expand(word.decode()).encode()
    number = _expand(word[: len(word) - len(rest)].decode())
    return " ".join(filter(None, (number, _expand(rest.decode())))).encode()


class _Expansions(dict[bytes, bytes]):
    """word -> `_expand_word(word)`, filled on first sight. Identifiers repeat endlessly across a
    code base: half the standard library (19 MB) has 117k distinct words. A plain dict lookup from
    C (`map` over `__getitem__`) keeps tokenizing close to the cost of splitting the text; an
    `lru_cache` of tuples was 22% slower. Emptied when full rather than evicting one by one."""

    def __missing__(self, word: bytes) -> bytes:
        if len(self) >= EXPANSIONS_KEPT:
            self.clear()
        value = self[word] = _expand_word(word)
        return value


EXPANSIONS_KEPT = 262_144
_EXPANSIONS = _Expansions()


def token_string(text: str) -> str:
    """Tokens of `text` joined by spaces, as the stores index them: each identifier lowercased
    whole, then its parts, all lightly stemmed. In bytes, so the loop stays in C: 26-45% less CPU than
    a regex `findall` over str for the same tokens. `surrogatepass`: a query may hold lone
    surrogates (valid JSON); like any non-ASCII text they only separate words."""
    words = text.encode("utf-8", "surrogatepass").translate(_WORD_BYTES).split()
    return b" ".join(filter(None, map(_EXPANSIONS.__getitem__, words))).decode()


def code_tokens(text: str) -> list[str]:
    """`token_string` as a list."""
    return token_string(text).split()


def query_tokens(text: str) -> list[str]:
    """Distinct tokens of a query, in order of first appearance."""
    return list(dict.fromkeys(code_tokens(text)))
