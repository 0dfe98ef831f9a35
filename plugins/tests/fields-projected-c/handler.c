// fields-projected-c: the C port of the fields-projected test guest. Reads three Pod spec
// fields of every event through projections (no object JSON, only the key of the metadata)
// with the C SDK's `kp_field_str`, and counts per batch the events that had all three as
// strings (`complete_total`).

#include <stdlib.h>
#include <string.h>

#include "kubeplug.h"

bool exports_kubeplug_plugin_handler_init(plugin_string_t *settings, plugin_string_t *err) {
  plugin_string_free(settings);
  return true;
}

void exports_kubeplug_plugin_handler_describe(exports_kubeplug_plugin_handler_description_t *ret) {
  memset(ret, 0, sizeof *ret);
  plugin_string_dup(&ret->name, "fields-projected-c");
  plugin_string_dup(&ret->version, "0.1.0");
  exports_kubeplug_plugin_handler_subscription_t *pods = calloc(1, sizeof *pods);
  pods->resource_type = kp_gvk("", "v1", "Pod");
  // No meta-fields: namespace, name, resourceVersion and generation always come.
  pods->enqueue.tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_KEY_MAPPING_OWN_KEY;
  pods->projections.len = 3;
  pods->projections.ptr = malloc(3 * sizeof *pods->projections.ptr);
  pods->projections.ptr[0] = kp_projection("node", "spec.nodeName");
  pods->projections.ptr[1] = kp_projection("policy", "spec.restartPolicy");
  pods->projections.ptr[2] = kp_projection("scheduler", "spec.schedulerName");
  ret->subscriptions.len = 1;
  ret->subscriptions.ptr = pods;
  ret->delivery.tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_DELIVERY_EVENTS;
}

bool exports_kubeplug_plugin_handler_handle_events(exports_kubeplug_plugin_handler_list_event_t *batch,
                                                   plugin_string_t *err) {
  uint64_t complete = 0;
  for (size_t i = 0; i < batch->len; i++) {
    const kubeplug_plugin_types_event_t *event = &batch->ptr[i];
    plugin_string_t node, policy, scheduler;
    if (kp_field_str(event, "node", &node) && kp_field_str(event, "policy", &policy) &&
        kp_field_str(event, "scheduler", &scheduler)) {
      complete++;
    }
  }
  exports_kubeplug_plugin_handler_list_event_free(batch);
  if (!kp_counter_add("complete_total", complete, NULL)) {
    plugin_string_dup(err, "complete_total: refused by the host");
    return false;
  }
  return true;
}
