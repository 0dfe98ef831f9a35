//! `kubeplug:plugin/cluster`: writes, each checked against the plugin's grants before it
//! reaches the [`ClusterWriter`](crate::view::ClusterWriter).

use crate::WriteVerb;
use crate::bindings::kubeplug::plugin::cluster::{EventSeverity, Host, PatchType};
use crate::bindings::wit::{Error, Gvk as WitGvk, ObjectRef as WitRef};
use crate::gvk::Gvk;
use crate::observer::CallRecord;
use crate::state::StoreState;
use crate::status::PluginStats;
use crate::view::{self, ObjectRef, Write, WriteError};

use super::check_len;

/// Largest JSON document a plugin may send in one write.
const MAX_DOCUMENT: usize = 3 << 20;

type Answer<T> = wasmtime::Result<Result<T, Error>>;

fn object_ref(target: WitRef) -> Result<ObjectRef, Error> {
    check_len("name", &target.name)?;
    if let Some(ns) = &target.namespace {
        check_len("namespace", ns)?;
    }
    if target.name.is_empty() {
        return Err(Error::InvalidInput("empty object name".to_owned()));
    }
    Ok(ObjectRef {
        resource: Gvk::from(target.resource_type),
        namespace: target.namespace.filter(|ns| !ns.is_empty()),
        name: target.name,
    })
}

fn document(what: &str, json: &str) -> Result<(), Error> {
    if json.len() > MAX_DOCUMENT {
        return Err(Error::InvalidInput(format!(
            "{what} is {} bytes; at most {MAX_DOCUMENT}",
            json.len()
        )));
    }
    serde_json::from_str::<serde::de::IgnoredAny>(json)
        .map(|_| ())
        .map_err(|e| Error::InvalidInput(format!("{what} is not JSON: {e}")))
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
        if !host.policy.may_write(resource, verb) {
            PluginStats::add(&host.stats.denied, 1);
            tracing::debug!(plugin = %host.plugin, %verb, %resource, "write refused by grants");
            host.observe(
                || self.current_call.get(),
                || CallRecord::Refused {
                    verb,
                    resource: resource.clone(),
                },
            );
            return Err(Error::NotPermitted(format!(
                "plugin {} has no grant to {verb} {resource}",
                host.plugin
            )));
        }
        // Copied only for an observer: the writer takes the write.
        let observed = host.observer.as_ref().map(|_| write.clone());
        let result = host.writer.write(&host.plugin, write).await;
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

impl Host for StoreState {
    async fn apply(&mut self, target: WitRef, json: String, force: bool) -> Answer<String> {
        let checked = object_ref(target).and_then(|t| document("manifest", &json).map(|()| t));
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
        Ok(match (checked, subresource.as_deref()) {
            (Err(e), _) => Err(e),
            (Ok(_), Some(other)) if other != "status" => Err(Error::InvalidInput(format!(
                "subresource {other:?}: only `status` can be patched"
            ))),
            (Ok(target), _) => {
                let resource = target.resource.clone();
                let verb = if subresource.is_some() {
                    WriteVerb::PatchStatus
                } else {
                    WriteVerb::Patch
                };
                let patch_type = match patch_type {
                    PatchType::Merge => view::PatchType::Merge,
                    PatchType::Json => view::PatchType::Json,
                };
                let write = Write::Patch {
                    target,
                    patch_type,
                    patch,
                    subresource,
                };
                self.write(&resource, verb, write).await
            }
        })
    }

    async fn create(
        &mut self,
        resource_type: WitGvk,
        namespace: Option<String>,
        json: String,
    ) -> Answer<String> {
        let checked = document("manifest", &json).and_then(|()| match &namespace {
            Some(ns) => check_len("namespace", ns),
            None => Ok(()),
        });
        if let Err(e) = checked {
            return Ok(Err(e));
        }
        let resource = Gvk::from(resource_type);
        let namespace = namespace.filter(|ns| !ns.is_empty());
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
            check_len("reason", &reason)?;
            check_len("message", &message)?;
            Ok(r)
        });
        Ok(match checked {
            Err(e) => Err(e),
            Ok(regarding) => {
                let resource = regarding.resource.clone();
                let write = Write::RecordEvent {
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
