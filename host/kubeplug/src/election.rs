//! Leader election for `run --leader-elect`: the elector on a Lease, what follows its
//! changes (plugins lead or follow), and the checks that the durations fit together.

use std::sync::Arc;

use anyhow::bail;
use kubeplug_kube::config::KubeClient;
use kubeplug_leader::{ElectionConfig, KubeLeases, LeaderElector};
use prometheus_client::metrics::gauge::Gauge;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::cli::ElectionArgs;
use crate::config::Config;
use crate::kube_writer::reporting_instance;
use crate::plugins::PluginHost;

/// The election's durations, checked as client-go checks them, and against the plugins'
/// call deadlines: a leader whose renewals fail stops delivering at its renew deadline and
/// another replica may lead from the lease duration on, so a call in flight when it stops
/// must end within the difference ([`ElectionConfig::margin`]). Errors name the flag or the
/// configuration section.
pub(crate) fn election_config(
    args: &ElectionArgs,
    config: &Config,
) -> anyhow::Result<ElectionConfig> {
    let election = ElectionConfig {
        lease_duration: args.leader_elect_lease_duration,
        renew_deadline: args.leader_elect_renew_deadline,
        retry_period: args.leader_elect_retry_period,
    };
    if election.retry_period.is_zero() || election.renew_deadline <= election.retry_period {
        bail!(
            "--leader-elect-renew-deadline ({:?}) must be longer than --leader-elect-retry-period ({:?}), which must not be 0",
            election.renew_deadline,
            election.retry_period
        );
    }
    if election.lease_duration <= election.renew_deadline {
        bail!(
            "--leader-elect-lease-duration ({:?}) must be longer than --leader-elect-renew-deadline ({:?})",
            election.lease_duration,
            election.renew_deadline
        );
    }
    let margin = election.margin();
    let sections = std::iter::once(("[defaults]".to_owned(), config.limits_of(""))).chain(
        config
            .plugins
            .keys()
            .map(|name| (format!("[plugins.{name}]"), config.limits_of(name))),
    );
    for (section, limits) in sections {
        let deadline = std::time::Duration::from_millis(limits.call_deadline_ms);
        if deadline >= margin {
            bail!(
                "{section} call_deadline_ms is {}, but with leader election a call must end within {margin:?}: \
                 the lease duration ({:?}) minus the renew deadline ({:?}), the time between a leader \
                 that lost its Lease stopping and another replica taking over. Shorten the call \
                 deadline or widen that difference",
                limits.call_deadline_ms,
                election.lease_duration,
                election.renew_deadline
            );
        }
    }
    Ok(election)
}

/// A running election and what follows it.
pub(crate) struct Election {
    cancel: CancellationToken,
    elector: JoinHandle<()>,
    follower: JoinHandle<()>,
}

impl Election {
    /// Stops following the election, then releases the Lease if held, so that another
    /// replica takes over without waiting for it to expire.
    pub(crate) async fn resign(self) {
        self.follower.abort();
        let _ = self.follower.await;
        self.cancel.cancel();
        let _ = self.elector.await;
    }
}

/// Starts the election; the plugins are delivered to while this replica leads.
pub(crate) fn elect(
    client: &KubeClient,
    election: ElectionArgs,
    durations: ElectionConfig,
    host: Arc<PluginHost>,
    status: Gauge,
) -> Election {
    let namespace = election
        .leader_elect_namespace
        .unwrap_or_else(|| client.client().default_namespace().to_owned());
    let identity = election
        .leader_elect_identity
        .unwrap_or_else(default_identity);
    info!(lease = %format!("{namespace}/{}", election.leader_elect_id), %identity, "leader election");
    let leases = KubeLeases::new(
        client.client().clone(),
        &namespace,
        &election.leader_elect_id,
    );
    let elector = LeaderElector::new(Arc::new(leases), identity, durations);
    let cancel = CancellationToken::new();
    let (mut leading, elector) = elector.run(cancel.clone());
    let follower = tokio::spawn(async move {
        while leading.changed().await.is_ok() {
            let now_leading = *leading.borrow_and_update();
            status.set(i64::from(now_leading));
            if now_leading {
                host.lead().await;
            } else {
                host.follow().await;
            }
        }
    });
    Election {
        cancel,
        elector,
        follower,
    }
}

/// The host name (the pod name in a cluster) and a random suffix, as client-go's
/// `os.Hostname() + "_" + uuid`: a restarted container is a new candidate.
fn default_identity() -> String {
    use std::hash::{BuildHasher as _, Hasher as _};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    format!("{}_{:08x}", reporting_instance(), random as u32)
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;
    use crate::cli::{Cli, Command};

    fn election_args(flags: &[&str]) -> ElectionArgs {
        let cli = Cli::try_parse_from(
            ["kubeplug", "run", "--plugins", "plugins", "--leader-elect"]
                .iter()
                .chain(flags),
        )
        .unwrap();
        match cli.command {
            Command::Run(args) => args.election,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn the_default_durations_leave_a_five_second_margin_for_one_second_calls() {
        let config = election_config(&election_args(&[]), &Config::default()).unwrap();
        assert_eq!(config.margin(), std::time::Duration::from_secs(5));
    }

    /// Issue 20: a call deadline that does not fit in the margin would let an old leader's
    /// last call overlap the new leader's first.
    #[test]
    fn a_call_deadline_past_the_margin_is_refused_naming_its_section() {
        let config = Config::parse("[plugins.slow]\ncall_deadline_ms = 5000\n").unwrap();
        let error = election_config(&election_args(&[]), &config)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("[plugins.slow] call_deadline_ms is 5000, but with leader election a call must end within 5s"),
            "{error}"
        );
        let widened = ["--leader-elect-lease-duration", "20s"];
        assert!(election_config(&election_args(&widened), &config).is_ok());
        let defaults = Config::parse("[defaults]\ncall_deadline_ms = 12000\n").unwrap();
        let error = election_config(&election_args(&widened), &defaults)
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("[defaults] call_deadline_ms is 12000"),
            "{error}"
        );
    }

    #[test]
    fn durations_out_of_order_are_refused_naming_the_flags() {
        let error = |flags: &[&str]| {
            election_config(&election_args(flags), &Config::default())
                .unwrap_err()
                .to_string()
        };
        assert!(
            error(&["--leader-elect-renew-deadline", "15s"])
                .starts_with("--leader-elect-lease-duration (15s) must be longer than --leader-elect-renew-deadline (15s)")
        );
        assert!(
            error(&["--leader-elect-retry-period", "10s"])
                .starts_with("--leader-elect-renew-deadline (10s) must be longer than --leader-elect-retry-period (10s)")
        );
    }
}
