"""Timelines from Python on the host backend."""

import os
import signal
import threading
import time

import pytest

import seqsync
from conftest import catch


@pytest.fixture
def host():
    return seqsync.Backend("host")


def test_a_wait_enqueued_before_its_signal_releases_in_order(host):
    upload, compute = host.new_stream("upload"), host.new_stream("compute")
    uploaded, computed = seqsync.Timeline(host, "uploaded"), seqsync.Timeline(host, "computed")
    order = []
    for frame in (1, 2):
        uploaded.wait_on(frame, compute)
        compute.launch(lambda f=frame: order.append(("compute", f)))
        computed.signal_on(frame, compute)
    assert computed.query() == 0
    for frame in (1, 2):
        upload.launch(lambda f=frame: order.append(("upload", f)))
        uploaded.signal_on(frame, upload)
    seqsync.wait_all([(uploaded, 2), (computed, 2)], timeout=5)
    assert order.index(("upload", 1)) < order.index(("compute", 1))
    assert order.index(("upload", 2)) < order.index(("compute", 2))


def test_values_only_grow(host):
    t = seqsync.Timeline(host, "t", initial=3)
    with pytest.raises(seqsync.NonMonotonic) as e:
        t.signal(3)
    assert (e.value.timeline, e.value.current, e.value.got) == ("t", 3, 3)


def test_wait_times_out_with_a_named_error(host):
    t = seqsync.Timeline(host, "t")
    start = time.monotonic()
    with pytest.raises(seqsync.Timeout) as e:
        t.wait(1, timeout=0.1)
    assert 0.09 < time.monotonic() - start < 1.0
    assert "'t'" in str(e.value)
    with pytest.raises(seqsync.InvalidArgument):
        t.wait(1, timeout=-1)


def test_a_failure_reaches_downstream_waiters(host):
    s = host.new_stream("s")
    up, down = seqsync.Timeline(host, "up"), seqsync.Timeline(host, "down")
    up.wait_on(1, s)
    down.signal_on(1, s)
    up.fail("camera unplugged")
    with pytest.raises(seqsync.TimelineFailed) as e:
        down.wait(1, timeout=5)
    assert down.failed


def test_wait_any_returns_the_index_or_none(host):
    a, b = seqsync.Timeline(host, "a"), seqsync.Timeline(host, "b")
    b.signal(2)
    assert seqsync.wait_any([(a, 1), (b, 2)], timeout=1) == 1
    assert seqsync.wait_any([], timeout=0.05) is None
    with pytest.raises(seqsync.Timeout):
        seqsync.wait_any([(a, 1)], timeout=0.05)


def test_ctrl_c_interrupts_a_wait_without_timeout(host):
    t = seqsync.Timeline(host, "t")
    threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        t.wait(1)
    assert time.monotonic() - start < 0.3


def test_with_timeline_fails_it_when_an_exception_leaves_and_waiters_see_why(host):
    t = seqsync.Timeline(host, "frames")
    got = []
    waiter = threading.Thread(target=lambda: got.append(catch(lambda: t.wait(2, timeout=5))))
    waiter.start()
    with pytest.raises(ValueError):
        with t:
            t.signal(1)
            raise ValueError("camera gone")
    waiter.join(timeout=2)
    assert not waiter.is_alive() and t.failed
    assert isinstance(got[0], seqsync.TimelineFailed)
    assert "raised ValueError: camera gone" in str(got[0])


def test_with_timeline_that_ends_well_changes_nothing(host):
    t = seqsync.Timeline(host, "frames")
    with t:
        t.signal(3)
    assert not t.failed and t.query() == 3
