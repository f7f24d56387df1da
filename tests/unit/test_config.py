import pytest

from scaleprobe import config as C
from scaleprobe.errors import ConfigError


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


@pytest.mark.parametrize("over,needle", [
    ({"batch_size": 0}, "batch size must be positive"),
    ({"batch_size": -3}, "batch size must be positive"),
    ({"steps": 5, "epochs": 2}, "either --steps or --epochs"),
    ({"loader": "fast"}, "unknown loader 'fast'"),
    ({"optimizer": "sgdd"}, "did you mean sgd"),
    ({"loader": "pipelined", "workers": 0}, "needs --workers >= 1"),
    ({"strategy": "single", "nproc": 2}, "use ddp"),
    ({"strategy": "ps", "nproc": 1}, "one server and at least one worker"),
    ({"strategy": "ddp", "nproc": 2, "global_batch": 33}, "does not split evenly"),
    ({"nnodes": 2, "strategy": "ddp"}, "--rdzv-endpoint"),
    ({"batch_size": "abc"}, "not a valid int"),
    ({"memory_limit": "lots"}, "cannot read size"),
])
def test_invalid_values_are_one_line_errors(over, needle):
    with pytest.raises(ConfigError) as e:
        C.build(over)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_unknown_key_suggests():
    with pytest.raises(ConfigError, match="did you mean.*batch_size"):
        C.resolve_key("batch_sise")


def test_toml_sections_and_aliases(tmp_path):
    p = tmp_path / "exp.toml"
    p.write_text('model = "mlp"\n[train]\nbatch_size = 16\nlr = 0.2\n[data]\nloader = "naive"\n')
    cfg = C.build(C.flatten(C.load_toml(p)))
    assert (cfg.model.name, cfg.train.batch_size, cfg.train.lr, cfg.data.loader) == (
        "mlp", 16, 0.2, "naive")


def test_unreadable_toml(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("batch_size = = 3\n")
    with pytest.raises(ConfigError, match="cannot parse"):
        C.load_toml(p)
    with pytest.raises(ConfigError, match="not found"):
        C.load_toml(tmp_path / "missing.toml")


def test_parse_size():
    assert C.parse_size("2GiB") == 2 << 30
    assert C.parse_size("512M") == 512 << 20
    assert C.parse_size("1000") == 1000


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
    named = C.build({"task": "detection", "model": "fcos_resnet50_fpn"})
    assert named.model.name == "fcos_resnet50_fpn"
    assert C.build({}).model.name == "digits_cnn"  # classification keeps its default
