#!/usr/bin/env python3
"""Host cost of a graph launch, and device overlap of consecutive launches (CuPy, on a GPU).

usage: tools/launch-costs.py [BYTES ...]      (default 65536 262144 1048576)

For each batch size, a graph like one adaptive launch of the seed's pipeline (copy in from
pinned host memory, three kernels, copy out to pinned host memory; all in one chain) and a
graph of the three kernels alone, then:

- `call_us`: the host time of one `graph.launch` call (median of 2000; Python's own call
  cost is the `noop_us` line), on one stream and rotating over 8 streams;
- `gbps`: batches through the device when 2000 launches are enqueued back to back, on one
  stream (each launch after the previous: the stages' sum) and over 8 streams (consecutive
  launches may overlap: copy in of one during the kernels of another);
- the same with the copies done by kernels over mapped pinned memory (zero-copy) instead of
  memcpy nodes.

Diagnostic only (issue 22): where a small batch's host and device time go.
"""
import statistics
import sys
import time

import cupy as cp
import numpy as np

N = 2000
STREAMS = 8
rt = cp.cuda.runtime

kern = cp.ElementwiseKernel("uint32 x", "uint32 y", "y = x * 2654435761u + 1u", "mix")


copy = cp.ElementwiseKernel("uint32 x", "uint32 y", "y = x", "copy_words")


def mapped(pinned, nbytes):
    """The pinned host buffer as a device array (zero-copy: the device reads and writes
    host memory over the bus)."""
    dptr = pinned.ptr  # unified addressing: the host address is the device one
    mem = cp.cuda.UnownedMemory(dptr, nbytes, pinned)
    return cp.ndarray(nbytes // 4, dtype=cp.uint32, memptr=cp.cuda.MemoryPointer(mem, 0))


def stage(stream, hin, din, dx, dout, hout, nbytes, copies=True):
    """copies: True (memcpy), "kernel" (copy kernels over mapped host memory) or False."""
    with stream:
        if copies == "kernel":
            copy(mapped(hin, nbytes), din)
        elif copies:
            rt.memcpyAsync(din.data.ptr, hin.ptr, nbytes, rt.memcpyHostToDevice, stream.ptr)
        kern(din, dx)
        kern(dx, din)
        kern(din, dout)
        if copies == "kernel":
            copy(dout, mapped(hout, nbytes))
        elif copies:
            rt.memcpyAsync(hout.ptr, dout.data.ptr, nbytes, rt.memcpyDeviceToHost, stream.ptr)


def capture(stream, *args, copies=True):
    stream.begin_capture()
    stage(stream, *args, copies=copies)
    return stream.end_capture()


def timed_calls(fn, streams):
    """Median host time of one call of fn(stream), rotating over streams; and the wall time
    of N calls with the device's completion."""
    per = []
    for s in streams:
        s.synchronize()
    t_all = time.perf_counter()
    for i in range(N):
        s = streams[i % len(streams)]
        t0 = time.perf_counter_ns()
        fn(s)
        per.append(time.perf_counter_ns() - t0)
    for s in streams:
        s.synchronize()
    wall = time.perf_counter() - t_all
    return statistics.median(per) / 1e3, wall


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [65536, 262144, 1048576]
    print(cp.cuda.runtime.getDeviceProperties(0)["name"].decode(), "driver",
          cp.cuda.runtime.driverGetVersion())
    per = []
    for _ in range(N):
        t0 = time.perf_counter_ns()
        (lambda s: None)(None)
        per.append(time.perf_counter_ns() - t0)
    print(f"noop_us {statistics.median(per) / 1e3:.2f}")
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(STREAMS)]
    # The other calls of an adaptive launch: an event record (blocking sync, no timing) and a
    # stream wait on a host word already reached (cuStreamWaitValue64, where cuda.bindings is).
    ev = cp.cuda.Event(block=True, disable_timing=True)
    call, _ = timed_calls(lambda s: ev.record(s), streams[:1])
    print(f"event record call_us {call:.2f}", flush=True)
    try:
        from cuda.bindings import driver as drv
        word = cp.cuda.alloc_pinned_memory(8)
        flags = drv.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ
        call, _ = timed_calls(
            lambda s: drv.cuStreamWaitValue64(s.ptr, word.ptr, 0, flags), streams[:1])
        print(f"cuStreamWaitValue64 call_us {call:.2f}", flush=True)
    except Exception as e:  # diagnostic only: say why, go on
        print(f"cuStreamWaitValue64: not measured ({type(e).__name__}: {e})", flush=True)
    for nbytes in sizes:
        n = nbytes // 4
        # Buffers and graphs of its own for every stream: launches of one graph run one at a
        # time, whatever the streams.
        bufs = []
        for _ in range(STREAMS):
            hin = cp.cuda.alloc_pinned_memory(nbytes)
            np.frombuffer(hin, dtype=np.uint8, count=nbytes)[:] = np.arange(nbytes) % 251
            hout = cp.cuda.alloc_pinned_memory(nbytes)
            din, dx, dout = (cp.zeros(n, dtype=cp.uint32) for _ in range(3))
            bufs.append((hin, din, dx, dout, hout, nbytes))
        stage(streams[0], *bufs[0])  # compile the kernels outside any capture
        stage(streams[0], *bufs[0], copies="kernel")
        streams[0].synchronize()
        for copies in (True, "kernel", False):
            graphs = {}
            for b in bufs:  # outputs cleared: a copy that wrote nothing shows
                np.frombuffer(b[4], dtype=np.uint8, count=nbytes)[:] = 0
            for i, s in enumerate(streams):
                graphs[s.ptr] = capture(s, *bufs[i], copies=copies)
                graphs[s.ptr].launch(s)
                s.synchronize()
            name = {True: "graph copies+kernels", "kernel": "graph copy kernels+kernels",
                    False: "graph kernels only"}[copies]
            if copies:
                # What stream 0's batch came out as: the same through either kind of copy.
                out = np.frombuffer(bufs[0][4], dtype=np.uint8, count=nbytes).tobytes()
                if copies is True:
                    reference = out
                check = "" if copies is True else \
                    (" (output as memcpy's)" if out == reference else " OUTPUT DIFFERS")
            else:
                check = ""
            for rot in (1, STREAMS):
                call, wall = timed_calls(lambda s: graphs[s.ptr].launch(s), streams[:rot])
                print(f"{nbytes >> 10:5d}K {name:27s} streams {rot}: call_us {call:6.2f} "
                      f"batch_us {wall / N * 1e6:7.2f} gbps {N * nbytes / wall / 1e9:6.2f}{check}",
                      flush=True)


if __name__ == "__main__":
    main()
