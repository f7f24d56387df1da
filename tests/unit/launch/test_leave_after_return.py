"""A spawned rank that returned ends without the interpreter's teardown when its caller asked
(``run_workers(..., leave_after_return=True)``, ``launch.rankstart.LeavesAfterReturn``): its threads
joined and atexit run first, then ``os._exit(0)``; a rank that raised keeps its code, and a
plain spawned rank ends through the teardown as before."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import atexit
    import multiprocessing as mp
    import os
    import threading
    import time

    from scaleprobe.launch.rankstart import LeavesAfterReturn


    def ok(tag):
        real = os._exit  # a witness: the rank says when it leaves through os._exit
        os._exit = lambda code: (os.write(1, f"{tag} os._exit({code})\\n".encode()),
                                 real(code))
        atexit.register(lambda: print(f"{tag} atexit ran", flush=True))
        threading.Thread(target=lambda: (time.sleep(0.2),
                                         print(f"{tag} thread done", flush=True))).start()
        return 1


    def fails(tag):
        raise SystemExit(4)


    if __name__ == "__main__":
        ctx = mp.get_context("spawn")
        for name, target in (("plain", ok), ("leaves", LeavesAfterReturn(ok)),
                             ("raises", LeavesAfterReturn(fails))):
            p = ctx.Process(target=target, args=(name,))
            p.start()
            p.join()
            print(f"{name} exit {p.exitcode}", flush=True)
''')


def test_a_spawned_rank_that_returned_leaves_after_its_threads_and_atexit(tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text(SCRIPT)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    leaves = [line for line in lines if line.startswith("leaves")]
    assert leaves == ["leaves thread done", "leaves atexit ran", "leaves os._exit(0)",
                      "leaves exit 0"], p.stdout
    # without it the same rank ends through the interpreter's teardown, not os._exit
    assert [line for line in lines if line.startswith("plain")] == [
        "plain thread done", "plain atexit ran", "plain exit 0"], p.stdout
    assert "raises exit 4" in lines, p.stdout
