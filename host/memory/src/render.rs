//! Stored objects as the JSON of list items and watch events.

use std::cell::OnceCell;

use bytes::Bytes;
use kubeplug_informer::source::WatchEvent;

use crate::state::{Change, Filter, Stored};

/// Renders one change as the watch event a given filter sees, each form at most once.
pub(crate) struct Render<'a> {
    change: &'a Change,
    watch_prefix: &'a str,
    /// `change.next` as a watch event object.
    next: OnceCell<Bytes>,
    /// `change.prev` with the change's version: the object of a DELETED event.
    gone: OnceCell<Bytes>,
}

impl<'a> Render<'a> {
    pub(crate) fn new(change: &'a Change, watch_prefix: &'a str) -> Self {
        Self {
            change,
            watch_prefix,
            next: OnceCell::new(),
            gone: OnceCell::new(),
        }
    }

    /// Like the API server's watch cache: an object that starts matching is ADDED, one that
    /// stops matching is DELETED (its previous state with the new version).
    pub(crate) fn event_for(&self, filter: &Filter) -> Option<WatchEvent> {
        let change = self.change;
        let prev = change
            .prev
            .as_deref()
            .filter(|o| filter.matches(&change.key, o));
        let next = change
            .next
            .as_deref()
            .filter(|o| filter.matches(&change.key, o));
        match (prev, next) {
            (was, Some(next)) => {
                let json = self
                    .next
                    .get_or_init(|| render(next, self.watch_prefix, None))
                    .clone();
                Some(match was {
                    Some(_) => WatchEvent::Modified(json),
                    None => WatchEvent::Added(json),
                })
            }
            (Some(prev), None) => {
                let json = self
                    .gone
                    .get_or_init(|| render(prev, self.watch_prefix, Some(change.rv)))
                    .clone();
                Some(WatchEvent::Deleted(json))
            }
            (None, None) => None,
        }
    }
}

/// A stored object as JSON: as stored when `watch_prefix` is empty, else with `kind` and
/// `apiVersion` first (a watch event object); with its resourceVersion replaced by `rv`.
pub(crate) fn render(object: &Stored, watch_prefix: &str, rv: Option<u64>) -> Bytes {
    let json = &object.json[..];
    let mut out = Vec::with_capacity(watch_prefix.len() + json.len() + 8);
    let body = if watch_prefix.is_empty() {
        0
    } else {
        out.extend_from_slice(watch_prefix.as_bytes());
        out.push(b',');
        1
    };
    match rv {
        None => out.extend_from_slice(&json[body..]),
        Some(rv) => {
            out.extend_from_slice(&json[body..object.rv_digits.start]);
            out.extend_from_slice(rv.to_string().as_bytes());
            out.extend_from_slice(&json[object.rv_digits.end..]);
        }
    }
    Bytes::from(out)
}
