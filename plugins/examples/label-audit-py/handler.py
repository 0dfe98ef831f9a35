"""label-audit-py: flags Deployments and Pods that lack required labels (the Python port of
plugins/examples/label-audit).

For each object missing one of the labels, it logs a warning and records a Warning Event
(`MissingLabels`) on the object. It reads typed metadata only: no JSON parsing of objects.
Settings: {"required_labels": ["app.kubernetes.io/name"]} (the default).

Bindings (componentize-py, module `wit_world`): WIT records are dataclasses, options are
`None` or the value, variants one class per case; an exported `result<_, string>` is an
error when the method raises `Err(message)`, and an imported function returning `result`
raises `Err(error)`.
"""

import json
from typing import List, Optional

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports.handler import (
    Delivery_Events,
    Description,
    KeyMapping_OwnKey,
    MetaFields,
    ReconcileResult,
    ReconcileResult_Done,
    Subscription,
    WriteRequest,
    WriteVerb,
)
from wit_world.imports import cluster, log
from wit_world.imports.types import (
    Error_NotPermitted,
    Event,
    EventType,
    Gvk,
    Label,
    ObjectRef,
)

DEPLOYMENTS = Gvk(group="apps", version="v1", kind="Deployment")
PODS = Gvk(group="", version="v1", kind="Pod")

# The labels every object must carry, from the settings.
required: List[str] = []


def subscription(resource_type: Gvk) -> Subscription:
    return Subscription(
        resource_type=resource_type,
        namespace=None,
        label_selector=None,
        field_selector=None,
        resync_period_ms=None,
        # Only the labels: namespace and name always come, and the rest would cost every event.
        meta_fields=MetaFields.LABELS,
        wants_object_json=False,
        wants_old_json=False,
        enqueue=KeyMapping_OwnKey(),
    )


def warn(message: str, **fields: str) -> None:
    log.log(log.Level.WARN, message, [Label(key=k, value=v) for k, v in fields.items()])


def case_name(error: object) -> str:
    """`Error_NotPermitted` → `NotPermitted`, as the Rust port prints error cases."""
    return type(error).__name__.removeprefix("Error_")


class Handler(exports.Handler):
    def init(self, settings: str) -> None:
        global required
        try:
            config = json.loads(settings)
        except ValueError as e:
            raise Err(f"invalid settings: {e}")
        if not isinstance(config, dict):
            raise Err("invalid settings: expected an object")
        labels = config.get("required_labels", ["app.kubernetes.io/name"])
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise Err("invalid settings: required_labels must be a list of strings")
        if not labels:
            raise Err("settings: required_labels is empty; nothing to audit")
        required = labels

    def describe(self) -> Description:
        return Description(
            name="label-audit-py",
            version="0.1.0",
            subscriptions=[subscription(DEPLOYMENTS), subscription(PODS)],
            delivery=Delivery_Events(),
            indexes=[],
            reads=[],
            writes=[
                WriteRequest(resource_type=gvk, verbs=[WriteVerb.RECORD_EVENT])
                for gvk in (DEPLOYMENTS, PODS)
            ],
        )

    def handle_events(self, batch: List[Event]) -> None:
        # Stops at the first failure, like the Rust SDK: the host retries the whole batch.
        for event in batch:
            self.on_event(event)

    def on_event(self, event: Event) -> None:
        if event.change == EventType.DELETED:
            return
        meta = event.meta
        present = {label.key for label in meta.labels}
        missing = [label for label in required if label not in present]
        if not missing:
            return
        resource_type = DEPLOYMENTS if event.subscription == 0 else PODS
        key = meta.name if meta.namespace is None else f"{meta.namespace}/{meta.name}"
        missing_text = ", ".join(missing)
        warn("object lacks required labels", kind=resource_type.kind, key=key, missing=missing_text)
        regarding = ObjectRef(resource_type=resource_type, namespace=meta.namespace, name=meta.name)
        try:
            cluster.record_event(
                regarding,
                cluster.EventSeverity.WARNING,
                "MissingLabels",
                f"missing required labels: {missing_text}",
            )
        except Err as e:
            if isinstance(e.value, Error_NotPermitted):
                # Without the grant the audit still logs; the operator sees why no Event appears.
                warn("cannot record an Event", why=e.value.value)
                return
            raise Err(
                f"recording an Event on {key}: {case_name(e.value)}({json.dumps(e.value.value)})"
            )

    # Events mode only: the host never calls these; answer like the Rust SDK's defaults.
    def reconcile(self, resource_type: Gvk, namespace: Optional[str], name: str) -> ReconcileResult:
        return ReconcileResult_Done()

    def map_event(self, event: Event) -> List[ObjectRef]:
        return []
