//! Helpers shared by the pipeline tests: the seed's example, built in Rust
//! and parsed from `specs/seed.toml`.
#![allow(dead_code)]

use seqsync::pipeline::{PipelineSpec, StageSpec};

/// The seed's TOML spec (`specs/seed.toml`), embedded so the tests run from the GPU bundle.
pub const SEED_TOML: &str = include_str!("../../../specs/seed.toml");

/// The seed's example, built with the Rust builder (the names of `specs/seed.toml`).
pub fn seed_builder(nin: u64, nx: u64, ny: u64, nout: u64) -> PipelineSpec {
    PipelineSpec::builder()
        .param("nin", nin)
        .param("nx", nx)
        .param("ny", ny)
        .param("nout", nout)
        .buffer("in", "nin")
        .buffer("x", "nx")
        .buffer("y", "ny")
        .buffer("out", "nout")
        .thread("h2g")
        .stage("h2g", StageSpec::on_stream("s_h2g").writes("in"))
        .stage("f", StageSpec::on_stream("s_f").reads("in").writes("x"))
        .stage("g", StageSpec::on_stream("s_g").reads("in").writes("y"))
        .stage(
            "h",
            StageSpec::on_stream("s_h")
                .reads("x")
                .reads("y")
                .writes("out"),
        )
        .thread("g2h")
        .stage("g2h", StageSpec::on_stream("s_g2h").reads("out").sync())
        .build()
        .expect("the seed spec is valid")
}

/// The seed's example parsed from `specs/seed.toml`, with parameters set.
pub fn seed_toml(nin: u64, nx: u64, ny: u64, nout: u64) -> PipelineSpec {
    let mut spec = PipelineSpec::from_toml(SEED_TOML).expect("seed.toml parses");
    for (name, v) in [("nin", nin), ("nx", nx), ("ny", ny), ("nout", nout)] {
        spec.set(name, v).expect("seed parameter exists");
    }
    spec
}

/// Every (nin, nx, ny, nout) with each value in `range`.
pub fn grid(range: std::ops::RangeInclusive<u64>) -> Vec<(u64, u64, u64, u64)> {
    let mut out = Vec::new();
    for nin in range.clone() {
        for nx in range.clone() {
            for ny in range.clone() {
                for nout in range.clone() {
                    out.push((nin, nx, ny, nout));
                }
            }
        }
    }
    out
}

/// The 1-based line of the first line of `src` containing `needle`.
pub fn line_of(src: &str, needle: &str) -> usize {
    src.lines()
        .position(|l| l.contains(needle))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("`{needle}` not in spec"))
}
