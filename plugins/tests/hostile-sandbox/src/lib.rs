//! Hostile test guest: tries to read a file, read an environment variable and open a TCP
//! socket. Each attempt must fail at run time: it counts `blocked_total` for each refusal
//! and `escaped_total` for each success.

use kubeplug_sdk::prelude::*;

struct Sandbox;

impl Plugin for Sandbox {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(Sandbox)
    }

    fn describe(&self) -> Description {
        Description::events(
            "hostile-sandbox",
            "0.1.0",
            vec![Subscription::to(gvk("", "v1", "Pod"))],
        )
    }

    fn handle_events(&mut self, _batch: Vec<Event>) -> Result<(), String> {
        let attempts = [
            std::fs::read("/etc/passwd").is_ok(),
            std::fs::read_dir("/").is_ok(),
            std::env::var("HOME").is_ok() || std::env::vars().next().is_some(),
            std::net::TcpStream::connect("127.0.0.1:80").is_ok(),
        ];
        let escaped = attempts.iter().filter(|ok| **ok).count() as u64;
        metrics::counter_add("blocked_total", &[], attempts.len() as u64 - escaped)
            .map_err(|e| e.to_string())?;
        metrics::counter_add("escaped_total", &[], escaped).map_err(|e| e.to_string())
    }
}

export_plugin!(Sandbox);
