"""Poor man's backtrace without gdb: for each thread of PID, seize it with ptrace, read its
registers, and list the words on its stack (up to 256 KiB above rsp) that point into executable
mappings, with the mapping's file and offset (symbolize elsewhere with addr2line / nm)."""
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
PTRACE_GETREGS, PTRACE_SEIZE, PTRACE_INTERRUPT, PTRACE_DETACH = 12, 0x4206, 0x4207, 17
class Regs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_ulonglong) for n in (
        "r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx rdx rsi rdi orig_rax rip cs eflags rsp ss "
        "fs_base gs_base ds es fs gs").split()]
pid = int(sys.argv[1])
maps = []
for line in open(f"/proc/{pid}/maps"):
    p = line.split()
    lo, hi = (int(x, 16) for x in p[0].split("-"))
    maps.append((lo, hi, p[1], int(p[2], 16), p[5] if len(p) > 5 else ""))
def where(a):
    for lo, hi, perm, off, path in maps:
        if lo <= a < hi and "x" in perm:
            return f"{os.path.basename(path)}+0x{a - lo + off:x}"
    return None
mem = open(f"/proc/{pid}/mem", "rb")
for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
    comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
    if libc.ptrace(PTRACE_SEIZE, tid, None, None) != 0:
        print(tid, comm, "seize failed", ctypes.get_errno()); continue
    libc.ptrace(PTRACE_INTERRUPT, tid, None, None)
    os.waitpid(tid, 0x40000000)  # __WALL
    r = Regs()
    libc.ptrace(PTRACE_GETREGS, tid, None, ctypes.byref(r))
    frames = [where(r.rip) or hex(r.rip)]
    try:
        mem.seek(r.rsp); raw = mem.read(256 * 1024)
    except OSError:
        raw = b""
    for i in range(0, len(raw) - 7, 8):
        w = where(struct.unpack_from("<Q", raw, i)[0])
        if w and (not frames or frames[-1] != w):
            frames.append(w)
    print(f"== {tid} {comm}: " + " ".join(frames[:60]), flush=True)
    libc.ptrace(PTRACE_DETACH, tid, None, None)
