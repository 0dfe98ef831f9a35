"""__NAME__: logs every ConfigMap event it is handed and counts them by change, in the metric
`events_total`.

Edit `describe` to watch other types (and grant their reads in kubeplug.toml), and
`on_event` to act on them. `kubeplug build` builds it with componentize-py; `kubeplug test`
replays events.yaml into it.

Bindings (componentize-py, module `wit_world`, from wit/): WIT records are dataclasses,
options `None` or the value, variants one class per case; an exported `result<_, string>` is
an error when the method raises `Err(message)`, and an imported function returning `result`
raises `Err(error)`.
"""

from typing import List, Optional

from wit_world import exports
from wit_world.exports.handler import (
    Delivery_Events,
    Description,
    KeyMapping_OwnKey,
    MetaFields,
    ReconcileResult,
    ReconcileResult_Done,
    Subscription,
)
from wit_world.imports import log, metrics
from wit_world.imports.types import Event, EventType, Gvk, Label, ObjectRef

CONFIG_MAPS = Gvk(group="", version="v1", kind="ConfigMap")

CHANGES = {EventType.ADDED: "added", EventType.UPDATED: "updated", EventType.DELETED: "deleted"}


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
            delivery=Delivery_Events(),
            indexes=[],
            reads=[],
            writes=[],
        )

    def handle_events(self, batch: List[Event]) -> None:
        # Stops at the first failure: the host retries the whole batch.
        for event in batch:
            self.on_event(event)

    def on_event(self, event: Event) -> None:
        meta = event.meta
        key = meta.name if meta.namespace is None else f"{meta.namespace}/{meta.name}"
        change = CHANGES[event.change]
        log.log(
            log.Level.INFO,
            "event",
            [Label(key="change", value=change), Label(key="key", value=key)],
        )
        metrics.counter_add("events_total", [Label(key="change", value=change)], 1)

    # Events mode only: the host never calls these.
    def reconcile(self, resource_type: Gvk, namespace: Optional[str], name: str) -> ReconcileResult:
        return ReconcileResult_Done()

    def map_event(self, event: Event) -> List[ObjectRef]:
        return []
