"""Several processes appending to one results.jsonl at once (a sweep beside a run, two
colocated jobs, `scaleprobe run` in two terminals with the same --out): every record lands
whole, once, on its own line."""

import json
import multiprocessing as mp

from scaleprobe import results as R

WRITERS, RECORDS = 4, 150
PAD = "x" * 9000  # larger than PIPE_BUF (4096): a plain append could interleave such lines


def _write(path: str, writer: int) -> None:
    for i in range(RECORDS):
        R.append_jsonl(path, {"kind": "run", "writer": writer, "i": i, "pad": PAD})


def test_concurrent_appends_are_whole_lines_each_once(tmp_path):
    """Bug caught: appends without the lock or split over several writes interleave two
    records inside one line (lost records, corrupt lines the reader skips)."""
    path = tmp_path / "results.jsonl"
    R.append_jsonl(path, {"kind": "run", "writer": -1, "i": 0})  # recorded before: kept
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_write, args=(str(path), w)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""  # the file ends with a newline
    recs = [json.loads(line) for line in lines[:-1]]  # every line is valid JSON
    seen = sorted((r["writer"], r["i"]) for r in recs)
    assert seen == [(-1, 0)] + [(w, i) for w in range(WRITERS) for i in range(RECORDS)]
    assert all(r.get("pad") == PAD for r in recs if r["writer"] >= 0)
