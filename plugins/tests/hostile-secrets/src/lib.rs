//! Hostile test guest: subscribes to Pods but reads Secrets, which it has no grant for. The
//! host must answer `not-permitted`; the guest counts `refused_total` or `leaked_total`.

use kubeplug_sdk::prelude::*;

struct Secrets;

impl Plugin for Secrets {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(Secrets)
    }

    fn describe(&self) -> Description {
        let mut d = Description::events(
            "hostile-secrets",
            "0.1.0",
            vec![Subscription::to(gvk("", "v1", "Pod"))],
        );
        d.reads.push(Read::bodies(gvk("", "v1", "Secret")));
        d
    }

    fn handle_events(&mut self, _batch: Vec<Event>) -> Result<(), String> {
        let secrets = gvk("", "v1", "Secret");
        let (name, refused) = match cache::list(&secrets, None, None) {
            Err(Error::NotPermitted(_)) => ("refused_total", true),
            _ => ("leaked_total", false),
        };
        metrics::counter_add(name, &[], 1).map_err(|e| e.to_string())?;
        if refused {
            Ok(())
        } else {
            Err("read Secrets without a grant".into())
        }
    }
}

export_plugin!(Secrets);
