"""The step model (``scaleprobe predict``) against measured multi-rank runs, on this machine:
two network-namespace hosts joined by a tc-shaped link (root, ip, tc, taskset).

    nice -n 10 python benchmarks/predict_validation.py measure --out OUT     # resumable
    python benchmarks/predict_validation.py table --out OUT                  # the table
    python benchmarks/predict_validation.py table --out OUT --markdown       # as the docs keep it
    python benchmarks/predict_validation.py refit --out OUT                  # fits again from rows
    python benchmarks/predict_validation.py measure --out OUT --links 100mbit --models gpt_tiny \
        --kinds ddp,fsdp                                                     # part of the grid

``measure`` runs the grid, one link at a time, in fresh namespaces: first ``scaleprobe comm``
across the link (the all_reduce fit every prediction uses: ``--link measured:OUT/comm/L``;
with FSDP in the grid, its all-gather's and reduce-scatter's fits too),
then per model, back to back so that the machine's load is alike for all of them:

    ddp1      ``--strategy ddp --nproc 1``, two at once, one per host (core 0 and core 1,
              one thread each, ``ddp1`` and ``ddp1b``, their timed windows opened together
              at one gate, each other's companions): the 1-rank runs DDP is predicted
              from (their buckets' ready times, logged by DDP's comm hook on one process).
              Side by side, because the two "hosts" share one machine: its memory, caches
              and the other jobs' load; in a DDP run both cores compute at once, and a rank
              alone on the machine computes faster than either of them (digits_cnn: forward
              93 ms alone, 122 ms in the 2-rank run, 2026-11-26)
    single1   ``--strategy single`` on host 1 (core 1), alone: the 1-rank run a parameter
              server's worker is predicted from (no DDP in its backward; the server waits
              while the worker computes, so the worker has the machine as this run had it)
    ddp2      ``--strategy ddp``, one rank per host (``--nnodes 2``), each on its own core
              (each host's run told the other's pid: its CPU is the job's, not outside load)
    ps2       ``--strategy ps``: the server on host 0, one worker on host 1
    fsdp1     ``--strategy fsdp --nproc 1``, two at once as ``ddp1``: FSDP's own 1-rank runs
              (its wrapping and flat parameters are in their step, as in the 2-rank run's)
    fsdp2     ``--strategy fsdp``, one rank per host
    ddp1after, single1after, fsdp1after   the 1-rank runs again: the machine's load drifts
              within minutes, and ``predict --check`` pools the nearest 1-rank runs before
              and after each measured run (its interval draws runs, then steps: the drift
              between them is in it)

A point whose results.jsonl already holds an ``ok`` record is skipped, so an interrupted
``measure`` goes on where it stopped; ``--links``/``--models`` pick part of the grid. Links:
100mbit, 1gbit, unshaped (the veth pair as it is: CPU-bound near 6-9 Gbit/s here) and
1gbit+1ms (1 ms added each way: netem, or where the kernel has no sch_netem the delay relay
of netlab/delay.py, which ``netns.two_hosts`` uses then). Models at batch 32, synthetic data
made on the device: digits_cnn (67 k parameters), resnet18 (11.2 M), mlp_large (23.1 M,
little compute), all at 32x32, and gpt_tiny (--task lm, 2 layers x width 64, sequences of 32
random tokens). ``--kinds`` runs part of each group (``ddp,fsdp``: their 1-rank and 2-rank
runs).

``table`` is ``scaleprobe predict --check OUT/runs`` (each measured run beside its prediction
from the matching 1-rank runs nearest in time), with the grid's summary in the papers' form
(mean, median and p90 of |predicted / measured - 1|) and every pair of one model's
configurations whose measured steps differ by more than 15%, with any the prediction puts in
the wrong order.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from scaleprobe.measure.outside import (  # noqa: E402
    COMPANIONS_ENV,
    WINDOW_GATE_ENV,
    open_gate,
    write_companions,
)
from scaleprobe.netlab import netns  # noqa: E402

LINKS = {"100mbit": (100, None), "1gbit": (1000, None), "unshaped": (None, None),
         "1gbit+1ms": (1000, 1.0)}
MODELS = ("digits_cnn", "resnet18", "mlp_large", "gpt_tiny")
IMAGES = ["--dataset", "synthetic", "--image-size", "32"]
MODEL_ARGS = {"gpt_tiny": ["--task", "lm", "--dataset", "tokens-synthetic", "--layers", "2",
                           "--width", "64", "--heads", "2", "--seq-len", "32"]}
# the monitor samples every 0.25 s, and the one-rank runs time 48 steps: each run's window
# then holds the 3 samples ``predict --check`` needs to read the CPU used outside it (the
# load it predicts each point for; gpt_tiny's 24 steps of 17 ms held none at 0.5 s). Every
# run, one-rank and two-rank alike, fixes glibc's allocator thresholds (train.malloc=steady):
# with glibc's own, how much memory a fresh process re-faults each step is drawn anew, and
# one-rank digits_cnn stepped in 29.9-39.5 ms over six runs (27.3-29.5 ms with them fixed).
# And every run and link benchmark puts gloo's socket threads at SCHED_BATCH
# (dist.gloo_io=batch): with gloo's default, a small collective took 0.3 ms or a scheduler
# tick more, as its socket thread polled for a receive not yet posted on the core of the
# thread about to post it, and FSDP's chains of them met that more often than the link
# benchmark's calls did (docs/COMMUNICATION.md, "gloo's socket thread")
GLOO_IO = "batch"
COMMON = ["--batch-size", "32", "--loader", "naive", "--no-progress", "--timeout", "300",
          "--set", "dist.calibrate_comm=false", "--set", "dist.threads_per_rank=1",
          "--set", "measure.monitor_interval_s=0.25", "--set", "train.malloc=steady",
          "--set", f"dist.gloo_io={GLOO_IO}"]
ONE_RANK = ["--steps", "48", "--warmup-steps", "3"]
TWO_RANK = ["--min-steps", "8", "--max-seconds", "40", "--max-steps", "60",
            "--warmup-steps", "2"]
RUN_TIMEOUT_S = 1500
# the link's all_reduce fit spans the messages the runs send: DDP's buckets of up to 25 MiB,
# a parameter server's flat 92 MB of mlp_large (16 MiB and below fit in the caches and
# move faster per byte on a CPU-bound link: an extrapolated fit priced them low)
COMM_SIZES = "256K,1M,4M,16M,64M"
# and from 16 KiB over a link with added latency, where FSDP's units of the small models
# (74-226 KB) wait out its round trips (2.5-2.9 ms for an all-gather over 1 ms each way, any
# size up to 256 KiB): the fit gets a range of its own below its knee. Not on the others:
# there a call that small took 0.3-0.5 or 3-4 ms after a barrier (gloo's threads, 2 cores),
# the median of 10 fell in either mode, and the fit's worst error (the link's spread)
# widened every prediction's interval to +-40-60%
COMM_SIZES_LATENCY = "16K,64K," + COMM_SIZES
# one model on one link, in this order: the 1-rank runs before and after the 2-rank runs
# (``predict --check`` pools the nearest before and after)
GROUP = ("ddp1", "single1", "fsdp1", "ddp2", "ps2", "fsdp2", "ddp1after", "single1after",
         "fsdp1after")

KINDS = ("ddp", "single", "ps", "fsdp")
_PORT = [29700]


def _port() -> int:
    _PORT[0] += 1
    return _PORT[0]


def _done(folder: Path) -> bool:
    f = folder / "results.jsonl"
    if not f.exists():
        return False
    lines = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    return any(r.get("status") == "ok" for r in lines)


def _log(out: Path, text: str) -> None:
    line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}"
    print(line, flush=True)
    with (out / "progress.log").open("a") as fh:
        fh.write(line + "\n")


def _wait(procs: list[subprocess.Popen], what: str) -> bool:
    ok = True
    for i, p in enumerate(procs):
        try:
            text = p.communicate(timeout=RUN_TIMEOUT_S)[0] or ""
        except subprocess.TimeoutExpired:
            p.kill()
            text = "timed out"
        if p.returncode != 0:
            ok = False
            print(f"{what}, host {i} failed ({p.returncode}):\n{text[-2000:]}", flush=True)
    return ok


def _scaleprobe() -> list[str]:
    return [sys.executable, "-m", "scaleprobe"]


def comm_fit(hosts: netns.Hosts, folder: Path, fsdp: bool, latency: bool = False) -> bool:
    """The link's fits: the all-reduce's, and FSDP's own collectives where FSDP is measured
    (gloo moves their bytes 2-5x slower: priced at the all-reduce's, resnet18's FSDP step on
    1 Gbit was predicted 0.66 of the measured one)."""
    if _done(folder / "node0"):
        return True
    ops = "all_reduce,all_gather_flat,reduce_scatter" if fsdp else "all_reduce"
    port = _port()
    # the two hosts' benchmarks are each other's companions, not load (each record's
    # ``load`` says what else used the machine while it measured)
    folder.mkdir(parents=True, exist_ok=True)
    mates = folder / f"companions-{os.getpid()}-{port}"
    procs = [hosts.run(i, [*_scaleprobe(), "comm", "--nproc", "1", "--nnodes", "2",
                           "--node-rank", str(i), "--rdzv-endpoint", f"{hosts.addrs[0]}:{port}",
                           "--ops", ops, "--sizes",
                           COMM_SIZES_LATENCY if latency else COMM_SIZES, "--iters", "10",
                           "--gloo-io", GLOO_IO,
                           "--warmup", "1", "--out", str(folder / f"node{i}")],
                       env={COMPANIONS_ENV: str(mates)}, cpus=[i], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
             for i in (0, 1)]
    write_companions(mates, [p.pid for p in procs])
    return _wait(procs, f"comm {folder}")


def one_rank(hosts: netns.Hosts, folders: list[Path], model: str, strategy: str) -> bool:
    """The 1-rank run on host 0 (core 0), or, with two folders, on both hosts at once (one
    on each core, so each sees the machine as a rank of a DDP run does): their timed windows
    open together at one gate, and each leaves the other's CPU out of its outside load (they
    are companions, as `plan --verify`'s copies are)."""
    if all(_done(f) for f in folders):
        return True
    extra = ["--nproc", "1"] if strategy != "single" else []
    procs, envs = [], [None] * len(folders)
    if len(folders) > 1:
        folders[0].mkdir(parents=True, exist_ok=True)
        mates = folders[0] / f"companions-{os.getpid()}-{_port()}"
        ready = [Path(f"{mates}.{i}.ready") for i in range(len(folders))]
        envs = [{COMPANIONS_ENV: str(mates),
                 WINDOW_GATE_ENV: json.dumps({"ready": str(r), "go": f"{mates}.go"})}
                for r in ready]
    for host, folder, env in zip((1, 0) if len(folders) == 1 else (0, 1), folders, envs,
                                 strict=False):
        argv = [*_scaleprobe(), "run", "--strategy", strategy, *extra, "--model", model,
                *MODEL_ARGS.get(model, IMAGES), *COMMON, *ONE_RANK, "--out", str(folder)]
        procs.append(hosts.run(host, argv, env=env, cpus=[host], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True))
    if len(folders) > 1:
        write_companions(mates, [p.pid for p in procs])
        open_gate(ready, Path(f"{mates}.go"), procs, RUN_TIMEOUT_S)
    return _wait(procs, str(folders[0]))


def two_rank(hosts: netns.Hosts, folder: Path, model: str, strategy: str, link: str) -> bool:
    """The 2-rank run, one rank per "host". The two hosts share this machine, so each host's
    run is told the other's pid (companions): the other rank's CPU is the job's, not load on
    it (without this, every 2-rank point read "measured under load", 0.8-0.9 cores outside)."""
    if _done(folder / "node0"):
        return True
    port = _port()
    folder.mkdir(parents=True, exist_ok=True)
    mates = folder / f"companions-{os.getpid()}-{port}"
    procs = [hosts.run(i, [*_scaleprobe(), "run", "--strategy", strategy, "--nproc", "1",
                           "--nnodes", "2", "--node-rank", str(i),
                           "--rdzv-endpoint", f"{hosts.addrs[0]}:{port}", "--link", link,
                           "--model", model, *MODEL_ARGS.get(model, IMAGES), *COMMON,
                           *TWO_RANK,
                           "--out", str(folder / f"node{i}")],
                       env={COMPANIONS_ENV: str(mates)}, cpus=[i], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
             for i in (0, 1)]
    write_companions(mates, [p.pid for p in procs])
    return _wait(procs, str(folder))


def measure_link(out: Path, name: str, models: list[str], kinds: list[str]) -> None:
    rate, delay = LINKS[name]
    try:
        ctx = netns.two_hosts(rate_mbit=rate, delay_ms=delay)
        hosts = ctx.__enter__()
    except netns.NetnsUnavailable as e:
        _log(out, f"{name}: skipped, {e}")
        (out / "skipped.json").write_text(json.dumps({
            **_skipped(out), name: str(e)}, indent=1))
        return
    try:
        fit = out / "comm" / name
        if hosts.delay_via == "relay":  # "fifo": it runs ahead of the ranks, as a link would
            _log(out, f"{name}: delay relay scheduled {hosts.relay_policy}")
        _log(out, f"{name}: comm fit")
        if not comm_fit(hosts, fit, "fsdp" in kinds, latency=bool(delay)):
            _log(out, f"{name}: comm fit failed; link skipped")
            return
        link = f"measured:{fit / 'node0'}"
        for model in models:
            base = out / "runs" / name / model
            for kind in GROUP:
                if kind.split("1")[0].split("2")[0] not in kinds:
                    continue
                t0 = time.monotonic()
                if kind.startswith(("ddp1", "fsdp1")):
                    ok = one_rank(hosts, [base / kind, base / f"{kind}b"], model,
                                  kind.split("1")[0])
                elif kind.startswith("single1"):
                    ok = one_rank(hosts, [base / kind], model, "single")
                else:
                    ok = two_rank(hosts, base / kind, model, kind[:-1], link)
                _log(out, f"{name} {model} {kind}: {'ok' if ok else 'FAILED'} "
                          f"({time.monotonic() - t0:.0f} s)")
    finally:
        ctx.__exit__(None, None, None)


def _skipped(out: Path) -> dict[str, str]:
    f = out / "skipped.json"
    return json.loads(f.read_text()) if f.exists() else {}


def measure(a: argparse.Namespace) -> int:
    # SIGTERM (and SIGINT, ignored in a shell's background job) end the grid through the
    # namespaces' teardown: the runs inside are stopped and the namespaces deleted
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(143))
    ok, reason = netns.available()
    if not ok:
        print(f"cannot run here: {reason}")
        return 2
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    netns.cleanup_stale()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
    models = a.models.split(",")
    kinds = a.kinds.split(",")
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        print(f"--kinds: no '{bad[0]}' (of {','.join(KINDS)})")
        return 2
    for name in a.links.split(","):
        measure_link(out, name, models, kinds)
    _log(out, "grid done")
    return 0


def table(a: argparse.Namespace) -> int:
    from scaleprobe.cli import main as cli

    args = ["predict", "--check", str(Path(a.out) / "runs")]
    skipped = _skipped(Path(a.out))
    for name, why in skipped.items():
        print(f"link case {name} not measured: {why}")
    if a.markdown:
        return markdown(args)
    return cli(args + (["--json"] if a.json else []))


def _ms(v: float) -> str:
    return f"{v * 1000:,.0f}" if v >= 1.0 else f"{v * 1000:,.1f}"


def markdown(args: list[str]) -> int:
    """The grid as the Markdown table docs/COMMUNICATION.md keeps: ``predict --check --json``
    run in a child (its JSON on stdout), one row per measured point, in the grid's order."""
    out = subprocess.run([*_scaleprobe(), *args, "--json"], capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stdout[-2000:] + out.stderr[-2000:])
        return out.returncode
    data = json.loads(out.stdout)
    order = {name: i for i, name in enumerate(LINKS)}

    def link(p: dict) -> str:
        return p["link"].removeprefix("measured:").split("/")[0]

    points = sorted(data["points"], key=lambda p: (order.get(link(p), 99),
                                                   MODELS.index(p["model"])
                                                   if p["model"] in MODELS else 99,
                                                   p["strategy"]))
    print("| link | model | strategy | measured step, ms [95%] | predicted, ms [95%] "
          "| predicted / measured [95%] |")
    print("|---|---|---|---:|---:|---:|")
    for p in points:
        mi = p["measured_interval_s"] or [None, None]
        meas = (f"{_ms(p['measured_s'])} [{_ms(mi[0])}, {_ms(mi[1])}]" if mi[0] is not None
                else _ms(p["measured_s"]))
        if p["predicted"] is None:
            print(f"| {link(p)} | {p['model']} | {p['strategy']} | {meas} | "
                  f"{p['reason']} | n/a |")
            continue
        pr = p["predicted"]["step_s"]
        ri = p.get("ratio_interval") or [None, None]
        band = f" [{ri[0]:.2f}, {ri[1]:.2f}]" if ri[0] is not None else ""
        print(f"| {link(p)} | {p['model']} | {p['strategy']} | {meas} | {_ms(pr['value'])} "
              f"[{_ms(pr['lo'])}, {_ms(pr['hi'])}] | {p['ratio']:.2f}{band} |")
    summary(data)
    return 0


def summary(data: dict) -> None:
    """The grid in the papers' form, and the order of each model's configurations."""
    s = data["summary"]
    if s["points"]:
        print(f"\n{s['points']} points, |predicted / measured - 1|: mean "
              f"{s['mean_abs_error']:.1%}, median {s['median_abs_error']:.1%}, p90 "
              f"{s['p90_abs_error']:.1%}, worst {s['worst_abs_error']:.1%}; goal (mean and "
              f"median within 5%, p90 within 10%): "
              f"{'met' if s['papers_goal_met'] else 'not met'}")
        if s.get("with_interval"):
            print(f"measured step inside its predicted 95% interval: {s['inside_interval']} "
                  f"of {s['with_interval']} points (such an interval holds about "
                  f"{0.95 * s['with_interval']:.0f})")
        if len(s.get("ratio_by_strategy") or {}) > 1:
            print("mean predicted / measured by strategy (below 1: predicted short): "
                  + ", ".join(f"{k} {r:.2f} ({n} points)"
                              for k, (r, n) in s["ratio_by_strategy"].items()))
        if s.get("drift_points"):
            print(f"the machine's own drift: the 1-rank runs of a point, measured before and "
                  f"after it, differ by median {s['median_drift']:.1%}, p90 "
                  f"{s['p90_drift']:.1%} ({s['drift_points']} points)")
    pairs = data["order_pairs"]
    bad = [x for x in pairs if x["misordered"]]
    print(f"\npairs of one model whose measured steps differ by more than 15%: {len(pairs)}; "
          f"predicted in the wrong order: {len(bad)}")
    for x in pairs:
        print(f"- {'**wrong order** ' if x['misordered'] else ''}{x['slow_name']} over "
              f"{x['fast_name']}: measured {x['measured_ratio']:.2f}, predicted "
              f"{x['predicted_ratio']:.2f}")


def refit(a: argparse.Namespace) -> int:
    """Each link's comm record fitted again from the rows it holds, as `scaleprobe comm` fits
    them now (a grid measured before a change to the fits predicts as a new one would; the
    record as it was is kept beside it, ``results.jsonl.before-refit``)."""
    from scaleprobe.commands.comm import fit_summary  # heavy: the CLI's command module

    out = Path(a.out).resolve()
    files = sorted((out / "comm").glob("*/node0/results.jsonl"))
    for f in files:
        keep = f.with_name(f.name + ".before-refit")
        if not keep.exists():
            keep.write_text(f.read_text())
        recs = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
        for r in recs:
            if r.get("kind") == "comm" and r.get("rows"):
                r["fit"] = fit_summary(r["rows"], int(r["world_size"]),
                                       (r.get("settings") or {}).get("gloo_io"))
        f.write_text("".join(json.dumps(r) + "\n" for r in recs))
        print(f"refitted {f.relative_to(out)}")
    return 0 if files else 2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("measure", "table", "refit"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--links", default=",".join(LINKS))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--kinds", default=",".join(KINDS),
                    help="the strategies of each group to run (default: all)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--markdown", action="store_true",
                    help="the table as docs/COMMUNICATION.md keeps it")
    a = ap.parse_args()
    if a.what == "refit":
        return refit(a)
    return measure(a) if a.what == "measure" else table(a)


if __name__ == "__main__":
    sys.exit(main())
