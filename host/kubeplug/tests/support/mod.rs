//! What the tests that run the `kubeplug` binary share: the command, a running host with its
//! HTTP endpoints, polling, and the plugins they load.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// `kubeplug`, logging with its default filter (what a user gets). The tests name the
/// cluster themselves: nothing from the environment may pick another.
pub(crate) fn kubeplug() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kubeplug"));
    command
        .env_remove("KUBEPLUG_LOG")
        .env_remove("RUST_LOG")
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBEPLUG_LOCAL");
    command
}

/// A plugin of the repository (an example or a test guest), built by xtask.
pub(crate) fn built_plugin(name: &str) -> PathBuf {
    let layout = xtask::Layout::from_manifest_dir();
    let built = xtask::build_plugins(&layout, &[name.to_owned()]).expect("plugins build");
    built.into_iter().next().unwrap()
}

/// Polls `probe` every 100 ms until it gives a value; panics naming `what` after a minute.
pub(crate) fn wait_until<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not as expected after a minute"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A running host, killed on drop.
pub(crate) struct Host {
    pub(crate) child: Child,
    pub(crate) address: SocketAddr,
    /// Every line it wrote to stderr so far.
    stderr: Arc<Mutex<Vec<String>>>,
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Host {
    /// `kubeplug run --http 127.0.0.1:0 --metrics-secure=false ARGS...`, once it reports its
    /// HTTP address: in plain HTTP, which [`get`](Self::get) speaks. The secure endpoints
    /// have their own tests, through [`spawn`](Self::spawn).
    pub(crate) fn start<I>(args: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<OsStr>,
    {
        Self::spawn(["--metrics-secure=false"], args)
    }

    /// `kubeplug run --http 127.0.0.1:0 FLAGS... ARGS...`, once it reports its address.
    pub(crate) fn spawn<I, J>(flags: J, args: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<OsStr>,
        J: IntoIterator,
        J::Item: AsRef<OsStr>,
    {
        let mut child = kubeplug()
            .args(["run", "--http", "127.0.0.1:0"])
            .args(flags)
            .args(args)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let pipe = child.stderr.take().unwrap();
        let (lines, received) = mpsc::channel();
        let stderr = Arc::<Mutex<Vec<String>>>::default();
        let kept = stderr.clone();
        std::thread::spawn(move || {
            // Keeps draining after the address is found: a closed pipe would kill the host.
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                eprintln!("kubeplug: {line}");
                kept.lock().unwrap().push(line.clone());
                let _ = lines.send(line);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let address = loop {
            let line = received
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("kubeplug reports its HTTP address within a minute");
            if let Some(at) = line.find("address=") {
                break line[at + "address=".len()..]
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
            }
        };
        Self {
            child,
            address,
            stderr,
        }
    }

    /// The lines it wrote to stderr so far.
    pub(crate) fn stderr_lines(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// `GET path`: the status code and the body.
    pub(crate) fn get(&self, path: &str) -> (u16, String) {
        let mut stream = TcpStream::connect(self.address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        let status = response[9..12].parse().unwrap();
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        (status, body)
    }

    /// Polls `path` until `done` holds for its answer; panics after a minute.
    pub(crate) fn wait_for(&self, path: &str, done: impl Fn(u16, &str) -> bool) -> String {
        wait_until(path, || {
            let (status, body) = self.get(path);
            done(status, &body).then_some(body)
        })
    }
}
