"""The `cpu` backend: real GRPO, SFT and DPO steps with LoRA on any causal LM, without a GPU.

The model is the tiny from-config `tiny-qwen2` (tests), a packaged offline model
(`training.models`, e.g. Qwen2.5-Coder-0.5B-Instruct), a local folder or a Hugging Face id.
Sampling records per-token logprobs as vLLM does (`token_id:N` tokens, under the distribution
each token was drawn from, with the temperature on the choice), so ART's own
`tokenize_trajectory_groups` maps choices back to token ids; `packed_tensors_from_tokenized_results`
builds the batch and `art.loss.loss_fn` computes the loss (CISPO-style clipped policy gradient, ART's
default) with the old logprobs taken from the trainer's own forward before the update, as ART's
`precalculate_logprobs` does. DPO is the loss of the DPO paper with the policy the step starts from
(the current adapter) as the reference; TRL itself is not used because its `datasets` dependency
needs numpy>=2, which pufferlib's build here cannot take. Every objective runs one sequence at a
time (gradients accumulate) and computes the vocabulary projection only where a token is scored, so
a 4,000-token episode of a 150k-vocabulary model fits in a few GB. LoRA adapters (peft) are saved as ART checkpoints:
`{path}/{project}/models/{model}/checkpoints/{step:04d}/adapter_model.safetensors`.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

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
from training.backends.sampled import as_sampled, sampling_temperature  # noqa: E402
from training.backends.tiny import ensure_base  # noqa: E402
from training.data.fit import DEFAULT_MAX_SEQ_LEN, SetAsideReason, Unusable, template_messages  # noqa: E402
from training.data.groups import Group, to_art  # noqa: E402

TINY = "tiny-qwen2"
TINY_LR = 2e-2
"""High, because the tiny model starts from random weights and must move within a handful of steps."""
PRETRAINED_LR = 1e-4
"""A common LoRA rate for 0.5-1.5B instruct models: visible change within tens of steps, no collapse."""
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
CHECKPOINTING_FROM_TOKENS = 1_024
"""Sequence length past which a step checkpoints gradients when the run leaves it to rlide."""


def base_model_dir(config: BackendConfig) -> Path:
    """The folder holding the run's base model and tokenizer: the tiny one is made on the spot
    under the run's model directory, the others resolved (and a packaged one fetched) once."""
    if config.base_model == TINY:
        return ensure_base(config.model_dir() / "base", config.seed)
    from training.models.resolve import resolve_base_model

    try:
        return resolve_base_model(config.base_model)
    except (ValueError, OSError, RuntimeError) as exc:
        raise BackendUnavailable(f"base model {config.base_model!r}: {exc}") from exc


def weights_dtype(config: BackendConfig) -> torch.dtype:
    choices = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    if config.dtype in choices:
        return choices[config.dtype]
    if config.dtype != "auto":
        raise BackendUnavailable(f"dtype {config.dtype!r}: choose float32, bfloat16 or auto")
    # bf16 halves memory and doubles matmul speed only where the CPU computes it natively.
    native_bf16 = bool(torch.cpu._is_avx512_bf16_supported())
    return torch.bfloat16 if config.base_model != TINY and native_bf16 else torch.float32


def load_policy(base_dir: Path, adapter_dir: Path | None, *, trainable: bool, config: BackendConfig) -> tuple[Any, Any]:
    """(model, tokenizer): the base with a fresh LoRA, or with the adapter saved in `adapter_dir`."""
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    if tokenizer.pad_token_id is None:  # ART and batched scoring pad; a pad id is never scored
        tokenizer.pad_token = tokenizer.eos_token
    base = AutoModelForCausalLM.from_pretrained(base_dir, dtype=weights_dtype(config))
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(base, adapter_dir, is_trainable=trainable)
    else:
        targets = config.lora_targets if config.lora_targets == "all-linear" else config.lora_targets.split(",")
        lora = LoraConfig(
            r=config.lora_rank,
            lora_alpha=2 * config.lora_rank,
            lora_dropout=0.0,
            bias="none",
            task_type="CAUSAL_LM",
            target_modules=targets,
            # A from-config model's logits are near-uniform and small; LoRA alone moves them slowly.
            # Training its (untied) output head too makes a few steps visibly change the policy.
            modules_to_save=["lm_head"] if config.base_model == TINY else None,
        )
        model = get_peft_model(base, lora)
    model.eval()
    return model, tokenizer


def canonical_tools(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Tools as ART's `Trajectory` validates them (OpenAI's tool TypedDict: keys in its declared
    order, unknown keys dropped). ART renders the training prompt from that form; the sampler must
    render the same one, or the chat template prints the tools' JSON in another key order and the
    policy is trained on a prompt it never saw."""
    if not tools:
        return tools
    from openai.types.chat import ChatCompletionFunctionToolParam
    from pydantic import TypeAdapter

    return list(TypeAdapter(list[ChatCompletionFunctionToolParam]).validate_python(tools))  # type: ignore[arg-type]


def prompt_token_ids(
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
) -> list[int]:
    """The ids of the prompt the policy answers: the chat template with its generation prompt, the
    tools in the form ART trains on (`canonical_tools`)."""
    rendered: Any = tokenizer.apply_chat_template(
        template_messages(messages),
        tools=canonical_tools(tools),
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    return list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)


def stop_token_ids(model: Any, tokenizer: Any) -> set[int]:
    """Tokens that end a turn: the tokenizer's eos and the generation config's (an instruct model
    often ends turns with <|im_end|> while its eos is <|endoftext|>)."""
    ids = {tokenizer.eos_token_id}
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(configured if isinstance(configured, list) else [configured])
    return {i for i in ids if isinstance(i, int)}


def check_fits(context: int, prompt_ids: list[int]) -> None:
    """`ContextTooLong` (OpenAI's message) when a prompt leaves no room in the model's context."""
    if len(prompt_ids) >= context:
        raise ContextTooLong(
            f"This model's maximum context length is {context} tokens; the messages resulted in"
            f" {len(prompt_ids)} tokens. Shorten the conversation."
        )


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
    """`n` sampled completions with the logprob of each sampled token under the distribution it was
    drawn from (the policy at `temperature`); also the prompt ids. Each choice records its
    `temperature` (an extra field, as vLLM adds its own) so the trainer scores at the same one.

    `prompt_ids` overrides the chat template's tokenization (a continued conversation whose earlier
    turns must keep their sampled tokens). `stop`: a completion ends once its text holds one of
    these; its content is the text before it, its token ids end with the token that completed it.
    `top_p` < 1 draws each token from the smallest set of most likely tokens holding that much
    probability; the logprob recorded is still the token's under the whole tempered distribution,
    which is what a trainer recomputes from the model (it cannot see the nucleus cut). Greedy
    decoding (temperature 0) records the policy's own logprobs.

    The prompt is computed once and its cache shared by the `n` completions, which then decode
    together, one forward pass per token for the whole group.

    A completion stops where the model's context ends: `max_tokens` is capped to the room left,
    and a prompt that leaves none raises `ContextTooLong`. Past its positions the model would
    still compute, on positions it was never trained on, a turn too long to train on."""
    if temperature < 0:
        raise ValueError("temperature must be >= 0 (0 is greedy decoding)")
    if prompt_ids is None:
        prompt_ids = prompt_token_ids(tokenizer, messages, tools)
    context = model.config.max_position_embeddings
    check_fits(context, prompt_ids)
    max_tokens = min(max_tokens, context - len(prompt_ids))
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    stops = stop_token_ids(model, tokenizer)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt_ids]), use_cache=True, logits_to_keep=1)
        past = out.past_key_values
        if n > 1:
            past.batch_repeat_interleave(n)
        sampled, lps = _decode(
            model,
            past,
            out.logits[:, -1, :].expand(n, -1),
            max_tokens=max_tokens,
            done=lambda _, ids: ids[-1] in stops or _stop_at(tokenizer, ids, stop) is not None,
            temperature=temperature,
            top_p=top_p,
            generator=generator,
        )
    choices = [_choice(tokenizer, i, sampled[i], lps[i], stops, stop, temperature) for i in range(n)]
    return choices, prompt_ids


def _choice(
    tokenizer: Any,
    index: int,
    toks: list[int],
    lps: list[float],
    stops: set[int],
    stop: list[str] | None,
    temperature: float,
) -> Choice:
    """A sampled completion as an OpenAI choice: its text up to a stop token or string, each sampled
    token's id and logprob, and the temperature it was drawn at."""
    finished = bool(toks) and toks[-1] in stops
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
        for tid, lp in zip(toks, lps, strict=True)
    ]
    return Choice(
        finish_reason="stop" if finished else "length",
        index=index,
        message=ChatCompletionMessage(role="assistant", content=content),
        logprobs=ChoiceLogprobs(content=logprobs),
        temperature=temperature,  # type: ignore[call-arg]
    )


@dataclass(frozen=True)
class Asked:
    """One request of a batch (`sample_batch`): its prompt ids, its own token budget and stop strings."""

    prompt_ids: list[int]
    max_tokens: int
    stop: list[str] | None = None


def sample_batch(
    model: Any, tokenizer: Any, asked: list[Asked], *, temperature: float, top_p: float = 1.0
) -> list[Choice]:
    """One sampled completion of each of several requests' prompts, decoded together (left-padded,
    one forward pass per token for the batch; a finished row leaves it): what an endpoint answering
    many agents at once needs, where one request at a time leaves a memory-bound CPU idle. Each
    choice is what `sample_choices` returns for its request alone (same logprobs up to padding's
    rounding); a prompt past the model's context raises `ContextTooLong`."""
    context = model.config.max_position_embeddings
    for request in asked:
        check_fits(context, request.prompt_ids)
    budgets = [min(a.max_tokens, context - len(a.prompt_ids)) for a in asked]
    width = max(len(a.prompt_ids) for a in asked)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.tensor([[pad] * (width - len(a.prompt_ids)) + a.prompt_ids for a in asked])
    mask = torch.tensor([[0] * (width - len(a.prompt_ids)) + [1] * len(a.prompt_ids) for a in asked])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    stops = stop_token_ids(model, tokenizer)

    def done(row: int, out: list[int]) -> bool:
        return len(out) >= budgets[row] or out[-1] in stops or _stop_at(tokenizer, out, asked[row].stop) is not None

    # Prompts of one length need no padding: decoded as `sample_choices` decodes one, bit for bit.
    padded = (mask, positions) if any(len(a.prompt_ids) != width for a in asked) else None
    with torch.no_grad():
        if padded is None:
            out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        else:
            out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        sampled, lps = _decode(
            model,
            out.past_key_values,
            out.logits[:, -1, :],
            max_tokens=max(budgets),
            done=done,
            temperature=temperature,
            top_p=top_p,
            generator=None,
            padded=padded,
        )
    return [
        _choice(tokenizer, 0, sampled[row], lps[row], stops, asked[row].stop, temperature) for row in range(len(asked))
    ]


def _pick(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprobs of the distribution at `temperature`, the next token of each row): greedy at
    temperature 0 (the policy's own logprobs), else drawn from the tempered (and nucleus-cut)
    distribution. The tempered logprobs are what the token was sampled from: a policy gradient
    on the untempered ones would push the policy at 1 with tokens it did not draw."""
    if temperature == 0:
        logp = torch.log_softmax(logits.float(), dim=-1)
        return logp, logp.argmax(dim=-1)
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    probs = logp.exp()
    probs = _nucleus(probs, top_p) if top_p < 1 else probs
    return logp, torch.multinomial(probs, 1, generator=generator).squeeze(1)


def generate_batch(
    model: Any,
    tokenizer: Any,
    prompts: list[list[int]],
    *,
    max_tokens: int,
    temperature: float = 0.0,
    seed: int | None = None,
    n: int = 1,
) -> list[list[int]]:
    """The completion ids of several different prompts decoded together (left-padded, one forward
    pass per token for the whole batch): what evaluation over many tasks needs, where one prompt
    at a time leaves a memory-bound CPU idle. Each completion ends with its stop token, if any.
    `n` > 1: that many completions of each prompt (prompt i's at i*n to i*n+n-1), its prompt
    computed once."""
    if not prompts:
        return []
    width = max(len(p) for p in prompts)
    if width + max_tokens > model.config.max_position_embeddings:
        max_tokens = max(1, model.config.max_position_embeddings - width)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    stops = stop_token_ids(model, tokenizer)
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        past, logits = out.past_key_values, out.logits[:, -1, :]
        if n > 1:
            past.batch_repeat_interleave(n)
            logits, mask, positions = (t.repeat_interleave(n, dim=0) for t in (logits, mask, positions))
        out_ids, _ = _decode(
            model,
            past,
            logits,
            max_tokens=max_tokens,
            done=lambda _, ids: ids[-1] in stops,
            temperature=temperature,
            top_p=1.0,
            generator=generator,
            padded=(mask, positions),
        )
    return out_ids


def _decode(
    model: Any,
    past: Any,
    logits: torch.Tensor,
    *,
    max_tokens: int,
    done: Callable[[int, list[int]], bool],
    temperature: float,
    top_p: float,
    generator: torch.Generator | None,
    padded: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[list[list[int]], list[list[float]]]:
    """The token ids, and the policy's logprob of each, that every row of a batch decodes after its
    prompt (`past`, its cache; `logits`, its next-token logits; `padded`, the attention mask and
    positions of left-padded prompts), together, one forward pass per token, until `done(row, ids)`
    says a row's ids are finished or `max_tokens`. A finished row leaves the batch: a step's cost grows
    with the rows in it, and a batch's answers differ in length by hundreds of tokens."""
    rows = logits.shape[0]
    ids: list[list[int]] = [[] for _ in range(rows)]
    lps: list[list[float]] = [[] for _ in range(rows)]
    live = list(range(rows))  # the batch's rows, by the index of the row they decode
    mask, positions = padded if padded is not None else (None, None)
    for _ in range(max_tokens):
        logp, nxt = _pick(logits, temperature, top_p, generator)
        going = []
        for at, row in enumerate(live):
            tid = int(nxt[at])
            ids[row].append(tid)
            lps[row].append(float(logp[at, tid]))
            if not done(row, ids[row]):
                going.append(at)
        if not going:
            break
        if len(going) < len(live):
            keep = torch.tensor(going)
            past.batch_select_indices(keep)
            nxt, live = nxt[keep], [live[at] for at in going]
            if mask is not None and positions is not None:
                mask, positions = mask[keep], positions[keep]
        kwargs: dict[str, torch.Tensor] = {}
        if mask is not None and positions is not None:
            mask = torch.cat([mask, torch.ones(len(live), 1, dtype=mask.dtype)], dim=1)
            positions = positions[:, -1:] + 1
            kwargs = {"attention_mask": mask, "position_ids": positions}
        out = model(input_ids=nxt.unsqueeze(1), past_key_values=past, use_cache=True, **kwargs)
        past, logits = out.past_key_values, out.logits[:, -1, :]
    return ids, lps


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
    tokenizer: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *, first: int = 0
) -> tuple[list[int], list[int]]:
    """(input ids, labels) of a conversation; labels are -100 except on assistant turns (those at
    index `first` or later: a DPO completion scores only its own turns, not the prompt's).

    Each assistant turn's span is where the rendering of messages[:k] (with the generation prompt)
    ends and the rendering of messages[:k+1] ends; the fast tokenizer's offsets map spans to tokens.
    """
    messages = template_messages(messages)
    tools = canonical_tools(tools)  # the form the sampler renders, keys in the same order
    full = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    spans = []
    for k, message in enumerate(messages):
        if k < first or message.get("role") != "assistant":
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


def scored_log_softmax(
    model: Any,
    ids: torch.Tensor,
    scored: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    temperatures: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions t, the next-token log-distribution at each t, [positions x vocabulary]) for every
    token t+1 that `scored` marks, of one sequence `ids`; `temperatures[t+1]`, when given, is the
    temperature token t+1 was sampled at, and its distribution is scored at it. The output head
    runs only at those positions: a full [length x vocabulary] logits tensor of a real model is
    gigabytes."""
    positions = torch.nonzero(scored[1:]).squeeze(1)
    if positions.numel() == 0:
        return positions, torch.zeros(0, 0)
    kwargs = {"position_ids": position_ids.unsqueeze(0)} if position_ids is not None else {}
    logits = model(input_ids=ids.unsqueeze(0), logits_to_keep=positions, **kwargs).logits[0].float()
    if temperatures is not None:
        logits = logits / temperatures[positions + 1].unsqueeze(1)
    return positions, torch.log_softmax(logits, dim=-1)


def next_token_logprobs(logp: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The logprob of token t+1 of `ids` at each of `positions` t, from their log-distributions."""
    if positions.numel() == 0:
        return torch.zeros(0)
    return torch.gather(logp, 1, ids[positions + 1].unsqueeze(1)).squeeze(1)


def scored_logprobs(
    model: Any,
    ids: torch.Tensor,
    scored: torch.Tensor,
    position_ids: torch.Tensor | None = None,
    temperatures: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(positions t, logprob of token t+1 at t) for every token t+1 that `scored` marks."""
    positions, logp = scored_log_softmax(model, ids, scored, position_ids, temperatures)
    return positions, next_token_logprobs(logp, ids, positions)


def token_temperatures(result: Any) -> torch.Tensor:
    """The temperature each token of an ART `TokenizedResult` was sampled at (1 outside its
    choices): ART's `choice_offsets` are where its sampled choices' tokens start, in order."""
    from openai.types.chat.chat_completion import Choice

    temperatures = torch.ones(len(result.token_ids))
    sampled = [
        (c.logprobs.content or [], sampling_temperature(c))
        for c in result.trajectory.messages_and_choices
        if isinstance(c, Choice) and c.logprobs is not None
    ]
    for start, (tokens, temperature) in zip(result.choice_offsets, sampled, strict=False):
        temperatures[start : start + len(tokens)] = temperature
    return temperatures


def completion_logprob(model: Any, ids: list[int], labels: list[int]) -> torch.Tensor:
    """The summed logprob of a sequence's labelled tokens (a DPO side)."""
    _, logps = scored_logprobs(model, torch.tensor(ids), torch.tensor(labels) != -100)
    return logps.sum()


class CpuBackend:
    name = "cpu"

    @staticmethod
    def check(config: BackendConfig) -> None:
        try:
            import art.loss  # noqa: F401
            import art.preprocessing.pack  # noqa: F401
            import art.preprocessing.tokenize  # noqa: F401
            import peft  # noqa: F401
        except ImportError as exc:
            raise BackendUnavailable(f"the cpu backend needs {exc.name}: pip install 'rlide[training]'") from exc
        weights_dtype(config)
        undo_art_mask_patch()

    def __init__(self, config: BackendConfig) -> None:
        self.config = config
        self.step = 0
        self.model: Any = None
        self.tokenizer: Any = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.max_seq_len = 0  # `start` sets it from the run's limit or the model's context
        self._checkpointing = False

    def start(self) -> int:
        random.seed(self.config.seed)
        torch.manual_seed(self.config.seed)
        torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
        base_dir = base_model_dir(self.config)
        steps = checkpoint_steps(self.config.model_dir())
        latest = steps[-1] if steps else None
        adapter = self.config.checkpoint_dir(latest) if latest is not None else None
        if adapter is not None:
            self._check_same_base(adapter)
        self.model, self.tokenizer = load_policy(base_dir, adapter, trainable=True, config=self.config)
        context = int(getattr(self.model.config, "max_position_embeddings", 0) or DEFAULT_MAX_SEQ_LEN)
        self.max_seq_len = self.config.max_seq_len or min(context, DEFAULT_MAX_SEQ_LEN)
        params = [p for p in self.model.parameters() if p.requires_grad]
        default_lr = TINY_LR if self.config.base_model == TINY else PRETRAINED_LR
        self.optimizer = torch.optim.AdamW(params, lr=self.config.learning_rate or default_lr, weight_decay=0.0)
        if adapter is not None and (adapter / OPTIMIZER_FILE).exists():
            self.optimizer.load_state_dict(torch.load(adapter / OPTIMIZER_FILE, weights_only=True))
        self.step = latest or 0
        return self.step

    def _check_same_base(self, checkpoint: Path) -> None:
        """A LoRA adapter only means something on the base it was trained on."""
        state = checkpoint / STATE_FILE
        trained_on = json.loads(state.read_text()).get("base_model") if state.exists() else None
        if trained_on is not None and trained_on != self.config.base_model:
            raise BackendUnavailable(
                f"the checkpoints in {self.config.model_dir()} were trained on {trained_on!r}, not"
                f" {self.config.base_model!r}: train {self.config.base_model!r} under another --run or"
                " model directory, or go back to the run's base model"
            )

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
        """One GRPO step on rlide's groups: `train_art` on their ART form."""
        return self.train_art(to_art(groups))

    def tokenize_art(self, art_groups: list[Any]) -> list[Any]:
        """ART's tokenization of these groups (its `TokenizedResult`s), with each sampled choice as
        `sampled.as_sampled` hands it (its tool calls only in its sampled tokens), so each trained
        sequence is the prompt the policy saw followed by the tokens it sampled."""
        from art.preprocessing.tokenize import tokenize_trajectory_groups

        random.seed(self.config.seed * 100_003 + self.step)  # ART shuffles with `random`
        return list(
            tokenize_trajectory_groups(
                self.tokenizer, as_sampled(art_groups), allow_training_without_logprobs=False, scale_rewards=True
            )
        )

    def train_art(self, art_groups: list[Any], learning_rate: float | None = None) -> TrainResult:
        """One GRPO step on ART `TrajectoryGroup`s: ART's tokenization and loss, one trajectory at a
        time (the per-sequence losses are summed and divided by the batch's scored tokens: ART's
        token mean). `learning_rate`: this step's, as ART's `backend.train` takes it (None: the run's).

        The old logprobs of the importance ratio are the trainer's own forward before the update
        (ART's `precalculate_logprobs`): the sampler's decode (a KV cache, in bfloat16 by default)
        and the trainer's full forward disagree by float error (in bf16 on Qwen2.5-Coder-0.5B an
        outside review measured up to 0.27 nats/token, mean 0.05), which would make the ratios of an
        on-policy step 0.76-1.31 instead of 1. How far they disagree is reported
        (`losses/max_logprob_drift`, `losses/mean_logprob_drift`). Each token is scored at the
        temperature it was sampled at (`token_temperatures`). The KL term, with `kl_penalty_coef`,
        is the k3 estimator against the base model (adapters off), exp(ref - new) - (ref - new) - 1
        per sampled token, averaged over the batch's tokens and added to the loss (`losses/kl`)."""
        from art.loss import loss_fn
        from art.preprocessing.pack import packed_tensors_from_tokenized_results

        self._require_started()
        assert self.optimizer is not None
        if learning_rate is not None:
            for param_group in self.optimizer.param_groups:
                param_group["lr"] = learning_rate
        started = time.perf_counter()
        tokenized = self.tokenize_art(art_groups)
        results = [r for r in tokenized if len(r.token_ids) <= self.max_seq_len]
        if not results:
            raise BackendError(
                "no trainable tokens in these groups (no choices with logprobs, zero advantage, or every"
                f" trajectory longer than max_seq_len={self.max_seq_len})"
            )
        for index, result in enumerate(results):
            # One row per result (`pack_results=False`); its parent id names the result the packing's
            # shuffle put in that row. ART uses prompt ids only to share prompts within a packed row.
            result.prompt_id = index
        packed = packed_tensors_from_tokenized_results(
            results, seq_len=self.max_seq_len, pad_token_id=-100, pack_results=False, verbosity=0
        )
        tokens = packed["tokens"]
        rows, width = tokens.shape
        per_token = {k: v for k, v in packed.items() if isinstance(v, torch.Tensor) and v.shape == (rows, width)}
        scored_total = float(packed["assistant_mask"][:, 1:].sum())
        coef = self.config.kl_penalty_coef
        news, sampled, policy_loss, kl_sum, ratio_deviation = [], [], 0.0, 0.0, 0.0
        self._begin_step(int((tokens != -100).sum(dim=1).max()))
        for r in range(rows):
            length = int((tokens[r] != -100).sum())  # one trajectory per row, padded at its end
            row = {k: v[r : r + 1, :length].clone() for k, v in per_token.items()}
            temperatures = token_temperatures(results[int(packed["parent_ids"][r, 0])])[:length]
            scored = row["assistant_mask"][0].bool()
            ids, pos = row["tokens"][0], row["input_pos"][0]
            positions, logps = scored_logprobs(self.model, ids, scored, pos, temperatures)
            if positions.numel() == 0:
                continue
            sampled.append(row["logprobs"][0, positions + 1].clone())
            row["logprobs"][0, positions + 1] = logps.detach()  # the old policy: these weights, before the step
            new_lp = torch.zeros(1, length, dtype=logps.dtype).index_put(
                (torch.zeros_like(positions), positions), logps
            )
            loss = loss_fn(row, new_lp, None, None, {}, reduction="sum")  # type: ignore[arg-type]
            total = loss.policy_loss / scored_total
            if coef > 0:
                with torch.no_grad(), self.model.disable_adapter():
                    _, ref = scored_logprobs(self.model, ids, scored, pos, temperatures)
                log_ratio = ref - logps
                kl = (torch.exp(log_ratio) - log_ratio - 1).sum() / scored_total
                total = total + coef * kl
                kl_sum += float(kl.detach())
            total.backward()  # type: ignore[no-untyped-call]
            policy_loss += float(loss.policy_loss.detach()) / scored_total
            old = row["logprobs"][0, positions + 1]
            ratio_deviation = max(ratio_deviation, float((torch.exp(logps.detach() - old) - 1).abs().max()))
            news.append(logps.detach())
        grad_norm = self._finish_step()
        new_all, old_all = torch.cat(news), torch.cat(sampled)
        recorded = ~torch.isnan(old_all)
        # How far the trainer's logprobs are from the sampler's (float error only, when on-policy).
        gap = (new_all[recorded] - old_all[recorded]).abs()
        drift = float(gap.max()) if recorded.any() else math.nan
        corr = float(torch.corrcoef(torch.stack([new_all[recorded].exp(), old_all[recorded].exp()]))[0, 1])
        self._record_trained(
            "grpo",
            [(g.metadata.get("scenario") or g.metadata.get("group_key"), g.trajectories[0].messages_and_choices)
             for g in art_groups],
        )  # fmt: skip
        total_tokens = int((tokens != -100).sum())
        return self._result(
            started,
            total_tokens,
            {
                "losses/policy_loss": policy_loss,
                **({"losses/kl": kl_sum} if coef > 0 else {}),
                "losses/grad_norm": grad_norm,
                "losses/probs_corr": corr,
                "losses/max_logprob_drift": drift,
                "losses/mean_logprob_drift": float(gap.mean()) if recorded.any() else math.nan,
                "losses/max_ratio_deviation": ratio_deviation,
                "perf/sequences": float(rows),
                "perf/trainable_tokens": scored_total,
                "charts/dropped_overlength": float(len(tokenized) - len(results)),
            },
        )

    def train_sft(self, conversations: list[dict[str, Any]]) -> TrainResult:
        """One supervised step on chat records (the `sft` export layout: {"messages", "tools"?}):
        cross-entropy on the assistant turns only (tool calls included), then a checkpoint."""
        self._require_started()
        started = time.perf_counter()
        examples = [sft_example(self.tokenizer, c["messages"], c.get("tools")) for c in conversations]
        skipped = {i: why for i, (ids, labels) in enumerate(examples) if (why := self._unusable(ids, labels))}
        rows = [e for i, e in enumerate(examples) if i not in skipped]
        if not rows:
            first = next(iter(skipped.values())).detail
            raise NoTrainableData(f"no conversation of this batch is usable: {first}", skipped)
        scored_total = sum(sum(lab != -100 for lab in labels[1:]) for _, labels in rows)
        coef = self.config.kl_penalty_coef
        loss_sum = kl_sum = 0.0
        self._begin_step(max(len(ids) for ids, _ in rows))
        for ids, labels in rows:
            tokens, scored = torch.tensor(ids), torch.tensor(labels) != -100
            positions, logp = scored_log_softmax(self.model, tokens, scored)
            loss = -next_token_logprobs(logp, tokens, positions).sum() / scored_total
            loss_sum += float(loss.detach())
            if coef > 0:
                # Forward KL(base || policy) over the whole vocabulary at each trained position: the
                # base's alternatives keep their mass, so imitating a narrow project does not
                # sharpen every other choice the model makes (the target becomes, in effect, the
                # demonstrated token mixed with the base's distribution in the ratio 1 : coef).
                with torch.no_grad(), self.model.disable_adapter():
                    _, base = scored_log_softmax(self.model, tokens, scored)
                kl = (base.exp() * (base - logp)).sum() / scored_total
                kl_sum += float(kl.detach())
                loss = loss + coef * kl
            loss.backward()  # type: ignore[no-untyped-call]
        grad_norm = self._finish_step()
        self._record_trained(
            "sft", [(c.get("episode_id"), c["messages"]) for i, c in enumerate(conversations) if i not in skipped]
        )
        return self._result(
            started,
            sum(len(ids) for ids, _ in rows),
            {
                "losses/sft_loss": loss_sum,
                **({"losses/sft_kl": kl_sum} if coef > 0 else {}),
                "losses/grad_norm": grad_norm,
                "perf/trainable_tokens": float(scored_total),
                "charts/skipped": float(len(skipped)),
            },
            skipped,
        )

    def train_dpo(self, pairs: list[dict[str, Any]]) -> TrainResult:
        """One DPO step on preference pairs (the `dpo` export layout: {"prompt", "chosen",
        "rejected", "tools"?}): -log sigmoid(beta * (policy margin - reference margin)), the
        reference being the policy this step starts from (the current adapter), not the base: what
        SFT and GRPO taught it is where DPO starts. Each pair is trained once, so its reference margin
        is the policy's margin before the update: the same weights, so this forward's, detached. The
        loss is therefore log 2 and its gradient beta/2 times that of the policy margin; the metrics
        say how the policy ranked each pair before the step (`logps/margin`: log pi(chosen) -
        log pi(rejected), mean; `logps/accuracy`: the share it already preferred)."""
        self._require_started()
        started = time.perf_counter()
        usable_pairs, skipped = [], {}
        for i, pair in enumerate(pairs):
            prompt, tools = list(pair["prompt"]), pair.get("tools")
            chosen = sft_example(self.tokenizer, prompt + list(pair["chosen"]), tools, first=len(prompt))
            rejected = sft_example(self.tokenizer, prompt + list(pair["rejected"]), tools, first=len(prompt))
            why = self._unusable(*chosen) or self._unusable(*rejected)
            if why:
                skipped[i] = why
            else:
                usable_pairs.append((pair, chosen, rejected))
        if not usable_pairs:
            raise NoTrainableData(
                f"no preference pair of this batch is usable: {next(iter(skipped.values())).detail}", skipped
            )
        beta = self.config.dpo_beta
        loss_sum, margins = 0.0, []
        self._begin_step(max(len(ids) for _, chosen, rejected in usable_pairs for ids, _ in (chosen, rejected)))
        for _, chosen, rejected in usable_pairs:
            policy = completion_logprob(self.model, *chosen) - completion_logprob(self.model, *rejected)
            reference = policy.detach()
            loss = -torch.nn.functional.logsigmoid(beta * (policy - reference)) / len(usable_pairs)
            loss.backward()  # type: ignore[no-untyped-call]
            loss_sum += float(loss.detach())
            margins.append(float(reference))
        grad_norm = self._finish_step()
        self._record_trained("dpo", [(None, s[0]["prompt"]) for s in usable_pairs])
        return self._result(
            started,
            sum(len(c[0]) + len(r[0]) for _, c, r in usable_pairs),
            {
                "losses/dpo_loss": loss_sum,
                "losses/grad_norm": grad_norm,
                "logps/accuracy": sum(m > 0 for m in margins) / len(margins),
                "logps/margin": sum(margins) / len(margins),
                "charts/skipped": float(len(skipped)),
            },
            skipped,
        )

    def _unusable(self, ids: list[int], labels: list[int]) -> Unusable | None:
        """Why a tokenized conversation cannot be trained on, or None."""
        if len(ids) > self.max_seq_len:
            return Unusable.too_long(
                f"{len(ids)} tokens, longer than max_seq_len={self.max_seq_len}", len(ids), self.max_seq_len
            )
        if all(lab == -100 for lab in labels[1:]):
            return Unusable(SetAsideReason.not_trainable, "no assistant turn to learn from")
        return None

    def _begin_step(self, longest: int) -> None:
        """Train mode, gradients zeroed, and gradient checkpointing for a step whose longest
        sequence is `longest` tokens: as configured, or (None) on past `CHECKPOINTING_FROM_TOKENS`,
        where a sequence's activations outweigh the model (a 0.5B step on 3,400 tokens: 10.7 GB
        peak without, 4.6 GB with, 36% slower; docs/training.md)."""
        assert self.optimizer is not None
        wanted = self.config.gradient_checkpointing
        if wanted is None:
            wanted = longest > CHECKPOINTING_FROM_TOKENS
        if wanted != self._checkpointing:
            if wanted:  # not reentrant: LoRA's frozen inputs need no grad of their own
                self.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            else:
                self.model.gradient_checkpointing_disable()
            self._checkpointing = wanted
        self.model.train()
        self.optimizer.zero_grad()

    def _finish_step(self) -> float:
        """Clip, step, back to eval mode; the gradient norm before clipping."""
        assert self.optimizer is not None
        grad_norm = float(
            torch.nn.utils.clip_grad_norm_(
                [p for p in self.model.parameters() if p.requires_grad],
                float(self.config.extra.get("max_grad_norm", 1.0)),
            )
        )
        self.optimizer.step()
        self.model.eval()
        return grad_norm

    def _result(
        self, started: float, tokens: int, metrics: dict[str, float], skipped: dict[int, Unusable] | None = None
    ) -> TrainResult:
        """Save the next checkpoint and report the step with its timing."""
        self.step += 1
        self.save_checkpoint(self.step)
        seconds = time.perf_counter() - started
        return TrainResult(
            step=self.step,
            metrics={
                **metrics,
                "perf/tokens": float(tokens),
                "perf/train_seconds": seconds,
                "perf/tokens_per_second": tokens / seconds if seconds > 0 else 0.0,
            },
            skipped=skipped or {},
        )

    def _record_trained(self, algorithm: str, items: list[tuple[str | None, list[dict[str, Any]]]]) -> None:
        from training.data.ledger import record_trained

        messages = [(task, [m for m in conv if isinstance(m, dict) and "role" in m]) for task, conv in items]
        record_trained(self.config.model_dir(), step=self.step + 1, algorithm=algorithm, items=messages)

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
