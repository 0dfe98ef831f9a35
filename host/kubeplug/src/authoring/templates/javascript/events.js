// __NAME__: logs every ConfigMap event it is handed and counts them by change, in the
// metric `events_total`.
//
// Edit `describe` to watch other types (and grant their reads in kubeplug.toml), and
// `handleEvents` to act on them. `kubeplug build` builds it with componentize-qjs, with the
// SDK staged beside it as ./kubeplug.js (its types: kubeplug.d.ts); `kubeplug test` replays
// events.yaml into it.

import {
  counterAdd,
  description,
  gvk,
  handler as plugin,
  info,
  key,
  settings,
  subscription,
} from "./kubeplug.js";

const CONFIG_MAPS = gvk("", "v1", "ConfigMap");

export const handler = plugin({
  // The settings: a JSON object (anything else refuses the load); none are read yet.
  init(json) {
    settings(json);
  },

  describe: () =>
    description({ name: "__NAME__", version: "0.1.0", subscriptions: [subscription(CONFIG_MAPS)] }),

  handleEvents(batch) {
    for (const event of batch) {
      info("event", { change: event.change, key: key(event.meta) });
      counterAdd("events_total", { change: event.change });
    }
  },
});
