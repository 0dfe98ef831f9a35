"""label-only-py: the Python port of the label-only test guest. Reads the label `app` of every
event from typed metadata (no JSON) and counts the `web` ones; nothing else. With the settings
{"stamp_label": "...", "report_every": N} it also times the stamped updates and reports
percentiles through metrics, as the Rust guests' bench-latency probe does.
"""

import json
import time
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
)
from wit_world.imports import metrics
from wit_world.imports.types import Event, Gvk, ObjectMeta, ObjectRef

PODS = Gvk(group="", version="v1", kind="Pod")


def label(meta: ObjectMeta, key: str) -> Optional[str]:
    for entry in meta.labels:
        if entry.key == key:
            return entry.value
    return None


class Probe:
    """Source-to-handler latencies of the stamped updates handled since the last report."""

    def __init__(self, stamp_label: str, report_every: int) -> None:
        self.stamp_label = stamp_label
        self.report_every = report_every
        self.samples: List[int] = []

    def observe(self, event: Event) -> None:
        stamp = label(event.meta, self.stamp_label)
        if stamp is None or int(stamp) == 0:
            return
        self.samples.append(time.time_ns() - int(stamp))
        if len(self.samples) >= self.report_every:
            self.samples.sort()
            last = len(self.samples) - 1
            metrics.gauge_set("latency_p50_ns", [], float(self.samples[last * 50 // 100]))
            metrics.gauge_set("latency_p99_ns", [], float(self.samples[last * 99 // 100]))
            metrics.counter_add("latency_reports_total", [], 1)
            self.samples = []


web = 0
probe: Optional[Probe] = None


class Handler(exports.Handler):
    def init(self, settings: str) -> None:
        global probe
        config = json.loads(settings)
        if "stamp_label" in config:
            every = config.get("report_every")
            if not isinstance(every, int) or every <= 0:
                raise Err("settings: report_every must be a positive integer")
            probe = Probe(config["stamp_label"], every)

    def describe(self) -> Description:
        return Description(
            name="label-only-py",
            version="0.1.0",
            subscriptions=[
                Subscription(
                    resource_type=PODS,
                    namespace=None,
                    label_selector=None,
                    field_selector=None,
                    resync_period_ms=None,
                    meta_fields=MetaFields.LABELS,
                    wants_object_json=False,
                    wants_old_json=False,
                    enqueue=KeyMapping_OwnKey(),
                    projections=[],
                )
            ],
            delivery=Delivery_Events(),
            indexes=[],
            reads=[],
            writes=[],
        )

    def handle_events(self, batch: List[Event]) -> None:
        global web
        for event in batch:
            if label(event.meta, "app") == "web":
                web += 1
            if probe is not None:
                probe.observe(event)

    # Events mode only: the host never calls these.
    def reconcile(self, resource_type: Gvk, namespace: Optional[str], name: str) -> ReconcileResult:
        return ReconcileResult_Done()

    def map_event(self, event: Event) -> List[ObjectRef]:
        return []
