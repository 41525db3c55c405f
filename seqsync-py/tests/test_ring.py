"""EventRingbuf from Python on the host backend: the contract, its named errors, blocking
without the GIL, and Ctrl-C."""

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


def test_record_then_wait_orders_the_consumer_stream(host):
    copy, kernel = host.new_stream("copy"), host.new_stream("kernel")
    ring = seqsync.EventRingbuf(host, "copy", nconsumers=1, max_size=4)
    data, seen = {}, []
    for seq in range(20):
        copy.launch(lambda seq=seq: (time.sleep(0.001), data.__setitem__(seq, seq * 10)))
        ring.record(seq, copy)
        ring.wait(seq, kernel, blocking=True)
        kernel.launch(lambda seq=seq: seen.append(data.get(seq)))
    kernel.synchronize()
    assert seen == [seq * 10 for seq in range(20)]
    assert ring.next_seq == 20


def test_overflow_names_the_numbers(host):
    s = host.new_stream("s")
    ring = seqsync.EventRingbuf(host, "r", nconsumers=1, max_size=2)
    ring.record(0, s)
    ring.record(1, s)
    with pytest.raises(seqsync.Overflow) as e:
        ring.record(2, s)
    assert (e.value.ring, e.value.seq, e.value.oldest, e.value.max_size) == ("r", 2, 0, 2)
    assert isinstance(e.value, seqsync.Error)


def test_out_of_order_and_not_yet_produced(host):
    s = host.new_stream("s")
    ring = seqsync.EventRingbuf(host, "r", nconsumers=1, max_size=4)
    with pytest.raises(seqsync.OutOfOrder) as e:
        ring.record(3, s)
    assert (e.value.expected, e.value.got) == (0, 3)
    assert ring.stopped  # a misuse stops the ring, so no other thread hangs on it
    # Every later call says so, with the misuse that stopped it as the cause.
    with pytest.raises(seqsync.Stopped) as stopped:
        ring.record(0, s)
    assert isinstance(stopped.value.__cause__, seqsync.OutOfOrder), repr(stopped.value.__cause__)
    ring = seqsync.EventRingbuf(host, "r2", nconsumers=1, max_size=4)
    with pytest.raises(seqsync.NotYetProduced) as e:
        ring.wait(0, s)
    assert (e.value.seq, e.value.next) == (0, 0)


def test_a_host_ring_refuses_foreign_streams(host):
    ring = seqsync.EventRingbuf(host, "r", nconsumers=1, max_size=4)
    with pytest.raises(TypeError):
        ring.record(0, 12345)
    with pytest.raises(TypeError, match="host backend takes only its own streams"):
        ring.record(0)  # stream=None: needs a framework's current stream, and CUDA


def test_two_python_threads_block_on_one_ring_without_deadlock(host):
    """The consumer blocks in wait(blocking=True) while the producer records: without the GIL
    released in the blocking call, the producer could never run."""
    prod, cons = host.new_stream("p"), host.new_stream("c")
    ring = seqsync.EventRingbuf(host, "r", nconsumers=1, max_size=2)
    n, got = 200, []

    def producer():
        for seq in range(n):
            ring.record(seq, prod, blocking=True)

    def consumer():
        for seq in range(n):
            ring.wait(seq, cons, blocking=True)
            got.append(seq)

    threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "deadlocked"
    assert got == list(range(n))


def interrupt_after(seconds):
    """SIGINT to this process after `seconds`, from another thread (as Ctrl-C would)."""
    t = threading.Timer(seconds, lambda: os.kill(os.getpid(), signal.SIGINT))
    t.start()
    return t


def test_ctrl_c_interrupts_a_blocked_synchronize_within_100_ms(host):
    ring = seqsync.EventRingbuf(host, "never", nconsumers=1, max_size=2)
    interrupt_after(0.2)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        ring.synchronize(0, blocking=True)  # nothing ever records seq 0
    assert time.monotonic() - start < 0.2 + 0.1
    assert ring.stopped  # the interrupt stopped the ring, so no other thread hangs on it
    with pytest.raises(seqsync.Stopped):
        ring.record(0, host.new_stream("s"))


def test_stop_wakes_a_thread_blocked_in_another_python_thread(host):
    ring = seqsync.EventRingbuf(host, "r", nconsumers=1, max_size=2)
    caught = []

    def blocked():
        try:
            ring.synchronize(0, blocking=True)
        except seqsync.Stopped as e:
            caught.append(e.reason)

    t = threading.Thread(target=blocked)
    t.start()
    time.sleep(0.05)
    ring.stop("shutting down")
    t.join(timeout=5)
    assert caught == ["shutting down"]


def test_an_exception_in_a_launched_callable_fails_the_stream(host):
    s = host.new_stream("s")

    def boom():
        raise ValueError("bad batch")

    s.launch(boom)
    with pytest.raises(seqsync.Error, match="bad batch"):
        s.synchronize()


def test_ctrl_c_interrupts_a_stream_synchronize_while_its_work_runs(host):
    s = host.new_stream("slow")
    s.launch(lambda: time.sleep(2))
    interrupt_after(0.2)
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        s.synchronize()
    assert time.monotonic() - start < 0.2 + 0.1
    s.synchronize()  # the work itself goes on, and finishes


def test_with_ring_stops_it_at_the_end_and_wakes_a_blocked_thread(host):
    got = []
    with seqsync.EventRingbuf(host, "frames", nconsumers=1, max_size=2) as ring:
        t = threading.Thread(target=lambda: got.append(catch(lambda: ring.synchronize(0, blocking=True))))
        t.start()
        time.sleep(0.05)
        assert not ring.stopped
    t.join(timeout=2)
    assert not t.is_alive()
    assert ring.stopped and isinstance(got[0], seqsync.Stopped)
    assert "`with` block ended" in str(got[0])


def test_with_ring_names_the_exception_that_left_it(host):
    with pytest.raises(ValueError):
        with seqsync.EventRingbuf(host, "frames", nconsumers=1, max_size=2) as ring:
            raise ValueError("camera gone")
    with pytest.raises(seqsync.Stopped, match="raised ValueError: camera gone"):
        ring.record_host(0)


def test_recording_records_after_the_blocks_work(host):
    copy, kernel = host.new_stream("copy"), host.new_stream("kernel")
    ring = seqsync.EventRingbuf(host, "copy", nconsumers=1, max_size=2)
    data, seen = {}, []
    for seq in range(10):
        with ring.recording(seq, copy, blocking=True) as s:
            assert s == seq
            copy.launch(lambda seq=seq: (time.sleep(0.002), data.__setitem__(seq, seq)))
        ring.wait(seq, kernel, blocking=True)
        kernel.launch(lambda seq=seq: seen.append(data.get(seq)))
    kernel.synchronize()
    assert seen == list(range(10))
    assert ring.next_seq == 10 and not ring.stopped


def test_recording_that_raises_records_nothing_and_stops_the_ring(host):
    copy = host.new_stream("copy")
    ring = seqsync.EventRingbuf(host, "copy", nconsumers=1, max_size=2)
    with pytest.raises(KeyError):
        with ring.recording(0, copy):
            raise KeyError("batch 0")
    assert ring.next_seq == 0 and ring.stopped
    with pytest.raises(seqsync.Stopped, match="recording seq 0 raised KeyError"):
        ring.synchronize(0, blocking=True)


def test_recording_raises_the_rings_own_error_on_exit(host):
    copy = host.new_stream("copy")
    ring = seqsync.EventRingbuf(host, "copy", nconsumers=1, max_size=2)
    with pytest.raises(seqsync.OutOfOrder):
        with ring.recording(5, copy):
            pass
