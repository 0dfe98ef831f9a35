//! Each bound crossed by a raw client on loopback. Assertions are on answers and byte counts;
//! [`STOP`] only ends a test whose server never answers (the code before these bounds).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kubeplug_informer::resource::Resource;
use kubeplug_memory::MemoryServer;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use super::{Limits, MAX_CONNECTIONS, MAX_REQUEST_BODY_BYTES, connection_cap};
use crate::{ApiOptions, ApiServer};

/// How long a test waits for an answer or a close before it fails.
const STOP: Duration = Duration::from_secs(20);

/// A short bound for the bound under test.
const SHORT: Duration = Duration::from_millis(200);

/// The socket buffers of both ends, so that what a client can write before the server reads
/// is small and known: the kernel doubles them, so about 64 KiB a side.
const SOCKET_BUFFER: u32 = 16 * 1024;

/// Most bytes a client may have written past what the server chose to read when the answer
/// arrives: both ends' socket buffers and hyper's read buffer, with room to spare.
const SLACK: u64 = 1024 * 1024;

const TOKEN: &str = "secret-token";

/// The production bounds, with time bounds long enough never to fire unless a test shortens
/// one, and a small cap.
fn limits() -> Limits {
    Limits {
        max_body_bytes: MAX_REQUEST_BODY_BYTES,
        body_read: Duration::from_secs(600),
        header_read: Duration::from_secs(600),
        handshake: Duration::from_secs(600),
        write_stall: Duration::from_secs(600),
        max_connections: 64,
    }
}

fn configmaps() -> Resource {
    Resource::new("", "v1", "ConfigMap", "configmaps", true)
}

/// A server on 127.0.0.1 with small socket buffers (accepted sockets inherit the listener's).
fn start(limits: Limits, token: Option<&str>, tls: Option<tokio_rustls::TlsAcceptor>) -> ApiServer {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .set_recv_buffer_size(SOCKET_BUFFER)
        .expect("SO_RCVBUF");
    socket
        .set_send_buffer_size(SOCKET_BUFFER)
        .expect("SO_SNDBUF");
    socket
        .bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("bind 127.0.0.1");
    let listener = socket.listen(1024).expect("listen");
    let addr = listener.local_addr().expect("an address");
    let options = ApiOptions {
        bearer_token: token.map(str::to_owned),
        resources: vec![configmaps()],
        aliases: Default::default(),
    };
    ApiServer::serve_on(listener, addr, MemoryServer::new(), options, tls, limits)
}

/// A client connection with small socket buffers.
async fn connect(server: &ApiServer) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .set_recv_buffer_size(SOCKET_BUFFER)
        .expect("SO_RCVBUF");
    socket
        .set_send_buffer_size(SOCKET_BUFFER)
        .expect("SO_SNDBUF");
    socket
        .connect(server.socket_addr())
        .await
        .expect("connect to the server")
}

/// What came back on a connection.
#[derive(Default)]
struct Answer {
    /// The status code, once the head arrived.
    code: Option<u16>,
    /// The body (or what arrived of it).
    body: Vec<u8>,
    /// Every byte received, head included.
    received: usize,
    /// The connection ended (closed or reset) before a whole answer arrived.
    ended: bool,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let body: String = String::from_utf8_lossy(&self.body)
            .chars()
            .take(300)
            .collect();
        f.debug_struct("Answer")
            .field("code", &self.code)
            .field("body", &body)
            .field("received", &self.received)
            .field("ended", &self.ended)
            .finish()
    }
}

/// Reads one answer (a `Content-Length` body), or until the connection ends.
async fn read_answer(reader: &mut (impl AsyncRead + Unpin)) -> Answer {
    let mut buf = Vec::new();
    let mut chunk = vec![0; 64 * 1024];
    let mut answer = Answer::default();
    loop {
        let n = match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                answer.ended = true;
                0
            }
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        answer.received = buf.len();
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            answer.code = head.split(' ').nth(1).and_then(|code| code.parse().ok());
            let length: Option<usize> = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|n| n.trim().parse().ok());
            answer.body = buf[end + 4..].to_vec();
            if length.is_some_and(|length| answer.body.len() >= length) {
                return answer;
            }
        }
        if answer.ended {
            return answer;
        }
    }
}

/// The answer on `reader`, failing the test if none comes (nor a close) within [`STOP`].
async fn answer(reader: &mut (impl AsyncRead + Unpin)) -> Answer {
    tokio::time::timeout(STOP, read_answer(reader))
        .await
        .unwrap_or_else(|_| panic!("no answer and no close within {STOP:?}"))
}

/// What a client posting a body saw.
struct Posted {
    answer: Answer,
    /// Body bytes written when the answer arrived.
    written: u64,
    /// The server closed the connection after its answer (within [`STOP`]).
    closed: bool,
}

/// Writes `head`, then whatever `body` yields in a task, counting the bytes it gets written,
/// while the answer is read.
async fn post_while_reading(
    server: &ApiServer,
    head: String,
    body: impl FnMut(u64) -> Option<Vec<u8>> + Send + 'static,
    pause: Option<Duration>,
) -> Posted {
    let stream = connect(server).await;
    let (mut reader, mut writer) = stream.into_split();
    writer
        .write_all(head.as_bytes())
        .await
        .expect("write the head");
    let written = Arc::new(AtomicU64::new(0));
    let count = written.clone();
    let mut body = body;
    let writing = tokio::spawn(async move {
        while let Some(bytes) = body(count.load(Ordering::SeqCst)) {
            if writer.write_all(&bytes).await.is_err() {
                return;
            }
            count.fetch_add(bytes.len() as u64, Ordering::SeqCst);
            if let Some(pause) = pause {
                tokio::time::sleep(pause).await;
            }
        }
        // Kept open: the server decides when the request ends.
        std::future::pending::<()>().await;
    });
    let answer = answer(&mut reader).await;
    let at_answer = written.load(Ordering::SeqCst);
    let closed = tokio::time::timeout(STOP, read_answer(&mut reader))
        .await
        .is_ok_and(|after| after.ended && after.received == 0);
    writing.abort();
    Posted {
        answer,
        written: at_answer,
        closed,
    }
}

fn post_head(token: Option<&str>, framing: &str) -> String {
    let authorization = token
        .map(|token| format!("Authorization: Bearer {token}\r\n"))
        .unwrap_or_default();
    format!(
        "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Content-Type: application/json\r\n{authorization}{framing}\r\n\r\n"
    )
}

/// An unauthenticated request is answered `401` without its body being read: the client
/// cannot get more than the socket buffers written before the answer, and the connection is
/// closed, so nothing more is read either.
#[tokio::test]
async fn an_unauthenticated_body_is_never_read() {
    let server = start(limits(), Some(TOKEN), None);
    let declared: u64 = 100 * 1024 * 1024;
    let head = post_head(None, &format!("Content-Length: {declared}"));
    let body = move |written| (written < declared).then(|| vec![b' '; 64 * 1024]);
    let Posted {
        answer,
        written,
        closed,
    } = post_while_reading(&server, head, body, None).await;
    assert_eq!(answer.code, Some(401), "{answer:?}");
    assert!(
        written <= SLACK,
        "{written} bytes of the body written before the 401"
    );
    assert!(closed, "the connection stayed open after the 401");
}

/// An authenticated request declaring more than 3 MiB is answered `413`, naming the limit,
/// before it sends a byte of its body.
#[tokio::test]
async fn a_declared_length_over_the_limit_is_refused_at_once() {
    let server = start(limits(), Some(TOKEN), None);
    let mut stream = connect(&server).await;
    let head = post_head(Some(TOKEN), "Content-Length: 20971520");
    stream.write_all(head.as_bytes()).await.expect("write");
    let answer = answer(&mut stream).await;
    assert_eq!(answer.code, Some(413), "{answer:?}");
    let status: serde_json::Value = serde_json::from_slice(&answer.body).expect("a Status");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "RequestEntityTooLarge");
    assert_eq!(status["code"], 413);
    assert_eq!(
        status["message"],
        "Request entity too large: limit is 3145728"
    );
}

/// An authenticated chunked body that never ends is cut at 3 MiB: the answer is `413` once
/// the client has written about that much, not when it stops.
#[tokio::test]
async fn an_endless_chunked_body_is_cut_at_the_limit() {
    let server = start(limits(), Some(TOKEN), None);
    let head = post_head(Some(TOKEN), "Transfer-Encoding: chunked");
    // Stops by itself at 64 MiB, with the last chunk: the code before the bound read it
    // all and answered 400.
    let cap: u64 = 64 * 1024 * 1024;
    let mut done = false;
    let body = move |written| {
        if done {
            return None;
        }
        if written >= cap {
            done = true;
            return Some(b"0\r\n\r\n".to_vec());
        }
        let mut chunk = b"10000\r\n".to_vec();
        chunk.extend(std::iter::repeat_n(b' ', 0x10000));
        chunk.extend_from_slice(b"\r\n");
        Some(chunk)
    };
    let Posted {
        answer,
        written,
        closed,
    } = post_while_reading(&server, head, body, None).await;
    assert_eq!(answer.code, Some(413), "{answer:?}");
    let limit = MAX_REQUEST_BODY_BYTES as u64;
    assert!(
        written <= limit + SLACK,
        "{written} bytes written before the answer; the limit is {limit}"
    );
    assert!(closed, "the connection stayed open after the 413");
}

/// A body within the limit is read and written as before.
#[tokio::test]
async fn a_body_under_the_limit_is_read() {
    let server = start(limits(), Some(TOKEN), None);
    let padding = "x".repeat(MAX_REQUEST_BODY_BYTES - 1024);
    let object = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"big","namespace":"default"}},"data":{{"a":"{padding}"}}}}"#
    );
    let head = post_head(Some(TOKEN), &format!("Content-Length: {}", object.len()));
    let mut stream = connect(&server).await;
    stream.write_all(head.as_bytes()).await.expect("write");
    stream.write_all(object.as_bytes()).await.expect("write");
    let answer = answer(&mut stream).await;
    assert_eq!(answer.code, Some(201), "{answer:?}");
}

/// A body that trickles is answered `408` once its time is up, before it has all arrived.
#[tokio::test]
async fn a_trickling_body_times_out() {
    let server = start(
        Limits {
            body_read: SHORT,
            ..limits()
        },
        Some(TOKEN),
        None,
    );
    let declared: u64 = 1000;
    let head = post_head(Some(TOKEN), &format!("Content-Length: {declared}"));
    let body = move |written| (written < declared).then(|| vec![b' ']);
    let pause = Some(Duration::from_millis(20));
    let Posted {
        answer,
        written,
        closed,
    } = post_while_reading(&server, head, body, pause).await;
    assert_eq!(answer.code, Some(408), "{answer:?}");
    assert!(
        written < declared,
        "the whole body was read: {written} bytes"
    );
    assert!(closed, "the connection stayed open after the 408");
}

/// A client that sends half a request head is disconnected.
#[tokio::test]
async fn half_a_head_is_disconnected() {
    let server = start(
        Limits {
            header_read: SHORT,
            ..limits()
        },
        None,
        None,
    );
    let mut stream = connect(&server).await;
    stream
        .write_all(b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .expect("write");
    let answer = answer(&mut stream).await;
    assert!(answer.ended, "{answer:?}");
    assert_ne!(answer.code, Some(200), "{answer:?}");
}

/// A keep-alive connection that sends nothing after an answer is closed.
#[tokio::test]
async fn an_idle_connection_is_closed() {
    let server = start(
        Limits {
            header_read: SHORT,
            ..limits()
        },
        None,
        None,
    );
    let mut stream = connect(&server).await;
    stream
        .write_all(b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .expect("write");
    assert_eq!(answer(&mut stream).await.code, Some(200));
    let after = answer(&mut stream).await;
    assert!(after.ended && after.received == 0, "{after:?}");
}

/// A TLS client that never finishes its handshake is disconnected.
#[tokio::test]
async fn a_stalled_tls_handshake_is_disconnected() {
    let made =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).expect("a certificate");
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(vec![made.cert.der().clone()], key)
        .expect("a certificate");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let server = start(
        Limits {
            handshake: SHORT,
            ..limits()
        },
        None,
        Some(acceptor),
    );
    let mut stream = connect(&server).await;
    // The first bytes of a ClientHello record, and no more.
    stream
        .write_all(&[0x16, 0x03, 0x01, 0x02])
        .await
        .expect("write");
    let answer = answer(&mut stream).await;
    assert!(answer.ended && answer.received == 0, "{answer:?}");
}

/// Past the cap, a new connection is closed at once, while one within it is still served;
/// when one ends, a new one is served again.
#[tokio::test]
async fn connections_past_the_cap_are_closed() {
    let cap = 4;
    let server = start(
        Limits {
            max_connections: cap,
            ..limits()
        },
        None,
        None,
    );
    let get = b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    let mut within = Vec::new();
    for _ in 0..cap {
        let mut stream = connect(&server).await;
        stream.write_all(get).await.expect("write");
        assert_eq!(answer(&mut stream).await.code, Some(200));
        within.push(stream);
    }
    for _ in 0..3 {
        let mut past = connect(&server).await;
        // Written before the close arrives, or refused: either way no answer.
        let _ = past.write_all(get).await;
        let answer = answer(&mut past).await;
        assert!(answer.ended && answer.code.is_none(), "{answer:?}");
    }
    within[0].write_all(get).await.expect("write");
    assert_eq!(answer(&mut within[0]).await.code, Some(200));

    // One ends: its place frees as soon as the server sees it close.
    drop(within.pop());
    let served = tokio::time::timeout(STOP, async {
        loop {
            let mut stream = connect(&server).await;
            if stream.write_all(get).await.is_ok()
                && read_answer(&mut stream).await.code == Some(200)
            {
                return stream;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(served.is_ok(), "no connection served after one closed");
}

/// An answer the client does not read is abandoned: the connection closes before it is all
/// sent.
#[tokio::test]
async fn an_answer_not_read_is_abandoned() {
    let server = start(
        Limits {
            write_stall: SHORT,
            ..limits()
        },
        None,
        None,
    );
    let size = 2 * 1024 * 1024;
    let object = format!(
        r#"{{"metadata":{{"name":"big","namespace":"default"}},"data":{{"a":"{}"}}}}"#,
        "x".repeat(size)
    );
    server
        .memory()
        .create(&configmaps(), &object)
        .expect("created");
    let mut stream = connect(&server).await;
    stream
        .write_all(
            b"GET /api/v1/namespaces/default/configmaps/big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        )
        .await
        .expect("write");
    // Not reading, for longer than the bound: what the code before it kept waiting for.
    tokio::time::sleep(SHORT * 5).await;
    let answer = answer(&mut stream).await;
    assert!(
        answer.ended && answer.body.len() < size,
        "{} of {size} bytes received",
        answer.body.len()
    );
}

#[test]
fn the_connection_cap_leaves_descriptors_to_the_host() {
    assert_eq!(connection_cap(None), MAX_CONNECTIONS);
    assert_eq!(connection_cap(Some(1_048_576)), MAX_CONNECTIONS);
    // The common soft limit: (1024 - 256) / 2.
    assert_eq!(connection_cap(Some(1024)), 384);
    assert_eq!(connection_cap(Some(100)), 1);
}
