/* Building a dataset: the recursive folder scan (image files by extension,
 * sorted by path), file lists, accessors and the -n evenly spaced subset. */
#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include "datasets_impl.h"

// Deeper than this is taken for a symlink loop.
#define MAX_DEPTH 64

static qf_status add_string(char ***arr, int64_t *n, int64_t *cap, const char *s)
{
    if (*n == *cap) {
        int64_t nc = *cap ? *cap * 2 : 256;
        char **p = realloc(*arr, sizeof(char *) * (size_t)nc);
        if (!p) return qf_error(QF_ERR_NOMEM, "out of memory listing files");
        *arr = p;
        *cap = nc;
    }
    char *copy = qfi_strdup(s);
    if (!copy) return QF_ERR_NOMEM;
    (*arr)[(*n)++] = copy;
    return QF_OK;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static qf_status scan_dir(qf_dataset *ds, const char *dir, int depth, int64_t *nfold, int64_t *capfold)
{
    if (depth > MAX_DEPTH)
        return qf_error(QF_ERR_INVALID, "%s: folders nested more than %d deep (a symlink loop?)", dir, MAX_DEPTH);
    DIR *d = opendir(dir);
    if (!d) return qf_error(QF_ERR_IO, "%s: %s", dir, strerror(errno));
    qf_status st = QF_OK;
    size_t dlen = strlen(dir);
    char *path = NULL;
    for (struct dirent *e; st == QF_OK && (e = readdir(d));) {
        // Hidden entries are skipped: ".", "..", and files such as macOS's
        // "._x.jpg" resource forks, which carry an image extension but are not images.
        if (e->d_name[0] == '.') continue;
        size_t len = dlen + 1 + strlen(e->d_name) + 1;
        char *p = realloc(path, len);
        if (!p) {
            st = qf_error(QF_ERR_NOMEM, "out of memory scanning %s", dir);
            break;
        }
        path = p;
        snprintf(path, len, "%s/%s", dir, e->d_name);
        bool is_dir = e->d_type == DT_DIR, is_reg = e->d_type == DT_REG;
        if (e->d_type == DT_UNKNOWN || e->d_type == DT_LNK) {
            struct stat sb;
            if (stat(path, &sb) != 0) {
                qf_log(QF_LOG_WARN, "%s: %s; skipped", path, strerror(errno));
                continue;
            }
            is_dir = S_ISDIR(sb.st_mode);
            is_reg = S_ISREG(sb.st_mode);
        }
        if (is_dir) {
            if (depth == 0) st = add_string(&ds->folders, nfold, capfold, e->d_name);
            if (st == QF_OK) st = scan_dir(ds, path, depth + 1, nfold, capfold);
        } else if (is_reg && qf_image_has_image_extension(e->d_name)) {
            st = add_string(&ds->full, &ds->n, &ds->cap, path);
        }
    }
    free(path);
    closedir(d);
    return st;
}

qf_status qf_dataset_open(const char *dir, qf_dataset **out)
{
    *out = NULL;
    struct stat sb;
    if (stat(dir, &sb) != 0) return qf_error(QF_ERR_IO, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return qf_error(QF_ERR_USAGE, "%s: not a folder", dir);
    qf_dataset *ds = qfi_calloc(1, sizeof(*ds));
    if (!ds) return QF_ERR_NOMEM;
    if (!(ds->root = qfi_strdup(dir))) {
        free(ds);
        return QF_ERR_NOMEM;
    }
    size_t len = strlen(ds->root);
    while (len > 1 && ds->root[len - 1] == '/') ds->root[--len] = 0;
    ds->rel_off = strcmp(ds->root, "/") == 0 ? 1 : len + 1;

    int64_t nfold = 0, capfold = 0;
    qf_status st = scan_dir(ds, ds->root, 0, &nfold, &capfold);
    ds->n_folders = (int)nfold;
    if (st == QF_OK && ds->n == 0)
        st = qf_error(QF_ERR_INVALID, "%s: no images (.png .jpg .jpeg .ppm .pgm .pnm) in this folder", dir);
    if (st != QF_OK) {
        qf_dataset_free(ds);
        return st;
    }
    // Every path starts with the same root + '/', so sorting full paths sorts
    // the relative ones by strcmp.
    qsort(ds->full, (size_t)ds->n, sizeof(char *), cmp_str);
    if (ds->n_folders > 0) qsort(ds->folders, (size_t)ds->n_folders, sizeof(char *), cmp_str);
    *out = ds;
    return QF_OK;
}

qf_status qf_dataset_from_files(const char *const *paths, int n, qf_dataset **out)
{
    *out = NULL;
    if (n <= 0) return qf_error(QF_ERR_USAGE, "no image files given");
    qf_dataset *ds = qfi_calloc(1, sizeof(*ds));
    if (!ds) return QF_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        qf_status st = add_string(&ds->full, &ds->n, &ds->cap, paths[i]);
        if (st != QF_OK) {
            qf_dataset_free(ds);
            return st;
        }
    }
    *out = ds;
    return QF_OK;
}

void qf_dataset_free(qf_dataset *ds)
{
    if (!ds) return;
    for (int64_t i = 0; i < ds->n; i++) free(ds->full[i]);
    for (int i = 0; i < ds->n_folders; i++) free(ds->folders[i]);
    free(ds->full);
    free(ds->folders);
    free(ds->labels);
    qf_classes_free(ds->classes);
    free(ds->root);
    free(ds);
}

int64_t qf_dataset_count(const qf_dataset *ds) { return ds->n; }

const char *qf_dataset_path(const qf_dataset *ds, int64_t i)
{
    QF_ASSERT(i >= 0 && i < ds->n);
    return ds->full[i] + ds->rel_off;
}

const char *qf_dataset_full_path(const qf_dataset *ds, int64_t i)
{
    QF_ASSERT(i >= 0 && i < ds->n);
    return ds->full[i];
}

// Keeps (chosen = true) or drops the files at i*n/count for i = 0..count-1:
// strictly increasing because n > count, so the files stay in order and are distinct.
static void keep_evenly_spaced(qf_dataset *ds, int64_t count, bool chosen)
{
    int64_t n = ds->n, next_pick = 0, picked = 0, kept = 0;
    for (int64_t j = 0; j < n; j++) {
        bool pick = picked < count && j == next_pick;
        if (pick) next_pick = ++picked * n / count;
        if (pick == chosen) {
            ds->full[kept] = ds->full[j];
            if (ds->labels) ds->labels[kept] = ds->labels[j];
            kept++;
        } else {
            free(ds->full[j]);
        }
    }
    ds->n = kept;
}

void qf_dataset_subset(qf_dataset *ds, int64_t count)
{
    if (count <= 0 || count >= ds->n) return;
    keep_evenly_spaced(ds, count, true);
}

void qf_dataset_subset_rest(qf_dataset *ds, int64_t count)
{
    if (count <= 0) return;
    if (count >= ds->n) count = ds->n;
    keep_evenly_spaced(ds, count, false);
}
