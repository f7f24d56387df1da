"""The unit of diagnosis: a verdict, the numbers behind it and what to do next."""

from __future__ import annotations

from dataclasses import dataclass

SEVERITIES = ("error", "warning", "info")


@dataclass(frozen=True)
class Finding:
    verdict: str  # short name, e.g. "input-bound"
    evidence: str  # the numbers that show it
    recommendation: str  # what to change, with values to try
    severity: str  # error | warning | info
    subject: str = ""  # the run name or experiment id it is about


def merge_same(findings: list[Finding], most: int = 6) -> list[Finding]:
    """One row for findings that differ only in the run they are about."""
    groups: dict[tuple[str, str, str, str], list[str]] = {}
    for f in findings:
        groups.setdefault((f.severity, f.verdict, f.evidence, f.recommendation), []).append(
            f.subject)
    out = []
    for (sev, verdict, evidence, rec), names in groups.items():
        who = ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most
                                         else "")
        out.append(Finding(verdict, evidence, rec, sev, who))
    return out
