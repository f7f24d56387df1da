"""The claim module (core/claim.py) is the only code that writes a verdict's words.

Every string literal in src/scaleprobe is read (through the syntax tree: docstrings and
comments, which explain the words, are left out) and none outside core/claim.py may hold a
verdict phrase: a module that needs one names it through the claim module's constants or
renders a Claim, so the rules (one repeat is 'inconclusive (1 repeat)', an interval holding
the reference is 'not resolved', the load caveat) cannot be bypassed by a sentence written
by hand."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "scaleprobe"
CLAIM = SRC / "core" / "claim.py"
PHRASES = ("inconclusive", "within noise", "not resolved", "does not pay", "not told apart",
           "not decided against", "slower together", "faster together", "parity holds",
           "parity broken")

# path relative to src/scaleprobe -> (phrase, why it must stay)
ALLOWED: dict[tuple[str, str], str] = {
    ("wrap/boot.py", "not resolved"): "a record's null reason for peak FLOP/s ('not "
                                      "resolved: no FLOPs were counted'), a stored value, "
                                      "not a verdict",
    ("core/intervals.py", "inconclusive"): "Interval.text of an interval too wide to mean "
                                           "anything; claim.py imports intervals, so "
                                           "intervals cannot name claim.INCONCLUSIVE without "
                                           "a cycle (test_interval_text_uses_the_claim_word "
                                           "checks the word is the claim's)",
    ("measure/compiled.py", "not told apart"): "recompiles a torch without compile ids "
                                               "cannot tell apart: a measurement's note",
}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the Constant nodes that are docstrings."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def phrases_outside_claims() -> list[tuple[str, int, str]]:
    """(path, line, phrase) of every verdict phrase in a string literal outside claim.py."""
    hits = []
    for path in sorted(SRC.rglob("*.py")):
        if path == CLAIM:
            continue
        tree = ast.parse(path.read_text(), str(path))
        docs = _docstrings(tree)
        rel = str(path.relative_to(SRC))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docs):
                low = node.value.lower()
                hits += [(rel, node.lineno, p) for p in PHRASES
                         if p in low and (rel, p) not in ALLOWED]
    return hits


def test_no_verdict_phrase_outside_the_claim_module():
    hits = phrases_outside_claims()
    assert not hits, "verdict words written outside core/claim.py:\n" + "\n".join(
        f"  {p}:{n}: {w!r}" for p, n, w in hits)


def test_the_allow_list_is_still_needed():
    """An allowed entry whose phrase has gone is removed, so the list only shrinks."""
    for rel, phrase in ALLOWED:
        text = (SRC / rel).read_text().lower()
        assert phrase in text, f"{rel} no longer says {phrase!r}: drop it from ALLOWED"


@pytest.mark.parametrize("phrase", PHRASES)
def test_the_claim_module_holds_every_phrase(phrase: str):
    assert phrase in CLAIM.read_text().lower()


def test_interval_text_uses_the_claim_word():
    from scaleprobe.core import claim as CL
    from scaleprobe.core.intervals import Interval

    wide = Interval(1.04, 0.03, 39.44, 2, "paired t")
    assert wide.text() == f"{CL.INCONCLUSIVE}: 2 repeats, spread too large"
