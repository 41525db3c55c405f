//! [`PipelineBuilder`]: a [`PipelineSpec`] built in Rust.

use super::{
    BufferSpec, Ident, MaxSizeOverride, ParamSpec, PipelineSpec, Slots, StageSpec, ThreadSpec,
};
use crate::error::PlanError;

/// Builds a [`PipelineSpec`] in Rust; errors surface in [`build`](Self::build).
///
/// `stage` adds to the thread declared last.
#[derive(Debug, Default)]
pub struct PipelineBuilder {
    spec: PipelineSpec,
    error: Option<PlanError>,
}

impl PipelineBuilder {
    /// Declares a parameter.
    pub fn param(mut self, name: impl Into<String>, value: u64) -> Self {
        self.spec.params.push(ParamSpec {
            name: Ident::new(name),
            value,
        });
        self
    }

    /// Declares a stream (once any is declared, all used streams must be).
    pub fn stream(mut self, name: impl Into<String>) -> Self {
        self.spec
            .streams
            .get_or_insert_with(Vec::new)
            .push(Ident::new(name));
        self
    }

    /// Declares a data buffer with `slots` slots (a number or a parameter name).
    pub fn buffer(mut self, name: impl Into<String>, slots: impl Into<Slots>) -> Self {
        self.spec.buffers.push(BufferSpec {
            name: Ident::new(name),
            slots: slots.into(),
        });
        self
    }

    /// Declares a host thread; following `stage` calls add to it.
    pub fn thread(mut self, name: impl Into<String>) -> Self {
        self.spec.threads.push(ThreadSpec {
            name: Ident::new(name),
            stages: Vec::new(),
        });
        self
    }

    /// Appends stage `name` to the thread declared last.
    pub fn stage(mut self, name: impl Into<String>, mut stage: StageSpec) -> Self {
        let name = name.into();
        match self.spec.threads.last_mut() {
            Some(thread) => {
                stage.name = Ident::new(name);
                thread.stages.push(stage);
            }
            None => {
                self.error
                    .get_or_insert(PlanError::StageOutsideThread { stage: name });
            }
        }
        self
    }

    /// Requests a max_size for ring `ring` (checked by `derive`).
    pub fn max_size(mut self, ring: impl Into<String>, value: u64) -> Self {
        self.spec.max_size.push(MaxSizeOverride {
            ring: Ident::new(ring),
            value,
        });
        self
    }

    /// Validates and returns the spec.
    ///
    /// # Errors
    /// The first violated rule (see [`PipelineSpec::validate`]).
    pub fn build(self) -> Result<PipelineSpec, PlanError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        self.spec.validate()?;
        Ok(self.spec)
    }
}
