// __NAME__: a reconciler over ConfigMaps. Each key is reconciled with the object read from
// the cache and comes back every minute, as a controller-runtime reconciler that returns
// `RequeueAfter` does; a deleted object is done.
//
// Edit `describe` to watch other types (and grant their reads in kubeplug.toml), and
// `reconcile` to bring each object to its desired state. `kubeplug build` builds it with
// componentize-qjs; `kubeplug test` replays events.yaml into it.
//
// Bindings (wit/): WIT records are objects with camelCase keys, options the value or
// `null`, enums their case names, variants `{ tag, val }`. An imported function returning
// `result` throws its error variant.

import { get } from "kubeplug:plugin/cache@0.2.0";
import { log } from "kubeplug:plugin/log@0.2.0";

const CONFIG_MAPS = { group: "", version: "v1", kind: "ConfigMap" };

/** How long until a key is reconciled again, in milliseconds. */
const RESYNC_MS = 60000;

function describe() {
  return {
    name: "__NAME__",
    version: "0.1.0",
    subscriptions: [
      {
        resourceType: CONFIG_MAPS,
        namespace: null,
        labelSelector: null,
        fieldSelector: null,
        resyncPeriodMs: null,
        metaFields: { uid: true, labels: true, ownerReferences: true, deletionTimestamp: true },
        wantsObjectJson: false,
        wantsOldJson: false,
        enqueue: { tag: "own-key" },
      },
    ],
    delivery: { tag: "reconcile", val: 1 },
    indexes: [],
    reads: [],
    writes: [],
  };
}

function reconcile(resourceType, namespace, name) {
  const key = namespace == null ? name : `${namespace}/${name}`;
  let object;
  try {
    object = get(resourceType, key);
  } catch (error) {
    return { tag: "error", val: `reading ${key}: ${error?.tag ?? error}` };
  }
  if (object == null) {
    log("info", "gone: nothing to do", [{ key: "key", value: key }]);
    return { tag: "done" };
  }
  log("info", "reconciling", [
    { key: "key", value: key },
    { key: "resourceVersion", value: object.meta.resourceVersion },
  ]);
  return { tag: "requeue-after", val: RESYNC_MS };
}

export const handler = {
  init: (_settings) => {},
  describe,
  handleEvents: () => {},
  reconcile,
  mapEvent: () => [],
};
