"""Does cuStreamCreate return while streams wait (cuStreamWaitValue64) on a host word nobody has
written? Blocks B streams, then creates up to 300 more (idle), printing the count every 8;
the host writes the word at the end. Usage: create_while_blocked.py B"""
import ctypes, sys, time
try:
    from cuda.bindings import driver as cu
except ImportError:
    from cuda import cuda as cu

def ck(r):
    err = r[0] if isinstance(r, tuple) else r
    if int(err) != 0:
        raise RuntimeError(str(err))
    return r[1] if isinstance(r, tuple) and len(r) == 2 else None

blocked = int(sys.argv[1])
ck(cu.cuInit(0))
ctx = ck(cu.cuDevicePrimaryCtxRetain(ck(cu.cuDeviceGet(0))))
ck(cu.cuCtxSetCurrent(ctx))
host = ck(cu.cuMemHostAlloc(64, cu.CU_MEMHOSTALLOC_DEVICEMAP | cu.CU_MEMHOSTALLOC_PORTABLE))
ctypes.memset(int(host), 0, 64)
dp = ck(cu.cuMemHostGetDevicePointer(host, 0))
geq = cu.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ
print(f"blocked={blocked}", flush=True)
for i in range(blocked):
    s = ck(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
    ck(cu.cuStreamWaitValue64(s, dp, 1, geq))
print(f"  {blocked} streams blocked", flush=True)
t0 = time.time()
for i in range(300):
    ck(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
    if i % 8 == 7:
        print(f"  {i+1} more created ({time.time()-t0:.3f}s)", flush=True)
ctypes.c_uint64.from_address(int(host)).value = 1
print("  done", flush=True)
