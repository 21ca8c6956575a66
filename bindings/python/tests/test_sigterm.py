"""SIGTERM (how systemd, Docker and Kubernetes stop a service) removes a
writer's file, as the Go and Java writers do, and the process still dies
of SIGTERM; an application's own SIGTERM handler is never replaced."""
import os
import signal
import subprocess
import sys
import textwrap
import time

from conftest import PACKAGE

CHILD = textwrap.dedent("""
    import signal, sys, time
    import topdeck
    if sys.argv[2] == "own":
        # The application's own handler: it exits with 3 and closes nothing.
        signal.signal(signal.SIGTERM, lambda *a: __import__("os")._exit(3))
    reg = topdeck.Registry("svc", dir=sys.argv[1])
    reg.counter("up_total", help="Up.").inc()
    print(reg.path, flush=True)
    time.sleep(60)
""")


def start(ns, mode):
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(ns), mode], stdout=subprocess.PIPE,
                         text=True, env={**os.environ, "PYTHONPATH": str(PACKAGE)})
    path = p.stdout.readline().strip()
    assert path and os.path.exists(path), path
    return p, path


def test_sigterm_removes_the_file_and_the_process_still_dies_of_it(tmp_path):
    p, path = start(tmp_path, "default")
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == -signal.SIGTERM
    assert not os.path.exists(path)


def test_an_applications_own_sigterm_handler_is_left_alone(tmp_path):
    p, path = start(tmp_path, "own")
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 3
    # Its handler skipped every cleanup: the file stays, dead, for `topdeck gc`.
    time.sleep(0.1)
    assert os.path.exists(path)
