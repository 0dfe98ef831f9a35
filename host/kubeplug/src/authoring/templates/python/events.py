"""__NAME__: logs every ConfigMap event it is handed and counts them by change, in the metric
`events_total`.

Edit `describe` to watch other types (and grant their reads in kubeplug.toml), and
`on_event` to act on them. `kubeplug build` builds it with componentize-py, with kubeplug's
Python SDK on the path as the module `kubeplug`; `kubeplug test` replays events.yaml into it.
"""

import kubeplug
from kubeplug import Description, Event

CONFIG_MAPS = kubeplug.gvk("", "v1", "ConfigMap")


class Handler(kubeplug.Handler):
    def init(self, settings: str) -> None:
        # The settings: a JSON object (anything else refuses the load); none are read yet.
        kubeplug.settings(settings)

    def describe(self) -> Description:
        return kubeplug.description(
            "__NAME__", "0.1.0", [kubeplug.subscription(CONFIG_MAPS)]
        )

    def on_event(self, event: Event) -> None:
        change = kubeplug.change(event)
        kubeplug.info("event", change=change, key=kubeplug.key(event.meta))
        kubeplug.counter_add("events_total", {"change": change})
