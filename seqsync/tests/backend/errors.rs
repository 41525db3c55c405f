//! The error type: thread-safe, a std error, and every message names the ring and the numbers.

use std::sync::Arc;

use seqsync::{BackendError, Error};

fn assert_error<T: std::error::Error + Send + Sync + 'static>() {}

#[test]
fn errors_are_send_sync_static_std_errors() {
    assert_error::<Error>();
    assert_error::<BackendError>();
    assert_error::<seqsync::pipeline::PlanError>();
}

#[test]
fn every_message_names_ring_and_numbers() {
    let ring = || "ring9".to_owned();
    let cases: Vec<(Error, &[&str])> = vec![
        (
            Error::InvalidArgument {
                ring: ring(),
                message: "max_size must be at least 1, got 0".into(),
            },
            &["ring9", "max_size", "0"],
        ),
        (
            Error::OutOfOrder {
                ring: ring(),
                expected: 4,
                got: 6,
            },
            &["ring9", "expected seq 4", "got 6"],
        ),
        (
            Error::Overflow {
                ring: ring(),
                seq: 7,
                oldest: 3,
                max_size: 4,
                nconsumers: 2,
            },
            &["ring9", "seq 7", "max_size=4", "nconsumers=2", "seq 3"],
        ),
        (
            Error::NotYetProduced {
                ring: ring(),
                seq: 9,
                next: 5,
            },
            &["ring9", "seq 9", "is 5"],
        ),
        (
            Error::Stale {
                ring: ring(),
                seq: 1,
                current: 5,
                max_size: 4,
                nconsumers: 2,
            },
            &["ring9", "seq 1", "seq 5", "max_size=4", "nconsumers=2"],
        ),
        (
            Error::OverConsumed {
                ring: ring(),
                seq: 2,
                nconsumers: 3,
            },
            &["ring9", "seq 2", "nconsumers=3"],
        ),
        (
            Error::Stopped {
                ring: ring(),
                reason: "bye".into(),
                cause: None,
            },
            &["ring9", "bye"],
        ),
        (
            Error::NoDevice("no driver".into()),
            &["no CUDA device", "no driver"],
        ),
        (
            Error::Backend(BackendError {
                backend: "cuda",
                op: "cuEventRecord",
                code: Some(700),
                message: "illegal address".into(),
            }),
            &["cuda", "cuEventRecord", "700", "illegal address"],
        ),
    ];
    for (err, needles) in cases {
        let msg = err.to_string();
        for n in needles {
            assert!(msg.contains(n), "{msg:?} lacks {n:?}");
        }
    }
}

#[test]
fn stopped_by_an_error_carries_it_as_source() {
    let cause = Arc::new(Error::OutOfOrder {
        ring: "r".into(),
        expected: 0,
        got: 2,
    });
    let e = Error::Stopped {
        ring: "r".into(),
        reason: cause.to_string().into(),
        cause: Some(cause),
    };
    let src = std::error::Error::source(&e).expect("a source");
    assert!(src.to_string().contains("expected seq 0"));
}

/// The pipeline layer's errors are seqsync errors: `derive(..)?` and `pipeline::run(..)?`
/// compose in one function, and the message is the plan error's own.
#[test]
fn plan_errors_are_seqsync_errors() {
    fn derive_empty() -> seqsync::Result<seqsync::pipeline::Plan> {
        let spec = seqsync::pipeline::PipelineSpec::from_toml("[buffers]\n")?;
        Ok(seqsync::pipeline::derive(&spec)?)
    }
    let err = derive_empty().unwrap_err();
    assert!(
        matches!(err, Error::Plan(seqsync::pipeline::PlanError::NoStages)),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with("the spec declares no stages"),
        "{err}"
    );
}
