/* The JSON tree of the Triton backend (runtime/triton/json.c): a model
 * configuration as Triton writes it parses, is edited and written back
 * unchanged but for the edit; escapes and numbers round-trip; malformed text
 * of every kind fails with a message instead of crashing. Plain C: runs
 * whether or not the backend is built. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include "../runtime/triton/json.h"
#include "testutil.h"

static qfi_json *parse(const char *text)
{
    char err[128];
    return qfi_json_parse(text, strlen(text), err, sizeof err);
}

START_TEST(config_round_trip)
{
    const char *text = "{\"name\":\"fmnist\",\"max_batch_size\":0,\"input\":[],\"dims\":[\"1\",\"28\",-3],"
                       "\"f\":1.5e-3,\"ok\":true,\"no\":false,\"z\":null,\"parameters\":{\"threads\":{\"string_value\":\"2\"}}}";
    qfi_json *j = parse(text);
    ck_assert_ptr_nonnull(j);
    char *back = qfi_json_write(j);
    ck_assert_str_eq(back, text);
    free(back);
    int64_t v;
    const qfi_json *dims = qfi_json_get(j, "dims");
    ck_assert_int_eq(dims->n, 3);
    ck_assert(qfi_json_int(dims->items[1], &v) && v == 28);   /* int64 as protobuf writes it: a string */
    ck_assert(qfi_json_int(dims->items[2], &v) && v == -3);
    ck_assert(!qfi_json_int(qfi_json_get(j, "f"), &v));        /* not a whole number */
    ck_assert(!qfi_json_int(qfi_json_get(j, "name"), &v));
    ck_assert_str_eq(qfi_json_str(qfi_json_get(qfi_json_get(qfi_json_get(j, "parameters"), "threads"), "string_value")), "2");
    ck_assert_ptr_null(qfi_json_get(j, "absent"));
    ck_assert_ptr_null(qfi_json_get(dims, "name"));            /* an array has no members */

    ck_assert(qfi_json_set(j, "max_batch_size", qfi_json_new_int(8)));
    ck_assert(qfi_json_set(j, "dynamic_batching", qfi_json_new(QFI_JSON_OBJECT)));
    back = qfi_json_write(j);
    ck_assert_str_eq(back, "{\"name\":\"fmnist\",\"max_batch_size\":8,\"input\":[],\"dims\":[\"1\",\"28\",-3],"
                           "\"f\":1.5e-3,\"ok\":true,\"no\":false,\"z\":null,\"parameters\":{\"threads\":{\"string_value\":\"2\"}},"
                           "\"dynamic_batching\":{}}");
    free(back);
    qfi_json_free(j);
}
END_TEST

START_TEST(string_escapes)
{
    qfi_json *j = parse("[\"a\\\"b\\\\c\\/d\\n\\t\\u00e9\\u20ac\\ud83d\\ude00\"]");
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(j->items[0]->text, "a\"b\\c/d\n\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
    char *back = qfi_json_write(j);
    /* control characters come back as \u escapes, the rest as UTF-8 */
    ck_assert_str_eq(back, "[\"a\\\"b\\\\c/d\\u000a\\u0009\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"]");
    qfi_json *again = parse(back);
    ck_assert_str_eq(again->items[0]->text, j->items[0]->text);
    free(back);
    qfi_json_free(again);
    qfi_json_free(j);
}
END_TEST

START_TEST(malformed)
{
    static const char *bad[] = {
        "", "{", "[1,]", "{\"a\" 1}", "{\"a\":}", "{1:2}", "[1 2]", "\"open", "\"bad \\q escape\"",
        "\"\\u12\"", "\"\\ud800\"", "\"\\udc00x\"", "01", "-", "1.", "1e", ".5", "tru", "nul", "[] []",
        "{\"a\":1}}", "\"tab\there\"", "[\"\\", "+1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[128] = "";
        qfi_json *j = qfi_json_parse(bad[i], strlen(bad[i]), err, sizeof err);
        if (j) ck_abort_msg("parsed malformed text '%s'", bad[i]);
        ck_assert_msg(err[0], "no message for '%s'", bad[i]);
    }
    // deep nesting is refused, not recursed into
    char deep[400];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = 0;
    char err[128];
    ck_assert_ptr_null(qfi_json_parse(deep, strlen(deep), err, sizeof err));
    ck_assert(strstr(err, "nested"));
    // the length bounds the text: no reading past it
    ck_assert_ptr_null(qfi_json_parse("[1,2]", 4, err, sizeof err));
    qfi_json *j = qfi_json_parse("[1,2]xyz", 5, err, sizeof err);
    ck_assert_ptr_nonnull(j);
    qfi_json_free(j);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("triton_json");
    TCase *tc = tcase_create("json");
    tcase_add_test(tc, config_round_trip);
    tcase_add_test(tc, string_escapes);
    tcase_add_test(tc, malformed);
    suite_add_tcase(s, tc);
    return run_suite(s);
}
