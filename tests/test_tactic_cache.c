/* The tactic cache (runtime/tactic_cache.c): values survive a save and a
 * reopen; a file of another device key, another version or with garbage
 * lines gives back only what parses; bad keys are refused; caching off and
 * an unwritable folder cost nothing but the cache. Runs on any machine: the
 * store is plain C, only its users are CUDA. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "internal.h"
#include "../runtime/tactic_cache.h"
#include "testutil.h"

static char dir[256]; /* set by main, before check forks the tests */

/* Each test starts with the cache in dir (a test may point it elsewhere). */
static void use_dir(void)
{
    setenv("QFORGE_CACHE_DIR", dir, 1);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(round_trip)
{
    use_dir();
    qfi_tactic_cache *tc = qfi_tactic_cache_open("GPU X sm90 driver 1");
    ck_assert_ptr_nonnull(tc);
    int v = 7;
    ck_assert(!qfi_tactic_cache_get(tc, "conv:a", &v));
    qfi_tactic_cache_put(tc, "conv:a", 3);
    qfi_tactic_cache_put(tc, "gemm:b", -1);
    qfi_tactic_cache_put(tc, "conv:a", 4); /* replaces */
    qfi_tactic_cache_save(tc);
    char path[512];
    snprintf(path, sizeof path, "%s", qfi_tactic_cache_path(tc));
    qfi_tactic_cache_free(tc);

    tc = qfi_tactic_cache_open("GPU X sm90 driver 1");
    ck_assert(qfi_tactic_cache_get(tc, "conv:a", &v));
    ck_assert_int_eq(v, 4);
    ck_assert(qfi_tactic_cache_get(tc, "gemm:b", &v));
    ck_assert_int_eq(v, -1);
    ck_assert_str_eq(qfi_tactic_cache_path(tc), path);
    qfi_tactic_cache_free(tc);

    /* another device key is another file, empty */
    tc = qfi_tactic_cache_open("GPU Y sm90 driver 1");
    ck_assert_str_ne(qfi_tactic_cache_path(tc), path);
    ck_assert(!qfi_tactic_cache_get(tc, "conv:a", &v));
    qfi_tactic_cache_free(tc);
}
END_TEST

START_TEST(foreign_and_garbage)
{
    use_dir();
    qfi_tactic_cache *tc = qfi_tactic_cache_open("dev A");
    char path[512];
    snprintf(path, sizeof path, "%s", qfi_tactic_cache_path(tc));
    qfi_tactic_cache_free(tc);
    int v;

    /* a good header with garbage among the entries: only the good lines count */
    write_file(path, "qforge-tactics 1\ndevice dev A\nk1 5\nk2\nk3 x\nk4 6 7\n\n   \nk5 -2\n");
    tc = qfi_tactic_cache_open("dev A");
    ck_assert(qfi_tactic_cache_get(tc, "k1", &v) && v == 5);
    ck_assert(qfi_tactic_cache_get(tc, "k5", &v) && v == -2);
    ck_assert(!qfi_tactic_cache_get(tc, "k2", &v));
    ck_assert(!qfi_tactic_cache_get(tc, "k3", &v));
    ck_assert(!qfi_tactic_cache_get(tc, "k4", &v));
    qfi_tactic_cache_free(tc);

    /* another version, or another device under the same name: ignored */
    write_file(path, "qforge-tactics 2\ndevice dev A\nk1 5\n");
    tc = qfi_tactic_cache_open("dev A");
    ck_assert(!qfi_tactic_cache_get(tc, "k1", &v));
    qfi_tactic_cache_free(tc);
    write_file(path, "qforge-tactics 1\ndevice dev B\nk1 5\n");
    tc = qfi_tactic_cache_open("dev A");
    ck_assert(!qfi_tactic_cache_get(tc, "k1", &v));
    qfi_tactic_cache_free(tc);

    /* an over-long line and binary junk */
    FILE *f = fopen(path, "w");
    fputs("qforge-tactics 1\ndevice dev A\n", f);
    for (int i = 0; i < 5000; i++) fputc('x', f);
    fputs(" 1\nk6 9\n\x01\x02\xff 3\n", f);
    fclose(f);
    tc = qfi_tactic_cache_open("dev A");
    ck_assert(qfi_tactic_cache_get(tc, "k6", &v) && v == 9);
    qfi_tactic_cache_free(tc);
}
END_TEST

START_TEST(bad_keys_and_off)
{
    use_dir();
    qfi_tactic_cache *tc = qfi_tactic_cache_open("dev C");
    int v;
    qfi_tactic_cache_put(tc, "has space", 1);
    qfi_tactic_cache_put(tc, "", 1);
    qfi_tactic_cache_put(tc, "tab\tkey", 1);
    ck_assert(!qfi_tactic_cache_get(tc, "has space", &v));
    ck_assert(!qfi_tactic_cache_get(tc, "", &v));
    qfi_tactic_cache_free(tc);
    ck_assert_ptr_null(qfi_tactic_cache_open("dev\nwith newline"));

    /* caching off: NULL, and NULL is accepted everywhere */
    setenv("QFORGE_CACHE_DIR", "", 1);
    tc = qfi_tactic_cache_open("dev C");
    ck_assert_ptr_null(tc);
    qfi_tactic_cache_put(tc, "k", 1);
    ck_assert(!qfi_tactic_cache_get(tc, "k", &v));
    qfi_tactic_cache_save(tc);
    qfi_tactic_cache_free(tc);

    /* a folder that cannot be made: no cache */
    setenv("QFORGE_CACHE_DIR", "/proc/qforge-no-such-dir/x", 1);
    ck_assert_ptr_null(qfi_tactic_cache_open("dev C"));
}
END_TEST

START_TEST(unwritable)
{
    if (geteuid() == 0) return; /* root writes anywhere */
    use_dir();
    qfi_tactic_cache *tc = qfi_tactic_cache_open("dev D");
    chmod(dir, 0555);
    qfi_tactic_cache_put(tc, "k", 1);
    qfi_tactic_cache_save(tc); /* logs, does not fail */
    chmod(dir, 0777);
    int v;
    ck_assert(qfi_tactic_cache_get(tc, "k", &v) && v == 1);
    qfi_tactic_cache_free(tc);
}
END_TEST

int main(void)
{
    snprintf(dir, sizeof dir, "/tmp/qforge-tactics-%ld", (long)getpid());
    mkdir(dir, 0777);
    Suite *s = suite_create("tactic_cache");
    TCase *tc = tcase_create("store");
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, foreign_and_garbage);
    tcase_add_test(tc, bad_keys_and_off);
    tcase_add_test(tc, unwritable);
    suite_add_tcase(s, tc);
    int rc = run_suite(s);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 99;
    return rc;
}
