// __NAME__: a reconciler over ConfigMaps. Each key is reconciled with the object read from
// the cache and comes back every minute, as a controller-runtime reconciler that returns
// `RequeueAfter` does; a deleted object is done.
//
// Edit `describe` to watch other types (and grant their reads in kubeplug.toml), and
// `reconcile` to bring each object to its desired state. `kubeplug build` builds it;
// `kubeplug test` replays events.yaml into it.
//
// Bindings: `plugin.h`, which `kubeplug build` generates from wit/ with wit-bindgen, and the C
// SDK's helpers over them, `kubeplug.h` (compiled in by `kubeplug build`; it defines
// `handle_events`, which reconcile mode never calls, and a `map_event` that maps to no keys:
// define your own when a subscription's keys are computed). Memory, as they define it:
// arguments of exported functions belong to us and are freed here; what we return is malloc'd
// and freed by the bindings once the host has copied it; arguments we pass to imports stay
// ours.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kubeplug.h"

// How long until a key is reconciled again, in milliseconds.
#define RESYNC_MS 60000

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
  ret->delivery.tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_DELIVERY_RECONCILE;
  ret->delivery.val.reconcile = 1;
}

void exports_kubeplug_plugin_handler_reconcile(exports_kubeplug_plugin_handler_gvk_t *resource_type,
                                               plugin_string_t *maybe_namespace,
                                               plugin_string_t *name,
                                               exports_kubeplug_plugin_handler_reconcile_result_t *ret) {
  char key[512];
  if (maybe_namespace != NULL) {
    snprintf(key, sizeof key, "%.*s/%.*s", (int)maybe_namespace->len,
             (const char *)maybe_namespace->ptr, (int)name->len, (const char *)name->ptr);
  } else {
    snprintf(key, sizeof key, "%.*s", (int)name->len, (const char *)name->ptr);
  }
  plugin_string_t cache_key = kp_str(key);
  kubeplug_plugin_cache_option_cached_object_t cached;
  kubeplug_plugin_cache_error_t error;
  if (!kubeplug_plugin_cache_get(resource_type, &cache_key, &cached, &error)) {
    ret->tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_RECONCILE_RESULT_ERROR;
    char message[600];
    snprintf(message, sizeof message, "reading %s: %s", key, kp_error_name(&error));
    plugin_string_dup(&ret->val.error, message);
    kubeplug_plugin_types_error_free(&error);
  } else if (!cached.is_some) {
    kp_log(KP_INFO, "gone: nothing to do", "key", key, NULL);
    ret->tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_RECONCILE_RESULT_DONE;
  } else {
    char *version = kp_text(&cached.val.meta.resource_version);
    kp_log(KP_INFO, "reconciling", "key", key, "resourceVersion", version, NULL);
    free(version);
    kubeplug_plugin_cache_option_cached_object_free(&cached);
    ret->tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_RECONCILE_RESULT_REQUEUE_AFTER;
    ret->val.requeue_after = RESYNC_MS;
  }
  exports_kubeplug_plugin_handler_gvk_free(resource_type);
  if (maybe_namespace != NULL) {
    plugin_string_free(maybe_namespace);
  }
  plugin_string_free(name);
}
