"""How `scaleprobe wrap` reads its own options (commands/wrap.py)."""

from scaleprobe import cli
from scaleprobe.commands import wrap
from scaleprobe.commands.options import RUN_FLAGS, _dest
from scaleprobe.run.script import base_config


def _config(argv):
    args = cli.build_parser().parse_args(["wrap", *argv])
    overrides = {key: getattr(args, _dest(flag)) for flag, key, _o in RUN_FLAGS
                 if flag in wrap.FLAGS and hasattr(args, _dest(flag))}
    target = [t for t in args.target if t != "--"]
    assert target == ["train.py"], args.target
    return base_config(overrides, target)


def test_force_is_a_switch_as_for_run():
    """`wrap --force` took a value (`--force FORCE`), so `wrap --force -- train.py` read "--"
    or the script as its value, where `run --force` is a switch. Now it is one here too."""
    assert _config(["--force", "--", "train.py"]).dist.force is True
    assert _config(["--", "train.py"]).dist.force is False
    assert _config(["--no-force", "--", "train.py"]).dist.force is False
    assert _config(["--timeout", "12", "--", "train.py"]).dist.timeout_s == 12.0
