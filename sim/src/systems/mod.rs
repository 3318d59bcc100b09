//! The registry of systems users can name with `--system`: the reference and its planted bugs.
//!
//! Adding a planted bug means one file in `planted/` and one line in [`planted::all`], and nothing
//! here; adding a wholly different system means one line in [`all`]. This module must not hold any
//! state: every call builds fresh instances.

pub mod planted;
mod reference;

use std::sync::Arc;

pub use reference::{ReferenceSystem, Variant, decode_reference_row};

use crate::system::System;

/// Every registered system: the reference first, then each planted bug.
pub fn all() -> Vec<Arc<dyn System>> {
    let mut systems: Vec<Arc<dyn System>> = vec![Arc::new(ReferenceSystem::reference())];
    systems.extend(planted::all());
    systems
}

/// The system called `name`, if there is one.
pub fn by_name(name: &str) -> Option<Arc<dyn System>> {
    all().into_iter().find(|system| system.name() == name)
}

/// The registered names, for error messages.
pub fn names() -> Vec<String> {
    all().iter().map(|system| system.name().to_owned()).collect()
}
