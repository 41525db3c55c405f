//! Replays of one instantiated graph run one at a time, in launch order, on whichever
//! streams: as `cuGraphLaunch` orders each launch after every earlier launch of the same
//! executable graph, the host backend's replays do too (a read-modify-write node counts every
//! replay).
use std::time::Duration;

use seqsync::backend::CommandBackend;
use seqsync::graph::{Affinity, CommandBuffer, Queues};
use seqsync::internal::backend::host::HostKernel;
use seqsync::HostBackend;

#[test]
fn replays_of_one_graph_do_not_overlap() {
    let host = HostBackend::new();
    let m = host.alloc_words(1).unwrap();
    let mm = m.clone();
    let mut cb = CommandBuffer::<HostBackend>::new();
    cb.kernel(
        "increment",
        HostKernel::new(move || {
            let v = mm.lock()[0];
            std::thread::sleep(Duration::from_millis(20));
            mm.lock()[0] = v + 1;
        }),
        &[],
    );
    let exe = cb.finish().unwrap().instantiate(&host).unwrap();
    let mut q = Queues::new(host.clone());
    for _ in 0..8 {
        q.submit_graph(&exe, Affinity::ANY).unwrap();
    }
    q.synchronize().unwrap();
    assert_eq!(host.read_words(&m).unwrap(), [8], "replays overlapped");

    let (s1, s2) = (
        host.new_stream("s1").unwrap(),
        host.new_stream("s2").unwrap(),
    );
    exe.launch(&s1).unwrap();
    exe.launch(&s2).unwrap();
    s1.synchronize().unwrap();
    s2.synchronize().unwrap();
    assert_eq!(host.read_words(&m).unwrap(), [10], "replays overlapped");
}
