//! The CI service's business step: what a GitHub delivery means for its branches, run by the
//! pattern's receiver (`commitgap::receiver::receive_business`) over the service's declared
//! tables.
//!
//! The pattern does the rest: the door (the body fits the endpoint's size limit, carries a
//! Standard Webhooks signature made with one of the endpoint's secrets within the timestamp
//! tolerance, and its event names the endpoint's own account), then one `BEGIN IMMEDIATE`
//! transaction with the delivery's receipt (a known `(account, event id)` is a duplicate,
//! answered 200 with nothing applied), this step, the check run it owes, COMMIT, then 200. This
//! step reads the body as an event this service knows ([`BranchEvent::parse`]), moves the
//! branch's head to the event's commit only if the event is newer by creation time than the one
//! that set it, and owes the check run of the commit, at most one per `(repository, commit)`
//! whichever events report it. An account or branch that does not exist is refused (422, nothing
//! committed).
//!
//! With `last_arrival_wins`, the head moves to whatever event arrives last, with no creation-time
//! comparison: the flaw a late or reordered delivery exposes.

use commitgap_sim::commitgap::env::{DbError, Env, int, text};
use commitgap_sim::commitgap::receiver::{Applied, Business, NAME_CHARS_MAX, Obligation};

use crate::domain::{check_run_key, check_run_payload};

/// The wire types this service takes: pushes, and pull request events that move a head.
const KNOWN_TYPES: [&str; 3] = ["push", "pull_request.opened", "pull_request.synchronize"];
/// The fields of an event body, in the order serde_json writes them. A body with any other field
/// is not an event this sender writes.
const FIELDS: [&str; 6] = ["account", "branch", "created_ms", "head_sha", "id", "type"];
/// The longest commit id: a full SHA-1 in hex.
const SHA_CHARS_MAX: usize = 40;

/// The head moves only for an event newer than the one that set it (an idle branch has none, and
/// an event created at 0 is newer than none).
const MOVE_HEAD_IF_NEWER_SQL: &str = "UPDATE branches SET head_sha = ?3, head_created_ms = ?4 \
     WHERE org = ?1 AND branch = ?2 AND coalesce(head_created_ms, -1) < ?4 RETURNING 1";
/// The planted flaw: the last event to arrive sets the head.
const MOVE_HEAD_ALWAYS_SQL: &str =
    "UPDATE branches SET head_sha = ?3, head_created_ms = ?4 WHERE org = ?1 AND branch = ?2 RETURNING 1";

/// A verified GitHub event about a branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchEvent {
    pub id: String,
    pub account: String,
    /// `<repository>/<branch>` within the account's organisation.
    pub branch: String,
    pub head_sha: String,
    pub created_ms: i64,
}

impl BranchEvent {
    /// Reads and validates a raw body: a JSON object with exactly the event fields, a known type,
    /// names neither empty nor longer than `NAME_CHARS_MAX` nor holding control characters, a
    /// branch named `<repository>/<branch>`, a commit id of hex digits, a creation time not
    /// before the epoch.
    pub fn parse(body: &[u8]) -> Result<BranchEvent, String> {
        let value: serde_json::Value =
            serde_json::from_slice(body).map_err(|error| format!("malformed event body: {error}"))?;
        let object = value.as_object().ok_or("an event body is a JSON object")?;
        if let Some(extra) = object.keys().find(|key| !FIELDS.contains(&key.as_str())) {
            return Err(format!("unexpected field {extra:?}"));
        }
        let field = |name: &str| object.get(name).ok_or_else(|| format!("missing field {name:?}"));
        let name = |name: &str| -> Result<String, String> {
            let value = field(name)?
                .as_str()
                .ok_or_else(|| format!("{name} is not text"))?;
            let chars = value.chars().count();
            if chars == 0 || chars > NAME_CHARS_MAX || value.chars().any(char::is_control) {
                return Err(format!(
                    "{name} must be 1 to {NAME_CHARS_MAX} printable characters"
                ));
            }
            Ok(value.to_owned())
        };
        let kind = name("type")?;
        if !KNOWN_TYPES.contains(&kind.as_str()) {
            return Err(format!("unsupported event type {kind:?}"));
        }
        let branch = name("branch")?;
        if !branch
            .split_once('/')
            .is_some_and(|(repository, rest)| !repository.is_empty() && !rest.is_empty())
        {
            return Err(format!("branch {branch:?} is not <repository>/<branch>"));
        }
        let head_sha = name("head_sha")?;
        if head_sha.len() > SHA_CHARS_MAX || !head_sha.bytes().all(|byte| byte.is_ascii_hexdigit()) {
            return Err(format!("head_sha {head_sha:?} is not a commit id"));
        }
        let created_ms = field("created_ms")?.as_i64().filter(|ms| *ms >= 0);
        Ok(BranchEvent {
            id: name("id")?,
            account: name("account")?,
            branch,
            head_sha,
            created_ms: created_ms.ok_or("created_ms must be a whole number, 0 or more")?,
        })
    }

    /// The repository's full name, `<org>/<repository>`, in organisation `org`.
    fn repository(&self, org: &str) -> String {
        let repository = self
            .branch
            .split_once('/')
            .map_or("", |(repository, _)| repository);
        format!("{org}/{repository}")
    }
}

/// The CI service's business step; see the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Branches {
    /// The planted flaw: the branch head is whatever event arrived last.
    pub last_arrival_wins: bool,
}

impl Business for Branches {
    type Event = BranchEvent;

    fn parse(&self, body: &[u8]) -> Result<BranchEvent, String> {
        BranchEvent::parse(body)
    }

    fn identity<'a>(&self, event: &'a BranchEvent) -> (&'a str, &'a str) {
        (&event.account, &event.id)
    }

    async fn apply(&self, env: &dyn Env, event: &BranchEvent) -> Result<Applied, DbError> {
        let orgs = env
            .query(
                "SELECT org FROM accounts WHERE account = ?1",
                &[text(&event.account)],
            )
            .await?;
        let Some(org) = orgs
            .first()
            .map(|row| row.text(0).map(str::to_owned))
            .transpose()?
        else {
            return Ok(Applied::Refused(format!("unknown account {:?}", event.account)));
        };
        let branch = [text(&org), text(&event.branch)];
        let head = [text(&event.head_sha), int(event.created_ms)];
        let sql = if self.last_arrival_wins {
            MOVE_HEAD_ALWAYS_SQL
        } else {
            MOVE_HEAD_IF_NEWER_SQL
        };
        let moved = !env.query(sql, &[branch.clone(), head].concat()).await?.is_empty();
        if !moved
            && env
                .query("SELECT 1 FROM branches WHERE org = ?1 AND branch = ?2", &branch)
                .await?
                .is_empty()
        {
            return Ok(Applied::Refused(format!("no branch {:?} in {org}", event.branch)));
        }
        // Every commit pushed owes its check run, a superseded one too; the key, one per
        // (repository, commit), keeps the one a push and a pull request both owe to one row.
        let repository = event.repository(&org);
        let check_run = Obligation {
            operation_key: check_run_key(&repository, &event.head_sha),
            payload: check_run_payload(&repository, &event.head_sha),
            created_ms: env.now_ms(),
        };
        Ok(Applied::Taken {
            moved,
            owes: vec![check_run],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(change: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
        let mut event = serde_json::json!({
            "account": "acct-a", "branch": "repo-1/main", "created_ms": 0, "head_sha": "abc1234",
            "id": "evt-1", "type": "push"
        });
        change(&mut event);
        event.to_string().into_bytes()
    }

    #[test]
    fn a_genuine_event_parses_at_its_limits() {
        let event = BranchEvent::parse(&body(|_| {})).unwrap();
        assert_eq!((event.branch.as_str(), event.created_ms), ("repo-1/main", 0));
        assert_eq!(event.repository("org-a"), "org-a/repo-1");
        let longest = format!("repo-1/{}", "x".repeat(NAME_CHARS_MAX - 7));
        assert!(BranchEvent::parse(&body(|event| event["branch"] = longest.into())).is_ok());
        let full_sha = "f".repeat(SHA_CHARS_MAX);
        assert!(BranchEvent::parse(&body(|event| event["head_sha"] = full_sha.into())).is_ok());
    }

    #[test]
    fn an_invalid_event_is_refused() {
        let broken: [fn(&mut serde_json::Value); 10] = [
            |event| event["id"] = "".into(),
            |event| event["id"] = "i".repeat(NAME_CHARS_MAX + 1).into(),
            |event| event["branch"] = "main".into(),
            |event| event["branch"] = "repo-1/\u{7}".into(),
            |event| event["head_sha"] = "".into(),
            |event| event["head_sha"] = "not-a-sha".into(),
            |event| event["created_ms"] = (-1).into(),
            |event| event["type"] = "issues.opened".into(),
            |event| event["amount_cents"] = 5.into(),
            |event| {
                event.as_object_mut().unwrap().remove("head_sha");
            },
        ];
        for (index, change) in broken.into_iter().enumerate() {
            assert!(BranchEvent::parse(&body(change)).is_err(), "change {index}");
        }
        assert!(BranchEvent::parse(b"{\"id\":").is_err());
    }
}
