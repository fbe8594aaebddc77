"""What `magneton advise` proposes and what trying each proposal gave: a change of one
setting of a program (the second side of a diff that the user did not have to write),
and the variant's measured outcome. The CLI's table, its `--json` and `eval --advise`
read these."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Change:
    """One candidate change of the base program: a setting, the value it had and the one
    to try, where the idea came from, and how the variant is made."""

    kind: str  # "option" | "env" | "config-key" | "constant" | "argument"
    setting: str  # "--attn-implementation", "MLP_DETECT_ANOMALY", "model.attn", "BATCHED"
    from_value: str
    value: str
    source: str  # "rule hf-attn-eager", "option --attn (choices)", "train.py:12 compared"
    share: float = 0.0  # share of the base run's energy whose operators the setting decides
    where: str = ""  # file:line where the setting is made ("" for options and variables)
    rule: str = ""  # the rule id when a rule proposed the value
    args: list[str] | None = None  # the program's arguments for the variant
    env: dict[str, str] = field(default_factory=dict)  # variables set for the variant
    file: str = ""  # the file the variant edits (absolute, inside the program's folder)
    text: str = ""  # that file's new text

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.kind, self.setting, self.value)

    def describe(self) -> str:
        return f"{self.setting} {self.from_value} → {self.value}"


@dataclass
class Tried:
    """What trying one change gave."""

    change: Change
    run: str = ""  # the variant's run name in the DB ("" when it was not recorded)
    status: str = "untried"  # "suggested" | "no saving" | "changes results" | "failed" | "untried"
    saving_share: float | None = None  # 1 - E_variant / E_base, over the interleaved rounds
    interval: tuple[float, float] | None = None  # its confidence interval
    rounds: int = 0
    same_outputs: bool | None = None
    first_difference: str = ""  # the first base output the variant does not reproduce
    error: str = ""
    command: str = ""  # the program's command line with the change (options, variables)
    patch: str = ""  # the change as a unified diff (`git apply` in the program's folder)
    findings: int = 0  # findings of the variant's stored diff against the base
    seconds: float = 0.0

    @property
    def confirmed(self) -> bool:
        return self.interval is not None and self.interval[0] > 0

    def to_json(self) -> dict[str, Any]:
        c = self.change
        return {
            "setting": c.setting,
            "kind": c.kind,
            "value": c.value,
            "from_value": c.from_value,
            "source": c.source,
            "rule": c.rule or None,
            "where": c.where or None,
            "share_decided": round(c.share, 4),
            "status": self.status,
            "run": self.run or None,
            "saving_share": self.saving_share,
            "interval": list(self.interval) if self.interval else None,
            "rounds": self.rounds,
            "confirmed": self.confirmed,
            "same_outputs": self.same_outputs,
            "first_difference": self.first_difference or None,
            "error": self.error or None,
            "command": self.command or None,
            "patch": self.patch or None,
            "findings": self.findings,
            "seconds": round(self.seconds, 2),
        }
