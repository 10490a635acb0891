/* libFuzzer harness: one text file read as each kind of class or label list
 * qforge takes -- a synsets file, a --classes file, and through a dataset a
 * --classes file for class folders, a --synsets file for wnid-named images and
 * a --labels list -- with the lookups eval makes checked against the lists. */
#include "fuzz_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char list[600];
static qf_dataset *folders, *flat; /* class folders; ImageNet-style names in one folder */

static void fail(const char *what)
{
    fprintf(stderr, "fuzz: %s\n", what);
    abort();
}

static void touch(const char *rel)
{
    char path[700];
    fz_path(path, sizeof path, rel);
    fz_write(path, "", 0);
}

static void mkdir_in(const char *rel)
{
    char path[700];
    if (mkdir(fz_path(path, sizeof path, rel), 0700) != 0) fail("cannot make the dataset folders");
}

static qf_dataset *open_dataset(const char *rel)
{
    char path[700];
    qf_dataset *ds = NULL;
    if (qf_dataset_open(fz_path(path, sizeof path, rel), &ds) != QF_OK) fail(qf_error_message());
    return ds;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    mkdir_in("folders");
    mkdir_in("folders/cat");
    mkdir_in("folders/dog");
    mkdir_in("folders/dog/puppies");
    mkdir_in("folders/hot dog");
    touch("folders/cat/1.png");
    touch("folders/dog/2.jpg");
    touch("folders/dog/puppies/3.pgm");
    touch("folders/hot dog/4.JPEG");
    mkdir_in("flat");
    touch("flat/n01440764_tench.JPEG");
    touch("flat/n01443537_goldfish.png");
    touch("flat/n01443537_2.ppm");
    folders = open_dataset("folders");
    flat = open_dataset("flat");
    fz_path(list, sizeof list, "labels.txt");
    return 0;
}

static void check_classes(qf_status st, qf_classes *c)
{
    fz_check_error(st, "labels.txt");
    if (st != QF_OK) return;
    int n = qf_classes_count(c);
    if (n < 1) fail("a class list without classes");
    for (int k = 0; k < n; k++) {
        if (!qf_classes_key(c, k)[0] || !qf_classes_name(c, k)) fail("an empty class");
        if (qf_classes_find(c, qf_classes_key(c, k)) != k) fail("a class not found by its key");
    }
    qf_classes_free(c);
}

/* After labelling: every image has a label, within the classes when there are classes. */
static void check_labels(qf_status st, const qf_dataset *ds)
{
    fz_check_error(st, "labels.txt");
    if (st != QF_OK) return;
    const qf_classes *c = qf_dataset_classes(ds);
    for (int64_t i = 0; i < qf_dataset_count(ds); i++) {
        int l = qf_dataset_label(ds, i);
        if (l < 0 || (c && l >= qf_classes_count(c))) fail("a label out of range");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_write(list, data, size);
    qf_classes *c = NULL;
    check_classes(qf_classes_read_synsets(list, &c), c);
    c = NULL;
    check_classes(qf_classes_read_lines(list, &c), c);
    check_labels(qf_dataset_label_folders(folders, list), folders);
    check_labels(qf_dataset_label_list(folders, list), folders);
    check_labels(qf_dataset_label_synsets(flat, list), flat);
    check_labels(qf_dataset_label_list(flat, list), flat);
    return 0;
}
