"""The claim rules (scaleprobe.core.claim), each expectation worked out by hand here.

Each test names the plausible bug in the rules it exists to catch (scripts/claim_mutants.py
applies them one by one and expects this file to fail on each)."""

from __future__ import annotations

import json

import pytest

from scaleprobe.core import claim as C
from scaleprobe.core import claim_kinds as CK
from scaleprobe.core.metrics import Interval


def iv(est: float, lo: float, hi: float, n: int = 3) -> Interval:
    return Interval(est, lo, hi, n, "hand-made")


LOADED = C.Source("scale-s nproc=2 (repeat 1)", True, "1.70 cores outside")
CALM = C.Source("scale-s nproc=1 (repeat 1)", False, "0.05 cores")


def speedup(interval: Interval | None, value: float | None = 1.13, **kw: object) -> C.Claim:
    return C.Claim("2 processes", value, interval, above="faster than 1 process",
                   below="slower than 1 process", **kw)  # type: ignore[arg-type]


def test_not_resolved_is_said_in_words_with_the_reference() -> None:
    c = speedup(iv(1.13, 0.88, 1.44))
    assert c.text() == ("2 processes: 1.13x [0.88, 1.44], 3 repeats: not resolved "
                        "(the interval includes 1x)")
    assert not c.decided and c.rule == C.RULE_INCLUDES_REF


def test_interval_touching_the_reference_from_above_is_not_resolved() -> None:
    # mutant: `iv.lo < ref` for `iv.lo <= ref` (an interval from exactly 1.0 called faster)
    c = speedup(iv(1.2, 1.0, 1.44))
    assert c.verdict == "not resolved (the interval includes 1x)"


def test_interval_touching_the_reference_from_below_is_not_resolved() -> None:
    # mutant: `ref < iv.hi` for `ref <= iv.hi`
    c = speedup(iv(0.9, 0.8, 1.0), value=0.9)
    assert c.verdict == "not resolved (the interval includes 1x)"


def test_just_above_and_just_below_decide() -> None:
    # mutants: the comparison flipped (above words for below), or the margin widened
    assert speedup(iv(1.2, 1.001, 1.44)).verdict == "faster than 1 process"
    assert speedup(iv(0.9, 0.8, 0.999), value=0.9).verdict == "slower than 1 process"


def test_one_repeat_decides_nothing_even_clear_of_the_reference() -> None:
    # mutant: one repeat treated as two (the interval 1.2..1.7 lies above 1)
    c = speedup(iv(1.45, 1.2, 1.7, n=1), value=1.45)
    assert c.verdict == "inconclusive (1 repeat), leaning faster than 1 process"
    assert c.rule == C.RULE_ONE_REPEAT and not c.decided
    assert "within noise" not in c.text()


def test_one_repeat_that_holds_the_reference_leans_nowhere() -> None:
    c = speedup(iv(1.05, 0.9, 1.2, n=1), value=1.05)
    assert c.verdict == "inconclusive (1 repeat)"


def test_one_repeat_below_leans_below() -> None:
    # mutant: leaning always says the `above` words
    c = speedup(iv(0.59, 0.5, 0.7, n=1), value=0.59)
    assert c.verdict == "inconclusive (1 repeat), leaning slower than 1 process"


def test_two_repeats_are_enough() -> None:
    # mutant: `n <= MIN_REPEATS_TO_DECIDE` for `n < ...` (two repeats would never decide)
    assert speedup(iv(1.5, 1.2, 1.8, n=2)).decided


def test_the_fewer_side_counts() -> None:
    # mutant: max(repeats) for min(repeats): 3 repeats alone, 1 together is one repeat
    c = speedup(iv(1.5, 1.2, 1.8, n=3), repeats=(3, 1))
    assert c.verdict.startswith("inconclusive (1 repeat)")
    assert "3/1 repeats a side" in c.text()


def test_one_repeat_without_an_interval_says_one_repeat() -> None:
    # mutant: "no interval" checked first, hiding that one repeat decides nothing anyway
    c = speedup(None, value=0.85, repeats=(1, 1))
    assert c.text() == "2 processes: 0.85x: inconclusive (1 repeat)"


def test_no_value_and_no_interval_are_never_judged() -> None:
    assert speedup(None, value=None).verdict == "not measured"
    c = speedup(None)
    assert c.text() == "2 processes: 1.13x: no interval: not judged"
    assert not c.decided


LOAD_WORDS = "measured under load: scale-s nproc=2 (repeat 1): 1.70 cores outside (1 of 2 source runs)"


@pytest.mark.parametrize("form", ["text", "markdown", "html"])
def test_load_caveat_travels_in_every_format(form: str) -> None:
    # mutants: the caveat dropped in Markdown (or HTML) but kept in the terminal
    c = speedup(iv(1.5, 1.2, 1.8), sources=(LOADED, CALM))
    assert LOAD_WORDS in C.render(c, form)


def test_load_caveat_in_json_and_the_json_text_is_the_terminals() -> None:
    c = speedup(iv(1.5, 1.2, 1.8), sources=(LOADED, CALM))
    d = json.loads(json.dumps(c.to_dict()))
    assert d["under_load"] is True and LOAD_WORDS in d["text"]
    assert d["text"] == c.text()
    assert d["rule"] == "interval above the reference" and d["decided"] is True
    assert [s["under_load"] for s in d["sources"]] == [True, False]


def test_one_loaded_run_of_many_is_enough_for_the_caveat() -> None:
    # mutant: all() for any() over the sources
    c = speedup(iv(1.5, 1.2, 1.8), sources=(CALM, LOADED, CALM))
    assert "(1 of 3 source runs)" in c.text() and c.under_load


def test_no_caveat_without_load() -> None:
    # mutant: a caveat for a run whose load was not measured (None) or measured calm
    c = speedup(iv(1.5, 1.2, 1.8), sources=(CALM, C.Source("x", None)))
    assert "under load" not in c.text() and not c.under_load


def test_caveat_rides_on_undecided_claims_too() -> None:
    # mutant: the caveat only on decided verdicts
    c = speedup(iv(1.45, 1.2, 1.7, n=1), sources=(LOADED,))
    assert c.text().endswith("(1 of 1 source runs); the figure may be slower than the "
                             "machine allows")


def parity(lo: float, hi: float, n: int = 3) -> C.Claim:
    d = (lo + hi) / 2
    return C.Claim("accuracy at 2 - at 1", d, iv(d, lo, hi, n), unit="diff", digits=3,
                   band=(-0.01, 0.01), within="parity holds", outside="parity broken")


def test_band_inside_holds_and_outside_breaks() -> None:
    assert parity(-0.004, 0.006).verdict == "parity holds"
    assert parity(0.012, 0.03).verdict == "parity broken"
    assert parity(-0.03, -0.0101).verdict == "parity broken"


def test_band_edge_touched_is_not_resolved() -> None:
    # mutants: `<=` for `<` at the band's edge (an interval reaching exactly 0.01 holds)
    assert parity(-0.004, 0.01).verdict == "not resolved (the interval crosses +/-0.010)"
    assert parity(0.01, 0.03).verdict == "not resolved (the interval crosses +/-0.010)"


def test_difference_figure_is_signed() -> None:
    assert parity(-0.004, 0.006).figure() == "+0.001 [-0.004, +0.006], 3 repeats"


def test_model_gap_shows_both_and_blames_neither() -> None:
    c = C.Claim("exposed communication", 0.020, None, unit=" s", digits=3, model=0.050,
                model_name="the model")
    t = c.text()
    # both figures, their ratio 0.050 / 0.020 = 2.50
    assert "0.020 s" in t and "the model: 0.050 s, 2.50x apart" in t
    for blame in ("is off", "under load", "wrong", "trust"):
        assert blame not in t


def test_html_escapes_and_markdown_escapes_table_pipes() -> None:
    c = C.Claim("a<b | c", 1.5, iv(1.5, 1.2, 1.8), above="faster")
    assert c.html().startswith("a&lt;b | c: 1.50x")
    assert c.markdown().startswith("a<b \\| c: 1.50x")


def test_the_words_are_the_same_in_every_format() -> None:
    c = speedup(iv(1.13, 0.88, 1.44), sources=(LOADED,))
    plain = c.text()
    assert c.markdown().replace("*", "") == plain
    assert c.html().replace('<em class="load">', "").replace("</em>", "") == plain


def test_batch_step_pays_only_clear_of_the_whole_bar_range() -> None:
    # memory +37% with its own interval [+30%, +45%]: the bar 1 - 0.37 = 0.63x spans
    # 2 - 1.45 = 0.55x to 2 - 1.30 = 0.70x; the epoch ratio must clear all of it
    mem = iv(1.37, 1.30, 1.45)
    assert CK.batch_step(iv(0.45, 0.40, 0.54), 0.37, mem).verdict == "pays"
    assert CK.batch_step(iv(0.80, 0.71, 0.90), 0.37, mem).verdict == "does not pay"
    # mutant: the point bar 0.63 instead of the range (0.50..0.60 lies below 0.63 but
    # reaches 0.55..0.70)
    c = CK.batch_step(iv(0.55, 0.50, 0.60), 0.37, mem)
    assert c.verdict == "not resolved (the interval includes 0.55x to 0.70x (the bar's range))"
    # mutant: range ends swapped in the comparison (0.58..0.69 lies inside the range)
    assert not CK.batch_step(iv(0.62, 0.58, 0.69), 0.37, mem).decided


def test_batch_step_without_memory_interval_uses_the_point_bar() -> None:
    # memory +20%, no interval: the bar is 0.80x; 0.70..0.79 lies below it
    assert CK.batch_step(iv(0.75, 0.70, 0.79), 0.20).verdict == "pays"
    assert CK.batch_step(iv(0.75, 0.70, 0.80), 0.20).verdict.startswith("not resolved")


def test_ranking_words_by_repeats() -> None:
    assert C.ranking("Fastest", "batch 64", ["batch 32 (1.10x [0.9, 1.3])"], repeats=3) == (
        "Fastest: inconclusive: batch 64, not told apart from batch 32 (1.10x [0.9, 1.3]) "
        "(each: that batch size's figure / this one's).")
    # mutant: one repeat treated as two ("not told apart" beside an interval clear of 1)
    one = C.ranking("Fastest", "batch 64", ["batch 32 (1.30x [1.2, 1.4])"], repeats=1)
    assert one.startswith("Fastest: inconclusive (1 repeat): batch 64, not decided against ")
    assert C.ranking("Fastest", "batch 64", [], ["batch 32 (1.30x)"]) == (
        "Fastest: batch 64, ahead of batch 32 (1.30x) (each: that batch size's figure / this "
        "one's).")


def test_memory_fit_is_inconclusive_where_the_device_lies_inside_the_interval() -> None:
    """Catches a fit decided from the point estimate alone: 95 MB [90, 101] on 100 MB."""
    c = CK.memory_fit(95, 90, 101, 100, 3)
    assert c.verdict == "inconclusive (the interval includes 1x)"
    assert c.short_verdict == C.INCONCLUSIVE and not c.decided
    assert CK.memory_fit(95, 90, 99, 100, 3).short_verdict == C.FITS
    assert CK.memory_fit(105, 101, 110, 100, 3).short_verdict == C.DOES_NOT_FIT
    # the device exactly at the interval's top does not decide it
    assert CK.memory_fit(95, 90, 100, 100, 3).short_verdict == C.INCONCLUSIVE
    # no interval (two batch sizes probed): never judged
    assert CK.memory_fit(50, None, None, 100, 2).short_verdict == C.NO_INTERVAL
    # the figure names what stands behind the interval: not repeats
    assert "3 probed batch sizes" in c.text() and "repeats" not in c.text()


def test_one_repeat_says_nothing_of_the_noise_it_could_not_measure() -> None:
    """1.02x from one pair: no count of repeats "decides" at that estimate, and with one
    repeat the noise between runs was never measured, so "or the difference is smaller than
    the noise" would be a claim; three repeats measured it and may say so."""
    one = C.undecided(Interval(1.02, 0.90, 1.15, 1, "t"), 1.0, "samples/s", need=None)
    assert one.startswith("inconclusive (1 repeat): samples/s 1.02x [0.90, 1.15], 1 repeat")
    assert "smaller than the noise" not in one
    assert one.endswith("; 2 or more repeats measure the noise between runs and say how many "
                        "would decide it")
    three = C.undecided(Interval(1.02, 0.90, 1.15, 3, "t"), 1.0, "samples/s", need=None)
    assert three.endswith("or the difference is smaller than the noise")
