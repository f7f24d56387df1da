"""Shaping settings of the two-host harness (no namespaces are created here)."""

from scaleprobe.netlab.netns import IFNAMES, Hosts, tbf_args


def _kv(args):
    return dict(zip(args[1::2], args[2::2], strict=False))


def test_tbf_burst_and_queue_do_not_starve_big_transfers():
    slow, fast = _kv(tbf_args(200)), _kv(tbf_args(10_000))
    assert slow["rate"] == "200mbit" and fast["rate"] == "10000mbit"
    assert int(slow["burst"]) >= 64 * 1024 + 1514  # a whole GSO segment passes
    assert int(fast["burst"]) >= 10_000e6 / 8 * 1e-3  # 1 ms of traffic at 10 Gbit/s
    assert int(slow["limit"]) >= 4 << 20 and int(fast["limit"]) >= 10_000e6 / 8 * 0.05


def test_commands_run_inside_the_namespace():
    h = Hosts(namespaces=("sp-1-0-a", "sp-1-0-b"), addrs=("10.213.2.1", "10.213.2.2"))
    assert h.exec_argv(1, ["python", 3]) == ["ip", "netns", "exec", "sp-1-0-b", "python", "3"]
    assert h.socket_env(0)["GLOO_SOCKET_IFNAME"] == IFNAMES[0]


def test_unavailable_without_root_or_tools(monkeypatch):
    from scaleprobe.netlab import netns

    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert netns.available.__wrapped__() == (False, "network namespaces need root")
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns.shutil, "which", lambda tool: None if tool == "tc" else "/x")
    ok, reason = netns.available.__wrapped__()
    assert not ok and "'tc'" in reason
