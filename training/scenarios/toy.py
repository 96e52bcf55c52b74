"""A toy task small enough for the tiny CPU model to learn in a handful of GRPO steps.

"Write a number": the reward is the share of digits among the characters of the answer (0..1),
checked by a pure function, so rewards are exact and a learning curve is visible within minutes
on two cores. It exists to prove the loop end to end (sample, reward, group, filter, train,
checkpoint, serve), not to teach anything useful.
"""

from __future__ import annotations

from dataclasses import dataclass

PROMPTS = (
    "Write a number.",
    "Answer with digits only.",
    "Give me a long number.",
    "Reply with a number:",
)


def digit_share(text: str) -> float:
    """Share of digit characters in `text` (0 for empty text)."""
    stripped = "".join(text.split())
    if not stripped:
        return 0.0
    return sum(ch.isdigit() for ch in stripped) / len(stripped)


@dataclass(frozen=True)
class ToyTask:
    prompt: str

    @property
    def messages(self) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.prompt}]

    def reward(self, completion: str) -> float:
        return digit_share(completion)


def toy_tasks() -> list[ToyTask]:
    return [ToyTask(p) for p in PROMPTS]
