// projected-reconciler-c: the C port of the projected-reconciler test guest. Each reconcile
// reads its key's Pod with `cache.get-projected` and the Pods of its namespace with
// `cache.list-projected`, five fields each, through the C SDK's typed readers
// (`kp_value_*`), and counts what it read in `reads_total{key, got, listed}`, rendered as
// the Rust original renders it: `name=text:<s>`, `integer:<n>`, `boolean:<b>`, `null`,
// `absent` or `other`, joined by spaces; `none` for no Pod; listed Pods as `<key>: <fields>`
// joined by `; `.
//
// Memory, as wit-bindgen's C bindings define it: arguments of exported functions belong to
// us and are freed here; arguments we pass to imports stay ours; what imports return is ours
// to free.

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kubeplug.h"

// The projections both reads ask for: name, path.
static const char *const FIELDS[][2] = {
    {"node", "spec.nodeName"},
    {"policy", "spec.restartPolicy"},
    {"priority", "spec.priority"},
    {"links", "spec.enableServiceLinks"},
    {"overhead", "spec.overhead"},
};
#define FIELD_COUNT (sizeof FIELDS / sizeof FIELDS[0])

static kubeplug_plugin_types_projection_t projections[FIELD_COUNT];

// `text` + `separator` + `more`, malloc'd; frees `text` and `more`. `text` may be NULL.
static char *append(char *text, const char *separator, char *more) {
  char *joined = text == NULL ? strdup(more) : kp_format("%s%s%s", text, separator, more);
  free(text);
  free(more);
  return joined;
}

bool exports_kubeplug_plugin_handler_init(plugin_string_t *settings, plugin_string_t *err) {
  plugin_string_free(settings);
  for (size_t i = 0; i < FIELD_COUNT; i++) {
    projections[i] = kp_projection(FIELDS[i][0], FIELDS[i][1]);
  }
  return true;
}

void exports_kubeplug_plugin_handler_describe(exports_kubeplug_plugin_handler_description_t *ret) {
  memset(ret, 0, sizeof *ret);
  plugin_string_dup(&ret->name, "projected-reconciler-c");
  plugin_string_dup(&ret->version, "0.1.0");
  exports_kubeplug_plugin_handler_subscription_t *pods = calloc(1, sizeof *pods);
  pods->resource_type = kp_gvk("", "v1", "Pod");
  pods->enqueue.tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_KEY_MAPPING_OWN_KEY;
  ret->subscriptions.len = 1;
  ret->subscriptions.ptr = pods;
  ret->delivery.tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_DELIVERY_RECONCILE;
  ret->delivery.val.reconcile = 1;
  // Projected reads need the Pods' bodies; the subscription alone would keep metadata.
  ret->reads.len = 1;
  ret->reads.ptr = malloc(sizeof *ret->reads.ptr);
  ret->reads.ptr[0].resource_type = kp_gvk("", "v1", "Pod");
  ret->reads.ptr[0].wants_object_json = true;
}

// The first value projection `name` selected in `object`, typed; malloc'd.
static char *value(const kubeplug_plugin_types_projected_object_t *object, const char *name) {
  const kubeplug_plugin_types_list_field_value_t *values = kp_values(&object->projected, name);
  plugin_string_t text;
  int64_t integer;
  bool boolean;
  if (kp_value_str(values, &text)) {
    return kp_format("text:%.*s", (int)text.len, (const char *)text.ptr);
  }
  if (kp_value_i64(values, &integer)) {
    return kp_format("integer:%" PRId64, integer);
  }
  if (kp_value_bool(values, &boolean)) {
    return kp_format("boolean:%s", boolean ? "true" : "false");
  }
  if (values == NULL || values->len == 0) {
    return strdup("absent");
  }
  return strdup(values->ptr[0].tag == KUBEPLUG_PLUGIN_TYPES_FIELD_VALUE_NULL ? "null" : "other");
}

// `object`'s fields as `name=value`, joined by spaces; malloc'd.
static char *render(const kubeplug_plugin_types_projected_object_t *object) {
  char *fields = NULL;
  for (size_t i = 0; i < FIELD_COUNT; i++) {
    char *typed = value(object, FIELDS[i][0]);
    fields = append(fields, " ", kp_format("%s=%s", FIELDS[i][0], typed));
    free(typed);
  }
  return fields;
}

// An import's error as "<what> <key>: <Case>(<message>)", malloc'd; frees the error.
static char *failure(const char *what, const char *key, kubeplug_plugin_types_error_t *error) {
  char *message = kp_text(kp_error_message(error));
  char *text = kp_format("%s %s: %s(%s)", what, key, kp_error_name(error), message);
  free(message);
  kubeplug_plugin_types_error_free(error);
  return text;
}

// Reads `key` and its namespace and counts the reading; NULL, or a malloc'd message.
static char *read_pods(kubeplug_plugin_cache_gvk_t *pods, plugin_string_t *maybe_namespace,
                       const char *key) {
  kubeplug_plugin_cache_list_projection_t asked = {.ptr = projections, .len = FIELD_COUNT};
  kubeplug_plugin_cache_error_t error;
  kubeplug_plugin_cache_option_projected_object_t found;
  plugin_string_t key_view = kp_str(key);
  if (!kubeplug_plugin_cache_get_projected(pods, &key_view, &asked, &found, &error)) {
    return failure("get-projected", key, &error);
  }
  kubeplug_plugin_cache_list_projected_object_t listed;
  if (!kubeplug_plugin_cache_list_projected(pods, maybe_namespace, NULL, &asked, &listed,
                                            &error)) {
    kubeplug_plugin_cache_option_projected_object_free(&found);
    return failure("list-projected", key, &error);
  }
  char *got = found.is_some ? render(&found.val) : strdup("none");
  char *objects = NULL;
  for (size_t i = 0; i < listed.len; i++) {
    char *object_key = kp_key(&listed.ptr[i].meta);
    char *fields = render(&listed.ptr[i]);
    objects = append(objects, "; ", kp_format("%s: %s", object_key, fields));
    free(fields);
    free(object_key);
  }
  if (objects == NULL) {
    objects = strdup("");
  }
  char *problem = NULL;
  if (!kp_counter_add("reads_total", 1, "key", key, "got", got, "listed", objects, NULL)) {
    problem = strdup("reads_total: refused by the host");
  }
  free(objects);
  free(got);
  kubeplug_plugin_cache_list_projected_object_free(&listed);
  kubeplug_plugin_cache_option_projected_object_free(&found);
  return problem;
}

void exports_kubeplug_plugin_handler_reconcile(exports_kubeplug_plugin_handler_gvk_t *resource_type,
                                               plugin_string_t *maybe_namespace,
                                               plugin_string_t *name,
                                               exports_kubeplug_plugin_handler_reconcile_result_t *ret) {
  char *key = maybe_namespace == NULL
                  ? kp_text(name)
                  : kp_format("%.*s/%.*s", (int)maybe_namespace->len,
                           (const char *)maybe_namespace->ptr, (int)name->len,
                           (const char *)name->ptr);
  char *problem = read_pods(resource_type, maybe_namespace, key);
  if (problem == NULL) {
    ret->tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_RECONCILE_RESULT_DONE;
  } else {
    ret->tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_RECONCILE_RESULT_ERROR;
    plugin_string_set(&ret->val.error, problem);
  }
  free(key);
  exports_kubeplug_plugin_handler_gvk_free(resource_type);
  if (maybe_namespace != NULL) {
    plugin_string_free(maybe_namespace);
  }
  plugin_string_free(name);
}
