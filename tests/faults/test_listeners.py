"""A single-host run listens on loopback only: the rendezvous store and the ranks' own
sockets (gloo) are unreachable from the machine's other addresses."""

import psutil
import pytest

from .test_rank_failures import run_job, valid_jsonl

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

WILDCARDS = ("0.0.0.0", "::", "")


def _listening(proc):
    try:
        return [(c.laddr.ip, c.laddr.port) for c in proc.net_connections(kind="inet")
                if c.status == psutil.CONN_LISTEN]
    except psutil.Error:
        return []


def test_single_host_run_listens_on_loopback_only(tmp_path, out_dir):
    """Bug caught: the rendezvous store (two ports, TCPStore's default) and gloo listening on
    every interface during a single-host run, reachable from the machine's external address
    although the run only ever connects over 127.0.0.1."""
    seen: dict[tuple[str, int], str] = {}  # (address, port) -> who listened: driver or rank

    def sample(p):
        try:
            driver = psutil.Process(p.pid)
            procs = [driver, *driver.children(recursive=True)]
        except psutil.Error:
            return
        for proc in procs:
            for addr in _listening(proc):
                seen.setdefault(addr, "driver" if proc.pid == p.pid else "rank")

    job = run_job(["run", "--strategy", "ddp", "--nproc", 2, "--model", "linear", "--loader",
                   "naive", "--steps", 150, "--warmup-steps", 1, "--out", out_dir,
                   "--no-progress"], tmp_path, during=sample)
    assert job.returncode == 0, job.stderr[-2000:]
    print(f"listening sockets seen: {seen}")
    # the run was watched while it had listeners: the store in the launcher, gloo in the ranks
    assert "driver" in seen.values() and "rank" in seen.values(), seen
    everywhere = [a for a in seen if a[0] in WILDCARDS]
    assert not everywhere, f"listening on every interface: {everywhere}"
    assert all(ip in ("127.0.0.1", "::1") for ip, _ in seen), seen
    assert [r["status"] for r in valid_jsonl(out_dir / "results.jsonl")] == ["ok"]
