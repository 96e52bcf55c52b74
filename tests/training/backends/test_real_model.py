"""The cpu backend on a real pretrained model (SmolLM2-135M-Instruct, packaged offline): SFT, GRPO
and DPO steps that lower their loss, sampled logprobs the trainer recomputes exactly (tools in the
prompt, temperature 0.7), batched generation equal to one-at-a-time, and the run's base model kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("art")
pytest.importorskip("peft")

from episodes.codec import encode_choice  # noqa: E402
from tests.training.backends.run_tests_tool import TOOLS  # noqa: E402
from training.backends.base import BackendConfig, BackendUnavailable, make_backend  # noqa: E402
from training.backends.cpu import (  # noqa: E402
    CpuBackend,
    generate_batch,
    prompt_token_ids,
    scored_log_softmax,
    scored_logprobs,
    sft_example,
)
from training.data.groups import Group, Trajectory  # noqa: E402
from training.data.ledger import trained_overlap  # noqa: E402
from training.models.registry import PACKAGED, installed  # noqa: E402

MODEL = "smollm2-135m-instruct"
pytestmark = pytest.mark.skipif(
    not installed(PACKAGED[MODEL]),
    reason=f"{MODEL} is not fetched (scripts/setup_models.sh: `rlide models fetch {MODEL}`)",
)
TASK = [{"role": "user", "content": "Write a Python function add(a, b) that returns a + b."}]
ANSWER = "```python\ndef add(a, b):\n    return a + b\n```"


@pytest.fixture
def backend(tmp_path: Path) -> Any:
    backend = make_backend(
        BackendConfig(path=tmp_path / "art", base_model=MODEL, dtype="float32", learning_rate=1e-3, lora_rank=4)
    )
    assert backend.start() == 0
    yield backend
    backend.close()


def test_sft_step_lowers_the_loss_and_records_what_it_trained_on(backend: Any) -> None:
    records = [{"messages": [*TASK, {"role": "assistant", "content": ANSWER}], "episode_id": "ep-1"}]
    first = backend.train_sft(records)
    second = backend.train_sft(records)
    assert second.metrics["losses/sft_loss"] < first.metrics["losses/sft_loss"]
    assert second.step == 2 and first.metrics["perf/trainable_tokens"] > 10
    # The run's ledger knows the task now: evaluating on it would be refused.
    assert trained_overlap(backend.config.model_dir(), [("t", TASK[0]["content"]), ("u", "another task")]) == ["t"]


def _drift_from_base(backend: Any, messages: list[dict[str, Any]]) -> float:
    """Mean forward KL(base || policy) over the assistant tokens of `messages`."""
    ids, labels = sft_example(backend.tokenizer, messages, None)
    tokens, scored = torch.tensor(ids), torch.tensor(labels) != -100
    with torch.no_grad():
        _, policy = scored_log_softmax(backend.model, tokens, scored)
        with backend.model.disable_adapter():
            _, base = scored_log_softmax(backend.model, tokens, scored)
    return float((base.exp() * (base - policy)).sum(-1).mean())


def test_sft_kl_to_the_base_keeps_the_policy_closer_to_it(tmp_path: Path) -> None:
    """The same SFT steps with and without `kl_penalty_coef`: with it the loss reports the KL, the
    demonstration is still learned, and the policy moves less from the base, on the trained answer
    and on an unrelated one."""
    records = [{"messages": [*TASK, {"role": "assistant", "content": ANSWER}]}]
    other = [{"role": "user", "content": "Name three colors."}, {"role": "assistant", "content": "Red, green, blue."}]
    drifts, losses, kls = {}, {}, {}
    for coef in (0.0, 1.0):
        config = BackendConfig(
            path=tmp_path / str(coef), base_model=MODEL, dtype="float32", learning_rate=1e-3, lora_rank=4,
            kl_penalty_coef=coef,
        )  # fmt: skip
        backend = make_backend(config)
        backend.start()
        metrics = [backend.train_sft(records).metrics for _ in range(4)]
        losses[coef] = [m["losses/sft_loss"] for m in metrics]
        kls[coef] = [m.get("losses/sft_kl") for m in metrics]
        drifts[coef] = (_drift_from_base(backend, records[0]["messages"]), _drift_from_base(backend, other))
        backend.close()
    assert kls[0.0] == [None] * 4
    assert kls[1.0][0] == pytest.approx(0.0, abs=1e-6) and kls[1.0][-1] > 0  # LoRA starts as the base
    assert losses[1.0][-1] < losses[1.0][0]
    assert drifts[1.0][0] < drifts[0.0][0] and drifts[1.0][1] < drifts[0.0][1]


def test_an_over_long_conversation_is_set_aside_with_its_reason(tmp_path: Path) -> None:
    backend = make_backend(BackendConfig(path=tmp_path / "art", base_model=MODEL, dtype="float32", max_seq_len=64))
    backend.start()
    fits = {"messages": [*TASK, {"role": "assistant", "content": "ok"}]}
    too_long = {"messages": [{"role": "user", "content": "word " * 200}, {"role": "assistant", "content": "ok"}]}
    result = backend.train_sft([too_long, fits])
    assert list(result.skipped) == [0] and "longer than max_seq_len=64" in result.skipped[0].detail
    assert (result.skipped[0].tokens > 64, result.skipped[0].limit) == (True, 64)
    backend.close()


def test_grpo_step_on_sampled_turns_with_tools_at_temperature_07(backend: Any) -> None:
    choices = backend.sample(TASK, n=4, max_tokens=12, temperature=0.7, seed=3, tools=TOOLS)
    assert all(c.logprobs.content for c in choices)
    prompt_ids = backend.tokenizer.apply_chat_template(TASK, tools=TOOLS, add_generation_prompt=True, tokenize=False)
    assert "run_tests" in prompt_ids  # the tools are in what the policy saw
    group = Group(
        key="g",
        trajectories=[
            Trajectory([*TASK, encode_choice(c)], reward=float(i % 2), tools=TOOLS, policy_step=0)
            for i, c in enumerate(choices)
        ],
        metadata={"scenario": "add"},
    )
    result = backend.train([group])
    # Sampled at 0.7 and recorded under the policy at 0.7: the trainer's recomputation at 0.7 (ART's own
    # rendering of the prompt, tools included) gives the same logprobs.
    assert result.metrics["losses/max_logprob_drift"] < 1e-3
    # The policy-gradient loss on this batch, -sum(advantage x logprob of the turn), went down: the
    # rewarded turns became more likely relative to the others.
    prompt = prompt_token_ids(backend.tokenizer, TASK, TOOLS)
    rewards = [t.reward for t in group.trajectories]
    advantages = [r - sum(rewards) / len(rewards) for r in rewards]

    def loss(logprob_of: Any) -> float:
        return -sum(a * logprob_of(c) for a, c in zip(advantages, choices, strict=True))

    def recorded(choice: Any) -> float:
        return sum(t.logprob for t in choice.logprobs.content)

    def now(choice: Any) -> float:
        ids = prompt + [int(t.token.removeprefix("token_id:")) for t in choice.logprobs.content]
        scored = torch.zeros(len(ids), dtype=torch.bool)
        scored[len(prompt) :] = True
        at_07 = torch.full((len(ids),), 0.7)  # scored at the temperature the tokens were drawn at, as recorded
        with torch.no_grad():
            return float(scored_logprobs(backend.model, torch.tensor(ids), scored, temperatures=at_07)[1].sum())

    assert loss(now) < loss(recorded)


def test_dpo_step_raises_the_policys_margin(backend: Any) -> None:
    pair = {
        "prompt": TASK,
        "chosen": [{"role": "assistant", "content": ANSWER}],
        "rejected": [{"role": "assistant", "content": "I cannot write code."}],
    }
    first = backend.train_dpo([pair])
    assert first.metrics["losses/dpo_loss"] == pytest.approx(0.6931, abs=1e-3)  # policy == reference: log 2
    second = backend.train_dpo([pair])
    # The reference is the policy each step starts from: log 2 again, and the step before it raised
    # the policy's preference for the chosen answer.
    assert second.metrics["losses/dpo_loss"] == pytest.approx(0.6931, abs=1e-3)
    assert second.metrics["logps/margin"] > first.metrics["logps/margin"]


def test_batched_generation_equals_one_prompt_at_a_time(backend: Any) -> None:
    tok = backend.tokenizer
    prompts = [
        prompt_token_ids(tok, m)
        for m in (TASK, [{"role": "user", "content": "Say hi."}], [{"role": "user", "content": "Name three colors."}])
    ]
    together = generate_batch(backend.model, tok, prompts, max_tokens=10)
    alone = [generate_batch(backend.model, tok, [p], max_tokens=10)[0] for p in prompts]
    assert together == alone
    # Several samples of each prompt: each prompt's come together, and greedy ones are its answer.
    assert generate_batch(backend.model, tok, prompts, max_tokens=10, n=2) == [x for x in alone for _ in range(2)]
    drawn = generate_batch(backend.model, tok, prompts, max_tokens=10, n=3, temperature=1.0, seed=5)
    assert len(drawn) == 9 and drawn == generate_batch(
        backend.model, tok, prompts, max_tokens=10, n=3, temperature=1.0, seed=5
    )


def test_a_run_keeps_its_base_model(backend: Any) -> None:
    backend.train_sft([{"messages": [*TASK, {"role": "assistant", "content": ANSWER}]}])
    other = CpuBackend(BackendConfig(path=backend.config.path, base_model="tiny-qwen2"))
    with pytest.raises(BackendUnavailable, match="trained on 'smollm2-135m-instruct'"):
        other.start()


def test_rlide_train_takes_its_model_and_hyperparameters_from_the_command_line(rlide_home: Path) -> None:
    """`rlide train --once --base-model ...` with LoRA and optimizer options: the worker imitates the
    waiting external successes on SmolLM2, the checkpoint has the asked rank, status names the model
    and the step's algorithm."""
    import json

    from typer.testing import CliRunner

    from episodes.store import EpisodeStore
    from mcp_server.cli.app import app
    from tests.logdata import external_episode

    store = EpisodeStore.open(f"sqlite:///{rlide_home / 'episodes.db'}")
    external_episode(store, "make the parser accept comments", 1.0)
    store.close()
    options = ["--base-model", MODEL, "--lora-rank", "4", "--learning-rate", "1e-3", "--dtype", "float32"]
    done = CliRunner().invoke(app, ["train", "--once", "--scenarios", "none", *options])
    assert done.exit_code == 0, done.output
    adapter = rlide_home / "art" / "rlide" / "models" / "student" / "checkpoints" / "0001" / "adapter_config.json"
    assert json.loads(adapter.read_text())["r"] == 4
    status = json.loads(CliRunner().invoke(app, ["train", "status", "--json"]).stdout)
    assert status["base_model"] == MODEL and [p["algorithm"] for p in status["recent"]] == ["sft"]


@pytest.mark.skipif(
    not installed(PACKAGED["qwen2.5-coder-0.5b-instruct"]),
    reason="rlide models fetch qwen2.5-coder-0.5b-instruct (491 MB) for this check",
)
def test_art_tokenizes_a_qwen_turn_onto_its_sampled_tokens(tmp_path: Path) -> None:
    """Qwen's GGUF pads its vocabulary with `[PAD...]` entries; ART picks one as its sentinel and
    must find it again in the rendered prompt. The converted tokenizer keeps them whole."""
    from art.preprocessing.tokenize import tokenize_trajectory_groups

    from training.data.groups import to_art

    backend = make_backend(BackendConfig(path=tmp_path / "art", base_model="qwen2.5-coder-0.5b-instruct"))
    backend.start()
    tok = backend.tokenizer
    assert tok.encode(tok.decode([len(tok) - 1]), add_special_tokens=False) == [len(tok) - 1]
    [choice] = backend.sample(TASK, n=1, max_tokens=6, temperature=0.7, seed=1, tools=TOOLS)
    group = Group(
        key="g",
        trajectories=[
            Trajectory([*TASK, encode_choice(choice)], reward=r, tools=TOOLS, policy_step=0) for r in (0.0, 1.0)
        ],
    )
    [first, _] = tokenize_trajectory_groups(
        tok, to_art([group]), allow_training_without_logprobs=False, scale_rewards=True
    )
    sampled = [int(t.token.removeprefix("token_id:")) for t in choice.logprobs.content]
    assert first.token_ids[-len(sampled) :] == sampled
    backend.close()
