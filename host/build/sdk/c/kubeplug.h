// kubeplug's C SDK: helpers over the bindings `plugin.h` declares, compiled into every C
// plugin by `kubeplug build` (and `cargo xtask build-plugins`). Include it after nothing:
// it includes `plugin.h` itself.
//
// Memory: what a helper returns as `char *` is malloc'd and the caller's to free; views
// (`kp_str`) borrow the text they are made from and must never be freed or returned to the
// host; everything else follows the bindings' rules (see the C section of the docs).

#ifndef KUBEPLUG_H
#define KUBEPLUG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plugin.h"

// Log levels, shorter.
#define KP_TRACE KUBEPLUG_PLUGIN_LOG_LEVEL_TRACE
#define KP_DEBUG KUBEPLUG_PLUGIN_LOG_LEVEL_DEBUG
#define KP_INFO KUBEPLUG_PLUGIN_LOG_LEVEL_INFO
#define KP_WARN KUBEPLUG_PLUGIN_LOG_LEVEL_WARN
#define KP_ERROR KUBEPLUG_PLUGIN_LOG_LEVEL_ERROR

// ---- Strings ----

// A view of `text` (NUL-terminated), to pass to an import. Borrowed: never free it.
plugin_string_t kp_str(const char *text);

// A malloc'd, NUL-terminated copy of `s`.
char *kp_text(const plugin_string_t *s);

// A malloc'd, printf-formatted C string.
char *kp_format(const char *fmt, ...);

// Whether `s` holds exactly `text`.
bool kp_is(const plugin_string_t *s, const char *text);

// ---- Objects ----

// The object's key, malloc'd: `namespace/name`, or `name` for a cluster-scoped object.
char *kp_key(const kubeplug_plugin_types_object_meta_t *meta);

// The value of the label `key`, or NULL (only when the subscription's meta-fields include
// labels).
const plugin_string_t *kp_label(const kubeplug_plugin_types_object_meta_t *meta, const char *key);

// A resource type; its strings are malloc'd (what `describe` returns must be).
kubeplug_plugin_types_gvk_t kp_gvk(const char *group, const char *version, const char *kind);

// ---- Projections ----
// A subscription's projections are field paths whose values the host reads out of each
// object, so that a handler reads them without parsing the object's JSON.

// A projection for a subscription's `projections` list; its strings are malloc'd.
kubeplug_plugin_types_projection_t kp_projection(const char *name, const char *path);

// The values projection `name` selected, among one object's projections: an event's
// (`&event->projected`) or a projected object's from `cache_get_projected` and
// `cache_list_projected` (`&object.projected`). NULL when there is none of that name.
const kubeplug_plugin_types_list_field_value_t *kp_values(
    const kubeplug_plugin_types_list_projected_t *projected, const char *name);

// The values projection `name` selected in the event's object (with `old`, in the previous
// state of an `updated` event), or NULL when the event carries no projection of that name.
const kubeplug_plugin_types_list_field_value_t *kp_field(
    const kubeplug_plugin_types_event_t *event, const char *name, bool old);

// The first of `values` (what `kp_values` or `kp_field` returned; NULL reads as none), when it
// is a string (`*out` views the object's text), an integer, a number (an integer too), or a
// bool: true when there is one of that type. Reads a projected object's values in reconcile
// mode: kp_value_str(kp_values(&object.projected, "node"), &node).
bool kp_value_str(const kubeplug_plugin_types_list_field_value_t *values, plugin_string_t *out);
bool kp_value_i64(const kubeplug_plugin_types_list_field_value_t *values, int64_t *out);
bool kp_value_f64(const kubeplug_plugin_types_list_field_value_t *values, double *out);
bool kp_value_bool(const kubeplug_plugin_types_list_field_value_t *values, bool *out);

// The same for the first value of projection `name` in the event's object.
bool kp_field_str(const kubeplug_plugin_types_event_t *event, const char *name, plugin_string_t *out);
bool kp_field_i64(const kubeplug_plugin_types_event_t *event, const char *name, int64_t *out);
bool kp_field_f64(const kubeplug_plugin_types_event_t *event, const char *name, double *out);
bool kp_field_bool(const kubeplug_plugin_types_event_t *event, const char *name, bool *out);

// ---- Logs and metrics ----
// Fields and labels are given as key, value, key, value, ..., NULL (C strings).

// A log record: kp_log(KP_INFO, "reconciling", "key", key, NULL).
void kp_log(kubeplug_plugin_log_level_t level, const char *message, ...);

// Adds `delta` to a counter: kp_counter_add("events_total", 1, "change", "added", NULL).
// False when the host refused it (a bad name, too many series).
bool kp_counter_add(const char *name, uint64_t delta, ...);

// Sets a gauge: kp_gauge_set("queue_depth", 3.0, NULL).
bool kp_gauge_set(const char *name, double value, ...);

// ---- Errors of imports ----

// The case of an error, as the Rust SDK prints it: "NotFound", "NotPermitted",
// "InvalidInput", "Conflict" or "Unavailable".
const char *kp_error_name(const kubeplug_plugin_types_error_t *error);

// The message every case carries.
const plugin_string_t *kp_error_message(const kubeplug_plugin_types_error_t *error);

// ---- Default exports ----
// The SDK defines `handle_events`, `reconcile` and `map_event` weakly, so a plugin defines
// only `init`, `describe` and what its mode calls: events mode `handle_events`; reconcile
// mode `reconcile`, and `map_event` when a subscription's keys are computed. The defaults
// free their arguments and answer as the Rust SDK's do: a batch handled, a key done, no keys.

// ---- Settings ----

// A list of malloc'd, NUL-terminated strings (the list malloc'd too).
typedef struct {
  char **items;
  size_t len;
} kp_strings_t;

void kp_strings_free(kp_strings_t *list);

// The type a setting is read as, and where it goes (`out`): KP_STRING: char ** (set to a
// malloc'd string when present); KP_STRINGS: kp_strings_t * (empty before, filled when
// present); KP_INT: int64_t *; KP_BOOL: bool *.
typedef enum { KP_STRING, KP_STRINGS, KP_INT, KP_BOOL } kp_kind_t;

typedef struct {
  // The key in the settings object.
  const char *key;
  kp_kind_t kind;
  void *out;
  // Set by kp_settings_read: whether the document holds the key.
  bool present;
} kp_setting_t;

// Reads the settings document `json` (what `init` gets): a JSON object whose keys named in
// `settings` are read into their `out`, and whose other keys are checked and skipped. Keys
// absent from the document leave their `out` alone and `present` false (put the default in
// `out` first, or apply it after). Returns
// NULL, or a malloc'd message ("invalid settings: required_labels must be a list of strings
// at byte 21") for `init` to return as its error; on error, what was read is freed.
char *kp_settings_read(const plugin_string_t *json, kp_setting_t *settings, size_t count);

#endif
