"""Trajectories as ART must see them to train on exactly what the policy sampled. Torch-free, so the
hosted ART adapters (serverless, tinker) use it without a local model.

ART's tokenizer renders each trainable choice through the chat template with a sentinel for its
content, *and its `tool_calls`*, then puts the sampled tokens in place of the sentinel. A student's
sampled tokens already spell its tool call (`<tool_call>{...}</tool_call>`, parsed into `tool_calls`
by the policy endpoint), so every call before the last turn would appear twice, the second time as
the template renders it (Qwen2.5's template prints JSON-text arguments as a quoted string), and
every later turn would be trained on a context the policy never saw. ART drops the calls of the
*final* trainable choice itself; `as_sampled` drops them from every choice that has sampled tokens.
"""

from __future__ import annotations

from typing import Any


def sampled_choice(choice: Any) -> Any:
    """`choice` without `tool_calls` when it carries sampled tokens (its logprobs), which hold the
    calls already; the content is kept (ART only renders it into its human-readable `chat`)."""
    if choice.logprobs is None or not choice.message.tool_calls:
        return choice
    return choice.model_copy(update={"message": choice.message.model_copy(update={"tool_calls": None})})


def as_sampled(art_groups: list[Any]) -> list[Any]:
    """ART `TrajectoryGroup`s with every sampled choice as `sampled_choice` gives it (new objects)."""
    from openai.types.chat.chat_completion import Choice

    return [
        group.model_copy(
            update={
                "trajectories": [
                    trajectory.model_copy(
                        update={
                            "messages_and_choices": [
                                sampled_choice(item) if isinstance(item, Choice) else item
                                for item in trajectory.messages_and_choices
                            ]
                        }
                    )
                    for trajectory in group.trajectories
                ]
            }
        )
        for group in art_groups
    ]


def sampling_temperature(choice: Any) -> float:
    """The temperature a choice's tokens were drawn at, as the cpu sampler records it on the choice
    (`temperature`, next to vLLM-style extras); 1 when unrecorded (an upstream reporting the
    untempered policy's logprobs) or greedy (0: the policy's own distribution is what is scored)."""
    recorded = (choice.model_extra or {}).get("temperature")
    return float(recorded) if isinstance(recorded, int | float) and recorded > 0 else 1.0
