// kubeplug's C SDK (see kubeplug.h): string, object, log, metric and error helpers, default
// definitions of the exports a plugin's mode never calls, and a small JSON reader for the
// settings document that checks the structure of the whole document (strings strictly,
// numbers loosely), keeps the keys asked for and skips the rest.

#include "kubeplug.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

plugin_string_t kp_str(const char *text) {
  plugin_string_t s;
  plugin_string_set(&s, text);
  return s;
}

char *kp_text(const plugin_string_t *s) {
  char *text = malloc(s->len + 1);
  memcpy(text, s->ptr, s->len);
  text[s->len] = '\0';
  return text;
}

char *kp_format(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  int len = vsnprintf(NULL, 0, fmt, args);
  va_end(args);
  char *text = malloc(len + 1);
  va_start(args, fmt);
  vsnprintf(text, len + 1, fmt, args);
  va_end(args);
  return text;
}

bool kp_is(const plugin_string_t *s, const char *text) {
  size_t len = strlen(text);
  return s->len == len && memcmp(s->ptr, text, len) == 0;
}

char *kp_key(const kubeplug_plugin_types_object_meta_t *meta) {
  const plugin_string_t *name = &meta->name;
  if (!meta->namespace_.is_some) {
    return kp_text(name);
  }
  const plugin_string_t *ns = &meta->namespace_.val;
  char *key = malloc(ns->len + 1 + name->len + 1);
  memcpy(key, ns->ptr, ns->len);
  key[ns->len] = '/';
  memcpy(key + ns->len + 1, name->ptr, name->len);
  key[ns->len + 1 + name->len] = '\0';
  return key;
}

const plugin_string_t *kp_label(const kubeplug_plugin_types_object_meta_t *meta, const char *key) {
  for (size_t i = 0; i < meta->labels.len; i++) {
    if (kp_is(&meta->labels.ptr[i].key, key)) {
      return &meta->labels.ptr[i].value;
    }
  }
  return NULL;
}

kubeplug_plugin_types_gvk_t kp_gvk(const char *group, const char *version, const char *kind) {
  kubeplug_plugin_types_gvk_t g;
  plugin_string_dup(&g.group, group);
  plugin_string_dup(&g.version, version);
  plugin_string_dup(&g.kind, kind);
  return g;
}

kubeplug_plugin_types_projection_t kp_projection(const char *name, const char *path) {
  kubeplug_plugin_types_projection_t p;
  plugin_string_dup(&p.name, name);
  plugin_string_dup(&p.path, path);
  return p;
}

const kubeplug_plugin_types_list_field_value_t *kp_values(
    const kubeplug_plugin_types_list_projected_t *projected, const char *name) {
  for (size_t i = 0; i < projected->len; i++) {
    if (kp_is(&projected->ptr[i].name, name)) {
      return &projected->ptr[i].values;
    }
  }
  return NULL;
}

const kubeplug_plugin_types_list_field_value_t *kp_field(
    const kubeplug_plugin_types_event_t *event, const char *name, bool old) {
  return kp_values(old ? &event->old_projected : &event->projected, name);
}

// The first of `values`, or NULL when there is none.
static const kubeplug_plugin_types_field_value_t *first_value(
    const kubeplug_plugin_types_list_field_value_t *values) {
  return values == NULL || values->len == 0 ? NULL : &values->ptr[0];
}

bool kp_value_str(const kubeplug_plugin_types_list_field_value_t *values, plugin_string_t *out) {
  const kubeplug_plugin_types_field_value_t *v = first_value(values);
  if (v == NULL || v->tag != KUBEPLUG_PLUGIN_TYPES_FIELD_VALUE_TEXT) {
    return false;
  }
  *out = v->val.text;
  return true;
}

bool kp_value_i64(const kubeplug_plugin_types_list_field_value_t *values, int64_t *out) {
  const kubeplug_plugin_types_field_value_t *v = first_value(values);
  if (v == NULL || v->tag != KUBEPLUG_PLUGIN_TYPES_FIELD_VALUE_INTEGER) {
    return false;
  }
  *out = v->val.integer;
  return true;
}

bool kp_value_f64(const kubeplug_plugin_types_list_field_value_t *values, double *out) {
  const kubeplug_plugin_types_field_value_t *v = first_value(values);
  if (v == NULL) {
    return false;
  }
  if (v->tag == KUBEPLUG_PLUGIN_TYPES_FIELD_VALUE_INTEGER) {
    *out = (double)v->val.integer;
    return true;
  }
  if (v->tag == KUBEPLUG_PLUGIN_TYPES_FIELD_VALUE_FLOAT) {
    *out = v->val.float_;
    return true;
  }
  return false;
}

bool kp_value_bool(const kubeplug_plugin_types_list_field_value_t *values, bool *out) {
  const kubeplug_plugin_types_field_value_t *v = first_value(values);
  if (v == NULL || v->tag != KUBEPLUG_PLUGIN_TYPES_FIELD_VALUE_BOOLEAN) {
    return false;
  }
  *out = v->val.boolean;
  return true;
}

bool kp_field_str(const kubeplug_plugin_types_event_t *event, const char *name, plugin_string_t *out) {
  return kp_value_str(kp_field(event, name, false), out);
}

bool kp_field_i64(const kubeplug_plugin_types_event_t *event, const char *name, int64_t *out) {
  return kp_value_i64(kp_field(event, name, false), out);
}

bool kp_field_f64(const kubeplug_plugin_types_event_t *event, const char *name, double *out) {
  return kp_value_f64(kp_field(event, name, false), out);
}

bool kp_field_bool(const kubeplug_plugin_types_event_t *event, const char *name, bool *out) {
  return kp_value_bool(kp_field(event, name, false), out);
}

// The key, value, ..., NULL pairs of `pairs` as labels (views of the arguments), malloc'd.
static kubeplug_plugin_types_label_t *labels_of(va_list pairs, size_t *count) {
  kubeplug_plugin_types_label_t *labels = NULL;
  *count = 0;
  for (const char *key = va_arg(pairs, const char *); key != NULL;
       key = va_arg(pairs, const char *)) {
    const char *value = va_arg(pairs, const char *);
    labels = realloc(labels, (*count + 1) * sizeof *labels);
    labels[*count].key = kp_str(key);
    labels[*count].value = kp_str(value == NULL ? "" : value);
    (*count)++;
  }
  return labels;
}

void kp_log(kubeplug_plugin_log_level_t level, const char *message, ...) {
  va_list pairs;
  va_start(pairs, message);
  size_t count;
  kubeplug_plugin_types_label_t *fields = labels_of(pairs, &count);
  va_end(pairs);
  plugin_string_t text = kp_str(message);
  kubeplug_plugin_log_list_label_t list = {fields, count};
  kubeplug_plugin_log_log(level, &text, &list);
  free(fields);
}

// Adds `delta` to the counter `name`, or sets the gauge `name` to `value`, with the labels
// of `pairs`.
static bool record_metric(const char *name, bool counter, uint64_t delta, double value,
                          va_list pairs) {
  size_t count;
  kubeplug_plugin_types_label_t *labels = labels_of(pairs, &count);
  plugin_string_t text = kp_str(name);
  kubeplug_plugin_metrics_list_label_t list = {labels, count};
  kubeplug_plugin_metrics_error_t error;
  bool ok = counter ? kubeplug_plugin_metrics_counter_add(&text, &list, delta, &error)
                    : kubeplug_plugin_metrics_gauge_set(&text, &list, value, &error);
  if (!ok) {
    kubeplug_plugin_types_error_free(&error);
  }
  free(labels);
  return ok;
}

bool kp_counter_add(const char *name, uint64_t delta, ...) {
  va_list pairs;
  va_start(pairs, delta);
  bool ok = record_metric(name, true, delta, 0.0, pairs);
  va_end(pairs);
  return ok;
}

bool kp_gauge_set(const char *name, double value, ...) {
  va_list pairs;
  va_start(pairs, value);
  bool ok = record_metric(name, false, 0, value, pairs);
  va_end(pairs);
  return ok;
}

const char *kp_error_name(const kubeplug_plugin_types_error_t *error) {
  switch (error->tag) {
  case KUBEPLUG_PLUGIN_TYPES_ERROR_NOT_FOUND: return "NotFound";
  case KUBEPLUG_PLUGIN_TYPES_ERROR_NOT_PERMITTED: return "NotPermitted";
  case KUBEPLUG_PLUGIN_TYPES_ERROR_INVALID_INPUT: return "InvalidInput";
  case KUBEPLUG_PLUGIN_TYPES_ERROR_CONFLICT: return "Conflict";
  default: return "Unavailable";
  }
}

// Every case of `error` carries one string, at the same place.
const plugin_string_t *kp_error_message(const kubeplug_plugin_types_error_t *error) {
  return &error->val.not_found;
}

// ---- Default exports ----
// Weak, so a plugin's own definition wins at link time: a plugin defines `init`, `describe`
// and what its mode calls, as with the Rust SDK's trait defaults. Each frees its arguments
// and answers as the Rust SDK's default does.

__attribute__((weak)) bool exports_kubeplug_plugin_handler_handle_events(
    exports_kubeplug_plugin_handler_list_event_t *batch, plugin_string_t *err) {
  exports_kubeplug_plugin_handler_list_event_free(batch);
  return true;
}

__attribute__((weak)) void exports_kubeplug_plugin_handler_reconcile(
    exports_kubeplug_plugin_handler_gvk_t *resource_type, plugin_string_t *maybe_namespace,
    plugin_string_t *name, exports_kubeplug_plugin_handler_reconcile_result_t *ret) {
  exports_kubeplug_plugin_handler_gvk_free(resource_type);
  if (maybe_namespace != NULL) {
    plugin_string_free(maybe_namespace);
  }
  plugin_string_free(name);
  ret->tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_RECONCILE_RESULT_DONE;
}

__attribute__((weak)) void exports_kubeplug_plugin_handler_map_event(
    exports_kubeplug_plugin_handler_event_t *event,
    exports_kubeplug_plugin_handler_list_object_ref_t *ret) {
  exports_kubeplug_plugin_handler_event_free(event);
  ret->ptr = NULL;
  ret->len = 0;
}

// ---- The settings reader ----

// Deeper nesting is refused rather than risking the guest's small stack.
#define MAX_DEPTH 64

struct reader {
  const char *start, *p, *end;
  char *error;
};

// A growing byte buffer, always NUL-terminated.
struct buffer {
  char *data;
  size_t len, cap;
};

static void push(struct buffer *b, char c) {
  if (b->len + 2 > b->cap) {
    b->cap = b->cap ? 2 * b->cap : 32;
    b->data = realloc(b->data, b->cap);
  }
  b->data[b->len++] = c;
  b->data[b->len] = '\0';
}

static void push_utf8(struct buffer *b, uint32_t c) {
  if (c < 0x80) {
    push(b, (char)c);
  } else if (c < 0x800) {
    push(b, (char)(0xc0 | (c >> 6)));
    push(b, (char)(0x80 | (c & 0x3f)));
  } else if (c < 0x10000) {
    push(b, (char)(0xe0 | (c >> 12)));
    push(b, (char)(0x80 | ((c >> 6) & 0x3f)));
    push(b, (char)(0x80 | (c & 0x3f)));
  } else {
    push(b, (char)(0xf0 | (c >> 18)));
    push(b, (char)(0x80 | ((c >> 12) & 0x3f)));
    push(b, (char)(0x80 | ((c >> 6) & 0x3f)));
    push(b, (char)(0x80 | (c & 0x3f)));
  }
}

static bool fail(struct reader *r, const char *what) {
  if (r->error == NULL) {
    const char *fmt = "invalid settings: %s at byte %zu";
    size_t at = (size_t)(r->p - r->start);
    int len = snprintf(NULL, 0, fmt, what, at);
    r->error = malloc(len + 1);
    snprintf(r->error, len + 1, fmt, what, at);
  }
  return false;
}

static void skip_space(struct reader *r) {
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r')) {
    r->p++;
  }
}

static bool eat(struct reader *r, char c) {
  skip_space(r);
  if (r->p < r->end && *r->p == c) {
    r->p++;
    return true;
  }
  return false;
}

static bool hex4(struct reader *r, uint32_t *out) {
  *out = 0;
  for (int i = 0; i < 4; i++, r->p++) {
    if (r->p >= r->end) {
      return fail(r, "unfinished \\u escape");
    }
    char c = *r->p;
    uint32_t digit = c >= '0' && c <= '9'   ? (uint32_t)(c - '0')
                     : c >= 'a' && c <= 'f' ? (uint32_t)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (uint32_t)(c - 'A' + 10)
                                            : 16;
    if (digit == 16) {
      return fail(r, "bad \\u escape");
    }
    *out = *out * 16 + digit;
  }
  return true;
}

// Reads a string; its text goes into `out` when that is not NULL.
static bool string(struct reader *r, struct buffer *out) {
  struct buffer ignored = {0};
  struct buffer *b = out ? out : &ignored;
  bool ok = false;
  if (!eat(r, '"')) {
    fail(r, "expected a string");
    goto done;
  }
  push(b, '\0');
  b->len = 0;
  while (true) {
    if (r->p >= r->end) {
      fail(r, "unfinished string");
      goto done;
    }
    unsigned char c = (unsigned char)*r->p++;
    if (c == '"') {
      ok = true;
      goto done;
    }
    if (c < 0x20) {
      fail(r, "control character in a string");
      goto done;
    }
    if (c != '\\') {
      push(b, (char)c);
      continue;
    }
    if (r->p >= r->end) {
      fail(r, "unfinished escape");
      goto done;
    }
    char e = *r->p++;
    const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
    const char *simple = e ? strchr(from, e) : NULL;
    if (simple != NULL) {
      push(b, to[simple - from]);
    } else if (e == 'u') {
      uint32_t code, low;
      if (!hex4(r, &code)) {
        goto done;
      }
      if (code >= 0xd800 && code < 0xdc00) {
        if (r->end - r->p < 2 || r->p[0] != '\\' || r->p[1] != 'u') {
          fail(r, "lone surrogate");
          goto done;
        }
        r->p += 2;
        if (!hex4(r, &low)) {
          goto done;
        }
        if (low < 0xdc00 || low >= 0xe000) {
          fail(r, "bad surrogate pair");
          goto done;
        }
        code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
      } else if (code >= 0xdc00 && code < 0xe000) {
        fail(r, "lone surrogate");
        goto done;
      }
      if (code == 0) {
        fail(r, "NUL in a string");
        goto done;
      }
      push_utf8(b, code);
    } else {
      fail(r, "bad escape");
      goto done;
    }
  }
done:
  free(ignored.data);
  return ok;
}

static bool literal(struct reader *r, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0) {
    return fail(r, "expected a value");
  }
  r->p += n;
  return true;
}

static bool number(struct reader *r) {
  const char *begin = r->p;
  if (r->p < r->end && *r->p == '-') {
    r->p++;
  }
  while (r->p < r->end && strchr("0123456789.eE+-", *r->p) != NULL && *r->p != '\0') {
    r->p++;
  }
  if (r->p == begin || (r->p - begin == 1 && *begin == '-')) {
    return fail(r, "expected a value");
  }
  return true;
}

static bool skip_value(struct reader *r, int depth);

static bool skip_container(struct reader *r, int depth, char close, bool keyed) {
  if (depth > MAX_DEPTH) {
    return fail(r, "nested too deeply");
  }
  if (eat(r, close)) {
    return true;
  }
  do {
    if (keyed && (!string(r, NULL) || !(eat(r, ':') || fail(r, "expected ':'")))) {
      return false;
    }
    if (!skip_value(r, depth + 1)) {
      return false;
    }
  } while (eat(r, ','));
  return eat(r, close) || fail(r, keyed ? "expected ',' or '}'" : "expected ',' or ']'");
}

static bool skip_value(struct reader *r, int depth) {
  skip_space(r);
  if (r->p >= r->end) {
    return fail(r, "expected a value");
  }
  switch (*r->p) {
  case '{': r->p++; return skip_container(r, depth, '}', true);
  case '[': r->p++; return skip_container(r, depth, ']', false);
  case '"': return string(r, NULL);
  case 't': return literal(r, "true");
  case 'f': return literal(r, "false");
  case 'n': return literal(r, "null");
  default: return number(r);
  }
}

void kp_strings_free(kp_strings_t *list) {
  for (size_t i = 0; i < list->len; i++) {
    free(list->items[i]);
  }
  free(list->items);
  list->items = NULL;
  list->len = 0;
}

// Fails naming the setting and what it must be.
static bool wrong(struct reader *r, const kp_setting_t *setting, const char *must_be) {
  char what[200];
  snprintf(what, sizeof what, "%s must be %s", setting->key, must_be);
  return fail(r, what);
}

static bool read_strings(struct reader *r, const kp_setting_t *setting, kp_strings_t *out) {
  if (!eat(r, '[')) {
    return wrong(r, setting, "a list of strings");
  }
  if (eat(r, ']')) {
    return true;
  }
  do {
    struct buffer item = {0};
    skip_space(r);
    if (r->p < r->end && *r->p != '"') {
      return wrong(r, setting, "a list of strings");
    }
    if (!string(r, &item)) {
      free(item.data);
      return false;
    }
    out->items = realloc(out->items, (out->len + 1) * sizeof *out->items);
    out->items[out->len++] = item.data;
  } while (eat(r, ','));
  return eat(r, ']') || fail(r, "expected ',' or ']'");
}

static bool read_int(struct reader *r, const kp_setting_t *setting, int64_t *out) {
  skip_space(r);
  const char *begin = r->p;
  bool negative = r->p < r->end && *r->p == '-';
  if (negative) {
    r->p++;
  }
  uint64_t magnitude = 0;
  const uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  const char *digits = r->p;
  while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
    uint64_t digit = (uint64_t)(*r->p - '0');
    if (magnitude > (limit - digit) / 10) {
      return wrong(r, setting, "an integer within 64 bits");
    }
    magnitude = magnitude * 10 + digit;
    r->p++;
  }
  bool fraction = r->p < r->end && strchr(".eE", *r->p) != NULL && *r->p != '\0';
  if (r->p == digits || fraction) {
    r->p = begin;
    return wrong(r, setting, "an integer");
  }
  *out = negative ? (int64_t)(0 - magnitude) : (int64_t)magnitude;
  return true;
}

static bool read_value(struct reader *r, kp_setting_t *setting) {
  switch (setting->kind) {
  case KP_STRING: {
    struct buffer text = {0};
    skip_space(r);
    if (r->p < r->end && *r->p != '"') {
      return wrong(r, setting, "a string");
    }
    if (!string(r, &text)) {
      free(text.data);
      return false;
    }
    *(char **)setting->out = text.data != NULL ? text.data : strdup("");
    return true;
  }
  case KP_STRINGS: return read_strings(r, setting, (kp_strings_t *)setting->out);
  case KP_INT: return read_int(r, setting, (int64_t *)setting->out);
  case KP_BOOL:
    skip_space(r);
    if ((size_t)(r->end - r->p) >= 4 && memcmp(r->p, "true", 4) == 0) {
      r->p += 4;
      *(bool *)setting->out = true;
      return true;
    }
    if ((size_t)(r->end - r->p) >= 5 && memcmp(r->p, "false", 5) == 0) {
      r->p += 5;
      *(bool *)setting->out = false;
      return true;
    }
    return wrong(r, setting, "true or false");
  }
  return fail(r, "unknown kind of setting");
}

// Frees what reading `setting` stored.
static void forget(kp_setting_t *setting) {
  if (!setting->present) {
    return;
  }
  if (setting->kind == KP_STRING) {
    free(*(char **)setting->out);
    *(char **)setting->out = NULL;
  } else if (setting->kind == KP_STRINGS) {
    kp_strings_free((kp_strings_t *)setting->out);
  }
  setting->present = false;
}

char *kp_settings_read(const plugin_string_t *json, kp_setting_t *settings, size_t count) {
  const char *text = (const char *)json->ptr;
  struct reader r = {text, text, text + json->len, NULL};
  for (size_t i = 0; i < count; i++) {
    settings[i].present = false;
  }
  bool ok = eat(&r, '{') || fail(&r, "expected an object");
  if (ok && !eat(&r, '}')) {
    do {
      struct buffer key = {0};
      ok = string(&r, &key) && (eat(&r, ':') || fail(&r, "expected ':'"));
      kp_setting_t *wanted = NULL;
      for (size_t i = 0; ok && i < count; i++) {
        if (key.data != NULL && strcmp(key.data, settings[i].key) == 0) {
          wanted = &settings[i];
        }
      }
      if (wanted != NULL && wanted->present) {
        char what[200];
        snprintf(what, sizeof what, "duplicate field %s", wanted->key);
        ok = fail(&r, what);
      } else if (wanted != NULL) {
        ok = read_value(&r, wanted);
        if (ok) {
          wanted->present = true;
        } else if (wanted->kind == KP_STRINGS) {
          kp_strings_free((kp_strings_t *)wanted->out);
        }
      } else if (ok) {
        ok = skip_value(&r, 1);
      }
      free(key.data);
    } while (ok && eat(&r, ','));
    ok = ok && (eat(&r, '}') || fail(&r, "expected ',' or '}'"));
  }
  skip_space(&r);
  if (ok && r.p != r.end) {
    ok = fail(&r, "trailing characters");
  }
  if (!ok) {
    for (size_t i = 0; i < count; i++) {
      forget(&settings[i]);
    }
    return r.error;
  }
  return NULL;
}
