# Which CUDA driver calls block while a stream waits (cuStreamWaitValue64) for a value no one has
# written yet? Run on a machine with a GPU: python3 tools/cuda-implicit-sync.py (needs cuda-python).
# Figures: BENCHMARKS.md §5, "Driver calls that wait for the device".
import threading, time, ctypes, sys
try:
    from cuda.bindings import driver as cu
except ImportError:
    from cuda import cuda as cu
def ck(r):
    err = r[0] if isinstance(r, tuple) else r
    assert err == cu.CUresult.CUDA_SUCCESS, err
    return r[1] if isinstance(r, tuple) and len(r) == 2 else (r[1:] if isinstance(r, tuple) else None)
ck(cu.cuInit(0)); dev = ck(cu.cuDeviceGet(0)); ctx = ck(cu.cuDevicePrimaryCtxRetain(dev)); ck(cu.cuCtxSetCurrent(ctx))
word = ck(cu.cuMemHostAlloc(8, cu.CU_MEMHOSTALLOC_DEVICEMAP | cu.CU_MEMHOSTALLOC_PORTABLE))
dptr = ck(cu.cuMemHostGetDevicePointer(word, 0))
w = ctypes.c_uint64.from_address(int(word)); w.value = 0
waiting = ck(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
other = ck(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
target = [0]
def arm():
    target[0] += 1
    ck(cu.cuStreamWaitValue64(waiting, dptr, target[0], 0))
def release(): w.value = target[0]
keep = {}
ops = {
 "cuEventCreate": lambda: ck(cu.cuEventCreate(2)),
 "cuStreamCreate": lambda: ck(cu.cuStreamCreate(1)),
 "cuMemHostAlloc(4K)": lambda: keep.setdefault("h", []).append(ck(cu.cuMemHostAlloc(4096, 0))),
 "cuMemAllocHost(1M)": lambda: keep.setdefault("h", []).append(ck(cu.cuMemAllocHost(1<<20))),
 "cuMemFreeHost": lambda: ck(cu.cuMemFreeHost(keep["h"].pop())),
 "cuMemAlloc(1M)": lambda: keep.setdefault("d", []).append(ck(cu.cuMemAlloc(1<<20))),
 "cuMemFree": lambda: ck(cu.cuMemFree(keep["d"].pop())),
 "cuMemAllocAsync(other)": lambda: keep.setdefault("a", []).append(ck(cu.cuMemAllocAsync(1<<20, other))),
 "cuMemFreeAsync(other)": lambda: ck(cu.cuMemFreeAsync(keep["a"].pop(), other)),
 "cuMemFreeAsync(cuMemAlloc ptr)": lambda: (keep.setdefault("d", []).append(ck(cu.cuMemAlloc(1<<20))), ck(cu.cuMemFreeAsync(keep["d"].pop(), other))),
 "cuStreamSynchronize(other)": lambda: ck(cu.cuStreamSynchronize(other)),
 "cuMemsetD8Async(other)": lambda: (keep.setdefault("d", []).append(ck(cu.cuMemAlloc(1<<20))), ck(cu.cuMemsetD8Async(keep["d"][-1], 0, 1<<20, other))),
 "cuMemFree(again)": lambda: ck(cu.cuMemFree(keep["d"].pop())),
 "cuMemHostRegister": lambda: keep.setdefault("r", []).append((ctypes.create_string_buffer(1<<16),)) or ck(cu.cuMemHostRegister(ctypes.addressof(keep["r"][-1][0]), 1<<16, 0)),
 "cuMemHostUnregister": lambda: ck(cu.cuMemHostUnregister(ctypes.addressof(keep["r"][-1][0]))),
 "cuGraphInstantiate": lambda: keep.setdefault("g", []).append((lambda g: (g, ck(cu.cuGraphInstantiate(g, 0))))(ck(cu.cuGraphCreate(0)))),
 "cuGraphExecDestroy(never launched)": lambda: ck(cu.cuGraphExecDestroy(keep["g"][-1][1])),
 "cuGraphDestroy": lambda: ck(cu.cuGraphDestroy(keep["g"].pop()[0])),
 "cuGraphExecDestroy(launched on other, done)": lambda: (lambda g: (lambda e: (ck(cu.cuGraphLaunch(e, other)), ck(cu.cuStreamSynchronize(other)), ck(cu.cuGraphExecDestroy(e))))(ck(cu.cuGraphInstantiate(g, 0))))(ck(cu.cuGraphCreate(0))),
 "cuMemcpyDtoH(pageable)": lambda: (keep.setdefault("d", []).append(ck(cu.cuMemAlloc(4096))), ck(cu.cuMemcpyDtoH(ctypes.addressof(ctypes.create_string_buffer(4096)), keep["d"][-1], 4096))),
 "cuMemcpyHtoD(pageable)": lambda: ck(cu.cuMemcpyHtoD(keep["d"][-1], ctypes.addressof(ctypes.create_string_buffer(4096)), 4096)),
 "cuMemsetD32": lambda: ck(cu.cuMemsetD32(keep["d"][-1], 0, 1024)),
 "cuCtxSynchronize": lambda: ck(cu.cuCtxSynchronize()),
}
for name, f in ops.items():
    arm(); time.sleep(0.05)
    done = threading.Event(); res = {}
    def run():
        ck(cu.cuCtxSetCurrent(ctx))
        try: f()
        except Exception as e: res["e"] = repr(e)
        done.set()
    t = threading.Thread(target=run, daemon=True); t.start()
    blocked = not done.wait(1.0)
    release(); ok = done.wait(10)
    print(f"{name:34s} {'BLOCKS until the word is written' if blocked else 'returns'}{' (never returned)' if not ok else ''} {res.get('e','')}", flush=True)
    ck(cu.cuStreamSynchronize(waiting))
