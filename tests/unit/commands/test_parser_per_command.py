"""`main` builds only the options of the command it was given (the others keep their names and
help): the same namespace, the same errors and the same top-level help as the full parser."""

import pytest

from scaleprobe import cli


@pytest.mark.parametrize("argv", [
    ["run", "--batch-size", "64", "--set", "train.momentum=0.8", "--steps", "auto"],
    ["predict", "--params", "1e6", "--nproc", "2,4"],
    ["sweep", "spec.toml", "--dry-run"],
    ["wrap", "--nproc", "2", "--", "train.py", "--epochs", "3"],
    ["report", "out", "--findings"],
])
def test_one_commands_parser_reads_a_line_as_the_whole_one_does(argv):
    whole, one = cli.build_parser(), cli.build_parser(argv)
    assert vars(one.parse_args(argv)) == vars(whole.parse_args(argv))
    # only the named command's options were built
    sub = cli._command_parser(one, one.parse_args(argv))
    others = [p for name, p in cli._command_parser_map(one).items() if name != argv[0]]
    assert sub is not None and len(sub._actions) > 1
    assert others and all(len(p._actions) == 1 for p in others)  # --help alone


def test_a_mistake_reads_the_same_and_the_top_help_lists_every_command(capsys):
    for argv in (["run", "--batchsize", "8"], ["bogus"], ["predict", "--nproc"]):
        codes = []
        for parser in (cli.build_parser(), cli.build_parser(argv)):
            with pytest.raises(SystemExit) as e:
                parser.parse_args(argv)
            codes.append((e.value.code, capsys.readouterr().err))
        assert codes[0] == codes[1] and codes[0][0] == 2, codes
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"    {name}" in out for name in ("run", "wrap", "predict", "plan", "worker"))
    assert cli.main(["run", "--help"]) == 0
    assert "--batch-size" in capsys.readouterr().out
