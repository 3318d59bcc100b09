//! The `bench` command's contract: it measures a few seeds and ends with one line of figures in a
//! fixed shape that scripts can read, and it refuses bad input with exit code 2 and one line.

use std::process::{Command, Output};

fn commitgap(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_commitgap"))
        .args(arguments)
        .output()
        .expect("the binary runs")
}

/// The four figures of `bench: <steps/s> steps/s, <seeds/s> seeds/s, sim/raw <ratio>, peak <MiB>
/// MiB`, or why the line does not have that shape.
fn figures(line: &str) -> Result<[f64; 4], String> {
    let rest = line
        .strip_prefix("bench: ")
        .ok_or("does not start with `bench: `")?;
    let parts: Vec<&str> = rest.split(", ").collect();
    let [steps, seeds, ratio, peak] = parts[..] else {
        return Err(format!("has {} comma-separated parts, not 4", parts.len()));
    };
    let number = |text: Option<&str>, what: &str| -> Result<f64, String> {
        let text = text.ok_or(format!("lacks {what}"))?;
        let value: f64 = text
            .parse()
            .map_err(|_| format!("{what} {text:?} is not a number"))?;
        Ok(value)
    };
    let steps = number(steps.strip_suffix(" steps/s"), "steps/s")?;
    let seeds = number(seeds.strip_suffix(" seeds/s"), "seeds/s")?;
    let ratio = number(ratio.strip_prefix("sim/raw "), "sim/raw")?;
    let peak = number(
        peak.strip_prefix("peak ")
            .and_then(|peak| peak.strip_suffix(" MiB")),
        "peak MiB",
    )?;
    if !steps.to_string().chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("steps/s {steps} is not a whole number"));
    }
    Ok([steps, seeds, ratio, peak])
}

#[test]
fn bench_ends_with_its_figures_in_the_promised_shape() {
    let output = commitgap(&["bench", "--seeds", "5", "--jobs", "2"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let last = stdout.lines().last().expect("bench prints something");
    let values = figures(last).unwrap_or_else(|why| panic!("{last:?} {why}"));
    for value in values {
        assert!(value > 0.0, "{last:?}: every figure is positive");
    }
    assert!(
        stdout.contains("every statement returned what it returned in the simulation"),
        "{stdout}"
    );
}

#[test]
fn the_shape_check_rejects_other_lines() {
    assert!(figures("bench: 41234 steps/s, 187.3 seeds/s, sim/raw 0.62, peak 38 MiB").is_ok());
    for line in [
        "bench: 41234 steps/s, 187.3 seeds/s, sim/raw 0.62",
        "sweep: 41234 steps/s, 187.3 seeds/s, sim/raw 0.62, peak 38 MiB",
        "bench: 41234.5 steps/s, 187.3 seeds/s, sim/raw 0.62, peak 38 MiB",
        "bench: 41234 steps/s, 187.3 seeds/s, sim/raw 0.62, peak unknown MiB",
    ] {
        assert!(figures(line).is_err(), "{line}");
    }
}

#[test]
fn bad_bench_input_exits_2_with_one_line() {
    for (arguments, expected) in [
        (&["bench", "--seeds", "0"][..], "--seeds"),
        (&["bench", "--seeds", "many"], "--seeds"),
        (&["bench", "--jobs", "0"], "--jobs"),
        (&["bench", "--backend", "postgres"], "unknown backend"),
        (
            &["bench", "--first-seed", "18446744073709551615", "--seeds", "2"],
            "--first-seed",
        ),
        (&["bench", "--system", "nonesuch"], "unknown system"),
    ] {
        let output = commitgap(arguments);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{arguments:?}: {stderr}");
        assert_eq!(
            stderr.lines().count(),
            1,
            "{arguments:?}: one line, got {stderr:?}"
        );
        assert!(stderr.starts_with("error: "), "{stderr}");
        assert!(
            stderr.contains(expected),
            "{arguments:?}: {stderr:?} should mention {expected:?}"
        );
        assert!(output.stdout.is_empty(), "{arguments:?} measured nothing");
    }
}

#[test]
fn bench_has_help() {
    let output = commitgap(&["bench", "--help"]);
    assert_eq!(output.status.code(), Some(0));
    let help = String::from_utf8_lossy(&output.stdout);
    for needle in [
        "--seeds",
        "--first-seed",
        "--jobs",
        "--backend",
        "sim/raw",
        "peak",
    ] {
        assert!(help.contains(needle), "help mentions {needle}: {help}");
    }
}
