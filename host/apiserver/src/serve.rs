//! Connections: accepting them within a cap, and the bounds on what one connection may hold.
//!
//! The routes (`routes::routes`, an axum `Router`) answer requests; a connection is accepted,
//! served over hyper's HTTP/1.1 within the bounds below, and its request bodies are read,
//! here. Every bound below holds before a request
//! is authenticated, except the body's, which is read only for an authenticated request:
//!
//! - at most [`Limits::max_connections`] connections at once ([`MAX_CONNECTIONS`], less where
//!   the descriptor limit is low: [`connection_cap`]); one past it is accepted and closed at
//!   once;
//! - a TLS handshake within [`TLS_HANDSHAKE_TIMEOUT`];
//! - each request's head within [`HEADER_READ_TIMEOUT`] of the connection opening or of the
//!   previous answer, so an idle keep-alive connection is closed after it too;
//! - an answer that the client does not read, closed after [`WRITE_STALL_TIMEOUT`] without
//!   progress (a watch that has nothing to send is not stalled: it is not writing);
//! - a request body of at most [`MAX_REQUEST_BODY_BYTES`], read within [`BODY_READ_TIMEOUT`].

#[cfg(test)]
mod tests;

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::Sleep;

use crate::Shared;
use crate::routes::Routes;

/// Most bytes of one request body: kube-apiserver's default `--max-request-body-bytes`
/// (3 MiB), which is also what one object may be. A declared `Content-Length` over it is
/// answered `413` before a byte of the body is read; a chunked body is cut as it passes it.
pub(crate) const MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;

/// How long reading a whole request body may take. A 3 MiB body on loopback takes
/// milliseconds; a client that trickles one gets `408` instead of holding the connection.
pub(crate) const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a request's head may take to arrive, counted from the connection opening (after
/// the TLS handshake) or from the previous answer: hyper's `header_read_timeout`. It bounds a
/// client that sends half a head, and an idle keep-alive connection. kubectl (Go's
/// transport) notices a closed idle connection and opens another.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a TLS handshake may take: Go's `TLSHandshakeTimeout` for clients.
pub(crate) const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long writing an answer may make no progress (the client's receive window closed)
/// before the connection is closed, so that a client that asks and never reads cannot hold
/// a connection, nor the answer's memory.
pub(crate) const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Most connections served at once, whatever the descriptor limit: kubectl opens a few, a
/// `get -w` one more each; this leaves room for scripts running many at once.
pub(crate) const MAX_CONNECTIONS: usize = 512;

/// File descriptors kept for the host's own work whatever the API's clients do: the plugins
/// directory and its files, the manifests, the delivery log, the metrics endpoint and its
/// clients, and the runtime's own (epoll, eventfd). See [`connection_cap`].
pub(crate) const RESERVED_DESCRIPTORS: u64 = 256;

/// How long to wait before accepting again after `accept` failed for want of a resource
/// (`EMFILE`, `ENFILE`, `ENOMEM`): retrying at once would spin a core, and a descriptor
/// frees only when a connection ends.
pub(crate) const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The bounds of one server: the constants above, except in tests.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// [`MAX_REQUEST_BODY_BYTES`].
    pub(crate) max_body_bytes: usize,
    /// [`BODY_READ_TIMEOUT`].
    pub(crate) body_read: Duration,
    /// [`HEADER_READ_TIMEOUT`].
    pub(crate) header_read: Duration,
    /// [`TLS_HANDSHAKE_TIMEOUT`].
    pub(crate) handshake: Duration,
    /// [`WRITE_STALL_TIMEOUT`].
    pub(crate) write_stall: Duration,
    /// [`connection_cap`] of this process's descriptor limit.
    pub(crate) max_connections: usize,
}

impl Limits {
    /// The constants, with the connection cap for this process's soft `RLIMIT_NOFILE`.
    pub(crate) fn for_this_process() -> Self {
        let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        Self {
            max_body_bytes: MAX_REQUEST_BODY_BYTES,
            body_read: BODY_READ_TIMEOUT,
            header_read: HEADER_READ_TIMEOUT,
            handshake: TLS_HANDSHAKE_TIMEOUT,
            write_stall: WRITE_STALL_TIMEOUT,
            max_connections: connection_cap(nofile.current),
        }
    }
}

/// The most connections to serve at once under a soft descriptor limit (`None`: unlimited).
///
/// Each connection holds one descriptor, and a process that runs out cannot open anything:
/// before these bounds, 20,100 connections left the plugins directory scan failing with "Too
/// many open files". So the API takes at most half of what is left after
/// [`RESERVED_DESCRIPTORS`] (the other half is the host's to grow into: more plugins, more
/// watched types, each a connection of its own client), and never more than
/// [`MAX_CONNECTIONS`]: 384 under the common soft limit of 1024. At least one, so that the
/// API still answers under a limit too low for the reserve.
pub(crate) fn connection_cap(soft_limit: Option<u64>) -> usize {
    let Some(soft_limit) = soft_limit else {
        return MAX_CONNECTIONS;
    };
    let share = soft_limit.saturating_sub(RESERVED_DESCRIPTORS) / 2;
    usize::try_from(share)
        .unwrap_or(usize::MAX)
        .clamp(1, MAX_CONNECTIONS)
}

/// Why a request body was not read whole.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BodyError {
    /// The body is, or says it is, longer than the bound: `413`.
    #[error("Request entity too large: limit is {limit}")]
    TooLarge {
        /// The bound, in bytes.
        limit: usize,
    },
    /// The body did not arrive whole in time: `408`.
    #[error("the request body did not arrive within {}s", after.as_secs_f64())]
    TimedOut {
        /// The bound.
        after: Duration,
    },
    /// The connection failed while reading it: `400`.
    #[error("reading the request body: {0}")]
    ReadFailed(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Reads a request body whole, within [`Limits::max_body_bytes`] and [`Limits::body_read`].
/// Call it only once the request is authenticated: nothing of an unauthenticated body is read.
pub(crate) async fn read_body<B>(body: B, limits: &Limits) -> Result<Bytes, BodyError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let limit = limits.max_body_bytes;
    // The declared `Content-Length`, when there is one, before reading anything.
    if body.size_hint().lower() > limit as u64 {
        return Err(BodyError::TooLarge { limit });
    }
    let read = Limited::new(body, limit).collect();
    match tokio::time::timeout(limits.body_read, read).await {
        Err(_) => Err(BodyError::TimedOut {
            after: limits.body_read,
        }),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Err(BodyError::TooLarge { limit }),
        Ok(Err(e)) => Err(BodyError::ReadFailed(e)),
    }
}

/// Accepts connections until the task is aborted; one task per connection, each ended when
/// this task is, as a server that stops closes its connections. Past
/// [`Limits::max_connections`] open ones, a new connection is closed as soon as it is
/// accepted.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let limits = shared.limits;
    let routes = crate::routes::routes(shared.clone());
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) if is_connection_error(&e) => continue,
                Err(_) => {
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            Some(_) = connections.join_next() => continue,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            // Closing it frees its descriptor now; a client waiting in the backlog instead
            // would learn nothing until its own timeout.
            drop(stream);
            continue;
        };
        let shared = shared.clone();
        let routes = routes.clone();
        let tls = tls.clone();
        connections.spawn(async move {
            serve_connection(stream, shared, routes, tls, &limits).await;
            drop(permit);
        });
    }
}

/// An `accept` error that concerns one connection only, so the next `accept` may succeed at
/// once.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Serves one connection's requests with `routes`, over TLS when `tls` is given, within
/// `limits`.
async fn serve_connection(
    stream: TcpStream,
    shared: Arc<Shared>,
    routes: Routes,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: &Limits,
) {
    let stream = WriteStall::new(stream, limits.write_stall);
    let service = hyper::service::service_fn(move |request| {
        let shared = shared.clone();
        let routes = routes.clone();
        async move { Ok::<_, Infallible>(crate::routes::handle(&shared, &routes, request).await) }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read);
    // Errors are the client going away, a bound passed or an aborted watch: nothing to report.
    match tls {
        Some(acceptor) => {
            let handshake = tokio::time::timeout(limits.handshake, acceptor.accept(stream));
            if let Ok(Ok(stream)) = handshake.await {
                let _ = http.serve_connection(TokioIo::new(stream), service).await;
            }
        }
        None => {
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
        }
    }
}

/// A stream whose writes fail once one has made no progress for `stall`: a client that stops
/// reading cannot keep its connection open.
struct WriteStall<S> {
    inner: S,
    stall: Duration,
    /// Running while a write (or flush, or shutdown) waits; cleared by any progress.
    waiting: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteStall<S> {
    fn new(inner: S, stall: Duration) -> Self {
        Self {
            inner,
            stall,
            waiting: None,
        }
    }

    /// What a write that made no progress answers: `Pending`, or an error once stalled.
    fn stalled<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let stall = self.stall;
        let waiting = self
            .waiting
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        match waiting.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing for {}s: connection closed",
                    stall.as_secs_f64()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match poll {
            Poll::Ready(done) => {
                self.waiting = None;
                Poll::Ready(done)
            }
            Poll::Pending => self.stalled(cx),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteStall<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteStall<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progress(cx, poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.progress(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_flush(cx);
        self.progress(cx, poll)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let poll = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.progress(cx, poll)
    }
}
