#!/usr/bin/env python3
"""Can the host store straight into device memory on this machine? (ctypes on libcuda; a GPU.)

usage: tools/diag/host_store_probe.py

A host thread can signal a kernel in two ways: the kernel (or the GPU's front end) reads a word
of host memory over the link, or the host stores into device memory (a posted write over the
link, which no read of the GPU's waits behind). Runs AB and AC (BENCHMARKS.md §13) found every
read of host memory, the kernel's poll included, waiting behind the resident kernel's zero-copy
reads at load. This prints what the second way would need, and tries it:

- the device attributes that say whether the CPU reaches device memory directly (a coherent
  link, address translation services) or may export it as a dma-buf;
- a 2 MiB `cuMemAlloc` exported as a dma-buf (`cuMemGetHandleForAddressRange`, without and
  with the PCIe mapping flag), then mapped into this process with `mmap`, a word stored through
  the mapping and read back by `cuMemcpyDtoH`;
- whether GDRCopy's driver (`/dev/gdrdrv`) or `nvidia_peermem` is loaded, BAR1's size, and the
  driver's version.

Diagnostic only (issue 22).
"""
import ctypes
import mmap
import os
import subprocess

ATTRIBUTES = [  # CUdevice_attribute values (cuda.h)
    ("HOST_NATIVE_ATOMIC_SUPPORTED", 86),
    ("PAGEABLE_MEMORY_ACCESS", 88),
    ("CONCURRENT_MANAGED_ACCESS", 89),
    ("PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES", 100),
    ("DIRECT_MANAGED_MEM_ACCESS_FROM_HOST", 101),
    ("GPU_DIRECT_RDMA_SUPPORTED", 116),
    ("DMA_BUF_SUPPORTED", 124),
]
DMA_BUF_FD = 1  # CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
MAPPING_TYPE_PCIE = 1  # CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE

cu = ctypes.CDLL("libcuda.so.1")


def call(what, r):
    """True where the driver call `what` returned CUDA_SUCCESS; prints its error otherwise."""
    if r == 0:
        return True
    name = ctypes.c_char_p()
    cu.cuGetErrorName(r, ctypes.byref(name))
    print(f"{what}: error {r} ({name.value.decode() if name.value else '?'})")
    return False


def main():
    if not call("cuInit", cu.cuInit(0)):
        return
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    call("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), 0))
    for name, a in ATTRIBUTES:
        v = ctypes.c_int(-1)
        cu.cuDeviceGetAttribute(ctypes.byref(v), a, dev)
        print(f"attribute {name} = {v.value}")
    call("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    call("cuCtxSetCurrent", cu.cuCtxSetCurrent(ctx))
    ptr, size = ctypes.c_uint64(), 2 << 20
    if not call("cuMemAlloc", cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size))):
        return
    for flags in (0, MAPPING_TYPE_PCIE):
        fd = ctypes.c_int(-1)
        r = cu.cuMemGetHandleForAddressRange(ctypes.byref(fd), ctypes.c_uint64(ptr.value),
                                             ctypes.c_size_t(size), DMA_BUF_FD,
                                             ctypes.c_ulonglong(flags))
        if not call(f"dma-buf export (flags {flags})", r):
            continue
        try:
            m = mmap.mmap(fd.value, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            m[0:8] = (12345).to_bytes(8, "little")
            back = ctypes.c_uint64()
            cu.cuMemcpyDtoH_v2(ctypes.byref(back), ctypes.c_uint64(ptr.value),
                               ctypes.c_size_t(8))
            print(f"dma-buf (flags {flags}) mapped; stored 12345, the device holds {back.value}")
            m.close()
        except OSError as e:
            print(f"dma-buf export (flags {flags}) ok, its mmap refused: {e!r}")
        finally:
            os.close(fd.value)
    cu.cuMemFree_v2(ctypes.c_uint64(ptr.value))
    for cmd in ["ls -l /dev/gdrdrv", "lsmod | grep -iE 'gdrdrv|peermem'",
                "nvidia-smi -q | grep -A1 -i 'bar1 memory'", "head -1 /proc/driver/nvidia/version"]:
        out = subprocess.run(cmd, shell=True, capture_output=True, text=True)
        print(f"$ {cmd}\n{(out.stdout + out.stderr).strip() or '(nothing)'}")


if __name__ == "__main__":
    main()
