//! The timeline page's unit tests: traces built step by step, read, laid out and rendered, and
//! the page checked for what a person must see in it.
//!
//! They build traces by hand and run no simulation, so a change in the simulator cannot make them
//! pass or fail.

use std::sync::Arc;

use commitgap::env::Value;
use commitgap::provider::ProviderReply;
use commitgap::receiver::{Answer, SuccessKind};

use super::lanes::*;
use super::reading::*;
use super::*;
use crate::run::Failure;
use crate::trace::{Actor, Arrival, CallOutcome, DeliveryHow, Happening, Observed, SqlOutcome, TraceStep};

/// One step's record.
fn step(step: u64, time_ms: i64, actor: Actor, happened: Vec<Happening>) -> TraceStep {
    TraceStep {
        step,
        time_ms,
        actor,
        task: None,
        happened,
    }
}

fn process(id: &str) -> Actor {
    Actor::Process(id.into())
}

fn setup(receivers: u32, relay_workers: u32) -> TraceStep {
    step(
        0,
        0,
        Actor::World,
        vec![Happening::Setup {
            system: "reference".into(),
            seed: 7,
            rows: 4,
            accounts: 1,
            subjects: 2,
            events: 2,
            streams: 2,
            receivers,
            relay_workers,
            sender: "svix",
        }],
    )
}

fn sql(statement: &str, outcome: SqlOutcome) -> Happening {
    Happening::Sql {
        statement: Arc::from(statement),
        params: Vec::new(),
        outcome,
        injected: false,
    }
}

fn crash(id: &str) -> Happening {
    Happening::Crash {
        process: id.into(),
        tasks: 1,
        open_transactions: 1,
        restart_in_ms: 3_000,
    }
}

fn send(key: &str, reply: Result<ProviderReply, String>, reply_lost: bool) -> Happening {
    Happening::Call {
        send: true,
        key: key.into(),
        outcome: CallOutcome::Replied(reply),
        reply_lost,
    }
}

fn accepted(effect_id: &str) -> Result<ProviderReply, String> {
    Ok(ProviderReply::Accepted {
        effect_id: effect_id.into(),
        replayed: false,
    })
}

fn failure(step: u64, message: &str) -> Failure {
    Failure {
        invariant: "one-effect-per-operation".to_owned(),
        kind: "safety".to_owned(),
        step,
        time_ms: 5_000,
        message: message.to_owned(),
    }
}

/// How many marks (one per column) carry `kind`.
fn marks_with_kind(page: &str, kind: &str) -> usize {
    page.match_indices("data-kinds=\"")
        .filter(|(start, _)| {
            let rest = &page[start + "data-kinds=\"".len()..];
            let kinds = &rest[..rest.find('"').expect("attributes are closed")];
            kinds.split(' ').any(|name| name == kind)
        })
        .count()
}

#[test]
fn a_process_keeps_one_lane_across_incarnations() {
    assert_eq!(lane_of("receiver-2#1"), lane_of("receiver-2#3"));
    assert_eq!(
        lane_of("receiver-2#1").map(|lane| lane.name),
        Some("receiver-2".to_owned())
    );
    assert_ne!(lane_of("receiver-2#1"), lane_of("receiver-1#1"));
    assert!(
        lane_of("relay-9#1") < lane_of("relay-10#1"),
        "numbers order lanes, not text"
    );
    assert!(lane_of("sender") < lane_of("receiver-1#1"));
    assert!(lane_of("relay-3#1") < lane_of("provider"));
    assert_eq!(lane_of("fault:receipt-purge"), lane_of("purge#4"));
    assert_eq!(lane_of("operator#1"), lane_of("operator"));
    assert_eq!(lane_of_actor(&Actor::World), None);
    assert_eq!(lane_of_actor(&Actor::Invariant), None);

    let begin = || sql("BEGIN IMMEDIATE", SqlOutcome::Done);
    let steps = [
        setup(2, 1),
        step(1, 0, process("receiver-2#1"), vec![begin()]),
        step(2, 1, process("receiver-2#1"), vec![crash("receiver-2#1")]),
        step(
            3,
            3_001,
            process("receiver-2#1"),
            vec![Happening::Restart {
                process: "receiver-2#2".into(),
            }],
        ),
        step(4, 3_002, process("receiver-2#2"), vec![crash("receiver-2#2")]),
        step(
            5,
            4_002,
            process("receiver-2#2"),
            vec![Happening::Restart {
                process: "receiver-2#3".into(),
            }],
        ),
        step(6, 4_003, process("receiver-2#3"), vec![begin()]),
    ];
    let page = render("lanes", &steps, None);
    assert_eq!(
        page.matches("class=\"lane-label\" data-lane=\"receiver-2\"")
            .count(),
        1
    );
    for lane in ["sender", "receiver-1", "relay-1", "provider", "purge", "operator"] {
        assert!(
            page.contains(&format!("class=\"lane-label\" data-lane=\"{lane}\"")),
            "{lane} has a lane"
        );
    }
    assert!(page.contains("incarnations #1\u{2013}#3"));
    assert_eq!(marks_with_kind(&page, "crash"), 2);
    assert_eq!(marks_with_kind(&page, "restart"), 2);
    assert_eq!(
        page.matches("class=\"band-down\"").count(),
        2,
        "down from each crash to its restart"
    );
    assert!(
        page.contains(">#3</text>"),
        "the restart is labelled with its incarnation"
    );
}

#[test]
fn trace_text_is_escaped_everywhere() {
    let hostile = "<script>alert(\"x\")</script> & 'quoted' </title><b>";
    let steps = [
        setup(1, 1),
        step(
            1,
            0,
            process("receiver-1#1"),
            vec![Happening::Log(hostile.into())],
        ),
        step(
            2,
            1,
            process("<img src=x>"),
            vec![Happening::Log("what & why".into())],
        ),
    ];
    let evidence = Failure {
        message: "2 effects <b>&</b> \"quoted\"".to_owned(),
        ..failure(1, "")
    };
    let page = render("title <i>&</i>", &steps, Some(&evidence));
    for raw in ["<script>alert", "</title><b>", "<img src", "<b>&</b>", "<i>&</i>"] {
        assert!(!page.contains(raw), "{raw} reached the page unescaped");
    }
    assert!(page.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#x27;quoted&#x27;"));
    assert!(page.contains("2 effects &lt;b&gt;&amp;&lt;/b&gt; &quot;quoted&quot;"));
    assert!(page.contains("commitgap timeline: title &lt;i&gt;&amp;&lt;/i&gt;"));
    assert_eq!(escape("a\u{0}b\u{7}c\td\ne"), "a\u{fffd}b\u{fffd}c\td\ne");
    // The only script is the page's own.
    assert_eq!(page.matches("<script").count(), 1);
}

#[test]
fn idle_polls_fold_into_one_grey_line_per_lane() {
    let poll = || {
        vec![
            sql(
                "SELECT operation_key FROM outbox",
                SqlOutcome::Rows {
                    count: 0,
                    first: None,
                },
            ),
            Happening::Sleep { duration_ms: 1_000 },
        ]
    };
    let failed_poll = || {
        vec![
            sql(
                "SELECT operation_key FROM outbox",
                SqlOutcome::Failed("database is busy".into()),
            ),
            Happening::Log("the pass failed: database is busy".into()),
            Happening::Sleep { duration_ms: 1_000 },
        ]
    };
    let relay = || process("relay-1#1");
    let mut steps = vec![setup(1, 1)];
    let (mut number, mut time_ms) = (0, 0);
    for index in 0..300 {
        number += 1;
        time_ms += 1_000;
        steps.push(step(number, time_ms, relay(), vec![Happening::Wake]));
        number += 1;
        let happened = if index % 10 == 0 { failed_poll() } else { poll() };
        steps.push(step(number, time_ms + 1, relay(), happened));
    }
    let found = SqlOutcome::Rows {
        count: 1,
        first: Some(vec![Value::Text("k".into()), Value::Integer(5)]),
    };
    steps.push(step(
        number + 1,
        time_ms + 2,
        relay(),
        vec![sql("SELECT operation_key FROM outbox", found)],
    ));
    let claim = vec![
        sql("UPDATE outbox SET lease_owner = ?1", SqlOutcome::Changed(1)),
        Happening::Committed {
            rows: 1,
            observed: vec![Observed::LeaseTaken {
                operation_key: "k".into(),
                token: 1,
            }],
        },
    ];
    steps.push(step(number + 2, time_ms + 3, relay(), claim));
    let page = render("polls", &steps, None);
    assert_eq!(
        page.matches("<g class=\"m").count(),
        2,
        "only the find and the claim get columns"
    );
    assert!(page.contains("class=\"idle idle-failing\" data-lane=\"relay-1\" data-steps=\"600\""));
    assert!(page.contains("600 idle steps (polls, sleeps, wake-ups), 30 of them failed on a busy database"));
    assert_eq!(marks_with_kind(&page, "lease-claim"), 1);
    assert_eq!(marks_with_kind(&page, "commit"), 1);
}

#[test]
fn reads_inside_a_transaction_are_not_idle() {
    let relay = || process("relay-1#1");
    let read = |count| {
        vec![
            sql(
                "SELECT payload FROM outbox",
                SqlOutcome::Rows { count, first: None },
            ),
            Happening::Sleep { duration_ms: 1_000 },
        ]
    };
    let steps = [
        setup(1, 1),
        step(1, 0, relay(), vec![sql("BEGIN IMMEDIATE", SqlOutcome::Done)]),
        step(2, 1, relay(), read(1)),
        step(3, 1_001, relay(), vec![sql("COMMIT", SqlOutcome::Done)]),
        step(4, 1_002, relay(), read(0)),
    ];
    let page = render("transaction", &steps, None);
    assert_eq!(page.matches("<g class=\"m").count(), 3);
    assert!(page.contains("data-steps=\"1\""), "the read after COMMIT is idle");
}

#[test]
fn an_actor_of_no_known_lane_gets_a_lane_of_its_own() {
    let steps = [
        setup(1, 1),
        step(
            1,
            1,
            process("mystery-actor#2"),
            vec![Happening::Log("does something new".into())],
        ),
    ];
    let page = render("odd", &steps, None);
    assert!(page.contains("class=\"lane-label\" data-lane=\"mystery-actor\""));
    assert_eq!(marks_with_kind(&page, "log"), 1);
}

#[test]
// One trace of messages, calls and faults and the marks it must give: one story, read top to bottom.
#[allow(clippy::too_many_lines)]
fn messages_calls_and_faults_get_their_marks() {
    let deliver = |how, arrival| Happening::Deliver {
        event_id: "evt-1".into(),
        account: "acct-a".into(),
        stream: 0,
        how,
        arrival,
    };
    let applied = Answer::Success(SuccessKind::Applied);
    let relay = || process("relay-1#1");
    let steps = [
        setup(2, 1),
        step(
            1,
            0,
            Actor::Sender,
            vec![
                deliver(DeliveryHow::Attempt(1), Arrival::To("receiver-2#1".into())),
                deliver(DeliveryHow::Copy, Arrival::Lost),
            ],
        ),
        step(
            2,
            1,
            process("receiver-2#1"),
            vec![
                sql("COMMIT", SqlOutcome::Done),
                Happening::Answer(applied.clone()),
                Happening::Committed {
                    rows: 3,
                    observed: Vec::new(),
                },
            ],
        ),
        step(
            3,
            2,
            process("receiver-2#1"),
            vec![Happening::AnswerLost {
                answer: applied,
                stream: 0,
            }],
        ),
        step(
            4,
            3,
            relay(),
            vec![
                Happening::ClockSet {
                    process: "relay-1#1".into(),
                    offset_ms: 51_168,
                },
                Happening::Reply(Err("timed out".into())),
            ],
        ),
        step(
            5,
            4,
            relay(),
            vec![Happening::Pause {
                process: "relay-1#1".into(),
                duration_ms: 600_000,
            }],
        ),
        step(
            6,
            600_004,
            relay(),
            vec![send("tenant-a/order-1/fulfill/v1", accepted("shp-1"), true)],
        ),
        step(
            7,
            600_005,
            Actor::Provider,
            vec![Happening::ProviderFinishes {
                key: "tenant-a/order-2/fulfill/v1".into(),
                outcome: accepted("shp-2"),
            }],
        ),
        step(
            8,
            600_006,
            Actor::Fault("receipt-purge".into()),
            vec![Happening::Purge {
                older_than_ms: 540_000,
            }],
        ),
        step(
            9,
            600_007,
            process("purge#1"),
            vec![
                sql(
                    "DELETE FROM receipts WHERE received_ms < ?1",
                    SqlOutcome::Changed(2),
                ),
                Happening::Committed {
                    rows: 2,
                    observed: Vec::new(),
                },
            ],
        ),
    ];
    let page = render("marks", &steps, None);
    assert_eq!(marks_with_kind(&page, "deliver"), 1);
    assert_eq!(marks_with_kind(&page, "delivery-lost"), 1);
    assert_eq!(marks_with_kind(&page, "answer"), 1);
    assert_eq!(marks_with_kind(&page, "answer-lost"), 1);
    assert_eq!(marks_with_kind(&page, "commit"), 2);
    assert_eq!(marks_with_kind(&page, "clock-jump"), 1);
    assert_eq!(marks_with_kind(&page, "reply"), 1);
    assert_eq!(marks_with_kind(&page, "pause"), 1);
    assert_eq!(marks_with_kind(&page, "call"), 1);
    assert_eq!(marks_with_kind(&page, "provider"), 2);
    assert_eq!(marks_with_kind(&page, "purge"), 1);
    assert!(
        page.contains("class=\"link lost\""),
        "the lost reply shows on the call's line"
    );
    assert!(page.contains(">shp-1</text>") && page.contains(">shp-2</text>"));
    assert!(page.contains("class=\"band-paused\""));
    assert!(
        page.contains("class=\"jump\""),
        "ten minutes pass between steps 5 and 6"
    );
    assert!(page.contains(">+10m00s</text>"));
}

#[test]
fn leases_and_outcomes_come_from_the_rows_any_system_commits() {
    // A system with its own table and statements: the marks come from what its decoder read,
    // not from its SQL.
    let worker = || process("relay-1#1");
    let committed = |observed| Happening::Committed { rows: 1, observed };
    let key = || "shop/order-9/ship".to_owned();
    let steps = [
        setup(1, 1),
        step(
            1,
            0,
            worker(),
            vec![
                sql(
                    "UPDATE jobs SET holder = ?1 WHERE id = ?2",
                    SqlOutcome::Changed(1),
                ),
                committed(vec![Observed::LeaseTaken {
                    operation_key: key(),
                    token: 1,
                }]),
            ],
        ),
        step(
            2,
            1,
            worker(),
            vec![
                sql("UPDATE jobs SET until_ms = ?1", SqlOutcome::Changed(1)),
                committed(vec![Observed::LeaseExtended { operation_key: key() }]),
            ],
        ),
        step(
            3,
            2,
            worker(),
            vec![
                sql("UPDATE jobs SET state = 'shipped'", SqlOutcome::Changed(1)),
                committed(vec![Observed::Done { operation_key: key() }]),
            ],
        ),
        step(
            4,
            3,
            worker(),
            vec![
                sql("UPDATE jobs SET state = 'failed'", SqlOutcome::Changed(1)),
                committed(vec![Observed::Dead { operation_key: key() }]),
            ],
        ),
    ];
    let page = render("jobs", &steps, None);
    for kind in ["lease-claim", "lease-extend", "done", "dead"] {
        assert_eq!(marks_with_kind(&page, kind), 1, "{kind}");
    }
    assert!(page.contains("lease on shop/order-9/ship taken (token 1)"));
}

#[test]
fn a_key_expiry_shows_where_the_provider_forgot_it() {
    let relay = || process("relay-1#1");
    let key = "tenant-a/order-1/fulfill/v1";
    let steps = [
        setup(1, 1),
        step(1, 1, relay(), vec![send(key, accepted("shp-1"), false)]),
        step(
            2,
            2,
            relay(),
            vec![
                Happening::KeyForgotten {
                    key: key.into(),
                    model: "provider-key-expiry".into(),
                },
                Happening::Wake,
            ],
        ),
        step(3, 3, relay(), vec![send(key, accepted("shp-2"), false)]),
    ];
    let page = render("forgotten", &steps, None);
    assert_eq!(marks_with_kind(&page, "key-expiry"), 1);
    assert!(page.contains(
        "the provider forgot key tenant-a/order-1/fulfill/v1 (provider-key-expiry set its lifetime)"
    ));
}

#[test]
fn the_failing_step_is_highlighted_with_its_evidence() {
    let evidence = "operation tenant-a/order-1/fulfill/v1 has 2 effects: shp-1 under key tenant-a/order-1/fulfill/v1; shp-2";
    let relay = || process("relay-1#1");
    let steps = [
        setup(1, 1),
        step(
            1,
            0,
            relay(),
            vec![send("tenant-a/order-1/fulfill/v1", accepted("shp-1"), false)],
        ),
        step(
            2,
            1,
            relay(),
            vec![send("tenant-a/order-12/fulfill/v1", accepted("shp-12"), false)],
        ),
        step(
            3,
            2,
            relay(),
            vec![send(
                "tenant-a/order-1/fulfill/v1#retry2",
                accepted("shp-3"),
                false,
            )],
        ),
        step(
            4,
            5_000,
            relay(),
            vec![send("tenant-a/order-1/fulfill/v1", accepted("shp-2"), false)],
        ),
        step(
            4,
            5_000,
            Actor::Invariant,
            vec![Happening::Failed {
                invariant: "one-effect-per-operation".into(),
                evidence: evidence.into(),
            }],
        ),
    ];
    for given in [Some(failure(4, evidence)), None] {
        let page = render("failed", &steps, given.as_ref());
        assert!(page.contains("<section id=\"verdict\" class=\"verdict failed\">"));
        assert!(page.contains("<span class=\"invariant\">one-effect-per-operation</span>"));
        assert!(page.contains(&format!("<p class=\"evidence\">{}</p>", escape(evidence))));
        let band = &page[page.find("id=\"failure\"").expect("the failing step is banded")..];
        assert!(band[..band.find('>').expect("closed")].contains("data-step=\"4\""));
        assert!(page.contains(">FAILED one-effect-per-operation at step 4</text>"));
        // Steps 1 and 4 name the operation and its effects; step 2 (order-12, shp-12) and
        // step 3 (another key) do not.
        assert_eq!(page.matches("<g class=\"m related\"").count(), 2);
    }
    assert!(evidence_names(evidence).contains(&"shp-2".to_owned()));
    assert!(mentions_any("accepted shp-1 (new", &["shp-1".to_owned()]));
    assert!(!mentions_any("accepted shp-12 (new", &["shp-1".to_owned()]));
}

#[test]
fn a_liveness_failure_at_an_idle_step_still_gets_its_column() {
    let steps = [
        setup(1, 1),
        step(1, 0, process("relay-1#1"), vec![Happening::Wake]),
        step(1, 0, Actor::World, vec![Happening::Heal { restarting: 0 }]),
        step(2, 60_000, Actor::Operator, vec![Happening::OperatorRequeue]),
        step(3, 120_000, process("relay-1#1"), vec![Happening::Wake]),
    ];
    let liveness = Failure {
        invariant: "outbox-drains".to_owned(),
        kind: "liveness".to_owned(),
        step: 3,
        time_ms: 120_001,
        message: "tenant-a/order-1/fulfill/v1 is still pending".to_owned(),
    };
    let page = render("liveness", &steps, Some(&liveness));
    assert!(
        page.contains("data-step=\"3\" x="),
        "the failing step has the failure band"
    );
    assert!(page.contains("<g id=\"heal\" class=\"heal\" data-step=\"1\">"));
    assert!(page.contains("The fault phase ended at step 1"));
    assert_eq!(marks_with_kind(&page, "operator"), 1);
    assert!(page.contains("class=\"phase-liveness\""));
}

#[test]
fn the_same_trace_gives_the_same_bytes() {
    let steps = [
        setup(2, 2),
        step(
            1,
            0,
            Actor::Sender,
            vec![Happening::Emit {
                kind: "payment.succeeded".into(),
                event_id: "evt-1".into(),
                account: "acct-a".into(),
                tenant: "tenant-a".into(),
                subject: "order-1".into(),
                subscriptions: 1,
            }],
        ),
        step(
            2,
            7_200_000,
            process("relay-2#1"),
            vec![
                sql(
                    "SELECT x FROM outbox",
                    SqlOutcome::Rows {
                        count: 0,
                        first: None,
                    },
                ),
                Happening::Sleep { duration_ms: 1_000 },
            ],
        ),
        step(
            3,
            7_200_001,
            process("receiver-1#1"),
            vec![
                sql("COMMIT", SqlOutcome::Done),
                Happening::Committed {
                    rows: 2,
                    observed: Vec::new(),
                },
            ],
        ),
    ];
    let first = render("same", &steps, Some(&failure(3, "why")));
    assert_eq!(first, render("same", &steps, Some(&failure(3, "why"))));
    assert!(first.contains(">+2h00m</text>"), "a two-hour jump is labelled");
}

#[test]
fn degenerate_traces_still_render() {
    let failure_after_everything = failure(99, "nothing to see");
    let traces: Vec<Vec<TraceStep>> = vec![
        Vec::new(),
        vec![setup(0, 0)],
        vec![step(
            5,
            10_000,
            Actor::World,
            vec![Happening::Heal { restarting: 0 }],
        )],
        vec![step(
            3,
            9_000,
            Actor::Invariant,
            vec![Happening::Failed {
                invariant: String::new(),
                evidence: String::new(),
            }],
        )],
        vec![step(1, 0, process("relay-1#1"), Vec::new())],
        // Time that runs backwards, and a pause that never ends within the trace.
        vec![
            step(
                1,
                5_000,
                process("relay-1#1"),
                vec![Happening::Pause {
                    process: "relay-1#1".into(),
                    duration_ms: 2 * 86_400_000,
                }],
            ),
            step(2, 1_000, process("relay-1#1"), vec![crash("relay-1#1")]),
            step(
                3,
                0,
                process("relay-1#1"),
                vec![Happening::Restart {
                    process: "relay-1#x".into(),
                }],
            ),
        ],
    ];
    for trace in &traces {
        for given in [None, Some(&failure_after_everything)] {
            let page = render("odd", trace, given);
            assert!(page.ends_with("</html>\n"), "{trace:?}");
        }
    }
}

#[test]
fn the_page_references_nothing_outside_itself() {
    let steps = [
        setup(1, 1),
        step(1, 0, Actor::Sender, vec![Happening::Log("x".into())]),
    ];
    let page = render("alone", &steps, None);
    for outside in ["http://", "https://", "src=", "@import", "<link", "url("] {
        assert!(!page.contains(outside), "{outside}");
    }
}
