//! Sweep reports for machines: a JUnit XML file that CI systems display as test results, and a
//! JSON summary for scripts.
//!
//! Both writers take a [`SweepSummary`], a plain struct that the command line fills in after a
//! sweep, and return text; they do nothing else. They must not run seeds, read the clock or
//! the environment, or reorder what they are given beyond sorting by seed: the same summary
//! always gives the same bytes. Every failure they report carries the command that replays it.
//! The JUnit file is written through quick-xml's writer, which escapes what the summary carries;
//! a character that XML cannot carry at all becomes U+FFFD, so no text a system wrote can make
//! the report unreadable.
//! Files are written atomically (a temporary file in the same directory, renamed into place),
//! so a CI system never picks up half a report.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io;
use std::path::Path;

use quick_xml::Writer;
use quick_xml::events::attributes::Attribute;
use quick_xml::events::{BytesDecl, BytesText, Event};
use quick_xml::name::QName;
use serde::Serialize;

use crate::coverage::{FaultTally, SweepCoverage, Tally};
use crate::files;
use crate::sweep::Shard;
use crate::trace::format_time_ms;

/// The version of the JSON layout; it grows when a field changes meaning or goes away.
pub const JSON_FORMAT_VERSION: u32 = 1;

/// Everything a report says about one sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepSummary {
    /// The system swept.
    pub system: String,
    /// The range is `first_seed..first_seed + seeds`.
    pub first_seed: u64,
    /// How many seeds the range holds.
    pub seeds: u64,
    /// The shard this sweep ran, if it ran one.
    pub shard: Option<Shard>,
    /// Seeds run at once, on as many threads.
    pub jobs: usize,
    /// Name of the database backend the seeds ran on.
    pub backend: String,
    /// Whether every seed ran twice to check that both runs were the same.
    pub check_determinism: bool,
    /// The wall-time budget, in seconds, if the sweep had one.
    pub time_budget_s: Option<u64>,
    /// The shard's share of the range: what would have run without a time budget.
    pub seeds_planned: u64,
    /// Seeds that ran to an outcome.
    pub seeds_run: u64,
    /// Steps taken over all seeds that ran.
    pub steps: u64,
    /// Wall time the sweep took, in milliseconds.
    pub wall_ms: u64,
    /// One entry per problem found, sorted by seed.
    pub failures: Vec<FailedSeed>,
    /// Seeds that could not run at all, sorted by seed.
    pub errors: Vec<SeedError>,
    /// The first failing seed in seed order.
    pub first_failure: Option<FirstFailureSummary>,
    /// What fired and what was reached across the seeds that ran.
    pub coverage: SweepCoverage,
    /// Whether a signal stopped the sweep before it ran every planned seed.
    pub interrupted: bool,
    /// Whether the sweep stopped handing out seeds once `--max-failures` seeds had failed.
    pub stopped_by_max_failures: bool,
}

/// One problem found in one seed: an invariant that failed, or two runs that differed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedSeed {
    /// The seed that failed.
    pub seed: u64,
    /// The invariant that failed, or `NONDETERMINISM` when two runs of the seed differed.
    pub invariant: String,
    /// `safety`, `liveness`, or `determinism`.
    pub kind: String,
    /// The step at which the invariant failed (absent for nondeterminism).
    pub step: Option<u64>,
    /// The virtual time at which it failed (absent for nondeterminism).
    pub virtual_time_ms: Option<i64>,
    /// The evidence, as the invariant stated it.
    pub message: String,
    /// The seed file written for it, if one was.
    pub seed_file: Option<String>,
    /// The one command that reproduces it.
    pub replay: String,
}

/// The name reports give two runs of one seed that differ.
pub const NONDETERMINISM: &str = "same-trace-on-every-run";

/// The name reports give a run that reached its liveness bound before the world settled (kind
/// `bound`): a verdict of its own, not an invariant's.
pub const UNSETTLED: &str = "did-not-settle";

/// A seed that could not run at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeedError {
    /// The seed that could not run.
    pub seed: u64,
    /// Why the seed could not run.
    pub message: String,
    /// The command that runs the seed again.
    pub replay: String,
}

/// How long the sweep took to find its first failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstFailureSummary {
    /// The first seed that failed.
    pub seed: u64,
    /// Seeds of this sweep up to and including the failing one, in seed order.
    pub seeds_until: u64,
    /// Wall time from the start until that seed's result arrived.
    pub wall_ms: u64,
}

impl SweepSummary {
    /// The seed range as `S..E`.
    pub fn range(&self) -> String {
        format!(
            "{}..{}",
            self.first_seed,
            self.first_seed.saturating_add(self.seeds)
        )
    }

    /// Seeds run per second of wall time.
    pub fn seeds_per_second(&self) -> f64 {
        self.seeds_run as f64 / (self.wall_ms as f64 / 1000.0).max(1e-3)
    }

    /// Whether every seed that ran passed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty() && self.errors.is_empty()
    }

    /// How many distinct seeds failed (a seed can both fail an invariant and diverge).
    pub fn failing_seeds(&self) -> usize {
        let mut seeds: Vec<u64> = self.failures.iter().map(|failure| failure.seed).collect();
        seeds.sort_unstable();
        seeds.dedup();
        seeds.len()
    }

    fn sorted_failures(&self) -> Vec<&FailedSeed> {
        let mut failures: Vec<&FailedSeed> = self.failures.iter().collect();
        failures.sort_by_key(|failure| failure.seed);
        failures
    }

    fn sorted_errors(&self) -> Vec<&SeedError> {
        let mut errors: Vec<&SeedError> = self.errors.iter().collect();
        errors.sort_by_key(|error| error.seed);
        errors
    }

    /// The name the sweep's own test case carries: stable from run to run of the same command,
    /// so that a CI system can follow its history.
    fn sweep_case_name(&self) -> String {
        match self.shard {
            Some(shard) => format!("sweep of seeds {}, shard {shard}", self.range()),
            None => format!("sweep of seeds {}", self.range()),
        }
    }
}

/// Seconds with millisecond precision, as reports print them.
fn seconds(wall_ms: u64) -> f64 {
    wall_ms as f64 / 1000.0
}

/// Rounds to one decimal, so that reports do not carry meaningless digits.
fn one_decimal(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

/// The JSON summary: one object, fields in a fixed order, failures sorted by seed.
pub fn json_report(summary: &SweepSummary) -> String {
    serde_json::to_string_pretty(&JsonReport::of(summary)).expect("the report is plain data") + "\n"
}

/// The JSON summary's layout. serde writes fields in the order they are declared here, which is
/// the order scripts and people reading the file have always seen; a field changes meaning or
/// goes away only with [`JSON_FORMAT_VERSION`].
#[derive(Serialize)]
struct JsonReport<'a> {
    format_version: u32,
    system: &'a str,
    first_seed: u64,
    seeds: u64,
    seed_range: String,
    shard: Option<JsonShard>,
    backend: &'a str,
    jobs: usize,
    check_determinism: bool,
    time_budget_s: Option<u64>,
    seeds_planned: u64,
    seeds_run: u64,
    stopped_by_time_budget: bool,
    stopped_by_max_failures: bool,
    interrupted: bool,
    passed: bool,
    failing_seeds: usize,
    steps: u64,
    wall_s: f64,
    seeds_per_second: f64,
    first_failing_seed: Option<u64>,
    seeds_to_first_failure: Option<u64>,
    time_to_first_failure_s: Option<f64>,
    failures: Vec<JsonFailure<'a>>,
    errors: Vec<&'a SeedError>,
    coverage: JsonCoverage<'a>,
}

/// The shard a sweep ran, as an object rather than `S/N` text, so scripts need not parse it.
#[derive(Serialize)]
struct JsonShard {
    index: u64,
    count: u64,
}

/// One failure as the JSON summary states it: the [`FailedSeed`] plus its virtual time written
/// out, the way the printed summary and the trace show it.
#[derive(Serialize)]
struct JsonFailure<'a> {
    seed: u64,
    invariant: &'a str,
    kind: &'a str,
    step: Option<u64>,
    virtual_time_ms: Option<i64>,
    virtual_time: Option<String>,
    message: &'a str,
    seed_file: Option<&'a str>,
    replay: &'a str,
}

/// The sweep's coverage with the lists a reader asks for (never reached, never fired) worked
/// out, so scripts need not know every situation and fault model.
#[derive(Serialize)]
struct JsonCoverage<'a> {
    seeds: u64,
    faults_fired: &'a BTreeMap<String, FaultTally>,
    situations: &'a BTreeMap<String, Tally>,
    never_reached: Vec<String>,
    never_fired: Vec<String>,
    warnings: Vec<String>,
    notes: Vec<String>,
}

impl<'a> JsonReport<'a> {
    /// Everything the summary says, with the figures derived from it (pass or fail, rates, how
    /// the sweep stopped) worked out once, here.
    fn of(summary: &'a SweepSummary) -> JsonReport<'a> {
        JsonReport {
            format_version: JSON_FORMAT_VERSION,
            system: &summary.system,
            first_seed: summary.first_seed,
            seeds: summary.seeds,
            seed_range: summary.range(),
            shard: summary.shard.map(|shard| JsonShard {
                index: shard.index,
                count: shard.count,
            }),
            backend: &summary.backend,
            jobs: summary.jobs,
            check_determinism: summary.check_determinism,
            time_budget_s: summary.time_budget_s,
            seeds_planned: summary.seeds_planned,
            seeds_run: summary.seeds_run,
            stopped_by_time_budget: summary.seeds_run < summary.seeds_planned
                && !summary.interrupted
                && !summary.stopped_by_max_failures,
            stopped_by_max_failures: summary.stopped_by_max_failures,
            interrupted: summary.interrupted,
            passed: summary.passed(),
            failing_seeds: summary.failing_seeds(),
            steps: summary.steps,
            wall_s: seconds(summary.wall_ms),
            seeds_per_second: one_decimal(summary.seeds_per_second()),
            first_failing_seed: summary.first_failure.map(|first| first.seed),
            seeds_to_first_failure: summary.first_failure.map(|first| first.seeds_until),
            time_to_first_failure_s: summary.first_failure.map(|first| seconds(first.wall_ms)),
            failures: summary
                .sorted_failures()
                .into_iter()
                .map(JsonFailure::of)
                .collect(),
            errors: summary.sorted_errors(),
            coverage: JsonCoverage::of(&summary.coverage),
        }
    }
}

impl<'a> JsonFailure<'a> {
    fn of(failure: &'a FailedSeed) -> JsonFailure<'a> {
        JsonFailure {
            seed: failure.seed,
            invariant: &failure.invariant,
            kind: &failure.kind,
            step: failure.step,
            virtual_time_ms: failure.virtual_time_ms,
            virtual_time: failure.virtual_time_ms.map(format_time_ms),
            message: &failure.message,
            seed_file: failure.seed_file.as_deref(),
            replay: &failure.replay,
        }
    }
}

impl<'a> JsonCoverage<'a> {
    fn of(coverage: &'a SweepCoverage) -> JsonCoverage<'a> {
        JsonCoverage {
            seeds: coverage.seeds,
            faults_fired: &coverage.faults_fired,
            situations: &coverage.situations,
            never_reached: coverage.never_reached(),
            never_fired: coverage.never_fired(),
            warnings: coverage.warnings(),
            notes: coverage.notes(),
        }
    }
}

/// The JUnit XML report: one test suite holding a test case for the sweep as a whole (failing
/// with a count when any seed failed), one per failing seed (its `<failure>` message is the
/// invariant, its text the evidence and the replay command) and one per seed that could not
/// run (an `<error>`).
pub fn junit_report(summary: &SweepSummary) -> String {
    // Two spaces a level, one element a line; text stays on its element's line, so the
    // evidence reads back exactly as it was given.
    let mut writer = Writer::new_with_indent(Vec::new(), b' ', 2);
    write_junit(&mut writer, summary).expect("writing into memory does not fail");
    let mut xml = String::from_utf8(writer.into_inner()).expect("everything written was UTF-8");
    // The writer stops after the last tag; a text file ends with a line break.
    xml.push('\n');
    xml
}

/// What every part of the JUnit report is written through.
type XmlWriter = Writer<Vec<u8>>;

/// The counts that `<testsuites>` and `<testsuite>` both carry, as attribute values.
struct JunitCounts {
    tests: String,
    failures: String,
    errors: String,
    /// The sweep's wall time in seconds.
    time: String,
}

impl JunitCounts {
    /// A failing sweep's own case counts besides its seeds' cases: as a failure when some seed
    /// failed, as an error when seeds only could not run. The totals then match the `<failure>`
    /// and `<error>` elements a reader counts.
    fn of(summary: &SweepSummary) -> JunitCounts {
        let failures = summary.failures.len();
        let errors = summary.errors.len();
        let sweep_failed = !summary.passed();
        JunitCounts {
            tests: (1 + failures + errors).to_string(),
            failures: (failures + usize::from(sweep_failed && failures > 0)).to_string(),
            errors: (errors + usize::from(sweep_failed && failures == 0)).to_string(),
            time: format!("{:.3}", seconds(summary.wall_ms)),
        }
    }
}

/// The document: the XML declaration, then `<testsuites>` around the sweep's one `<testsuite>`.
fn write_junit(writer: &mut XmlWriter, summary: &SweepSummary) -> io::Result<()> {
    let counts = JunitCounts::of(summary);
    let suite_name = format!("commitgap sweep {} {}", summary.system, summary.sweep_case_name());
    writer.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    writer
        .create_element("testsuites")
        .with_attributes(attributes(&[
            ("name", "commitgap"),
            ("tests", &counts.tests),
            ("failures", &counts.failures),
            ("errors", &counts.errors),
            ("time", &counts.time),
        ]))
        .write_inner_content(|writer| {
            writer
                .create_element("testsuite")
                .with_attributes(attributes(&[
                    ("name", &suite_name),
                    ("tests", &counts.tests),
                    ("failures", &counts.failures),
                    ("errors", &counts.errors),
                    ("skipped", "0"),
                    ("time", &counts.time),
                ]))
                .write_inner_content(|writer| write_suite(writer, summary, &counts.time))?;
            Ok(())
        })?;
    Ok(())
}

/// The suite's content: its properties, the sweep's own case, then a case per failing seed and
/// one per seed that could not run, each in seed order.
fn write_suite(writer: &mut XmlWriter, summary: &SweepSummary, wall_s: &str) -> io::Result<()> {
    write_properties(writer, summary)?;
    let classname = summary.system.as_str();
    let verdict = sweep_verdict(summary);
    let sweep_outcome = (!summary.passed()).then(|| CaseOutcome {
        element: if summary.failures.is_empty() {
            "error"
        } else {
            "failure"
        },
        message: &verdict,
        kind: "sweep",
        details: sweep_details(summary),
    });
    write_case(
        writer,
        &[
            ("classname", classname),
            ("name", &summary.sweep_case_name()),
            ("time", wall_s),
        ],
        sweep_outcome.as_ref(),
    )?;
    for failure in summary.sorted_failures() {
        let name = if failure.kind == "determinism" {
            format!("seed {} determinism", failure.seed)
        } else {
            format!("seed {}", failure.seed)
        };
        let outcome = CaseOutcome {
            element: "failure",
            message: &failure.invariant,
            kind: &failure.kind,
            details: failure_details(failure),
        };
        write_case(
            writer,
            &[("classname", classname), ("name", &name)],
            Some(&outcome),
        )?;
    }
    for error in summary.sorted_errors() {
        let outcome = CaseOutcome {
            element: "error",
            message: "could not run",
            kind: "error",
            details: format!("{}\nreproduce: {}", error.message, error.replay),
        };
        let name = format!("seed {}", error.seed);
        write_case(
            writer,
            &[("classname", classname), ("name", &name)],
            Some(&outcome),
        )?;
    }
    Ok(())
}

/// The suite's `<properties>`: how the sweep was run and what it reached, for a reader who has
/// only the report.
fn write_properties(writer: &mut XmlWriter, summary: &SweepSummary) -> io::Result<()> {
    let shard = summary
        .shard
        .map_or_else(|| "none".to_owned(), |shard| shard.to_string());
    let budget = summary
        .time_budget_s
        .map_or_else(|| "none".to_owned(), |budget_s| format!("{budget_s} s"));
    let properties = [
        ("system", summary.system.clone()),
        ("seed_range", summary.range()),
        ("shard", shard),
        ("seeds_run", summary.seeds_run.to_string()),
        ("seeds_planned", summary.seeds_planned.to_string()),
        ("time_budget", budget),
        ("backend", summary.backend.clone()),
        ("check_determinism", summary.check_determinism.to_string()),
        ("steps", summary.steps.to_string()),
        ("seeds_per_second", format!("{:.1}", summary.seeds_per_second())),
        (
            "coverage_situations_reached",
            situations_reached(&summary.coverage),
        ),
        (
            "coverage_never_reached",
            names_or_none(&summary.coverage.never_reached()),
        ),
        (
            "coverage_faults_never_fired",
            names_or_none(&summary.coverage.never_fired()),
        ),
    ];
    writer
        .create_element("properties")
        .write_inner_content(|writer| {
            for (name, value) in &properties {
                writer
                    .create_element("property")
                    .with_attributes(attributes(&[("name", name), ("value", value)]))
                    .write_empty()?;
            }
            Ok(())
        })?;
    Ok(())
}

/// Why a test case did not pass, written as a `<failure>` or an `<error>` inside it.
struct CaseOutcome<'a> {
    /// `failure` for a problem found, `error` for a seed (or sweep) that could not run.
    element: &'static str,
    /// The one line a CI system shows for the case.
    message: &'a str,
    /// The `type` attribute: what kind of problem it is.
    kind: &'a str,
    /// The element's text: the evidence and the command that reproduces it.
    details: String,
}

/// One `<testcase>` with the attributes in `case`: empty when it passed, else holding its outcome.
fn write_case(
    writer: &mut XmlWriter,
    case: &[(&'static str, &str)],
    outcome: Option<&CaseOutcome<'_>>,
) -> io::Result<()> {
    let element = writer
        .create_element("testcase")
        .with_attributes(attributes(case));
    let Some(outcome) = outcome else {
        element.write_empty()?;
        return Ok(());
    };
    element.write_inner_content(|writer| {
        writer
            .create_element(outcome.element)
            .with_attributes(attributes(&[
                ("message", outcome.message),
                ("type", outcome.kind),
            ]))
            .write_text_content(BytesText::new(&xml_chars(&outcome.details)))?;
        Ok(())
    })?;
    Ok(())
}

/// Attributes with their values escaped. quick-xml escapes the markup characters (`&`, `<`,
/// `>` and both quotes); tabs and line breaks become character references as well, because an
/// XML reader turns them into spaces inside an attribute, and an invariant's name or a system's
/// should read back as it was given.
fn attributes(pairs: &[(&'static str, &str)]) -> Vec<Attribute<'static>> {
    pairs
        .iter()
        .map(|&(key, value)| {
            let escaped = quick_xml::escape::escape(xml_chars(value))
                .replace('\t', "&#9;")
                .replace('\n', "&#10;")
                .replace('\r', "&#13;");
            Attribute {
                key: QName(key.as_bytes()),
                value: Cow::Owned(escaped.into_bytes()),
            }
        })
        .collect()
}

/// `value` with each character that XML 1.0 cannot carry at all, not even as a character
/// reference, replaced by U+FFFD: the control characters other than tab, line feed and carriage
/// return, and U+FFFE and U+FFFF. Evidence quotes whatever a system wrote, and one such character
/// would make a CI system reject the whole report.
fn xml_chars(value: &str) -> Cow<'_, str> {
    let unfit = |character: char| {
        matches!(
            character,
            '\u{0}'..='\u{8}' | '\u{b}' | '\u{c}' | '\u{e}'..='\u{1f}' | '\u{fffe}' | '\u{ffff}'
        )
    };
    if value.contains(unfit) {
        Cow::Owned(
            value
                .chars()
                .map(|character| if unfit(character) { '\u{fffd}' } else { character })
                .collect(),
        )
    } else {
        Cow::Borrowed(value)
    }
}

/// `9 of 10`: how many of the situations the sweep reached.
fn situations_reached(coverage: &SweepCoverage) -> String {
    let all = coverage.situations_listed();
    format!("{} of {all}", all - coverage.never_reached().len())
}

/// Names joined with commas, or `none`.
fn names_or_none<T: AsRef<str>>(names: &[T]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(", ")
    }
}

/// The sweep test case's one-line verdict, such as `14 of 30 seeds failed`.
fn sweep_verdict(summary: &SweepSummary) -> String {
    let mut verdict = format!(
        "{} of {} seeds failed",
        summary.failing_seeds(),
        summary.seeds_run
    );
    if !summary.errors.is_empty() {
        verdict.push_str(&format!(", {} could not run", summary.errors.len()));
    }
    verdict
}

/// The sweep test case's text: which seeds failed and how soon the first one was found.
fn sweep_details(summary: &SweepSummary) -> String {
    let mut seeds: Vec<String> = summary
        .sorted_failures()
        .iter()
        .map(|failure| failure.seed.to_string())
        .collect();
    seeds.dedup();
    let mut details = format!(
        "{} of system {} over seeds {}",
        sweep_verdict(summary),
        summary.system,
        summary.range()
    );
    if !seeds.is_empty() {
        details.push_str(&format!("\nfailing seeds: {}", seeds.join(", ")));
    }
    if let Some(first) = summary.first_failure {
        details.push_str(&format!("\n{}", first_failure_line(&first)));
    }
    details.push_str("\nEach failing seed has a test case of its own with the command that replays it.");
    details
}

/// A failing seed's text: the evidence, where and when, and the replay command.
fn failure_details(failure: &FailedSeed) -> String {
    let mut details = match (failure.step, failure.virtual_time_ms) {
        (Some(step), Some(time_ms)) => format!(
            "{} ({}) at step {step} ({})\n{}",
            failure.invariant,
            failure.kind,
            format_time_ms(time_ms),
            failure.message
        ),
        _ => format!("{} ({})\n{}", failure.invariant, failure.kind, failure.message),
    };
    if let Some(seed_file) = &failure.seed_file {
        details.push_str(&format!("\nseed file: {seed_file}"));
    }
    details.push_str(&format!("\nreplay: {}", failure.replay));
    details
}

/// The line that says how soon a sweep found its first failure, such as
/// `first failure: seed 13 after 14 seeds and 0.2 s`.
pub fn first_failure_line(first: &FirstFailureSummary) -> String {
    format!(
        "first failure: seed {} after {} seed{} and {:.1} s",
        first.seed,
        first.seeds_until,
        if first.seeds_until == 1 { "" } else { "s" },
        seconds(first.wall_ms)
    )
}

/// Checks, before a long sweep starts, that a report can later be written to `path` (see
/// [`files::check_writable_file`]). Errors are one line.
pub fn check_report_path(path: &Path) -> Result<(), String> {
    files::check_writable_file(path)
}

/// Writes a report to `path` atomically and durably (see [`files::write_atomically`]).
pub fn write_atomically(path: &Path, contents: &str) -> Result<(), String> {
    files::write_atomically(path, contents.as_bytes())
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn summary(failures: Vec<FailedSeed>) -> SweepSummary {
        let first_failure = failures.first().map(|failure| FirstFailureSummary {
            seed: failure.seed,
            seeds_until: failure.seed + 1,
            wall_ms: 250,
        });
        SweepSummary {
            system: "key-per-attempt".to_owned(),
            first_seed: 0,
            seeds: 30,
            shard: Some(Shard { index: 2, count: 3 }),
            jobs: 2,
            backend: "memdb".to_owned(),
            check_determinism: false,
            time_budget_s: None,
            seeds_planned: 10,
            seeds_run: 10,
            steps: 12_345,
            wall_ms: 1_500,
            failures,
            errors: Vec::new(),
            first_failure,
            coverage: SweepCoverage::default(),
            interrupted: false,
            stopped_by_max_failures: false,
        }
    }

    fn failure(seed: u64, message: &str) -> FailedSeed {
        FailedSeed {
            seed,
            invariant: "one-effect-per-operation".to_owned(),
            kind: "safety".to_owned(),
            step: Some(399),
            virtual_time_ms: Some(2_533_026),
            message: message.to_owned(),
            seed_file: Some(format!("seeds/key-per-attempt-{seed}.json")),
            replay: format!("cargo run --release -- replay seeds/key-per-attempt-{seed}.json"),
        }
    }

    #[test]
    fn escaping_covers_markup_quotes_newlines_and_control_characters() {
        let mut marked_up = failure(2, "a < b && c > \"d\" 'e'\nbell\u{7} ]]>");
        marked_up.invariant = "line\nnext\tx\ry".to_owned();
        let xml = junit_report(&summary(vec![marked_up]));
        assert!(
            xml.contains("a &lt; b &amp;&amp; c &gt; &quot;d&quot; &apos;e&apos;\nbell\u{fffd} ]]&gt;"),
            "markup is escaped, line breaks kept in text, control characters replaced: {xml}"
        );
        assert!(
            xml.contains("message=\"line&#10;next&#9;x&#13;y\""),
            "whitespace in an attribute is written as references: {xml}"
        );
        assert!(!xml.contains('\u{7}'), "{xml}");
    }

    #[test]
    fn junit_counts_cases_and_carries_replays_in_seed_order() {
        let xml = junit_report(&summary(vec![failure(7, "x"), failure(4, "<b> & \"q\"")]));
        assert_eq!(xml.matches("<testcase ").count(), 3);
        assert_eq!(xml.matches("<failure ").count(), 3, "two seeds and the sweep");
        assert!(xml.contains("tests=\"3\" failures=\"3\" errors=\"0\""), "{xml}");
        assert!(xml.contains("message=\"2 of 10 seeds failed\""), "{xml}");
        assert!(xml.contains("name=\"sweep of seeds 0..30, shard 2/3\""), "{xml}");
        let four = xml.find("name=\"seed 4\"").unwrap();
        let seven = xml.find("name=\"seed 7\"").unwrap();
        assert!(four < seven, "seed cases are sorted by seed");
        assert!(xml.contains("replay: cargo run --release -- replay seeds/key-per-attempt-4.json"));
        assert!(xml.contains("&lt;b&gt; &amp; &quot;q&quot;"), "{xml}");
        assert!(
            xml.contains("first failure: seed 7 after 8 seeds and 0.2 s"),
            "{xml}"
        );
    }

    #[test]
    fn a_passing_sweep_is_one_passing_case() {
        let xml = junit_report(&summary(Vec::new()));
        assert_eq!(xml.matches("<testcase ").count(), 1);
        assert!(!xml.contains("<failure"));
        assert!(xml.contains("tests=\"1\" failures=\"0\" errors=\"0\""), "{xml}");
    }

    #[test]
    fn json_has_the_fields_scripts_read() {
        let json = json_report(&summary(vec![failure(3, "two effects")]));
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["system"], "key-per-attempt");
        assert_eq!(value["seed_range"], "0..30");
        assert_eq!(value["shard"]["index"], 2);
        assert_eq!(value["shard"]["count"], 3);
        assert_eq!(value["seeds_run"], 10);
        assert_eq!(value["passed"], false);
        assert_eq!(value["seeds_to_first_failure"], 4);
        assert_eq!(value["time_to_first_failure_s"], 0.25);
        assert_eq!(value["seeds_per_second"], 6.7);
        assert!(value["coverage"]["warnings"].is_array());
        assert!(value["coverage"]["notes"].is_array());
        let entry = &value["failures"][0];
        assert_eq!(entry["seed"], 3);
        assert_eq!(entry["step"], 399);
        assert_eq!(entry["virtual_time"], "0:42:13.026");
        assert_eq!(
            entry["replay"],
            "cargo run --release -- replay seeds/key-per-attempt-3.json"
        );
    }

    #[test]
    fn a_report_replaces_the_old_file_whole() {
        let directory = std::env::temp_dir().join(format!("commitgap-report-{}", std::process::id()));
        let _ = fs::remove_dir_all(&directory);
        let path = directory.join("nested").join("report.json");
        check_report_path(&path).unwrap();
        write_atomically(&path, "first").unwrap();
        write_atomically(&path, "second").unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "second");
        let leftovers = fs::read_dir(path.parent().unwrap()).unwrap().count();
        assert_eq!(leftovers, 1, "no temporary file is left behind");
        assert!(
            check_report_path(&directory)
                .unwrap_err()
                .contains("is a directory, not a regular file")
        );
        let below_a_file = path.join("report.xml");
        assert!(check_report_path(&below_a_file).is_err());
        assert!(write_atomically(&below_a_file, "x").is_err());
        let _ = fs::remove_dir_all(&directory);
    }
}
