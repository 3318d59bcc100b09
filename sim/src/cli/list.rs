//! `list`: names the program's systems, domains, fault models, invariants and situations, or,
//! with `--contract`, the rules one system is judged by (and with `--check`, whether its domain
//! keeps its own consistency properties).
//!
//! It only prints; it runs no seed.

use std::sync::Arc;

use clap::Args;

use super::{UsageError, check_invariant_names, names_or_none, say, split_names, system_or_first};
use crate::app::App;
use crate::coverage::Situation;
use crate::shape::WorkloadShape;

#[derive(Args)]
pub(super) struct ListArgs {
    /// Print the contract instead: for every invariant that judges the system, the rule it must
    /// keep, one line each, then its domain's business rules.
    #[arg(long)]
    contract: bool,
    /// The system whose contract to print [default: the program's first system].
    #[arg(long, value_name = "SYSTEM", requires = "contract")]
    system: Option<String>,
    /// Only these invariants judge (comma-separated), as in `sweep`.
    #[arg(long, value_name = "A,B", requires = "contract")]
    invariants: Option<String>,
    /// These invariants do not judge (comma-separated), as in `sweep`.
    #[arg(long, value_name = "A,B", requires = "contract")]
    without_invariants: Option<String>,
    /// Also check the domain's own consistency on drawn workloads, before any system runs (its
    /// draws, model, transitions and attack bodies); exit 1 if it breaks a property.
    #[arg(long, requires = "contract")]
    check: bool,
}

pub(super) fn run_list(app: &App, args: &ListArgs) -> Result<i32, UsageError> {
    if !args.contract {
        list(app);
        return Ok(0);
    }
    let system = system_or_first(app, args.system.as_deref())?;
    let shape = WorkloadShape {
        invariants: args.invariants.as_deref().map(split_names),
        without_invariants: names_or_none(args.without_invariants.as_deref()),
        ..WorkloadShape::default()
    };
    check_invariant_names(app, &shape)?;
    let choice = crate::shape::InvariantChoice {
        only: shape.invariants.map(|names| names.into_iter().collect()),
        without: shape.without_invariants.into_iter().collect(),
    };
    let domain = system.domain();
    let (judging, left_out) = app
        .registry()
        .judging(&*domain, system.workflows(), &choice)
        .map_err(UsageError)?;
    say!(
        "contract of {} ({} domain: {})",
        system.name(),
        domain.name(),
        domain.description()
    );
    for invariant in &judging {
        say!(
            "{:<8} {:<9} {:<42} {}",
            invariant.layer().name(),
            invariant.kind().name(),
            invariant.name(),
            invariant.description()
        );
    }
    for rule in domain.rules() {
        say!("{:<8} {:<9} {:<42} {rule}", "domain", "rule", domain.name());
    }
    for (name, why) in left_out {
        say!("not checked: {name}, since {why}");
    }
    if !args.check {
        return Ok(0);
    }
    match crate::domain::check_domain(&*domain) {
        Ok(()) => {
            say!(
                "domain check: {} keeps {} on {} drawn workloads",
                domain.name(),
                crate::domain::PROPERTIES.join(", "),
                crate::domain::DEFAULT_CASES
            );
            Ok(0)
        }
        Err(why) => {
            say!("domain check: FAILED: {why}");
            Ok(1)
        }
    }
}

fn list(app: &App) {
    let mut domains: Vec<Arc<dyn crate::domain::Domain>> = Vec::new();
    for (role, systems) in [("system", app.systems()), ("planted", app.planted_bugs())] {
        for system in systems {
            let domain = system.domain();
            let lacking: Vec<&str> = system
                .workflows()
                .named()
                .iter()
                .filter(|(_, has)| !has)
                .map(|(workflow, _)| workflow.name())
                .collect();
            let lacking = if lacking.is_empty() {
                String::new()
            } else {
                format!(" (no {})", lacking.join(", no "))
            };
            say!(
                "{role:<10} {:<42} {} [{} domain{lacking}]",
                system.name(),
                system.description(),
                domain.name()
            );
            if !domains.iter().any(|known| known.name() == domain.name()) {
                domains.push(domain);
            }
        }
    }
    for domain in &domains {
        say!("domain     {:<42} {}", domain.name(), domain.description());
    }
    for kind in app.registry().faults() {
        say!("fault      {:<42} {}", kind.name, kind.description);
    }
    // Every invariant of every domain the program's systems serve, each once; a domain's own
    // rules name the domain they belong to.
    let mut listed = std::collections::BTreeSet::new();
    for domain in &domains {
        for invariant in app.registry().invariants(&**domain) {
            if !listed.insert(invariant.name().to_owned()) {
                continue;
            }
            say!(
                "invariant  {:<42} {} {}: {}",
                invariant.name(),
                invariant.layer().name(),
                invariant.kind().name(),
                invariant.description()
            );
        }
    }
    for situation in Situation::ALL {
        say!("situation  {:<42} {}", situation.name(), situation.description());
    }
    let mut listed_situations = std::collections::BTreeSet::new();
    for domain in &domains {
        for situation in domain.situations() {
            if listed_situations.insert(situation.name.clone()) {
                say!("situation  {:<42} {}", situation.name, situation.description);
            }
        }
    }
}
