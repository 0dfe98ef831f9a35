//! Loading a plugin file: every load stage short of swapping in ([`PluginHost::prepare`]),
//! the wait for the informers the new version reads to sync, and the swap itself, which
//! inherits the running listeners when it can.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Instant, SystemTime};

use kubeplug_informer::factory::FactoryError;
use kubeplug_informer::informer::SharedIndexInformer;
use kubeplug_runtime::{Gvk, PluginSpec};
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::cache::{Misplaced, subscription_key};
use super::delivery::StartError;
use super::status::Totals;
use super::{
    Event, FactoryCache, FileContent, LoadFailure, PluginHost, PluginId, PluginSettings, Prepared,
    Serving, failure, form_of, name_mismatch, plugin_settings,
};

impl Prepared {
    pub(super) fn synced(&self) -> bool {
        self.reads.iter().all(|(_, informer)| informer.has_synced())
    }

    /// Why it has not started: each informer not synced, and the reason it gives.
    fn not_synced(&self) -> LoadFailure {
        let mut informers: Vec<(String, String)> = self
            .reads
            .iter()
            .filter(|(_, informer)| !informer.has_synced())
            .map(|(resource, informer)| {
                let error = informer.last_error();
                (
                    format!(
                        "informer {resource}: {}",
                        failure::why_not_synced(error.as_ref())
                    ),
                    error.map_or_else(|| "no error yet".to_owned(), |e| e.to_string()),
                )
            })
            .collect();
        informers.sort();
        informers.dedup();
        LoadFailure::NotSynced {
            path: self.id.file().to_owned(),
            plugin: self.plugin.name().to_owned(),
            deadline: self.sync_deadline,
            informers,
        }
    }
}

impl PluginHost {
    /// Every load stage short of swapping in: settings, compile (through the artefact
    /// cache, off the async threads), instantiate, init, describe under the deadline,
    /// validation and grants, indexes, resolving the subscribed types.
    pub(super) async fn prepare(&self, content: FileContent) -> Result<Prepared, LoadFailure> {
        let started = Instant::now();
        let FileContent { path, bytes, hash } = content;
        let PluginSettings {
            settings,
            grants,
            limits,
            sha256,
            sync_deadline,
            buffer_budget,
        } = plugin_settings(&self.config, &path, self.namespace.as_deref()).map_err(|source| {
            LoadFailure::Settings {
                path: path.clone(),
                source,
            }
        })?;
        // Checked before a byte of it is compiled.
        if let Some(expected) = sha256
            && expected != hash.to_string()
        {
            return Err(LoadFailure::NotPinned {
                name: path
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                path,
                expected,
                actual: hash.to_string(),
            });
        }
        // Each version leases the caches it reads for itself, so that unloading it stops
        // the informers only it needed; the informers it starts count against its
        // identity's budget.
        let starts = self.starts_of(&PluginId::File(path.clone()));
        let cache = Arc::new(FactoryCache::new(
            self.factory.clone(),
            self.resolve.clone(),
            self.namespace.clone(),
            starts.clone(),
        ));
        let plugin = self
            .runtime
            .load(PluginSpec {
                path: path.clone(),
                bytes,
                settings,
                grants,
                limits,
                cache: cache.clone(),
                writer: self.writer.clone(),
            })
            .await?;
        if let Some(refused) = cache.take_refusal() {
            return Err(LoadFailure::Start {
                path,
                source: StartError::TooManyStarts {
                    budget: self.start_budget,
                    source: refused,
                },
            });
        }
        let description = plugin.description();
        // `/plugins` names it from now on, while the rest of its load goes on.
        let _ = self.step(
            &PluginId::File(path.clone()),
            Event::Described(description.name.clone()),
        );
        if let Some(cause) = name_mismatch(&path, &description.name) {
            return Err(LoadFailure::NameMismatch {
                path,
                plugin: description.name.clone(),
                cause,
            });
        }
        let mut keys = Vec::with_capacity(description.subscriptions.len());
        for wanted in &description.subscriptions {
            let resource = self
                .resolve
                .resolve(&wanted.resource)
                .await
                .ok_or_else(|| LoadFailure::Unresolved {
                    path: path.clone(),
                    plugin: description.name.clone(),
                    resource: wanted.resource.clone(),
                })?;
            let form = form_of(description, &wanted.resource);
            let key = subscription_key(wanted, resource, form, self.namespace.as_deref()).map_err(
                |misplaced| match misplaced {
                    // The host's namespace limits only namespaced types; a namespace on a
                    // cluster-scoped type is a plugin error.
                    Misplaced::ClusterScoped(namespace) => LoadFailure::ClusterScoped {
                        path: path.clone(),
                        plugin: description.name.clone(),
                        resource: wanted.resource.clone(),
                        namespace,
                    },
                    Misplaced::OutsideNamespace(namespace) => LoadFailure::OutsideNamespace {
                        path: path.clone(),
                        plugin: description.name.clone(),
                        resource: wanted.resource.clone(),
                        namespace,
                        host: self.namespace.clone().unwrap_or_default(),
                    },
                },
            )?;
            keys.push(key);
        }
        let warm = keys
            .iter()
            .map(|key| self.factory.lease_gated(key.clone(), &*starts))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| match e {
                FactoryError::SelectorRefused { .. } => LoadFailure::Selector {
                    path: path.clone(),
                    plugin: description.name.clone(),
                    source: e,
                },
                FactoryError::StartRefused { .. } => LoadFailure::Start {
                    path: path.clone(),
                    source: StartError::TooManyStarts {
                        budget: self.start_budget,
                        source: e,
                    },
                },
                _ => LoadFailure::Start {
                    path: path.clone(),
                    source: StartError::Lease(e),
                },
            })?;
        // Every informer it may read, subscriptions' and caches' alike; the runtime opened
        // its caches at load, so that its first read finds them synced.
        let mut reads: Vec<(Gvk, SharedIndexInformer)> = description
            .subscriptions
            .iter()
            .zip(&warm)
            .map(|(wanted, lease)| (wanted.resource.clone(), lease.informer().clone()))
            .collect();
        reads.extend(cache.informers());
        Ok(Prepared {
            id: PluginId::File(path),
            hash,
            plugin: Arc::new(plugin),
            keys,
            warm,
            reads,
            sync_deadline,
            buffer_budget,
            load_time: started.elapsed(),
        })
    }

    /// Starts `prepared` from a task of its own once every informer it reads has synced.
    /// Past its sync deadline it is reported failed, naming each informer and why it has not
    /// synced; it still starts when they do (they keep retrying with back-off), unless a
    /// newer version or the file's removal supersedes it first.
    pub(super) fn start_when_synced(self: &Arc<Self>, prepared: Prepared) {
        let cancel = CancellationToken::new();
        let _ = self.step(&prepared.id, Event::Syncing(cancel.clone()));
        info!(
            plugin = prepared.plugin.name(),
            file = %prepared.id,
            "plugin loaded; it starts once the informers it reads have synced"
        );
        let host = self.clone();
        tokio::spawn(async move {
            let late = async {
                match tokio::time::Instant::now().checked_add(prepared.sync_deadline) {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            let informers: Vec<SharedIndexInformer> = prepared
                .reads
                .iter()
                .map(|(_, informer)| informer.clone())
                .collect();
            let synced =
                futures::future::join_all(informers.iter().map(SharedIndexInformer::wait_for_sync));
            tokio::pin!(synced);
            tokio::select! {
                biased;
                () = cancel.cancelled() => return,
                _ = &mut synced => {}
                () = late => {
                    host.failed(prepared.not_synced());
                    tokio::select! {
                        biased;
                        () = cancel.cancelled() => return,
                        _ = synced => {}
                    }
                }
            }
            let _writing = host.writing.lock().await;
            // Superseded while it waited for the writer?
            if cancel.is_cancelled() {
                return;
            }
            if let Err(failure) = host.install_locked(prepared).await {
                host.failed(failure);
            }
        });
    }

    /// Swaps `prepared` in. With the same subscriptions it inherits the running listeners
    /// (every notification delivered exactly once across the swap); otherwise, or when the
    /// host replays on swap, it gets new registrations, whose replay of the cache arrives as
    /// in-initial-list adds, and the old ones are removed after the old version's call in
    /// flight. While this replica follows,
    /// the version only waits, its informers warm.
    pub(super) async fn install(self: &Arc<Self>, prepared: Prepared) -> Result<(), LoadFailure> {
        let _writing = self.writing.lock().await;
        self.install_locked(prepared).await
    }

    /// [`install`](Self::install), for a caller that holds `writing`.
    async fn install_locked(self: &Arc<Self>, prepared: Prepared) -> Result<(), LoadFailure> {
        let Prepared {
            id,
            hash,
            plugin,
            keys,
            warm,
            buffer_budget,
            load_time,
            ..
        } = prepared;
        let name = plugin.name().to_owned();
        let version = plugin.description().version.clone();
        // Withdrawn while it loaded: `remove` holds `writing` too, so this holds to the end.
        if !self.table().contains_key(&id) {
            info!(plugin = %name, file = %id, "plugin not started: its file was removed while it loaded");
            return Ok(());
        }
        // A follower's plugins write nothing until it leads.
        plugin.fence_writes(!self.is_leading());
        let serving = Serving {
            _health: self.follow_health(&id, &plugin),
            plugin: plugin.clone(),
            hash,
            loaded_at: SystemTime::now(),
            load_time,
            keys,
            buffer_budget,
            warm,
        };
        let Some(serving) = self.swap_in_place(&id, serving) else {
            self.changed();
            self.reloads.success.fetch_add(1, Ordering::Relaxed);
            info!(plugin = %name, %version, file = %id, %hash, "plugin swapped in; it inherits the running listeners");
            return Ok(());
        };
        let start = |source| LoadFailure::Start {
            path: id.file().to_owned(),
            source,
        };
        // New registrations first, so that informers shared with the old version keep
        // running; they buffer while the old version finishes.
        let registered = if self.is_leading() {
            Some(
                self.register(&plugin, &serving.keys, serving.buffer_budget)
                    .map_err(start)?,
            )
        } else {
            None
        };
        let ended = self.step(&id, Event::Installed(serving));
        if let Some(old) = ended.retired {
            let mut merged = 0;
            if let Some(delivering) = ended.stopped {
                merged = delivering.merged();
                delivering.stop(old.plugin.name()).await;
            }
            // After the stop: the calls that were in flight count too.
            let totals = Totals::of(&old.plugin).with_merged(merged);
            if let Some(entry) = self.table().get_mut(&id) {
                entry.retired.add(totals);
            }
        }
        self.reloads.success.fetch_add(1, Ordering::Relaxed);
        // It serves from now on, and delivers once the old version has stopped: one version
        // handles a key at a time.
        let Some(registered) = registered else {
            info!(plugin = %name, %version, file = %id, %hash, "plugin loaded; it runs once this replica leads");
            return Ok(());
        };
        let delivering = self.deliver(&plugin, registered).map_err(start)?;
        self.place(&id, delivering, &name).await;
        info!(plugin = %name, %version, file = %id, %hash, "plugin running");
        Ok(())
    }

    /// Swaps `serving` into the running deliveries of plugin `id`'s serving version, if it
    /// may inherit them: it has the same subscriptions (and, of the same name, the same
    /// settings), the old version delivers, and the host does not replay on swap. Gives
    /// `serving` back when it may not.
    fn swap_in_place(&self, id: &PluginId, serving: Serving) -> Option<Serving> {
        if self.replay_on_swap {
            return Some(serving);
        }
        let mut table = self.table();
        let Some(entry) = table.get_mut(id) else {
            return Some(serving);
        };
        let inherits = entry
            .lifecycle
            .serving()
            .is_some_and(|old| old.keys == serving.keys);
        let replaced = match entry.lifecycle.delivering() {
            Some(delivering) if inherits => delivering.control.replace(serving.plugin.clone()),
            _ => return Some(serving),
        };
        let Ok(Some(old)) = replaced else {
            return Some(serving);
        };
        entry.retired.retire(old.stats().clone());
        // In the same hold: a report of the new version's state comes after.
        let _old_version = Self::step_in(&mut table, id, Event::Swapped(serving));
        // The old version drops outside the hold.
        drop(table);
        None
    }
}
