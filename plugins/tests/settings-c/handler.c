// Test guest for the C SDK's settings reader: `init` reads a setting of every kind, and
// `describe` reports what it read in its version, `c<count>.n<names>.v<verbose>-g<bytes>`,
// the last the greeting's length in UTF-8 (defaults: count 7, no names, not verbose, no
// greeting). It defines no other export: the SDK's weak defaults are linked in their place.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kubeplug.h"

static char *greeting;
static kp_strings_t names;
static int64_t count = 7;
static bool verbose;

bool exports_kubeplug_plugin_handler_init(plugin_string_t *settings, plugin_string_t *err) {
  char *read_greeting = NULL;
  kp_setting_t fields[] = {
      {.key = "greeting", .kind = KP_STRING, .out = &read_greeting},
      {.key = "names", .kind = KP_STRINGS, .out = &names},
      {.key = "count", .kind = KP_INT, .out = &count},
      {.key = "verbose", .kind = KP_BOOL, .out = &verbose},
  };
  char *error = kp_settings_read(settings, fields, 4);
  plugin_string_free(settings);
  if (error != NULL) {
    plugin_string_set(err, error);
    return false;
  }
  greeting = read_greeting != NULL ? read_greeting : strdup("");
  return true;
}

void exports_kubeplug_plugin_handler_describe(exports_kubeplug_plugin_handler_description_t *ret) {
  memset(ret, 0, sizeof *ret);
  plugin_string_dup(&ret->name, "settings-c");
  char version[200];
  snprintf(version, sizeof version, "c%lld.n%zu.v%d-g%zu", (long long)count, names.len, verbose,
           strlen(greeting));
  plugin_string_dup(&ret->version, version);
  ret->subscriptions.len = 1;
  ret->subscriptions.ptr = calloc(1, sizeof *ret->subscriptions.ptr);
  ret->subscriptions.ptr[0].resource_type = kp_gvk("", "v1", "ConfigMap");
  ret->subscriptions.ptr[0].enqueue.tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_KEY_MAPPING_OWN_KEY;
  ret->delivery.tag = EXPORTS_KUBEPLUG_PLUGIN_HANDLER_DELIVERY_EVENTS;
}
