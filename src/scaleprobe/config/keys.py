"""The keys of a run's configuration as users write them: a short alias or the full dotted
key (``batch_size``, ``train.batch_size``), another tool's name for one (``num_workers``:
"did you mean workers"), TOML files and their sections flattened to ``{full key: value}``,
and every value checked against its key's declaration (config/sections.py).
"""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path
from typing import Any

from scaleprobe.config.bundled import hint
from scaleprobe.config.knobs import show
from scaleprobe.config.sections import ALIASES, ALL_KEYS, KNOBS, SECTION_ONLY, SECTIONS
from scaleprobe.core.errors import ConfigError, one_line
from scaleprobe.core.registry import suggest


def resolve_key(key: Any) -> str:
    """Map ``batch_size`` or ``train.batch_size`` (or dashes) to the full dotted key."""
    key = str(key).strip().replace("-", "_")
    if key in KNOBS:
        return str(key)
    if key in ALIASES:
        return str(ALIASES[key])
    if key in SECTION_ONLY:
        raise ConfigError(f"[{key}] must be a table of keys, e.g. [{key}] on a line of its own")
    near = suggest(key, list(ALIASES) + ALL_KEYS)
    other = SYNONYMS.get(key.rpartition(".")[2].lower())
    if other:  # another tool's name for a key: spelling alone would not find it
        near = [other, *(n for n in near if n != other)][:3]
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    raise ConfigError(f"unknown config key {show(key)}{hint}")


# other tools' names for scaleprobe's keys (PyTorch examples, Lightning, Hugging Face,
# torchrun): "did you mean" finds them although their spelling is not near
SYNONYMS = {"learning_rate": "lr", "learningrate": "lr", "num_workers": "workers",
            "batchsize": "batch_size", "bs": "batch_size", "per_device_train_batch_size":
            "batch_size", "num_epochs": "epochs", "n_epochs": "epochs", "max_iters": "max_steps",
            "num_steps": "steps", "nproc_per_node": "nproc", "num_nodes": "nnodes",
            "world_size": "nproc", "arch": "model", "model_name": "model", "opt": "optimizer",
            "wd": "weight_decay", "precision": "amp", "warmup": "warmup_steps",
            "data_path": "data_dir", "output_dir": "out", "seq_length": "seq_len",
            "block_size": "seq_len"}


def check_value(full: str, value: Any, parse: bool = True) -> Any:
    """``value`` for the full key ``full``, converted from text (``parse``) and checked against
    the key's declared type and range; a mismatch is a one-line ``BadValue``."""
    return KNOBS[full].check(value, parse)


def check_flat(flat: dict[str, Any], where: str = "") -> dict[str, Any]:
    """Every value of a flat ``{key: value}`` mapping checked and converted, by full key; an
    error starts with ``where`` (the file it came from). Two spellings of one key
    (``batch_size`` and ``train.batch_size``) are an error, not a silent overwrite."""
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for k, v in flat.items():
        try:
            full = resolve_key(k)
            _once(spelled, full, str(k))
            out[full] = check_value(full, v)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}" if where else str(e)) from None
    return out


def _once(spelled: dict[str, str], full: str, spelling: str) -> None:
    """Record that ``spelling`` names ``full``; a second spelling of the same key is a
    one-line error naming both (the later one would silently replace the earlier)."""
    first = spelled.setdefault(full, spelling)
    if first != spelling:
        raise ConfigError(f"{full} is given twice, as {show(first)} and {show(spelling)}; "
                          "keep one")


def load_toml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    name = str(p) if str(p).isprintable() else show(str(p))
    try:
        with p.open("rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {name}{hint(p)}") from None
    except OSError as e:
        raise ConfigError(f"cannot read {name}: {e.strerror}") from None
    except ValueError:  # a NUL in the path
        raise ConfigError(f"cannot read {name}: not a valid path") from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ConfigError(f"cannot parse {name}: not UTF-8 text") from None
    except (ValueError, RecursionError) as e:  # TOMLDecodeError, a number too long, nesting
        why = "nested too deeply" if isinstance(e, RecursionError) else one_line(e)
        raise ConfigError(f"cannot parse {name}: {why}") from None


def flatten(d: dict[str, Any]) -> dict[str, Any]:
    """``{"train": {"lr": 1}}`` -> ``{"train.lr": 1}``; keys are resolved through aliases, and
    one key under two spellings (``lr`` and ``[train] lr``) is a one-line error."""
    if not isinstance(d, dict):
        raise ConfigError(f"expected a table of config keys, got {show(d)}")
    out: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for k, v in d.items():
        if isinstance(v, dict) and k in SECTIONS:
            for kk, vv in v.items():
                full = resolve_key(f"{k}.{kk}")
                _once(spelled, full, f"[{k}] {kk}")
                out[full] = vv
        else:
            full = resolve_key(k)
            _once(spelled, full, str(k))
            out[full] = v
    return out


def load_flat(path: str | Path) -> dict[str, Any]:
    """A run TOML file as checked ``{full key: value}``; errors name the file."""
    return check_flat(join_args(flatten_in(load_toml(path), str(path)), str(path)), str(path))


def args_text(value: Any, where: str) -> Any:
    """``args = ["--batch-size", "32"]`` (TOML) as the one string ``script.args`` keeps,
    shell-quoted so that an argument with a space stays one; other values are left to the
    key's own check."""
    if not isinstance(value, list):
        return value
    if not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: args must be a list of strings (or one string), got "
                          f"{show(value)}")
    return shlex.join(value) if value else None


def join_args(flat: dict[str, Any], where: str) -> dict[str, Any]:
    """A flattened TOML file with a list for ``script.args`` made its text (:func:`args_text`)."""
    return {k: args_text(v, where) if k == "script.args" else v for k, v in flat.items()}


def flatten_in(d: dict[str, Any], where: str) -> dict[str, Any]:
    """``flatten``, with errors that start with ``where``."""
    try:
        return flatten(d)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
