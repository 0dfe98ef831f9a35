//! The `meta.k8s.io/v1` `Table` form kubectl asks for first
//! (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), for the built-in types whose
//! columns people read most: Pods, Deployments, Namespaces, ConfigMaps, Secrets and Events
//! (core and `events.k8s.io`: one printer, as in kube-apiserver), with the columns and cells
//! kube-apiserver v1.32 prints for them (`-o wide`'s too, at priority 1, which kubectl shows
//! only when asked). Other types get no table, and kubectl falls back to NAME and AGE.
//! Written here because no Rust crate carries kube-apiserver's printers; the tests hold them
//! to a real kube-apiserver's answers.
//!
//! A watch answers each event as a table of one row, the column definitions in the first
//! only (`null` after, as kube-apiserver sends them); its bookmarks stay whole-object ones.
//! A streaming list (`sendInitialEvents`) is answered in objects, as kube-apiserver answers it.
//!
//! The local cluster stores what it is sent, so fields the real server sets at create read
//! as it sets them: a Pod without `status.phase` is `Pending`, a Namespace without one
//! `Active`, a Secret without `type` `Opaque`, a Deployment without `spec.replicas` wants 1.

use bytes::Bytes;
use jiff::Timestamp;
use kubeplug_memory::form::partial_object_metadata;
use serde_json::{Value, json};

/// What each row carries beside its cells: the `includeObject` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    None,
    /// The object as a `PartialObjectMetadata`: kube-apiserver's default.
    Metadata,
    Object,
}

/// An `includeObject` query parameter that is none of the three values: a `400`.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("includeObject: {value:?} is not one of None, Metadata or Object")]
pub(crate) struct UnknownIncludeObject {
    /// The value, cut to 40 characters.
    value: String,
}

impl IncludeObject {
    /// From the `includeObject` query parameter; absent or empty is `Metadata`.
    pub(crate) fn parse(value: Option<&str>) -> Result<Self, UnknownIncludeObject> {
        match value {
            None | Some("" | "Metadata") => Ok(Self::Metadata),
            Some("None") => Ok(Self::None),
            Some("Object") => Ok(Self::Object),
            Some(other) => Err(UnknownIncludeObject {
                value: other.chars().take(40).collect(),
            }),
        }
    }
}

/// One column of a type's table.
struct Column {
    name: &'static str,
    /// `name` for the object's name column, else empty.
    format: &'static str,
    /// 0: always shown; 1: with `-o wide`.
    priority: u8,
    description: &'static str,
}

/// A read answered as a table: the type's printer and what each row carries.
#[derive(Clone, Copy)]
pub(crate) struct TableOf {
    pub(crate) printer: &'static Printer,
    pub(crate) include: IncludeObject,
}

impl TableOf {
    /// A `Table` of `objects` (whole JSON, with `kind` and `apiVersion`) as of now: with its
    /// column definitions when `columns`, else `"columnDefinitions": null`, as a watch's
    /// events after the first carry.
    pub(crate) fn table<'a>(
        &self,
        metadata: Value,
        columns: bool,
        objects: impl IntoIterator<Item = &'a Bytes>,
    ) -> Bytes {
        let now = Timestamp::now();
        let rows: Vec<Value> = objects
            .into_iter()
            .map(|object| self.printer.row(object, self.include, now))
            .collect();
        let table = json!({
            "kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata,
            "columnDefinitions": columns.then(|| self.printer.column_definitions()),
            "rows": rows,
        });
        Bytes::from(table.to_string())
    }
}

/// A type's columns, what fills a row's cells (given the object and the time now), and the
/// row's conditions.
pub(crate) struct Printer {
    columns: &'static [Column],
    cells: fn(&Value, Timestamp) -> Vec<Value>,
    conditions: fn(&Value) -> Option<Value>,
}

/// The table printer of `group`/`kind`, for the types served as tables.
pub(crate) fn printer(group: &str, kind: &str) -> Option<&'static Printer> {
    match (group, kind) {
        ("", "Pod") => Some(&POD),
        ("apps", "Deployment") => Some(&DEPLOYMENT),
        ("", "Namespace") => Some(&NAMESPACE),
        ("", "ConfigMap") => Some(&CONFIG_MAP),
        ("", "Secret") => Some(&SECRET),
        ("", "Event") => Some(&CORE_EVENT),
        ("events.k8s.io", "Event") => Some(&EVENT),
        _ => None,
    }
}

impl Printer {
    /// The `columnDefinitions` of a table.
    fn column_definitions(&self) -> Value {
        self.columns
            .iter()
            .map(|c| {
                json!({"name": c.name, "type": "string", "format": c.format,
                       "description": c.description, "priority": c.priority})
            })
            .collect()
    }

    /// The row of `object` (whole JSON, with `kind` and `apiVersion`).
    fn row(&self, object: &Bytes, include: IncludeObject, now: Timestamp) -> Value {
        let parsed: Value = serde_json::from_slice(object).unwrap_or(Value::Null);
        let mut row = json!({"cells": (self.cells)(&parsed, now)});
        if let Some(conditions) = (self.conditions)(&parsed) {
            row["conditions"] = conditions;
        }
        match include {
            IncludeObject::None => {}
            IncludeObject::Metadata => {
                let metadata = partial_object_metadata(object.clone());
                row["object"] = serde_json::from_slice(&metadata).unwrap_or(Value::Null);
            }
            IncludeObject::Object => row["object"] = parsed,
        }
        row
    }
}

/// `object.metadata.resourceVersion`, read from whole JSON.
pub(crate) fn resource_version(object: &Bytes) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Object {
        metadata: Metadata,
    }
    #[derive(serde::Deserialize)]
    struct Metadata {
        #[serde(rename = "resourceVersion")]
        resource_version: Option<String>,
    }
    let object: Object = serde_json::from_slice(object).ok()?;
    object.metadata.resource_version
}

const NAME: Column = Column {
    name: "Name",
    format: "name",
    priority: 0,
    description: "The object's name, unique among its kind in its namespace.",
};

const AGE: Column = column(
    "Age",
    0,
    "Time since the object was created (metadata.creationTimestamp).",
);

const fn column(name: &'static str, priority: u8, description: &'static str) -> Column {
    Column {
        name,
        format: "",
        priority,
        description,
    }
}

static POD: Printer = Printer {
    columns: &[
        NAME,
        column("Ready", 0, "Ready containers, of those the pod runs."),
        column(
            "Status",
            0,
            "The pod's phase, or what its containers are waiting on or ended with.",
        ),
        column(
            "Restarts",
            0,
            "Container restarts, and how long ago the last one ended.",
        ),
        AGE,
        column("IP", 1, "The pod's first IP address."),
        column("Node", 1, "The node the pod is bound to."),
        column(
            "Nominated Node",
            1,
            "The node preemption made room on, before binding.",
        ),
        column(
            "Readiness Gates",
            1,
            "Readiness gates whose condition is True, of those the pod has.",
        ),
    ],
    cells: pod_cells,
    conditions: pod_row_conditions,
};

static DEPLOYMENT: Printer = Printer {
    columns: &[
        NAME,
        column("Ready", 0, "Ready pods, of the replicas wanted."),
        column(
            "Up-to-date",
            0,
            "Pods that run the current template, not terminating.",
        ),
        column("Available", 0, "Pods ready for at least minReadySeconds."),
        AGE,
        column("Containers", 1, "The template's container names."),
        column("Images", 1, "The template's container images."),
        column(
            "Selector",
            1,
            "The label selector of the deployment's pods.",
        ),
    ],
    cells: deployment_cells,
    conditions: |_| None,
};

static NAMESPACE: Printer = Printer {
    columns: &[NAME, column("Status", 0, "The namespace's phase."), AGE],
    cells: |object, now| {
        vec![
            name(object),
            text(phase(object, "Active")),
            age(object, now),
        ]
    },
    conditions: |_| None,
};

static CONFIG_MAP: Printer = Printer {
    columns: &[NAME, column("Data", 0, "Keys in data and binaryData."), AGE],
    cells: |object, now| {
        let keys = count(&object["data"]) + count(&object["binaryData"]);
        vec![name(object), json!(keys), age(object, now)]
    },
    conditions: |_| None,
};

static SECRET: Printer = Printer {
    columns: &[
        NAME,
        column("Type", 0, "The secret's type."),
        column("Data", 0, "Keys in data (and stringData)."),
        AGE,
    ],
    cells: |object, now| {
        let kind = object["type"].as_str().unwrap_or("Opaque");
        // The real server folds `stringData` into `data` at write; the local cluster keeps it.
        let mut keys: Vec<&String> = [&object["data"], &object["stringData"]]
            .into_iter()
            .filter_map(Value::as_object)
            .flat_map(|map| map.keys())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        vec![
            name(object),
            text(kind),
            json!(keys.len()),
            age(object, now),
        ]
    },
    conditions: |_| None,
};

/// An Event's columns: the one-line summary first, `-o wide`'s details at priority 1.
const EVENT_COLUMNS: &[Column] = &[
    column("Last Seen", 0, "Time since the event was last observed."),
    column("Type", 0, "Normal or Warning."),
    column("Reason", 0, "Why the event happened, in CamelCase."),
    column("Object", 0, "The object the event is about, kind/name."),
    column("Subobject", 1, "The part of the object, by field path."),
    column(
        "Source",
        1,
        "The component that reported it, and its instance.",
    ),
    column("Message", 0, "What happened, for people."),
    column("First Seen", 1, "Time since the event was first observed."),
    column("Count", 1, "How many times it was observed."),
    Column {
        name: "Name",
        format: "name",
        priority: 1,
        description: "The event's name.",
    },
];

static CORE_EVENT: Printer = Printer {
    columns: EVENT_COLUMNS,
    cells: event_cells,
    conditions: |_| None,
};

/// `events.k8s.io/v1` Events print as the core ones they also are.
static EVENT: Printer = Printer {
    columns: EVENT_COLUMNS,
    cells: |object, now| event_cells(&crate::events::as_core(object.clone()), now),
    conditions: |_| None,
};

/// A core `v1` Event's cells. First seen is `firstTimestamp`, else `eventTime`; last seen
/// `series.lastObservedTime`, else `lastTimestamp`, else first seen; the count the series',
/// else `count`, and at least 1.
fn event_cells(event: &Value, now: Timestamp) -> Vec<Value> {
    let first = match timestamp(&event["firstTimestamp"]) {
        Some(first) => Some(first),
        None => timestamp(&event["eventTime"]),
    };
    let series = &event["series"];
    let (last, count) = if series.is_object() {
        (
            timestamp(&series["lastObservedTime"]),
            series["count"].as_i64().unwrap_or(0),
        )
    } else {
        let last = timestamp(&event["lastTimestamp"]).or(first);
        (
            last,
            event["count"].as_i64().filter(|c| *c != 0).unwrap_or(1),
        )
    };
    let regarding = &event["involvedObject"];
    let kind = regarding["kind"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    let target = match non_empty(&regarding["name"]) {
        Some(name) => format!("{kind}/{name}"),
        None => kind,
    };
    let component = non_empty(&event["source"]["component"])
        .or(non_empty(&event["reportingComponent"]))
        .unwrap_or_default();
    let source =
        match non_empty(&event["source"]["host"]).or(non_empty(&event["reportingInstance"])) {
            Some(instance) => format!("{component}, {instance}"),
            None => component.to_owned(),
        };
    let field = |name: &str| text(event[name].as_str().unwrap_or_default());
    vec![
        text(&since(last, now)),
        field("type"),
        field("reason"),
        text(&target),
        text(regarding["fieldPath"].as_str().unwrap_or_default()),
        text(&source),
        text(event["message"].as_str().unwrap_or_default().trim()),
        text(&since(first, now)),
        json!(count),
        name(event),
    ]
}

fn text(value: &str) -> Value {
    Value::String(value.to_owned())
}

fn name(object: &Value) -> Value {
    object["metadata"]["name"].clone()
}

fn count(map: &Value) -> usize {
    map.as_object().map_or(0, |m| m.len())
}

fn phase<'a>(object: &'a Value, absent: &'a str) -> &'a str {
    match object["status"]["phase"].as_str() {
        Some(phase) if !phase.is_empty() => phase,
        _ => absent,
    }
}

fn array(value: &Value) -> &[Value] {
    value.as_array().map_or(&[], Vec::as_slice)
}

fn timestamp(value: &Value) -> Option<Timestamp> {
    value.as_str()?.parse().ok()
}

fn age(object: &Value, now: Timestamp) -> Value {
    text(&since(
        timestamp(&object["metadata"]["creationTimestamp"]),
        now,
    ))
}

/// How long ago `then` was, as kubectl's columns print it; `<unknown>` without a time.
fn since(then: Option<Timestamp>, now: Timestamp) -> String {
    match then {
        Some(then) => human_duration(now.duration_since(then).as_secs()),
        None => "<unknown>".to_owned(),
    }
}

/// A duration in seconds in the units Kubernetes prints ages in: exact to the second under
/// ten minutes, then coarser (minutes, hours, days, years) the longer it is.
fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 2 * 60 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return with_rest(minutes, "m", seconds % 60, "s");
    }
    if minutes < 3 * 60 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return with_rest(hours, "h", minutes % 60, "m");
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 8 * 24 {
        return with_rest(days, "d", hours % 24, "h");
    }
    if days < 2 * 365 {
        return format!("{days}d");
    }
    if days < 8 * 365 {
        return with_rest(days / 365, "y", days % 365, "d");
    }
    format!("{}y", days / 365)
}

/// `5m` or `5m30s`: the smaller unit only when not zero.
fn with_rest(whole: i64, unit: &str, rest: i64, rest_unit: &str) -> String {
    match rest {
        0 => format!("{whole}{unit}"),
        rest => format!("{whole}{unit}{rest}{rest_unit}"),
    }
}

/// The row conditions kube-apiserver gives a Pod that has ended.
fn pod_row_conditions(object: &Value) -> Option<Value> {
    let (reason, message) = match object["status"]["phase"].as_str()? {
        "Succeeded" => ("Succeeded", "The pod has completed successfully."),
        "Failed" => ("Failed", "The pod failed."),
        _ => return None,
    };
    Some(json!([{"type": "Completed", "status": "True", "reason": reason, "message": message}]))
}

/// Restarts counted and the latest restart seen, over some of a pod's containers.
#[derive(Default)]
struct Restarts {
    count: i64,
    last: Option<Timestamp>,
}

impl Restarts {
    fn add(&mut self, status: &Value) {
        // Saturating: the counts are whatever a writer stored.
        let count = status["restartCount"].as_i64().unwrap_or(0);
        self.count = self.count.saturating_add(count);
        if let Some(ended) = timestamp(&status["lastState"]["terminated"]["finishedAt"]) {
            self.last = self.last.max(Some(ended));
        }
    }
}

/// A terminated state's reason, or its signal or exit code when it gives none.
fn terminated_reason(terminated: &Value) -> String {
    match terminated["reason"].as_str() {
        Some(reason) if !reason.is_empty() => reason.to_owned(),
        _ => match terminated["signal"].as_i64() {
            Some(signal) if signal != 0 => format!("Signal:{signal}"),
            _ => format!("ExitCode:{}", terminated["exitCode"].as_i64().unwrap_or(0)),
        },
    }
}

fn non_empty(value: &Value) -> Option<&str> {
    value.as_str().filter(|s| !s.is_empty())
}

fn has_condition(status: &Value, kind: &str, value: &str) -> bool {
    array(&status["conditions"])
        .iter()
        .any(|c| c["type"] == kind && c["status"] == value)
}

/// A Pod's cells: the status is the phase (or `status.reason`), overridden by the first init
/// container not done, else by the main containers' states (the first listed wins), then by
/// deletion. Sidecars (init containers that restart always) count as containers once started.
fn pod_cells(pod: &Value, now: Timestamp) -> Vec<Value> {
    let spec = &pod["spec"];
    let status = &pod["status"];
    let mut reason = non_empty(&status["reason"])
        .unwrap_or(phase(pod, "Pending"))
        .to_owned();
    if array(&status["conditions"])
        .iter()
        .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated")
    {
        reason = "SchedulingGated".to_owned();
    }
    let init_specs = array(&spec["initContainers"]);
    let is_sidecar = |name: &Value| {
        init_specs
            .iter()
            .any(|c| c["name"] == *name && c["restartPolicy"] == "Always")
    };
    let total = array(&spec["containers"]).len()
        + init_specs
            .iter()
            .filter(|c| c["restartPolicy"] == "Always")
            .count();
    let mut ready = 0;
    let mut restarts = Restarts::default();
    let mut sidecar_restarts = Restarts::default();
    let mut initializing = false;
    for (i, container) in array(&status["initContainerStatuses"]).iter().enumerate() {
        restarts.add(container);
        let sidecar = is_sidecar(&container["name"]);
        if sidecar {
            sidecar_restarts.add(container);
        }
        let state = &container["state"];
        let terminated = &state["terminated"];
        if terminated.is_object() && terminated["exitCode"].as_i64().unwrap_or(0) == 0 {
            continue;
        }
        if sidecar && container["started"] == true {
            if container["ready"] == true {
                ready += 1;
            }
            continue;
        }
        initializing = true;
        reason = if terminated.is_object() {
            format!("Init:{}", terminated_reason(terminated))
        } else if let Some(waiting) =
            non_empty(&state["waiting"]["reason"]).filter(|reason| *reason != "PodInitializing")
        {
            format!("Init:{waiting}")
        } else {
            format!("Init:{i}/{}", init_specs.len())
        };
        break;
    }
    if !initializing || has_condition(status, "Initialized", "True") {
        restarts = sidecar_restarts;
        let mut running = false;
        for container in array(&status["containerStatuses"]).iter().rev() {
            restarts.add(container);
            let state = &container["state"];
            if let Some(waiting) = non_empty(&state["waiting"]["reason"]) {
                reason = waiting.to_owned();
            } else if state["terminated"].is_object() {
                reason = terminated_reason(&state["terminated"]);
            } else if container["ready"] == true && state["running"].is_object() {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            reason = if has_condition(status, "Ready", "True") {
                "Running".to_owned()
            } else {
                "NotReady".to_owned()
            };
        }
    }
    if pod["metadata"]["deletionTimestamp"].is_string() {
        if status["reason"] == "NodeLost" {
            reason = "Unknown".to_owned();
        } else if !matches!(phase(pod, "Pending"), "Succeeded" | "Failed") {
            reason = "Terminating".to_owned();
        }
    }
    let restarts_cell = match restarts.last {
        Some(last) if restarts.count != 0 => {
            format!("{} ({} ago)", restarts.count, since(Some(last), now))
        }
        _ => restarts.count.to_string(),
    };
    let or_none = |value: Option<&str>| text(value.unwrap_or("<none>"));
    let gates = array(&spec["readinessGates"]);
    let gates_cell = if gates.is_empty() {
        "<none>".to_owned()
    } else {
        let passed = gates
            .iter()
            .filter(|gate| {
                let kind = gate["conditionType"].as_str().unwrap_or_default();
                array(&status["conditions"])
                    .iter()
                    .find(|c| c["type"] == kind)
                    .is_some_and(|c| c["status"] == "True")
            })
            .count();
        format!("{passed}/{}", gates.len())
    };
    vec![
        name(pod),
        text(&format!("{ready}/{total}")),
        text(&reason),
        text(&restarts_cell),
        age(pod, now),
        or_none(non_empty(&status["podIPs"][0]["ip"])),
        or_none(non_empty(&spec["nodeName"])),
        or_none(non_empty(&status["nominatedNodeName"])),
        text(&gates_cell),
    ]
}

fn deployment_cells(deployment: &Value, now: Timestamp) -> Vec<Value> {
    let spec = &deployment["spec"];
    let status = &deployment["status"];
    let number = |value: &Value| value.as_i64().unwrap_or(0);
    let wanted = spec["replicas"].as_i64().unwrap_or(1);
    let containers = array(&spec["template"]["spec"]["containers"]);
    let joined = |field: &str| {
        containers
            .iter()
            .map(|c| c[field].as_str().unwrap_or_default())
            .collect::<Vec<_>>()
            .join(",")
    };
    vec![
        name(deployment),
        text(&format!("{}/{wanted}", number(&status["readyReplicas"]))),
        json!(number(&status["updatedReplicas"])),
        json!(number(&status["availableReplicas"])),
        age(deployment, now),
        text(&joined("name")),
        text(&joined("image")),
        text(&selector(&spec["selector"])),
    ]
}

/// A label selector as Kubernetes prints it: requirements sorted by key, `k=v`,
/// `k in (a,b)`, `k notin (a,b)`, `k`, `!k`; no selector or an empty one is empty.
fn selector(selector: &Value) -> String {
    let mut requirements: Vec<(String, String)> = Vec::new();
    if let Some(labels) = selector["matchLabels"].as_object() {
        for (key, value) in labels {
            let value = value.as_str().unwrap_or_default();
            requirements.push((key.clone(), format!("{key}={value}")));
        }
    }
    for expression in array(&selector["matchExpressions"]) {
        let key = expression["key"].as_str().unwrap_or_default();
        let mut values: Vec<&str> = array(&expression["values"])
            .iter()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        let values = values.join(",");
        let printed = match expression["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({values})"),
            "NotIn" => format!("{key} notin ({values})"),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other} ({values})"),
        };
        requirements.push((key.to_owned(), printed));
    }
    requirements.sort_by(|a, b| a.0.cmp(&b.0));
    requirements
        .into_iter()
        .map(|(_, printed)| printed)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests;
