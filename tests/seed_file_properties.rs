//! The seed-file reader against anything a disk, an editor or a bad merge can leave behind: it
//! never panics, and whatever it accepts has a configuration a run accepts. Inputs are arbitrary
//! bytes, and real seed files truncated, with bytes changed, or with values swapped for others
//! of any JSON type; a file it accepts is also replayed, which must end in a verdict or an
//! error message.
//!
//! The strongest promise is about false verdicts: a file the reader accepts describes a world in
//! which the reference system is correct, so the reference never fails an invariant on it. Real
//! seed files get one to three of their configuration's or schedule's values replaced by edge
//! values (zero, negative, the largest integers, a year, a day, half or ten times the value), and
//! each accepted file is run against the reference, from its seed and from its schedules. A run
//! that reaches its bound before the world settles is allowed (that verdict is not a failure);
//! an invariant failure is a false alarm, and so is a run longer than the file's own bounds.

use commitgap_sim::run::{RunOptions, run_seed};
use commitgap_sim::sweep::{self, SeedFile};
use commitgap_sim::systems;
use proptest::prelude::*;

/// Every seed file in `seeds/`, as JSON.
fn real_seed_files() -> Vec<(String, serde_json::Value)> {
    let directory = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    sweep::list(&directory)
        .unwrap()
        .into_iter()
        .map(|path| {
            let json = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            (path.file_name().unwrap().to_string_lossy().into_owned(), json)
        })
        .collect()
}

/// JSON pointers to every number, boolean and string under `value`, the values a person edits.
fn leaves(value: &serde_json::Value, path: &str, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(fields) => {
            for (name, field) in fields {
                leaves(
                    field,
                    &format!("{path}/{}", name.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        serde_json::Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                leaves(item, &format!("{path}/{index}"), out);
            }
        }
        _ => out.push(path.to_owned()),
    }
}

/// Where an edit lands: the configuration, the recorded run's events, or the shrunk run.
fn editable_leaves(json: &serde_json::Value) -> Vec<String> {
    let mut found = Vec::new();
    leaves(&json["config"], "/config", &mut found);
    leaves(&json["schedule"]["events"], "/schedule/events", &mut found);
    leaves(&json["shrunk"]["config"], "/shrunk/config", &mut found);
    found
}

/// The edge values a number is swapped for: limits, signs, and scalings of what it was.
fn edge_numbers(current: i64) -> Vec<i64> {
    let mut values = vec![
        0,
        1,
        2,
        -1,
        1_000,
        60_000,
        600_000,
        3_600_000,
        86_400_000,
        31_536_000_000,
        31_536_000_001,
        4_294_967_295,
        i64::MAX,
        i64::MIN,
    ];
    values.extend([
        current / 2,
        current.saturating_mul(2),
        current.saturating_mul(10),
        current.saturating_add(1),
        current.saturating_sub(1),
    ]);
    values
}

/// `value` edited at `pointer` by the `choice`-th edge value for what is there.
fn edit(value: &mut serde_json::Value, pointer: &str, choice: usize) {
    let Some(target) = value.pointer_mut(pointer) else {
        return;
    };
    *target = if let Some(flag) = target.as_bool() {
        (!flag).into()
    } else if let Some(number) = target.as_i64() {
        let numbers = edge_numbers(number);
        numbers[choice % numbers.len()].into()
    } else if target.is_u64() {
        serde_json::Value::from(u64::MAX)
    } else {
        let words = [
            "memdb",
            "wal-file",
            "github",
            "svix",
            "stripe-like",
            "shopify-like",
            "",
        ];
        words[choice % words.len()].into()
    };
}

/// Runs every run an accepted file holds against the reference; returns the first false alarm.
fn false_alarm(file: &SeedFile) -> Option<String> {
    let reference = systems::by_name("reference").unwrap();
    let mut runs = vec![("seed", file.config.clone(), None)];
    if let Some(schedule) = &file.schedule {
        runs.push(("schedule", file.config.clone(), Some(schedule.clone())));
    }
    if let Some(shrunk) = &file.shrunk {
        runs.push(("shrunk", shrunk.config.clone(), Some(shrunk.schedule.clone())));
    }
    for (from, config, schedule) in runs {
        // The liveness bound grows with the run's streams (run::liveness_bounds), up to
        // limits::LIVENESS_STEPS_MAX; a run that reaches it reports itself unsettled below.
        let bound = config.fault_phase_steps_max
            + config
                .liveness_steps_max
                .max(commitgap_sim::run::LIVENESS_STEPS_MAX)
            + 1;
        let options = RunOptions {
            config: Some(config),
            schedule,
            ..RunOptions::default()
        };
        let outcome = match run_seed(&reference, file.seed, &options) {
            Ok(outcome) => outcome,
            Err(error) => {
                return Some(format!(
                    "from its {from}: the run could not be carried out: {error}"
                ));
            }
        };
        if let Some(failure) = outcome.failure {
            return Some(format!(
                "from its {from}: the reference failed {}: {}",
                failure.invariant, failure.message
            ));
        }
        if let Some(unsettled) = &outcome.unsettled {
            return Some(format!("from its {from}: did not settle: {unsettled:?}"));
        }
        if outcome.steps > bound {
            return Some(format!(
                "from its {from}: {} steps, past its bound of {bound}",
                outcome.steps
            ));
        }
    }
    None
}

fn a_real_seed_file() -> Vec<u8> {
    let directory = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let path = sweep::list(&directory)
        .unwrap()
        .into_iter()
        .next()
        .expect("seeds/ holds files");
    std::fs::read(path).unwrap()
}

/// Checks the one promise: an answer, never a panic; and an accepted file is runnable.
fn read(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok(file) = SeedFile::parse(bytes) {
        prop_assert!(file.config.validate().is_ok());
    }
    Ok(())
}

/// Every value in `json` at depth-first position `target` replaced by `replacement`.
fn replace_nth(json: &mut serde_json::Value, target: &mut usize, replacement: &serde_json::Value) {
    if *target == 0 {
        *json = replacement.clone();
        *target = usize::MAX;
        return;
    }
    *target -= 1;
    match json {
        serde_json::Value::Array(items) => {
            for item in items {
                replace_nth(item, target, replacement);
            }
        }
        serde_json::Value::Object(fields) => {
            for value in fields.values_mut() {
                replace_nth(value, target, replacement);
            }
        }
        _ => {}
    }
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(|number| serde_json::Number::from_f64(number)
            .map_or(serde_json::Value::Null, serde_json::Value::Number)),
        ".{0,10}".prop_map(serde_json::Value::from),
        Just(serde_json::json!([])),
        Just(serde_json::json!({})),
    ]
}

proptest! {
    #![proptest_config(commitgap_sim::harness::repeatable_config(48))]

    #[test]
    fn a_file_the_reader_accepts_never_fails_the_reference(
        file_choice in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), 0usize..64), 1..=3),
    ) {
        let files = real_seed_files();
        let (name, original) = &files[file_choice.index(files.len())];
        let mut json = original.clone();
        let mut described = Vec::new();
        for (leaf, choice) in edits {
            let pointers = editable_leaves(&json);
            let pointer = &pointers[leaf.index(pointers.len())];
            edit(&mut json, pointer, choice);
            described.push(format!("{pointer} = {}", json.pointer(pointer).unwrap()));
        }
        let bytes = serde_json::to_vec(&json).unwrap();
        if let Ok(file) = SeedFile::parse(&bytes) {
            let alarm = false_alarm(&file);
            prop_assert!(alarm.is_none(), "{name} with {}: {}", described.join(", "), alarm.unwrap_or_default());
        }
    }
}

proptest! {
    #![proptest_config(commitgap_sim::harness::repeatable_config(300))]

    #[test]
    fn arbitrary_bytes_are_refused_or_read(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        read(&bytes)?;
    }

    #[test]
    fn a_truncated_or_damaged_file_is_refused_or_read(cut in any::<prop::sample::Index>(), flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4)) {
        let mut bytes = a_real_seed_file();
        for (index, byte) in flips {
            let at = index.index(bytes.len());
            bytes[at] = byte;
        }
        let length = cut.index(bytes.len() + 1);
        read(&bytes[..length])?;
    }

    #[test]
    fn any_value_swapped_for_another_is_refused_or_read(position in 0usize..4_000, replacement in json_value()) {
        let mut json: serde_json::Value = serde_json::from_slice(&a_real_seed_file()).unwrap();
        let mut target = position;
        replace_nth(&mut json, &mut target, &replacement);
        let bytes = json.to_string();
        read(bytes.as_bytes())?;
        // What the reader accepts, a replay runs to an answer: a verdict or an error, not a panic.
        if let Ok(file) = SeedFile::parse(bytes.as_bytes())
            && let Some(system) = commitgap_sim::systems::by_name(&file.system)
        {
            let (config, schedule) = match file.shrunk {
                Some(shrunk) => (shrunk.config, Some(shrunk.schedule)),
                None => (file.config, file.schedule),
            };
            let options = commitgap_sim::run::RunOptions { config: Some(config), schedule, ..Default::default() };
            let _ = commitgap_sim::run::run_seed(&system, file.seed, &options);
        }
    }
}

/// Any run the simulator draws writes a seed file the reader accepts: a workload at the size
/// limits, with every fault model on at its highest rates, still fits the stream limits.
#[test]
fn the_largest_drawn_workload_writes_a_seed_file_the_reader_accepts() {
    let reference = systems::by_name("reference").unwrap();
    let mut config = commitgap_sim::run::SimConfig::draw(3, commitgap_sim::run::Backend::Memdb);
    config.tenants = 8;
    config.orders_per_tenant = 8;
    config.paid_orders = commitgap_sim::rng::Ratio::new(1, 1);
    config.enable_every_fault();
    let always = serde_json::json!({"numerator": 1, "denominator": 1});
    for (fault, fields) in [
        (
            "fan-out",
            vec![("rate", always.clone()), ("subscriptions_max", 4.into())],
        ),
        (
            "spontaneous-duplicate",
            vec![("rate", always.clone()), ("copies_max", 4.into())],
        ),
        (
            "late-delivery",
            vec![("resend_rate", always.clone()), ("late_rate", always.clone())],
        ),
        ("twin-events", vec![("rate", always.clone())]),
    ] {
        for (field, value) in fields {
            config.faults.get_mut(fault).unwrap()[field] = value;
        }
    }
    config.validate().unwrap();
    let options = RunOptions {
        config: Some(config),
        record_schedule: true,
        ..RunOptions::default()
    };
    let outcome = run_seed(&reference, 3, &options).unwrap();
    let file = SeedFile::from_outcome(&outcome, String::new());
    let text = serde_json::to_vec(&file).unwrap();
    let read = SeedFile::parse(&text).unwrap_or_else(|error| panic!("{error}"));
    let events = read.schedule.as_ref().unwrap().events.len();
    assert!(events > 64, "every order had events, and twins: {events}");
}
