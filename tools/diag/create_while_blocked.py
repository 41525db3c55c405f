"""Does cuStreamCreate return while streams wait (cuStreamWaitValue64) on a host word nobody has
written? And can streams made before that take work meanwhile?

  create_while_blocked.py B            blocks B streams, then makes up to 300 more (idle),
                                       printing the count every 8
  create_while_blocked.py B premade    makes 300 streams first (an event recorded on each, as
                                       seqsync's streams made ahead), blocks B streams, then
                                       enqueues an event record and a word write on each of the
                                       300, printing the count every 8 and whether the writes land

The host writes the word at the end. Run each under `timeout`: a call that does not return
shows as the last count printed."""
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
premade = len(sys.argv) > 2 and sys.argv[2] == "premade"
ck(cu.cuInit(0))
ctx = ck(cu.cuDevicePrimaryCtxRetain(ck(cu.cuDeviceGet(0))))
ck(cu.cuCtxSetCurrent(ctx))
flags = cu.CU_MEMHOSTALLOC_DEVICEMAP | cu.CU_MEMHOSTALLOC_PORTABLE
host = ck(cu.cuMemHostAlloc(64 * 302, flags))
ctypes.memset(int(host), 0, 64 * 302)
dp = int(ck(cu.cuMemHostGetDevicePointer(host, 0)))
geq = cu.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ
nb = cu.CUstream_flags.CU_STREAM_NON_BLOCKING
print(f"blocked={blocked} premade={premade}", flush=True)
made = []
if premade:
    ev = ck(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DISABLE_TIMING))
    for i in range(300):
        s = ck(cu.cuStreamCreate(nb))
        ck(cu.cuEventRecord(ev, s))
        made.append(s)
    print("  300 streams made ahead", flush=True)
for i in range(blocked):
    s = ck(cu.cuStreamCreate(nb))
    ck(cu.cuStreamWaitValue64(s, dp, 1, geq))
print(f"  {blocked} streams blocked", flush=True)
t0 = time.time()
for i in range(300):
    if premade:
        s = made[i]
        ck(cu.cuEventRecord(ev, s))
        ck(cu.cuStreamWriteValue64(s, dp + 64 * (i + 1), 1, 0))
    else:
        ck(cu.cuStreamCreate(nb))
    if i % 8 == 7:
        print(f"  {i+1} {'used' if premade else 'more created'} ({time.time()-t0:.3f}s)", flush=True)
if premade:
    time.sleep(0.1)
    landed = sum(ctypes.c_uint64.from_address(int(host) + 64 * (i + 1)).value for i in range(300))
    print(f"  writes landed while blocked: {landed} of 300", flush=True)
ctypes.c_uint64.from_address(int(host)).value = 1
print("  done", flush=True)
