//! The reference system as a value.
//!
//! The receiver ([`crate::receiver::ReceiverSteps`]) and the relay ([`crate::relay::RelaySteps`])
//! are written as named steps whose default methods are the reference. [`Reference`] takes every
//! one of them as it is: it is what [`crate::receiver::receive`] and [`crate::relay::run_worker`]
//! run. A variant that changes one step and wants the reference's behaviour around it calls that
//! step on `Reference`.
//!
//! This type must hold no state and override no step: its behaviour is the traits' defaults and
//! nothing else.

/// The reference receiver and relay: every step as its trait's default method defines it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reference;
