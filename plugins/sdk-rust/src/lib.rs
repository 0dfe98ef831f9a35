//! Write kubeplug plugins in Rust.
//!
//! A plugin is a type implementing [`Plugin`], exported with [`export_plugin!`] and built with
//! `cargo xtask build-plugins` (or `cargo build --release --target wasm32-wasip2`). Every
//! method but [`Plugin::init`] and [`Plugin::describe`] has a default, so a handler is a
//! dozen lines:
//!
//! ```ignore
//! use kubeplug_sdk::prelude::*;
//!
//! struct Audit;
//!
//! impl Plugin for Audit {
//!     fn init(_settings: Settings) -> Result<Self, InitError> {
//!         Ok(Audit)
//!     }
//!     fn describe(&self) -> Description {
//!         Description::events("audit", "0.1.0", vec![Subscription::to(gvk("", "v1", "Pod"))])
//!     }
//!     fn on_event(&mut self, event: &Event) -> Result<(), String> {
//!         if event.label("app").is_none() {
//!             log::warn(&format!("{} has no app label", event.key()), &[]);
//!         }
//!         Ok(())
//!     }
//! }
//!
//! export_plugin!(Audit);
//! ```
//!
//! Contract: the host calls `init` once on every new instance, then `describe` (at load),
//! then only the calls for the delivery mode the description chose. An instance may be
//! discarded at any time (after a trap), so keep nothing in memory that cannot be rebuilt.

pub mod bindings {
    //! The raw wit-bindgen output for the `kubeplug:plugin/plugin` world.
    #![allow(missing_docs)] // generated code, documented in the WIT files
    wit_bindgen::generate!({
        world: "plugin",
        path: "wit",
        pub_export_macro: true,
        default_bindings_module: "::kubeplug_sdk::bindings",
        export_macro_name: "__export_world",
    });
}

use serde::de::DeserializeOwned;

pub use bindings::exports::kubeplug::plugin::handler::{
    Delivery, Description, IndexDecl, IndexSpec, KeyMapping, MetaFields, Read, ReconcileResult,
    Subscription, WriteRequest, WriteVerb,
};
pub use bindings::kubeplug::plugin::types::{
    CachedObject, Error, Event, EventType, FieldValue, Gvk, Label, ObjectMeta, ObjectRef,
    OwnerReference, Projected, ProjectedObject, Projection,
};

/// Everything a plugin usually needs, for `use kubeplug_sdk::prelude::*`.
pub mod prelude {
    pub use crate::{
        CachedObject, Delivery, Description, Error, Event, EventType, FieldValue, Fields, Gvk,
        IndexDecl, IndexSpec, InitError, KeyMapping, MetaFields, ObjectMeta, ObjectRef, Plugin,
        ProjectedObject, Projection, Read, ReconcileResult, Settings, Subscription, WriteRequest,
        WriteVerb, cache, cluster, export_plugin, gvk, log, metrics,
    };
}

/// The settings document the host hands to [`Plugin::init`] (JSON; `{}` when none).
#[derive(Debug, Clone)]
pub struct Settings(pub String);

impl Settings {
    /// Parses the settings into `T`; the error names the field that did not fit.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, String> {
        serde_json::from_str(&self.0).map_err(|e| format!("invalid settings: {e}"))
    }

    /// The raw JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Why [`Plugin::init`] refused: a message for the operator, which the host shows after the
/// plugin's file and stage (`label-reader.wasm: init: <message>`) and which crosses the WIT's
/// `init` as text.
///
/// Made from a `String` or `&str` (`Err(format!("..").into())`), and converted by `?` from
/// what `init` usually calls: [`Settings::parse`]'s error, a host call's [`Error`] (through
/// [`Error::explain`]) and `serde_json::Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitError(String);

impl InitError {
    /// A refusal with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }

    /// The message the host will show.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for InitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InitError {}

impl From<String> for InitError {
    fn from(message: String) -> Self {
        Self(message)
    }
}

impl From<&str> for InitError {
    fn from(message: &str) -> Self {
        Self(message.to_owned())
    }
}

impl From<Error> for InitError {
    fn from(error: Error) -> Self {
        Self(error.explain())
    }
}

impl From<serde_json::Error> for InitError {
    fn from(error: serde_json::Error) -> Self {
        Self(error.to_string())
    }
}

/// A plugin. Implement `init` and `describe`, then the calls of your delivery mode.
pub trait Plugin: Sized + 'static {
    /// Builds the plugin's state from its settings; an error refuses the load.
    fn init(settings: Settings) -> Result<Self, InitError>;

    /// What the plugin watches, how it is driven, what it reads and writes.
    fn describe(&self) -> Description;

    /// Events mode: a batch, in order. By default calls [`on_event`](Self::on_event) on each
    /// event and stops at the first error (the host retries the whole batch).
    fn handle_events(&mut self, batch: Vec<Event>) -> Result<(), String> {
        batch.iter().try_for_each(|event| self.on_event(event))
    }

    /// Events mode: one event. Does nothing by default.
    fn on_event(&mut self, event: &Event) -> Result<(), String> {
        let _ = event;
        Ok(())
    }

    /// Reconcile mode: bring `target` to its desired state. Done by default.
    fn reconcile(&mut self, target: ObjectRef) -> ReconcileResult {
        let _ = target;
        ReconcileResult::Done
    }

    /// Reconcile mode, `computed` subscriptions: the objects `event` concerns. None by default.
    fn map_event(&mut self, event: Event) -> Vec<ObjectRef> {
        let _ = event;
        Vec::new()
    }
}

/// Shorthand for a [`Gvk`].
pub fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk {
        group: group.to_owned(),
        version: version.to_owned(),
        kind: kind.to_owned(),
    }
}

impl Gvk {
    /// The `apiVersion` of objects of this type: `group/version`, or `version` for the core
    /// group (`apps/v1`, `v1`).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl Error {
    /// The failure for humans: its kind, then the host's message, e.g.
    /// `not permitted: plugin x may not patch apps/v1/Deployment`. (The `Display` that
    /// wit-bindgen generates prints the Rust variant instead.)
    pub fn explain(&self) -> String {
        let (kind, message) = match self {
            Error::NotFound(m) => ("not found", m),
            Error::NotPermitted(m) => ("not permitted", m),
            Error::InvalidInput(m) => ("invalid input", m),
            Error::Conflict(m) => ("conflict", m),
            Error::Unavailable(m) => ("unavailable", m),
        };
        format!("{kind}: {message}")
    }
}

impl Description {
    /// An events-mode description with no indexes, reads or writes.
    pub fn events(name: &str, version: &str, subscriptions: Vec<Subscription>) -> Self {
        Self {
            name: name.to_owned(),
            version: version.to_owned(),
            subscriptions,
            delivery: Delivery::Events,
            indexes: Vec::new(),
            reads: Vec::new(),
            writes: Vec::new(),
        }
    }

    /// A reconcile-mode description with `workers` workers.
    pub fn reconcile(
        name: &str,
        version: &str,
        workers: u32,
        subscriptions: Vec<Subscription>,
    ) -> Self {
        Self {
            delivery: Delivery::Reconcile(workers),
            ..Self::events(name, version, subscriptions)
        }
    }
}

impl Read {
    /// A read of `resource_type`'s metadata: cache reads of it carry no JSON and cannot
    /// project, which lets the host keep metadata only.
    pub fn metadata(resource_type: Gvk) -> Self {
        Self {
            resource_type,
            wants_object_json: false,
        }
    }

    /// A read of `resource_type`'s objects whole: cache reads carry their JSON and may
    /// project ([`cache::get_projected`]).
    pub fn bodies(resource_type: Gvk) -> Self {
        Self {
            resource_type,
            wants_object_json: true,
        }
    }
}

impl Subscription {
    /// Every object of `resource_type`, with all its metadata and no JSON, enqueueing its
    /// own key.
    pub fn to(resource_type: Gvk) -> Self {
        Self {
            resource_type,
            namespace: None,
            label_selector: None,
            field_selector: None,
            resync_period_ms: None,
            meta_fields: MetaFields::all(),
            wants_object_json: false,
            wants_old_json: false,
            enqueue: KeyMapping::OwnKey,
            projections: Vec::new(),
        }
    }

    /// Events carry only these parts of the metadata besides namespace, name,
    /// resourceVersion and generation: e.g. `MetaFields::LABELS` for a handler that reads
    /// labels, `MetaFields::empty()` for one that needs only the key. Each part left out
    /// makes every event cheaper to deliver; the parts left out arrive empty.
    pub fn meta(mut self, fields: MetaFields) -> Self {
        self.meta_fields = fields;
        self
    }

    /// Also send each event's object JSON.
    pub fn with_json(mut self) -> Self {
        self.wants_object_json = true;
        self
    }

    /// Have the host read the values at `path` out of each object (dotted fields, `[*]`
    /// iterates over an array: `spec.replicas`, `spec.template.spec.containers[*].image`),
    /// so that the handler reads them by `name` ([`Fields::field`], [`Fields::field_i64`]...)
    /// without parsing the object's JSON.
    pub fn project(mut self, name: &str, path: &str) -> Self {
        self.projections.push(Projection::new(name, path));
        self
    }

    /// Reconcile mode: enqueue the keys `mapping` gives instead of the object's own key,
    /// e.g. `KeyMapping::Computed` to have [`Plugin::map_event`] name them.
    pub fn enqueue(mut self, mapping: KeyMapping) -> Self {
        self.enqueue = mapping;
        self
    }
}

impl IndexDecl {
    /// A custom index `name` on `resource_type` that files each object under the values
    /// found at `path` in its JSON (dotted fields, `[*]` iterates over an array, e.g.
    /// `spec.template.spec.volumes[*].configMap.name`). The host evaluates it; query it
    /// with `cache::by_index(resource_type, name, value)`.
    pub fn path(name: &str, resource_type: Gvk, path: &str) -> Self {
        Self {
            name: name.to_owned(),
            resource_type,
            spec: IndexSpec::Path(path.to_owned()),
        }
    }
}

/// The `namespace/name` (or `name`) key of an object.
fn key_of(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_owned(),
    }
}

impl ObjectMeta {
    /// The object's key.
    pub fn key(&self) -> String {
        key_of(self.namespace.as_deref(), &self.name)
    }

    /// The value of label `key` (labels are sorted, so this is a binary search).
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .binary_search_by(|l| l.key.as_str().cmp(key))
            .ok()
            .map(|i| self.labels[i].value.as_str())
    }
}

impl Projection {
    /// The values at `path` (dotted fields, `[*]` iterates over an array), read by `name`.
    pub fn new(name: &str, path: &str) -> Self {
        Self {
            name: name.to_owned(),
            path: path.to_owned(),
        }
    }
}

/// Reading projected values by name and type, on anything that carries them: an [`Event`]
/// (its new object) and a [`ProjectedObject`] from [`cache::get_projected`] or
/// [`cache::list_projected`].
pub trait Fields {
    /// What each projection selected in the object.
    fn projected(&self) -> &[Projected];

    /// The values projection `name` selected, in document order: empty when its path
    /// matched nothing (or no projection has that name).
    fn field(&self, name: &str) -> &[FieldValue] {
        values_of(self.projected(), name)
    }

    /// The first value of projection `name`, if it is a string.
    fn field_str(&self, name: &str) -> Option<&str> {
        self.field(name).first().and_then(FieldValue::as_str)
    }

    /// The first value of projection `name`, if it is an integer that fits in an `i64`.
    fn field_i64(&self, name: &str) -> Option<i64> {
        self.field(name).first().and_then(FieldValue::as_i64)
    }

    /// The first value of projection `name`, if it is a number.
    fn field_f64(&self, name: &str) -> Option<f64> {
        self.field(name).first().and_then(FieldValue::as_f64)
    }

    /// The first value of projection `name`, if it is a bool.
    fn field_bool(&self, name: &str) -> Option<bool> {
        self.field(name).first().and_then(FieldValue::as_bool)
    }
}

/// The values `name` selected, among one object's projections.
fn values_of<'a>(projected: &'a [Projected], name: &str) -> &'a [FieldValue] {
    projected
        .iter()
        .find(|p| p.name == name)
        .map_or(&[], |p| p.values.as_slice())
}

impl Fields for Event {
    fn projected(&self) -> &[Projected] {
        &self.projected
    }
}

impl Fields for ProjectedObject {
    fn projected(&self) -> &[Projected] {
        &self.projected
    }
}

impl Event {
    /// The object's key.
    pub fn key(&self) -> String {
        self.meta.key()
    }

    /// The value of the object's label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.meta.label(key)
    }

    /// The object's JSON parsed into `T` (e.g. a k8s-openapi type); an error when the
    /// subscription did not ask for JSON or the JSON does not fit `T`.
    pub fn object<T: DeserializeOwned>(&self) -> Result<T, String> {
        let json = self.object_json.as_deref().ok_or_else(|| {
            format!(
                "{}: no object JSON; set wants-object-json on the subscription",
                self.key()
            )
        })?;
        serde_json::from_str(json).map_err(|e| format!("{}: {e}", self.key()))
    }

    /// The values projection `name` selected in the previous state (`updated` events only;
    /// empty otherwise).
    pub fn old_field(&self, name: &str) -> &[FieldValue] {
        values_of(&self.old_projected, name)
    }
}

impl FieldValue {
    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            FieldValue::Text(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if this is one.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            FieldValue::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// The number, integer or not.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            FieldValue::Integer(i) => Some(*i as f64),
            FieldValue::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// The bool, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            FieldValue::Boolean(b) => Some(*b),
            _ => None,
        }
    }

    /// The JSON text of an object or array.
    pub fn as_json(&self) -> Option<&str> {
        match self {
            FieldValue::Json(text) => Some(text),
            _ => None,
        }
    }

    /// An object or array parsed into `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, String> {
        let text = self
            .as_json()
            .ok_or_else(|| format!("{self:?} is not an object or array"))?;
        serde_json::from_str(text).map_err(|e| e.to_string())
    }
}

impl CachedObject {
    /// The object's JSON parsed into `T`; an error when the plugin reads the type's
    /// metadata only (declare [`Read::bodies`]) or the JSON does not fit `T`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, String> {
        let json = self.json.as_deref().ok_or_else(|| {
            format!(
                "{}: no object JSON; declare a read of its type with wants-object-json",
                self.meta.key()
            )
        })?;
        serde_json::from_str(json).map_err(|e| format!("{}: {e}", self.meta.key()))
    }
}

impl ObjectRef {
    /// A reference to `name` of `resource_type`, in `namespace` (`None` when cluster-scoped).
    pub fn new(resource_type: Gvk, namespace: Option<&str>, name: &str) -> Self {
        Self {
            resource_type,
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    /// The referenced object's key.
    pub fn key(&self) -> String {
        key_of(self.namespace.as_deref(), &self.name)
    }
}

/// Reads from the host's shared cache (the raw imports, plus typed helpers).
pub mod cache {
    pub use crate::bindings::kubeplug::plugin::cache::*;
    use serde::de::DeserializeOwned;

    /// The object with `key`, parsed into `T`; `Ok(None)` when the cache does not hold it.
    pub fn get_as<T: DeserializeOwned>(
        resource_type: &crate::Gvk,
        key: &str,
    ) -> Result<Option<T>, String> {
        match get(resource_type, key).map_err(|e| e.explain())? {
            Some(object) => object.parse().map(Some),
            None => Ok(None),
        }
    }
}

/// Logging into the host's log, tagged with the plugin's name.
pub mod log {
    use crate::Label;
    pub use crate::bindings::kubeplug::plugin::log::{Level, enabled, log};

    fn fields(pairs: &[(&str, &str)]) -> Vec<Label> {
        pairs
            .iter()
            .map(|(k, v)| Label {
                key: (*k).to_owned(),
                value: (*v).to_owned(),
            })
            .collect()
    }

    /// Logs at `debug` with key/value fields.
    pub fn debug(message: &str, pairs: &[(&str, &str)]) {
        log(Level::Debug, message, &fields(pairs));
    }

    /// Logs at `info` with key/value fields.
    pub fn info(message: &str, pairs: &[(&str, &str)]) {
        log(Level::Info, message, &fields(pairs));
    }

    /// Logs at `warn` with key/value fields.
    pub fn warn(message: &str, pairs: &[(&str, &str)]) {
        log(Level::Warn, message, &fields(pairs));
    }

    /// Logs at `error` with key/value fields.
    pub fn error(message: &str, pairs: &[(&str, &str)]) {
        log(Level::Error, message, &fields(pairs));
    }
}

/// Writes to the cluster, gated by the host's grants (the raw imports, plus helpers).
pub mod cluster {
    // The glob brings `Error` and `ObjectRef`, the same types as the crate root's.
    pub use crate::bindings::kubeplug::plugin::cluster::*;
    use serde_json::{Map, Value};

    /// Server-side apply of `fields` as the object `target`, with the host's field manager
    /// `kubeplug/<plugin>`. `apiVersion`, `kind`, `metadata.name` and `metadata.namespace`
    /// are filled in from `target`, so `fields` holds only what the plugin manages: with
    /// server-side apply, a field the plugin applied before and leaves out now is removed.
    /// `fields` must be a JSON object (else `invalid-input`). Returns the object as stored.
    pub fn apply_fields(target: &ObjectRef, fields: Value, force: bool) -> Result<String, Error> {
        let Value::Object(mut manifest) = fields else {
            return Err(Error::InvalidInput(format!(
                "apply of {} {}: the fields must be a JSON object",
                target.resource_type.kind,
                target.key()
            )));
        };
        manifest.insert(
            "apiVersion".into(),
            target.resource_type.api_version().into(),
        );
        manifest.insert("kind".into(), target.resource_type.kind.clone().into());
        let metadata = manifest
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(metadata) = metadata else {
            return Err(Error::InvalidInput(format!(
                "apply of {} {}: metadata must be a JSON object",
                target.resource_type.kind,
                target.key()
            )));
        };
        metadata.insert("name".into(), target.name.clone().into());
        match &target.namespace {
            Some(namespace) => metadata.insert("namespace".into(), namespace.clone().into()),
            None => metadata.remove("namespace"),
        };
        apply(target, &Value::Object(manifest).to_string(), force)
    }
}

/// Plugin-defined counters and gauges.
pub mod metrics {
    pub use crate::bindings::kubeplug::plugin::metrics::*;
}

#[doc(hidden)]
pub mod __private {
    //! What [`export_plugin!`](crate::export_plugin) expands to; not a public API.
    use super::*;
    use std::cell::RefCell;

    pub use crate::bindings::exports::kubeplug::plugin::handler::Guest;

    /// The state of the one plugin this component exports. Wasm instances are
    /// single-threaded, so a thread-local is the instance's global.
    pub struct Slot<P>(pub RefCell<Option<P>>);

    impl<P: Plugin> Default for Slot<P> {
        fn default() -> Self {
            Self::new()
        }
    }

    impl<P: Plugin> Slot<P> {
        /// An empty slot.
        pub const fn new() -> Self {
            Self(RefCell::new(None))
        }

        /// Runs `f` on the plugin; traps if `init` was never called (a host bug).
        pub fn with<R>(&self, f: impl FnOnce(&mut P) -> R) -> R {
            let mut slot = self.0.borrow_mut();
            let plugin = slot
                .as_mut()
                .expect("kubeplug host called the plugin before init");
            f(plugin)
        }

        /// `init`: builds the plugin from its settings.
        pub fn init(&self, settings: String) -> Result<(), String> {
            let plugin = P::init(Settings(settings)).map_err(|e| e.0)?;
            *self.0.borrow_mut() = Some(plugin);
            Ok(())
        }
    }
}

/// Exports a [`Plugin`] type as the component's `kubeplug:plugin/handler`.
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        ::std::thread_local! {
            static __KUBEPLUG_SLOT: $crate::__private::Slot<$plugin> = const { $crate::__private::Slot::new() };
        }

        struct __KubeplugExport;

        impl $crate::__private::Guest for __KubeplugExport {
            fn init(settings: ::std::string::String) -> ::std::result::Result<(), ::std::string::String> {
                __KUBEPLUG_SLOT.with(|slot| slot.init(settings))
            }
            fn describe() -> $crate::Description {
                __KUBEPLUG_SLOT.with(|slot| slot.with(|p| <$plugin as $crate::Plugin>::describe(p)))
            }
            fn handle_events(batch: ::std::vec::Vec<$crate::Event>) -> ::std::result::Result<(), ::std::string::String> {
                __KUBEPLUG_SLOT.with(|slot| slot.with(|p| <$plugin as $crate::Plugin>::handle_events(p, batch)))
            }
            fn reconcile(
                resource_type: $crate::Gvk,
                namespace: ::std::option::Option<::std::string::String>,
                name: ::std::string::String,
            ) -> $crate::ReconcileResult {
                let target = $crate::ObjectRef { resource_type, namespace, name };
                __KUBEPLUG_SLOT.with(|slot| slot.with(|p| <$plugin as $crate::Plugin>::reconcile(p, target)))
            }
            fn map_event(event: $crate::Event) -> ::std::vec::Vec<$crate::ObjectRef> {
                __KUBEPLUG_SLOT.with(|slot| slot.with(|p| <$plugin as $crate::Plugin>::map_event(p, event)))
            }
        }

        $crate::bindings::__export_world!(__KubeplugExport);
    };
}
