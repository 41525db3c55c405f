//! A host stream that failed (a closure panicked) before a signal fails that timeline, and
//! the failure spreads before the failed word releases any wait on it: work after a wait on it,
//! enqueued before the failure, fails the timelines it signals; an unrelated timeline does not.
use std::time::Duration;

use seqsync::timeline::Timeline;
use seqsync::HostBackend;

const LONG: Duration = Duration::from_secs(10);

#[test]
fn a_stream_panic_spreads_through_a_wait_enqueued_before_it() {
    let host = HostBackend::new();
    let (a, b, c) = (
        host.new_stream("a").unwrap(),
        host.new_stream("b").unwrap(),
        host.new_stream("c").unwrap(),
    );
    let t = Timeline::new(&host, "t", 0).unwrap();
    let u = Timeline::new(&host, "u", 0).unwrap();
    let unrelated = Timeline::new(&host, "unrelated", 0).unwrap();
    a.launch(|| {
        std::thread::sleep(Duration::from_millis(100));
        panic!("kernel fault");
    });
    t.signal_on(&a, 1).unwrap(); // fails t when `a` gets there (after the panic)
    t.wait_on(&b, 1).unwrap(); // enqueued before the panic: t is still healthy
    u.signal_on(&b, 1).unwrap(); // after the wait: must fail
    unrelated.signal_on(&c, 1).unwrap();
    // Nobody observes `t` before `u`'s signal would land.
    let r = u.wait(1, LONG);
    assert!(t.is_failed(), "t must be failed by the panic");
    let err = r.expect_err(
        "u reached 1: b ran past its wait on t (released by t's failed word) and u's signal \
         landed as a success",
    );
    assert!(err.to_string().contains("kernel fault"), "{err}");
    // And it stays failed (not only a race of the first look).
    assert!(u.query().is_err());
    unrelated.wait(1, LONG).unwrap();
    a.synchronize().unwrap_err();
    b.synchronize().unwrap();
}
