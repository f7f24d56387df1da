"""Like for like: every pairing in a diagnosis varies one setting and matches on all others.

Per rule: a pair that differs in one extra configuration key is not made; an exact pair is.
"""

from __future__ import annotations

from scaleprobe.report.findings import diagnose as _diagnose
from scaleprobe.report.reading import pairing as _pairing
from tests.unit.report.factory import breakdown, run, sweep_point, typed_api, typed_module, with_

P = typed_module(_pairing)
diagnose_run = typed_api(_diagnose.diagnose_run)
diagnose_experiment = typed_api(_diagnose.diagnose_experiment)


def test_differing_keys_ignore_what_does_not_change_the_measurement():
    """Catches pairings refused (or keys reported) for a different label or output folder."""
    a = run("a")
    b = with_(with_(with_(run("b"), "config.out", "elsewhere"), "config.name", "b"),
              "config.measure", {"progress": False})
    a = with_(a, "config.measure", {"progress": True})
    assert P.differing_keys(a, b) == set()
    assert P.differing_keys(a, with_(a, "config.train.optimizer", "adamw")) == {
        "train.optimizer"}
    # a key one record lacks differs too (older records, hand-made configs)
    assert P.differing_keys(a, with_(a, "config.train.amp", "bf16")) == {"train.amp"}


def test_the_rendezvous_port_does_not_split_pairs():
    """Catches runs recorded before ``dist.master_port`` existed (no such key) or with another
    --master-port refused as pairs: where the ranks met changes nothing measured."""
    old = run("a")
    old["config"]["dist"] = {k: v for k, v in (old["config"].get("dist") or {}).items()
                             if k != "master_port"}
    new = with_(run("b"), "config.dist", {**old["config"]["dist"], "master_port": 29511})
    assert P.differing_keys(old, new) == set()
    assert P.like_for_like(old, new)


def test_a_null_setting_is_compared_as_what_the_run_resolved_it_to():
    """Catches "natural size" on two datasets read as the same image size (64 px vs 32 px)."""
    a = with_(run("a"), "config.data.image_size", None)
    b = with_(run("b"), "config.data.image_size", None)
    assert P.like_for_like(a, b)
    a["resolved"] = {"data.image_size": 64}
    b["resolved"] = {"data.image_size": 32}
    assert P.differing_keys(a, b) == {"data.image_size"}
    assert not P.like_for_like(a, b)


def test_a_target_experiments_repeats_are_paired_by_the_experiments_own_seed():
    """Bug caught: under --target repeat r trains with seed + r, so a scale's rows (each the
    median repeat of its point) fell on different seeds and were refused as unlike. The
    experiment's own seed is compared; two runs of other seeds still differ."""
    def rep(name, r, seed):
        rec = run(name, experiment={**sweep_point("s"), "repeat": r})
        rec["config"]["train"].update(target="accuracy=0.8", seed=seed)
        return rec

    assert P.like_for_like(rep("a", 2, 2), rep("b", 1, 1))
    assert P.differing_keys(rep("a", 2, 2), rep("b", 1, 2)) == {"train.seed"}
    # outside --target a repeat trains the same seed again: seeds compare as they are
    plain = [with_(r, "config.train.target", None) for r in (rep("a", 2, 2), rep("b", 1, 1))]
    assert P.differing_keys(*plain) == {"train.seed"}


def test_records_without_a_configuration_are_never_paired():
    """Catches two records with unknown settings treated as identical."""
    a, b = run("a"), run("b")
    a["config"], b["config"] = {}, {}
    assert not P.like_for_like(a, b)
    assert P.like_for_like_groups([a, b]) == []


def test_groups_agree_with_the_pairwise_rule():
    """Catches a grouping that puts runs together which like_for_like would not pair."""
    recs = [run("w0", workers=0, loader="naive"), run("w2", workers=2),
            run("w2-adam", workers=2, **{}), run("w1", workers=1)]
    recs[2] = with_(recs[2], "config.train.optimizer", "adamw")
    groups = P.like_for_like_groups(recs, P.WORKER_KEYS)
    assert [[r.name for r in g] for g in groups] == [["w0", "w2", "w1"], ["w2-adam"]]
    for g in groups:
        assert all(_pairing.like_for_like(x, y, P.WORKER_KEYS) for x in g for y in g)


# input-bound: real data vs synthetic data

def _real_and_synth(**synth_changes):
    real = run("real", dataset="jpeg-synth", sps=60.0, bd=breakdown(0.1, data=0.05))
    synth = run("synth", dataset="synthetic", sps=100.0)
    for k, v in synth_changes.items():
        synth = with_(synth, f"config.{k}", v)
    return real, synth


def test_input_bound_pairs_a_synthetic_run_that_differs_in_the_dataset_alone():
    """Catches the exact pair not being made (the real-vs-synthetic verdict lost)."""
    real, synth = _real_and_synth(**{"data.num_samples": 512})  # comes with the dataset
    f = [x for x in diagnose_run(real, [real, synth]) if x.verdict == "input-bound"]
    assert f and "on synthetic data, every other setting the same" in f[0].evidence


def test_input_bound_does_not_pair_a_different_image_size():
    """Catches observation 6: a 64 px JPEG run called input-bound against a 32 px synthetic
    run (the smaller images explain the speed, not the input pipeline)."""
    real, synth = _real_and_synth(**{"data.image_size": 32})
    assert "input-bound" not in {x.verdict for x in diagnose_run(real, [real, synth])}


def test_input_bound_does_not_pair_a_different_transform_or_loader():
    """Catches a twin that also differs in transform or loader workers."""
    for change in ({"data.transform": "heavy"}, {"data.workers": 4}):
        real, synth = _real_and_synth(**change)
        assert "input-bound" not in {x.verdict for x in diagnose_run(real, [real, synth])}


# loader workers compete with compute

def _loader_pair(**after_changes):
    """0 workers against 2, two repeats (a verdict needs two)."""
    out = []
    for i, k in enumerate((1.0, 1.01)):
        before = run(f"w0r{i}", workers=0, loader="naive", cores=2, threads=2, sps=120.0,
                     bd={"data": 0.039, "h2d": 0.0, "forward": 0.044, "backward": 0.066,
                         "optimizer": 0.0, "comm": 0.0},
                     experiment=sweep_point("ld", workers=0, repeat=i))
        after = run(f"w2r{i}", workers=2, cores=2, threads=2, sps=122.0 / k,
                    bd={"data": 0.0015, "h2d": 0.0, "forward": 0.0616 * k,
                        "backward": 0.0924 * k, "optimizer": 0.0, "comm": 0.0},
                    experiment=sweep_point("ld", workers=2, repeat=i))
        for key, v in after_changes.items():
            after = with_(after, f"config.{key}", v)
        out += [before, after]
    return out


def _contention(recs):
    return [f for f in diagnose_experiment(recs)
            if f.verdict == "loader workers compete with compute"]


def test_loader_contention_pairs_runs_that_differ_in_workers_alone():
    """Catches the exact pair not being made."""
    (f,) = _contention(_loader_pair())
    assert "workers 0 -> 2" in f.evidence and f.subject == "ld"


def test_loader_contention_does_not_pair_a_different_transform():
    """Catches observation 6: compute per step that grew because the transform changed,
    blamed on the loader workers."""
    assert _contention(_loader_pair(**{"data.transform": "heavy"})) == []


def test_loader_contention_does_not_pair_a_different_optimizer():
    """Catches compute per step that grew because the optimizer changed (adamw), blamed on
    the loader workers."""
    assert _contention(_loader_pair(**{"train.optimizer": "adamw"})) == []


def test_a_key_added_later_reads_as_its_default_in_older_records():
    """Catches a record from before ``train.malloc`` (or another later key) existed refused as
    the pair of one that ran with its default; a run that set it otherwise still differs."""
    old = run("a")
    assert "malloc" not in old["config"]["train"]
    new = with_(run("b"), "config.train.malloc", "default")
    assert P.differing_keys(old, new) == set()
    assert P.differing_keys(old, with_(new, "config.train.malloc", "steady")) == {
        "train.malloc"}
