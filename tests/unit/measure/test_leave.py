"""A rank's process leaves without the interpreter's teardown (measure/env.py
``leave_process``): the threads joined, the atexit functions run, the streams flushed, the
code kept, and nothing torn down after."""

import subprocess
import sys
import textwrap


def test_leave_runs_what_exit_runs_and_skips_the_teardown():
    code = textwrap.dedent("""
        import atexit, sys, threading, time
        from scaleprobe.measure.env import leave_process

        class Torn:
            def __del__(self):  # runs in the interpreter's teardown, never here
                print("torn down", flush=True)

        kept = Torn()
        atexit.register(lambda: print("atexit ran", flush=True))
        t = threading.Thread(target=lambda: (time.sleep(0.2), print("thread done")))
        t.start()
        sys.stdout.write("unflushed")
        leave_process(3)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 3, p.stderr
    out = p.stdout
    assert out.index("unflushed") < out.index("thread done") < out.index("atexit ran")
    assert "torn down" not in out
