"""Streams' lifetimes and launches: a stream dropped with work still queued (a wait nothing
released yet, or from its own worker) goes without blocking `del` or the interpreter's exit;
a launched callable and what it holds are released once it ran; `launch` takes callables
only; a stage's stream used by another Python thread freezes nothing."""

import gc
import subprocess
import sys
import textwrap
import time
import weakref

import pytest

import seqsync


def run(code, timeout=30):
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail("hung")


@pytest.fixture
def host():
    return seqsync.Backend("host")


def test_del_of_a_stream_with_a_pending_timeline_wait_returns():
    r = run(
        """
        import seqsync
        b = seqsync.Backend("host")
        t = seqsync.Timeline(b, "t")
        s = b.new_stream("s")
        t.wait_on(1, s)
        del s
        print("dropped", flush=True)
        """
    )
    assert "dropped" in r.stdout, r.stderr


def test_interpreter_exit_with_a_pending_stream_wait_returns():
    # module globals are cleared in insertion order: s goes before t
    r = run(
        """
        import seqsync
        b = seqsync.Backend("host")
        s = b.new_stream("s")
        t = seqsync.Timeline(b, "t")
        t.wait_on(1, s)
        print("end", flush=True)
        """
    )
    assert "end" in r.stdout and r.returncode == 0, r.stderr


def test_a_launched_callable_and_its_captures_are_released_after_it_ran():
    s = seqsync.Backend("host").new_stream("s")

    class Payload:
        pass

    p = Payload()
    r = weakref.ref(p)
    s.launch(lambda p=p: None)
    del p
    time.sleep(0.3)  # ran long ago; no seqsync call from here on
    gc.collect()
    assert r() is None, "the callable still holds its captures (decref parked in PyO3's pool)"


def test_a_stream_freed_by_its_own_worker_does_not_panic():
    code = textwrap.dedent(
        """
        import time, seqsync
        b = seqsync.Backend("host")
        s = b.new_stream("self")
        s.launch(lambda keep=s: time.sleep(0.3))   # the last reference to s, after `del s`
        s.launch(lambda: None)                     # its attach drains the pool on the worker
        del s
        time.sleep(1.0)
        print("done", flush=True)
        """
    )
    r = run(code)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr
    assert "PanicException" not in r.stderr and "panicked" not in r.stderr, r.stderr


@pytest.mark.parametrize("bad", [None, 5, "f", 1.5])
def test_launch_refuses_a_non_callable_and_leaves_the_stream_usable(host, bad):
    s = host.new_stream("s")
    with pytest.raises(TypeError):
        s.launch(bad)
    s.launch(lambda: None)
    s.synchronize()


CODE = textwrap.dedent(
    '''
    import threading, time, seqsync
    SPEC = """
    [buffers]
    raw = 2
    [[thread]]
    name = "t"
    [[thread.stage]]
    name = "fill"
    stream = "a"
    writes = ["raw"]
    [[thread.stage]]
    name = "use"
    stream = "b"
    reads = ["raw"]
    sync = true
    """
    b = seqsync.Backend("host")
    user = seqsync.EventRingbuf(b, "user", nconsumers=1, max_size=2)

    def fill(seq, s):
        if seq == 0:
            # a helper thread waits for the user ring with the stage's stream (GIL released,
            # StageStream lock held); the stage returns while it waits
            threading.Thread(target=lambda: user.wait(0, s, blocking=True), daemon=True).start()
            time.sleep(0.3)

    threading.Timer(1.0, lambda: user.record_host(0)).start()  # needs the GIL
    p = seqsync.Pipeline.from_toml(SPEC)
    p.run(b, {"fill": fill, "use": lambda q, s: None}, batches=2)
    print("done", flush=True)
    '''
)


def test_a_stage_stream_used_by_another_thread_does_not_freeze_the_interpreter():
    r = run(CODE)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr
