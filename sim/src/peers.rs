//! The system's peers, as the simulator plays them: the upstream webhook sender with its retry
//! presets, the endpoints' secrets and deliveries signed as a real sender signs them, and the
//! downstream provider with its idempotency-key store and ledger of effects.
//!
//! This module only gathers the three. Nothing here is drawn: every choice a peer makes in a run
//! comes from the world's seeded decisions.

pub use crate::provider::*;
pub use crate::sender::*;
pub use crate::signing::*;
