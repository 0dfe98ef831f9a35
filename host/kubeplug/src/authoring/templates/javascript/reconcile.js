// __NAME__: a reconciler over ConfigMaps. Each key is reconciled with the object read from
// the cache and comes back every minute, as a controller-runtime reconciler that returns
// `RequeueAfter` does; a deleted object is done.
//
// Edit `describe` to watch other types (and grant their reads in kubeplug.toml), and
// `reconcile` to bring each object to its desired state. `kubeplug build` builds it with
// componentize-qjs, with the SDK staged beside it as ./kubeplug.js (its types:
// kubeplug.d.ts); `kubeplug test` replays events.yaml into it.

import { get } from "kubeplug:plugin/cache@0.2.0";
import {
  description,
  done,
  failed,
  gvk,
  handler as plugin,
  hostError,
  info,
  requeueAfter,
  subscription,
} from "./kubeplug.js";

const CONFIG_MAPS = gvk("", "v1", "ConfigMap");

/** How long until a key is reconciled again, in milliseconds. */
const RESYNC_MS = 60000;

export const handler = plugin({
  describe: () =>
    description({
      name: "__NAME__",
      version: "0.1.0",
      subscriptions: [subscription(CONFIG_MAPS)],
      workers: 1,
    }),

  reconcile(resourceType, namespace, name) {
    const key = namespace == null ? name : `${namespace}/${name}`;
    let object;
    try {
      object = get(resourceType, key);
    } catch (thrown) {
      return failed(`reading ${key}: ${hostError(thrown).tag}`);
    }
    if (object == null) {
      info("gone: nothing to do", { key });
      return done();
    }
    info("reconciling", { key, resourceVersion: object.meta.resourceVersion });
    return requeueAfter(RESYNC_MS);
  },
});
