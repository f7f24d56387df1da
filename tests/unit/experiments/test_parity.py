"""Accuracy parity: configurations, the record, and the verdict from hand-made accuracies."""

import pytest

from scaleprobe.config import runconfig as C
from scaleprobe.core.result_model import RunResult
from scaleprobe.experiments.parity import parity_configs, parity_record, parity_verdict


def base(**over):
    return C.build({"dist.strategy": "ddp", "dist.nproc": 2, "dist.parity": True,
                    "train.batch_size": 32, "train.epochs": 2, "train.seed": 7, **over})


def test_configs_hold_the_global_batch_and_training_and_move_the_seed_per_repeat():
    """Catches: the 1-process run training on a smaller global batch or for a different
    number of samples, and every repeat reusing one seed (no seed-to-seed spread)."""
    seeds = set()
    for r in range(3):
        one, multi = parity_configs(base(), r)
        assert one.world_size == 1 and multi.world_size == 2 and one.dist.strategy == "single"
        assert one.train.global_batch == multi.train.global_batch == 64
        assert one.per_device_batch() == 64 and multi.per_device_batch() == 32
        assert one.train.epochs == multi.train.epochs == 2
        assert one.train.seed == multi.train.seed == 7 + r
        assert one.train.lr == multi.train.lr and one.train.eval and multi.train.eval
        assert not one.dist.parity and not multi.dist.parity
        assert not multi.dist.calibrate_comm  # no extra forward passes on one side only
        assert one.name != multi.name
        seeds.add(one.train.seed)
    assert seeds == {7, 8, 9}


def test_adaptive_steps_become_a_fixed_amount_of_training():
    """Catches: steps = "auto" letting each side stop at a different step (different samples
    seen)."""
    one, multi = parity_configs(base(**{"train.epochs": None, "train.steps": "auto"}))
    assert one.train.epochs == multi.train.epochs == 1
    assert one.train.steps is None and multi.train.steps is None
    one, multi = parity_configs(base(**{"train.epochs": None, "train.steps": 40}))
    assert one.train.steps == multi.train.steps == 40


def _run(acc, nproc, seed, steps=100, gb=64, status="ok", rid=None):
    return RunResult.from_dict({
        "kind": "run", "run_id": rid or f"n{nproc}-s{seed}", "status": status,
        "config": {"train": {"global_batch": gb, "seed": seed}}, "batch": {"world_size": nproc},
        "metrics": {"accuracy": acc, "steps_done": steps}})


def test_record_pairs_repeats_by_seed_against_the_users_tolerance():
    """Catches: a record the report cannot read any more, an interval that does not pair the
    two sides of a seed (unpaired Welch over seeds that share initial weights and split),
    and a tolerance taken from the noise."""
    a1, an = [0.80, 0.84, 0.82], [0.81, 0.83, 0.80]
    rec = parity_record([_run(a, 1, s) for s, a in enumerate(a1)],
                        [_run(a, 2, s) for s, a in enumerate(an)], "par-x", 0.01)
    assert rec.kind == "parity" and rec.nproc == 2 and rec.global_batch == 64
    assert rec.seeds == [0, 1, 2] and rec.repeats == 3
    assert rec.samples_seen == [6400, 6400]
    assert rec.accuracies_1 == a1 and rec.accuracies_n == an
    assert rec.accuracy_1 == pytest.approx(0.82) and rec.accuracy_n == pytest.approx(0.8133,
                                                                                          abs=1e-4)
    # paired: the differences +0.01, -0.01, -0.02 (mean -0.00667, sd 0.01528, t(2) 4.303)
    h = 4.302652729911275 * 0.015275252316519465 / 3 ** 0.5
    assert rec.difference == pytest.approx(-0.02 / 3)
    assert (rec.difference_interval["lo"], rec.difference_interval["hi"]) == \
        pytest.approx((-0.02 / 3 - h, -0.02 / 3 + h))
    assert rec.runs == ["n1-s0", "n2-s0", "n1-s1", "n2-s1", "n1-s2", "n2-s2"]
    assert rec.within_tolerance is None and rec.verdict == "inconclusive"
    assert rec.tolerance == 0.01 and "never derived from the measured noise" in \
        rec.tolerance_rule


def test_record_leaves_out_repeats_that_saw_different_samples():
    """Catches: comparing a run that stopped early with one that finished (not like for
    like)."""
    rec = parity_record([_run(0.9, 1, 0), _run(0.9, 1, 1), _run(0.5, 1, 2, steps=10)],
                        [_run(0.9, 2, 0), _run(0.9, 2, 1), _run(0.9, 2, 2)], "p", 0.01)
    assert rec.samples_seen_repeats[2] == [640, 6400]
    assert rec.accuracy_1 == pytest.approx(0.9) and "left out: repeat(s) 3" in \
        rec.verdict_text


def test_a_noisy_setup_never_loosens_the_margin():
    """Bug caught: the tolerance was 2 x the seed-to-seed sd (+/-0.16 here), so the noisier
    the setup the looser the margin, and a real 10-point loss read "parity holds" once enough
    seeds narrowed the interval. The user's 1 point stays 1 point: 20 noisy seeds with N
    processes 10 points below never hold."""
    a1 = [0.77, 0.86, 0.81, 0.72, 0.88, 0.79, 0.83, 0.75, 0.85, 0.80] * 2
    an = [a - 0.10 + (0.01 if i % 2 else -0.01) for i, a in enumerate(a1)]
    v = parity_verdict(a1, an, 0.01)
    assert v.tolerance == 0.01 and v.verdict == "parity broken", v.text


def test_holds_broken_and_inconclusive_from_hand_made_accuracies():
    """Catches: "PARITY BROKEN" from noise, and "parity holds" when the interval reaches past
    the tolerance."""
    holds = parity_verdict([0.950, 0.952, 0.951, 0.949, 0.950],
                           [0.951, 0.950, 0.952, 0.950, 0.949], 0.01)
    assert holds.verdict == "parity holds" and ": parity holds; tolerance +/-0.0100" in \
        holds.text
    broken = parity_verdict([0.950, 0.952, 0.951, 0.949, 0.950],
                            [0.800, 0.802, 0.801, 0.799, 0.800], 0.01)
    assert broken.verdict == "parity broken" and broken.interval["hi"] < -broken.tolerance
    # the MNIST spread: a 0.05 gap in means is within what seeds do at 3 repeats
    noisy = parity_verdict([0.770, 0.855, 0.81], [0.80, 0.84, 0.70], 0.01)
    assert noisy.verdict == "inconclusive" and "seeds" in noisy.text
    one = parity_verdict([0.95], [0.80], 0.01)
    assert one.verdict == "inconclusive" and "--repeats 3" in one.text
    # one seed decides nothing, in the claim's words
    assert one.text.startswith("difference (N - 1): -0.1500: inconclusive (1 repeat)")
    assert noisy.text.startswith("difference (N - 1): ") and \
        ": not resolved (the interval crosses +/-0.0100)" in noisy.text
    assert parity_verdict([], [0.9], 0.01).verdict == "not measured"
    # a seed without an accuracy on one side drops out of the pairs
    assert parity_verdict([0.95, None, 0.95], [0.95, 0.9, 0.95], 0.01).pairs == 2


def test_interval_touching_the_tolerance_decides_nothing():
    """Catches: <= / >= at the tolerance, which would call an interval ending exactly on it
    either way. With no spread the interval is one point (binary-exact figures, so the
    comparison really is at the threshold)."""
    at = parity_verdict([0.5, 0.5], [0.625, 0.625], 0.125)
    assert at.interval["lo"] == at.interval["hi"] == at.tolerance == 0.125
    assert at.verdict == "inconclusive"
    assert parity_verdict([0.5, 0.5], [0.5625, 0.5625], 0.125).verdict == "parity holds"
    assert parity_verdict([0.5, 0.5], [0.75, 0.75], 0.125).verdict == "parity broken"
    assert parity_verdict([0.625, 0.625], [0.5, 0.5], 0.125).verdict == "inconclusive"


def test_help_texts_agree_on_where_the_tolerance_comes_from():
    """Bug caught: `run --help` said the tolerance was "derived from the measured
    seed-to-seed spread" while --parity-tolerance said "never derived from the noise" (the
    code: the user's 0.01)."""
    import dataclasses

    from scaleprobe.commands import run as run_command
    from scaleprobe.config.sections import DistConfig

    doc = " ".join((run_command.__doc__ or "").split())
    opt = next(f for f in dataclasses.fields(DistConfig) if f.name == "parity_tolerance")
    assert opt.default == 0.01
    assert "--parity-tolerance`` (default 0.01, absolute)" in doc
    assert "never derived from the measured seed-to-seed spread" in doc
    assert "tolerance derived from" not in doc
    assert "never derived from the noise" in " ".join(str(v) for v in opt.metadata.values())


def test_the_means_shown_beside_the_difference_are_over_the_paired_seeds_only():
    """Bug caught: seed 2 failed on 2 processes; the means took every seed with a value on
    its own side (0.923 on 1 process vs 0.900 on 2: a 0.023 gap, outside +/-0.02) beside a
    difference of -0.0050 over the two paired seeds that said parity holds. Both means are
    now over the seeds the difference pairs, and the record says which seed had no partner."""
    ones = [_run(0.90, 1, 7), _run(0.96, 1, 8), _run(0.91, 1, 9)]
    twos = [_run(0.895, 2, 7), _run(None, 2, 8, status="failed"), _run(0.905, 2, 9)]
    rec = parity_record(ones, twos, "p", 0.02)
    assert rec.difference == pytest.approx(-0.005)
    assert rec.accuracy_1 == pytest.approx(0.905) and rec.accuracy_n == pytest.approx(0.900)
    assert rec.accuracy_n - rec.accuracy_1 == pytest.approx(rec.difference)
    assert rec.pairs == 2 and rec.paired_seeds == [7, 9]
    assert rec.unpaired == [{"seed": 8, "repeat": 1,
                            "why": "no accuracy on 2 processes (failed)"}]
    assert rec.to_dict()["pairs"] == 2  # written with the record
    assert "means over the 2 paired seeds (7, 9)" in rec.verdict_text
    assert "seed 8: no accuracy on 2 processes (failed)" in rec.verdict_text


def test_the_parity_claim_carries_the_load_of_its_runs():
    """Bug caught: a parity verdict over runs measured under load said nothing of it; the
    claim's sources are the paired runs, and a loaded one puts the caveat on its words."""
    ones = [_run(0.90, 1, s) for s in (0, 1)]
    twos = [_run(0.90, 2, s) for s in (0, 1)]
    from scaleprobe.core.run_parts import Load

    twos[1].load = Load(flag=True, reason="busy")
    rec = parity_record(ones, twos, "p", 0.02)
    assert "measured under load: " in rec.verdict_text
    assert "(1 of 4 source runs)" in rec.verdict_text


def test_the_terminal_prints_the_paired_means_and_the_seed_without_a_partner(monkeypatch,
                                                                             capsys):
    """The terminal's mean line stands beside the difference: over the same seeds."""
    from types import SimpleNamespace

    from scaleprobe.commands import run as run_command
    from scaleprobe.experiments import parity as parity_mod

    ones = [_run(0.90, 1, 7), _run(0.96, 1, 8), _run(0.91, 1, 9)]
    twos = [_run(0.895, 2, 7), _run(None, 2, 8, status="failed"), _run(0.905, 2, 9)]
    rec = parity_record(ones, twos, "p", 0.02)
    monkeypatch.setattr(parity_mod, "run_parity", lambda cfg, repeats, say=None: rec)
    run_command._parity(SimpleNamespace(world_size=2), 3)
    out = capsys.readouterr().out
    assert "mean over the 2 paired seeds (7, 9): 1 process 0.9050, 2 processes 0.9000" in out
    assert "0.9233" not in out
    assert "seed 8 left out: no accuracy on 2 processes (failed)" in out
