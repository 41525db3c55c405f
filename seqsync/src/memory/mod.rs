//! Memory: buffers whose uses on streams are tracked, so that moving one between streams (and
//! host threads) waits only for what is not already ordered.
//!
//! | module | what it is |
//! |---|---|
//! | [`handoff`] | [`TrackingBackend`](handoff::TrackingBackend): epochs, the *completed* and *ordered* facts, [`Tracked`](handoff::Tracked) buffers (seed 003) |

pub mod handoff;
