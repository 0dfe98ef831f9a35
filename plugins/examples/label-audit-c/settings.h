// Reading label-audit's settings document: the one place this plugin parses JSON.
#ifndef LABEL_AUDIT_SETTINGS_H
#define LABEL_AUDIT_SETTINGS_H

#include <stddef.h>

// A list of NUL-terminated strings, each malloc'd, as is `items`.
struct string_list {
  char **items;
  size_t len;
};

// Frees the strings and empties the list.
void string_list_free(struct string_list *list);

// Reads `required_labels` (a list of strings) from the settings document `json`, a JSON
// object whose other keys are ignored, into `out`; `default_label` alone when the key is
// absent. Returns NULL, or a malloc'd message saying what is wrong and where.
char *settings_required_labels(const char *json, size_t len, const char *default_label,
                               struct string_list *out);

#endif
