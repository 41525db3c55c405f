//! The demo's pipeline engine (`Engine::Pipeline`): the seed spec, derived and run by the
//! pipeline runtime, verifies every batch; a seed-shaped TOML spec runs, others are refused.

use seqsync::pipeline::{derive, PipelineSpec, StageSpec};
use seqsync::BackendKind;
use seqsync_demo::demo::{self, DemoConfig, Engine};

mod seed_spec {
    use super::*;
    /// The seed's example parsed from `specs/seed.toml` (embedded), with parameters set.
    pub fn seed_toml(nin: u64, nx: u64, ny: u64, nout: u64) -> PipelineSpec {
        let mut spec = PipelineSpec::from_toml(include_str!("../../../specs/seed.toml")).unwrap();
        for (name, v) in [("nin", nin), ("nx", nx), ("ny", ny), ("nout", nout)] {
            spec.set(name, v).expect("seed parameter exists");
        }
        spec
    }
}

fn demo_config() -> DemoConfig {
    DemoConfig {
        backend: BackendKind::Host,
        batches: 60,
        batch_bytes: Some(16 << 10),
        baselines: false,
        engine: Engine::Pipeline,
        ..DemoConfig::default()
    }
}

#[test]
fn demo_on_the_pipeline_engine_verifies_every_batch_under_chaos() {
    for (chaos, (nin, nx, ny, nout)) in [(5, (2, 4, 3, 2)), (6, (1, 1, 1, 1)), (7, (3, 1, 2, 4))] {
        let r = demo::run(&DemoConfig {
            chaos: Some(chaos),
            nin,
            nx,
            ny,
            nout,
            ..demo_config()
        })
        .unwrap();
        assert!(r.all_verified(), "{r:?}");
        assert_eq!(r.engine, Engine::Pipeline);
    }
}

#[test]
fn demo_pipeline_engine_reports_the_hand_written_pipeline_too() {
    let r = demo::run(&DemoConfig {
        baselines: true,
        batches: 30,
        ..demo_config()
    })
    .unwrap();
    assert!(r.all_verified(), "{r:?}");
    let (hw, ratio) = (r.handwritten_gbps.unwrap(), r.ratio_to_handwritten.unwrap());
    assert!(hw > 0.0 && (ratio - r.gbps / hw).abs() < 1e-9);
}

#[test]
fn demo_runs_a_seed_shaped_spec_and_rejects_others() {
    let spec = seed_spec::seed_toml(3, 2, 2, 1);
    assert_eq!(demo::seed_shape(&spec).unwrap(), (3, 2, 2, 1));
    // The TOML spec and the demo's built-in spec derive the same plan.
    assert_eq!(
        derive(&spec).unwrap(),
        derive(&demo::seed_spec(3, 2, 2, 1)).unwrap()
    );
    let r = demo::run(&DemoConfig {
        spec: Some(spec),
        ..demo_config()
    })
    .unwrap();
    assert!(r.all_verified() && (r.nin, r.nout) == (3, 1), "{r:?}");
    let other = PipelineSpec::builder()
        .buffer("in", 2)
        .thread("t")
        .stage("h2g", StageSpec::on_stream("s").writes("in"))
        .stage("f", StageSpec::on_stream("s").reads("in").sync())
        .build()
        .unwrap();
    assert!(demo::seed_shape(&other).is_err());
}
