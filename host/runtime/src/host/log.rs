//! `kubeplug:plugin/log`: leveled, structured records into tracing, rate limited.

use crate::bindings::kubeplug::plugin::log::{Host, Level};
use crate::bindings::wit::Label;
use crate::state::StoreState;

/// Longest message kept; longer ones are cut (at a char boundary) and marked.
const MAX_MESSAGE: usize = 8192;

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
        Ok(enabled(level))
    }

    fn log(&mut self, level: Level, message: String, fields: Vec<Label>) -> wasmtime::Result<()> {
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
        let message = cut(&message, MAX_MESSAGE);
        let fields: String = fields
            .iter()
            .take(32)
            .map(|f| format!(" {}={:?}", cut(&f.key, 128), cut(&f.value, 1024)))
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
