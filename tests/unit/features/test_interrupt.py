"""How a run hears Ctrl+C and SIGTERM (``scaleprobe.features.interrupt``), in this process."""

import os
import signal
import time

import pytest

from scaleprobe.core.rank_record import RankRecord
from scaleprobe.features.interrupt import Interrupted, StopRequest, describe, sigterm_interrupts


def _deliver(sig):
    os.kill(os.getpid(), sig)
    time.sleep(0.05)  # the handler runs at the next bytecode boundary


@pytest.mark.parametrize("sig,name", [(signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")])
def test_while_setting_up_a_signal_raises(sig, name):
    """Bug caught: a signal during setup (nothing measured yet) swallowed, the run going on."""
    stop = StopRequest()
    with stop.handling(), pytest.raises(Interrupted) as err:
        _deliver(sig)
    assert err.value.signame == name and not stop.requested


def test_while_training_a_signal_only_asks_to_stop_and_a_second_stops_at_once():
    """Bugs caught: the first Ctrl+C raising inside a step (the step's timing half done, the
    steps so far lost); a second Ctrl+C ignored, so a stuck run could not be stopped."""
    stop = StopRequest(escape_on_second=True)
    with stop.handling():
        stop.deferring = True
        _deliver(signal.SIGTERM)
        assert stop.signame == "SIGTERM"
        with pytest.raises(Interrupted):
            _deliver(signal.SIGINT)
    assert stop.signame == "SIGTERM"  # the first request is what is reported


def test_the_first_ctrl_c_in_one_process_says_it_was_heard(capfd):
    """`run --model resnet34 --image-size 224` on 2 loaded cores: a step took over a minute
    and Ctrl+C printed nothing until it ended. Bug caught: silence. Now one line says the stop
    was heard and how to stop at once; a launched rank (its launcher speaks) says nothing."""
    for once in (True, False):
        stop = StopRequest(escape_on_second=once)
        with stop.handling():
            stop.deferring = True
            _deliver(signal.SIGINT)
        err = capfd.readouterr().err
        assert ("SIGINT heard: stopping at the end of the step under way" in err) is once, err
        assert err.count("heard") == (1 if once else 0)


def test_a_launched_rank_never_raises_once_training():
    """Bug caught: a rank that raised on a second signal (a terminal's Ctrl+C and the
    launcher's forwarded one) left its peers waiting in a collective."""
    stop = StopRequest(escape_on_second=False)
    with stop.handling():
        stop.deferring = True
        _deliver(signal.SIGINT)
        _deliver(signal.SIGINT)
    assert stop.signame == "SIGINT"


def test_handlers_are_restored_after():
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    with StopRequest().handling(), sigterm_interrupts():
        pass
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_a_forked_loader_worker_still_dies_on_sigterm():
    """A DataLoader worker forked while the handler is installed inherits it. Bug caught: the
    worker ignoring the SIGTERM its loader stops it with, so the rank waited for it at exit."""
    stop = StopRequest()
    with stop.handling():
        stop.deferring = True
        pid = os.fork()
        if pid == 0:  # the worker: wait to be stopped
            time.sleep(30)
            os._exit(0)
        time.sleep(0.2)
        os.kill(pid, signal.SIGTERM)
        deadline = time.time() + 10
        while time.time() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child ignored SIGTERM")
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
    assert not stop.requested  # the child's signal is not this process's stop request


def test_the_error_line_names_the_signal():
    assert describe("SIGINT") == "interrupted by the user (Ctrl+C)"
    assert "SIGTERM" in describe("SIGTERM") and "pre-empted" in describe("SIGTERM")


def test_a_forked_loader_worker_ignores_ctrl_c_and_still_ends_on_sigterm():
    """Ctrl+C at a terminal (or torchrun's SIGINT to a rank's process group) reaches the
    loader workers too. Bug caught: a worker that ended on it failed the rank's fetch under
    way, so the run crashed instead of stopping after its step with a record."""
    stop = StopRequest()
    with stop.handling():
        stop.deferring = True
        pid = os.fork()
        if pid == 0:  # the worker
            time.sleep(3)
            os._exit(7)
        time.sleep(0.2)
        os.kill(pid, signal.SIGINT)
        time.sleep(0.5)
        done, _ = os.waitpid(pid, os.WNOHANG)
        assert done == 0, "the worker ended on SIGINT"
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
    assert not stop.requested  # the parent was not asked to stop by its worker's signal


def test_a_signal_to_one_rank_is_told_to_its_peers_and_stops_them(tmp_path):
    """SIGTERM to one rank's pid (not the launcher's). Bug caught: only that rank stopped;
    it left the loop and waited in a collective its peers never joined (an FSDP job took
    28 s to end, named by gloo's "Connection closed by peer", SIGTERM nowhere). Now its
    heartbeat publishes the signal, the peer's stop request reads it at its next step's
    end, and the run's error names the rank."""
    from scaleprobe.measure.heartbeat import Heartbeat
    from scaleprobe.run.driver import interrupted_from

    signalled, peer = Heartbeat(tmp_path, 1).start(), Heartbeat(tmp_path, 0).start()
    try:
        peer.watch_peers()
        mine, theirs = StopRequest(escape_on_second=False), StopRequest(escape_on_second=False)
        mine.tell_peers = signalled.asked_to_stop
        theirs.peers = peer.peer_stop
        assert not theirs.requested
        with mine.handling():
            mine.deferring = True
            _deliver(signal.SIGTERM)
        assert mine.signame == "SIGTERM"
        assert theirs.requested and theirs.peer == (1, signal.SIGTERM)
        assert theirs.signame is None  # its record says "peer": the signal was not its own
    finally:
        signalled.finish("done")
        peer.finish("done")
    raws = [RankRecord(rank=0, interrupted="peer"), RankRecord(rank=1, interrupted="SIGTERM")]
    assert interrupted_from(raws) == "SIGTERM to rank 1"
    assert describe(interrupted_from(raws)) == (
        "interrupted by SIGTERM sent to rank 1 alone (the other ranks stopped with it)")
    # the launcher's signal reaches every rank: no rank is named
    both = [RankRecord(rank=r, interrupted="SIGTERM") for r in (0, 1)]
    assert interrupted_from(both) == "SIGTERM"


class _Store:
    """The job's store as the engine uses it (torch's TCPStore answers bytes)."""

    def __init__(self):
        self.kv = {}

    def check(self, keys):
        return all(k in self.kv for k in keys)

    def get(self, key):
        return self.kv[key]

    def compare_set(self, key, expected, value):
        self.kv.setdefault(key, value.encode())
        return self.kv[key]


def test_a_signal_to_a_rank_on_another_host_stops_this_hosts_ranks_through_the_store():
    """2 hosts x 2 ranks; rank 1 (host 0) is sent SIGTERM. Bug caught: the ranks of host 1
    never saw it (a peer is read from its heartbeat file, on its own host), trained on and
    waited in a collective until the timeout. Now they read the step the ranks stop at, and
    who was asked, from the job's store, and their host's record names it."""
    from scaleprobe.features.interrupt import STOP_KEY, peers_across_hosts, stop_step_of, stop_value
    from scaleprobe.run.driver import interrupted_from

    store = _Store()
    signalled, remote = StopRequest(escape_on_second=False), StopRequest(escape_on_second=False)
    remote.peers = peers_across_hosts(lambda: None, store)
    remote.local_ranks = {2, 3}
    assert not remote.requested
    signalled.signame = "SIGTERM"
    got = store.compare_set(STOP_KEY, "", stop_value(12, signalled.who(1)))
    assert stop_step_of(got) == 12 and signalled.recorded() == "SIGTERM"
    assert remote.requested and remote.peer == (1, signal.SIGTERM)
    # a later proposal (host 1's own) gets the first one's step: every rank stops there
    assert stop_step_of(store.compare_set(STOP_KEY, "", stop_value(13, remote.who(2)))) == 12
    assert remote.recorded() == "SIGTERM to rank 1"
    assert interrupted_from([RankRecord(rank=r, interrupted=remote.recorded())
                             for r in (2, 3)]) == "SIGTERM to rank 1"
    # a peer on the same host is named by that rank's own record: "peer" here
    near = StopRequest(escape_on_second=False)
    near.peer, near.local_ranks = (1, signal.SIGTERM), {0, 1}
    assert near.recorded() == "peer"
