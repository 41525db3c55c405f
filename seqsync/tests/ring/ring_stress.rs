//! Stress: one producer, three consumer threads on three other streams, 100 000 seqs, chaos
//! delays on every stream operation.
//!
//! The bound check counts on its own, not through the ring: each consumer announces a seq
//! *before* its wait on it, so the announced seqs bound the released ones from above, and
//! after recording seq s the producer checks `s + 1 - min(announced) <= max_size` — a lower
//! bound of what the ring holds unreleased. A ring that lets more than `max_size` seqs be in
//! flight fails it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use seqsync::backend::host::Chaos;
use seqsync::{Blocking, EventRingbuf, HostBackend};

const NSEQ: i64 = 100_000;
const MAX_SIZE: usize = 4;

#[test]
fn three_consumers_see_every_seq_once_in_order() {
    let host = HostBackend::with_chaos(Chaos {
        seed: 0x5eed,
        max_delay: Duration::from_micros(20),
    });
    let ring = EventRingbuf::new(&host, "stress", 3, MAX_SIZE).unwrap();
    // Written by the producer stream's closure of seq s: s + 1.
    let produced = Arc::new(AtomicI64::new(0));
    let max_live = AtomicI64::new(0);
    // Per consumer: the seq it is about to wait on (0 before its first wait).
    let announced: Vec<AtomicI64> = (0..3).map(|_| AtomicI64::new(0)).collect();
    let logs: Vec<Arc<Mutex<Vec<i64>>>> =
        (0..3).map(|_| Arc::new(Mutex::new(Vec::new()))).collect();
    let misordered = Arc::new(AtomicI64::new(0));

    std::thread::scope(|scope| {
        for (c, log) in logs.iter().enumerate() {
            let (ring, produced, log, misordered) =
                (&ring, produced.clone(), log.clone(), misordered.clone());
            let announced = &announced[c];
            let host = host.clone();
            scope.spawn(move || {
                let stream = host.new_stream(&format!("consumer{c}")).unwrap();
                for seq in 0..NSEQ {
                    // Before the wait: seqs below `seq + 1` may be released from here on.
                    announced.store(seq + 1, Ordering::SeqCst);
                    ring.wait(&stream, seq, Blocking::Yes).unwrap();
                    let (produced, log, misordered) =
                        (produced.clone(), log.clone(), misordered.clone());
                    stream.launch(move || {
                        // The wait ordered this after the producer's closure for `seq`.
                        if produced.load(Ordering::SeqCst) < seq + 1 {
                            misordered.fetch_add(1, Ordering::SeqCst);
                        }
                        log.lock().unwrap().push(seq);
                    });
                }
                stream.synchronize().unwrap();
            });
        }
        let producer = host.new_stream("producer").unwrap();
        for seq in 0..NSEQ {
            let p = produced.clone();
            producer.launch(move || p.store(seq + 1, Ordering::SeqCst));
            ring.record(&producer, seq, Blocking::Yes).unwrap();
            // Released by every consumer: at most the least announced count.
            let released = announced
                .iter()
                .map(|a| a.load(Ordering::SeqCst))
                .min()
                .unwrap();
            max_live.fetch_max(seq + 1 - released, Ordering::Relaxed);
        }
        producer.synchronize().unwrap();
    });

    assert_eq!(
        misordered.load(Ordering::SeqCst),
        0,
        "a consumer ran before its seq was produced"
    );
    for log in &logs {
        let log = log.lock().unwrap();
        assert_eq!(log.len(), NSEQ as usize);
        assert!(
            log.iter().enumerate().all(|(i, &s)| s == i as i64),
            "a consumer saw seqs out of order"
        );
    }
    let max_live = max_live.load(Ordering::Relaxed);
    assert!(
        max_live <= MAX_SIZE as i64,
        "{max_live} seqs recorded and not released, max_size {MAX_SIZE}"
    );
    // The check can bite: the producer ran ahead of the consumers to the full bound.
    assert_eq!(
        max_live, MAX_SIZE as i64,
        "the producer never filled the ring"
    );
    assert_eq!(ring.unreleased(), 0);
}
