// __NAME__: logs every ConfigMap event it is handed and counts them by change, in the
// metric `events_total`.
//
// Edit `describe` to watch other types (and grant their reads in kubeplug.toml), and
// `handleEvents` to act on them. `kubeplug build` builds it with componentize-qjs;
// `kubeplug test` replays events.yaml into it.
//
// Bindings (wit/): WIT records are objects with camelCase keys, options the value or
// `null`, enums their case names, variants `{ tag, val }`. An exported `result<_, string>`
// is an error when the function throws a string; an imported function returning `result`
// throws its error variant.

import { log } from "kubeplug:plugin/log@0.2.0";
import { counterAdd } from "kubeplug:plugin/metrics@0.2.0";

const CONFIG_MAPS = { group: "", version: "v1", kind: "ConfigMap" };

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
    delivery: { tag: "events" },
    indexes: [],
    reads: [],
    writes: [],
  };
}

function key(meta) {
  return meta.namespace == null ? meta.name : `${meta.namespace}/${meta.name}`;
}

function handleEvents(batch) {
  for (const event of batch) {
    log("info", "event", [
      { key: "change", value: event.change },
      { key: "key", value: key(event.meta) },
    ]);
    counterAdd("events_total", [{ key: "change", value: event.change }], 1);
  }
}

export const handler = {
  init: (_settings) => {},
  describe,
  handleEvents,
  reconcile: () => ({ tag: "done" }),
  mapEvent: () => [],
};
