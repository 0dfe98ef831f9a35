//! `kubeplug:plugin/log`: leveled, structured records into tracing, rate limited, and to
//! the observer, if any, whole. Both get the same fields: those whose keys cannot forge
//! another field or line, or pass for the host's own.

use kubeplug_policy::names::printable;

use crate::bindings::kubeplug::plugin::log::{Host, Level};
use crate::bindings::wit::Label;
use crate::observer::CallRecord;
use crate::state::StoreState;

/// Longest message kept; longer ones are cut (at a char boundary) and marked.
const MAX_MESSAGE: usize = 8192;
/// Most fields kept per record, and the longest key and value of each.
const MAX_FIELDS: usize = 32;
const MAX_FIELD_KEY: usize = 128;
const MAX_FIELD_VALUE: usize = 1024;

/// Field names the host's log lines carry themselves: those it adds to a plugin's record
/// (`plugin`, `dropped`, `fields_refused`) and those a log format adds to every line. A
/// plugin's field of one of these names would read as the host's word.
const RESERVED_FIELDS: [&str; 7] = [
    "plugin",
    "dropped",
    "fields_refused",
    "message",
    "level",
    "target",
    "timestamp",
];

/// A field key a plugin may use: an identifier of at most [`MAX_FIELD_KEY`] bytes of
/// `[A-Za-z0-9_.-]`, not one of [`RESERVED_FIELDS`]. Keys are written raw into the host's
/// log (values are quoted and escaped), so a key with a space, `=` or a newline could
/// forge another field, or a whole line.
fn valid_field_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= MAX_FIELD_KEY
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        && !RESERVED_FIELDS.contains(&key)
}

/// The fields of a record the host keeps, values cut to [`MAX_FIELD_VALUE`], and how many
/// it left out: past [`MAX_FIELDS`], or under a key [`valid_field_key`] refuses.
fn kept_fields(fields: &[Label]) -> (Vec<(&str, &str)>, usize) {
    let kept: Vec<(&str, &str)> = fields
        .iter()
        .filter(|f| valid_field_key(&f.key))
        .take(MAX_FIELDS)
        .map(|f| (f.key.as_str(), cut(&f.value, MAX_FIELD_VALUE)))
        .collect();
    let refused = fields.len() - kept.len();
    (kept, refused)
}

fn tracing_level(level: Level) -> tracing::Level {
    match level {
        Level::Trace => tracing::Level::TRACE,
        Level::Debug => tracing::Level::DEBUG,
        Level::Info => tracing::Level::INFO,
        Level::Warn => tracing::Level::WARN,
        Level::Error => tracing::Level::ERROR,
    }
}

fn enabled(level: Level) -> bool {
    match level {
        Level::Trace => tracing::enabled!(tracing::Level::TRACE),
        Level::Debug => tracing::enabled!(tracing::Level::DEBUG),
        Level::Info => tracing::enabled!(tracing::Level::INFO),
        Level::Warn => tracing::enabled!(tracing::Level::WARN),
        Level::Error => tracing::enabled!(tracing::Level::ERROR),
    }
}

fn cut(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl Host for StoreState {
    fn enabled(&mut self, level: Level) -> wasmtime::Result<bool> {
        Ok(self.host.observer.is_some() || enabled(level))
    }

    fn log(&mut self, level: Level, message: String, fields: Vec<Label>) -> wasmtime::Result<()> {
        let message = cut(&message, MAX_MESSAGE);
        let (fields, fields_refused) = kept_fields(&fields);
        self.host.observe(
            || self.current_call.get(),
            || CallRecord::Log {
                level: tracing_level(level),
                message: message.to_owned(),
                fields: fields
                    .iter()
                    .map(|&(key, value)| (key.to_owned(), value.to_owned()))
                    .collect(),
            },
        );
        if !enabled(level) {
            return Ok(());
        }
        let Some(dropped) = self
            .host
            .log_budget
            .lock()
            .map(|mut b| b.take())
            .unwrap_or(None)
        else {
            return Ok(());
        };
        let plugin = &*self.host.plugin;
        // A newline in a plugin's message must not start a line of the host's log.
        let message = printable(message);
        let fields: String = fields
            .iter()
            .map(|(key, value)| format!(" {key}={value:?}"))
            .collect();
        match level {
            Level::Trace => tracing::trace!(plugin, dropped, fields_refused, "{message}{fields}"),
            Level::Debug => tracing::debug!(plugin, dropped, fields_refused, "{message}{fields}"),
            Level::Info => tracing::info!(plugin, dropped, fields_refused, "{message}{fields}"),
            Level::Warn => tracing::warn!(plugin, dropped, fields_refused, "{message}{fields}"),
            Level::Error => tracing::error!(plugin, dropped, fields_refused, "{message}{fields}"),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(key: &str, value: &str) -> Label {
        Label {
            key: key.to_owned(),
            value: value.to_owned(),
        }
    }

    #[test]
    fn only_identifier_keys_the_host_does_not_use_are_kept() {
        let fields = [
            field("x\n2000-01-01T00:00:00Z  INFO kubeplug: forged", "v"),
            field("plugin", "label-audit"),
            field("dropped", "0"),
            field("a b", "v"),
            field("a=b", "v"),
            field("", "v"),
            field(&"k".repeat(MAX_FIELD_KEY + 1), "v"),
            field("app.kubernetes.io-name_1", "kept"),
        ];
        let (kept, refused) = kept_fields(&fields);
        assert_eq!(kept, [("app.kubernetes.io-name_1", "kept")]);
        assert_eq!(refused, 7);
    }

    #[test]
    fn fields_past_the_limit_are_counted_as_left_out() {
        let fields: Vec<Label> = (0..MAX_FIELDS + 3)
            .map(|i| field(&format!("k{i}"), &"v".repeat(MAX_FIELD_VALUE + 1)))
            .collect();
        let (kept, refused) = kept_fields(&fields);
        assert_eq!((kept.len(), refused), (MAX_FIELDS, 3));
        assert!(kept.iter().all(|(_, v)| v.len() == MAX_FIELD_VALUE));
    }
}
