//! `kubeplug:plugin/cluster`: writes, each checked against the plugin's grants before it
//! reaches the [`ClusterWriter`](crate::view::ClusterWriter).

use kubeplug_json::unique::check_unique_keys;
use kubeplug_policy::names::{check_event_reason, quoted};

use crate::WriteVerb;
use crate::bindings::kubeplug::plugin::cluster::{EventSeverity, Host, PatchType};
use crate::bindings::wit::{Error, Gvk as WitGvk, ObjectRef as WitRef};
use crate::gvk::Gvk;
use crate::observer::CallRecord;
use crate::state::{MAX_WRITE_WAIT, StoreState};
use crate::status::PluginStats;
use crate::view::{self, ObjectRef, PatchedPart, Write, WriteError};

use super::{check_len, check_name, check_namespace, checked_gvk};

/// Largest JSON document a plugin may send in one write.
const MAX_DOCUMENT: usize = 3 << 20;

type Answer<T> = wasmtime::Result<Result<T, Error>>;

/// The plugin's reference, checked: its type, namespace and name become a request path.
fn object_ref(target: WitRef) -> Result<ObjectRef, Error> {
    check_len("name", &target.name)?;
    check_name(&target.name)?;
    let namespace = target.namespace.filter(|ns| !ns.is_empty());
    if let Some(ns) = &namespace {
        check_len("namespace", ns)?;
        check_namespace(ns)?;
    }
    Ok(ObjectRef {
        resource: checked_gvk(target.resource_type)?,
        namespace,
        name: target.name,
    })
}

/// The namespace `write` goes to: its target's, a creation's (given, or its manifest's), or
/// for an Event that of the object it is about (`default` for a cluster-scoped one, as the
/// Event is recorded there); `None` for a cluster-scoped object.
fn written_namespace(write: &Write) -> Option<String> {
    match write {
        Write::Apply { target, .. } | Write::Patch { target, .. } | Write::Delete { target } => {
            target.namespace.clone()
        }
        Write::Create {
            namespace: Some(namespace),
            ..
        } => Some(namespace.clone()),
        Write::Create {
            namespace: None,
            json,
            ..
        } => serde_json::from_str::<serde_json::Value>(json)
            .ok()
            .and_then(|manifest| {
                manifest["metadata"]["namespace"]
                    .as_str()
                    .filter(|ns| !ns.is_empty())
                    .map(str::to_owned)
            }),
        Write::RecordEvent { regarding, .. } => Some(
            regarding
                .namespace
                .clone()
                .unwrap_or_else(|| "default".to_owned()),
        ),
    }
}

/// `invalid-input` when the document's `metadata.name` or `metadata.namespace`, where it has
/// them, differ from the object the write is for (a namespace where the target has none
/// included): a plugin writes the object it names, not another one it slips into the body.
fn check_names_the_target(
    what: &str,
    json: &str,
    name: Option<&str>,
    namespace: Option<&str>,
) -> Result<(), Error> {
    #[derive(serde::Deserialize)]
    struct Named {
        #[serde(default)]
        metadata: Metadata,
    }
    #[derive(Default, serde::Deserialize)]
    struct Metadata {
        name: Option<String>,
        namespace: Option<String>,
    }
    let Ok(named) = serde_json::from_str::<Named>(json) else {
        // Not an object with a metadata object: the writer says what is wrong with it.
        return Ok(());
    };
    let differs = |field: &str, given: Option<String>, target: Option<&str>| match (
        given.filter(|g| !g.is_empty()),
        target,
    ) {
        (Some(given), Some(target)) if given != target => Err(Error::InvalidInput(format!(
            "{what}: its metadata.{field} {} is not the target's {}",
            quoted(&given),
            quoted(target)
        ))),
        (Some(given), None) => Err(Error::InvalidInput(format!(
            "{what}: its metadata.{field} {} names an object the target does not",
            quoted(&given)
        ))),
        _ => Ok(()),
    };
    if let Some(name) = name {
        differs("name", named.metadata.name, Some(name))?;
    }
    differs("namespace", named.metadata.namespace, namespace)
}

fn document(what: &str, json: &str) -> Result<(), Error> {
    if json.len() > MAX_DOCUMENT {
        return Err(Error::InvalidInput(format!(
            "{what} is {} bytes; at most {MAX_DOCUMENT}",
            json.len()
        )));
    }
    // Before anything reads it: with a key twice, the name check below and the writer
    // could each read another object out of one body.
    check_unique_keys(json).map_err(|e| Error::InvalidInput(format!("{what}: {e}")))
}

impl StoreState {
    /// Checks the grant, then performs the write; the observer, if any, sees either.
    async fn write(
        &mut self,
        resource: &Gvk,
        verb: WriteVerb,
        write: Write,
    ) -> Result<String, Error> {
        let host = self.host.clone();
        let refuse = |why: String| {
            PluginStats::add(&host.stats.denied, 1);
            tracing::debug!(plugin = %host.plugin, %verb, %resource, "write refused: {why}");
            host.observe(
                || self.current_call.get(),
                || CallRecord::Refused {
                    verb,
                    resource: resource.clone(),
                },
            );
            Err(Error::NotPermitted(why))
        };
        if !host.policy.may_write(resource, verb) {
            return refuse(format!(
                "plugin {} has no grant to {verb} {resource}",
                host.plugin
            ));
        }
        let namespace = written_namespace(&write);
        if !host.policy.may_write_in(namespace.as_deref()) {
            return refuse(format!(
                "plugin {} may not {verb} {resource} in namespace {}: the host watches one \
                 namespace, and its plugins write only there",
                host.plugin,
                namespace.as_deref().map(quoted).unwrap_or_default()
            ));
        }
        if *host.writes_fenced.borrow() {
            return Err(self.fenced());
        }
        self.pace_write().await?;
        // Copied only for an observer: the writer takes the write.
        let observed = host.observer.as_ref().map(|_| write.clone());
        // The call's deadline bounds the wait for the cluster too: epoch interruption
        // cannot stop a call suspended in a host future, and a stalled connection would
        // otherwise hold the call, and every delivery after it, for as long as it stalls.
        let left = self
            .deadline
            .saturating_duration_since(std::time::Instant::now());
        let result = tokio::time::timeout(left, host.writer.write(&host.plugin, write))
            .await
            .unwrap_or_else(|_| {
                Err(WriteError::Unavailable(format!(
                    "the cluster did not answer within the call's deadline ({:?} were left)",
                    left
                )))
            });
        if let Some(write) = observed {
            host.observe(
                || self.current_call.get(),
                || CallRecord::Write {
                    write,
                    result: result.as_ref().map(drop).map_err(Clone::clone),
                },
            );
        }
        result.map_err(|e| match e {
            WriteError::NotFound(m) => Error::NotFound(m),
            WriteError::Invalid(m) => Error::InvalidInput(m),
            WriteError::Conflict(m) => Error::Conflict(m),
            WriteError::Unavailable(m) => Error::Unavailable(m),
        })
    }
}

impl StoreState {
    /// Waits for the plugin's write rate (`write_qps`, `write_burst`). The wait does not
    /// count against the call's deadline; a call that would wait more than
    /// [`MAX_WRITE_WAIT`] in all fails this write with `unavailable` instead.
    async fn pace_write(&mut self) -> Result<(), Error> {
        let now = tokio::time::Instant::now();
        let longest = MAX_WRITE_WAIT.saturating_sub(self.write_wait);
        let reserved = self.host.write_budget.reserve(now, longest);
        let Some(wait) = reserved else {
            return Err(Error::Unavailable(format!(
                "plugin {} writes faster than its write rate allows: this call has waited \
                 {:?} for it already (write_qps, write_burst)",
                self.host.plugin, self.write_wait
            )));
        };
        if !wait.is_zero() {
            self.write_wait += wait;
            self.deadline += wait;
            let mut fenced = self.host.writes_fenced.subscribe();
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = fenced.wait_for(|fenced| *fenced) => return Err(self.fenced()),
            }
        }
        Ok(())
    }

    /// The uid of the object `target` names, when the plugin may read its type, its cache
    /// has synced and holds the object. Read from the host's cache, never from the plugin.
    /// The cache is the one a `cache` read of the type reads.
    fn cached_uid(&self, target: &ObjectRef) -> Option<String> {
        let resource = &target.resource;
        if !self.host.policy.may_read(resource) {
            return None;
        }
        let cache = self.host.caches.get(resource)?;
        if !cache.has_synced() {
            return None;
        }
        let object = cache.indexer().get(target.key().as_str())?;
        object.uid().map(str::to_owned)
    }

    /// The answer to a write while the plugin's writes are fenced.
    fn fenced(&self) -> Error {
        Error::Unavailable(format!(
            "plugin {} is no longer delivered to on this replica (it stopped leading): \
             the write is not made",
            self.host.plugin
        ))
    }
}

impl Host for StoreState {
    async fn apply(&mut self, target: WitRef, json: String, force: bool) -> Answer<String> {
        let checked = object_ref(target).and_then(|t| {
            document("manifest", &json)?;
            check_names_the_target("manifest", &json, Some(&t.name), t.namespace.as_deref())?;
            Ok(t)
        });
        Ok(match checked {
            Err(e) => Err(e),
            Ok(target) => {
                let resource = target.resource.clone();
                let field_manager = format!("kubeplug/{}", self.host.plugin);
                let write = Write::Apply {
                    target,
                    json,
                    force,
                    field_manager,
                };
                self.write(&resource, WriteVerb::Apply, write).await
            }
        })
    }

    async fn patch(
        &mut self,
        target: WitRef,
        patch_type: PatchType,
        patch: String,
        subresource: Option<String>,
    ) -> Answer<String> {
        let checked = object_ref(target).and_then(|t| {
            document("patch", &patch)?;
            if let Some(text) = &subresource {
                check_len("subresource", text)?;
            }
            Ok(t)
        });
        let part = match subresource.as_deref() {
            None => Ok(PatchedPart::Object),
            Some("status") => Ok(PatchedPart::Status),
            Some(other) => Err(Error::InvalidInput(format!(
                "subresource {other:?}: only `status` can be patched"
            ))),
        };
        Ok(match (checked, part) {
            (Err(e), _) | (_, Err(e)) => Err(e),
            (Ok(target), Ok(part)) => {
                let resource = target.resource.clone();
                let patch_type = match patch_type {
                    PatchType::Merge => view::PatchType::Merge,
                    PatchType::Json => view::PatchType::Json,
                };
                let write = Write::Patch {
                    target,
                    patch_type,
                    patch,
                    part,
                };
                self.write(&resource, part.verb(), write).await
            }
        })
    }

    async fn create(
        &mut self,
        resource_type: WitGvk,
        namespace: Option<String>,
        json: String,
    ) -> Answer<String> {
        let namespace = namespace.filter(|ns| !ns.is_empty());
        let checked = (|| {
            document("manifest", &json)?;
            if let Some(ns) = &namespace {
                check_len("namespace", ns)?;
                check_namespace(ns)?;
                // Without one, the manifest's own namespace is where it goes.
                check_names_the_target("manifest", &json, None, Some(ns))?;
            }
            checked_gvk(resource_type)
        })();
        let resource = match checked {
            Ok(resource) => resource,
            Err(e) => return Ok(Err(e)),
        };
        let write = Write::Create {
            resource: resource.clone(),
            namespace,
            json,
        };
        Ok(self.write(&resource, WriteVerb::Create, write).await)
    }

    async fn delete(&mut self, target: WitRef) -> Answer<()> {
        Ok(match object_ref(target) {
            Err(e) => Err(e),
            Ok(target) => {
                let resource = target.resource.clone();
                self.write(&resource, WriteVerb::Delete, Write::Delete { target })
                    .await
                    .map(drop)
            }
        })
    }

    async fn record_event(
        &mut self,
        regarding: WitRef,
        severity: EventSeverity,
        reason: String,
        message: String,
    ) -> Answer<()> {
        let checked = object_ref(regarding).and_then(|r| {
            check_event_reason(&reason).map_err(|e| Error::InvalidInput(e.to_string()))?;
            check_len("message", &message)?;
            Ok(r)
        });
        Ok(match checked {
            Err(e) => Err(e),
            Ok(regarding) => {
                let resource = regarding.resource.clone();
                let write = Write::RecordEvent {
                    regarding_uid: self.cached_uid(&regarding),
                    regarding,
                    severity: match severity {
                        EventSeverity::Normal => view::EventSeverity::Normal,
                        EventSeverity::Warning => view::EventSeverity::Warning,
                    },
                    reason,
                    message,
                    reporting_controller: format!("kubeplug/{}", self.host.plugin),
                };
                self.write(&resource, WriteVerb::RecordEvent, write)
                    .await
                    .map(drop)
            }
        })
    }
}
