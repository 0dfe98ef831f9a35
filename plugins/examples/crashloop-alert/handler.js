// crashloop-alert: counts the Pods in CrashLoopBackOff in each namespace, as the gauge
// `crashloop_pods{namespace="..."}`, and logs a warning when a Pod enters CrashLoopBackOff.
//
// A Pod is crash-looping when one of `status.containerStatuses[*].state.waiting.reason` is
// `CrashLoopBackOff`. Events and cache reads carry the container statuses as a projection, so
// the handler parses each small status object and never the whole Pod. The set of
// crash-looping Pods lives in memory, but an instance may be replaced at any time (after a fault), so a new instance rebuilds it from the host's cache
// before its first batch: the gauges never count from zero again, and a Pod already known
// to loop is not announced twice. Pods found looping in the initial list are announced.
//
// Bindings: see plugins/examples/label-audit-js/handler.js.

import { listProjected } from "kubeplug:plugin/cache@0.2.0";
import { log } from "kubeplug:plugin/log@0.2.0";
import { gaugeSet } from "kubeplug:plugin/metrics@0.2.0";
import { field, projection } from "./kubeplug.js";

const PODS = { group: "", version: "v1", kind: "Pod" };
const GAUGE = "crashloop_pods";
const REASON = "CrashLoopBackOff";
/** What the handler reads of a Pod, in its events and from the cache. */
const STATUSES = projection("statuses", "status.containerStatuses[*]");

/** namespace → names of its crash-looping Pods; `null` until rebuilt from the cache. */
let looping = null;

/** The names of the containers whose `statuses` say CrashLoopBackOff. */
function loopingIn(statuses) {
  return statuses
    .filter((status) => status?.state?.waiting?.reason === REASON)
    .map((status) => String(status.name));
}

function namespaceSet(namespace) {
  let pods = looping.get(namespace);
  if (pods === undefined) {
    pods = new Set();
    looping.set(namespace, pods);
  }
  return pods;
}

function rebuild() {
  looping = new Map();
  for (const pod of listProjected(PODS, null, null, [STATUSES])) {
    if (loopingIn(field(pod, "statuses")).length > 0) {
      namespaceSet(pod.meta.namespace ?? "").add(pod.meta.name);
    }
  }
  return new Set(looping.keys());
}

function init(settings) {
  let config;
  try {
    config = JSON.parse(settings);
  } catch (e) {
    throw `invalid settings: ${e.message}`;
  }
  if (config === null || typeof config !== "object" || Object.keys(config).length > 0) {
    throw "settings: crashloop-alert takes none; expected {}";
  }
}

function describe() {
  return {
    name: "crashloop-alert",
    version: "0.1.0",
    subscriptions: [
      {
        resourceType: PODS,
        namespace: null,
        labelSelector: null,
        fieldSelector: null,
        resyncPeriodMs: null,
        // The key is enough: the container statuses come as a projection.
        metaFields: { uid: false, labels: false, ownerReferences: false, deletionTimestamp: false },
        wantsObjectJson: false,
        wantsOldJson: false,
        enqueue: { tag: "own-key" },
        projections: [STATUSES],
      },
    ],
    delivery: { tag: "events" },
    indexes: [],
    reads: [],
    writes: [],
  };
}

/** Applies one event to `looping`; returns the Pod's namespace. */
function onEvent(event) {
  const { meta } = event;
  const namespace = meta.namespace ?? "";
  const key = `${namespace}/${meta.name}`;
  const containers = event.change === "deleted" ? [] : loopingIn(field(event, "statuses"));
  const pods = namespaceSet(namespace);
  if (containers.length === 0) {
    pods.delete(meta.name);
  } else if (!pods.has(meta.name) || event.inInitialList) {
    pods.add(meta.name);
    log("warn", "pod entered CrashLoopBackOff", [
      { key: "key", value: key },
      { key: "containers", value: containers.join(", ") },
    ]);
  }
  return namespace;
}

function handleEvents(batch) {
  const touched = looping === null ? rebuild() : new Set();
  for (const event of batch) {
    touched.add(onEvent(event));
  }
  for (const namespace of touched) {
    try {
      gaugeSet(GAUGE, [{ key: "namespace", value: namespace }], looping.get(namespace).size);
    } catch (thrown) {
      // Too many namespaces for the host's series limit: keep alerting, say why a gauge is
      // missing, and do not fail (and so retry) the batch for it.
      const error = thrown?.payload ?? thrown;
      if (typeof error?.tag !== "string") {
        throw thrown;
      }
      log("warn", "cannot set a gauge", [
        { key: "namespace", value: namespace },
        { key: "why", value: error.val },
      ]);
    }
  }
}

export const handler = {
  init,
  describe,
  handleEvents,
  // Events mode only: the host never calls these.
  reconcile: () => ({ tag: "done" }),
  mapEvent: () => [],
};
