"""__NAME__: a reconciler over ConfigMaps. Each key is reconciled with the object read from
the cache and comes back every minute, as a controller-runtime reconciler that returns
`RequeueAfter` does; a deleted object is done.

Edit `describe` to watch other types (and grant their reads in kubeplug.toml), and
`reconcile` to bring each object to its desired state. `kubeplug build` builds it with
componentize-py; `kubeplug test` replays events.yaml into it.

Bindings (componentize-py, module `wit_world`, from wit/): WIT records are dataclasses,
options `None` or the value, variants one class per case; an imported function returning
`result` raises `Err(error)`.
"""

from typing import List, Optional

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.handler import (
    Delivery_Reconcile,
    Description,
    KeyMapping_OwnKey,
    MetaFields,
    ReconcileResult,
    ReconcileResult_Done,
    ReconcileResult_Error,
    ReconcileResult_RequeueAfter,
    Subscription,
)
from wit_world.imports import cache, log
from wit_world.imports.types import Event, Gvk, Label, ObjectRef

CONFIG_MAPS = Gvk(group="", version="v1", kind="ConfigMap")

# How long until a key is reconciled again, in milliseconds.
RESYNC_MS = 60_000


class Handler(exports.Handler):
    def init(self, settings: str) -> None:
        pass

    def describe(self) -> Description:
        return Description(
            name="__NAME__",
            version="0.1.0",
            subscriptions=[
                Subscription(
                    resource_type=CONFIG_MAPS,
                    namespace=None,
                    label_selector=None,
                    field_selector=None,
                    resync_period_ms=None,
                    meta_fields=MetaFields.UID
                    | MetaFields.LABELS
                    | MetaFields.OWNER_REFERENCES
                    | MetaFields.DELETION_TIMESTAMP,
                    wants_object_json=False,
                    wants_old_json=False,
                    enqueue=KeyMapping_OwnKey(),
                )
            ],
            delivery=Delivery_Reconcile(1),
            indexes=[],
            reads=[],
            writes=[],
        )

    def handle_events(self, batch: List[Event]) -> None:
        pass

    def reconcile(self, resource_type: Gvk, namespace: Optional[str], name: str) -> ReconcileResult:
        key = name if namespace is None else f"{namespace}/{name}"
        try:
            cached = cache.get(resource_type, key)
        except Err as e:
            return ReconcileResult_Error(f"reading {key}: {type(e.value).__name__}")
        if cached is None:
            log.log(log.Level.INFO, "gone: nothing to do", [Label(key="key", value=key)])
            return ReconcileResult_Done()
        log.log(
            log.Level.INFO,
            "reconciling",
            [
                Label(key="key", value=key),
                Label(key="resourceVersion", value=cached.meta.resource_version),
            ],
        )
        return ReconcileResult_RequeueAfter(RESYNC_MS)

    # Keys are the objects' own: the host never calls this.
    def map_event(self, event: Event) -> List[ObjectRef]:
        return []
