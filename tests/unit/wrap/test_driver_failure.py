"""Which rank's words a failed wrapped job reports: the rank the launcher saw fail first."""

import json

from scaleprobe.run.script import read_ranks, script_exit_code
from scaleprobe.wrap.handoff import rank_path


def _write(run_dir, rank, script):
    path = rank_path(run_dir, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"record": {"rank": rank}, "script": script}))


def test_the_failed_ranks_error_and_exit_code_come_first(tmp_path):
    """Rank 1 raised; rank 0, waiting in a collective, saw the closed socket before the
    launcher stopped it (or was stopped: 130). Bug caught: the job reported as "rank 1:
    RuntimeError: ... Connection closed by peer" (rank 0's words under rank 1's number), or
    with exit code 130 instead of the script's 1."""
    _write(tmp_path, 0, {"error": "RuntimeError: [gloo] Connection closed by peer",
                         "exit_code": 130})
    _write(tmp_path, 1, {"error": "ValueError: the user's bug at step 6", "exit_code": 1})
    _write(tmp_path, 2, {"exit_code": 0})
    raws, facts = read_ranks(tmp_path, 1)
    assert [r.rank for r in raws] == [0, 1, 2]  # the records stay in rank order
    assert facts[0].error == "ValueError: the user's bug at step 6"
    assert script_exit_code(facts, RuntimeError()) == 1
    _, unknown = read_ranks(tmp_path, None)  # no rank known: rank order
    assert unknown[0].exit_code == 130


def test_a_rank_that_exited_with_a_code_and_no_line_is_named_in_scaleprobes_words(tmp_path):
    """Bug caught: a wrapped rank that exited with code 5 and left no line of its own was
    recorded with torch's launcher boilerplate ("To enable traceback see: ...")."""
    from types import SimpleNamespace

    from scaleprobe.protocols import Ending
    from scaleprobe.run.script import UserScript, base_config

    (tmp_path / "s.py").write_text("")
    work = UserScript(base_config({"out": str(tmp_path / "o")}, [str(tmp_path / "s.py")]))
    torch_words = ("boot.py FAILED\nRoot Cause (first observed failure):\n  exitcode  : 5\n"
                   "  traceback : To enable traceback see: https://pytorch.org/docs/stable/"
                   "elastic/errors.html")
    work.code = 5
    end = Ending()
    end.error = SimpleNamespace(message=torch_words, rank=0, exitcode=5)
    assert work.error_line(end) == "the script exited with code 5"
    end.error = SimpleNamespace(message="stalled: no progress for 5.1 s", rank=0, exitcode=1)
    assert work.error_line(end) == "stalled: no progress for 5.1 s"  # the launcher's own words
