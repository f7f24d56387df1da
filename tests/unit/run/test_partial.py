"""What the driver keeps of ranks that returned no record (run/partial.py)."""

from scaleprobe.core.rank_record import RankRecord
from scaleprobe.core.result_model import RunResult
from scaleprobe.measure.steplog import StepLog
from scaleprobe.protocols import Ending
from scaleprobe.run.partial import mark_logged, recover_steps
from tests.unit.measure.test_steplog import Source


def _logs(tmp_path, ranks):
    for rank in ranks:
        src = Source(rank)
        for t in (0.1, 0.2, 0.3):
            src.add(t)
        StepLog(tmp_path, rank, src).flush()


def test_logged_ranks_fill_in_the_ranks_that_returned_nothing(tmp_path):
    """A wrapped job where rank 0 wrote its record and rank 1 was killed: rank 1 comes from
    its log, rank 0's own record is kept (bug caught: the log replacing a whole record, or
    the run left with rank 0 alone)."""
    _logs(tmp_path, [0, 1])
    end = Ending(ranks=[RankRecord(rank=0, steps_timed=5, step_times_s=[0.1] * 5)])
    recover_steps(end, tmp_path)
    assert [r.rank for r in end.ranks] == [0, 1] and end.logged == [1]
    assert end.ranks[0].steps_timed == 5 and end.ranks[1].steps_timed == 3
    result = RunResult(status="failed")
    mark_logged(result, end)
    assert result.partial is True
    assert result.null_reasons["partial"].startswith("ended by a failure after 5 timed steps")
    assert "rank 1: read from the step log" in result.null_reasons["partial"]


def test_nothing_logged_leaves_the_ending_as_it_was(tmp_path):
    end = Ending()
    recover_steps(end, tmp_path)
    assert end.ranks is None and end.logged == []
