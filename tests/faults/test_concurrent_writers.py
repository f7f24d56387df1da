"""Several processes appending to one results.jsonl at once (a sweep beside a run, two
colocated jobs, `scaleprobe run` in two terminals with the same --out): every record lands
whole, once, on its own line."""

import json
import subprocess
import sys

from scaleprobe.core import results as R

WRITERS, RECORDS = 4, 150
PAD = "x" * 9000  # larger than PIPE_BUF (4096): a plain append could interleave such lines


WRITER = """
import sys
from scaleprobe.core import results as R
path, writer, n, pad = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), "x" * int(sys.argv[4])
for i in range(n):
    R.append_jsonl(path, {"kind": "run", "writer": writer, "i": i, "pad": pad})
"""


def test_concurrent_appends_are_whole_lines_each_once(tmp_path):
    """Bug caught: appends without the lock or split over several writes interleave two
    records inside one line (lost records, corrupt lines the reader skips)."""
    path = tmp_path / "results.jsonl"
    R.append_jsonl(path, {"kind": "run", "writer": -1, "i": 0})  # recorded before: kept
    # plain processes (not multiprocessing: its resource tracker would outlive the test as a
    # child of pytest, and the tests that check no process is left would see it)
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(w), str(RECORDS),
                               str(len(PAD))]) for w in range(WRITERS)]
    for p in procs:
        assert p.wait(120) == 0
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""  # the file ends with a newline
    recs = [json.loads(line) for line in lines[:-1]]  # every line is valid JSON
    seen = sorted((r["writer"], r["i"]) for r in recs)
    assert seen == [(-1, 0)] + [(w, i) for w in range(WRITERS) for i in range(RECORDS)]
    assert all(r.get("pad") == PAD for r in recs if r["writer"] >= 0)
