"""projected-reconciler-py: the Python port of the projected-reconciler test guest. Each
reconcile reads its key's Pod with `cache.get_projected` and the Pods of its namespace with
`cache.list_projected`, five fields each, through the SDK's `field`, and counts what it read
in `reads_total{key, got, listed}`, rendered as the Rust original renders it:
`name=text:<s>`, `integer:<n>`, `boolean:<b>`, `null`, `absent` or `other`, joined by
spaces; `none` for no Pod; listed Pods as `<key>: <fields>` joined by `; `."""

from typing import Callable, Optional, TypeVar

import kubeplug
from kubeplug import Description, Err, Gvk, MetaFields, ReconcileResult
from wit_world.imports import cache
from wit_world.imports.types import ProjectedObject

T = TypeVar("T")

PODS = kubeplug.gvk("", "v1", "Pod")

#: The projections both reads ask for.
FIELDS = [
    kubeplug.projection("node", "spec.nodeName"),
    kubeplug.projection("policy", "spec.restartPolicy"),
    kubeplug.projection("priority", "spec.priority"),
    kubeplug.projection("links", "spec.enableServiceLinks"),
    kubeplug.projection("overhead", "spec.overhead"),
]


def value(obj: ProjectedObject, name: str) -> str:
    """The first value projection `name` selected in `obj`, typed."""
    values = kubeplug.field(obj, name)
    if not values:
        return "absent"
    first = values[0]
    # bool before int: a Python bool is an int.
    if isinstance(first, bool):
        return f"boolean:{'true' if first else 'false'}"
    if isinstance(first, int):
        return f"integer:{first}"
    if isinstance(first, str):
        return f"text:{first}"
    return "null" if first is None else "other"


def render(obj: ProjectedObject) -> str:
    return " ".join(f"{p.name}={value(obj, p.name)}" for p in FIELDS)


class Failed(Exception):
    """A failed read, its message naming the call."""


def call(what: str, thunk: Callable[[], T]) -> T:
    """Runs an import, turning its error into `Failed` naming the call."""
    try:
        return thunk()
    except Err as e:
        error = kubeplug.host_error(e)
        raise Failed(f"{what}: {error.tag}({error.message})") from e


class Handler(kubeplug.Handler):
    def describe(self) -> Description:
        pods = kubeplug.subscription(PODS, meta_fields=MetaFields(0))
        # Projected reads need the Pods' bodies; the subscription alone would keep metadata.
        return kubeplug.description(
            "projected-reconciler-py",
            "0.1.0",
            [pods],
            workers=1,
            reads=[kubeplug.read(PODS, wants_object_json=True)],
        )

    def reconcile(self, resource_type: Gvk, namespace: Optional[str], name: str) -> ReconcileResult:
        own = name if namespace is None else f"{namespace}/{name}"
        try:
            got = call(
                f"get-projected {own}",
                lambda: cache.get_projected(resource_type, own, FIELDS),
            )
            listed = call(
                f"list-projected {own}",
                lambda: cache.list_projected(resource_type, namespace, None, FIELDS),
            )
            labels = {
                "key": own,
                "got": "none" if got is None else render(got),
                "listed": "; ".join(f"{kubeplug.key(o.meta)}: {render(o)}" for o in listed),
            }
            call("reads_total", lambda: kubeplug.counter_add("reads_total", labels))
        except Failed as failure:
            return kubeplug.failed(str(failure))
        return kubeplug.done()
