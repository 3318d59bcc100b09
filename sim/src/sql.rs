//! What a SQL statement is, read once from its text: its verb, the first table it names, and
//! whether it asks for its rows in order.
//!
//! This is the simulator's one reading of SQL text. Fault models decide from it whether a
//! statement writes (a full disk fails writes and commits, not reads), schedules label a waiting
//! statement by its verb and table (`UPDATE outbox`), the trace says whether a change count means
//! anything, and the world stops a run whose query returns several rows with no `ORDER BY`. A
//! system runs a few dozen distinct statements again and again, so each text is read once per
//! thread and remembered. It reads only the words SQLite would start with; it is not a parser and
//! must not pretend to be one: a statement it cannot place is `Other`, which nothing treats as a
//! write.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

/// The kind of statement, from its first word.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verb {
    Begin,
    /// `COMMIT` or `END`.
    Commit,
    Rollback,
    Select,
    Insert,
    Update,
    Delete,
    Replace,
    /// A common table expression; what it does follows later in the text.
    With,
    /// Any other first word, upper-cased (`PRAGMA`, `CREATE`, `SAVEPOINT`), or empty.
    Other(String),
}

/// A statement as the simulator reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// The text as the system passed it, shared by every record of the statement.
    pub text: std::sync::Arc<str>,
    pub verb: Verb,
    /// The first table the statement names: after `FROM` for reads and deletes, `INTO` for
    /// inserts, right after the verb for updates.
    pub table: Option<String>,
    /// Whether the text asks for its rows in order (`ORDER BY` appears in it).
    pub orders_rows: bool,
}

impl Statement {
    /// Reads `sql` (see the module documentation).
    pub fn of(sql: &str) -> Statement {
        let words: Vec<&str> = sql.split_whitespace().take(64).collect();
        let first = words.first().copied().unwrap_or("");
        let verb = match first.to_ascii_uppercase().as_str() {
            "BEGIN" => Verb::Begin,
            "COMMIT" | "END" => Verb::Commit,
            "ROLLBACK" => Verb::Rollback,
            "SELECT" => Verb::Select,
            "INSERT" => Verb::Insert,
            "UPDATE" => Verb::Update,
            "DELETE" => Verb::Delete,
            "REPLACE" => Verb::Replace,
            "WITH" => Verb::With,
            other => Verb::Other(other.to_owned()),
        };
        let after = |keyword: &str| {
            words
                .iter()
                .position(|word| word.eq_ignore_ascii_case(keyword))
                .and_then(|index| words.get(index + 1))
        };
        let table = match verb {
            Verb::Select | Verb::Delete => after("FROM"),
            Verb::Insert | Verb::Replace => after("INTO"),
            Verb::Update => words.get(1),
            _ => None,
        }
        .map(|word| {
            word.chars()
                .take_while(|character| character.is_ascii_alphanumeric() || *character == '_')
                .collect::<String>()
        });
        Statement {
            text: std::sync::Arc::from(sql),
            verb,
            table,
            orders_rows: sql.to_ascii_uppercase().contains("ORDER BY"),
        }
    }

    /// [`Statement::of`], remembered for the text on this thread.
    pub fn remembered(sql: &str) -> Rc<Statement> {
        KNOWN.with(|known| {
            let mut known = known.borrow_mut();
            let key = (sql.as_ptr() as usize, sql.len());
            if let Some((text, statement)) = known.get(&key)
                && text == sql
            {
                return Rc::clone(statement);
            }
            if known.len() >= STATEMENTS_KEPT {
                known.clear();
            }
            let statement = Rc::new(Statement::of(sql));
            known.insert(key, (sql.to_owned(), Rc::clone(&statement)));
            statement
        })
    }

    /// Whether the statement changes rows: an insert, update, delete, replace, or a `WITH` that
    /// may end in one. SQLite's change count means something only after these.
    pub fn changes_rows(&self) -> bool {
        matches!(
            self.verb,
            Verb::Insert | Verb::Update | Verb::Delete | Verb::Replace | Verb::With
        )
    }

    /// Whether the statement writes to the database file when it runs: a change to rows, or the
    /// commit that makes changes durable. A full disk fails these and lets reads through.
    pub fn writes(&self) -> bool {
        self.changes_rows() || self.verb == Verb::Commit
    }

    /// `UPDATE outbox`, `INSERT receipts`, `SELECT orders`, `BEGIN`: the verb and the first
    /// table, which survive edits to a statement's columns and parameters. Schedules name a
    /// waiting statement by this.
    pub fn label(&self) -> String {
        let verb = match &self.verb {
            Verb::Begin => "BEGIN",
            Verb::Commit => "COMMIT",
            Verb::Rollback => "ROLLBACK",
            Verb::Select => "SELECT",
            Verb::Insert => "INSERT",
            Verb::Update => "UPDATE",
            Verb::Delete => "DELETE",
            Verb::Replace => "REPLACE",
            Verb::With => "WITH",
            Verb::Other(word) => word,
        };
        match &self.table {
            Some(table) => format!("{verb} {table}"),
            None => verb.to_owned(),
        }
    }
}

/// How many statements one thread remembers; a system runs a few dozen.
const STATEMENTS_KEPT: usize = 256;

/// Statements read so far, by the address and length of their text, with the text itself.
type Known = BTreeMap<(usize, usize), (String, Rc<Statement>)>;

std::thread_local! {
    /// Statements by the address and length of their text: systems pass the same constant texts
    /// again and again, so the address finds the entry and one comparison confirms it.
    static KNOWN: RefCell<Known> = const { RefCell::new(BTreeMap::new()) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_read_by_verb_and_first_table() {
        let cases = [
            (
                "SELECT a FROM receipts WHERE x = 1",
                "SELECT receipts",
                false,
                false,
            ),
            (
                "select operation_key from outbox where status = 'pending' order by due_ms",
                "SELECT outbox",
                false,
                true,
            ),
            (
                "INSERT INTO receipts (a) VALUES (?1)",
                "INSERT receipts",
                true,
                false,
            ),
            ("UPDATE outbox SET x = 1", "UPDATE outbox", true, false),
            (
                "DELETE FROM receipts WHERE received_ms < ?1",
                "DELETE receipts",
                true,
                false,
            ),
            ("BEGIN IMMEDIATE", "BEGIN", false, false),
            ("COMMIT", "COMMIT", true, false),
            ("END", "COMMIT", true, false),
            ("ROLLBACK", "ROLLBACK", false, false),
            ("pragma foreign_keys = on", "PRAGMA", false, false),
            ("", "", false, false),
        ];
        for (sql, label, writes, ordered) in cases {
            let statement = Statement::of(sql);
            assert_eq!(statement.label(), label, "{sql}");
            assert_eq!(statement.writes(), writes, "{sql}");
            assert_eq!(statement.orders_rows, ordered, "{sql}");
            assert_eq!(*Statement::remembered(sql), statement, "{sql}");
        }
        let read = Statement::of("SELECT 1 FROM t");
        assert!(!read.changes_rows() && !read.writes());
    }
}
