/* A small JSON tree for the Triton backend: Triton hands model configurations
 * over as JSON text, and the backend reads them, completes them and hands them
 * back. Numbers keep their source text so that a document round-trips exactly. */
#ifndef QFORGE_TRITON_JSON_H
#define QFORGE_TRITON_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum qfi_json_type { QFI_JSON_NULL, QFI_JSON_BOOL, QFI_JSON_NUMBER, QFI_JSON_STRING, QFI_JSON_ARRAY, QFI_JSON_OBJECT } qfi_json_type;

typedef struct qfi_json {
    qfi_json_type type;
    char *key;            /* member name inside an object, else NULL */
    char *text;           /* a string's value, a number's source text */
    bool boolean;
    int n, cap;           /* children of an array or object, in order */
    struct qfi_json **items;
} qfi_json;

/* Parses `len` bytes; NULL on malformed text, with a message in err. */
qfi_json *qfi_json_parse(const char *text, size_t len, char *err, size_t err_size);
void qfi_json_free(qfi_json *j);

/* Member of an object by name (NULL if absent or not an object). */
qfi_json *qfi_json_get(const qfi_json *obj, const char *key);
/* A whole number held as a number or as a string of digits (protobuf's JSON
 * writes int64 fields as strings); false for anything else. */
bool qfi_json_int(const qfi_json *j, int64_t *out);
/* The string value, or NULL if j is not a string. */
const char *qfi_json_str(const qfi_json *j);

/* Builders; each returns NULL when out of memory. qfi_json_add takes ownership of
 * `child` (freed on failure) and names it `key` when obj is an object;
 * qfi_json_set replaces a member of that name or adds it (false if obj is not an object). */
qfi_json *qfi_json_new(qfi_json_type type);
qfi_json *qfi_json_new_string(const char *s);
qfi_json *qfi_json_new_int(int64_t v);
bool qfi_json_add(qfi_json *obj, const char *key, qfi_json *child);
bool qfi_json_set(qfi_json *obj, const char *key, qfi_json *child);

/* Serializes compactly into a malloc'ed NUL-terminated string (NULL when out of memory). */
char *qfi_json_write(const qfi_json *j);

#endif
