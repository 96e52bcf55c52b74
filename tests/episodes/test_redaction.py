"""Secrets never reach the episode log; ordinary code and parameters survive untouched."""

from __future__ import annotations

import re

import pytest

from episodes.redaction import redact, redact_text

SECRETS = [
    ("curl -H 'Authorization: Bearer abcDEF1234567890abcdef'", "abcDEF1234567890abcdef", "bearer_token"),
    ("export OPENAI_API_KEY=sk-proj-Abcdefghijklmnopqrstuvwx12", "sk-proj-Abcdefghijklmnopqrstuvwx12", "openai_key"),
    (
        "ANTHROPIC_API_KEY: sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
        "sk-ant-api03-abcdefghijklmnopqrstuvwxyz",
        "anthropic_key",
    ),
    ("aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", "aws_access_key"),
    ("token ghp_abcdefghijklmnopqrstuvwxyz0123456789", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "github_token"),
    ("git clone https://oauth2:glpat-abcdefghijklmnopqrst@gitlab.com/x.git", "glpat-abcdefghijklmnopqrst", ""),
    ("SLACK=xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij", "slack_token"),
    ("key=AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIzaSyA1234567890abcdefghijklmnopqrstuv", ""),
    ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz012345", "hf_abcdefghijklmnopqrstuvwxyz012345", ""),
    ("stripe sk_live_abcdefghijklmnopqrstuvwx", "sk_live_abcdefghijklmnopqrstuvwx", "stripe_key"),
    ("DATABASE_URL=postgresql://app:Pa55w0rd!@db:5432/prod", "Pa55w0rd!", ""),
    ("redis://:onlypassword@cache:6379/0", "onlypassword", "url_password"),
    ('{"password": "correct horse", "user": "bob"}', "correct horse", ""),
    ("db_password='tr0ub4dor&3'", "tr0ub4dor&3", ""),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
        "",
    ),
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAA",
        "private_key",
    ),
    (
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0B (truncated, no end line)",
        "MIIEvQIBADANBgkqhkiG9w0B",
        "private_key",
    ),
]


@pytest.mark.parametrize(("text", "secret", "kind"), SECRETS, ids=[s[2] or s[1][:12] for s in SECRETS])
def test_secrets_are_replaced_by_a_marker(text: str, secret: str, kind: str) -> None:
    out = redact_text(text)
    assert secret not in out
    assert f"[REDACTED:{kind}" in out if kind else "[REDACTED:" in out


KEEP = [
    "def login(user: str, password: str) -> bool:",
    "max_tokens=512, temperature=0.2",
    "tokenizer = AutoTokenizer.from_pretrained(path)",
    "https://example.com/docs?page=2",
    "for token in tokens: print(token)",
    "sk = 'short'",
    "Authorization header missing",
]


@pytest.mark.parametrize("text", KEEP)
def test_ordinary_code_is_left_alone(text: str) -> None:
    assert redact_text(text) == text


def test_nested_values_and_secret_keys() -> None:
    value = {
        "headers": {"Authorization": "Basic dXNlcjpwYXNzd29yZA==", "Accept": "json"},
        "api_key": "abc123",
        "max_tokens": 64,
        "tokenizer": "bpe",
        "steps": [{"cmd": "curl -u x https://u:pw12345@host/"}, 7, None],
    }
    out = redact(value)
    assert out["headers"] == {"Authorization": "[REDACTED:field]", "Accept": "json"}
    assert out["api_key"] == "[REDACTED:field]"
    assert out["max_tokens"] == 64 and out["tokenizer"] == "bpe"
    assert "pw12345" not in out["steps"][0]["cmd"] and out["steps"][1:] == [7, None]
    assert value["api_key"] == "abc123"  # the input is not mutated


def test_redaction_is_idempotent() -> None:
    text = "OPENAI_API_KEY=sk-proj-Abcdefghijklmnopqrstuvwx12 password=hunter22"
    once = redact_text(text)
    assert redact_text(once) == once


@pytest.mark.timeout(30)  # a hang guard: these took over a minute when a pattern was quadratic, milliseconds now
@pytest.mark.parametrize("unit", ["a.", "a_", "password", "x://", "a:", "-", "token "])
def test_pathological_text_does_not_backtrack(unit: str) -> None:
    text = unit * (20_000 // len(unit))
    assert redact_text(text).startswith(unit[:1])


# One example per pattern, several of them in the case or letter forms only a case-insensitive
# pattern takes (the fast path must not skip them): kind -> (text, the secret in it).
EVERY_PATTERN = {
    "private_key": ("-----BEGIN RSA PRIVATE KEY-----\nMIIBOgIBAAJBAK\n-----END RSA PRIVATE KEY-----", "MIIBOgIBAAJBAK"),
    "url_password": ("amqp://guest:GuestPw99@rabbit/", "GuestPw99"),
    "anthropic_key": ("key sk-ant-api03-ZZZZZZZZZZZZZZZZZZZZZZ", "sk-ant-api03-ZZZZZZZZZZZZZZZZZZZZZZ"),
    "openai_key": ("sk-svcacct-0123456789abcdefghijAB", "sk-svcacct-0123456789abcdefghijAB"),
    "github_token": ("github_pat_" + "A1" * 21, "github_pat_" + "A1" * 21),
    "gitlab_token": ("glpat-ABCDEFGHIJKLMNOPQRST", "glpat-ABCDEFGHIJKLMNOPQRST"),
    "slack_token": ("xoxp-0123456789-zz", "xoxp-0123456789-zz"),
    "aws_access_key": ("ASIAJEXAMPLEXEXAMPLE", "ASIAJEXAMPLEXEXAMPLE"),
    "google_api_key": ("AIza" + "b" * 35, "AIza" + "b" * 35),
    "huggingface_token": ("hf_" + "Q" * 34, "hf_" + "Q" * 34),
    "stripe_key": ("rk_test_" + "9" * 24, "rk_test_" + "9" * 24),
    "wandb_key": ("wAnDb_Api_KeY : " + "ab12" * 10, "ab12" * 10),
    "jwt": ("eyJhbGciOiJub25lIn0.eyJzdWIiOiJtZSJ9.c2lnbmF0dXJlMTIz", "c2lnbmF0dXJlMTIz"),
    "bearer_token": ("BEARER\tQWxhZGRpbjpvcGVuIHNlc2FtZQ", "QWxhZGRpbjpvcGVuIHNlc2FtZQ"),
    "basic_auth": ("authorization: BAS\u0130C dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    "assignment": ("client_\u017fecret = 'opensesame42'", "opensesame42"),
}


def redact_every_pattern(text: str) -> str:
    """The reference: every pattern in order, no triggers (what redaction did before the fast path)."""
    import episodes.redaction as module

    for kind, pattern in module._PATTERNS:
        text = pattern.sub(module._replace(kind), text)
    return text


def test_every_pattern_is_still_caught() -> None:
    import episodes.redaction as module

    assert set(EVERY_PATTERN) == {kind for kind, _ in module._PATTERNS}, "give each pattern an example"
    for kind, (text, secret) in EVERY_PATTERN.items():
        out = redact_text(text)
        assert f"[REDACTED:{kind}]" in out and secret not in out, (kind, out)
        assert out == redact_every_pattern(text)


def test_the_fast_path_redacts_exactly_what_every_pattern_would() -> None:
    """A seeded corpus built around the triggers (their words in every case, the four non-ASCII
    letters re.IGNORECASE folds onto ASCII, separators, runs of key-like characters), plus every
    example in this file: the gated result equals running all sixteen patterns."""
    import random

    rng = random.Random(5)
    words = [
        "password",
        "passwd",
        "pwd",
        "secret",
        "api_key",
        "apikey",
        "access-key",
        "auth_token",
        "refresh_token",
        "client_secret",
        "private_key",
        "token",
        "bearer",
        "basic",
        "wandb_api_key",
        "sk-",
        "sk-ant-",
        "sk-proj-",
        "ghp_",
        "github_pat_",
        "glpat-",
        "xoxb-",
        "AKIA",
        "ASIA",
        "AIza",
        "hf_",
        "sk_live_",
        "rk_test_",
        "eyJ",
        "https://",
        "://",
        "user:",
        "@host",
        "Authorization",
        "max_tokens",
        "tokenizer",
        "key",
        "\u017f",
        "\u212a",
        "\u0130",
        "\u0131",
        "—",
        "é",
        "-----BEGIN PRIVATE KEY-----",
        "-----END PRIVATE KEY-----",
    ]
    seps = ["", " ", "=", " = ", ":", ": ", "'", '"', "\t", "\n", ",", ".", "/", "@", "_", "-"]
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=_-."

    def flip(word: str) -> str:
        word = "".join(c.upper() if rng.random() < 0.5 else c for c in word)
        for ascii_letter, odd in (("s", "\u017f"), ("k", "\u212a"), ("i", "\u0131"), ("I", "\u0130")):
            if rng.random() < 0.15:
                word = word.replace(ascii_letter, odd)
        return word

    corpus = [t for t, _, _ in SECRETS] + KEEP + [t for t, _ in EVERY_PATTERN.values()]
    for _ in range(4000):
        parts = []
        for _ in range(rng.randint(1, 6)):
            parts.append(flip(rng.choice(words)) + rng.choice(seps))
            if rng.random() < 0.7:
                parts.append("".join(rng.choice(alphabet) for _ in range(rng.choice([3, 8, 16, 20, 30, 35, 40, 45]))))
            parts.append(rng.choice(seps))
        corpus.append("".join(parts))
    corpus.append(" ".join(corpus[:300]))  # one long text: the path without the one-call pre-check
    redacted = 0
    for text in corpus:
        expected = redact_every_pattern(text)
        assert redact_text(text) == expected, text
        redacted += expected != text
    assert 500 < redacted < len(corpus) - 500  # both ways are exercised: redactions and clean text


def test_case_folding_covers_every_letter_ignorecase_takes_for_ascii() -> None:
    """re.IGNORECASE matches four non-ASCII letters to ASCII ones (Python's re docs); the triggers
    search a folded text, so folding must map each onto the letter it matches."""
    import string

    from episodes.redaction import _fold

    letter = re.compile("(?i)[a-z]")
    odd = [chr(c) for c in range(128, 0x110000) if letter.fullmatch(chr(c))]
    assert len(odd) == 4
    for char in odd:
        matched = [a for a in string.ascii_lowercase if re.fullmatch("(?i)" + a, char)]
        assert [_fold(char)] == matched, (hex(ord(char)), matched)


def test_a_conversation_seen_before_is_redacted_from_memory() -> None:
    """An agent's whole conversation comes back with every turn: only the new message is scanned,
    and a remembered text gives back its redaction, never the original."""
    from episodes import redaction as module

    key = "sk-" + "Q" * 30
    history = [f"message {i}: {key if i == 2 else ''}\n" + "x = compute(y)\n" * 40 for i in range(5)]
    first = redact(history)
    before = module._redact_known.cache_info()
    again = redact([*history, "a new message"])
    after = module._redact_known.cache_info()
    assert (after.hits - before.hits, after.misses - before.misses) == (5, 1)
    assert again[:5] == first and key not in str(again) and "[REDACTED:openai_key]" in again[2]
    huge = key + " " + "y" * module.CACHED_TEXT_CHARS  # too long to keep: scanned every time, still redacted
    assert redact_text(huge).startswith("[REDACTED:openai_key]")
    assert module._redact_known.cache_info().misses == after.misses
