//! Property test: random interleavings of record / wait / synchronize / stop, each call made
//! from one of several threads, checked call by call against a small sequential model of the
//! contract.

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
        let stream = host.new_stream(&format!("worker{k}"));
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
