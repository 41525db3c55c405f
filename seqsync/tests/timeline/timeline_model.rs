//! Random sequences of timeline calls on the host backend, against a sequential model of the
//! contract (value, highest enqueued value, failure).

use std::time::Duration;

use proptest::prelude::*;
use seqsync::timeline::{Timeline, MAX_VALUE};
use seqsync::{Error, HostBackend};

#[derive(Debug, Clone)]
enum Op {
    Signal(u64),
    /// `signal_on` a stream, then a host wait for that value.
    SignalOn(u64),
    /// A wait with no time to wait.
    Poll(u64),
    Query,
    Fail,
}

fn value() -> impl Strategy<Value = u64> {
    prop_oneof![9 => 0u64..24, 1 => Just(MAX_VALUE), 1 => Just(MAX_VALUE + 1)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => value().prop_map(Op::Signal),
        2 => value().prop_map(Op::SignalOn),
        3 => value().prop_map(Op::Poll),
        1 => Just(Op::Query),
        1 => Just(Op::Fail),
    ]
}

/// The contract, sequentially.
#[derive(Debug, Default)]
struct Model {
    value: u64,
    failed_at: Option<u64>,
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Ok(Option<u64>),
    OutOfRange,
    NonMonotonic { current: u64, got: u64 },
    Timeout,
    Failed { value: u64 },
}

impl Model {
    fn apply(&mut self, op: &Op) -> Outcome {
        let range = |v: u64| v > MAX_VALUE;
        match *op {
            Op::Signal(v) | Op::SignalOn(v) => {
                if range(v) {
                    Outcome::OutOfRange
                } else if let Some(value) = self.failed_at {
                    Outcome::Failed { value }
                } else if v <= self.value {
                    Outcome::NonMonotonic {
                        current: self.value,
                        got: v,
                    }
                } else {
                    self.value = v;
                    Outcome::Ok(None)
                }
            }
            Op::Poll(v) => {
                if range(v) {
                    Outcome::OutOfRange
                } else if let Some(value) = self.failed_at {
                    Outcome::Failed { value }
                } else if v <= self.value {
                    Outcome::Ok(None)
                } else {
                    Outcome::Timeout
                }
            }
            Op::Query => match self.failed_at {
                Some(value) => Outcome::Failed { value },
                None => Outcome::Ok(Some(self.value)),
            },
            Op::Fail => {
                self.failed_at.get_or_insert(self.value);
                Outcome::Ok(None)
            }
        }
    }
}

fn outcome(r: seqsync::Result<Option<u64>>) -> Outcome {
    match r {
        Ok(v) => Outcome::Ok(v),
        Err(Error::ValueOutOfRange { .. }) => Outcome::OutOfRange,
        Err(Error::NonMonotonic { current, got, .. }) => Outcome::NonMonotonic { current, got },
        Err(Error::Timeout { .. }) => Outcome::Timeout,
        Err(Error::TimelineFailed { value, .. }) => Outcome::Failed { value },
        Err(e) => panic!("unexpected error {e}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn timeline_matches_the_sequential_model(initial in 0u64..8, ops in prop::collection::vec(op(), 1..40)) {
        let host = HostBackend::new();
        let stream = host.new_stream("s").unwrap();
        let t = Timeline::new(&host, "t", initial).unwrap();
        let mut m = Model { value: initial, failed_at: None };
        for op in &ops {
            let got = outcome(match *op {
                Op::Signal(v) => t.signal(v).map(|()| None),
                Op::SignalOn(v) => t
                    .signal_on(&stream, v)
                    .and_then(|()| t.wait(v, Duration::from_secs(10)))
                    .map(|()| None),
                Op::Poll(v) => t.wait(v, Duration::ZERO).map(|()| None),
                Op::Query => t.query().map(Some),
                Op::Fail => {
                    t.fail(Error::Cancelled("model".into()));
                    Ok(None)
                }
            });
            prop_assert_eq!(got, m.apply(op), "after {:?}", op);
        }
    }
}
