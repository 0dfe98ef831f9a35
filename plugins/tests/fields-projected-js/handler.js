// fields-projected-js: the JavaScript port of the fields-projected test guest. Reads three
// Pod spec fields of every event through projections (no object JSON, only the key of the
// metadata) with the SDK's `field`, and counts per batch the events that had all three as
// strings (`complete_total`).

import { counterAdd, description, field, gvk, handler as plugin, projection, subscription } from "./kubeplug.js";

const NONE = { uid: false, labels: false, ownerReferences: false, deletionTimestamp: false };

export const handler = plugin({
  describe: () =>
    description({
      name: "fields-projected-js",
      version: "0.1.0",
      subscriptions: [
        subscription(gvk("", "v1", "Pod"), {
          metaFields: NONE,
          projections: [
            projection("node", "spec.nodeName"),
            projection("policy", "spec.restartPolicy"),
            projection("scheduler", "spec.schedulerName"),
          ],
        }),
      ],
    }),
  handleEvents(batch) {
    let complete = 0;
    for (const event of batch) {
      const fields = [field(event, "node")[0], field(event, "policy")[0], field(event, "scheduler")[0]];
      if (fields.every((value) => typeof value === "string")) {
        complete += 1;
      }
    }
    counterAdd("complete_total", {}, complete);
  },
});
