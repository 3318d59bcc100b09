//! The seed-file reader against anything a disk, an editor or a bad merge can leave behind: it
//! never panics, and whatever it accepts has a configuration a run accepts. Inputs are arbitrary
//! bytes, and real seed files truncated, with bytes changed, or with values swapped for others
//! of any JSON type; a file it accepts is also replayed, which must end in a verdict or an
//! error message.

use commitgap_sim::seed_file::{self, SeedFile};
use proptest::prelude::*;

fn a_real_seed_file() -> Vec<u8> {
    let directory = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let path = seed_file::list(&directory)
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
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

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
