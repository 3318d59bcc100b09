//! The sweep's machine-readable reports, read the way CI systems and scripts read them: the
//! JUnit file parsed by an XML parser (well-formed, counts that add up, every failure with its
//! replay command, text that survives escaping), the JSON file parsed by serde_json and checked
//! against the JUnit file and the printed summary.

mod scratch;

use scratch::Scratch;

use std::collections::BTreeMap;
use std::process::{Command, Output};

use commitgap_sim::sweep::Shard;
use commitgap_sim::sweep::SweepCoverage;
use commitgap_sim::sweep::{FailedSeed, FirstFailureSummary, SweepSummary, json_report, junit_report};
use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::Event;

/// One XML element with its attributes (unescaped), its text (unescaped) and its children.
#[derive(Debug, Default)]
struct Element {
    name: String,
    attributes: BTreeMap<String, String>,
    text: String,
    children: Vec<Element>,
}

impl Element {
    fn attribute(&self, name: &str) -> &str {
        self.attributes
            .get(name)
            .unwrap_or_else(|| panic!("<{}> has no {name} attribute", self.name))
    }

    fn children_named(&self, name: &str) -> Vec<&Element> {
        self.children.iter().filter(|child| child.name == name).collect()
    }

    fn only_child(&self, name: &str) -> &Element {
        let found = self.children_named(name);
        assert_eq!(found.len(), 1, "<{}> has one <{name}>", self.name);
        found[0]
    }
}

/// Parses `xml` into its root element; any malformation fails the test.
fn parse_xml(xml: &str) -> Element {
    fn element(start: &quick_xml::events::BytesStart<'_>) -> Element {
        let mut attributes = BTreeMap::new();
        for attribute in start.attributes() {
            let attribute = attribute.expect("well-formed attribute");
            let name = String::from_utf8(attribute.key.as_ref().to_vec()).unwrap();
            let value = attribute
                .normalized_value(quick_xml::XmlVersion::Explicit1_0)
                .expect("attribute escapes resolve");
            assert!(
                attributes.insert(name.clone(), value.into_owned()).is_none(),
                "duplicate attribute {name}"
            );
        }
        Element {
            name: String::from_utf8(start.name().as_ref().to_vec()).unwrap(),
            attributes,
            ..Element::default()
        }
    }

    let mut reader = quick_xml::Reader::from_str(xml);
    let mut open: Vec<Element> = vec![Element::default()];
    loop {
        match reader.read_event().expect("well-formed XML") {
            Event::Start(start) => open.push(element(&start)),
            Event::Empty(start) => open.last_mut().unwrap().children.push(element(&start)),
            Event::End(_) => {
                let closed = open.pop().unwrap();
                open.last_mut().expect("no stray end tag").children.push(closed);
            }
            Event::Text(text) => open
                .last_mut()
                .unwrap()
                .text
                .push_str(&text.xml10_content().unwrap()),
            Event::GeneralRef(reference) => {
                let resolved = match reference.resolve_char_ref().expect("valid character reference") {
                    Some(character) => character.to_string(),
                    None => {
                        let name = reference.decode().unwrap();
                        resolve_predefined_entity(&name)
                            .unwrap_or_else(|| panic!("undefined entity &{name};"))
                            .to_owned()
                    }
                };
                open.last_mut().unwrap().text.push_str(&resolved);
            }
            Event::CData(_) | Event::DocType(_) | Event::PI(_) => panic!("unexpected markup"),
            Event::Decl(_) | Event::Comment(_) => {}
            Event::Eof => break,
        }
    }
    assert_eq!(open.len(), 1, "every element is closed");
    let mut document = open.pop().unwrap();
    assert_eq!(document.children.len(), 1, "one root element");
    document.children.pop().unwrap()
}

fn commitgap(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_commitgap"))
        .args(arguments)
        .output()
        .expect("the binary runs")
}

fn scratch(name: &str) -> Scratch {
    Scratch::new("reports", name)
}

#[test]
// One sweep read end to end, the JSON file first and the JUnit file checked against it.
#[allow(clippy::too_many_lines)]
fn a_failing_sweep_writes_junit_and_json_that_agree() {
    let directory = scratch("failing");
    let junit_path = directory.join("reports").join("sweep.xml");
    let json_path = directory.join("reports").join("sweep.json");
    let output = commitgap(&[
        "sweep",
        "--system",
        "key-per-attempt",
        "--seeds",
        "16",
        "--jobs",
        "2",
        "--seeds-dir",
        directory.join("seeds").to_str().unwrap(),
        "--junit",
        junit_path.to_str().unwrap(),
        "--json",
        json_path.to_str().unwrap(),
    ]);
    let printed = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(1), "{printed}");

    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    assert_eq!(json["system"], "key-per-attempt");
    assert_eq!(json["seed_range"], "0..16");
    assert_eq!(json["shard"], serde_json::Value::Null);
    assert_eq!(json["seeds_run"], 16);
    assert_eq!(json["passed"], false);
    let failures = json["failures"].as_array().unwrap();
    assert!(!failures.is_empty(), "key-per-attempt fails about half its seeds");
    let seeds: Vec<u64> = failures
        .iter()
        .map(|failure| failure["seed"].as_u64().unwrap())
        .collect();
    let mut sorted = seeds.clone();
    sorted.sort_unstable();
    assert_eq!(seeds, sorted, "failures are sorted by seed");
    assert!(
        printed.contains(&format!("sweep: 16 seeds, {} failures", failures.len())),
        "{printed}"
    );
    assert_eq!(json["first_failing_seed"], seeds[0]);
    assert_eq!(json["seeds_to_first_failure"], seeds[0] + 1);
    assert!(json["time_to_first_failure_s"].as_f64().unwrap() >= 0.0);
    assert!(json["seeds_per_second"].as_f64().unwrap() > 0.0);
    assert!(json["steps"].as_u64().unwrap() > 0);
    let mut kept = 0;
    for failure in failures {
        // A failure gets a seed file unless an earlier one holds the same failure or it is past
        // --shrink-max; then its replay command names the seed.
        match failure["seed_file"].as_str() {
            Some(seed_file) => {
                kept += 1;
                assert!(std::path::Path::new(seed_file).exists(), "{seed_file}");
                assert_eq!(
                    failure["replay"].as_str().unwrap(),
                    format!("cargo run --release -- replay {seed_file}")
                );
            }
            None => assert!(
                failure["replay"].as_str().unwrap().starts_with(&format!(
                    "cargo run --release -- replay --seed {} --system key-per-attempt",
                    failure["seed"]
                )),
                "{failure}"
            ),
        }
        assert!(failure["step"].as_u64().is_some() && failure["virtual_time_ms"].as_i64().is_some());
        assert!(!failure["invariant"].as_str().unwrap().is_empty());
    }
    assert!(kept >= 1, "the first failure is kept");

    let root = parse_xml(&std::fs::read_to_string(&junit_path).unwrap());
    assert_eq!(root.name, "testsuites");
    let suite = root.only_child("testsuite");
    let cases = suite.children_named("testcase");
    assert_eq!(
        cases.len(),
        failures.len() + 1,
        "a case per failing seed and one for the sweep"
    );
    assert_eq!(suite.attribute("tests"), cases.len().to_string());
    assert_eq!(
        suite.attribute("failures"),
        cases.len().to_string(),
        "every case fails"
    );
    assert_eq!(root.attribute("failures"), suite.attribute("failures"));
    let sweep_case = cases[0];
    assert_eq!(sweep_case.attribute("classname"), "key-per-attempt");
    assert_eq!(
        sweep_case.only_child("failure").attribute("message"),
        format!("{} of 16 seeds failed", failures.len())
    );
    for (case, failure) in cases[1..].iter().zip(failures) {
        assert_eq!(case.attribute("classname"), "key-per-attempt");
        assert_eq!(case.attribute("name"), format!("seed {}", failure["seed"]));
        let element = case.only_child("failure");
        assert_eq!(
            element.attribute("message"),
            failure["invariant"].as_str().unwrap()
        );
        assert!(
            element.text.contains(failure["message"].as_str().unwrap()),
            "the evidence survives escaping: {:?}",
            element.text
        );
        assert!(
            element
                .text
                .ends_with(&format!("replay: {}", failure["replay"].as_str().unwrap())),
            "{:?}",
            element.text
        );
    }
}

#[test]
fn a_passing_sweep_is_one_passing_test_case() {
    let directory = scratch("passing");
    let junit_path = directory.join("sweep.xml");
    let json_path = directory.join("sweep.json");
    let output = commitgap(&[
        "sweep",
        "--seeds",
        "4",
        "--shard",
        "2/2",
        "--seeds-dir",
        directory.join("seeds").to_str().unwrap(),
        "--junit",
        junit_path.to_str().unwrap(),
        "--json",
        json_path.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0));
    let root = parse_xml(&std::fs::read_to_string(&junit_path).unwrap());
    let suite = root.only_child("testsuite");
    let case = suite.only_child("testcase");
    assert_eq!(case.attribute("name"), "sweep of seeds 0..4, shard 2/2");
    assert!(case.children.is_empty(), "a passing case has no failure");
    assert_eq!(
        (suite.attribute("tests"), suite.attribute("failures")),
        ("1", "0")
    );
    let properties: BTreeMap<&str, &str> = suite
        .only_child("properties")
        .children_named("property")
        .into_iter()
        .map(|property| (property.attribute("name"), property.attribute("value")))
        .collect();
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    let never_reached: Vec<&str> = json["coverage"]["never_reached"]
        .as_array()
        .unwrap()
        .iter()
        .map(|name| name.as_str().unwrap())
        .collect();
    // The pattern's situations and the payments domain's own (the reference's domain).
    let all =
        commitgap_sim::sweep::Situation::ALL.len() + commitgap_sim::domain::payments().situations().len();
    assert_eq!(
        properties["coverage_situations_reached"],
        format!("{} of {all}", all - never_reached.len()),
        "{properties:?}"
    );
    let listed = if never_reached.is_empty() {
        "none".to_owned()
    } else {
        never_reached.join(", ")
    };
    assert_eq!(properties["coverage_never_reached"], listed);
    assert!(properties.contains_key("coverage_faults_never_fired"));
    assert_eq!(json["coverage"]["seeds"], 2);
    assert_eq!(json["passed"], true);
    assert_eq!(json["seeds_run"], 2);
    assert_eq!(json["shard"]["index"], 2);
    assert_eq!(json["seeds_to_first_failure"], serde_json::Value::Null);
    let leftovers: Vec<_> = std::fs::read_dir(&directory)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "no temporary files remain: {leftovers:?}");
}

#[test]
fn text_with_markup_survives_both_reports() {
    let nasty = "a <b> & \"quoted\" 'single' ]]> tab\there\nsecond line &amp; not an entity";
    let summary = SweepSummary {
        system: "sys<&>\"".to_owned(),
        first_seed: 5,
        seeds: 10,
        shard: Some(Shard { index: 1, count: 2 }),
        jobs: 1,
        backend: "memdb".to_owned(),
        check_determinism: true,
        time_budget_s: Some(60),
        seeds_planned: 5,
        seeds_run: 5,
        steps: 100,
        wall_ms: 20,
        failures: vec![FailedSeed {
            seed: 7,
            invariant: "inv<&>\"'\n".to_owned(),
            kind: "safety".to_owned(),
            step: Some(3),
            virtual_time_ms: Some(4),
            message: nasty.to_owned(),
            seed_file: Some("seeds/a&b.json".to_owned()),
            replay: "cargo run --release -- replay seeds/a&b.json".to_owned(),
        }],
        errors: Vec::new(),
        first_failure: Some(FirstFailureSummary {
            seed: 7,
            seeds_until: 2,
            wall_ms: 10,
        }),
        coverage: SweepCoverage::default(),
        interrupted: false,
        stopped_by_max_failures: false,
    };
    let root = parse_xml(&junit_report(&summary));
    let suite = root.only_child("testsuite");
    let seed_case = suite
        .children_named("testcase")
        .into_iter()
        .find(|case| case.attribute("name") == "seed 7")
        .unwrap();
    assert_eq!(seed_case.attribute("classname"), "sys<&>\"");
    let failure = seed_case.only_child("failure");
    assert_eq!(
        failure.attribute("message"),
        "inv<&>\"'\n",
        "newlines survive in attributes"
    );
    assert!(failure.text.contains(nasty), "{:?}", failure.text);
    assert!(
        failure
            .text
            .ends_with("replay: cargo run --release -- replay seeds/a&b.json")
    );

    let json: serde_json::Value = serde_json::from_str(&json_report(&summary)).unwrap();
    assert_eq!(json["failures"][0]["message"], nasty);
    assert_eq!(json["seeds_to_first_failure"], 2);
    assert_eq!(json["time_budget_s"], 60);
}
