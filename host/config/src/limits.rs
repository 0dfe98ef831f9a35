//! A plugin's sandbox: every per-plugin limit is a key of `[defaults]`, which a plugin's own
//! `[plugins.NAME]` section may override. The plugin author is not trusted and the author of
//! the configuration is: these keys are where the second bounds what the first can choose
//! (workers, resync periods, how many subscriptions, tables, resources and writes).

use serde::Deserialize;

use crate::ParseError;

/// The limits one section sets; a key left out is taken from `[defaults]`, then from
/// [`SandboxLimits::BUILT_IN`].
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Linear memory cap per instance, MiB.
    pub memory_limit_mib: Option<u32>,
    /// Deadline of one call into the plugin, ms.
    pub call_deadline_ms: Option<u64>,
    /// Notifications handed over per call in events mode.
    pub batch_size: Option<u32>,
    /// The most reconcile workers a plugin may ask for.
    pub max_reconcile_workers: Option<u32>,
    /// The shortest resync period a subscription gets, s; a shorter one is raised to it.
    pub min_resync_period_s: Option<u64>,
    /// The most subscriptions a plugin may describe.
    pub max_subscriptions: Option<u32>,
    /// The most indexes a plugin may declare.
    pub max_indexes: Option<u32>,
    /// The most projections (field paths read out for it) one subscription may declare.
    pub max_projections: Option<u32>,
    /// The most core instances in one plugin instance (a component holds several).
    pub max_instances: Option<u32>,
    /// The most elements of one WebAssembly table.
    pub max_table_elements: Option<u32>,
    /// The most WASI resources (streams, pollables) an instance may hold at once.
    pub max_wasi_resources: Option<u32>,
    /// Cluster writes per second, on average.
    pub write_qps: Option<f64>,
    /// Cluster writes at once, above the average rate.
    pub write_burst: Option<u32>,
    /// Reconcile calls per second, on average.
    pub reconcile_qps: Option<f64>,
    /// Reconcile calls at once, above the average rate.
    pub reconcile_burst: Option<u32>,
    /// How long a loaded plugin waits for the informers it reads to sync before it is
    /// reported failed, s. It still starts once they sync.
    pub sync_deadline_s: Option<u64>,
    /// Object JSON an events-mode plugin's buffers may keep alive on their own, MiB; over it
    /// they keep only the latest state per key.
    pub buffer_budget_mib: Option<u32>,
}

/// A plugin's limits with every key decided.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxLimits {
    /// Linear memory cap per instance, MiB.
    pub memory_limit_mib: u32,
    /// Deadline of one call into the plugin, ms.
    pub call_deadline_ms: u64,
    /// Notifications handed over per call in events mode.
    pub batch_size: u32,
    /// The most reconcile workers a plugin may ask for.
    pub max_reconcile_workers: u32,
    /// The shortest resync period a subscription gets, s.
    pub min_resync_period_s: u64,
    /// The most subscriptions a plugin may describe.
    pub max_subscriptions: u32,
    /// The most indexes a plugin may declare.
    pub max_indexes: u32,
    /// The most projections one subscription may declare.
    pub max_projections: u32,
    /// The most core instances in one plugin instance.
    pub max_instances: u32,
    /// The most elements of one WebAssembly table.
    pub max_table_elements: u32,
    /// The most WASI resources an instance may hold at once.
    pub max_wasi_resources: u32,
    /// Cluster writes per second, on average.
    pub write_qps: f64,
    /// Cluster writes at once, above the average rate.
    pub write_burst: u32,
    /// Reconcile calls per second, on average.
    pub reconcile_qps: f64,
    /// Reconcile calls at once, above the average rate.
    pub reconcile_burst: u32,
    /// How long a loaded plugin waits for its informers to sync before it is failed, s.
    pub sync_deadline_s: u64,
    /// Object JSON an events-mode plugin's buffers may keep alive on their own, MiB.
    pub buffer_budget_mib: u32,
}

impl SandboxLimits {
    /// What a plugin gets when the configuration says nothing.
    ///
    /// - 16 workers: more reconcile in parallel than a host's cores can run at once.
    /// - A 30 s resync floor: a resync replays a whole cache to every handler of an
    ///   informer, so one plugin asking for one every millisecond would make every plugin
    ///   on it busy (client-go clamps a handler's period in the same way).
    /// - 32 subscriptions, indexes and core instances: far above what a plugin needs (the
    ///   examples use at most 3, and a component a handful of core instances).
    /// - 16 projections per subscription: a handler that reads more fields than that is
    ///   better served by the object's JSON; each is evaluated for every object the
    ///   subscription's informer stores, for all the plugins on it.
    /// - 10,000 table elements: a guest's function tables hold its indirect call targets
    ///   (a few thousand for a Python interpreter); growth past that is an attack.
    /// - 4,096 WASI resources instead of wasmtime's 1,000,000: a plugin holds a handful at
    ///   once (stdout, stderr, a pollable per pending call); each costs the host memory.
    /// - 20 writes a second in bursts of 30: client-go's default QPS and burst for a client,
    ///   so that one plugin cannot flood the API server for everyone.
    /// - 1,000 reconciles a second in bursts of 1,000: 60,000 keys a minute, more than a
    ///   controller's initial pass over a large cluster needs, while a plugin whose
    ///   `map-event` or requeues multiply its keys costs at most that (a requeue loop ran
    ///   270,000 a second before).
    /// - A 120 s sync deadline: controller-runtime's `CacheSyncTimeout`.
    /// - A 16 MiB buffer budget: thousands of superseded object versions per plugin, so
    ///   that a plugin that only falls behind keeps its history, and one that stalls costs
    ///   the host a bounded amount (plus one notification per key).
    pub const BUILT_IN: SandboxLimits = SandboxLimits {
        memory_limit_mib: 64,
        call_deadline_ms: 1000,
        batch_size: 64,
        max_reconcile_workers: 16,
        min_resync_period_s: 30,
        max_subscriptions: 32,
        max_indexes: 32,
        max_projections: 16,
        max_instances: 32,
        max_table_elements: 10_000,
        max_wasi_resources: 4096,
        write_qps: 20.0,
        write_burst: 30,
        reconcile_qps: 1000.0,
        reconcile_burst: 1000,
        sync_deadline_s: 120,
        buffer_budget_mib: 16,
    };

    /// The largest memory limit: a 32-bit linear memory holds at most 4 GiB.
    pub const MAX_MEMORY_LIMIT_MIB: u32 = 4096;
}

impl Limits {
    /// Each key of `plugin`, else of `defaults`, else built in.
    pub fn resolve(plugin: Option<&Limits>, defaults: &Limits) -> SandboxLimits {
        let none = Limits::default();
        let plugin = plugin.unwrap_or(&none);
        let built_in = SandboxLimits::BUILT_IN;
        macro_rules! pick {
            ($key:ident) => {
                plugin.$key.or(defaults.$key).unwrap_or(built_in.$key)
            };
        }
        SandboxLimits {
            memory_limit_mib: pick!(memory_limit_mib),
            call_deadline_ms: pick!(call_deadline_ms),
            batch_size: pick!(batch_size),
            max_reconcile_workers: pick!(max_reconcile_workers),
            min_resync_period_s: pick!(min_resync_period_s),
            max_subscriptions: pick!(max_subscriptions),
            max_indexes: pick!(max_indexes),
            max_projections: pick!(max_projections),
            max_instances: pick!(max_instances),
            max_table_elements: pick!(max_table_elements),
            max_wasi_resources: pick!(max_wasi_resources),
            write_qps: pick!(write_qps),
            write_burst: pick!(write_burst),
            reconcile_qps: pick!(reconcile_qps),
            reconcile_burst: pick!(reconcile_burst),
            sync_deadline_s: pick!(sync_deadline_s),
            buffer_budget_mib: pick!(buffer_budget_mib),
        }
    }

    /// Refuses limits no plugin could run under: a zero anywhere (a rate that is not a
    /// positive number), or more memory than a plugin can address. `section` names where
    /// they were written (`[defaults]`, `[plugins.label-audit]`).
    pub(crate) fn check(&self, section: &str) -> Result<(), ParseError> {
        let counts = [
            ("memory_limit_mib", self.memory_limit_mib.map(u64::from)),
            ("call_deadline_ms", self.call_deadline_ms),
            ("batch_size", self.batch_size.map(u64::from)),
            (
                "max_reconcile_workers",
                self.max_reconcile_workers.map(u64::from),
            ),
            ("min_resync_period_s", self.min_resync_period_s),
            ("max_subscriptions", self.max_subscriptions.map(u64::from)),
            ("max_indexes", self.max_indexes.map(u64::from)),
            ("max_projections", self.max_projections.map(u64::from)),
            ("max_instances", self.max_instances.map(u64::from)),
            ("max_table_elements", self.max_table_elements.map(u64::from)),
            ("max_wasi_resources", self.max_wasi_resources.map(u64::from)),
            ("write_burst", self.write_burst.map(u64::from)),
            ("reconcile_burst", self.reconcile_burst.map(u64::from)),
            ("sync_deadline_s", self.sync_deadline_s),
            ("buffer_budget_mib", self.buffer_budget_mib.map(u64::from)),
        ];
        for (key, value) in counts {
            if value == Some(0) {
                return Err(ParseError::LimitZero {
                    section: section.to_owned(),
                    key,
                });
            }
        }
        for (key, qps) in [
            ("write_qps", self.write_qps),
            ("reconcile_qps", self.reconcile_qps),
        ] {
            if let Some(qps) = qps
                && !(qps.is_finite() && qps > 0.0)
            {
                return Err(ParseError::RateNotPositive {
                    section: section.to_owned(),
                    key,
                    value: qps,
                });
            }
        }
        if let Some(mib) = self.memory_limit_mib
            && mib > SandboxLimits::MAX_MEMORY_LIMIT_MIB
        {
            return Err(ParseError::MemoryTooLarge {
                section: section.to_owned(),
                mib,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugins_key_wins_over_defaults_which_win_over_built_in() {
        let defaults = Limits {
            memory_limit_mib: Some(128),
            write_qps: Some(5.0),
            ..Limits::default()
        };
        let plugin = Limits {
            memory_limit_mib: Some(256),
            ..Limits::default()
        };
        let resolved = Limits::resolve(Some(&plugin), &defaults);
        assert_eq!(resolved.memory_limit_mib, 256);
        assert_eq!(resolved.write_qps, 5.0);
        assert_eq!(resolved.write_burst, 30);
        assert_eq!(
            Limits::resolve(None, &Limits::default()),
            SandboxLimits::BUILT_IN
        );
    }

    #[test]
    fn zeros_and_impossible_values_are_refused_naming_the_section_and_key() {
        let refused = |limits: Limits| limits.check("[plugins.a]").unwrap_err().to_string();
        assert_eq!(
            refused(Limits {
                max_reconcile_workers: Some(0),
                ..Limits::default()
            }),
            "[plugins.a] max_reconcile_workers is 0; it must be at least 1"
        );
        for qps in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let error = refused(Limits {
                write_qps: Some(qps),
                ..Limits::default()
            });
            assert!(error.starts_with("[plugins.a] write_qps is "), "{error}");
        }
        assert!(
            refused(Limits {
                memory_limit_mib: Some(5000),
                ..Limits::default()
            })
            .contains("at most 4096")
        );
    }
}
