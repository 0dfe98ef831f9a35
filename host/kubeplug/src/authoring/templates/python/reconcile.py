"""__NAME__: a reconciler over ConfigMaps. Each key is reconciled with the object read from
the cache and comes back every minute, as a controller-runtime reconciler that returns
`RequeueAfter` does; a deleted object is done.

Edit `describe` to watch other types (and grant their reads in kubeplug.toml), and
`reconcile` to bring each object to its desired state. `kubeplug build` builds it with
componentize-py, with kubeplug's Python SDK on the path as the module `kubeplug`;
`kubeplug test` replays events.yaml into it.
"""

from typing import Optional

import kubeplug
from kubeplug import Description, Err, Gvk, ReconcileResult
from wit_world.imports import cache

CONFIG_MAPS = kubeplug.gvk("", "v1", "ConfigMap")

# How long until a key is reconciled again, in milliseconds.
RESYNC_MS = 60_000


class Handler(kubeplug.Handler):
    def describe(self) -> Description:
        return kubeplug.description(
            "__NAME__", "0.1.0", [kubeplug.subscription(CONFIG_MAPS)], workers=1
        )

    def reconcile(self, resource_type: Gvk, namespace: Optional[str], name: str) -> ReconcileResult:
        key = name if namespace is None else f"{namespace}/{name}"
        try:
            cached = cache.get(resource_type, key)
        except Err as e:
            return kubeplug.failed(f"reading {key}: {kubeplug.host_error(e).tag}")
        if cached is None:
            kubeplug.info("gone: nothing to do", key=key)
            return kubeplug.done()
        kubeplug.info("reconciling", key=key, resourceVersion=cached.meta.resource_version)
        return kubeplug.requeue_after(RESYNC_MS)
