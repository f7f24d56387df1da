"""One-line warnings a run's options get before anything runs (commands/options.py)."""

import os
import warnings

from scaleprobe.commands.options import warn_unused
from scaleprobe.config import runconfig as C


def test_more_loader_workers_than_cores_is_one_line_of_scaleprobes_not_torchs(capsys):
    """`run --loader pipelined --workers 4 --transform heavy` (a README command) on 2 cores
    printed torch's four-line UserWarning twice. Bug caught: torch's words, eight lines. Now
    one line says what it does to the figures, and torch's warning is silenced."""
    cores = len(os.sched_getaffinity(0))
    warn_unused(C.build({"loader": "pipelined", "workers": cores + 1}), [])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"scaleprobe: warning: --workers {cores + 1} "
                                               f"on {cores} cores: the loader workers "
                                               "time-share"), err
    warn_unused(C.build({"loader": "pipelined", "workers": 1}), [])
    # the default (2 workers) under ddp on 2 cores: as torch, one loader's workers count
    warn_unused(C.build({"loader": "pipelined", "workers": cores, "strategy": "ddp",
                         "nproc": 2}), [])
    warn_unused(C.build({"loader": "naive", "workers": cores + 1}), [])
    assert capsys.readouterr().err == ""
    from scaleprobe.data.loader import quiet_worker_count_warning

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_worker_count_warning()  # what build_loader does
        warnings.warn("This DataLoader will create 4 worker processes in total. Our "
                      "suggested max number of worker in current system is 2", UserWarning,
                      stacklevel=1)
        warnings.warn("another warning", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["another warning"]
