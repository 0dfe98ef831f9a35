"""fields-projected-py: the Python port of the fields-projected test guest. Reads three Pod
spec fields of every event through projections (no object JSON, only the key of the
metadata) with the SDK's `field`, and counts per batch the events that had all three as
strings (`complete_total`)."""

from typing import List

import kubeplug
from kubeplug import Description, Event, MetaFields


class Handler(kubeplug.Handler):
    def describe(self) -> Description:
        pods = kubeplug.subscription(
            kubeplug.gvk("", "v1", "Pod"),
            meta_fields=MetaFields(0),
            projections=[
                kubeplug.projection("node", "spec.nodeName"),
                kubeplug.projection("policy", "spec.restartPolicy"),
                kubeplug.projection("scheduler", "spec.schedulerName"),
            ],
        )
        return kubeplug.description("fields-projected-py", "0.1.0", [pods])

    def handle_events(self, batch: List[Event]) -> None:
        complete = 0
        for event in batch:
            fields = [kubeplug.field(event, name) for name in ("node", "policy", "scheduler")]
            if all(values and isinstance(values[0], str) for values in fields):
                complete += 1
        kubeplug.counter_add("complete_total", delta=complete)
