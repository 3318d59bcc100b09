//! What a team adds to steer `explore`: a situation it wants reached (a "sometimes" assertion)
//! and a distance from an edge of its own rules. Both are values the program or the test carries
//! into the explorer's options, read after each run; they judge nothing and change no run.

use std::sync::Arc;

use crate::run::RunOutcome;

/// A situation a team wants its runs to reach, named for its reports: a "sometimes" assertion.
/// The explorer keeps a run that reaches it first and makes more runs from it; the summary says
/// how many runs reached it.
#[derive(Clone)]
pub struct Sometimes {
    name: String,
    pub(crate) reached: Arc<ReachedFn>,
}

/// Whether a run reached a team's situation.
type ReachedFn = dyn Fn(&RunOutcome) -> bool + Send + Sync;

/// How close a run came to a team's boundary, in milliseconds.
type DistanceFn = dyn Fn(&RunOutcome) -> Option<i64> + Send + Sync;

impl Sometimes {
    /// A situation called `name`, reached by a run when `reached` says so. The run's trace is
    /// kept ([`RunOutcome::trace`]), with its configuration and what it concluded.
    pub fn new(name: &str, reached: impl Fn(&RunOutcome) -> bool + Send + Sync + 'static) -> Sometimes {
        Sometimes {
            name: name.to_owned(),
            reached: Arc::new(reached),
        }
    }

    /// The situation's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Debug for Sometimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sometimes")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// How close a run came to an edge of a team's rules, in milliseconds (0 on the edge): the
/// explorer keeps a run that comes closer than any before, and makes more runs from it.
#[derive(Clone)]
pub struct BoundaryMeasure {
    name: String,
    pub(crate) distance_ms: Arc<DistanceFn>,
}

impl BoundaryMeasure {
    /// A boundary called `name`; `distance_ms` says how close a run came to it, or `None` when
    /// the run never came near.
    pub fn new(
        name: &str,
        distance_ms: impl Fn(&RunOutcome) -> Option<i64> + Send + Sync + 'static,
    ) -> BoundaryMeasure {
        BoundaryMeasure {
            name: name.to_owned(),
            distance_ms: Arc::new(distance_ms),
        }
    }

    /// The boundary's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Debug for BoundaryMeasure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundaryMeasure")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A team's situations and boundaries, each name given once.
#[derive(Debug, Clone, Default)]
pub struct Steering {
    /// The situations, in the order added.
    pub sometimes: Vec<Sometimes>,
    /// The boundaries, in the order added.
    pub boundaries: Vec<BoundaryMeasure>,
}

impl Steering {
    /// Adds a situation; refused when one of its name is already here.
    pub fn add_sometimes(&mut self, situation: Sometimes) -> Result<(), String> {
        if self
            .sometimes
            .iter()
            .any(|known| known.name() == situation.name())
        {
            return Err(format!(
                "a situation called {:?} is already added; give each a name of its own",
                situation.name()
            ));
        }
        self.sometimes.push(situation);
        Ok(())
    }

    /// Adds a boundary; refused when one of its name is already here.
    pub fn add_boundary(&mut self, boundary: BoundaryMeasure) -> Result<(), String> {
        if self
            .boundaries
            .iter()
            .any(|known| known.name() == boundary.name())
        {
            return Err(format!(
                "a boundary called {:?} is already added; give each a name of its own",
                boundary.name()
            ));
        }
        self.boundaries.push(boundary);
        Ok(())
    }
}
