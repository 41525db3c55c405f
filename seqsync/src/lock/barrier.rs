//! The asymmetric barrier pair a biased lock stands on: a *light* barrier on the owner's path
//! that costs nothing at run time (a compiler fence), and a *heavy* one, on the rare path of a
//! thread that takes the lock away from its owner, that makes every running thread of the
//! process execute a full memory barrier (Linux `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`,
//! an interrupt to each CPU that runs one of them; a thread that is not running passed a
//! barrier when it was switched out).
//!
//! Together they order a store before a load on both sides, as two `SeqCst` fences would: the
//! owner stores "I am in", light barrier, loads "was the lock taken away?"; the other thread
//! stores "taken away", heavy barrier, loads "is the owner in?". At least one of them sees the
//! other's store. This is the pattern of the `membarrier(2)` manual and of Folly's
//! `asymmetricLightBarrier` / `asymmetricHeavyBarrier`.
//!
//! Biasing registers the whole process for `membarrier(2)`, so it is the application's choice:
//! only a build with the crate's `biased-locks` feature ever makes the call. Where the heavy
//! barrier is not to be had (the feature is off, the default; not Linux, a kernel before 4.14,
//! a sandbox that refuses the call, Miri, or `SEQSYNC_BIASED_LOCKS=off` in a build with the
//! feature), [`available`] says why and locks are never biased. Under loom both barriers are
//! `SeqCst` fences, which is what the pair guarantees.

/// Whether the heavy barrier works in this process (asked once, then remembered); `Err` says
/// why not.
#[cfg(not(seqsync_loom))]
pub(crate) fn available() -> Result<(), &'static str> {
    static AVAILABLE: std::sync::OnceLock<Result<(), &'static str>> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        if !cfg!(feature = "biased-locks") {
            return Err("the crate's biased-locks feature is off (the default)");
        }
        let off = std::env::var("SEQSYNC_BIASED_LOCKS").is_ok_and(|v| {
            ["off", "0", "no", "false"]
                .iter()
                .any(|o| v.trim().eq_ignore_ascii_case(o))
        });
        if off {
            return Err("turned off by SEQSYNC_BIASED_LOCKS");
        }
        sys::register()
    })
}

/// Under loom a model may always bias (its barriers are fences).
#[cfg(seqsync_loom)]
pub(crate) fn available() -> Result<(), &'static str> {
    Ok(())
}

/// The owner's side: keeps the compiler from moving its store past its load; the heavy barrier
/// does the processor's part.
#[inline(always)]
pub(crate) fn light() {
    #[cfg(not(seqsync_loom))]
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    #[cfg(seqsync_loom)]
    loom::sync::atomic::fence(loom::sync::atomic::Ordering::SeqCst);
}

/// The taker's side: every running thread of the process executes a full barrier before this
/// returns `Ok`. Only called where [`available`] said yes; an error (the call worked then, and
/// is refused now) means no barrier was made.
#[cold]
pub(crate) fn heavy() -> std::io::Result<()> {
    #[cfg(all(test, not(seqsync_loom)))]
    if FAIL_NEXT_HEAVY.with(|f| f.replace(false)) {
        return Err(std::io::Error::other("refused by the test"));
    }
    #[cfg(not(seqsync_loom))]
    return sys::heavy();
    #[cfg(seqsync_loom)]
    {
        loom::sync::atomic::fence(loom::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

#[cfg(all(test, not(seqsync_loom)))]
thread_local! {
    /// Tests: this thread's next heavy barrier fails.
    pub(crate) static FAIL_NEXT_HEAVY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(all(
    feature = "biased-locks",
    target_os = "linux",
    not(seqsync_loom),
    not(miri)
))]
mod sys {
    // From <linux/membarrier.h>.
    const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
    const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    fn membarrier(cmd: libc::c_long) -> libc::c_long {
        // SAFETY: membarrier takes two integers (command, flags) and touches no memory of ours.
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_long) }
    }

    /// Ask the kernel for private expedited barriers and register this process for them.
    pub(super) fn register() -> Result<(), &'static str> {
        let supported = membarrier(MEMBARRIER_CMD_QUERY);
        if supported < 0 {
            return Err("membarrier(2) is not available (kernel before 4.3, or refused)");
        }
        if supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED == 0 {
            return Err("membarrier(2) has no private expedited command (kernel before 4.14)");
        }
        if membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0 {
            return Err("membarrier(2) refused to register the process");
        }
        // One barrier now: a process where it fails never biases a lock.
        if membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 {
            return Err("membarrier(2) registered but its barrier failed");
        }
        Ok(())
    }

    pub(super) fn heavy() -> std::io::Result<()> {
        // It worked when `register` tried it, and a registered process keeps it (a sandbox
        // that starts refusing it later is the caller's error to report).
        if membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(all(
    any(not(feature = "biased-locks"), not(target_os = "linux"), miri),
    not(seqsync_loom)
))]
mod sys {
    pub(super) fn register() -> Result<(), &'static str> {
        Err("no heavy memory barrier in this build (only Linux's membarrier(2) is used, with the biased-locks feature)")
    }

    pub(super) fn heavy() -> std::io::Result<()> {
        unreachable!("never called where `register` failed")
    }
}

#[cfg(all(test, not(seqsync_loom)))]
mod tests {
    /// A build without the `biased-locks` feature never biases, and says why; one with it
    /// biases wherever the kernel has the barrier (or says why not).
    #[test]
    fn biasing_is_off_unless_the_feature_asks() {
        let got = super::available();
        if cfg!(feature = "biased-locks") {
            if let Err(why) = got {
                assert!(!why.contains("feature"), "{why}");
            }
        } else {
            assert_eq!(
                got,
                Err("the crate's biased-locks feature is off (the default)")
            );
        }
    }
}
