"""label-audit-py: flags Deployments and Pods that lack required labels (the Python port of
plugins/examples/label-audit).

For each object missing one of the labels, it logs a warning and records a Warning Event
(`MissingLabels`) on the object. It reads typed metadata only: no JSON parsing of objects.
Settings: {"required_labels": ["app.kubernetes.io/name"]} (the default).

Built on kubeplug's Python SDK (the module `kubeplug`, which `kubeplug build` puts on the
path); the rest is componentize-py's bindings, the module `wit_world`.
"""

import json
from typing import List

import kubeplug
from kubeplug import (
    Description,
    Err,
    Event,
    EventType,
    MetaFields,
    ObjectRef,
    WriteRequest,
    WriteVerb,
)
from wit_world.imports import cluster

DEPLOYMENTS = kubeplug.gvk("apps", "v1", "Deployment")
PODS = kubeplug.gvk("", "v1", "Pod")

# The labels every object must carry, from the settings.
required: List[str] = []


def case_name(tag: str) -> str:
    """`not-permitted` → `NotPermitted`, as the Rust port prints error cases."""
    return "".join(word.capitalize() for word in tag.split("-"))


class Handler(kubeplug.Handler):
    def init(self, settings: str) -> None:
        global required
        config = kubeplug.settings(settings, {"required_labels": ["app.kubernetes.io/name"]})
        labels = config["required_labels"]
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise Err("invalid settings: required_labels must be a list of strings")
        if not labels:
            raise Err("settings: required_labels is empty; nothing to audit")
        required = labels

    def describe(self) -> Description:
        # Only the labels: namespace and name always come, and the rest would cost every event.
        subscriptions = [
            kubeplug.subscription(gvk, meta_fields=MetaFields.LABELS) for gvk in (DEPLOYMENTS, PODS)
        ]
        writes = [
            WriteRequest(resource_type=gvk, verbs=[WriteVerb.RECORD_EVENT])
            for gvk in (DEPLOYMENTS, PODS)
        ]
        return kubeplug.description("label-audit-py", "0.1.0", subscriptions, writes=writes)

    def on_event(self, event: Event) -> None:
        if event.change == EventType.DELETED:
            return
        meta = event.meta
        present = {label.key for label in meta.labels}
        missing = [label for label in required if label not in present]
        if not missing:
            return
        resource_type = DEPLOYMENTS if event.subscription == 0 else PODS
        key = kubeplug.key(meta)
        missing_text = ", ".join(missing)
        kubeplug.warn(
            "object lacks required labels", kind=resource_type.kind, key=key, missing=missing_text
        )
        regarding = ObjectRef(resource_type=resource_type, namespace=meta.namespace, name=meta.name)
        try:
            cluster.record_event(
                regarding,
                cluster.EventSeverity.WARNING,
                "MissingLabels",
                f"missing required labels: {missing_text}",
            )
        except Err as e:
            error = kubeplug.host_error(e)
            if error.tag == "not-permitted":
                # Without the grant the audit still logs; the operator sees why no Event appears.
                kubeplug.warn("cannot record an Event", why=error.message)
                return
            raise Err(
                f"recording an Event on {key}: {case_name(error.tag)}({json.dumps(error.message)})"
            )
