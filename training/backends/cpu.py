"""The `cpu` backend: a real GRPO step, ART's way, on a tiny model that needs no GPU or download.

Sampling records per-token logprobs as vLLM does (`token_id:N` tokens), so ART's own
`tokenize_trajectory_groups` maps choices back to token ids; `packed_tensors_from_tokenized_results`
builds the batch and `art.loss.loss_fn` computes the loss (CISPO-style clipped policy gradient,
ART's default). LoRA adapters (peft) are saved as ART checkpoints:
`{path}/{project}/models/{model}/checkpoints/{step:04d}/adapter_model.safetensors`.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402
from openai.types.chat.chat_completion import Choice, ChoiceLogprobs  # noqa: E402
from openai.types.chat.chat_completion_message import ChatCompletionMessage  # noqa: E402
from openai.types.chat.chat_completion_token_logprob import ChatCompletionTokenLogprob  # noqa: E402

from training.backends.base import (  # noqa: E402
    BackendConfig,
    BackendError,
    BackendUnavailable,
    ContextTooLong,
    NoTrainableData,
    TrainResult,
    checkpoint_steps,
)
from training.backends.tiny import ensure_base  # noqa: E402
from training.data.groups import Group, to_art  # noqa: E402

DEFAULT_LR = 2e-2
"""High, because the tiny model starts from random weights and must move within a handful of steps."""
OPTIMIZER_FILE = "optimizer.pt"


def undo_art_mask_patch() -> None:
    """`import art` replaces transformers' `_preprocess_mask_arguments` with a wrapper written for
    transformers 5.2 (it passes `cache_position`, which 5.3+ no longer takes), breaking every
    forward pass. The wrapper only matters for 3-D (multimodal rope) position ids; restore the
    original when the signatures disagree."""
    import inspect

    from transformers import masking_utils

    try:
        from art.transformers import patches
    except ImportError:
        return
    original = patches._preprocess_mask_arguments
    if "cache_position" not in inspect.signature(original).parameters:
        masking_utils._preprocess_mask_arguments = original


STATE_FILE = "trainer_state.json"


def load_policy(base_dir: Path, adapter_dir: Path | None, *, trainable: bool, lora_rank: int = 8) -> tuple[Any, Any]:
    """(model, tokenizer): the base with a fresh LoRA, or with the adapter saved in `adapter_dir`."""
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(base, adapter_dir, is_trainable=trainable)
    else:
        lora = LoraConfig(
            r=lora_rank,
            lora_alpha=2 * lora_rank,
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
            # A from-config model's logits are near-uniform and small; LoRA alone moves them slowly.
            # Training the (untied) output head too makes a few steps visibly change the policy.
            modules_to_save=["lm_head"],
        )
        model = get_peft_model(base, lora)
    model.eval()
    return model, tokenizer


def sample_choices(
    model: Any,
    tokenizer: Any,
    messages: list[dict[str, Any]],
    *,
    n: int,
    max_tokens: int,
    temperature: float = 1.0,
    seed: int | None = None,
    tools: list[dict[str, Any]] | None = None,
    prompt_ids: list[int] | None = None,
    stop: list[str] | None = None,
    top_p: float = 1.0,
) -> tuple[list[Choice], list[int]]:
    """`n` sampled completions with the exact logprob of each sampled token; also the prompt ids.

    `prompt_ids` overrides the chat template's tokenization (a continued conversation whose earlier
    turns must keep their sampled tokens). `stop`: a completion ends once its text holds one of
    these; its content is the text before it, its token ids end with the token that completed it.
    `top_p` < 1 draws each token from the smallest set of most likely tokens holding that much
    probability; the logprob recorded is still the token's under the whole distribution, which is
    what a trainer recomputes from the model (it cannot see the nucleus cut).

    A completion stops where the model's context ends: `max_tokens` is capped to the room left,
    and a prompt that leaves none raises `ContextTooLong`. Past its positions the model would
    still compute, on positions it was never trained on, a turn too long to train on."""
    if temperature < 0:
        raise ValueError("temperature must be >= 0 (0 is greedy decoding)")
    if prompt_ids is None:
        rendered: Any = tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        prompt_ids = list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)
    context = model.config.max_position_embeddings
    if len(prompt_ids) >= context:
        raise ContextTooLong(
            f"This model's maximum context length is {context} tokens; the messages resulted in"
            f" {len(prompt_ids)} tokens. Shorten the conversation."
        )
    max_tokens = min(max_tokens, context - len(prompt_ids))
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    eos = tokenizer.eos_token_id
    with torch.no_grad():
        ids = torch.tensor([prompt_ids] * n)
        out = model(input_ids=ids, use_cache=True)
        past = out.past_key_values
        logits = out.logits[:, -1, :]
        sampled: list[list[int]] = [[] for _ in range(n)]
        lps: list[list[float]] = [[] for _ in range(n)]
        done = [False] * n
        for _ in range(max_tokens):
            if temperature == 0:  # greedy; logprobs are the policy's own (temperature 1)
                logp = torch.log_softmax(logits.float(), dim=-1)
                nxt = logp.argmax(dim=-1)
            else:
                logp = torch.log_softmax(logits.float() / temperature, dim=-1)
                probs = _nucleus(logp.exp(), top_p) if top_p < 1 else logp.exp()
                nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            for i in range(n):
                if not done[i]:
                    tid = int(nxt[i])
                    sampled[i].append(tid)
                    lps[i].append(float(logp[i, tid]))
                    done[i] = tid == eos or _stop_at(tokenizer, sampled[i], stop) is not None
            if all(done):
                break
            out = model(input_ids=nxt.unsqueeze(1), past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[:, -1, :]
    choices = []
    for i in range(n):
        toks = sampled[i]
        finished = bool(toks) and toks[-1] == eos
        text_ids = toks[:-1] if finished else toks
        content = tokenizer.decode(text_ids, skip_special_tokens=False)
        cut = _stop_at(tokenizer, text_ids, stop)
        if cut is not None:
            content, finished = content[:cut], True
        logprobs = [
            ChatCompletionTokenLogprob(
                token=f"token_id:{tid}",
                logprob=lp,
                bytes=list(tokenizer.decode([tid]).encode("utf-8")),
                top_logprobs=[],
            )
            for tid, lp in zip(toks, lps[i], strict=True)
        ]
        choices.append(
            Choice(
                finish_reason="stop" if finished else "length",
                index=i,
                message=ChatCompletionMessage(role="assistant", content=content),
                logprobs=ChoiceLogprobs(content=logprobs),
            )
        )
    return choices, prompt_ids


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """`probs` (one row per sequence) with every token outside the nucleus zeroed: the most likely
    tokens, in order, until the ones before reach `top_p` (so the most likely is always kept)."""
    ordered, order = probs.sort(dim=-1, descending=True)
    outside = ordered.cumsum(dim=-1) - ordered >= top_p
    return probs.scatter(-1, order, ordered.masked_fill(outside, 0.0))


def _stop_at(tokenizer: Any, ids: list[int], stop: list[str] | None) -> int | None:
    """Where in the text of `ids` the first stop string starts, or None. Checked after each sampled
    token, so only the text a stop string could end in is decoded: as many tokens as its length."""
    if not stop:
        return None
    window = max(len(s) for s in stop) + 1
    tail = tokenizer.decode(ids[-window:], skip_special_tokens=False)
    if not any(s in tail for s in stop):
        return None
    text = tokenizer.decode(ids, skip_special_tokens=False)
    found = [text.find(s) for s in stop if s in text]
    return min(found) if found else None


def sft_example(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> tuple[list[int], list[int]]:
    """(input ids, labels) of a conversation; labels are -100 except on assistant turns.

    Each assistant turn's span is where the rendering of messages[:k] (with the generation prompt)
    ends and the rendering of messages[:k+1] ends; the fast tokenizer's offsets map spans to tokens.
    """
    full = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    spans = []
    for k, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        start = len(
            tokenizer.apply_chat_template(messages[:k], tools=tools, add_generation_prompt=True, tokenize=False)
        )
        end = len(tokenizer.apply_chat_template(messages[: k + 1], tools=tools, tokenize=False))
        spans.append((start, end))
    enc = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    ids: list[int] = list(enc["input_ids"])
    labels = [
        tid if any(s <= a and b <= e for s, e in spans) and b > a else -100
        for tid, (a, b) in zip(ids, enc["offset_mapping"], strict=False)
    ]
    return ids, labels


def next_token_logprobs(model: Any, tokens: torch.Tensor, input_pos: torch.Tensor, pad_id: int) -> torch.Tensor:
    """logprob of token t+1 at position t (ART's convention; last position 0), one row per sequence."""
    valid = tokens != -100
    ids = torch.where(valid, tokens, torch.full_like(tokens, pad_id))
    logits = model(input_ids=ids, attention_mask=valid.long(), position_ids=input_pos).logits.float()
    logp = torch.log_softmax(logits[:, :-1, :], dim=-1)
    nxt = torch.gather(logp, 2, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return torch.nn.functional.pad(nxt, (0, 1), value=0.0)


class CpuBackend:
    name = "cpu"

    @staticmethod
    def check(config: BackendConfig) -> None:
        if config.base_model != "tiny-qwen2":
            raise BackendUnavailable(
                f"the cpu backend trains only the built-in 'tiny-qwen2' model, not {config.base_model!r};"
                " use backend 'local' (GPU) or 'serverless' for real models"
            )
        try:
            import art.loss  # noqa: F401
            import art.preprocessing.pack  # noqa: F401
            import art.preprocessing.tokenize  # noqa: F401
            import peft  # noqa: F401
        except ImportError as exc:
            raise BackendUnavailable(f"the cpu backend needs {exc.name}: pip install 'rlide[training]'") from exc
        undo_art_mask_patch()

    def __init__(self, config: BackendConfig) -> None:
        self.config = config
        self.step = 0
        self.model: Any = None
        self.tokenizer: Any = None
        self.optimizer: torch.optim.Optimizer | None = None

    @property
    def base_dir(self) -> Path:
        return self.config.model_dir() / "base"

    def start(self) -> int:
        random.seed(self.config.seed)
        torch.manual_seed(self.config.seed)
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
        ensure_base(self.base_dir, self.config.seed)
        steps = checkpoint_steps(self.config.model_dir())
        latest = steps[-1] if steps else None
        adapter = self.config.checkpoint_dir(latest) if latest is not None else None
        self.model, self.tokenizer = load_policy(
            self.base_dir, adapter, trainable=True, lora_rank=int(self.config.extra.get("lora_rank", 8))
        )
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=self.config.learning_rate or DEFAULT_LR, weight_decay=0.0)
        if adapter is not None and (adapter / OPTIMIZER_FILE).exists():
            self.optimizer.load_state_dict(torch.load(adapter / OPTIMIZER_FILE, weights_only=True))
        self.step = latest or 0
        return self.step

    def sample(
        self,
        messages: list[dict[str, Any]],
        *,
        n: int,
        max_tokens: int,
        temperature: float = 1.0,
        seed: int | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> list[Any]:
        self._require_started()
        choices, _ = sample_choices(
            self.model,
            self.tokenizer,
            messages,
            n=n,
            max_tokens=max_tokens,
            temperature=temperature,
            seed=seed,
            tools=tools,
        )
        return choices

    def train(self, groups: list[Group]) -> TrainResult:
        from art.loss import loss_fn
        from art.preprocessing.pack import packed_tensors_from_tokenized_results
        from art.preprocessing.tokenize import tokenize_trajectory_groups

        self._require_started()
        assert self.optimizer is not None
        started = time.perf_counter()
        random.seed(self.config.seed * 100_003 + self.step)  # ART shuffles with `random`
        results = list(
            tokenize_trajectory_groups(
                self.tokenizer,
                to_art(groups),
                allow_training_without_logprobs=False,
                scale_rewards=True,
            )
        )
        if not results:
            raise BackendError("no trainable tokens in these groups (no choices with logprobs, or zero advantage)")
        packed = packed_tensors_from_tokenized_results(
            results,
            seq_len=self.config.max_seq_len,
            pad_token_id=-100,
            pack_results=False,
            verbosity=0,
        )
        self.model.train()
        self.optimizer.zero_grad()
        new_lp = next_token_logprobs(self.model, packed["tokens"], packed["input_pos"], self.tokenizer.pad_token_id)
        inputs: Any = {k: v for k, v in packed.items() if isinstance(v, torch.Tensor)}
        loss = loss_fn(inputs, new_lp, None, None, {})
        loss.policy_loss.backward()  # type: ignore[no-untyped-call]
        grad_norm = float(
            torch.nn.utils.clip_grad_norm_(
                [p for p in self.model.parameters() if p.requires_grad],
                float(self.config.extra.get("max_grad_norm", 1.0)),
            )
        )
        self.optimizer.step()
        self.model.eval()
        # How far recomputed logprobs are from the sampled ones (0 up to float error when on-policy).
        old = torch.nn.functional.pad(packed["logprobs"][:, 1:], (0, 1), value=float("nan"))
        mask = ~torch.isnan(old)
        drift = float((new_lp.detach()[mask] - old[mask]).abs().max()) if mask.any() else math.nan
        trainable_tokens = int(packed["assistant_mask"].sum())
        total_tokens = int((packed["tokens"] != -100).sum())
        self.step += 1
        self.save_checkpoint(self.step)
        seconds = time.perf_counter() - started
        return TrainResult(
            step=self.step,
            metrics={
                "losses/policy_loss": float(loss.policy_loss.detach()),
                "losses/grad_norm": grad_norm,
                "losses/probs_corr": float(loss.probs_corr.detach()),
                "losses/max_logprob_drift": drift,
                "perf/sequences": float(packed["tokens"].shape[0]),
                "perf/tokens": float(total_tokens),
                "perf/trainable_tokens": float(trainable_tokens),
                "perf/train_seconds": seconds,
                "perf/tokens_per_second": total_tokens / seconds if seconds > 0 else 0.0,
            },
        )

    def train_sft(self, conversations: list[dict[str, Any]]) -> TrainResult:
        """One supervised step on chat records (the `sft` export layout: {"messages", "tools"?}):
        cross-entropy on the assistant turns only (tool calls included), then a checkpoint."""
        self._require_started()
        assert self.optimizer is not None
        started = time.perf_counter()
        examples = [sft_example(self.tokenizer, c["messages"], c.get("tools")) for c in conversations]
        rows = [r for r in examples if len(r[0]) <= self.config.max_seq_len and any(lab != -100 for lab in r[1])]
        if not rows:
            raise NoTrainableData(
                f"no conversation fits max_seq_len={self.config.max_seq_len} with assistant tokens to learn from"
            )
        width = max(len(ids) for ids, _ in rows)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in rows])
        labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in rows])
        mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in rows])
        self.model.train()
        self.optimizer.zero_grad()
        logits = self.model(input_ids=ids, attention_mask=mask).logits.float()
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=-100
        )
        loss.backward()  # type: ignore[no-untyped-call]
        torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad], 1.0)
        self.optimizer.step()
        self.model.eval()
        self.step += 1
        self.save_checkpoint(self.step)
        seconds = time.perf_counter() - started
        tokens = int(mask.sum())
        return TrainResult(
            step=self.step,
            metrics={
                "losses/sft_loss": float(loss.detach()),
                "charts/dropped_overlength": float(len(examples) - len(rows)),
                "perf/tokens": float(tokens),
                "perf/trainable_tokens": float(int((labels != -100).sum())),
                "perf/train_seconds": seconds,
                "perf/tokens_per_second": tokens / seconds if seconds > 0 else 0.0,
            },
        )

    def save_checkpoint(self, step: int) -> Path:
        assert self.optimizer is not None
        final = self.config.checkpoint_dir(step)
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.model.save_pretrained(tmp)
        torch.save(self.optimizer.state_dict(), tmp / OPTIMIZER_FILE)
        (tmp / STATE_FILE).write_text(json.dumps({"step": step, "base_model": self.config.base_model}))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)  # a checkpoint directory with a step name is always complete
        return final

    def rollback(self, step: int) -> None:
        later = [s for s in checkpoint_steps(self.config.model_dir()) if s > step]
        for s in later:
            shutil.rmtree(self.config.checkpoint_dir(s), ignore_errors=True)
        if later or self.model is None or self.step != step:
            self.model = None
            self.start()
            if self.step != step:
                raise BackendError(f"no checkpoint for step {step} (latest is {self.step})")

    def close(self) -> None:
        self.model = None
        self.optimizer = None

    def _require_started(self) -> None:
        if self.model is None:
            raise BackendError("call start() before sample() or train()")
