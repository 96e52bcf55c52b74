"""Why data went untrained in one worker invocation, in lines a person can act on.

The worker tells `Untrained` what each step looked at and left out (external episodes SFT could not
use, preference pairs, GRPO groups without reward variance or too stale, scenarios whose verifier
could not run); `lines()` says each cause once with what to change, and `nothing_trained()` joins
them into the one line a pass that trained nothing ends with.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from training.data.fit import SetAsideReason, Unusable


@dataclass
class _Unusable:
    """Items of one kind (episodes for SFT, pairs for DPO) the backend could not train on."""

    seen: int = 0
    too_long: int = 0
    longest: int = 0
    limit: int = 0
    other: Counter[str] = field(default_factory=Counter)

    def add(self, seen: int, reasons: list[Unusable]) -> None:
        self.seen += seen
        for reason in reasons:
            if reason.reason is SetAsideReason.too_long and reason.limit:
                self.too_long += 1
                self.longest = max(self.longest, reason.tokens)
                self.limit = reason.limit
            else:
                self.other[reason.detail] += 1

    def lines(self, noun: str, fixes: str) -> list[str]:
        out = []
        if self.too_long:
            fit = self.seen - self.too_long - sum(self.other.values())
            out.append(
                f"{fit} of {self.seen} {noun} fit max_seq_len {self.limit} (longest {self.longest:,} tokens):"
                f" raise --max-seq-len (to {self.longest} to take them all; memory and time grow with it){fixes}"
            )
        for reason, count in self.other.items():
            out.append(f"{count} of {self.seen} {noun} set aside: {reason}")
        return out


@dataclass
class Untrained:
    """Per worker invocation, counts a person acts on (`training.data.fit.SetAside` is one
    selection's reasons; these add what the steps and the backend left out)."""

    sft: _Unusable = field(default_factory=_Unusable)
    dpo: _Unusable = field(default_factory=_Unusable)
    groups: int = 0
    zero_variance: int = 0
    stale: int = 0
    scenarios_unavailable: int = 0
    scenario_reason: str | None = None
    sft_waiting_no_backend: str | None = None
    dpo_waiting_off: int = 0
    """Preference pairs waiting while DPO is off (`--dpo-batch 0`)."""

    def lines(self) -> list[str]:
        out = self.sft.lines("external episodes", " or imitate the task and final answer only: --sft-view answer")
        out += self.dpo.lines("preference pairs", "")
        if self.sft_waiting_no_backend:
            out.append(self.sft_waiting_no_backend)
        if self.dpo_waiting_off:
            out.append(f"{self.dpo_waiting_off} preference pairs wait but DPO is off: --dpo-batch 4 trains on them")
        if self.zero_variance:
            out.append(
                f"{self.groups - self.zero_variance - self.stale} of {self.groups} GRPO groups had reward variance"
                f" ({self.zero_variance} had equal rewards for every rollout): raise --group-size or --temperature,"
                " give answers room (--max-tokens), or use scenarios the model sometimes solves"
            )
        if self.stale:
            out.append(f"{self.stale} of {self.groups} groups were sampled by a policy too old (max_staleness)")
        if self.scenarios_unavailable:
            out.append(
                f"{self.scenarios_unavailable} scenarios skipped, their verifier could not run; latest:"
                f" {self.scenario_reason}"
            )
        return out

    def nothing_trained(self, *, scenarios: str | None) -> str:
        causes = self.lines()
        if not causes:
            where = "no external episode with a reward, no preference pair, no ready policy group"
            if scenarios is None:
                return f"nothing trained: {where}, and self-play is off: pass --scenarios toy or log"
            return f"nothing trained: {where}, and no self-play scenario to sample"
        return "nothing trained: " + "; ".join(causes)
