//! A loopback TCP proxy that a test can stall or cut, in front of the API server.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::EnvtestError;

/// At most this many connections are open at once; more are closed as soon as accepted.
pub const MAX_CONNECTIONS: usize = 64;

/// What the proxy does with new connections after [`Proxy::cut`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterCut {
    /// Accept and forward them as before: the client reconnects.
    Accept,
    /// Close each one as soon as it is accepted, until [`Proxy::accept_again`]: the server
    /// looks unreachable.
    Refuse,
}

/// Forwards TCP connections from its own port on 127.0.0.1 to a target, bytes unchanged (TLS
/// passes through; the server's certificate is valid for 127.0.0.1 on any port).
///
/// Contract: [`stall`](Self::stall) stops forwarding in both directions without closing
/// anything (bytes already read wait in the proxy; new connections are accepted and stall
/// too) until [`resume`](Self::resume). [`cut`](Self::cut) closes every open connection at
/// once, on both sides. At most [`MAX_CONNECTIONS`] are open; each uses two threads. Dropping
/// the proxy closes its listener and every connection and joins its threads.
///
/// ```no_run
/// # async fn example() -> Result<(), kubeplug_envtest::EnvtestError> {
/// use kubeplug_envtest::{AfterCut, Envtest, Options, User};
/// let env = Envtest::start(&Options::default())?;
/// let proxy = env.proxy()?;
/// let client = env.client_via(User::Admin, &proxy)?;
/// proxy.cut(AfterCut::Refuse); // `client` now fails; `env.client(User::Admin)` still works
/// proxy.accept_again();
/// # drop(client);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

#[derive(Debug)]
struct Shared {
    target: SocketAddr,
    state: Mutex<State>,
    /// Signalled when `stalled` turns false, a connection is cut, or the proxy stops.
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    stalled: bool,
    refusing: bool,
    stopping: bool,
    next_id: u64,
    /// Every open connection; a connection leaves when its last pump ends. `len()` is at most
    /// [`MAX_CONNECTIONS`].
    connections: HashMap<u64, Arc<Connection>>,
    /// Pump threads, joined on drop; finished ones are pruned as new ones start, so this holds
    /// at most two per open connection plus those that finished since the last accept.
    pumps: Vec<JoinHandle<()>>,
}

#[derive(Debug)]
struct Connection {
    client: TcpStream,
    server: TcpStream,
    /// Set by a cut: pumps stop at their next step instead of forwarding.
    cut: AtomicBool,
    /// Pumps still running (2, 1, 0): the last one removes the connection.
    pumps_left: AtomicU8,
}

impl Connection {
    fn close(&self) {
        self.cut.store(true, Ordering::SeqCst);
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
    }
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `target`.
    pub fn start(target: SocketAddr) -> Result<Proxy, EnvtestError> {
        let failed = |source| EnvtestError::ProxyStartFailed {
            target_port: target.port(),
            source,
        };
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(failed)?;
        let addr = listener.local_addr().map_err(failed)?;
        let shared = Arc::new(Shared {
            target,
            state: Mutex::default(),
            changed: Condvar::new(),
        });
        let acceptor = std::thread::Builder::new()
            .name(format!("envtest-proxy-{}", addr.port()))
            .spawn({
                let shared = shared.clone();
                move || accept_loop(&listener, &shared)
            })
            .map_err(failed)?;
        Ok(Proxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops forwarding bytes; connections stay open.
    pub fn stall(&self) {
        self.shared.lock().stalled = true;
    }

    /// Forwards again, starting with the bytes held during the stall.
    pub fn resume(&self) {
        self.shared.lock().stalled = false;
        self.shared.changed.notify_all();
    }

    /// Closes every open connection; `then` says what happens to new ones.
    pub fn cut(&self, then: AfterCut) {
        let mut state = self.shared.lock();
        state.refusing = then == AfterCut::Refuse;
        for connection in state.connections.values() {
            connection.close();
        }
        drop(state);
        self.shared.changed.notify_all();
    }

    /// Ends [`AfterCut::Refuse`]: new connections are forwarded again.
    pub fn accept_again(&self) {
        self.shared.lock().refusing = false;
    }

    /// How many connections are open.
    pub fn open_connections(&self) -> usize {
        self.shared.lock().connections.len()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let pumps = {
            let mut state = self.shared.lock();
            state.stopping = true;
            for connection in state.connections.values() {
                connection.close();
            }
            std::mem::take(&mut state.pumps)
        };
        self.shared.changed.notify_all();
        // accept() has no timeout: a connection of our own wakes it to see `stopping`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let late = std::mem::take(&mut self.shared.lock().pumps);
        for pump in pumps.into_iter().chain(late) {
            let _ = pump.join();
        }
    }
}

impl Shared {
    /// The state; a panic elsewhere while holding it leaves nothing half-done worth refusing.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for client in listener.incoming() {
        let Ok(client) = client else {
            // Out of file descriptors, most likely: wait rather than spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        {
            let state = shared.lock();
            if state.stopping {
                return;
            }
            if state.refusing || state.connections.len() >= MAX_CONNECTIONS {
                continue; // dropping `client` closes it
            }
        }
        let Ok(server) = TcpStream::connect_timeout(&shared.target, Duration::from_secs(5)) else {
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        let (Ok(client_reader), Ok(server_reader)) = (client.try_clone(), server.try_clone())
        else {
            continue;
        };
        let connection = Arc::new(Connection {
            client,
            server,
            cut: AtomicBool::new(false),
            pumps_left: AtomicU8::new(2),
        });
        let mut state = shared.lock();
        if state.stopping {
            return;
        }
        let id = state.next_id;
        state.next_id += 1;
        state.connections.insert(id, connection.clone());
        state.pumps.retain(|pump| !pump.is_finished());
        for (from, to_client) in [(client_reader, false), (server_reader, true)] {
            let (pump_shared, pump_connection) = (shared.clone(), connection.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("envtest-proxy-pump-{id}"))
                .spawn(move || {
                    let connection = &pump_connection;
                    let to = if to_client {
                        &connection.client
                    } else {
                        &connection.server
                    };
                    pump(from, to, connection, &pump_shared);
                    if connection.pumps_left.fetch_sub(1, Ordering::SeqCst) == 1 {
                        pump_shared.lock().connections.remove(&id);
                    }
                });
            match spawned {
                Ok(handle) => state.pumps.push(handle),
                Err(_) => {
                    // Without both pumps the connection is useless; the other one ends on
                    // the close and removes it.
                    connection.close();
                    if connection.pumps_left.fetch_sub(1, Ordering::SeqCst) == 1 {
                        state.connections.remove(&id);
                    }
                }
            }
        }
    }
}

/// Copies `from` to `to` until either ends or the connection is cut, holding each chunk while
/// the proxy is stalled. An end of stream is passed on as a half-close; an error closes both.
fn pump(mut from: TcpStream, mut to: &TcpStream, connection: &Connection, shared: &Shared) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => {
                let _ = to.shutdown(Shutdown::Write);
                return;
            }
            Ok(n) => n,
            Err(_) => break,
        };
        {
            let state = shared.lock();
            let state = shared
                .changed
                .wait_while(state, |state| {
                    state.stalled && !state.stopping && !connection.cut.load(Ordering::SeqCst)
                })
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if state.stopping || connection.cut.load(Ordering::SeqCst) {
                break;
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    connection.close();
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// An echo server on loopback, one thread per connection.
    fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut reader = stream.try_clone().unwrap();
                    let _ = std::io::copy(&mut reader, &mut &stream);
                });
            }
        });
        addr
    }

    fn connect(proxy: &Proxy) -> TcpStream {
        let stream = TcpStream::connect(proxy.addr()).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream
    }

    fn echo(stream: &mut TcpStream, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
        stream.write_all(bytes)?;
        let mut answer = vec![0; bytes.len()];
        stream.read_exact(&mut answer)?;
        Ok(answer)
    }

    fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !condition() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_stall_holds_bytes_until_resumed() {
        let proxy = Proxy::start(echo_server()).unwrap();
        let mut stream = connect(&proxy);
        assert_eq!(echo(&mut stream, b"one").unwrap(), b"one");
        proxy.stall();
        stream.write_all(b"two").unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut answer = [0u8; 3];
        let held = stream.read(&mut answer).unwrap_err();
        assert!(matches!(
            held.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ));
        assert_eq!(proxy.open_connections(), 1);
        proxy.resume();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.read_exact(&mut answer).unwrap();
        assert_eq!(&answer, b"two");
    }

    #[test]
    fn a_cut_closes_open_connections_and_refuses_new_ones_until_accepted_again() {
        let proxy = Proxy::start(echo_server()).unwrap();
        let mut open = connect(&proxy);
        assert_eq!(echo(&mut open, b"hello").unwrap(), b"hello");
        proxy.cut(AfterCut::Refuse);
        let mut rest = Vec::new();
        // A closed connection reads as end of stream (or a reset).
        assert!(matches!(open.read_to_end(&mut rest), Ok(0) | Err(_)));
        wait_for("the cut connection to go", || proxy.open_connections() == 0);

        let mut refused = connect(&proxy);
        assert!(echo(&mut refused, b"again").is_err());

        proxy.accept_again();
        let mut fresh = connect(&proxy);
        assert_eq!(echo(&mut fresh, b"again").unwrap(), b"again");
    }

    #[test]
    fn after_a_cut_with_accept_a_new_connection_works() {
        let proxy = Proxy::start(echo_server()).unwrap();
        let mut first = connect(&proxy);
        assert_eq!(echo(&mut first, b"a").unwrap(), b"a");
        proxy.cut(AfterCut::Accept);
        assert!(echo(&mut first, b"b").is_err());
        let mut second = connect(&proxy);
        assert_eq!(echo(&mut second, b"c").unwrap(), b"c");
    }

    #[test]
    fn dropping_the_proxy_closes_its_connections_even_while_stalled() {
        let proxy = Proxy::start(echo_server()).unwrap();
        let mut stream = connect(&proxy);
        assert_eq!(echo(&mut stream, b"x").unwrap(), b"x");
        proxy.stall();
        stream.write_all(b"held").unwrap();
        let addr = proxy.addr();
        drop(proxy);
        let mut rest = Vec::new();
        assert!(matches!(stream.read_to_end(&mut rest), Ok(0) | Err(_)));
        assert!(TcpStream::connect(addr).is_err(), "the listener is closed");
    }
}
