// label-audit-c: flags Deployments and Pods that lack required labels (the C port of
// plugins/examples/label-audit).
//
// For each object missing one of the labels, it logs a warning and records a Warning Event
// (`MissingLabels`) on the object. It reads typed metadata only: no JSON parsing of objects.
// Settings: {"required_labels": ["app.kubernetes.io/name"]} (the default).
//
// Memory, as wit-bindgen's C bindings define it: arguments of exported functions belong to
// us and are freed here; what we return is malloc'd and freed by the bindings after the host
// has copied it; arguments we pass to imports stay ours.

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin.h"
#include "settings.h"

typedef kubeplug_plugin_types_gvk_t gvk_t;
typedef kubeplug_plugin_types_event_t event_t;
typedef kubeplug_plugin_types_error_t host_error_t;

// The labels every object must carry, from the settings.
static struct string_list required;

static gvk_t gvk(const char *group, const char *version, const char *kind) {
  gvk_t g;
  plugin_string_dup(&g.group, group);
  plugin_string_dup(&g.version, version);
  plugin_string_dup(&g.kind, kind);
  return g;
}

static gvk_t deployments(void) { return gvk("apps", "v1", "Deployment"); }

static gvk_t pods(void) { return gvk("", "v1", "Pod"); }

// A malloc'd, printf-formatted component string.
static plugin_string_t format(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  int len = vsnprintf(NULL, 0, fmt, args);
  va_end(args);
  plugin_string_t s = {malloc(len + 1), len};
  va_start(args, fmt);
  vsnprintf((char *)s.ptr, len + 1, fmt, args);
  va_end(args);
  return s;
}

bool exports_kubeplug_plugin_handler_init(plugin_string_t *settings, plugin_string_t *err) {
  string_list_free(&required);
  const char *default_label = "app.kubernetes.io/name";
  char *error = settings_required_labels((const char *)settings->ptr, settings->len,
                                         default_label, &required);
  plugin_string_free(settings);
  if (error == NULL && required.len == 0) {
    error = strdup("settings: required_labels is empty; nothing to audit");
  }
  if (error != NULL) {
    plugin_string_set(err, error);
    return false;
  }
  return true;
}

static exports_kubeplug_plugin_handler_subscription_t subscription(gvk_t resource_type) {
  exports_kubeplug_plugin_handler_subscription_t s;
  memset(&s, 0, sizeof s);
  s.resource_type = resource_type;
  // Only the labels: namespace and name always come, and the rest would cost every event.
  s.meta_fields = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_META_FIELDS_LABELS;
  s.enqueue.tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_KEY_MAPPING_OWN_KEY;
  return s;
}

static exports_kubeplug_plugin_handler_write_request_t record_event_on(gvk_t resource_type) {
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

static bool has_label(const kubeplug_plugin_types_object_meta_t *meta, const char *key) {
  size_t key_len = strlen(key);
  for (size_t i = 0; i < meta->labels.len; i++) {
    const plugin_string_t *k = &meta->labels.ptr[i].key;
    if (k->len == key_len && memcmp(k->ptr, key, key_len) == 0) {
      return true;
    }
  }
  return false;
}

static void log_warn(const char *message, const kubeplug_plugin_log_label_t *fields,
                     size_t count) {
  plugin_string_t text;
  plugin_string_set(&text, message);
  kubeplug_plugin_log_list_label_t list = {(kubeplug_plugin_log_label_t *)fields, count};
  kubeplug_plugin_log_log(KUBEPLUG_PLUGIN_LOG_LEVEL_WARN, &text, &list);
}

static kubeplug_plugin_log_label_t field(const char *key, plugin_string_t value) {
  kubeplug_plugin_log_label_t f;
  plugin_string_set(&f.key, key);
  f.value = value;
  return f;
}

// The name of an error's case, as the Rust port prints it.
static const char *error_name(const host_error_t *e) {
  switch (e->tag) {
  case KUBEPLUG_PLUGIN_TYPES_ERROR_NOT_FOUND: return "NotFound";
  case KUBEPLUG_PLUGIN_TYPES_ERROR_NOT_PERMITTED: return "NotPermitted";
  case KUBEPLUG_PLUGIN_TYPES_ERROR_INVALID_INPUT: return "InvalidInput";
  case KUBEPLUG_PLUGIN_TYPES_ERROR_CONFLICT: return "Conflict";
  default: return "Unavailable";
  }
}

// Every case of `error` carries one string, at the same place.
static const plugin_string_t *error_message(const host_error_t *e) { return &e->val.not_found; }

// Audits one event; false (and `err` set) when recording the Event failed for a reason
// other than a missing grant.
static bool on_event(const event_t *event, plugin_string_t *err) {
  if (event->change == KUBEPLUG_PLUGIN_TYPES_EVENT_TYPE_DELETED) {
    return true;
  }
  const kubeplug_plugin_types_object_meta_t *meta = &event->meta;
  size_t missing_len = 0;
  for (size_t i = 0; i < required.len; i++) {
    if (!has_label(meta, required.items[i])) {
      missing_len += strlen(required.items[i]) + 2;
    }
  }
  if (missing_len == 0) {
    return true;
  }
  char *missing = calloc(missing_len + 1, 1);
  for (size_t i = 0; i < required.len; i++) {
    if (!has_label(meta, required.items[i])) {
      if (missing[0] != '\0') {
        strcat(missing, ", ");
      }
      strcat(missing, required.items[i]);
    }
  }
  kubeplug_plugin_cluster_object_ref_t regarding;
  regarding.resource_type = event->subscription == 0 ? deployments() : pods();
  regarding.namespace_ = meta->namespace_;
  regarding.name = meta->name;
  plugin_string_t key =
      meta->namespace_.is_some
          ? format("%.*s/%.*s", (int)meta->namespace_.val.len, meta->namespace_.val.ptr,
                   (int)meta->name.len, meta->name.ptr)
          : format("%.*s", (int)meta->name.len, meta->name.ptr);
  plugin_string_t missing_text;
  plugin_string_set(&missing_text, missing);
  kubeplug_plugin_log_label_t fields[] = {
      field("kind", regarding.resource_type.kind),
      field("key", key),
      field("missing", missing_text),
  };
  log_warn("object lacks required labels", fields, 3);

  plugin_string_t reason, note = format("missing required labels: %s", missing);
  plugin_string_set(&reason, "MissingLabels");
  host_error_t error;
  bool ok = kubeplug_plugin_cluster_record_event(
      &regarding, KUBEPLUG_PLUGIN_CLUSTER_EVENT_SEVERITY_WARNING, &reason, &note, &error);
  if (!ok) {
    const plugin_string_t *why = error_message(&error);
    if (error.tag == KUBEPLUG_PLUGIN_TYPES_ERROR_NOT_PERMITTED) {
      // Without the grant the audit still logs; the operator sees why no Event appears.
      kubeplug_plugin_log_label_t because[] = {field("why", *why)};
      log_warn("cannot record an Event", because, 1);
      ok = true;
    } else {
      *err = format("recording an Event on %.*s: %s(\"%.*s\")", (int)key.len, key.ptr,
                    error_name(&error), (int)why->len, why->ptr);
    }
    kubeplug_plugin_types_error_free(&error);
  }
  kubeplug_plugin_types_gvk_free(&regarding.resource_type);
  plugin_string_free(&note);
  plugin_string_free(&key);
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

void exports_kubeplug_plugin_handler_reconcile(exports_kubeplug_plugin_handler_gvk_t *resource_type,
                                               plugin_string_t *maybe_namespace,
                                               plugin_string_t *name,
                                               exports_kubeplug_plugin_handler_reconcile_result_t *ret) {
  // Events mode only: the host never calls this; answer like the Rust SDK's default.
  exports_kubeplug_plugin_handler_gvk_free(resource_type);
  if (maybe_namespace != NULL) {
    plugin_string_free(maybe_namespace);
  }
  plugin_string_free(name);
  ret->tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_RECONCILE_RESULT_DONE;
}

void exports_kubeplug_plugin_handler_map_event(exports_kubeplug_plugin_handler_event_t *event,
                                               exports_kubeplug_plugin_handler_list_object_ref_t *ret) {
  exports_kubeplug_plugin_handler_event_free(event);
  ret->ptr = NULL;
  ret->len = 0;
}
