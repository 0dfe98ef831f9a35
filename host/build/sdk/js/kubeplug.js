// kubeplug's JavaScript SDK: helpers over the host's imports and the handler's records.
// `kubeplug build` stages this file beside the plugin's sources, so a handler imports it as
// "./kubeplug.js"; `kubeplug.d.ts` (which `kubeplug new` writes into the project) types it.
//
// Bindings underneath (componentize-qjs): WIT records are objects with camelCase keys,
// options the value or `null`, enums their case names, variants `{ tag, val }`; an import
// returning `result` throws its error variant.

import { log as hostLog } from "kubeplug:plugin/log@0.2.0";
import { counterAdd as hostCounterAdd, gaugeSet as hostGaugeSet } from "kubeplug:plugin/metrics@0.2.0";

/** A resource type. */
export function gvk(group, version, kind) {
  return { group, version, kind };
}

/** An object's key: `namespace/name`, or `name` for a cluster-scoped object. */
export function key(meta) {
  return meta.namespace == null ? meta.name : `${meta.namespace}/${meta.name}`;
}

/** The value of the label `name`, or null. */
export function label(meta, name) {
  const found = meta.labels.find((l) => l.key === name);
  return found === undefined ? null : found.value;
}

function pairs(fields) {
  return Object.entries(fields).map(([key, value]) => ({ key, value: String(value) }));
}

/** A log record with fields from an object: log("info", "reconciling", { key }). */
export function log(level, message, fields = {}) {
  hostLog(level, message, pairs(fields));
}

export const debug = (message, fields) => log("debug", message, fields);
export const info = (message, fields) => log("info", message, fields);
export const warn = (message, fields) => log("warn", message, fields);
export const error = (message, fields) => log("error", message, fields);

/** Adds `delta` (default 1) to a counter with labels from an object. */
export function counterAdd(name, labels = {}, delta = 1) {
  hostCounterAdd(name, pairs(labels), delta);
}

/** Sets a gauge with labels from an object. */
export function gaugeSet(name, value, labels = {}) {
  hostGaugeSet(name, pairs(labels), value);
}

const ALL_META = { uid: true, labels: true, ownerReferences: true, deletionTimestamp: true };

/** A subscription to `resourceType`; `options` overrides any field (camelCase). */
export function subscription(resourceType, options = {}) {
  return {
    resourceType,
    namespace: null,
    labelSelector: null,
    fieldSelector: null,
    resyncPeriodMs: null,
    metaFields: ALL_META,
    wantsObjectJson: false,
    wantsOldJson: false,
    enqueue: { tag: "own-key" },
    projections: [],
    ...options,
  };
}

/**
 * A field path whose values the host reads out of each object for the handler, read back by
 * `name` with `field`: subscription(pods, { projections: [projection("image", "spec.containers[*].image")] }).
 */
export function projection(name, path) {
  return { name, path };
}

/**
 * A type the handler reads through the cache, for `description({ reads })`: metadata only
 * unless `wantsObjectJson` (cache answers then carry each object's JSON, and
 * `getProjected`/`listProjected` may read it).
 */
export function read(resourceType, { wantsObjectJson = false } = {}) {
  return { resourceType, wantsObjectJson };
}

/** A projected value as JavaScript: objects and arrays parsed, integers as numbers while exact. */
export function value(field) {
  switch (field.tag) {
    case "null":
      return null;
    case "integer": {
      const n = Number(field.val);
      return Number.isSafeInteger(n) ? n : field.val;
    }
    case "json":
      return JSON.parse(field.val);
    default:
      return field.val;
  }
}

function valuesOf(projected, name) {
  const found = projected.find((p) => p.name === name);
  return found === undefined ? [] : found.values.map(value);
}

/**
 * The values projection `name` selected in the object, in document order: an event's, or
 * one `getProjected` or `listProjected` (from `kubeplug:plugin/cache`) returned.
 */
export function field(source, name) {
  return valuesOf(source.projected, name);
}

/** The same in the previous state (`updated` events; empty otherwise). */
export function oldField(event, name) {
  return valuesOf(event.oldProjected, name);
}

/**
 * What `describe` returns: events mode, or reconcile mode with `workers` workers.
 * `indexes`, `reads` and `writes` default to none.
 */
export function description({ name, version, subscriptions, workers = null, indexes = [], reads = [], writes = [] }) {
  const delivery = workers == null ? { tag: "events" } : { tag: "reconcile", val: workers };
  return { name, version, subscriptions, delivery, indexes, reads, writes };
}

/**
 * The settings document (what `init` gets) as an object, over `defaults`. Throws the
 * message `init` refuses the load with when it is not a JSON object.
 */
export function settings(json, defaults = {}) {
  let parsed;
  try {
    parsed = JSON.parse(json);
  } catch (e) {
    throw `invalid settings: ${e.message}`;
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    throw "invalid settings: expected an object";
  }
  return { ...defaults, ...parsed };
}

/** Reconcile results. */
export const done = () => ({ tag: "done" });
export const requeueAfter = (ms) => ({ tag: "requeue-after", val: ms });
export const failed = (message) => ({ tag: "error", val: message });

/** The `error` variant an import threw (`{ tag, val }`); anything else is thrown on. */
export function hostError(thrown) {
  const found = thrown?.payload ?? thrown;
  if (typeof found?.tag !== "string") {
    throw thrown;
  }
  return found;
}

/**
 * The `handler` export from the functions a plugin defines: `describe` always; `init`,
 * `handleEvents`, `reconcile` and `mapEvent` default to doing nothing.
 */
export function handler(functions) {
  return {
    init: () => {},
    handleEvents: () => {},
    reconcile: done,
    mapEvent: () => [],
    ...functions,
  };
}
