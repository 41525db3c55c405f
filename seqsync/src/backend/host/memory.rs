//! Host "device" memory and the host backend's stream-ordered pool.

use std::alloc::Layout;
use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{HostBackend, HostStream};
use crate::backend::{MemoryBackend, MemoryUsage};
use crate::error::{Error, Result};

/// Alignment of host memory blocks (CUDA's `cuMemAlloc` guarantees at least as much).
pub const HOST_MEMORY_ALIGN: usize = 256;

/// Zeroed host memory standing in for device memory; freed on drop.
#[derive(Debug)]
pub struct HostRawMemory {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the memory is a plain heap allocation owned by this value; who reads or writes it
// (stream closures through its address) is ordered by the caller, as for device memory.
unsafe impl Send for HostRawMemory {}
// SAFETY: a shared reference only exposes the address and the length.
unsafe impl Sync for HostRawMemory {}

impl HostRawMemory {
    /// Allocate `bytes` (> 0) zeroed bytes, [`HOST_MEMORY_ALIGN`]-aligned.
    pub fn new(bytes: usize) -> Result<Self> {
        let layout = Layout::from_size_align(bytes.max(1), HOST_MEMORY_ALIGN).map_err(|e| {
            Error::invalid("host memory", format!("cannot allocate {bytes} bytes: {e}"))
        })?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| {
            Error::invalid(
                "host memory",
                format!("out of host memory allocating {bytes} bytes"),
            )
        })?;
        Ok(HostRawMemory { ptr, layout })
    }

    /// The address.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Always false: host memory has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Drop for HostRawMemory {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed` with exactly this layout and is freed once.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// The host backend's stream-ordered pool: allocation takes host memory at once; a free is
/// enqueued on the stream, which releases the memory when it gets there. No reuse of its own
/// (the system allocator's is what it has), which makes it the plain stream-ordered baseline.
#[derive(Debug, Default)]
pub struct HostAsyncPool {
    live: Mutex<HashMap<u64, HostRawMemory>>,
    usage: Arc<Usage>,
}

impl Drop for HostAsyncPool {
    /// Memory still allocated (never freed, or held back by a pool's quarantine) may still be
    /// used by a stream: it is leaked, never freed under it (a CUDA pool destroyed with
    /// allocations outstanding keeps them too). Memory freed already goes back when its
    /// stream gets to the free, as before.
    fn drop(&mut self) {
        let live = self.live.get_mut().unwrap_or_else(|e| e.into_inner());
        for (_, memory) in live.drain() {
            LEAKED_AT_DROP.fetch_add(memory.len() as u64, Ordering::Relaxed);
            std::mem::forget(memory);
        }
    }
}

/// Bytes the host backend's pools leaked when they dropped (blocks still allocated then).
static LEAKED_AT_DROP: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Default)]
struct Usage {
    reserved: AtomicU64,
    reserved_high: AtomicU64,
    used: AtomicU64,
    used_high: AtomicU64,
}

impl Usage {
    fn add(&self, bytes: u64) {
        let r = self.reserved.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.reserved_high.fetch_max(r, Ordering::Relaxed);
        let u = self.used.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.used_high.fetch_max(u, Ordering::Relaxed);
    }
}

impl MemoryBackend for HostBackend {
    type RawMemory = HostRawMemory;
    type AsyncPool = HostAsyncPool;

    fn alloc_memory(&self, bytes: usize) -> Result<HostRawMemory> {
        HostRawMemory::new(bytes)
    }

    fn memory_addr(&self, memory: &HostRawMemory) -> u64 {
        memory.addr()
    }

    fn create_async_pool(&self, _release_threshold: u64) -> Result<HostAsyncPool> {
        Ok(HostAsyncPool::default())
    }

    fn alloc_async(&self, pool: &HostAsyncPool, _stream: &HostStream, bytes: usize) -> Result<u64> {
        let memory = HostRawMemory::new(bytes)?;
        let addr = memory.addr();
        pool.usage.add(memory.len() as u64);
        pool.live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(addr, memory);
        Ok(addr)
    }

    fn free_async(&self, pool: &HostAsyncPool, stream: &HostStream, addr: u64) -> Result<()> {
        let memory = pool
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&addr)
            .ok_or_else(|| {
                Error::invalid(
                    "host async pool",
                    format!("{addr:#x} is not a live allocation of this pool"),
                )
            })?;
        let bytes = memory.len() as u64;
        pool.usage.used.fetch_sub(bytes, Ordering::Relaxed);
        let usage = pool.usage.clone();
        stream.launch(move || {
            drop(memory);
            usage.reserved.fetch_sub(bytes, Ordering::Relaxed);
        });
        Ok(())
    }

    fn trim_async_pool(&self, _pool: &HostAsyncPool, _keep: usize) -> Result<()> {
        // Nothing is kept: freed memory goes back to the system allocator when the stream
        // reaches the free.
        Ok(())
    }

    fn async_pool_usage(&self, pool: &HostAsyncPool) -> Result<MemoryUsage> {
        let u = &pool.usage;
        Ok(MemoryUsage {
            reserved_current: u.reserved.load(Ordering::Relaxed),
            reserved_high: u.reserved_high.load(Ordering::Relaxed),
            used_current: u.used.load(Ordering::Relaxed),
            used_high: u.used_high.load(Ordering::Relaxed),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool dropped with a block still allocated leaks it (a stream may still use it);
    /// freed blocks go back as their streams get to the frees.
    #[test]
    fn a_dropped_pool_leaks_what_is_still_allocated() {
        let host = HostBackend::new();
        let s = host.new_stream("s").unwrap();
        let pool = host.create_async_pool(u64::MAX).unwrap();
        let kept = host.alloc_async(&pool, &s, 4096).unwrap();
        let freed = host.alloc_async(&pool, &s, 8192).unwrap();
        host.free_async(&pool, &s, freed).unwrap();
        let before = LEAKED_AT_DROP.load(Ordering::Relaxed);
        drop(pool);
        let leaked = LEAKED_AT_DROP.load(Ordering::Relaxed) - before;
        // Other tests' pools may drop meanwhile: at least this one's block, not its freed one.
        assert!(leaked >= 4096, "leaked {leaked} bytes (block {kept:#x})");
        s.synchronize().unwrap();
    }
}
