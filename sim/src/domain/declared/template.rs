//! Text with placeholders, as a declared domain writes payloads and keys: `{tenant}`,
//! `{subject}`, `{event.head_sha}`, `{state.amount_cents}`, or in a key the payload's own field
//! names; `{subject|before:/}` keeps what comes before the first `/` (`repo-1` of
//! `repo-1/main`) and `{subject|after:/}` what comes after it. `{{` and `}}` are braces.
//!
//! It only fills text in; it must not know what the names mean (the model gives the values).

use std::collections::BTreeMap;

use super::FieldDeclaration;

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Placeholder { name: String, filter: Option<Filter> },
}

/// What a placeholder keeps of its value.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Filter {
    Before(String),
    After(String),
}

/// Text with placeholders. See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
}

impl Template {
    /// Reads `text`; `Err` says what is wrong with a brace or a filter.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let inside: String = chars.by_ref().take_while(|c| *c != '}').collect();
                    if inside.is_empty() || inside.contains('{') {
                        return Err(format!(
                            "{text:?} has a {{ without its }} or an empty placeholder"
                        ));
                    }
                    if !literal.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut literal)));
                    }
                    pieces.push(placeholder(&inside).map_err(|message| format!("{text:?}: {message}"))?);
                }
                '}' => {
                    return Err(format!(
                        "{text:?} has a }} without its {{ (write }}}} for a brace)"
                    ));
                }
                other => literal.push(other),
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Template { pieces })
    }

    /// Whether it has no placeholder.
    pub fn is_constant(&self) -> bool {
        self.pieces.iter().all(|piece| matches!(piece, Piece::Text(_)))
    }

    /// The names of its placeholders.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|piece| match piece {
            Piece::Placeholder { name, .. } => Some(name.as_str()),
            Piece::Text(_) => None,
        })
    }

    /// The one name it consists of, unfiltered, if it is exactly one placeholder.
    pub fn only_name(&self) -> Option<&str> {
        match self.pieces.as_slice() {
            [Piece::Placeholder { name, filter: None }] => Some(name),
            _ => None,
        }
    }

    /// Checks that every `state.` name is a declared field and that every other name is one a
    /// payload may use.
    pub fn check_names(&self, fields: &BTreeMap<String, FieldDeclaration>) -> Result<(), String> {
        for name in self.names() {
            if let Some(field) = name.strip_prefix("state.") {
                if !fields.contains_key(field) {
                    return Err(format!("{{{name}}} names a field [fields] does not declare"));
                }
            } else if !(name == "tenant" || name == "subject" || name.starts_with("event.")) {
                return Err(format!(
                    "{{{name}}} is not a placeholder of a payload: use {{tenant}}, {{subject}}, {{event.FIELD}} or {{state.FIELD}}"
                ));
            }
        }
        Ok(())
    }

    /// The text with each placeholder's value from `value_of`; `Err` names one without a value.
    pub fn fill(&self, value_of: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
        let mut filled = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => filled.push_str(text),
                Piece::Placeholder { name, filter } => {
                    let value = value_of(name).ok_or_else(|| format!("no value for {{{name}}}"))?;
                    let kept = match filter {
                        None => Some(value.as_str()),
                        Some(Filter::Before(separator)) => {
                            value.split_once(separator.as_str()).map(|(before, _)| before)
                        }
                        Some(Filter::After(separator)) => {
                            value.split_once(separator.as_str()).map(|(_, after)| after)
                        }
                    };
                    let kept = kept.filter(|kept| !kept.is_empty()).ok_or_else(|| {
                        format!("{{{name}}} = {value:?} has nothing for its filter to keep")
                    })?;
                    filled.push_str(kept);
                }
            }
        }
        Ok(filled)
    }
}

fn placeholder(inside: &str) -> Result<Piece, String> {
    let (name, filter) = match inside.split_once('|') {
        None => (inside, None),
        Some((name, filter)) => {
            let filter = if let Some(separator) = filter.strip_prefix("before:") {
                Filter::Before(separator.to_owned())
            } else if let Some(separator) = filter.strip_prefix("after:") {
                Filter::After(separator.to_owned())
            } else {
                return Err(format!(
                    "unknown filter {filter:?}; the filters are before:SEP and after:SEP"
                ));
            };
            if matches!(&filter, Filter::Before(separator) | Filter::After(separator) if separator.is_empty())
            {
                return Err("a filter needs a separator, such as before:/".to_owned());
            }
            (name, Some(filter))
        }
    };
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '-');
    if !plain {
        return Err(format!("{{{name}}} is not a plain name"));
    }
    Ok(Piece::Placeholder {
        name: name.to_owned(),
        filter,
    })
}
