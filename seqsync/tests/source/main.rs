//! The crate's source holds its own rules: the layers' "It may use:" headers
//! (`layers.rs`), and the public surface, which cannot grow by accident (`surface.rs`).

mod layers;
mod surface;
