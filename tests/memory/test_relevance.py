"""memory.relevance: the probability that a hit answers, from what it contains, and the final order."""

from __future__ import annotations

from memory.indexing.tokens import query_tokens
from memory.relevance import COEFFICIENTS, FEATURES, ListScores, features, final_order, probability
from memory.reranking import match_rules, path_kind, read_query
from memory.stores.base import Hit

RAISE = (
    "def loads(self, s, max_age=None):\n    if age > max_age:\n"
    '        raise SignatureExpired(f"Signature age {age} > {max_age} seconds")\n'
)
MENTION = "class SignatureExpired(BadTimeSignature):\n    pass\n"
TEST = (
    'def test_expired():\n    with pytest.raises(SignatureExpired, match="Signature age"):\n'
    "        loads(token, max_age=1)\n"
)


def _hit(chunk_id: str, path: str, symbol: str, text: str, score: float = 0.02) -> Hit:
    return Hit(chunk_id, path, 1, text.count("\n"), "python", symbol, text, score)


def _relevance(query: str, hit: Hit, lists: ListScores) -> float:
    rules = match_rules(read_query(query), hit, path_kind(hit.path))
    values = features(hit, rules, query_tokens(query), lists)
    assert len(values) == len(FEATURES) == len(COEFFICIENTS)
    return probability(values)


def test_the_raise_site_of_a_pasted_error_is_likelier_than_its_class_or_its_test() -> None:
    query = "itsdangerous.exc.SignatureExpired: Signature age 31 > 30 seconds"
    raise_site = _hit("r", "src/itsdangerous/timed.py", "TimedSerializer.loads", RAISE)
    mention = _hit("m", "src/itsdangerous/exc.py", "SignatureExpired", MENTION)
    test = _hit("t", "tests/test_timed.py", "test_expired", TEST)
    lists = ListScores.of(keyword=[test, raise_site, mention], dense=[mention, test, raise_site])
    by_hit = {h.chunk_id: _relevance(query, h, lists) for h in (raise_site, mention, test)}
    assert by_hit["r"] > 0.5 > by_hit["m"] and by_hit["r"] > by_hit["t"], by_hit


def test_a_test_nobody_asked_for_is_less_likely_than_the_same_text_in_code() -> None:
    query = "where is the signature age checked against max_age"
    lists = ListScores.of(keyword=[], dense=[])
    as_code = _relevance(query, _hit("c", "src/timed.py", "loads", RAISE), lists)
    as_test = _relevance(query, _hit("t", "tests/test_timed.py", "loads", RAISE), lists)
    asked = _relevance(
        "which tests check the signature age against max_age", _hit("t", "tests/test_timed.py", "loads", RAISE), lists
    )
    assert as_test < as_code and as_test < asked


def _lists(cosine: dict[str, float], bm25: dict[str, float]) -> ListScores:
    def scored(scores: dict[str, float]) -> list[Hit]:
        return [_hit(chunk_id, "src/x.py", "x", "x", score) for chunk_id, score in scores.items()]

    return ListScores.of(keyword=scored(bm25), dense=scored(cosine))


def test_relevance_rises_with_the_cosine_and_the_keyword_score_and_stays_a_probability() -> None:
    query = "least recently used cache eviction"
    hit = _hit("a", "src/lru.py", "LRUCache.popitem", "def popitem(self):\n    return self.__order.popitem()\n")
    low = _relevance(query, hit, _lists(cosine={"a": 0.2, "b": 0.6}, bm25={"a": 1.0, "b": 9.0}))
    high = _relevance(query, hit, _lists(cosine={"a": 0.7, "b": 0.6}, bm25={"a": 9.0, "b": 1.0}))
    assert 0.0 < low < high < 1.0
    # Outside the dense list its cosine counts as the list's lowest; outside the keyword list, as no match.
    absent = _relevance(query, hit, _lists(cosine={"b": 0.6, "c": 0.2}, bm25={"b": 9.0}))
    assert absent == _relevance(query, hit, _lists(cosine={"a": 0.2, "b": 0.6}, bm25={"a": 0.0, "b": 9.0}))
    assert probability([1e6] * len(FEATURES)) == 1.0 and probability([-1e6] * len(FEATURES)) < 1e-20


def test_the_final_order_lifts_a_much_likelier_hit_and_keeps_the_rules_order_otherwise() -> None:
    likely = probability((1.0, 0.9, 1.0, 1.0, 1.0, 0.0))
    unlikely = probability((1.0, 0.1, 0.0, 0.1, 0.0, 1.0))
    assert final_order([unlikely, unlikely, likely]) == [2, 0, 1]
    assert final_order([likely, likely, likely]) == [0, 1, 2]
    assert final_order([]) == []
