//! Property tests of the ring against its contract.
//!
//! - `ring_matches_sequential_model`: random sequences of record / wait / synchronize / stop,
//!   each call made from one of several threads but one at a time, non-blocking, checked call
//!   by call against a small sequential model.
//! - `concurrent_blocking_calls_keep_the_contract`: a producer and up to three consumers run
//!   *at once*, with blocking calls, `synchronize_with_producer` and stops, on a chaos host
//!   backend, under a watchdog. It fails on a lost wake-up (the run hangs), on more than
//!   `max_size` seqs in flight, and on a wait that does not order the consumer's work (each
//!   checked by breaking the ring on purpose: see the tests in docs/ARCHITECTURE.md).

use std::sync::mpsc;

use proptest::prelude::*;
use seqsync::backend::host::HostStream;
use seqsync::{Blocking, Error, EventRingbuf, HostBackend};

#[derive(Debug, Clone, Copy)]
enum Op {
    /// record the next seq (plus `skew`, usually 0).
    Record {
        skew: i64,
    },
    /// wait on `next - 1 - back` (back may be negative: not produced yet).
    Wait {
        back: i64,
    },
    /// synchronize on `next - 1 - back`.
    Sync {
        back: i64,
    },
    Stop,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => prop_oneof![9 => Just(0i64), 1 => -2i64..3].prop_map(|skew| Op::Record { skew }),
        4 => (-1i64..5).prop_map(|back| Op::Wait { back }),
        3 => (-1i64..5).prop_map(|back| Op::Sync { back }),
        1 => Just(Op::Stop),
    ]
}

/// What the contract says a call returns, as a short name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Ok,
    OutOfOrder,
    Overflow,
    NotYetProduced,
    Stale,
    OverConsumed,
    Stopped,
}

fn outcome(r: &Result<(), Error>) -> Outcome {
    match r {
        Ok(()) => Outcome::Ok,
        Err(Error::OutOfOrder { .. }) => Outcome::OutOfOrder,
        Err(Error::Overflow { .. }) => Outcome::Overflow,
        Err(Error::NotYetProduced { .. }) => Outcome::NotYetProduced,
        Err(Error::Stale { .. }) => Outcome::Stale,
        Err(Error::OverConsumed { .. }) => Outcome::OverConsumed,
        Err(Error::Stopped { .. }) => Outcome::Stopped,
        Err(e) => panic!("unexpected error {e}"),
    }
}

/// The sequential model: per slot, the seq it holds and how many consumers took it.
struct Model {
    n: u32,
    m: usize,
    next: i64,
    slots: Vec<(i64, u32)>,
    stopped: bool,
}

impl Model {
    fn new(n: u32, m: usize) -> Self {
        Model {
            n,
            m,
            next: 0,
            slots: (0..m).map(|i| (i as i64 - m as i64, n)).collect(),
            stopped: false,
        }
    }

    fn fail(&mut self, o: Outcome) -> Outcome {
        self.stopped = true;
        o
    }

    fn record(&mut self, seq: i64) -> Outcome {
        if self.stopped {
            return Outcome::Stopped;
        }
        if seq != self.next {
            return self.fail(Outcome::OutOfOrder);
        }
        if self.n > 0 {
            let i = seq as usize % self.m;
            if self.slots[i].1 < self.n {
                return self.fail(Outcome::Overflow);
            }
            self.slots[i] = (seq, 0);
        }
        self.next += 1;
        Outcome::Ok
    }

    fn consume(&mut self, seq: i64) -> Outcome {
        if self.stopped {
            return Outcome::Stopped;
        }
        if seq < 0 {
            return Outcome::Ok;
        }
        if self.n == 0 {
            return self.fail(Outcome::OverConsumed);
        }
        let i = seq as usize % self.m;
        let (held, taken) = self.slots[i];
        if held == seq {
            if taken >= self.n {
                return self.fail(Outcome::OverConsumed);
            }
            self.slots[i].1 += 1;
            Outcome::Ok
        } else if held > seq {
            self.fail(Outcome::Stale)
        } else {
            self.fail(Outcome::NotYetProduced)
        }
    }
}

type Job = Box<dyn FnOnce(&HostStream) -> Result<(), Error> + Send>;

/// A thread with its own stream that runs the calls it is handed, one at a time.
struct Worker {
    jobs: mpsc::Sender<Job>,
    results: mpsc::Receiver<Result<(), Error>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    fn new(host: &HostBackend, k: usize) -> Self {
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (res_tx, results) = mpsc::channel();
        let stream = host.new_stream(&format!("worker{k}")).unwrap();
        let handle = std::thread::spawn(move || {
            for job in job_rx {
                res_tx.send(job(&stream)).unwrap();
            }
        });
        Worker {
            jobs,
            results,
            handle: Some(handle),
        }
    }

    fn call(&self, job: Job) -> Result<(), Error> {
        self.jobs.send(job).unwrap();
        self.results.recv().unwrap()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let (tx, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.jobs, tx));
        if let Some(h) = self.handle.take() {
            h.join().unwrap();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn ring_matches_sequential_model(
        nconsumers in 0u32..4,
        max_size in 1usize..4,
        ops in prop::collection::vec((0usize..3, op()), 1..40),
    ) {
        let host = HostBackend::new();
        let ring = std::sync::Arc::new(EventRingbuf::new(&host, "p", nconsumers, max_size).unwrap());
        let workers: Vec<Worker> = (0..3).map(|k| Worker::new(&host, k)).collect();
        let mut model = Model::new(nconsumers, max_size);
        for (step, (thread, op)) in ops.into_iter().enumerate() {
            let r = ring.clone();
            let (expected, job): (Outcome, Job) = match op {
                Op::Record { skew } => {
                    let seq = model.next + skew;
                    (model.record(seq), Box::new(move |s| r.record(s, seq, Blocking::No)))
                }
                Op::Wait { back } => {
                    let seq = model.next - 1 - back;
                    (model.consume(seq), Box::new(move |s| r.wait(s, seq, Blocking::No)))
                }
                Op::Sync { back } => {
                    let seq = model.next - 1 - back;
                    (model.consume(seq), Box::new(move |_| r.synchronize(seq, Blocking::No)))
                }
                Op::Stop => {
                    model.stopped = true;
                    (Outcome::Ok, Box::new(move |_| { r.stop("test"); Ok(()) }))
                }
            };
            let got = outcome(&workers[thread].call(job));
            prop_assert_eq!(got, expected, "step {} ({:?} on thread {})", step, op, thread);
        }
    }
}

// ---- concurrent, blocking interleavings ---------------------------------------------------

/// How one consumer thread takes one seq.
#[derive(Debug, Clone, Copy)]
enum Take {
    /// `wait(seq, Blocking::Yes)`, then stream work that must see the producer's work.
    Wait,
    /// `synchronize(seq, Blocking::Yes)`, then a host check of the producer's work.
    Sync,
    /// `synchronize_with_producer(seq)`, after which `wait(seq, Blocking::No)` must succeed.
    WaitAfterProducer,
    /// `synchronize_with_producer(seq)`, then `synchronize(seq, Blocking::No)`.
    SyncAfterProducer,
}

fn take() -> impl Strategy<Value = Take> {
    prop_oneof![
        Just(Take::Wait),
        Just(Take::Sync),
        Just(Take::WaitAfterProducer),
        Just(Take::SyncAfterProducer),
    ]
}

const NSEQ: i64 = 24;

/// What one consumer thread saw: the seqs it took, then the error that ended it (if any).
#[derive(Debug, Default)]
struct Seen {
    taken: Vec<i64>,
    ended: Option<(i64, Error)>,
    /// Errors after the ring stopped that were not `Stopped`.
    after_stop: Vec<String>,
}

/// Runs the producer and one thread per plan at once on a chaos host backend, all calls
/// blocking where they may; the producer stops the ring after recording `stop_after`, if set.
/// Returns what each consumer saw, the most seqs ever in flight (counted independently of
/// the ring: see `ring_stress.rs`) and the number of reads that ran before their data.
fn run_concurrently(
    max_size: usize,
    plans: Vec<Vec<Take>>,
    stop_after: Option<i64>,
    seed: u64,
) -> (Vec<Seen>, i64, i64) {
    use std::sync::atomic::{AtomicI64, Ordering::SeqCst};
    use std::sync::Arc;
    let host = HostBackend::with_chaos(seqsync::backend::host::Chaos {
        seed,
        max_delay: std::time::Duration::from_micros(30),
    });
    let ring = EventRingbuf::new(&host, "c", plans.len() as u32, max_size).unwrap();
    let produced = Arc::new(AtomicI64::new(0));
    let misordered = Arc::new(AtomicI64::new(0));
    let announced: Vec<AtomicI64> = plans.iter().map(|_| AtomicI64::new(0)).collect();
    let mut max_live = 0;
    let seen = std::thread::scope(|scope| {
        let consumers: Vec<_> = plans
            .iter()
            .enumerate()
            .map(|(k, plan)| {
                let (ring, host, produced, misordered) =
                    (&ring, host.clone(), produced.clone(), misordered.clone());
                let announced = &announced[k];
                scope.spawn(move || {
                    let stream = host.new_stream(&format!("consumer{k}")).unwrap();
                    let mut seen = Seen::default();
                    for (seq, take) in (0..NSEQ).zip(plan.iter().cycle()) {
                        host.chaos_pause();
                        announced.store(seq + 1, SeqCst);
                        let r = match take {
                            Take::Wait => ring.wait(&stream, seq, Blocking::Yes).map(|()| {
                                let (p, m) = (produced.clone(), misordered.clone());
                                stream.launch(move || {
                                    if p.load(SeqCst) <= seq {
                                        m.fetch_add(1, SeqCst);
                                    }
                                });
                            }),
                            Take::Sync => ring.synchronize(seq, Blocking::Yes).map(|()| {
                                if produced.load(SeqCst) <= seq {
                                    misordered.fetch_add(1, SeqCst);
                                }
                            }),
                            Take::WaitAfterProducer => ring
                                .synchronize_with_producer(seq)
                                .and_then(|()| ring.wait(&stream, seq, Blocking::No)),
                            Take::SyncAfterProducer => ring
                                .synchronize_with_producer(seq)
                                .and_then(|()| ring.synchronize(seq, Blocking::No)),
                        };
                        match r {
                            Ok(()) => seen.taken.push(seq),
                            Err(e) => {
                                // Once stopped, every call fails with Stopped.
                                for e in [
                                    ring.wait(&stream, seq, Blocking::Yes),
                                    ring.synchronize(seq, Blocking::No),
                                    ring.synchronize_with_producer(seq),
                                ]
                                .into_iter()
                                .filter_map(|r| r.err())
                                .filter(|e| !e.is_stopped())
                                {
                                    seen.after_stop.push(e.to_string());
                                }
                                seen.ended = Some((seq, e));
                                break;
                            }
                        }
                    }
                    stream.synchronize().unwrap();
                    seen
                })
            })
            .collect();
        let producer = host.new_stream("producer").unwrap();
        for seq in 0..NSEQ {
            host.chaos_pause();
            let p = produced.clone();
            producer.launch(move || p.store(seq + 1, SeqCst));
            if ring.record(&producer, seq, Blocking::Yes).is_err() {
                break;
            }
            let released = announced.iter().map(|a| a.load(SeqCst)).min().unwrap();
            max_live = max_live.max(seq + 1 - released);
            if stop_after == Some(seq) {
                ring.stop("test stop");
                break;
            }
        }
        producer.synchronize().unwrap();
        consumers
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    (seen, max_live, misordered.load(SeqCst))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]
    /// One producer and up to three consumer threads run at once, every call blocking where it
    /// may, on a chaos host backend: every call succeeds (or, after a stop, fails with
    /// `Stopped` and only that), each read sees its data, at most `max_size` seqs are ever in
    /// flight, and nothing hangs (a watchdog fails the case after 20 s).
    #[test]
    fn concurrent_blocking_calls_keep_the_contract(
        max_size in 1usize..4,
        plans in prop::collection::vec(prop::collection::vec(take(), 1..6), 1..4),
        stop_after in prop::option::weighted(0.3, 0i64..NSEQ),
        seed in any::<u64>(),
    ) {
        let nconsumers = plans.len();
        let (tx, rx) = mpsc::channel();
        let p = plans.clone();
        std::thread::spawn(move || {
            let _ = tx.send(run_concurrently(max_size, p, stop_after, seed));
        });
        let (seen, max_live, misordered) = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("the run hung: a blocked call was never woken");
        prop_assert_eq!(misordered, 0, "a read ran before the producer's work");
        prop_assert!(max_live <= max_size as i64, "{} in flight, max_size {}", max_live, max_size);
        prop_assert_eq!(seen.len(), nconsumers);
        for (k, s) in seen.iter().enumerate() {
            prop_assert!(s.after_stop.is_empty(), "consumer {}: {:?}", k, s.after_stop);
            let last = s.taken.last().copied().unwrap_or(-1);
            prop_assert_eq!(&s.taken, &(0..=last).collect::<Vec<_>>());
            match (&s.ended, stop_after) {
                (None, _) => prop_assert_eq!(last, NSEQ - 1),
                (Some((seq, e)), Some(stop)) => {
                    prop_assert!(e.is_stopped(), "consumer {} seq {}: {}", k, seq, e);
                    prop_assert!(last <= stop, "consumer {} took seq {} after the stop at {}", k, last, stop);
                }
                (Some((seq, e)), None) => prop_assert!(false, "consumer {} seq {}: {}", k, seq, e),
            }
        }
    }
}
