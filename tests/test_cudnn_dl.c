/* The cuDNN loader (runtime/cuda/cudnn_dl.cu) without a GPU: cuDNN is
 * optional, so every way of not having it must end in "no cuDNN tactics"
 * with the reason logged, never an error; and where the toolkit's cuDNN 9 is
 * on the loader's path, every function the table names must resolve in it.
 * check forks per test, so each test loads afresh. */
#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "qforge/status.h"
#include "../runtime/cuda/cudnn_dl.h"

static char logged[1024];

static void capture(void *user, qf_log_level level, const char *msg)
{
    (void)user, (void)level;
    size_t len = strlen(logged);
    snprintf(logged + len, sizeof logged - len, "%s\n", msg);
}

static void setup(void)
{
    logged[0] = 0;
    qf_log_set(capture, NULL, QF_LOG_DEBUG);
}

START_TEST(off_by_environment)
{
    setenv("QFORGE_CUDNN", "0", 1);
    ck_assert(!qfi_cudnn_load());
    ck_assert_uint_eq(qfi_cudnn_version(), 0);
    ck_assert_msg(strstr(logged, "QFORGE_CUDNN=0"), "%s", logged);
    ck_assert_str_eq(qfi_cudnn_why(), "off (QFORGE_CUDNN=0)");
}
END_TEST

START_TEST(missing_file)
{
    setenv("QFORGE_CUDNN", "/nonexistent/libcudnn.so.9", 1);
    ck_assert(!qfi_cudnn_load());
    ck_assert_uint_eq(qfi_cudnn_version(), 0);
    ck_assert_msg(strstr(logged, "no cuDNN tactics: cannot load /nonexistent/libcudnn.so.9"), "%s", logged);
}
END_TEST

/* a library that is not cuDNN: loads, lacks the symbols, says which */
START_TEST(not_cudnn)
{
    setenv("QFORGE_CUDNN", "libz.so.1", 1);
    ck_assert(!qfi_cudnn_load());
    ck_assert_msg(strstr(logged, "libz.so.1 has no cudnnGetVersion"), "%s", logged);
}
END_TEST

START_TEST(toolkit_cudnn)
{
    unsetenv("QFORGE_CUDNN");
    void *h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("  no libcudnn.so.9 on the loader's path (%s): only the absent case is checked\n", dlerror());
        ck_assert(!qfi_cudnn_load());
        return;
    }
    size_t (*get_version)(void) = (size_t (*)(void))dlsym(h, "cudnnGetVersion");
    ck_assert_ptr_nonnull(get_version);
    const size_t v = get_version();
    const bool ok = qfi_cudnn_load();
    if (v < 90000 || v >= 100000) {
        ck_assert(!ok); /* another major: its backend attributes are not the ones used */
    } else {
        ck_assert_msg(ok, "%s", logged);
        ck_assert_uint_eq(qfi_cudnn_version(), v);
        printf("  libcudnn.so.9 version %zu: every function of the table resolves\n", v);
    }
    dlclose(h);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cudnn_dl");
    TCase *t = tcase_create("load");
    tcase_add_checked_fixture(t, setup, NULL);
    tcase_add_test(t, off_by_environment);
    tcase_add_test(t, missing_file);
    tcase_add_test(t, not_cudnn);
    tcase_add_test(t, toolkit_cudnn);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
