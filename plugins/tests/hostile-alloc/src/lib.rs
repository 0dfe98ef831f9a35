//! Hostile test guest: asks for 1 GiB. With the host's memory cap the request is refused
//! (`try_reserve` fails): it counts `alloc_refused_total` and fails the batch; if the
//! allocation ever succeeded it would count `alloc_granted_total`. Then it tries an
//! infallible 1 GiB allocation, which aborts (a trap).

use kubeplug_sdk::prelude::*;

struct Alloc;

impl Plugin for Alloc {
    fn init(_settings: Settings) -> Result<Self, InitError> {
        Ok(Alloc)
    }

    fn describe(&self) -> Description {
        Description::events(
            "hostile-alloc",
            "0.1.0",
            vec![Subscription::to(gvk("", "v1", "Pod"))],
        )
    }

    fn handle_events(&mut self, _batch: Vec<Event>) -> Result<(), String> {
        let mut big: Vec<u8> = Vec::new();
        match big.try_reserve_exact(1 << 30) {
            Ok(()) => {
                let _ = metrics::counter_add("alloc_granted_total", &[], 1);
                Ok(())
            }
            Err(_) => {
                let _ = metrics::counter_add("alloc_refused_total", &[], 1);
                let huge = vec![7u8; 1 << 30];
                Err(format!(
                    "unreachable: got {} bytes",
                    std::hint::black_box(huge).len()
                ))
            }
        }
    }
}

export_plugin!(Alloc);
