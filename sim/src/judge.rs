//! Judging a run the simulator did not make: a real database's final state, and every commit of
//! a run over real processes (the journal), with the invariants that can judge each.
//!
//! This module only gathers the two; each keeps its own rules about which invariants apply. It
//! must not decide anything a simulated run would decide differently: the same invariants judge
//! here as in a sweep.

pub use crate::commit_journal::*;
pub use crate::final_state::*;
