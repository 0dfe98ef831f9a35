// projected-reconciler-js: the JavaScript port of the projected-reconciler test guest. Each
// reconcile reads its key's Pod with `getProjected` and the Pods of its namespace with
// `listProjected`, five fields each, through the SDK's `field`, and counts what it read in
// `reads_total{key, got, listed}`, rendered as the Rust original renders it:
// `name=text:<s>`, `integer:<n>`, `boolean:<b>`, `null`, `absent` or `other`, joined by
// spaces; `none` for no Pod; listed Pods as `<key>: <fields>` joined by `; `.

import { getProjected, listProjected } from "kubeplug:plugin/cache@0.2.0";
import {
  counterAdd,
  description,
  done,
  failed,
  field,
  gvk,
  hostError,
  key,
  handler as plugin,
  projection,
  read,
  subscription,
} from "./kubeplug.js";

const PODS = gvk("", "v1", "Pod");
const NONE = { uid: false, labels: false, ownerReferences: false, deletionTimestamp: false };

/** The projections both reads ask for. */
const FIELDS = [
  projection("node", "spec.nodeName"),
  projection("policy", "spec.restartPolicy"),
  projection("priority", "spec.priority"),
  projection("links", "spec.enableServiceLinks"),
  projection("overhead", "spec.overhead"),
];

/** The first value projection `name` selected in `object`, typed. */
function value(object, name) {
  const values = field(object, name);
  if (values.length === 0) {
    return "absent";
  }
  const first = values[0];
  if (typeof first === "string") {
    return `text:${first}`;
  }
  if (Number.isInteger(first) || typeof first === "bigint") {
    return `integer:${first}`;
  }
  if (typeof first === "boolean") {
    return `boolean:${first}`;
  }
  return first === null ? "null" : "other";
}

function render(object) {
  return FIELDS.map(({ name }) => `${name}=${value(object, name)}`).join(" ");
}

/** Runs an import, turning its error into a message naming the call. */
function call(what, thunk) {
  try {
    return thunk();
  } catch (thrown) {
    const error = hostError(thrown);
    throw `${what}: ${error.tag}(${error.val})`;
  }
}

export const handler = plugin({
  describe: () =>
    description({
      name: "projected-reconciler-js",
      version: "0.1.0",
      subscriptions: [subscription(PODS, { metaFields: NONE })],
      workers: 1,
      // Projected reads need the Pods' bodies; the subscription alone would keep metadata.
      reads: [read(PODS, { wantsObjectJson: true })],
    }),
  reconcile(resourceType, namespace, name) {
    const own = namespace == null ? name : `${namespace}/${name}`;
    try {
      const got = call(`get-projected ${own}`, () => getProjected(resourceType, own, FIELDS));
      const listed = call(`list-projected ${own}`, () =>
        listProjected(resourceType, namespace, null, FIELDS),
      );
      const labels = {
        key: own,
        got: got == null ? "none" : render(got),
        listed: listed.map((object) => `${key(object.meta)}: ${render(object)}`).join("; "),
      };
      call("reads_total", () => counterAdd("reads_total", labels));
    } catch (message) {
      return failed(String(message));
    }
    return done();
  },
});
