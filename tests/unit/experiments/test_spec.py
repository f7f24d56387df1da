"""Sweep specs: grid expansion, run order, and the errors a user can make."""

import pytest

from scaleprobe.config.sections import RunConfig
from scaleprobe.core.errors import ConfigError
from scaleprobe.experiments.spec import check_points, group_key, load_spec, points

BASE = {"model": "digits_cnn", "loader": "naive", "steps": 3, "warmup_steps": 1}


def spec(grid, **extra):
    return {"base": dict(BASE), "grid": grid, **extra}


def test_cartesian_product_with_batch_axis_fastest_and_sorted():
    sp = load_spec(spec({"batch_size": [64, 16, 32], "model": ["digits_cnn", "linear"]}))
    pts = check_points(sp)
    assert [p.axes for p in pts] == [
        {"model": "digits_cnn", "batch_size": 16}, {"model": "digits_cnn", "batch_size": 32},
        {"model": "digits_cnn", "batch_size": 64}, {"model": "linear", "batch_size": 16},
        {"model": "linear", "batch_size": 32}, {"model": "linear", "batch_size": 64}]
    cfgs = [sp.config(p) for p in pts]
    assert cfgs[3].model.name == "linear" and cfgs[3].train.batch_size == 16
    assert all(not c.measure.progress and c.train.steps == 3 for c in cfgs)
    assert len({c.key() for c in cfgs}) == 6


def test_sections_full_keys_and_aliases_mix():
    sp = load_spec({"base": {"train": {"steps": 2}, "data": {"loader": "naive"}},
                    "grid": {"data": {"transform": ["light", "heavy"]}, "dist.nproc": [1]}})
    pts = check_points(sp)
    assert [p.axes for p in pts] == [{"transform": "light", "dist.nproc": 1},
                                     {"transform": "heavy", "dist.nproc": 1}]
    assert sp.config(pts[1]).data.transform == "heavy" and sp.config(pts[1]).train.steps == 2


def test_points_share_a_group_when_only_batch_differs():
    sp = load_spec(spec({"batch_size": [8, 16], "workers": [1, 2]}))
    pts = points(sp)
    groups = [group_key(p, "batch_size") for p in pts]
    assert groups[0] == groups[1] != groups[2] == groups[3]


def test_overrides_replace_the_base_but_not_an_axis():
    sp = load_spec(spec({"batch_size": [8]}), {"model.name": "linear"})
    assert sp.config(points(sp)[0]).model.name == "linear"
    with pytest.raises(ConfigError, match="'batch_size' is a grid axis"):
        load_spec(spec({"batch_size": [8]}), {"train.batch_size": "4"})


def test_auto_batch_uses_the_start_size_for_validation():
    sp = load_spec(spec({"batch_size": "auto", "model": ["digits_cnn", "linear"]},
                        sweep={"batch_start": 4, "batch_max": 64}))
    assert sp.auto and sp.batch_max == 64
    pts = check_points(sp)
    assert [p.axes["batch_size"] for p in pts] == [4, 4]


@pytest.mark.parametrize("doc,needle", [
    (spec({}), "the \\[grid\\] is empty"),
    ({"base": BASE}, "the \\[grid\\] is empty"),
    (spec({"batch_sise": [8]}), "unknown config key 'batch_sise'; did you mean batch_size"),
    (spec({"workers": 2}), "grid axis 'workers' must be a list"),
    (spec({"workers": []}), "grid axis 'workers' has no values"),
    (spec({"workers": [1, 1]}), "repeats a value"),
    (spec({"batch_size": [8, "big"]}), "grid axis 'batch_size': train.batch_size: expected a whole "
     "number >= 1, got 'big'"),
    (spec({"batch_size": [0, 8]}), "train.batch_size: expected a whole number >= 1, got 0"),
    (spec({"workers": "auto"}), "must be a list"),
    (spec({"batch_size": [8], "global_batch": [16]}), "not both"),
    (spec({"batch_size": [8]}, sweep={"batch_strat": 8}), "did you mean batch_start"),
    (spec({"batch_size": [8]}, sweep={"batch_max": "lots"}), "batch_max must be a int"),
    (spec({"batch_size": "auto"}, sweep={"batch_start": 64, "batch_max": 32}),
     "batch_start is larger than batch_max"),
    ({**spec({"batch_size": [8]}), "grdi": {}}, "unknown table\\(s\\) grdi"),
    ({"base": {"optimizer": "sgdd"}, "grid": {"batch_size": [8]}},
     "train.optimizer: expected one of sgd, adamw, got 'sgdd'; did you mean sgd"),
])
def test_spec_errors_are_one_clear_line(doc, needle):
    with pytest.raises(ConfigError, match=needle) as e:
        check_points(load_spec(doc))
    assert "\n" not in str(e.value)


def test_invalid_combination_names_the_point_or_is_left_out():
    grid = {"strategy": ["single", "ddp"], "nproc": [1, 2]}
    with pytest.raises(ConfigError, match="grid point strategy=single, nproc=2: .*add --strategy ddp"):
        check_points(load_spec(spec(grid)))
    sp = load_spec(spec(grid, sweep={"skip_invalid": True}))
    pts = check_points(sp)
    assert len(pts) == 3 and len(sp.dropped) == 1 and "strategy=single, nproc=2" in sp.dropped[0]


def test_spec_file_name_is_the_default_id(tmp_path):
    f = tmp_path / "my_sweep.toml"
    f.write_text('[base]\nmodel = "linear"\n[grid]\nbatch_size = [8, 16]\n')
    assert load_spec(f).sweep_id == "my_sweep"
    f.write_text('[grid]\nbatch_size = [8, 16\n')
    with pytest.raises(ConfigError, match="cannot parse"):
        load_spec(f)
    with pytest.raises(ConfigError, match="not found"):
        load_spec(tmp_path / "missing.toml")


def test_points_are_labelled_by_their_axes_and_the_label_is_not_in_the_key():
    from scaleprobe.experiments.spec import check_points, load_spec

    sp = load_spec({"base": {"steps": 2}, "grid": {"loader": ["naive", "pipelined"]}})
    cfgs = [sp.config(p) for p in check_points(sp)]
    assert [c.name for c in cfgs] == ["loader=naive", "loader=pipelined"]
    named = load_spec({"base": {"steps": 2, "name": "mine"}, "grid": {"loader": ["naive"]}})
    (cfg,) = [named.config(p) for p in check_points(named)]
    assert cfg.name == "mine" and cfg.key() == cfgs[0].key()  # a label measures nothing


# --- a sweep over a user's own script (`script = ...`, `args = [...]`) ----------------------


def script_spec(grid, base=None):
    return {"base": {"script": "train.py", "args": ["--epochs", "1"], **(base or {})},
            "grid": grid}


def test_script_points_append_their_args_and_get_the_wrap_defaults():
    """Bugs caught: a point's flags replacing the base's instead of following them, a list
    of arguments joined so that one with a space splits in two, every point sharing one key,
    a 2-process point not given DDP's traits (its shards not audited)."""
    sp = load_spec(script_spec({"args": [["--batch-size", "16"], ["--name", "a b"]],
                                "nproc": [1, 2]}))
    pts = check_points(sp)
    assert [p.axes for p in pts][:2] == [{"args": "--batch-size 16", "nproc": 1},
                                         {"args": "--batch-size 16", "nproc": 2}]
    cfgs = [sp.config(p) for p in pts]
    assert cfgs[0].script.target() == ["train.py", "--epochs", "1", "--batch-size", "16"]
    assert cfgs[3].script.target() == ["train.py", "--epochs", "1", "--name", "a b"]
    assert [c.dist.strategy for c in cfgs] == ["single", "ddp", "single", "ddp"]
    assert {c.model.name for c in cfgs} == {"script:train"} and cfgs[0].data.dataset == "script"
    assert len({c.key() for c in cfgs}) == 4
    assert sp.config(pts[0]).key() == load_spec(script_spec(
        {"args": [["--batch-size", "16"], ["--name", "a b"]], "nproc": [1, 2]})
    ).config(pts[0]).key()  # the same point in another run of the spec: resumed


def test_script_axis_and_module_targets():
    sp = load_spec({"base": {"args": "--epochs 1"},
                    "grid": {"script": ["a.py", "-m pkg.train"]}})
    cfgs = [sp.config(p) for p in check_points(sp)]
    assert [c.script.target() for c in cfgs] == [["a.py", "--epochs", "1"],
                                                  ["-m", "pkg.train", "--epochs", "1"]]
    assert [c.model.name for c in cfgs] == ["script:a", "script:train"]


@pytest.mark.parametrize("doc, needle", [
    (script_spec({"args": ["-b 1"]}, {"model": "resnet18"}),
     "\\[base\\] model.name does not apply to a script"),
    (script_spec({"batch_size": [8, 16]}), "\\[grid\\] train.batch_size does not apply"),
    (script_spec({"args": [["--lr", 1]]}), "args must be a list of strings"),
    (script_spec({"args": ["--name 'unclosed"]}), "script.args: No closing quotation"),
    ({"base": {"args": "--epochs 1"}, "grid": {"nproc": [1, 2]}},
     "script.args needs script.path"),
    (script_spec({"nproc": [1]}, {"script": "-x.py"}),
     "script.path: expected FILE.py or -m package.module"),
])
def test_script_spec_errors_are_one_line(doc, needle):
    with pytest.raises(ConfigError, match=needle) as e:
        check_points(load_spec(doc))
    assert "\n" not in str(e.value)


def test_built_in_runs_keep_their_keys():
    """The script section is left out of the key of a built-in run, so results written before
    it existed still resume (a changed key reruns every finished point)."""
    from scaleprobe.config import runconfig as C

    assert RunConfig().key() == "2eee2356488fb202"
    assert C.build({"script": "t.py"}).key() != RunConfig().key()


@pytest.mark.parametrize("doc,first,second", [
    (spec({"batch_size": [16, 32], "train.batch_size": [64]}), "'batch_size'",
     "'train.batch_size'"),
    (spec({"workers": [1], "data": {"workers": [2]}}), "'workers'", "'\\[data\\] workers'"),
    ({"base": {**BASE, "train.steps": 4}, "grid": {"batch_size": [8]}}, "'steps'",
     "'train.steps'"),
    ({"base": {**BASE, "train": {"lr": 0.1}, "lr": 0.2}, "grid": {"batch_size": [8]}},
     "'\\[train\\] lr'", "'lr'"),
])
def test_one_key_under_two_spellings_is_an_error_naming_both(doc, first, second):
    """The later spelling silently replaced the earlier: a 2-point grid ran as 1 point of 64."""
    with pytest.raises(ConfigError, match=f"is given twice, as {first} and {second}") as e:
        load_spec(doc)
    assert "\n" not in str(e.value)


def test_a_grid_over_process_counts_holds_threads_per_rank_equal(monkeypatch):
    """Bug caught: the 1-process point of a scale ran every core's threads beside 2 ranks of
    1 thread each, so the pairing measured the thread count too."""
    monkeypatch.setattr("scaleprobe.measure.env.cpu_count", lambda: 8)
    sp = load_spec({"base": {"model": "linear", "strategy": "ddp"},
                    "grid": {"nproc": [1, 2, 4]}})
    assert sp.base["dist.threads_per_rank"] == 2  # 8 cores / 4, at every count
    assert {sp.config(p).dist.threads_per_rank for p in points(sp)} == {2}
    own = load_spec({"base": {"model": "linear", "strategy": "ddp", "threads_per_rank": 3},
                     "grid": {"nproc": [1, 2]}})
    assert own.base["dist.threads_per_rank"] == 3  # the spec's own figure stands
    batch = load_spec({"base": {"model": "linear"}, "grid": {"batch_size": [16, 32]}})
    assert "dist.threads_per_rank" not in batch.base  # nothing paired across counts
