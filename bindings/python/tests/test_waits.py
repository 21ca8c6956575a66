# SPDX-License-Identifier: Apache-2.0
"""CPU wait per request: Registry.timer with the agent's thread-waits
array (docs/FORMAT.md section 10). The agent tests run the real `topdeck
agent` (root: it loads BPF programs) with its array pinned in a directory
of their own, and clean the agents, pins and directory up however they
end."""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import topdeck
from topdeck import reader, waits

from conftest import PACKAGE


def need_root():
    if os.geteuid() != 0:
        why = "needs root: it runs the topdeck agent, which loads BPF programs"
        if os.environ.get("CI"):
            pytest.fail(why)
        print(f"SKIPPED: {why}")
        pytest.skip(f"SKIPPED: {why}")


@pytest.fixture
def agents(topdeck_bin, tmp_path):
    """``start()`` runs an agent pinning its array at ``agents.pin`` and
    returns it once the pin is there; all are stopped, and the pin and its
    directory removed, at the end."""
    need_root()
    pin_dir = f"/sys/fs/bpf/topdeck-pytest-{os.getpid()}"
    started = []

    class Agents:
        pin = os.path.join(pin_dir, "thread_waits")

        def start(self):
            ns = tmp_path / f"agent-ns-{len(started)}"
            ns.mkdir(mode=0o700)
            p = subprocess.Popen([str(topdeck_bin), "agent", "--interval", "500ms", "--thread-waits", self.pin],
                                 env={**os.environ, "TOPDECK_DIR": str(ns)}, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
            started.append(p)
            deadline = time.monotonic() + 30
            while not _live_pin(self.pin, p.pid):
                if p.poll() is not None:
                    pytest.fail(f"the agent exited ({p.returncode}) without pinning: {p.stderr.read()}")
                if time.monotonic() > deadline:
                    pytest.fail("the agent pinned no live thread-waits array in 30 s")
                time.sleep(0.05)
            return p

    try:
        yield Agents()
    finally:
        for p in started:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            p.stderr.close()
        for remove, path in ((os.remove, Agents.pin), (os.rmdir, pin_dir)):
            try:
                remove(path)
            except FileNotFoundError:
                pass


def _live_pin(pin, agent_pid):
    """Whether ``pin`` holds the live array of agent ``agent_pid``."""
    try:
        w = waits.open_if_pinned(pin)
    except OSError:
        return False
    return w is not None and w.state() == waits.LIVE and w.agent_pid() == agent_pid


def histogram(reg, name, labels):
    for m in reader.open(reg.path).snapshot():
        if m.name == name and m.labels == labels:
            return m.value
    return None


def spin(cpu_seconds):
    """Burns this thread's CPU for ``cpu_seconds`` (of its own CPU time, so
    a CPU shared with a hog makes it take about twice as long)."""
    end = time.thread_time() + cpu_seconds
    while time.thread_time() < end:
        pass


class Hog:
    """Another process spinning on ``cpu`` (this one pinned there too), so
    this thread waits for it on the run queue."""

    def __init__(self, cpu):
        self.cpu = cpu

    def __enter__(self):
        self.saved = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {self.cpu})
        code = f"import os\nos.sched_setaffinity(0, {{{self.cpu}}})\nprint('spinning', flush=True)\nwhile True: pass"
        self.p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert self.p.stdout.readline().strip() == "spinning"
        return self

    def __exit__(self, *exc):
        self.p.kill()
        self.p.wait()
        self.p.stdout.close()
        os.sched_setaffinity(0, self.saved)


def timed_behind_hog(timer, arr, n=3):
    """Times ``n`` sections spinning 50 ms of CPU behind a hog; returns the
    slot's difference around them, read here directly, in seconds."""
    tid = waits.host_tid()
    with Hog(min(os.sched_getaffinity(0))):
        before = arr.slot_total(tid)
        for _ in range(n):
            with timer.time():
                spin(0.05)
        after = arr.slot_total(tid)
    return (after - before) * 1e-9


def test_a_timer_records_the_cpu_wait_the_slot_says(agents, ns, monkeypatch):
    agents.start()
    monkeypatch.setenv(waits.PIN_ENV, agents.pin)
    reg = topdeck.Registry(dir=ns)
    assert reg.thread_waits is not None and reg.thread_waits_problem is None, reg.thread_waits_problem
    labels = {"route": "/"}
    t = reg.timer("serve_seconds", labels, "Serving.")
    names = {m.name: m for m in reader.open(reg.path).snapshot()}
    assert set(names) == {"serve_seconds", "serve_cpu_wait_seconds", "serve_cpu_wait_unknown_seconds"}
    assert all(m.labels == labels and m.unit == "seconds" for m in names.values())
    assert "serve_seconds" in names["serve_cpu_wait_seconds"].help

    direct = timed_behind_hog(t, reg.thread_waits)
    wait = histogram(reg, "serve_cpu_wait_seconds", labels)
    assert wait.count == 3 and histogram(reg, "serve_cpu_wait_unknown_seconds", labels).count == 0
    # Behind a hog on the one CPU, about half of each ~100 ms section is wait.
    assert wait.sum > 0.03, (wait.sum, direct)
    # What the timer recorded is the slot's difference over the sections,
    # which the direct reads bracket (a wait ending between a direct read
    # and the timer's is at most a slice).
    assert wait.sum <= direct + 1e-9 and direct - wait.sum < 0.01, (wait.sum, direct)
    assert histogram(reg, "serve_seconds", labels).count == 3

    # The decorator records it too.
    @t.time()
    def handle():
        pass
    handle()
    assert histogram(reg, "serve_cpu_wait_seconds", labels).count == 4
    reg.close()


def test_a_pin_in_a_directory_others_could_write_is_refused(agents, ns):
    agents.start()
    pin_dir = os.path.dirname(agents.pin)
    os.chmod(pin_dir, 0o775)
    try:
        reg = topdeck.Registry(dir=ns, thread_waits=agents.pin)
    finally:
        os.chmod(pin_dir, 0o755)
    assert reg.thread_waits is None
    assert "refusing the thread-waits array" in reg.thread_waits_problem, reg.thread_waits_problem
    reg.timer("serve_seconds")
    assert [m.name for m in reader.open(reg.path).snapshot()] == ["serve_seconds"]
    reg.close()


def test_a_killed_agent_makes_latency_unknown_until_a_new_one_pins(agents, ns):
    first = agents.start()
    reg = topdeck.Registry(dir=ns, thread_waits=agents.pin)
    t = reg.timer("serve_seconds")
    with t.time():
        pass
    old = reg.thread_waits
    assert histogram(reg, "serve_cpu_wait_seconds", {}).count == 1

    first.kill()
    first.wait()
    deadline = time.monotonic() + 10
    while old.state() != waits.GONE:
        assert time.monotonic() < deadline, "the probe never marked the killed agent's array gone"
        time.sleep(0.01)
    for _ in range(3):
        with t.time():
            spin(0.002)
    wait, unknown = (histogram(reg, n, {}) for n in ("serve_cpu_wait_seconds", "serve_cpu_wait_unknown_seconds"))
    assert wait.count == 1, "no wait recorded, not even zero, while the agent is gone"
    assert unknown.count == 3 and unknown.sum >= 0.006, unknown.sum

    agents.start()  # a new array at the same pin
    new_id = waits.open(agents.pin).id
    assert new_id != old.id
    time.sleep(1.1)  # the unknown sections looked again just now: the next look waits a second
    with t.time():  # unknown still (begun on the old array), and a look: the new array from now on
        pass
    assert reg.thread_waits.id == new_id
    with t.time():
        spin(0.002)
    assert histogram(reg, "serve_cpu_wait_seconds", {}).count == 2
    assert histogram(reg, "serve_cpu_wait_unknown_seconds", {}).count == 4
    reg.close()


def test_a_forked_worker_times_with_its_own_slot(agents, ns):
    agents.start()
    reg = topdeck.Registry(dir=ns, thread_waits=agents.pin)
    t = reg.timer("serve_seconds")
    parent = waits.host_tid()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        ok = 1
        try:
            os.close(r)
            me = waits.host_tid()
            # The parent's cached id would read the parent's slot.
            ok = 0 if me == threading.get_native_id() != parent else 1
            direct = timed_behind_hog(t, reg.thread_waits, n=1)
            wait = histogram(reg, "serve_cpu_wait_seconds", {})
            if not (wait.count == 1 and wait.sum > 0.01 and wait.sum <= direct + 1e-9):
                ok = 2
            os.write(w, f"{ok} {wait.sum} {direct}".encode())
        finally:
            os._exit(ok)
    os.close(w)
    with os.fdopen(r) as f:
        said = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, said
    # The child recorded its wait in the parent's file, where it stays.
    assert histogram(reg, "serve_cpu_wait_seconds", {}).count == 1
    reg.close()


def test_without_a_pin_or_with_off_a_timer_has_no_companions(ns, monkeypatch):
    absent = "/sys/fs/bpf/topdeck-pytest-absent/thread_waits"
    for env, arg in ((absent, None), ("off", None), (None, absent), (None, "off")):
        if env is None:
            monkeypatch.delenv(waits.PIN_ENV, raising=False)
        else:
            monkeypatch.setenv(waits.PIN_ENV, env)
        reg = topdeck.Registry(dir=ns, thread_waits=arg)
        assert reg.thread_waits is None and reg.thread_waits_problem is None
        t = reg.timer("serve_seconds", {"route": "/"})
        with t.time():
            pass
        assert [m.name for m in reader.open(reg.path).snapshot()] == ["serve_seconds"]
        reg.close()


def test_a_pin_that_is_no_bpf_object_is_a_problem_not_an_error(ns, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("SKIPPED: needs root (the pin's directory must be root's)")
    fake = tmp_path / "thread_waits"
    fake.write_bytes(b"\0" * 64)
    reg = topdeck.Registry(dir=ns, thread_waits=fake)
    assert reg.thread_waits is None
    assert "cannot open the pinned thread-waits array" in reg.thread_waits_problem, reg.thread_waits_problem
    reg.timer("serve_seconds")
    assert len(reader.open(reg.path).snapshot()) == 1
    reg.close()


def test_a_forked_child_looks_its_own_thread_id_up():
    parent = waits.host_tid()
    assert parent == threading.get_native_id() or not waits.TIDS.in_initial_ns
    other = []
    th = threading.Thread(target=lambda: other.append(waits.host_tid()))
    th.start()
    th.join()
    assert other[0] != parent
    code = ("import os, threading\nfrom topdeck import waits\nparent = waits.host_tid()\npid = os.fork()\n"
            "if pid == 0:\n    os._exit(0 if waits.host_tid() == threading.get_native_id() != parent else 1)\n"
            "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(PACKAGE)},
                         capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "0", out.stderr


def test_a_gone_array_is_replaced_at_most_once_a_second(monkeypatch):
    def Fake(id):
        a = FakeArray(tids=16)
        a.id = id
        return a
    found = [Fake(2)]
    monkeypatch.setattr(waits, "open_if_pinned", lambda pin: found[0])
    source = waits.WaitSource(Fake(1))
    source.look_again()
    assert source.current.id == 2
    found[0] = Fake(3)
    source.look_again()
    assert source.current.id == 2, "within the second: no look"
    source._last_look -= 1.1
    source.look_again()
    assert source.current.id == 3
    found[0] = Fake(3)
    source._last_look -= 1.1
    kept = source.current
    source.look_again()
    assert source.current is kept, "the same array: kept"


class FakeArray:
    """An array in plain memory, as the probe would fill it: the timer's
    arithmetic and zero path without the agent."""

    def __init__(self, tids=1 << 22):
        self.q = memoryview(bytearray((tids + waits.HEADER_ENTRIES) * waits.ENTRY_BYTES)).cast("Q")
        self.q[waits.STATE_WORD] = waits.LIVE
        self.tids, self.id, self.path = tids, 1, "/fake/thread_waits"

    def add_wait(self, ns):
        self.q[waits.slot_word()] += ns


def fake_registry(ns, arr):
    reg = topdeck.Registry(dir=ns, thread_waits="off")
    reg._waits = waits.WaitSource(arr)
    return reg


def test_the_timer_records_a_sections_wait_zero_or_unknown(ns, monkeypatch):
    arr = FakeArray()
    reg = fake_registry(ns, arr)
    t = reg.timer("serve_seconds", {"route": "/"})
    with t.time():
        arr.add_wait(3_000_000)  # the probe saw 3 ms on the run queue
    with t.time():
        pass  # no wait: the zero bucket
    arr.add_wait(1_000)  # outside any section: not counted
    monkeypatch.setattr(waits, "open_if_pinned", lambda pin: None)
    arr.q[waits.STATE_WORD] = waits.GONE
    with t.time():
        arr.add_wait(5_000_000)
    labels = {"route": "/"}
    wait = histogram(reg, "serve_cpu_wait_seconds", labels)
    assert (wait.count, wait.zero_count, wait.max) == (2, 1, 0.003) and abs(wait.sum - 0.003) < 1e-15
    assert histogram(reg, "serve_cpu_wait_unknown_seconds", labels).count == 1
    assert histogram(reg, "serve_seconds", labels).count == 3
    assert t.count() == 3 and t.cpu_wait.count() == 2
    reg.close()


def test_the_zero_path_writes_what_observe_0_writes(ns):
    arr = FakeArray()
    fast = fake_registry(ns, arr)
    t = fast.timer("a_seconds")
    slow = topdeck.Registry(dir=ns, thread_waits="off")
    h = slow.histogram("a_cpu_wait_seconds", unit="seconds")
    for reg, record in ((fast, lambda: t.time().__enter__().__exit__()), (slow, lambda: h.observe(0.0))):
        record()
    got = [histogram(r, "a_cpu_wait_seconds", {}) for r in (fast, slow)]
    assert [(v.count, v.zero_count, v.sum, v.max) for v in got] == [(1, 1, 0.0, 0.0)] * 2
    # A negative max is replaced by 0.0, as observe does.
    h.observe(-1.0)
    t.cpu_wait.observe(-1.0)
    record_zero = t._cpu.zero
    record_zero()
    h.observe(0.0)
    got = [histogram(r, "a_cpu_wait_seconds", {}) for r in (fast, slow)]
    assert [(v.count, v.zero_count, v.max) for v in got] == [(3, 3, 0.0)] * 2
    fast.close()
    slow.close()
