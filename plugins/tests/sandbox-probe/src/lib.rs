//! Test guest for the sandbox boundary. Reconcile mode over ConfigMaps; it also declares a
//! read of Secrets, and an index on each type, so that the host's grants alone decide what
//! it may read. A reconcile's target name is an action: the guest tries it and answers with
//! `error(report)`, the report saying what happened, which the test reads.
//!
//! Settings: `name` (its plugin name, default `sandbox-probe`), `secret` (a value only this
//! plugin was given), `port` (a TCP port on 127.0.0.1 to try to reach).
//!
//! Actions: `open-file`, `list-dir`, `environment`, `socket`, `secret`,
//! `read-<get|list|keys|by-index|index-values>-<configmaps|secrets|pods>` (Pods it does not
//! declare), `print-<n>`
//! (n lines to stdout), `stderr-<n>`, `log-<n>` (n `log` records).

use std::sync::Mutex;

use kubeplug_sdk::Label;
use kubeplug_sdk::prelude::*;
use serde_json::Value;

/// Every secret an instance of this component was ever given, in its own linear memory:
/// if two plugins shared memory, one would find the other's here.
static REMEMBERED: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Probe {
    name: String,
    secret: String,
    port: u16,
}

/// `escaped` when `attempt` succeeded, else `refused (<why>)`.
fn outcome<T, E: std::fmt::Display>(attempt: Result<T, E>) -> String {
    match attempt {
        Ok(_) => "escaped".to_owned(),
        Err(e) => format!("refused ({e})"),
    }
}

/// `allowed <n>` or the error's variant and message.
fn read_outcome(answer: Result<usize, Error>) -> String {
    match answer {
        Ok(n) => format!("allowed {n}"),
        Err(Error::NotPermitted(m)) => format!("not-permitted: {m}"),
        Err(Error::NotFound(m)) => format!("not-found: {m}"),
        Err(Error::InvalidInput(m)) => format!("invalid-input: {m}"),
        Err(Error::Conflict(m)) => format!("conflict: {m}"),
        Err(Error::Unavailable(m)) => format!("unavailable: {m}"),
    }
}

fn read(how: &str, resource: &Gvk, index: &str) -> String {
    read_outcome(match how {
        "get" => cache::get(resource, "ns/one").map(|o| usize::from(o.is_some())),
        "list" => cache::list(resource, None, Some("app=web")).map(|l| l.len()),
        "keys" => cache::keys(resource, None).map(|k| k.len()),
        "by-index" => cache::by_index(resource, index, "web").map(|l| l.len()),
        "index-values" => cache::index_values(resource, index).map(|v| v.len()),
        other => return format!("unknown read {other:?}"),
    })
}

impl Probe {
    fn act(&self, action: &str) -> String {
        if let Some(rest) = action.strip_prefix("read-") {
            let Some((how, kind)) = rest.rsplit_once('-') else {
                return format!("unknown action {action:?}");
            };
            return match kind {
                "configmaps" => read(how, &gvk("", "v1", "ConfigMap"), "cm-by-app"),
                "secrets" => read(how, &gvk("", "v1", "Secret"), "secret-by-app"),
                // Declared nowhere: no grant may open it.
                "pods" => read(how, &gvk("", "v1", "Pod"), "namespace"),
                other => format!("unknown kind {other:?}"),
            };
        }
        if let Some((what, count)) = action.rsplit_once('-')
            && let Ok(count) = count.parse::<usize>()
        {
            for i in 0..count {
                let line = format!("{what} {i} of {}", self.name);
                match what {
                    "print" => println!("{line}"),
                    "stderr" => eprintln!("{line}"),
                    "log" => log::info(&line, &[("n", &i.to_string())]),
                    other => return format!("unknown output {other:?}"),
                }
            }
            return format!("wrote {count}");
        }
        match action {
            "open-file" => [
                outcome(std::fs::read("/etc/passwd")),
                outcome(std::fs::read("Cargo.toml")),
                outcome(std::fs::File::create("/tmp/kubeplug-sandbox-probe")),
            ]
            .join(", "),
            "list-dir" => [
                outcome(std::fs::read_dir("/")),
                outcome(std::fs::read_dir(".")),
            ]
            .join(", "),
            "environment" => format!(
                "vars={} args={} cwd={}",
                std::env::vars_os().count(),
                std::env::args_os().count(),
                outcome(std::env::current_dir())
            ),
            "socket" => [
                outcome(std::net::TcpStream::connect(("127.0.0.1", self.port))),
                outcome(std::net::TcpListener::bind("127.0.0.1:0")),
                outcome(std::net::UdpSocket::bind("127.0.0.1:0")),
                outcome(std::net::ToSocketAddrs::to_socket_addrs(&(
                    "localhost",
                    self.port,
                ))),
            ]
            .join(", "),
            "secret" => {
                let remembered = REMEMBERED.lock().map(|r| r.join(",")).unwrap_or_default();
                if let Err(e) = metrics::counter_add(
                    "secret_total",
                    &[Label {
                        key: "secret".into(),
                        value: self.secret.clone(),
                    }],
                    1,
                ) {
                    return format!("counter refused: {e}");
                }
                format!("secret={} remembered={remembered}", self.secret)
            }
            other => format!("unknown action {other:?}"),
        }
    }
}

impl Plugin for Probe {
    fn init(settings: Settings) -> Result<Self, InitError> {
        let settings: Value = settings.parse()?;
        let text = |key: &str, default: &str| settings[key].as_str().unwrap_or(default).to_owned();
        let secret = text("secret", "");
        if let Ok(mut remembered) = REMEMBERED.lock() {
            remembered.push(secret.clone());
        }
        Ok(Probe {
            name: text("name", "sandbox-probe"),
            secret,
            port: settings["port"]
                .as_u64()
                .unwrap_or(9)
                .try_into()
                .unwrap_or(9),
        })
    }

    fn describe(&self) -> Description {
        let config_maps = gvk("", "v1", "ConfigMap");
        let secrets = gvk("", "v1", "Secret");
        let mut d = Description::reconcile(
            &self.name,
            "0.1.0",
            1,
            vec![Subscription::to(config_maps.clone())],
        );
        d.reads.push(Read::bodies(secrets.clone()));
        for (name, resource) in [("cm-by-app", config_maps), ("secret-by-app", secrets)] {
            d.indexes.push(IndexDecl {
                name: name.into(),
                resource_type: resource,
                spec: IndexSpec::Label("app".into()),
            });
        }
        d
    }

    fn reconcile(&mut self, target: ObjectRef) -> ReconcileResult {
        ReconcileResult::Error(self.act(&target.name))
    }
}

export_plugin!(Probe);
