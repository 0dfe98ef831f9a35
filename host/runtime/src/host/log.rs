//! `kubeplug:plugin/log`: leveled, structured records into tracing, rate limited, and to
//! the observer, if any, whole.

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
        let fields = &fields[..fields.len().min(MAX_FIELDS)];
        self.host.observe(
            || self.current_call.get(),
            || CallRecord::Log {
                level: tracing_level(level),
                message: message.to_owned(),
                fields: fields
                    .iter()
                    .map(|f| {
                        let key = cut(&f.key, MAX_FIELD_KEY);
                        (key.to_owned(), cut(&f.value, MAX_FIELD_VALUE).to_owned())
                    })
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
            .map(|f| {
                let key = cut(&f.key, MAX_FIELD_KEY);
                format!(" {key}={:?}", cut(&f.value, MAX_FIELD_VALUE))
            })
            .collect();
        match level {
            Level::Trace => tracing::trace!(plugin, dropped, "{message}{fields}"),
            Level::Debug => tracing::debug!(plugin, dropped, "{message}{fields}"),
            Level::Info => tracing::info!(plugin, dropped, "{message}{fields}"),
            Level::Warn => tracing::warn!(plugin, dropped, "{message}{fields}"),
            Level::Error => tracing::error!(plugin, dropped, "{message}{fields}"),
        }
        Ok(())
    }
}
