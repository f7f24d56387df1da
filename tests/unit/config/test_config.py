import pytest

from scaleprobe.config import runconfig as C
from scaleprobe.config.keys import flatten, load_flat, load_toml, resolve_key
from scaleprobe.config.sections import KNOBS, parse_size
from scaleprobe.core.errors import ConfigError


def test_defaults_validate_and_roundtrip():
    cfg = C.build({})
    assert cfg.train.batch_size == 64 and cfg.data.dataset == "digits"
    again = C.from_dict(cfg.to_dict())
    assert again == cfg and again.key() == cfg.key()


def test_aliases_and_full_keys_and_string_values():
    cfg = C.build({"batch_size": "32", "train.lr": "0.1", "model": "resnet18", "eval": "true",
                   "steps": "auto", "dist.nproc": 2, "strategy": "ddp"})
    assert cfg.train.batch_size == 32 and cfg.train.lr == 0.1
    assert cfg.model.name == "resnet18" and cfg.train.eval is True
    assert cfg.train.steps == "auto" and cfg.world_size == 2


def test_key_ignores_output_folder_but_not_batch():
    a, b = C.build({"out": "x"}), C.build({"out": "y"})
    assert a.key() == b.key()
    assert C.build({"batch_size": 32}).key() != a.key()


def test_the_memory_probe_switch_keeps_the_points_key():
    """The probe runs after the window: turning it off (flag or TOML key) is not another
    point, and a sweep measured before the switch existed keeps its keys."""
    off = C.build({"memory_probe": "false"})
    assert off.measure.memory_probe is False and C.build({}).measure.memory_probe is True
    assert off.key() == C.build({}).key()


def test_compile_is_in_the_key_only_when_on():
    """An eager run keeps the key it had before --compile existed (a sweep measured then is
    not run again); a compiled run, and each mode, is a point of its own."""
    eager = C.build({})
    assert C.build({"compile_mode": "max-autotune"}).key() == eager.key()
    on = C.build({"compile": True})
    assert on.key() != eager.key()
    assert C.build({"compile": True, "compile_mode": "max-autotune"}).key() != on.key()
    # the backend: inductor (the default) keeps the key compiled runs had before it existed
    assert C.build({"compile": True, "compile_backend": "inductor"}).key() == on.key()
    assert C.build({"compile": True, "compile_backend": "aot_eager"}).key() != on.key()
    assert C.build({"compile_backend": "aot_eager"}).key() == eager.key()


@pytest.mark.parametrize("over,needle", [
    ({"batch_size": 0}, "train.batch_size: expected a whole number >= 1, got 0"),
    ({"batch_size": -3}, "train.batch_size: expected a whole number >= 1, got -3"),
    ({"steps": 5, "epochs": 2}, "either --steps or --epochs"),
    ({"loader": "fast"}, "data.loader: expected one of naive, pipelined, got 'fast'"),
    ({"optimizer": "sgdd"}, "did you mean sgd"),
    ({"loader": "pipelined", "workers": 0}, "needs --workers >= 1"),
    ({"strategy": "single", "nproc": 2}, "add --strategy ddp"),
    ({"strategy": "ps", "nproc": 1}, "one server and at least one worker"),
    ({"strategy": "ddp", "nproc": 2, "global_batch": 33}, "does not split evenly"),
    ({"nnodes": 2, "strategy": "ddp"}, "--rdzv-endpoint"),
    ({"batch_size": "abc"}, "train.batch_size: expected a whole number >= 1, got 'abc'"),
    ({"memory_limit": "lots"}, "measure.memory_limit: expected a size such as 512MiB or 2GiB, "
                               "got 'lots'"),
    ({"momentum": -0.5}, "train.momentum: expected a number in [0, 1), got -0.5"),
    ({"momentum": 1}, "train.momentum: expected a number in [0, 1), got 1"),
    ({"lr": 0}, "train.lr: expected a number > 0, got 0"),
    ({"workers": -1, "loader": "naive"}, "data.workers: expected a whole number >= 0, got -1"),
    ({"timeout_s": 0}, "dist.timeout_s: expected a number in (0, 86400], got 0"),
    ({"steps": "forever"}, "train.steps: expected a whole number >= 1 or 'auto', got 'forever'"),
    ({"strategy": "dpp"}, "dist.strategy: expected one of single, dp, ddp, ps, localsgd"),
    ({"compile": True, "warmup_steps": 0}, "--compile needs --warmup-steps 1 or more"),
    ({"compile_mode": "fast"}, "model.compile_mode: expected one of default, reduce-overhead"),
    ({"compile_backend": "tvm"}, "model.compile_backend: expected one of inductor, aot_eager"),
    ({"compile": True, "compile_backend": "aot_eager", "compile_mode": "max-autotune"},
     "--compile-mode max-autotune is inductor's; --compile-backend aot_eager takes the default"),
])
def test_invalid_values_are_one_line_errors(over, needle):
    with pytest.raises(ConfigError) as e:
        C.build(over)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_unknown_key_suggests():
    with pytest.raises(ConfigError, match="did you mean.*batch_size"):
        resolve_key("batch_sise")


def test_toml_sections_and_aliases(tmp_path):
    p = tmp_path / "exp.toml"
    p.write_text('model = "mlp"\n[train]\nbatch_size = 16\nlr = 0.2\n[data]\nloader = "naive"\n')
    cfg = C.build(flatten(load_toml(p)))
    assert (cfg.model.name, cfg.train.batch_size, cfg.train.lr, cfg.data.loader) == (
        "mlp", 16, 0.2, "naive")


@pytest.mark.parametrize("text,first,second", [
    ('batch_size = 16\n"train.batch_size" = 64\n', "'batch_size'", "'train.batch_size'"),
    ('lr = 0.1\n[train]\nlr = 0.2\n', "'lr'", "'\\[train\\] lr'"),
    ('batch-size = 16\nbatch_size = 32\n', "'batch-size'", "'batch_size'"),
    ('model = "linear"\n"model.name" = "mlp"\n', "'model'", "'model.name'"),
])
def test_one_key_under_two_spellings_in_a_run_file_is_an_error(tmp_path, text, first, second):
    p = tmp_path / "exp.toml"
    p.write_text(text)
    with pytest.raises(ConfigError, match=f"exp.toml: .* is given twice, as {first} and "
                       f"{second}; keep one") as e:
        load_flat(p)
    assert "\n" not in str(e.value)


def test_unreadable_toml(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("batch_size = = 3\n")
    with pytest.raises(ConfigError, match="cannot parse"):
        load_toml(p)
    with pytest.raises(ConfigError, match="not found"):
        load_toml(tmp_path / "missing.toml")


def test_parse_size():
    assert parse_size("2GiB") == 2 << 30
    assert parse_size("512M") == 512 << 20
    assert parse_size("1000") == 1000


@pytest.mark.parametrize("text", ["inf", "1e400GiB", "0", "-2GiB", "nan", ""])
def test_parse_size_refuses_what_is_no_size(text):
    """Bug: 'inf' raised OverflowError (a traceback), and 0 or a negative size was taken as
    a memory cap that no process can live under."""
    with pytest.raises(ConfigError, match="cannot read size"):
        parse_size(text)


def test_per_device_batch_weak_and_strong():
    weak = C.build({"strategy": "ddp", "nproc": 4, "batch_size": 32})
    strong = C.build({"strategy": "ddp", "nproc": 4, "global_batch": 128})
    assert weak.per_device_batch() == 32 and strong.per_device_batch() == 32
    assert C.build({"global_batch": 128}).per_device_batch(1) == 128


def test_detection_records_the_detector_it_builds():
    """Bug: a detection run left at the default model recorded config.model.name =
    digits_cnn (and the report's Model column said so) while it trained ssdlite."""
    cfg = C.build({"task": "detection", "dataset": "voc"})
    assert cfg.model.name == "ssdlite320_mobilenet_v3_large"
    assert C.from_dict(cfg.to_dict()).key() == cfg.key()
    named = C.build({"task": "detection", "model": "fcos_resnet50_fpn", "dataset": "voc"})
    assert named.model.name == "fcos_resnet50_fpn"
    assert C.build({}).model.name == "digits_cnn"  # classification keeps its default


@pytest.mark.parametrize("key,ok,bad", [
    ("train.momentum", [0, 0.0, 0.5, 0.999], [-0.01, 1, 1.5]),
    ("train.lr", [1e-9, 0.05, 3], [0, -0.1]),
    ("train.batch_size", [1, 64, 4096], [0, -1]),
    ("data.workers", [0, 1, 16], [-1]),
    ("dist.timeout_s", [0.001, 30, 3600], [0, -5]),
    ("train.warmup_steps", [0, 5], [-1]),
    ("data.val_fraction", [0.01, 0.5, 0.99], [0, 1]),
])
def test_ranges_at_their_edges(key, ok, bad):
    """The documented ranges hold at their edges: momentum in [0, 1), lr > 0, batch size >= 1,
    workers >= 0, timeout > 0 (negative momentum used to pass silently)."""
    extra = {"loader": "naive"} if key == "data.workers" else {}
    for v in ok:
        cfg = C.build({key: v, **extra})
        sec, name = key.split(".")
        assert getattr(getattr(cfg, sec), name) == v
    for v in bad:
        with pytest.raises(ConfigError, match=f"^{key}: expected .*, got {v}$"):
            C.build({key: v, **extra})


@pytest.mark.parametrize("key,value", [
    ("train.lr", float("nan")), ("train.lr", float("inf")), ("dist.timeout_s", float("inf")),
    ("train.momentum", float("nan")), ("measure.profile_every", float("-inf")),
    ("train.lr", 10**400), ("train.seed", 2**64), ("train.batch_size", 2**63),
])
def test_non_finite_and_oversized_numbers_are_refused(key, value):
    """Bug: lr = nan passed `lr <= 0` (nan compares false), a 1e308-second timeout overflowed
    timedelta in the workers, a seed above 2**64 crashed torch.manual_seed."""
    with pytest.raises(ConfigError, match=f"^{key}: expected "):
        C.build({key: value})


@pytest.mark.parametrize("key,value", [
    ("train.batch_size", True), ("train.batch_size", 1.5), ("data.workers", 2.0),
    ("train.eval", 1), ("train.eval", "maybe"), ("model.name", 5), ("name", ["a"]),
    ("train.steps", 2.5), ("data.image_size", {"w": 3}),
])
def test_values_of_the_wrong_type_are_refused(key, value):
    """Bug: batch_size = true trained with batch size 1, a float batch size reached the
    DataLoader, `name = ["a"]` reached the tables."""
    with pytest.raises(ConfigError, match=f"^{key}: expected "):
        C.build({key: value})


def test_an_integer_for_a_float_key_is_stored_as_a_float():
    """`lr = 1` in a TOML file and `--lr 1.0` are the same run: same saved value, same key
    (an int kept as such gave config.json "lr": 1 and a different run key, so a sweep did not
    recognise the point as done)."""
    a, b = C.build({"lr": 1}), C.build({"lr": "1.0"})
    assert isinstance(a.train.lr, float) and a.key() == b.key()


def test_validate_holds_a_config_built_in_code_to_the_same_rules():
    """A RunConfig made with dataclasses.replace (parity, colocate) bypasses build(); validate
    must still refuse a wrong type or an out-of-range value."""
    from dataclasses import replace

    cfg = C.build({})
    with pytest.raises(ConfigError, match="train.momentum"):
        C.validate(replace(cfg, train=replace(cfg.train, momentum=-1.0)))
    with pytest.raises(ConfigError, match="train.steps"):
        C.validate(replace(cfg, train=replace(cfg.train, steps="12")))


def test_every_default_passes_its_own_check_and_has_help():
    """A default outside its declared range would fail every run that leaves the key out; a
    key without help leaves a blank line in --help."""
    cfg = C.build({})
    C.check_types(cfg)
    for key, knob in KNOBS.items():
        assert knob.help, key


@pytest.mark.parametrize("text,needle", [
    ("a = " + "1" * 5000, "cannot parse"),  # more digits than Python converts: ValueError
    ("a = " + "[" * 600 + "]" * 600, "nested too deeply"),  # RecursionError in tomllib
    (b"lr = 0.1\n\xff\xfe".decode("latin-1"), "not UTF-8"),
])
def test_toml_files_python_cannot_read_are_one_line(tmp_path, text, needle):
    """Bug: tomllib raised ValueError / RecursionError past the TOMLDecodeError handler."""
    p = tmp_path / "bad.toml"
    p.write_bytes(text.encode("latin-1") if needle == "not UTF-8" else text.encode())
    with pytest.raises(ConfigError, match=needle) as e:
        load_toml(p)
    assert "\n" not in str(e.value)


def test_a_section_written_as_a_value_is_named():
    """`train = 5` at the top of a file: say that [train] is a table, not 'unknown key'."""
    with pytest.raises(ConfigError, match=r"\[train\] must be a table"):
        flatten({"train": 5})
