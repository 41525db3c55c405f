"""Shared rings and timelines from Python on the host backend, across real processes (a child
Python process runs the other side with `subprocess`)."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

import seqsync

pytestmark = pytest.mark.skipif(not hasattr(seqsync, "SharedRing"), reason="Linux only")


def unique(what):
    return f"py-{what}-{os.getpid()}"


def child(code, *args):
    """A Python process running `code` (with `import seqsync`), `args` in sys.argv[1:]."""
    src = "import sys, time, seqsync\n" + textwrap.dedent(code)
    return subprocess.Popen(
        [sys.executable, "-c", src, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ready(p):
    """Wait for the child's `ready` line."""
    line = p.stdout.readline()
    assert line.strip() == "ready", (line, p.stderr.read() if p.poll() is not None else "")


def test_a_consumer_process_synchronizes_on_each_seq_after_the_producers_work(tmp_path):
    host = seqsync.Backend("host")
    name = unique("ring")
    data = tmp_path / "data"
    data.write_text("")
    # Room for every seq: a consumer that does not wait makes the test fail, not hang.
    ring = seqsync.SharedRing.create(host, name, nconsumers=1, max_size=16)
    assert ring.mechanism == "host-word"
    p = child(
        """
        b = seqsync.Backend("host")
        ring = seqsync.SharedRing.open(b, sys.argv[1])
        print("ready", flush=True)
        wrong = 0
        for seq in range(10):
            ring.synchronize(seq, blocking=True)
            seen = open(sys.argv[2]).read().split()
            if str(seq) not in seen:
                wrong += 1
        sys.exit(wrong)
        """,
        name,
        str(data),
    )
    ready(p)
    copy = host.new_stream("copy")
    for seq in range(10):

        def work(seq=seq):
            time.sleep(0.01)  # the work takes a while: a consumer that did not wait misses it
            with open(data, "a") as f:
                f.write(f"{seq}\n")

        copy.launch(work)
        ring.record(seq, copy, blocking=True)
    assert p.wait(timeout=30) == 0, p.stderr.read()


def test_a_killed_consumer_process_is_peer_lost_to_a_blocked_producer():
    host = seqsync.Backend("host")
    name = unique("kill")
    ring = seqsync.SharedRing.create(host, name, nconsumers=1, max_size=1)
    p = child(
        """
        ring = seqsync.SharedRing.open(seqsync.Backend("host"), sys.argv[1])
        print("ready", flush=True)
        time.sleep(60)
        """,
        name,
    )
    ready(p)
    ring.record_host(0)
    time.sleep(0.2)
    p.kill()
    start = time.monotonic()
    with pytest.raises(seqsync.PeerLost) as e:
        ring.record_host(1, blocking=True)  # seq 0's slot is never released
    assert time.monotonic() - start < 1.0
    assert (e.value.pid, e.value.role) == (p.pid, "consumer")
    assert ring.stopped
    p.wait()


def test_a_shared_timeline_failed_in_one_process_fails_a_wait_in_another():
    host = seqsync.Backend("host")
    name = unique("timeline")
    t = seqsync.SharedTimeline.create(host, name)
    p = child(
        """
        t = seqsync.SharedTimeline.open(seqsync.Backend("host"), sys.argv[1])
        t.wait(1, timeout=10)
        print("ready", flush=True)
        try:
            t.wait(2, timeout=10)
        except seqsync.TimelineFailed as e:
            cause = e.__cause__
            ok = isinstance(cause, seqsync.FailedElsewhere) and "operator" in cause.message
            sys.exit(0 if ok else 2)
        sys.exit(1)
        """,
        name,
    )
    t.signal(1)
    ready(p)
    time.sleep(0.1)
    t.fail("operator stop")
    assert p.wait(timeout=30) == 0, p.stderr.read()


def test_values_signalled_anywhere_count_and_names_are_checked():
    host = seqsync.Backend("host")
    name = unique("names")
    a = seqsync.SharedTimeline.create(host, name, initial=2)
    b = seqsync.SharedTimeline.open(host, name)
    with pytest.raises(seqsync.NonMonotonic) as e:
        b.signal(2)
    assert (e.value.current, e.value.got) == (2, 2)
    s = host.new_stream("s")
    b.wait_on(3, s)
    a.signal(3)
    s.synchronize()
    with pytest.raises(seqsync.InvalidArgument, match="no shared timeline of this name"):
        seqsync.SharedTimeline.open(host, unique("missing"))
    with pytest.raises(seqsync.InvalidArgument):
        seqsync.SharedRing.create(host, "bad/name", 1, 1)
    with pytest.raises(seqsync.InvalidArgument, match="mechanism"):
        seqsync.SharedRing.create(host, unique("mech"), 1, 1, mechanism="smoke")
    with pytest.raises(seqsync.InvalidArgument):
        seqsync.SharedRing.create(host, unique("mech2"), 1, 1, mechanism="memops")
