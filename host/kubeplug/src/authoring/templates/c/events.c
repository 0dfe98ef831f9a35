// __NAME__: logs every ConfigMap event it is handed and counts them by change, in the metric
// `events_total`.
//
// Edit `describe` to watch other types (and grant their reads in kubeplug.toml), and
// `on_event` to act on them. `kubeplug build` builds it; `kubeplug test` replays events.yaml
// into it.
//
// Bindings: `plugin.h`, which `kubeplug build` generates from wit/ with wit-bindgen, and the C
// SDK's helpers over them, `kubeplug.h` (compiled in by `kubeplug build`; it defines the
// exports events mode never calls, `reconcile` and `map_event`). Memory, as they define it:
// arguments of exported functions belong to us and are freed here; what we return is malloc'd
// and freed by the bindings once the host has copied it; arguments we pass to imports stay
// ours.

#include <stdlib.h>
#include <string.h>

#include "kubeplug.h"

bool exports_kubeplug_plugin_handler_init(plugin_string_t *settings, plugin_string_t *err) {
  plugin_string_free(settings);
  return true;
}

void exports_kubeplug_plugin_handler_describe(exports_kubeplug_plugin_handler_description_t *ret) {
  memset(ret, 0, sizeof *ret);
  plugin_string_dup(&ret->name, "__NAME__");
  plugin_string_dup(&ret->version, "0.1.0");
  ret->subscriptions.len = 1;
  ret->subscriptions.ptr = calloc(1, sizeof *ret->subscriptions.ptr);
  exports_kubeplug_plugin_handler_subscription_t *config_maps = &ret->subscriptions.ptr[0];
  config_maps->resource_type = kp_gvk("", "v1", "ConfigMap");
  config_maps->meta_fields = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_META_FIELDS_UID |
                             EXPORTS_KUBEPLUG_PLUGIN_HANDLER_META_FIELDS_LABELS |
                             EXPORTS_KUBEPLUG_PLUGIN_HANDLER_META_FIELDS_OWNER_REFERENCES |
                             EXPORTS_KUBEPLUG_PLUGIN_HANDLER_META_FIELDS_DELETION_TIMESTAMP;
  config_maps->enqueue.tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_KEY_MAPPING_OWN_KEY;
  ret->delivery.tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_DELIVERY_EVENTS;
}

static const char *change_name(kubeplug_plugin_types_event_type_t change) {
  switch (change) {
  case KUBEPLUG_PLUGIN_TYPES_EVENT_TYPE_ADDED: return "added";
  case KUBEPLUG_PLUGIN_TYPES_EVENT_TYPE_UPDATED: return "updated";
  default: return "deleted";
  }
}

// Logs and counts one event; false (and `err` set) when counting failed.
static bool on_event(const kubeplug_plugin_types_event_t *event, plugin_string_t *err) {
  char *key = kp_key(&event->meta);
  const char *change = change_name(event->change);
  kp_log(KP_INFO, "event", "change", change, "key", key, NULL);
  free(key);
  if (!kp_counter_add("events_total", 1, "change", change, NULL)) {
    plugin_string_dup(err, "counting the event failed");
    return false;
  }
  return true;
}

bool exports_kubeplug_plugin_handler_handle_events(exports_kubeplug_plugin_handler_list_event_t *batch,
                                                   plugin_string_t *err) {
  bool ok = true;
  // Stops at the first failure: the host retries the whole batch.
  for (size_t i = 0; ok && i < batch->len; i++) {
    ok = on_event(&batch->ptr[i], err);
  }
  exports_kubeplug_plugin_handler_list_event_free(batch);
  return ok;
}
