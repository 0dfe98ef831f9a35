// label-audit-c: flags Deployments and Pods that lack required labels (the C port of
// plugins/examples/label-audit).
//
// For each object missing one of the labels, it logs a warning and records a Warning Event
// (`MissingLabels`) on the object. It reads typed metadata only: no JSON parsing of objects.
// Settings: {"required_labels": ["app.kubernetes.io/name"]} (the default), read with the C
// SDK's settings reader.
//
// Memory, as wit-bindgen's C bindings define it: arguments of exported functions belong to
// us and are freed here; what we return is malloc'd and freed by the bindings after the host
// has copied it; arguments we pass to imports stay ours.

#include <stdlib.h>
#include <string.h>

#include "kubeplug.h"

// The labels every object must carry, from the settings.
static kp_strings_t required;

static kubeplug_plugin_types_gvk_t deployments(void) {
  return kp_gvk("apps", "v1", "Deployment");
}

static kubeplug_plugin_types_gvk_t pods(void) { return kp_gvk("", "v1", "Pod"); }

bool exports_kubeplug_plugin_handler_init(plugin_string_t *settings, plugin_string_t *err) {
  kp_strings_free(&required);
  kp_setting_t fields[] = {{.key = "required_labels", .kind = KP_STRINGS, .out = &required}};
  char *error = kp_settings_read(settings, fields, 1);
  plugin_string_free(settings);
  if (error == NULL && !fields[0].present) {
    required.items = malloc(sizeof *required.items);
    required.items[0] = strdup("app.kubernetes.io/name");
    required.len = 1;
  }
  if (error == NULL && required.len == 0) {
    error = strdup("settings: required_labels is empty; nothing to audit");
  }
  if (error != NULL) {
    plugin_string_set(err, error);
    return false;
  }
  return true;
}

static exports_kubeplug_plugin_handler_subscription_t subscription(
    kubeplug_plugin_types_gvk_t resource_type) {
  exports_kubeplug_plugin_handler_subscription_t s;
  memset(&s, 0, sizeof s);
  s.resource_type = resource_type;
  // Only the labels: namespace and name always come, and the rest would cost every event.
  s.meta_fields = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_META_FIELDS_LABELS;
  s.enqueue.tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_KEY_MAPPING_OWN_KEY;
  return s;
}

static exports_kubeplug_plugin_handler_write_request_t record_event_on(
    kubeplug_plugin_types_gvk_t resource_type) {
  exports_kubeplug_plugin_handler_write_request_t w;
  w.resource_type = resource_type;
  w.verbs.len = 1;
  w.verbs.ptr = malloc(sizeof *w.verbs.ptr);
  w.verbs.ptr[0] = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_WRITE_VERB_RECORD_EVENT;
  return w;
}

void exports_kubeplug_plugin_handler_describe(exports_kubeplug_plugin_handler_description_t *ret) {
  memset(ret, 0, sizeof *ret);
  plugin_string_dup(&ret->name, "label-audit-c");
  plugin_string_dup(&ret->version, "0.1.0");
  ret->subscriptions.len = 2;
  ret->subscriptions.ptr = malloc(2 * sizeof *ret->subscriptions.ptr);
  ret->subscriptions.ptr[0] = subscription(deployments());
  ret->subscriptions.ptr[1] = subscription(pods());
  ret->delivery.tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_DELIVERY_EVENTS;
  ret->writes.len = 2;
  ret->writes.ptr = malloc(2 * sizeof *ret->writes.ptr);
  ret->writes.ptr[0] = record_event_on(deployments());
  ret->writes.ptr[1] = record_event_on(pods());
}

// The required labels `meta` lacks, comma-separated and malloc'd; NULL when none.
static char *missing_labels(const kubeplug_plugin_types_object_meta_t *meta) {
  char *missing = NULL;
  for (size_t i = 0; i < required.len; i++) {
    if (kp_label(meta, required.items[i]) == NULL) {
      char *more = missing == NULL ? strdup(required.items[i])
                                   : kp_format("%s, %s", missing, required.items[i]);
      free(missing);
      missing = more;
    }
  }
  return missing;
}

// Audits one event; false (and `err` set) when recording the Event failed for a reason
// other than a missing grant.
static bool on_event(const kubeplug_plugin_types_event_t *event, plugin_string_t *err) {
  if (event->change == KUBEPLUG_PLUGIN_TYPES_EVENT_TYPE_DELETED) {
    return true;
  }
  const kubeplug_plugin_types_object_meta_t *meta = &event->meta;
  char *missing = missing_labels(meta);
  if (missing == NULL) {
    return true;
  }
  kubeplug_plugin_cluster_object_ref_t regarding;
  regarding.resource_type = event->subscription == 0 ? deployments() : pods();
  regarding.namespace_ = meta->namespace_;
  regarding.name = meta->name;
  char *key = kp_key(meta);
  char *kind = kp_text(&regarding.resource_type.kind);
  kp_log(KP_WARN, "object lacks required labels", "kind", kind, "key", key, "missing", missing,
         NULL);

  char *note = kp_format("missing required labels: %s", missing);
  plugin_string_t reason = kp_str("MissingLabels"), message = kp_str(note);
  kubeplug_plugin_types_error_t error;
  bool ok = kubeplug_plugin_cluster_record_event(
      &regarding, KUBEPLUG_PLUGIN_CLUSTER_EVENT_SEVERITY_WARNING, &reason, &message, &error);
  if (!ok) {
    char *why = kp_text(kp_error_message(&error));
    if (error.tag == KUBEPLUG_PLUGIN_TYPES_ERROR_NOT_PERMITTED) {
      // Without the grant the audit still logs; the operator sees why no Event appears.
      kp_log(KP_WARN, "cannot record an Event", "why", why, NULL);
      ok = true;
    } else {
      char *text = kp_format("recording an Event on %s: %s(\"%s\")", key, kp_error_name(&error), why);
      plugin_string_set(err, text);
    }
    free(why);
    kubeplug_plugin_types_error_free(&error);
  }
  kubeplug_plugin_types_gvk_free(&regarding.resource_type);
  free(note);
  free(kind);
  free(key);
  free(missing);
  return ok;
}

bool exports_kubeplug_plugin_handler_handle_events(exports_kubeplug_plugin_handler_list_event_t *batch,
                                                   plugin_string_t *err) {
  bool ok = true;
  // Stops at the first failure, like the Rust SDK: the host retries the whole batch.
  for (size_t i = 0; ok && i < batch->len; i++) {
    ok = on_event(&batch->ptr[i], err);
  }
  exports_kubeplug_plugin_handler_list_event_free(batch);
  return ok;
}
