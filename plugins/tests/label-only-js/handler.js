// label-only-js: the JavaScript port of the label-only test guest. Reads the label `app` of
// every event from typed metadata (no JSON) and counts the `web` ones; nothing else. With
// the settings {"stamp_label": "...", "report_every": N} it also times the stamped updates
// and reports percentiles through metrics, as the Rust guests' bench-latency probe does.
//
// The clock: QuickJS's `Date.now()` has whole milliseconds and its `performance.timeOrigin`
// is 0, so the probe pins `performance.now()` (sub-millisecond, from process start) to the
// wall clock at the instant `Date.now()` ticks, then reads `origin + performance.now()`.

import { counterAdd, gaugeSet } from "kubeplug:plugin/metrics@0.2.0";

const PODS = { group: "", version: "v1", kind: "Pod" };

let web = 0;
/** `{ stampLabel, reportEvery, samples, origin }` when timing, else null. */
let probe = null;

/** The wall-clock time, in milliseconds, at which `performance.now()` was 0. */
function wallClockOrigin() {
  const start = Date.now();
  let now = start;
  while (now === start) {
    now = Date.now();
  }
  return now - performance.now();
}

function init(settings) {
  const config = JSON.parse(settings);
  if (typeof config.stamp_label === "string") {
    if (!Number.isInteger(config.report_every) || config.report_every <= 0) {
      throw "settings: report_every must be a positive integer";
    }
    probe = {
      stampLabel: config.stamp_label,
      reportEvery: config.report_every,
      samples: [],
      origin: wallClockOrigin(),
    };
  }
}

function describe() {
  return {
    name: "label-only-js",
    version: "0.1.0",
    subscriptions: [
      {
        resourceType: PODS,
        namespace: null,
        labelSelector: null,
        fieldSelector: null,
        resyncPeriodMs: null,
        metaFields: { uid: false, labels: true, ownerReferences: false, deletionTimestamp: false },
        wantsObjectJson: false,
        wantsOldJson: false,
        enqueue: { tag: "own-key" },
        projections: [],
      },
    ],
    delivery: { tag: "events" },
    indexes: [],
    reads: [],
    writes: [],
  };
}

function label(meta, key) {
  for (const l of meta.labels) {
    if (l.key === key) {
      return l.value;
    }
  }
  return undefined;
}

function observe(event) {
  // Nanosecond stamps exceed a double's 53 bits: milliseconds keep the difference exact enough.
  const stamp = Number(label(event.meta, probe.stampLabel)) / 1e6;
  if (!(stamp > 0)) {
    return;
  }
  probe.samples.push((probe.origin + performance.now() - stamp) * 1e6);
  if (probe.samples.length >= probe.reportEvery) {
    const sorted = probe.samples.sort((a, b) => a - b);
    const last = sorted.length - 1;
    gaugeSet("latency_p50_ns", [], sorted[Math.floor((last * 50) / 100)]);
    gaugeSet("latency_p99_ns", [], sorted[Math.floor((last * 99) / 100)]);
    counterAdd("latency_reports_total", [], 1);
    probe.samples = [];
  }
}

function handleEvents(batch) {
  for (const event of batch) {
    if (label(event.meta, "app") === "web") {
      web += 1;
    }
    if (probe !== null) {
      observe(event);
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
