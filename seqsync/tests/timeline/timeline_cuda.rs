//! CUDA-only timeline tests: which mechanism a backend picks, the events mechanism's refusal
//! of a wait before its signal, which waits of `hybrid` use the word, and kernels ordered by a
//! stream wait, for every mechanism (enqueued before its signal; with events, after it).
//! (Every contract and conformance case also runs on CUDA, in `timeline_contract.rs` and
//! `timeline_cts.rs`, with the mechanism `SEQSYNC_TIMELINE_MECHANISM` picks.)
#![cfg(feature = "cuda")]

use crate::common;

use std::time::Duration;

use seqsync::backend::cuda::{CudaBackend, TimelineMechanism};
use seqsync::cudarc::driver::{LaunchConfig, PushKernelArg};
use seqsync::timeline::{Mechanism, Timeline};
use seqsync::Error;

crate::gpu_required!();

const LONG: Duration = Duration::from_secs(20);

fn with(m: TimelineMechanism) -> Option<(common::gpu::Gpu, CudaBackend)> {
    let g = common::gpu::gpu()?;
    let b = g.backend.clone().with_timeline_mechanism(m);
    Some((g, b))
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn auto_uses_stream_memory_operations_where_they_work() {
    let Some((_, b)) = with(TimelineMechanism::Auto) else {
        return;
    };
    let t = Timeline::new(&b, "t", 0).unwrap();
    println!("mechanism: {}", t.mechanism());
    // The H200 runs them; elsewhere the fallback must say why.
    match t.mechanism() {
        Mechanism::MemOps => {}
        Mechanism::Events {
            fallback_reason: Some(why),
        } => assert!(!why.is_empty()),
        other => panic!("unexpected mechanism {other:?}"),
    }
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn forced_mechanisms_are_used() {
    let Some((_, b)) = with(TimelineMechanism::Events) else {
        return;
    };
    let t = Timeline::new(&b, "t", 0).unwrap();
    assert_eq!(
        t.mechanism(),
        Mechanism::Events {
            fallback_reason: None
        }
    );
    let Some((_, b)) = with(TimelineMechanism::MemOps) else {
        return;
    };
    assert_eq!(
        Timeline::new(&b, "t", 0).unwrap().mechanism(),
        Mechanism::MemOps
    );
    let Some((_, b)) = with(TimelineMechanism::Hybrid) else {
        return;
    };
    let t = Timeline::new(&b, "t", 0).unwrap();
    assert_eq!(t.mechanism(), Mechanism::Hybrid);
    assert_eq!(t.mechanism().name(), "hybrid");
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn hybrid_uses_the_word_only_for_waits_before_their_signal() {
    let Some((_, b)) = with(TimelineMechanism::Hybrid) else {
        return;
    };
    let (s1, s2) = (b.new_stream("s").unwrap(), b.new_stream("s").unwrap());
    let t = Timeline::new(&b, "t", 0).unwrap();
    assert_eq!(b.timeline_word_ops(), (0, 0));
    // Ordered pairs: events only.
    for v in 1..=3 {
        t.signal_on(&s1, v).unwrap();
        t.wait_on(&s2, v).unwrap();
    }
    t.wait_on(&s2, 2).unwrap();
    assert_eq!(
        b.timeline_word_ops(),
        (0, 0),
        "an ordered pair used the word"
    );
    // Wait before signal: one word wait, and one write at its signal (not at a lower one).
    t.wait_on(&s2, 5).unwrap();
    assert_eq!(b.timeline_word_ops(), (0, 1));
    t.signal_on(&s1, 4).unwrap();
    assert_eq!(b.timeline_word_ops(), (0, 1), "4 releases no word wait");
    t.signal_on(&s1, 5).unwrap();
    assert_eq!(b.timeline_word_ops(), (1, 1));
    t.signal_on(&s1, 6).unwrap();
    assert_eq!(
        b.timeline_word_ops(),
        (1, 1),
        "no word wait left to release"
    );
    // s2 got past the word wait: it signals another timeline behind it.
    let after = Timeline::new(&b, "after", 0).unwrap();
    after.signal_on(&s2, 1).unwrap();
    after.wait(1, LONG).unwrap();
    t.wait(6, LONG).unwrap();
    assert_eq!(t.query().unwrap(), 6);
    // A host signal releases a word wait without a stream write.
    t.wait_on(&s2, 7).unwrap();
    after.signal_on(&s2, 2).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(after.query().unwrap(), 1, "the word wait did not hold");
    t.signal(7).unwrap();
    after.wait(2, LONG).unwrap();
    assert_eq!(b.timeline_word_ops(), (1, 2));
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn hybrid_reuses_events_over_many_signals() {
    let Some((_, b)) = with(TimelineMechanism::Hybrid) else {
        return;
    };
    let (s1, s2) = (b.new_stream("s").unwrap(), b.new_stream("s").unwrap());
    let (t, back) = (
        Timeline::new(&b, "t", 0).unwrap(),
        Timeline::new(&b, "back", 0).unwrap(),
    );
    // Far more signals than the pools keep, with host loads freeing points along the way.
    for v in 1..=10_000u64 {
        t.signal_on(&s1, v).unwrap();
        t.wait_on(&s2, v).unwrap();
        back.signal_on(&s2, v).unwrap();
        if v % 1000 == 0 {
            back.wait(v - 500, LONG).unwrap();
            assert!(t.query().unwrap() >= v - 500);
        }
    }
    back.wait(10_000, LONG).unwrap();
    assert_eq!(t.query().unwrap(), 10_000);
    assert_eq!(b.timeline_word_ops(), (0, 0));
}

/// A stream's signal of a low value lands after a host signal of a higher one (a dip, which
/// the word repair undoes), and the last handle goes in between: the stream waiting for the
/// higher value is still released (the repair goes on past the drop until the low write
/// landed).
fn a_dip_after_the_last_handle_went_is_still_repaired(m: TimelineMechanism) {
    let Some((g, b)) = with(m) else {
        return;
    };
    let (s1, w) = (b.new_stream("s1").unwrap(), b.new_stream("w").unwrap());
    let t = Timeline::new(&b, "t", 0).unwrap();
    let done = Timeline::new(&b, "done", 0).unwrap();
    g.spin(&s1, Duration::from_millis(200));
    t.signal_on(&s1, 1).unwrap();
    g.spin(&w, Duration::from_millis(400));
    t.wait_on(&w, 5).unwrap();
    done.signal_on(&w, 1).unwrap();
    t.signal(5).unwrap(); // the write of 1, still on its way, now lands below it
    drop(t);
    done.wait(1, Duration::from_secs(10))
        .expect("the waiting stream was not released after the drop");
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn a_dip_after_the_last_handle_went_is_still_repaired_memops() {
    a_dip_after_the_last_handle_went_is_still_repaired(TimelineMechanism::MemOps)
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn a_dip_after_the_last_handle_went_is_still_repaired_hybrid() {
    a_dip_after_the_last_handle_went_is_still_repaired(TimelineMechanism::Hybrid)
}

/// A new stream per batch waits on one timeline (and is dropped by its user): past the streams
/// a word keeps listed, the word trades them for events at their ends. Every wait still holds
/// its stream until the value comes, and every stream's later signal lands.
fn a_new_stream_per_batch_waits_on_one_timeline(m: TimelineMechanism) {
    let Some((_, b)) = with(m) else {
        return;
    };
    // A reserve of its own: the streams made while its waits are open come from it.
    let b = b.with_streams_made_ahead(256);
    let t = Timeline::new(&b, "t", 0).unwrap();
    let done: Vec<_> = (1..=200u64)
        .map(|v| {
            let s = common::gpu::new_stream(&b);
            t.wait_on(&s, v).unwrap();
            let d = Timeline::new(&b, "done", 0).unwrap();
            d.signal_on(&s, 1).unwrap();
            d
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        done.iter().all(|d| d.query().unwrap() == 0),
        "a stream went past its wait"
    );
    t.signal(100).unwrap();
    for d in &done[..100] {
        d.wait(1, LONG).unwrap();
    }
    assert!(done[100..].iter().all(|d| d.query().unwrap() == 0));
    t.signal(200).unwrap();
    for d in &done {
        d.wait(1, LONG).unwrap();
    }
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn a_new_stream_per_batch_waits_on_one_timeline_memops() {
    a_new_stream_per_batch_waits_on_one_timeline(TimelineMechanism::MemOps)
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn a_new_stream_per_batch_waits_on_one_timeline_hybrid() {
    a_new_stream_per_batch_waits_on_one_timeline(TimelineMechanism::Hybrid)
}

/// A stream asked for while a stream waits for a value nothing has written yet is one the
/// backend made ahead (`cuStreamCreate` may wait for that wait: a hang); past those it is
/// refused by name, nothing made, and made again once the wait is past.
fn streams_asked_for_while_a_wait_is_open_are_made_ahead(m: TimelineMechanism) {
    let Some((_, b)) = with(m) else {
        return;
    };
    let b = b.with_streams_made_ahead(3);
    let t = Timeline::new(&b, "t", 0).unwrap();
    // Made with no wait open (after those of a test beside this one), the 3 with it: the
    // reserve fills at the first stream made then.
    let first = common::gpu::new_stream(&b);
    t.wait_on(&first, 1).unwrap();
    let mut streams = vec![first];
    // Its wait is open: the streams come from the 3 made with `first`, then are refused.
    let refused = loop {
        match b.new_stream("made ahead") {
            Ok(s) if streams.len() <= 4 => streams.push(s),
            other => break other,
        }
    };
    match refused {
        Err(Error::NoStreamWhileWaitsOpen {
            open,
            made_ahead: 3,
        }) if open >= 1 => {}
        other => panic!("expected NoStreamWhileWaitsOpen, got {other:?}"),
    }
    assert_eq!(
        streams.len(),
        4,
        "streams before the refusal: `first` and 3 made ahead"
    );
    let done: Vec<_> = streams
        .into_iter()
        .map(|s| {
            t.wait_on(&s, 1).unwrap();
            let d = Timeline::new(&b, "done", 0).unwrap();
            d.signal_on(&s, 1).unwrap();
            (s, d)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        done.iter().all(|(_, d)| d.query().unwrap() == 0),
        "a stream went past its wait"
    );
    t.signal(1).unwrap();
    for (_, d) in &done {
        d.wait(1, LONG).unwrap();
    }
    // Its waits are past: made (once those of a test beside this one are too).
    let after = common::gpu::new_stream(&b);
    let d = Timeline::new(&b, "after", 0).unwrap();
    d.signal_on(&after, 1).unwrap();
    d.wait(1, LONG).unwrap();
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn streams_asked_for_while_a_wait_is_open_are_made_ahead_memops() {
    streams_asked_for_while_a_wait_is_open_are_made_ahead(TimelineMechanism::MemOps)
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn streams_asked_for_while_a_wait_is_open_are_made_ahead_hybrid() {
    streams_asked_for_while_a_wait_is_open_are_made_ahead(TimelineMechanism::Hybrid)
}

/// The variants of a test that keeps a wait open for a second, one at a time: the other's
/// first half would find that wait open past its own second.
static A_WAIT_OPEN_FOR_A_SECOND: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// With none made ahead, a stream asked for while a wait is open is made once the wait has
/// closed (another thread signals it), not before; a wait that stays open gets the named
/// refusal after a second, nothing made.
fn a_stream_asked_for_with_none_made_ahead_is_made_once_the_waits_close(m: TimelineMechanism) {
    let Some((_, b)) = with(m) else {
        return;
    };
    let _one_at_a_time = A_WAIT_OPEN_FOR_A_SECOND
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let b = b.with_streams_made_ahead(0);
    let t = Timeline::new(&b, "t", 0).unwrap();
    let first = common::gpu::new_stream(&b);
    t.wait_on(&first, 1).unwrap(); // open until t reaches 1
    let made = std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            t.signal(1).unwrap();
        });
        let started = std::time::Instant::now();
        let made = b.new_stream("after the wait");
        (made, started.elapsed())
    });
    let (s, took) = (made.0.unwrap(), made.1);
    assert!(
        took >= Duration::from_millis(90),
        "made after {took:?}, while the wait was open"
    );
    let d = Timeline::new(&b, "d", 0).unwrap();
    d.signal_on(&s, 1).unwrap();
    d.wait(1, LONG).unwrap();
    // A wait that stays open: refused after the second.
    let u = Timeline::new(&b, "u", 0).unwrap();
    let held = common::gpu::new_stream(&b);
    u.wait_on(&held, 1).unwrap();
    let started = std::time::Instant::now();
    let refused = b.new_stream("refused");
    let took = started.elapsed();
    u.signal(1).unwrap();
    match refused {
        Err(Error::NoStreamWhileWaitsOpen { made_ahead: 0, .. }) => {}
        other => panic!("expected NoStreamWhileWaitsOpen, got {other:?}"),
    }
    assert!(took >= Duration::from_millis(900), "refused after {took:?}");
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn a_stream_asked_for_with_none_made_ahead_is_made_once_the_waits_close_memops() {
    a_stream_asked_for_with_none_made_ahead_is_made_once_the_waits_close(TimelineMechanism::MemOps)
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn a_stream_asked_for_with_none_made_ahead_is_made_once_the_waits_close_hybrid() {
    a_stream_asked_for_with_none_made_ahead_is_made_once_the_waits_close(TimelineMechanism::Hybrid)
}

/// A backend made while another's wait is open (a demo run per test, two tests at once) gets
/// its first stream from the streams made ahead that the backends of the device share, at
/// once, not a refusal.
fn a_new_backend_takes_streams_made_ahead_for_the_device(m: TimelineMechanism) {
    let Some((_, b)) = with(m) else {
        return;
    };
    let t = Timeline::new(&b, "t", 0).unwrap();
    let first = common::gpu::new_stream(&b); // fills the device's reserve, if not yet
    t.wait_on(&first, 1).unwrap(); // open until t reaches 1, below
    let fresh = CudaBackend::new(0).unwrap().with_timeline_mechanism(m);
    let s = fresh.new_stream("from the reserve");
    t.signal(1).unwrap();
    let s = s.unwrap();
    let d = Timeline::new(&fresh, "d", 0).unwrap();
    d.signal_on(&s, 1).unwrap();
    d.wait(1, LONG).unwrap();
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn a_new_backend_takes_streams_made_ahead_for_the_device_memops() {
    a_new_backend_takes_streams_made_ahead_for_the_device(TimelineMechanism::MemOps)
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn a_new_backend_takes_streams_made_ahead_for_the_device_hybrid() {
    a_new_backend_takes_streams_made_ahead_for_the_device(TimelineMechanism::Hybrid)
}

/// Signals and waits with no host read of the timeline in between (nothing polls its points):
/// its events are still reused, so the events alive stay bounded however many values it
/// signals (every mechanism that records events).
fn events_stay_bounded_without_host_reads(m: TimelineMechanism) {
    let Some((_, b)) = with(m) else {
        return;
    };
    let (s1, s2) = (b.new_stream("s").unwrap(), b.new_stream("s").unwrap());
    let t = Timeline::new(&b, "t", 0).unwrap();
    let before = b.live_events();
    for v in 1..=20_000u64 {
        t.signal_on(&s1, v).unwrap();
        t.wait_on(&s2, v).unwrap();
    }
    let grown = b.live_events().saturating_sub(before);
    b.stream_synchronize(&s2).unwrap();
    assert!(
        grown < 2_000,
        "{grown} events alive after 20000 signals nobody read"
    );
    assert_eq!(t.query().unwrap(), 20_000);
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn events_stay_bounded_without_host_reads_hybrid() {
    events_stay_bounded_without_host_reads(TimelineMechanism::Hybrid)
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn events_stay_bounded_without_host_reads_events() {
    events_stay_bounded_without_host_reads(TimelineMechanism::Events)
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn events_refuse_a_wait_before_its_signal() {
    let Some((g, b)) = with(TimelineMechanism::Events) else {
        return;
    };
    let (waiter, signaller) = (b.new_stream("s").unwrap(), b.new_stream("s").unwrap());
    let (t, done) = (
        Timeline::new(&b, "t", 0).unwrap(),
        Timeline::new(&b, "done", 0).unwrap(),
    );
    // Nothing signalled or enqueued for 1: refused by name.
    match t.wait_on(&waiter, 1) {
        Err(Error::WaitBeforeSignalUnsupported {
            timeline,
            value,
            enqueued,
            mechanism,
        }) => assert_eq!(
            (timeline.as_str(), value, enqueued, mechanism.as_str()),
            ("t", 1, 0, "events")
        ),
        other => panic!("expected WaitBeforeSignalUnsupported, got {other:?}"),
    }
    // Nothing enqueued: what the stream does after the refused wait runs, `t` still at 0.
    done.signal_on(&waiter, 1).unwrap();
    done.wait(1, Duration::from_secs(5))
        .expect("work after a refused wait was held");
    assert_eq!(t.query().unwrap(), 0);
    // A signal enqueued (behind slow work): a wait for its value goes in, one above it is
    // still refused.
    g.spin(&signaller, Duration::from_millis(200));
    t.signal_on(&signaller, 1).unwrap();
    common::assert_wait_refused(t.wait_on(&waiter, 2));
    t.wait_on(&waiter, 1).unwrap();
    done.signal_on(&waiter, 2).unwrap();
    done.wait(2, LONG).unwrap();
    assert_eq!(
        t.query().unwrap(),
        1,
        "ran past a wait enqueued after its signal"
    );
    // A value reached, or a timeline failed: no refusal (nothing to wait for; a failure
    // poisons the stream instead).
    t.wait_on(&waiter, 1).unwrap();
    let failed = Timeline::new(&b, "failed", 0).unwrap();
    failed.fail(Error::Cancelled("gone".into()));
    let poisoned = b.new_stream("s").unwrap();
    failed.wait_on(&poisoned, 1).unwrap();
    b.stream_synchronize(&waiter).unwrap();
}

/// Stream `late` fills a buffer with 7 after 20 ms and signals; stream `early` (enqueued
/// first) waits for that signal, then fills it with 9. Only if the wait held does 9 win.
/// With events, which refuse the wait before its signal (nothing enqueued), the wait is
/// enqueued again after the signal, and must hold the fill behind it.
fn kernels_ordered_by_wait_before_signal(m: TimelineMechanism) {
    kernels_ordered_by_wait_before_signal_with(m, &|| {})
}

/// As [`kernels_ordered_by_wait_before_signal`], with `disturb` run before every timeline call
/// (to change the thread's current context under it).
fn kernels_ordered_by_wait_before_signal_with(m: TimelineMechanism, disturb: &dyn Fn()) {
    let Some((g, b)) = with(m) else {
        return;
    };
    const N: usize = 1 << 16;
    let buf = b.alloc_device(N).unwrap();
    let host = b.alloc_pinned(N).unwrap();
    let (early, late) = (b.new_stream("s").unwrap(), b.new_stream("s").unwrap());
    let t = Timeline::new(&b, "filled", 0).unwrap();
    let done = Timeline::new(&b, "done", 0).unwrap();
    let fill =
        |s: &std::sync::Arc<seqsync::internal::backend::cuda::CudaStream>, v: f32, ns: u64| {
            let ptr = buf.device_ptr();
            let n = N as i32;
            let mut l = s.launch_builder(&g.slow_fill);
            l.arg(&ptr).arg(&n).arg(&v).arg(&ns);
            let cfg = LaunchConfig {
                grid_dim: (64, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: slow_fill writes N floats to `buf` (N u32s long), which lives to the end of
            // the test; the two fills are ordered by the timeline (that is what is tested).
            unsafe { l.launch(cfg) }.expect("launch slow_fill");
        };
    disturb();
    if !t.mechanism().holds_commands() {
        // Events refuse a wait before its signal, nothing enqueued ...
        common::assert_wait_refused(t.wait_on(&early, 1));
        fill(&late, 7.0, 20_000_000);
        disturb();
        t.signal_on(&late, 1).unwrap();
        // ... and a wait enqueued after it holds the kernel behind it.
        disturb();
        t.wait_on(&early, 1).unwrap();
        fill(&early, 9.0, 0);
    } else {
        t.wait_on(&early, 1).unwrap();
        fill(&early, 9.0, 0);
        fill(&late, 7.0, 20_000_000);
        disturb();
        t.signal_on(&late, 1).unwrap();
    }
    // SAFETY: the copy is ordered after the second fill on `early`; `host` is read after
    // `done`, which `early` signals after the copy.
    unsafe { buf.copy_to_pinned_async(&host, &early) }.unwrap();
    disturb();
    done.signal_on(&early, 1).unwrap();
    disturb();
    done.wait(1, LONG).unwrap();
    // SAFETY: the copy completed (done reached 1 after it on the same stream).
    let out = unsafe { host.as_slice() };
    assert!(
        out.iter().all(|&w| w == 9.0f32.to_bits()),
        "the wait did not hold"
    );
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn kernels_ordered_by_wait_before_signal_memops() {
    kernels_ordered_by_wait_before_signal(TimelineMechanism::MemOps)
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn kernels_ordered_by_wait_after_signal_events() {
    kernels_ordered_by_wait_before_signal(TimelineMechanism::Events)
}

#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn kernels_ordered_by_wait_before_signal_hybrid() {
    kernels_ordered_by_wait_before_signal(TimelineMechanism::Hybrid)
}

/// Events mechanism: waits on one thread while another thread enqueues the signals. Each wait
/// is either enqueued, or refused by name, and refused only if its signal was not enqueued
/// before the call; nothing is left held, and the stream goes on.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn events_waits_racing_signals_are_enqueued_or_refused() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let Some((_, b)) = with(TimelineMechanism::Events) else {
        return;
    };
    const N: u64 = 2000;
    let (waiter, signaller) = (b.new_stream("s").unwrap(), b.new_stream("s").unwrap());
    let (t, after) = (
        Timeline::new(&b, "t", 0).unwrap(),
        Timeline::new(&b, "after", 0).unwrap(),
    );
    let enqueued = Arc::new(AtomicU64::new(0));
    let (t2, signaller2, enqueued2) = (t.clone(), signaller.clone(), enqueued.clone());
    let signals = std::thread::spawn(move || {
        for v in 1..=N {
            t2.signal_on(&signaller2, v).unwrap();
            enqueued2.store(v, Ordering::SeqCst);
        }
    });
    let (mut accepted, mut refused) = (0u64, 0u64);
    for v in 1..=N {
        let before = enqueued.load(Ordering::SeqCst);
        match t.wait_on(&waiter, v) {
            Ok(()) => {
                accepted += 1;
                after.signal_on(&waiter, accepted).unwrap();
            }
            Err(Error::WaitBeforeSignalUnsupported { value, .. }) => {
                assert_eq!(value, v);
                assert!(
                    before < v,
                    "a wait for {v} refused with {before} enqueued before the call"
                );
                refused += 1;
            }
            Err(e) => panic!("wait for {v}: {e}"),
        }
    }
    signals.join().unwrap();
    println!("{accepted} waits enqueued, {refused} refused");
    // Every signal is enqueued now: a wait for the last is accepted.
    t.wait_on(&waiter, N).unwrap();
    after.signal_on(&waiter, accepted + 1).unwrap();
    after.wait(accepted + 1, LONG).unwrap();
    assert_eq!(t.query().unwrap(), N);
}

/// The timeline's stream calls bind no context for streams whose handles name theirs: they
/// must still order the kernels with no context, or another one, current on the thread.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn kernels_ordered_with_no_or_another_context_current() {
    use seqsync::cudarc::driver::sys;
    use seqsync::internal::backend::cuda::CudaContext;
    if common::gpu::gpu().is_none() {
        return;
    }
    let set = |raw: sys::CUcontext| {
        // SAFETY: `raw` is NULL (unbinds the thread) or a live context kept alive below.
        unsafe { sys::cuCtxSetCurrent(raw) }
            .result()
            .expect("cuCtxSetCurrent");
    };
    let other = CudaContext::new_non_primary(0, 0).expect("a second CUDA context");
    for m in [
        TimelineMechanism::Hybrid,
        TimelineMechanism::MemOps,
        TimelineMechanism::Events,
    ] {
        kernels_ordered_by_wait_before_signal_with(m, &|| set(std::ptr::null_mut()));
        kernels_ordered_by_wait_before_signal_with(m, &|| set(other.cu_ctx()));
    }
    set(std::ptr::null_mut());
}

/// Stream ids (which key the timelines' failure ledgers): one per stream, the same from every
/// thread, and never the id of a stream that was dropped, even at its address.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn stream_ids_are_stable_and_never_reused() {
    use seqsync::backend::Backend;
    let Some((_, b)) = with(TimelineMechanism::Auto) else {
        return;
    };
    let (s1, s2) = (b.new_stream("s").unwrap(), b.new_stream("s").unwrap());
    let (a, c) = (b.stream_id(&s1), b.stream_id(&s2));
    assert_ne!(a, c);
    assert_eq!(b.stream_id(&s1), a);
    let (b2, s1c) = (b.clone(), s1.clone());
    let from_other_thread = std::thread::spawn(move || b2.stream_id(&s1c))
        .join()
        .unwrap();
    assert_eq!(from_other_thread, a);
    drop(s1);
    let mut seen = std::collections::HashSet::from([a, c]);
    for _ in 0..64 {
        let s = b.new_stream("s").unwrap();
        let id = b.stream_id(&s);
        assert!(seen.insert(id), "stream id {id} given twice");
        assert_eq!(b.stream_id(&s), id);
    }
}

/// A failure releases every stream wait where the mechanism says it does
/// (`Mechanism::releases_every_wait_on_failure`: the default, stream memory operations), also a
/// wait whose signal is enqueued behind a stream that is stuck; with event waits
/// (`hybrid`, `events`) such a wait goes on once the stuck stream gets to the signal.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn a_failure_releases_the_waits_its_mechanism_says() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Instant;
    for m in [
        TimelineMechanism::Auto,
        TimelineMechanism::MemOps,
        TimelineMechanism::Hybrid,
        TimelineMechanism::Events,
    ] {
        let Some((g, b)) = with(m) else {
            return;
        };
        let x = Timeline::new(&b, "x", 0).unwrap();
        let (stuck, waiter) = (b.new_stream("s").unwrap(), b.new_stream("s").unwrap());
        g.spin(&stuck, Duration::from_millis(1500));
        x.signal_on(&stuck, 1).unwrap();
        x.wait_on(&waiter, 1).unwrap();
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        seqsync::backend::Backend::launch_host(
            &b,
            &waiter,
            Box::new(move || r.store(true, Ordering::SeqCst)),
        )
        .unwrap();
        let failed_at = Instant::now();
        x.fail(seqsync::Error::Cancelled("given up".into()));
        while !ran.load(Ordering::SeqCst) && failed_at.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let took = failed_at.elapsed();
        assert!(ran.load(Ordering::SeqCst), "{m:?}: never released");
        if x.mechanism().releases_every_wait_on_failure() {
            assert!(
                took < Duration::from_millis(500),
                "{m:?}: the failure released the wait only after {took:?}"
            );
        }
        println!("{m:?} ({}): released after {took:?}", x.mechanism());
        b.stream_synchronize(&stuck).unwrap();
        b.stream_synchronize(&waiter).unwrap();
    }
}

/// Events mechanism, two CUDA backends: a wait refused before its signal enqueues nothing, so
/// another backend's signal on the stream is not held; a wait enqueued after its signal holds
/// another backend's signal behind it on the stream.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn an_events_wait_holds_another_backends_signal_on_its_stream() {
    let Some((g, a)) = with(TimelineMechanism::Events) else {
        return;
    };
    let other = CudaBackend::new(0)
        .unwrap()
        .with_timeline_mechanism(TimelineMechanism::Events);
    let (s, sig) = (a.new_stream("s").unwrap(), a.new_stream("sig").unwrap());
    let (ta, tb) = (
        Timeline::new(&a, "a", 0).unwrap(),
        Timeline::new(&other, "b", 0).unwrap(),
    );
    common::assert_wait_refused(ta.wait_on(&s, 1));
    tb.signal_on(&s, 1).unwrap();
    tb.wait(1, Duration::from_secs(5))
        .expect("another backend's signal was held by a refused wait");
    assert_eq!(ta.query().unwrap(), 0);
    g.spin(&sig, Duration::from_millis(300));
    ta.signal_on(&sig, 1).unwrap();
    ta.wait_on(&s, 1).unwrap();
    tb.signal_on(&s, 2).unwrap();
    tb.wait(2, LONG).unwrap();
    assert_eq!(
        ta.query().unwrap(),
        1,
        "another backend's signal ran past the wait"
    );
}

/// While a stream waits for a value only the host will store later, `cuMemFree` and
/// `cuMemFreeHost` wait for the device to drain (and hold a driver lock that blocks other
/// threads' calls): a buffer dropped then must not free at once, or the thread that would store
/// the value hangs behind it. The drop returns at once; the buffer's memory is freed (or
/// reused) once the wait is past. Every mechanism that holds such a wait (the events
/// mechanism refuses it, nothing enqueued: nothing to block on).
fn a_buffer_dropped_while_a_stream_waits_on_the_host_does_not_block(m: TimelineMechanism) {
    let Some((_g, b)) = with(m) else {
        return;
    };
    let s = b.new_stream("s").unwrap();
    let t = Timeline::new(&b, "later", 0).unwrap();
    let r = t.wait_on(&s, 1);
    if !t.mechanism().holds_commands() {
        // A mechanism that cannot hold a wait before its signal refuses it (named error).
        common::assert_wait_refused(r);
        return;
    }
    r.unwrap();
    let (device, pinned) = (
        b.alloc_device(1 << 16).unwrap(),
        b.alloc_pinned(1 << 16).unwrap(),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let dropper = std::thread::spawn(move || {
        drop(device);
        drop(pinned);
        tx.send(()).unwrap();
    });
    let returned = rx.recv_timeout(Duration::from_secs(2)).is_ok();
    t.signal(1).unwrap();
    dropper.join().unwrap();
    assert!(returned, "{m:?}: a drop blocked until the host signalled");
    b.stream_synchronize(&s).unwrap();
    // The memory is usable again: an allocation of the same size gets it back or a new one.
    let again = b.alloc_pinned(1 << 16).unwrap();
    // SAFETY: no copy uses the fresh buffer.
    let words = unsafe { again.as_slice() };
    assert!(words.iter().all(|&w| w == 0), "pinned memory comes zeroed");
    drop((again, b.alloc_device(1 << 16).unwrap()));
}

macro_rules! per_mechanism {
    ($case:ident: $($name:ident: $m:expr),* $(,)?) => {$(
        #[test]
        #[cfg_attr(not(feature = "gpu-tests"), ignore = "needs a GPU: cargo test --features gpu-tests")]
        fn $name() {
            $case($m)
        }
    )*};
}

per_mechanism!(a_buffer_dropped_while_a_stream_waits_on_the_host_does_not_block:
    a_buffer_dropped_while_a_stream_waits_on_the_host_does_not_block_memops: TimelineMechanism::MemOps,
    a_buffer_dropped_while_a_stream_waits_on_the_host_does_not_block_hybrid: TimelineMechanism::Hybrid,
    a_buffer_dropped_while_a_stream_waits_on_the_host_does_not_block_events: TimelineMechanism::Events,
);

/// `true` if work enqueued on `stream` now runs within `within` (a host closure behind
/// whatever `stream` waits for); a stream that never gets there is left waiting.
fn runs_within(
    b: &CudaBackend,
    stream: &std::sync::Arc<seqsync::cudarc::driver::CudaStream>,
    within: Duration,
) -> bool {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let ran = Arc::new(AtomicBool::new(false));
    let r = ran.clone();
    seqsync::backend::Backend::launch_host(
        b,
        stream,
        Box::new(move || r.store(true, Ordering::SeqCst)),
    )
    .unwrap();
    let start = std::time::Instant::now();
    while !ran.load(Ordering::SeqCst) && start.elapsed() < within {
        std::thread::sleep(Duration::from_millis(1));
    }
    ran.load(Ordering::SeqCst)
}

/// A host signal made while a lower signal is still pending on a stream, then a higher signal
/// on another stream: whatever order the writes land in, the timeline ends at the highest
/// value, and stream waits for it (enqueued before and after) are released. (memops
/// wrote the host's value again behind the pending write, which then landed after the higher
/// one: the word ended at 103 and the waits for 104 never ran.)
fn a_host_signal_between_stream_signals_leaves_the_highest_value(m: TimelineMechanism) {
    let Some((g, b)) = with(m) else {
        return;
    };
    let gate = Timeline::new(&b, "gate", 0).unwrap();
    let t = Timeline::new(&b, "t", 0).unwrap();
    let [s1, s2, w1, w2] = [(); 4].map(|()| b.new_stream("s").unwrap());
    if t.mechanism().holds_commands() {
        // Waits enqueued before any signal: on the word, where the mechanism has one.
        t.wait_on(&w1, 1).unwrap();
        t.wait_on(&w2, 104).unwrap();
        gate.wait_on(&s1, 1).unwrap();
        t.signal_on(&s1, 1).unwrap();
        t.signal(103).unwrap();
        t.signal_on(&s2, 104).unwrap();
        b.stream_synchronize(&s2).unwrap();
        // Only now does s1's write of 1 land.
        gate.signal(1).unwrap();
        b.stream_synchronize(&s1).unwrap();
    } else {
        // Events: waits before their signals are refused, nothing enqueued. s1's signal of 1
        // is held back by slow work instead, and each wait follows its signal.
        common::assert_wait_refused(t.wait_on(&w1, 1));
        common::assert_wait_refused(t.wait_on(&w2, 104));
        common::assert_wait_refused(gate.wait_on(&s1, 1));
        g.spin(&s1, Duration::from_millis(300));
        t.signal_on(&s1, 1).unwrap();
        t.wait_on(&w1, 1).unwrap();
        t.signal(103).unwrap();
        t.signal_on(&s2, 104).unwrap();
        t.wait_on(&w2, 104).unwrap();
        b.stream_synchronize(&s2).unwrap();
        // Only now does s1's signal of 1 land.
        b.stream_synchronize(&s1).unwrap();
    }
    let w3 = b.new_stream("s").unwrap();
    t.wait_on(&w3, 104).unwrap();
    let released = [&w1, &w2, &w3].map(|w| runs_within(&b, w, Duration::from_secs(5)));
    assert_eq!(
        released, [true; 3],
        "{m:?}: stream waits for 1, 104 (before) and 104 (after) released"
    );
    assert_eq!(t.query().unwrap(), 104);
}

/// Signals of one timeline on two streams, the lower one behind a wait that the other stream
/// releases later: legal (each value exceeds those enqueued before it), and neither stream may
/// wait for the other's signal. (memops made the higher signal wait on the device for
/// the lower one, so that writes landed in value order: here that is a deadlock.)
fn signals_on_two_streams_do_not_make_one_wait_for_the_other(m: TimelineMechanism) {
    let Some((g, b)) = with(m) else {
        return;
    };
    let gate = Timeline::new(&b, "gate", 0).unwrap();
    let t = Timeline::new(&b, "t", 0).unwrap();
    let (s1, s2) = (b.new_stream("s").unwrap(), b.new_stream("s").unwrap());
    if !t.mechanism().holds_commands() {
        // Events: the gate's wait before its signal is refused, nothing enqueued. The lower
        // signal is held back by 3 s of work instead: the higher one, on the other stream,
        // must land well before that.
        common::assert_wait_refused(gate.wait_on(&s1, 1));
        g.spin(&s1, Duration::from_secs(3));
        t.signal_on(&s1, 1).unwrap();
        t.signal_on(&s2, 5).unwrap();
        let reached = t.wait(5, Duration::from_millis(1500));
        assert!(
            reached.is_ok(),
            "{m:?}: {reached:?}: s2 waited for s1's signal"
        );
        b.stream_synchronize(&s1).unwrap();
        assert_eq!(t.query().unwrap(), 5);
        let w = b.new_stream("s").unwrap();
        t.wait_on(&w, 5).unwrap();
        assert!(
            runs_within(&b, &w, Duration::from_secs(5)),
            "{m:?}: a wait for 5 after both landed"
        );
        return;
    }
    gate.wait_on(&s1, 1).unwrap();
    t.signal_on(&s1, 1).unwrap();
    t.signal_on(&s2, 5).unwrap();
    gate.signal_on(&s2, 1).unwrap();
    let reached = t.wait(5, Duration::from_secs(5));
    if reached.is_err() {
        // Unblock the streams before failing: a host signal above everything enqueued.
        t.signal(6).unwrap();
    }
    assert!(
        reached.is_ok(),
        "{m:?}: {reached:?}: s2 waited for s1's signal"
    );
    gate.wait(1, LONG).unwrap();
    b.stream_synchronize(&s1).unwrap();
    assert_eq!(t.query().unwrap(), 5);
    let w = b.new_stream("s").unwrap();
    t.wait_on(&w, 5).unwrap();
    assert!(
        runs_within(&b, &w, Duration::from_secs(5)),
        "{m:?}: a wait for 5 after both landed"
    );
}

/// A failure after the value was reached releases a stream wait for that value that the stream
/// has not got to yet. (The failed word `2^63 | c` released, under the device's cyclic `>=`,
/// only the values above `c`: a wait for a value at or below `c` that ran after the failure
/// waited forever.)
fn a_failure_releases_a_pending_wait_for_a_value_reached_before(m: TimelineMechanism) {
    let Some((g, b)) = with(m) else {
        return;
    };
    let t = Timeline::new(&b, "t", 0).unwrap();
    let s = b.new_stream("s").unwrap();
    g.spin(&s, Duration::from_millis(300));
    if t.mechanism().holds_commands() {
        t.wait_on(&s, 1).unwrap();
        t.signal(1).unwrap();
    } else {
        // Events: refused before its signal (nothing enqueued); enqueued after a signal on
        // another stream, which lands while `s` is still busy.
        common::assert_wait_refused(t.wait_on(&s, 1));
        let sig = b.new_stream("sig").unwrap();
        t.signal_on(&sig, 1).unwrap();
        t.wait_on(&s, 1).unwrap();
        t.wait(1, LONG).unwrap();
    }
    t.fail(seqsync::Error::Cancelled("given up".into()));
    assert!(
        runs_within(&b, &s, Duration::from_secs(5)),
        "{m:?}: the wait for 1 (reached, then failed) never released its stream"
    );
}

per_mechanism!(a_host_signal_between_stream_signals_leaves_the_highest_value:
    a_host_signal_between_stream_signals_leaves_the_highest_value_memops: TimelineMechanism::MemOps,
    a_host_signal_between_stream_signals_leaves_the_highest_value_hybrid: TimelineMechanism::Hybrid,
    a_host_signal_between_stream_signals_leaves_the_highest_value_events: TimelineMechanism::Events,
);

per_mechanism!(signals_on_two_streams_do_not_make_one_wait_for_the_other:
    signals_on_two_streams_do_not_make_one_wait_for_the_other_memops: TimelineMechanism::MemOps,
    signals_on_two_streams_do_not_make_one_wait_for_the_other_hybrid: TimelineMechanism::Hybrid,
    signals_on_two_streams_do_not_make_one_wait_for_the_other_events: TimelineMechanism::Events,
);

per_mechanism!(a_failure_releases_a_pending_wait_for_a_value_reached_before:
    a_failure_releases_a_pending_wait_for_a_value_reached_before_memops: TimelineMechanism::MemOps,
    a_failure_releases_a_pending_wait_for_a_value_reached_before_hybrid: TimelineMechanism::Hybrid,
    a_failure_releases_a_pending_wait_for_a_value_reached_before_events: TimelineMechanism::Events,
);

/// A host timeline and a CUDA stream (one `AnyBackend` of each kind): the backend refuses
/// the signal, and the refusal changes nothing: the value is still free for a host signal.
#[test]
#[cfg_attr(
    not(feature = "gpu-tests"),
    ignore = "needs a GPU: cargo test --features gpu-tests"
)]
fn a_signal_on_a_stream_of_another_backend_is_refused_and_changes_nothing() {
    use seqsync::{AnyBackend, BackendKind};
    if common::gpu::gpu().is_none() {
        return;
    }
    let host = AnyBackend::new(BackendKind::Host).unwrap();
    let cuda = AnyBackend::new(BackendKind::Cuda).unwrap();
    let t = Timeline::new(&host, "t", 0).unwrap();
    let cs = cuda.new_stream("c").unwrap();
    assert!(t.signal_on(&cs, 1).is_err());
    assert!(t.wait_on(&cs, 1).is_err());
    t.signal(1).unwrap();
    // A timeline dropped with a host stream waiting for a value only the refused signal
    // would have brought: it fails the wait instead of keeping it.
    let t = Timeline::new(&host, "t2", 0).unwrap();
    let after = Timeline::new(&host, "after", 0).unwrap();
    let hs = host.new_stream("h").unwrap();
    t.wait_on(&hs, 1).unwrap();
    after.signal_on(&hs, 1).unwrap();
    assert!(t.signal_on(&cs, 1).is_err());
    drop(t);
    let r = after.wait(1, LONG);
    assert!(
        matches!(
            r.as_ref().map_err(|e| e.root_cause()),
            Err(seqsync::Error::TimelineDropped { .. })
        ),
        "{r:?}"
    );
}
