//! Scripted HTTP faults and a request log, for the fake API server of the tests (the
//! `faults` feature). Faults in the storage (failed and stalled calls, compaction, restarts,
//! garbage events) are the [`MemoryServer`](kubeplug_memory::MemoryServer)'s own.

use std::collections::VecDeque;
use std::sync::Mutex;

use http::header;
use kubeplug_memory::Call;

use crate::lock;

/// The most requests [`HttpFaults::requests`] keeps; older ones are dropped first.
const LOGGED_REQUESTS: usize = 1_000;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    /// `GET`, `POST`, ...
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The `User-Agent` headers, in order (a client may send none, or several).
    pub user_agents: Vec<String>,
}

/// A canned answer waiting for a request.
#[derive(Debug, Clone)]
struct RawAnswer {
    remaining: usize,
    code: u16,
    body: String,
}

/// Faults waiting for the requests they name, and the log of requests.
#[derive(Debug, Default)]
pub struct HttpFaults {
    /// Whole events the next watch sends before it is cut in the middle of a line.
    cut_next_watch: Mutex<Option<usize>>,
    /// Pending raw answers for lists and watches, oldest first; each `remaining >= 1`.
    raw_list: Mutex<VecDeque<RawAnswer>>,
    raw_watch: Mutex<VecDeque<RawAnswer>>,
    /// The last [`LOGGED_REQUESTS`] requests.
    log: Mutex<VecDeque<RequestRecord>>,
}

impl HttpFaults {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The next watch sends `after` whole events, then the first half of the next line, then
    /// the connection is aborted.
    pub fn cut_next_watch_line(&self, after: usize) {
        *lock(&self.cut_next_watch) = Some(after);
    }

    /// The next `times` list or watch requests are answered `code` with `body` as it is.
    /// Raw answers scripted one after another are given in that order.
    pub fn raw_answer(&self, call: Call, times: usize, code: u16, body: String) {
        if times > 0 {
            lock(self.raw(call)).push_back(RawAnswer {
                remaining: times,
                code,
                body,
            });
        }
    }

    /// The requests seen so far (the last 1,000).
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.log).iter().cloned().collect()
    }

    fn raw(&self, call: Call) -> &Mutex<VecDeque<RawAnswer>> {
        match call {
            Call::List => &self.raw_list,
            Call::Watch => &self.raw_watch,
        }
    }

    pub(crate) fn record<B>(&self, request: &http::Request<B>) {
        let record = RequestRecord {
            method: request.method().to_string(),
            uri: request.uri().to_string(),
            authorization: request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned),
            user_agents: request
                .headers()
                .get_all(header::USER_AGENT)
                .iter()
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .collect(),
        };
        let mut log = lock(&self.log);
        if log.len() == LOGGED_REQUESTS {
            log.pop_front();
        }
        log.push_back(record);
    }

    /// Takes one use of the oldest raw answer pending for `call`: its code and body.
    pub(crate) fn take_raw(&self, call: Call) -> Option<(u16, String)> {
        let mut queue = lock(self.raw(call));
        let answer = queue.front_mut()?;
        answer.remaining -= 1;
        let taken = (answer.code, answer.body.clone());
        if answer.remaining == 0 {
            queue.pop_front();
        }
        Some(taken)
    }

    /// Takes the pending cut of the next watch.
    pub(crate) fn take_cut(&self) -> Option<usize> {
        lock(&self.cut_next_watch).take()
    }
}
