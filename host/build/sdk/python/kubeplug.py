"""kubeplug's Python SDK: helpers over the host's imports and the handler's records.

`kubeplug build` puts this module on the plugin's Python path, after the plugin's own
directory, so a handler imports it as `kubeplug` (a name its own modules must not take).

Bindings underneath (componentize-py, module `wit_world`): WIT records are dataclasses,
options the value or `None`, enums Python `Enum`s, variants one class per case; an exported
`result<_, string>` fails when the method raises `Err(message)`, and an imported function
returning `result` raises `Err(error)`, whose `value` is the error case. The binding types a
handler names most (`Description`, `Event`, `EventType`, `Gvk`, `MetaFields`, `ObjectRef`,
`ReconcileResult`, `WriteRequest`, `WriteVerb`, `Err`) can be imported from here.
"""

import json
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Union

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.handler import (
    Delivery_Events,
    Delivery_Reconcile,
    Description,
    IndexDecl,
    KeyMapping,
    KeyMapping_OwnKey,
    MetaFields,
    Read,
    ReconcileResult,
    ReconcileResult_Done,
    ReconcileResult_Error,
    ReconcileResult_RequeueAfter,
    Subscription,
    WriteRequest,
    WriteVerb,
)
from wit_world.imports import log as _log
from wit_world.imports import metrics as _metrics
from wit_world.imports.types import (
    Event,
    EventType,
    FieldValue,
    FieldValue_Json,
    FieldValue_Null,
    Gvk,
    Label,
    ObjectMeta,
    ObjectRef,
    Projected,
    ProjectedObject,
    Projection,
)

#: Every part of the metadata an event can carry besides namespace, name,
#: resourceVersion and generation.
ALL_META = (
    MetaFields.UID | MetaFields.LABELS | MetaFields.OWNER_REFERENCES | MetaFields.DELETION_TIMESTAMP
)

_LEVELS = {
    "debug": _log.Level.DEBUG,
    "info": _log.Level.INFO,
    "warn": _log.Level.WARN,
    "error": _log.Level.ERROR,
}

_CHANGES = {EventType.ADDED: "added", EventType.UPDATED: "updated", EventType.DELETED: "deleted"}


def gvk(group: str, version: str, kind: str) -> Gvk:
    """A resource type."""
    return Gvk(group=group, version=version, kind=kind)


def key(meta: ObjectMeta) -> str:
    """An object's key: `namespace/name`, or `name` for a cluster-scoped object."""
    return meta.name if meta.namespace is None else f"{meta.namespace}/{meta.name}"


def label(meta: ObjectMeta, name: str) -> Optional[str]:
    """The value of the label `name`, or `None`."""
    return next((found.value for found in meta.labels if found.key == name), None)


def change(event: Event) -> str:
    """What the event says happened: `added`, `updated` or `deleted`."""
    return _CHANGES[event.change]


def _pairs(values: Mapping[str, Any]) -> List[Label]:
    return [Label(key=name, value=str(value)) for name, value in values.items()]


def log(level: str, message: str, **fields: Any) -> None:
    """A log record at `level` (`debug`, `info`, `warn` or `error`) with keyword fields."""
    _log.log(_LEVELS[level], message, _pairs(fields))


def debug(message: str, **fields: Any) -> None:
    log("debug", message, **fields)


def info(message: str, **fields: Any) -> None:
    log("info", message, **fields)


def warn(message: str, **fields: Any) -> None:
    log("warn", message, **fields)


def error(message: str, **fields: Any) -> None:
    log("error", message, **fields)


def counter_add(name: str, labels: Optional[Mapping[str, Any]] = None, delta: int = 1) -> None:
    """Adds `delta` to a counter. Raises `Err` when the host refuses the name or labels."""
    _metrics.counter_add(name, _pairs(labels or {}), delta)


def gauge_set(name: str, value: float, labels: Optional[Mapping[str, Any]] = None) -> None:
    """Sets a gauge. Raises `Err` when the host refuses the name or labels."""
    _metrics.gauge_set(name, _pairs(labels or {}), float(value))


def subscription(
    resource_type: Gvk,
    *,
    namespace: Optional[str] = None,
    label_selector: Optional[str] = None,
    field_selector: Optional[str] = None,
    resync_period_ms: Optional[int] = None,
    meta_fields: MetaFields = ALL_META,
    wants_object_json: bool = False,
    wants_old_json: bool = False,
    enqueue: Optional[KeyMapping] = None,
    projections: Sequence[Projection] = (),
) -> Subscription:
    """A subscription to `resource_type`: all metadata, no JSON, the object's own key, no
    projections, unless a keyword says otherwise."""
    return Subscription(
        resource_type=resource_type,
        namespace=namespace,
        label_selector=label_selector,
        field_selector=field_selector,
        resync_period_ms=resync_period_ms,
        meta_fields=meta_fields,
        wants_object_json=wants_object_json,
        wants_old_json=wants_old_json,
        enqueue=KeyMapping_OwnKey() if enqueue is None else enqueue,
        projections=list(projections),
    )


def projection(name: str, path: str) -> Projection:
    """A field path whose values the host reads out of each object for the handler, read
    back by `name` with `field`: `subscription(pods, projections=[projection("image",
    "spec.containers[*].image")])`."""
    return Projection(name=name, path=path)


def read(resource_type: Gvk, *, wants_object_json: bool = False) -> Read:
    """A type the handler reads through the cache, for `description(reads=...)`: metadata
    only unless `wants_object_json` (cache answers then carry each object's JSON, and
    `cache.get_projected` and `cache.list_projected` may read it)."""
    return Read(resource_type=resource_type, wants_object_json=wants_object_json)


def value(field_value: FieldValue) -> Any:
    """A projected value as Python: str, int, float, bool, None, or a parsed dict or list."""
    if isinstance(field_value, FieldValue_Null):
        return None
    if isinstance(field_value, FieldValue_Json):
        return json.loads(field_value.value)
    return field_value.value


def _values_of(projected: List[Projected], name: str) -> List[Any]:
    for p in projected:
        if p.name == name:
            return [value(v) for v in p.values]
    return []


def field(source: Union[Event, ProjectedObject], name: str) -> List[Any]:
    """The values projection `name` selected in the object, in document order: an event's, or
    one `cache.get_projected` or `cache.list_projected` returned."""
    return _values_of(source.projected, name)


def old_field(event: Event, name: str) -> List[Any]:
    """The same in the previous state (`updated` events; empty otherwise)."""
    return _values_of(event.old_projected, name)


def description(
    name: str,
    version: str,
    subscriptions: Sequence[Subscription],
    *,
    workers: Optional[int] = None,
    indexes: Sequence[IndexDecl] = (),
    reads: Sequence[Read] = (),
    writes: Sequence[WriteRequest] = (),
) -> Description:
    """What `describe` returns: events mode, or reconcile mode with `workers` workers."""
    return Description(
        name=name,
        version=version,
        subscriptions=list(subscriptions),
        delivery=Delivery_Events() if workers is None else Delivery_Reconcile(workers),
        indexes=list(indexes),
        reads=list(reads),
        writes=list(writes),
    )


def settings(text: str, defaults: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The settings document (what `init` gets) as a dict over `defaults`. Raises the `Err`
    that refuses the load when it is not a JSON object."""
    try:
        parsed = json.loads(text)
    except ValueError as e:
        raise Err(f"invalid settings: {e}")
    if not isinstance(parsed, dict):
        raise Err("invalid settings: expected an object")
    return {**(defaults or {}), **parsed}


def done() -> ReconcileResult:
    """Done: forget the key's back-off."""
    return ReconcileResult_Done()


def requeue_after(ms: int) -> ReconcileResult:
    """Done for now: reconcile the key again after `ms` milliseconds."""
    return ReconcileResult_RequeueAfter(ms)


def failed(message: str) -> ReconcileResult:
    """Failed: retried with back-off; the message is logged."""
    return ReconcileResult_Error(message)


class HostError(NamedTuple):
    """An import's error: its case as the WIT names it (`not-found`, `not-permitted`,
    `invalid-input`, `conflict`, `unavailable`) and the host's message."""

    tag: str
    message: str


def host_error(raised: Err) -> HostError:
    """The error case an import raised (`except Err as e: host_error(e)`)."""
    case = raised.value
    words = type(case).__name__.removeprefix("Error_")
    tag = "".join(f"-{c.lower()}" if c.isupper() else c for c in words).lstrip("-")
    return HostError(tag, str(case.value))


class Handler(exports.Handler):
    """The `handler` export with every function but `describe` doing nothing: subclass it
    as `class Handler(kubeplug.Handler)` and define what the plugin needs. In events mode,
    `handle_events` hands each event to `on_event` in order, stopping at the first failure
    (the host retries the whole batch)."""

    def init(self, settings: str) -> None:
        pass

    def handle_events(self, batch: List[Event]) -> None:
        for event in batch:
            self.on_event(event)

    def on_event(self, event: Event) -> None:
        pass

    def reconcile(
        self, resource_type: Gvk, namespace: Optional[str], name: str
    ) -> ReconcileResult:
        return ReconcileResult_Done()

    def map_event(self, event: Event) -> List[ObjectRef]:
        return []
