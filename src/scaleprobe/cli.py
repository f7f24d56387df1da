"""Command line: parse, build a config, make one call into the package. No logic of its own.

    scaleprobe run --model resnet18 --dataset synthetic --batch-size 32 --steps auto
    scaleprobe run exp.toml --batch-size 64 --set train.momentum=0.8
    scaleprobe run --strategy ddp --nproc 2 --eval
    scaleprobe demo | models | datasets | env | ...   (scaleprobe COMMAND --help for each)
"""

from __future__ import annotations

import argparse
import difflib
import functools
import importlib
import importlib.metadata
import os
import sys
import textwrap
from collections.abc import Iterable
from types import ModuleType
from typing import Any, NoReturn, TypeVar, overload

from scaleprobe import __version__, launch
from scaleprobe.config.keys import SYNONYMS
from scaleprobe.core.errors import ScaleprobeError, one_line

DESCRIPTION = """Measure and explain deep-learning training performance: one device or many,
one process or many, one host or several.

    scaleprobe demo                                 the main job on the embedded digits
    scaleprobe run --model resnet18 --dataset synthetic --steps auto
    scaleprobe scale --nproc 1,2                    speedup, and where the gap went
    scaleprobe wrap --nproc 2 -- train.py           your own script, measured unchanged
    scaleprobe sweep examples/sweep_quickstart.toml
    scaleprobe report scaleprobe-out                tables, plots and a diagnosis

`scaleprobe COMMAND --help` lists each command's options."""

COMMANDS = ("run", "wrap", "demo", "scale", "sweep", "colocate", "comm", "predict", "plan",
            "report", "compare", "datagen", "models", "datasets", "env", "worker")


def _modules() -> list[ModuleType]:
    mods = []
    for name in COMMANDS:
        try:
            mods.append(importlib.import_module(f"scaleprobe.commands.{name}"))
        except ModuleNotFoundError as e:
            if e.name != f"scaleprobe.commands.{name}":
                raise
    return mods


_N = TypeVar("_N")


class Parser(argparse.ArgumentParser):
    """A usage mistake is one line (what is wrong, and where the help is), exit code 2."""

    def error(self, message: str) -> NoReturn:
        message = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in message)
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")

    # argparse's own three signatures: the namespace given is the one filled and returned
    @overload
    def parse_args(self, args: Iterable[str] | None = None,
                   namespace: None = None) -> argparse.Namespace: ...
    @overload
    def parse_args(self, args: Iterable[str] | None, namespace: _N) -> _N: ...
    @overload
    def parse_args(self, *, namespace: _N) -> _N: ...

    def parse_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> Any:
        """An unknown option is named by the command it was given to, with the nearest of
        that command's options (``--batchsize``: did you mean --batch-size?)."""
        ns, extra = self.parse_known_args(None if args is None else list(args), namespace)
        if extra:
            sub = _command_parser(self, ns) or self
            sub.error(f"unrecognized arguments: {' '.join(extra)}{_nearest(sub, extra)}")
        return ns


def _command_parser(p: argparse.ArgumentParser, ns: argparse.Namespace
                    ) -> argparse.ArgumentParser | None:
    return _command_parser_map(p).get(getattr(ns, "command", None) or "")


def _command_parser_map(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


def _nearest(p: argparse.ArgumentParser, extra: list[str]) -> str:
    """"; did you mean --batch-size?" for the first unknown option near one of ``p``'s
    (dashes and underscores aside, or by spelling)."""
    known = [s for a in p._actions for s in a.option_strings if s.startswith("--")]
    flat = {s.replace("-", "").replace("_", ""): s for s in known}
    for word in extra:
        if not word.startswith("--"):
            continue
        opt = word.split("=", 1)[0]
        other = "--" + SYNONYMS.get(opt[2:].replace("-", "_").lower(), "").replace("_", "-")
        near = other if other in known else flat.get(opt.replace("-", "").replace("_", ""))
        near = near or next(iter(difflib.get_close_matches(opt, known, n=1, cutoff=0.75)), None)
        if near:
            return f"; did you mean {near}?"
    return ""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps each command's usage examples as written (indented lines) and fills every other
    paragraph of its description to the terminal's width (the module docstrings are wrapped
    at ~94 columns); a `command` in backticks is shown without them; shows an option's
    default where it has one and its help does not say it already (the run options write
    their own, from the config)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for para in text.replace("`", "").split("\n\n"):
            lines = para.splitlines()
            if any(ln[:1].isspace() for ln in lines):  # examples, a listing: as written
                out.append("\n".join(indent + ln for ln in lines))
            else:
                out.append(textwrap.fill(" ".join(ln.strip() for ln in lines), width,
                                         initial_indent=indent, subsequent_indent=indent,
                                         break_on_hyphens=False))
        return "\n\n".join(out)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = (action.help or "").replace("`", "")
        d = action.default
        if (action.option_strings and d is not None and d is not False
                and d is not argparse.SUPPRESS and d != [] and "default" not in text):
            text += " (default: %(default)s)"
        return text


@functools.cache
def version() -> str:
    try:
        return importlib.metadata.version("scaleprobe")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree

        return __version__


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole command line; given the ``argv`` about to be parsed, only its command's
    options are built (each other command keeps its name and one-line help): a command line
    parses in a few milliseconds instead of the ~30 ms that all sixteen commands' options take."""
    only = _command_word(argv)
    p = Parser(prog="scaleprobe", description=DESCRIPTION, formatter_class=HelpFormatter)
    p.add_argument("--version", action="version", version=f"scaleprobe {version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for mod in _modules():
        sp = sub.add_parser(mod.NAME, help=mod.HELP,
                            description=(mod.__doc__ or "").replace("``", "`"))
        if only is None or only == mod.NAME:
            mod.add_arguments(sp)
        sp.formatter_class = HelpFormatter
        sp.set_defaults(_run=mod.run)
    return p


def _command_word(argv: list[str] | None) -> str | None:
    """The command an argument list names: its first word that is not an option (the top
    level's own options, --help and --version, take no value); None for all of them."""
    if argv is None:
        return None
    return next((a for a in argv if not a.startswith("-")), None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser(argv).parse_args(argv)
    except SystemExit as e:  # --help, --version, or a usage mistake already printed
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    try:
        return int(args._run(args) or 0)
    except ScaleprobeError as e:
        print(f"scaleprobe: error: {one_line(e)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("scaleprobe: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `scaleprobe models | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def entry(argv: list[str] | None = None) -> int:
    """The command line's entry (`scaleprobe`, `python -m scaleprobe`): a process started for
    this one command, so its ranks may be forked from it (``launch.fresh_launcher``).
    ``main`` alone, called from a process of the caller's, leaves that to the caller."""
    launch.fresh_launcher()
    return main(argv)


if __name__ == "__main__":
    sys.exit(entry())
