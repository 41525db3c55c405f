"""On a GPU: streams borrowed from PyTorch, CuPy and cuda.core; the seed's pipeline written in
Python with PyTorch kernels, every batch verified, and a negative control. Skipped without a
GPU (a failure with SEQSYNC_REQUIRE_GPU=1)."""

import pathlib

import pytest

import seqsync

SEED = (pathlib.Path(__file__).resolve().parents[2] / "specs" / "seed-python.toml").read_text()

N = 1 << 20  # elements per batch (4 MiB of float32)


def torch_or_skip():
    return pytest.importorskip("torch")


def seed_run(cuda, spec, batches, spin):
    """The seed pipeline on PyTorch streams: copy_in fills inp[slot] with seq, f and g read it,
    h combines, copy_out brings it back, the host stage process checks every element of every
    batch; returns the seqs that came out wrong."""
    torch = torch_or_skip()
    dev = torch.device("cuda", 0)
    bufs = {k: [torch.empty(N, device=dev) for _ in range(2)] for k in ("inp", "x", "y", "out")}
    host_out = [torch.empty(N, pin_memory=True) for _ in range(2)]
    streams = {name: torch.cuda.Stream(dev) for name in ("s_h2g", "s_f", "s_g", "s_h", "s_g2h")}
    src = [torch.full((N,), float(s), pin_memory=True) for s in range(batches)]
    wrong = []

    def on(s):  # the torch stream given in `streams=` comes back as it is
        assert isinstance(s, torch.cuda.Stream), s
        return torch.cuda.stream(s)

    def busy(t):  # one slow kernel (spins `spin` million GPU cycles): a missing wait shows
        torch.cuda._sleep(spin * 1_000_000)

    def copy_in(seq, s):
        with on(s):
            bufs["inp"][seq % 2].copy_(src[seq], non_blocking=True)

    def f(seq, s):  # the slow stage: h must wait for it
        with on(s):
            busy(bufs["inp"][seq % 2])
            torch.mul(bufs["inp"][seq % 2], 2.0, out=bufs["x"][seq % 2])

    def g(seq, s):
        with on(s):
            torch.add(bufs["inp"][seq % 2], 1.0, out=bufs["y"][seq % 2])

    def h(seq, s):
        with on(s):
            torch.add(bufs["x"][seq % 2], bufs["y"][seq % 2], out=bufs["out"][seq % 2])

    def copy_out(seq, s):
        with on(s):
            host_out[seq % 2].copy_(bufs["out"][seq % 2], non_blocking=True)

    def process(seq, s):  # a host stage: `s` is None, its work runs right here
        assert s is None
        expect = 3.0 * seq + 1.0
        got = host_out[seq % 2]
        if not bool((got == expect).all()):
            wrong.append(seq)

    p = seqsync.Pipeline.from_toml(spec)
    p.run(
        cuda,
        {"copy_in": copy_in, "f": f, "g": g, "h": h, "copy_out": copy_out, "process": process},
        streams=streams,
        batches=batches,
    )
    return wrong


def test_seed_pipeline_in_python_on_pytorch_streams_every_batch_right(cuda):
    assert seed_run(cuda, SEED, batches=64, spin=1) == []


def test_negative_control_h_without_its_wait_on_f_reads_wrong(cuda):
    broken = SEED.replace('reads = ["x", "y"]', 'reads = ["y"]')
    assert broken != SEED
    assert seed_run(cuda, broken, batches=64, spin=1), "h read nothing wrong without its wait on f"


def test_negative_control_process_without_its_read_of_host_out_reads_wrong(cuda):
    broken = SEED.replace('host = true\nreads = ["host_out"]', "host = true")
    assert broken != SEED
    assert seed_run(cuda, broken, batches=64, spin=1), "process read nothing wrong unordered"


def test_a_ring_orders_two_pytorch_streams(cuda):
    torch = torch_or_skip()
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    # Two consumers per seq: stream b's wait and the host's synchronize.
    ring = seqsync.EventRingbuf(cuda, "copy", nconsumers=2, max_size=4)
    x = torch.zeros(1 << 22, device="cuda")
    y = torch.empty_like(x)
    for seq in range(16):
        with torch.cuda.stream(a):
            for _ in range(10):
                x.add_(1.0)
        ring.record(seq, a)  # __cuda_stream__ (torch >= 2.10) or .cuda_stream
        ring.wait(seq, b, blocking=True)
        with torch.cuda.stream(b):
            y.copy_(x)
        ring.synchronize(seq)
        assert float(y[0]) == 10.0 * (seq + 1)
    # stream=None: the current PyTorch stream
    with torch.cuda.stream(a):
        ring.record(16)


def test_cupy_and_cuda_core_streams_are_taken(cuda):
    cp = pytest.importorskip("cupy")
    s = cp.cuda.Stream(non_blocking=True)
    t = seqsync.Timeline(cuda, "t")
    t.signal_on(1, s)
    t.wait(1, timeout=10)
    core = pytest.importorskip("cuda.core")
    dev = core.Device(0)
    dev.set_current()
    cs = dev.create_stream()
    t.signal_on(2, cs)
    t.wait(2, timeout=10)
    assert t.query() == 2


def test_framework_streams_passed_on_every_call_stay_ordered_past_the_cache(cuda):
    """More distinct streams than the backend keeps (16), each passed on every call: every
    call still orders its own stream (a cache entry evicted, or found by handle through
    another object of the same stream, must never stand for another stream)."""
    torch = torch_or_skip()
    producers = [torch.cuda.Stream() for _ in range(40)]
    consumer = torch.cuda.Stream()
    x = torch.zeros((len(producers), 1 << 20), device="cuda")
    out = torch.empty_like(x)
    ring = seqsync.EventRingbuf(cuda, "many", nconsumers=1, max_size=4)
    for seq in range(3 * len(producers)):
        i = seq % len(producers)
        a = producers[i]
        with torch.cuda.stream(a):
            torch.cuda._sleep(200_000)  # slow: a wait on the wrong stream lets the copy run early
            x[i].fill_(float(seq))
        # every third call through another object of the same stream: found by its handle
        ring.record(seq, a if seq % 3 else torch.cuda.Stream(stream_id=a.stream_id,
                                                            device_index=a.device_index,
                                                            device_type=a.device_type))
        ring.wait(seq, consumer, blocking=True)
        with torch.cuda.stream(consumer):
            out[i].copy_(x[i])
        consumer.synchronize()
        assert float(out[i].min()) == float(seq) == float(out[i].max()), seq
