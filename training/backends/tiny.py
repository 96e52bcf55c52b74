"""A tiny causal LM and tokenizer made on the spot: no download, deterministic for a seed.

A 2-layer Qwen2 built with `from_config` and a byte-level BPE tokenizer trained in about a second
with `tokenizers` on a generated corpus, with a ChatML template that ART's tokenizer accepts.
Saved once under the model directory (`base/`) so the trainer and the policy endpoint load the
exact same weights and vocabulary.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

# The role header ends in a special token (<|im_sep|>) so that no BPE merge crosses from the header
# into the content: the prompt the sampler sees and the one ART rebuilds tokenize identically.
CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system<|im_sep|>Tools: {{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{%- for message in messages %}<|im_start|>{{ message.role }}<|im_sep|>"
    "{%- if message.content %}{{ message.content }}{% endif %}"
    "{%- if message.tool_calls %}{% for tc in message.tool_calls %}"
    "<tool_call>{{ tc.function | tojson }}</tool_call>{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant<|im_sep|>{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|im_sep|>"]


def _corpus(seed: int, lines: int = 400) -> list[str]:
    rng = random.Random(seed)
    words = [
        "def", "return", "if", "else", "for", "while", "in", "range", "print", "import", "from", "class",
        "self", "true", "false", "none", "and", "or", "not", "the", "a", "to", "of", "is", "write", "number",
        "digits", "letters", "answer", "task", "test", "code", "function", "value", "list", "tool", "call",
        "user", "assistant", "system", "yes", "no", "ok", "error", "pass", "fail", "reward", "episode",
    ]  # fmt: skip
    out = []
    for _ in range(lines):
        parts = [rng.choice(words) for _ in range(rng.randint(3, 9))]
        parts.append(str(rng.randint(0, 99999)))
        out.append(" ".join(parts) + rng.choice([".", ":", "()", " = 1", "\n"]))
    return out


def _byte_char(byte: int) -> str:
    """The character GPT-2's byte-level alphabet uses for `byte`."""
    printable = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    if byte in printable:
        return chr(byte)
    return chr(256 + [b for b in range(256) if b not in printable].index(byte))


def build_tokenizer(seed: int = 0, vocab_size: int = 320) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(seed), trainer=trainer)
    # ART finds a "sentinel" as the highest unused id below vocab_size, decodes it and expects the
    # chat template to re-encode it as that one id. A learned merge does not survive that in
    # context; a byte that no merge uses does. Give the highest id to the byte 0x7f (DEL).
    vocab = tok.get_vocab()
    merges = json.loads(tok.to_str())["model"]["merges"]
    sentinel = _byte_char(0x7F)
    top = max(vocab, key=vocab.__getitem__)
    vocab[top], vocab[sentinel] = vocab[sentinel], vocab[top]
    rebuilt = Tokenizer(
        models.BPE(vocab=vocab, merges=[tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in merges])
    )
    rebuilt.pre_tokenizer = tok.pre_tokenizer
    rebuilt.decoder = tok.decoder
    rebuilt.add_special_tokens(SPECIAL_TOKENS)
    tok = rebuilt
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        chat_template=CHAT_TEMPLATE,
    )


def build_model(tokenizer: Any, seed: int = 0, hidden: int = 64, layers: int = 2) -> Any:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        attention_dropout=0.0,
    )
    model = Qwen2ForCausalLM(config)
    model.eval()  # type: ignore[no-untyped-call]
    return model


def ensure_base(base_dir: Path, seed: int = 0) -> Path:
    """Create (once) and return the directory holding the tiny base model and its tokenizer."""
    if (base_dir / "config.json").exists() and (base_dir / "tokenizer.json").exists():
        return base_dir
    tokenizer = build_tokenizer(seed)
    model = build_model(tokenizer, seed)
    tmp = base_dir.with_name(base_dir.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.replace(base_dir) if not base_dir.exists() else None
    return base_dir
