// label-audit-js: flags Deployments and Pods that lack required labels (the JavaScript port
// of plugins/examples/label-audit).
//
// For each object missing one of the labels, it logs a warning and records a Warning Event
// (`MissingLabels`) on the object. It reads typed metadata only: no JSON parsing of objects.
// Settings: {"required_labels": ["app.kubernetes.io/name"]} (the default).
//
// Bindings (componentize-qjs): WIT records are objects with camelCase keys, options the
// value or none (`null`, or `undefined`: compare with `== null`), enums their case names,
// variants `{ tag, val }`. An exported `result<_, string>` is an error when the function
// throws a string; an imported function returning `result` throws its error variant. The
// SDK (`./kubeplug.js`, staged by the build) reads the settings and those errors.

import { recordEvent } from "kubeplug:plugin/cluster@0.2.0";
import { log } from "kubeplug:plugin/log@0.2.0";
import { hostError, settings, subscription } from "./kubeplug.js";

const DEPLOYMENTS = { group: "apps", version: "v1", kind: "Deployment" };
const PODS = { group: "", version: "v1", kind: "Pod" };

/** The labels every object must carry, from the settings. */
let required = [];

function init(json) {
  const config = settings(json);
  const labels = "required_labels" in config ? config.required_labels : ["app.kubernetes.io/name"];
  if (!Array.isArray(labels) || !labels.every((label) => typeof label === "string")) {
    throw "invalid settings: required_labels must be a list of strings";
  }
  if (labels.length === 0) {
    throw "settings: required_labels is empty; nothing to audit";
  }
  required = labels;
}

/** A subscription to `resourceType`'s labels. */
function labelsOf(resourceType) {
  // Only the labels: namespace and name always come, and the rest would cost every event.
  const metaFields = { uid: false, labels: true, ownerReferences: false, deletionTimestamp: false };
  return subscription(resourceType, { metaFields });
}

function describe() {
  return {
    name: "label-audit-js",
    version: "0.1.0",
    subscriptions: [labelsOf(DEPLOYMENTS), labelsOf(PODS)],
    delivery: { tag: "events" },
    indexes: [],
    reads: [],
    writes: [DEPLOYMENTS, PODS].map((resourceType) => ({ resourceType, verbs: ["record-event"] })),
  };
}

/** `not-permitted` → `NotPermitted`, as the Rust port prints error cases. */
function caseName(tag) {
  return tag.replace(/(^|-)(.)/g, (_, __, c) => c.toUpperCase());
}

function onEvent(event) {
  if (event.change === "deleted") {
    return;
  }
  const { meta } = event;
  const present = new Set(meta.labels.map((label) => label.key));
  const missing = required.filter((label) => !present.has(label));
  if (missing.length === 0) {
    return;
  }
  const resourceType = event.subscription === 0 ? DEPLOYMENTS : PODS;
  const key = meta.namespace == null ? meta.name : `${meta.namespace}/${meta.name}`;
  const missingText = missing.join(", ");
  log("warn", "object lacks required labels", [
    { key: "kind", value: resourceType.kind },
    { key: "key", value: key },
    { key: "missing", value: missingText },
  ]);
  const regarding = { resourceType, namespace: meta.namespace, name: meta.name };
  try {
    recordEvent(regarding, "warning", "MissingLabels", `missing required labels: ${missingText}`);
  } catch (thrown) {
    const error = hostError(thrown);
    if (error.tag === "not-permitted") {
      // Without the grant the audit still logs; the operator sees why no Event appears.
      log("warn", "cannot record an Event", [{ key: "why", value: error.val }]);
      return;
    }
    throw `recording an Event on ${key}: ${caseName(error.tag)}(${JSON.stringify(error.val)})`;
  }
}

/** Stops at the first failure, like the Rust SDK: the host retries the whole batch. */
function handleEvents(batch) {
  batch.forEach(onEvent);
}

export const handler = {
  init,
  describe,
  handleEvents,
  // Events mode only: the host never calls these; answer like the Rust SDK's defaults.
  reconcile: () => ({ tag: "done" }),
  mapEvent: () => [],
};
