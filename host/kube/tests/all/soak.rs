//! The fault soak (reliability figure R1): random changes and injected faults from a seeded
//! generator; at the end the cache and every handler's last view equal the server's state.
//!
//! Default size (CI): 50 faults over 5,000 changes across 200 keys. `KUBEPLUG_SOAK_FULL=1`:
//! 1,000 faults over 100,000 changes across 1,000 keys. `KUBEPLUG_SOAK_SEED=<n>` replays a run.

use std::time::{Duration, Instant};

use kubeplug_fake_apiserver::{FakeOptions, FaultCall, HttpFault};
use kubeplug_informer::reflector::ReflectorConfig;
use kubeplug_kube::lister::KubeSourceOptions;
use kubeplug_memory::Garbage;

use crate::support::{
    Errors, View, cache_state, cm, configmaps, eventually, informer, server_state, start, synced,
};

/// SplitMix64: small, seedable, and the same on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn fault(rng: &mut Rng) -> (HttpFault, Option<HttpFault>) {
    let call = if rng.below(2) == 0 {
        FaultCall::List
    } else {
        FaultCall::Watch
    };
    match rng.below(20) {
        0..=3 => (HttpFault::DropWatches, None),
        4..=6 => (
            HttpFault::CutNextWatchLine {
                after: rng.below(5) as usize,
            },
            Some(HttpFault::DropWatches),
        ),
        7..=8 => (
            HttpFault::Fail {
                call,
                times: 1 + rng.below(3) as usize,
                code: 500,
                retry_after: None,
            },
            Some(HttpFault::DropWatches),
        ),
        9 => (
            HttpFault::Fail {
                call,
                times: 1,
                code: 429,
                retry_after: Some(1),
            },
            Some(HttpFault::DropWatches),
        ),
        10 => (
            HttpFault::Fail {
                call,
                times: 1,
                code: 503,
                retry_after: None,
            },
            Some(HttpFault::DropWatches),
        ),
        11 => (
            HttpFault::Stall {
                call,
                delay: Duration::from_millis(50 + rng.below(250)),
            },
            Some(HttpFault::DropWatches),
        ),
        12..=13 => (HttpFault::Compact, Some(HttpFault::DropWatches)),
        14..=16 => (HttpFault::Restart, None),
        _ => {
            let garbage = match rng.below(4) {
                0 => Garbage::NotJson,
                1 => Garbage::Truncated,
                2 => Garbage::WrongKind,
                _ => Garbage::MissingName,
            };
            (HttpFault::Garbage(garbage), Some(HttpFault::DropWatches))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_soak() {
    let full = std::env::var("KUBEPLUG_SOAK_FULL").is_ok_and(|v| v == "1");
    let (changes, faults, keys) = if full {
        (100_000u64, 1_000u64, 1_000u64)
    } else {
        (5_000, 50, 200)
    };
    let seed = std::env::var("KUBEPLUG_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("fault soak: seed {seed} (replay with KUBEPLUG_SOAK_SEED={seed})");
    let mut rng = Rng(seed);
    let f = start(FakeOptions {
        streaming_list: rng.below(2) == 0,
        history: 2_000,
        bookmark_every: Some(Duration::from_millis(200)),
        ..FakeOptions::default()
    })
    .await;
    let config = ReflectorConfig {
        page_size: Some(100),
        backoff_initial: Duration::from_millis(5),
        backoff_max: Duration::from_millis(50),
        ..ReflectorConfig::default()
    };
    let errors = Errors::default();
    let inf = informer(
        f.lister(configmaps(), None, KubeSourceOptions::default()),
        configmaps(),
        config,
        &errors,
    );
    let views = [View::follow(&inf), View::follow(&inf)];
    let started = Instant::now();
    inf.start();
    synced(&inf, Duration::from_secs(30)).await;

    let memory = f.server.memory();
    let mut present = vec![false; keys as usize];
    let every = changes / faults;
    let mut injected = 0;
    for i in 0..changes {
        let k = rng.below(keys) as usize;
        let name = format!("cm-{k}");
        let ns = format!("ns-{}", k % 7);
        let team = ["a", "b", "c"][rng.below(3) as usize];
        if !present[k] {
            memory
                .create(&configmaps(), &cm(&ns, &name, team, &i.to_string()))
                .unwrap();
            present[k] = true;
        } else if rng.below(10) < 7 {
            memory
                .update(&configmaps(), &cm(&ns, &name, team, &i.to_string()))
                .unwrap();
        } else {
            memory
                .delete(&configmaps(), &format!("{ns}/{name}").as_str().into())
                .unwrap();
            present[k] = false;
        }
        if (i + 1) % every == 0 && injected < faults {
            let (first, then) = fault(&mut rng);
            let calls = memory.watch_calls() + memory.list_calls();
            f.server.inject(first);
            if let Some(then) = then {
                f.server.inject(then);
            }
            injected += 1;
            // Let the fault hit the informer (it calls the server again) before the next one,
            // so that faults do not pile up unseen; bounded, a fault may also go unnoticed.
            eventually(Duration::from_secs(2), || {
                memory.watch_calls() + memory.list_calls() > calls
            })
            .await;
        }
        if i % 50 == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    // Clear faults still pending so that the informer can settle.
    for call in [FaultCall::List, FaultCall::Watch] {
        f.server.inject(HttpFault::Fail {
            call,
            times: 0,
            code: 500,
            retry_after: None,
        });
    }
    let expected = server_state(&f.server, &configmaps());
    let settled = eventually(Duration::from_secs(90), || {
        cache_state(&inf) == expected && views.iter().all(|v| v.present() == expected)
    })
    .await;
    let stats = inf.reflector_counts();
    let figures = format!(
        "seed {seed}: {changes} changes over {keys} keys, {injected} faults, {:?}, {} lists (relists {}), {} watches, {} errors reported, {} objects skipped, {} objects at the end",
        started.elapsed(),
        stats.lists,
        stats.lists.saturating_sub(1),
        stats.watches,
        stats.errors,
        stats.skipped_objects,
        expected.len(),
    );
    eprintln!("fault soak: {figures}");
    assert!(
        settled,
        "the cache or a handler differs from the server after the soak ({figures}); cache has {}, server {}",
        cache_state(&inf).len(),
        expected.len()
    );
    assert_eq!(injected, faults, "{figures}");
    inf.stop().await;
}
