// A small JSON reader, enough for label-audit's settings: it checks the structure of the
// whole document (strings strictly, numbers loosely), keeps `required_labels` and skips
// everything else.

#include "settings.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void append(struct string_list *list, char *item) {
  list->items = realloc(list->items, (list->len + 1) * sizeof *list->items);
  list->items[list->len++] = item;
}

static bool labels(struct reader *r, struct string_list *out) {
  if (!eat(r, '[')) {
    return fail(r, "required_labels must be a list of strings");
  }
  if (eat(r, ']')) {
    return true;
  }
  do {
    struct buffer label = {0};
    skip_space(r);
    if (r->p < r->end && *r->p != '"') {
      return fail(r, "required_labels must be a list of strings");
    }
    if (!string(r, &label)) {
      free(label.data);
      return false;
    }
    append(out, label.data);
  } while (eat(r, ','));
  return eat(r, ']') || fail(r, "expected ',' or ']'");
}

void string_list_free(struct string_list *list) {
  for (size_t i = 0; i < list->len; i++) {
    free(list->items[i]);
  }
  free(list->items);
  list->items = NULL;
  list->len = 0;
}

char *settings_required_labels(const char *json, size_t len, const char *default_label,
                               struct string_list *out) {
  struct reader r = {json, json, json + len, NULL};
  bool seen = false, ok = eat(&r, '{') || fail(&r, "expected an object");
  if (ok && !eat(&r, '}')) {
    do {
      struct buffer key = {0};
      ok = string(&r, &key) && (eat(&r, ':') || fail(&r, "expected ':'"));
      if (ok && strcmp(key.data, "required_labels") == 0) {
        ok = seen ? fail(&r, "duplicate field required_labels") : labels(&r, out);
        seen = true;
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
    string_list_free(out);
    return r.error;
  }
  if (!seen) {
    append(out, strdup(default_label));
  }
  return NULL;
}
