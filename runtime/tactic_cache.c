/* Tactic cache: a key -> int store in a text file, one per device key, under
 * $QFORGE_CACHE_DIR, else $XDG_CACHE_HOME/qforge, else ~/.cache/qforge:
 *     qforge-tactics 1
 *     device <device key>
 *     <key> <value>
 *     ...
 * A file whose header differs (another version, a foreign file) is ignored
 * and rewritten; a line that does not parse is skipped. The file is only a
 * shortcut: whatever it holds, callers check a value before using it. */
#include "internal.h"
#include "tactic_cache.h"
#include <errno.h>
#include <sys/stat.h>

#define CACHE_VERSION 1
#define MAX_ENTRIES 100000
#define MAX_LINE 1024

typedef struct entry {
    char *key;
    int value;
} entry;

struct qfi_tactic_cache {
    char *path;
    char *device;
    entry *e;
    int n, cap;
    bool dirty;
};

/* mkdir that accepts an existing folder. */
static bool ensure_dir(const char *dir)
{
    return mkdir(dir, 0777) == 0 || errno == EEXIST;
}

/* The cache folder, made if missing; false when there is none to use. */
static bool cache_dir(char *out, size_t len)
{
    const char *d = getenv("QFORGE_CACHE_DIR");
    if (d) {
        if (!*d) return false; /* caching off */
        snprintf(out, len, "%s", d);
        return ensure_dir(out);
    }
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char base[3072];
    if (xdg && *xdg) snprintf(base, sizeof base, "%s", xdg);
    else if (home && *home) snprintf(base, sizeof base, "%s/.cache", home);
    else return false;
    if (!ensure_dir(base)) return false;
    snprintf(out, len, "%s/qforge", base);
    return ensure_dir(out);
}

static int find(const qfi_tactic_cache *tc, const char *key)
{
    for (int i = 0; i < tc->n; i++)
        if (!strcmp(tc->e[i].key, key)) return i;
    return -1;
}

static bool valid_key(const char *key)
{
    if (!*key || strlen(key) >= MAX_LINE / 2) return false;
    for (const char *p = key; *p; p++)
        if (*p <= ' ' || *p > '~') return false;
    return true;
}

/* Adds or replaces; false on a bad key or no memory (the cache just misses). */
static bool set(qfi_tactic_cache *tc, const char *key, int value)
{
    if (!valid_key(key)) return false;
    int i = find(tc, key);
    if (i >= 0) {
        tc->e[i].value = value;
        return true;
    }
    if (tc->n == MAX_ENTRIES) return false;
    if (tc->n == tc->cap) {
        int cap = tc->cap ? tc->cap * 2 : 64;
        entry *e = realloc(tc->e, (size_t)cap * sizeof *e);
        if (!e) return false;
        tc->e = e;
        tc->cap = cap;
    }
    char *k = qfi_strdup(key);
    if (!k) return false;
    tc->e[tc->n++] = (entry){k, value};
    return true;
}

/* Reads the file's entries if its header is this version and device. */
static void load(qfi_tactic_cache *tc)
{
    FILE *f = fopen(tc->path, "r");
    if (!f) return;
    char line[MAX_LINE], want[MAX_LINE + 16], dev[MAX_LINE + 16];
    snprintf(want, sizeof want, "qforge-tactics %d\n", CACHE_VERSION);
    snprintf(dev, sizeof dev, "device %s\n", tc->device);
    bool ok = fgets(line, sizeof line, f) && !strcmp(line, want) && fgets(line, sizeof line, f) && !strcmp(line, dev);
    while (ok && fgets(line, sizeof line, f)) {
        size_t len = strlen(line);
        if (len == 0 || line[len - 1] != '\n') { /* over-long: skip the rest of it */
            int ch;
            while (len && (ch = fgetc(f)) != EOF && ch != '\n') {}
            continue;
        }
        char key[MAX_LINE];
        int value;
        char tail;
        if (sscanf(line, "%1023s %d %c", key, &value, &tail) == 2) set(tc, key, value);
    }
    fclose(f);
    if (!ok) qf_log(QF_LOG_DEBUG, "%s: not a tactic cache of this version and device; it will be rewritten", tc->path);
}

qfi_tactic_cache *qfi_tactic_cache_open(const char *device_key)
{
    char dir[4096];
    if (!cache_dir(dir, sizeof dir)) return NULL;
    /* the file is named by a hash of the key: device names hold any character */
    qf_sha256_ctx h;
    uint8_t digest[32];
    char hex[65];
    qf_sha256_init(&h);
    qf_sha256_update(&h, device_key, strlen(device_key));
    qf_sha256_final(&h, digest);
    qf_sha256_hex(digest, hex);
    hex[16] = '\0';
    qfi_tactic_cache *tc = qfi_calloc(1, sizeof *tc);
    if (!tc) return NULL;
    size_t len = strlen(dir) + 40;
    tc->path = malloc(len);
    tc->device = qfi_strdup(device_key);
    if (!tc->path || !tc->device || strchr(device_key, '\n')) {
        qfi_tactic_cache_free(tc);
        return NULL;
    }
    snprintf(tc->path, len, "%s/tactics-%s.txt", dir, hex);
    load(tc);
    return tc;
}

bool qfi_tactic_cache_get(const qfi_tactic_cache *tc, const char *key, int *value)
{
    int i = tc ? find(tc, key) : -1;
    if (i < 0) return false;
    *value = tc->e[i].value;
    return true;
}

void qfi_tactic_cache_put(qfi_tactic_cache *tc, const char *key, int value)
{
    int old;
    if (!tc || (qfi_tactic_cache_get(tc, key, &old) && old == value)) return;
    if (set(tc, key, value)) tc->dirty = true;
}

void qfi_tactic_cache_save(qfi_tactic_cache *tc)
{
    if (!tc || !tc->dirty) return;
    qfi_atomic_file af;
    qf_status st = qfi_atomic_open(&af, tc->path);
    if (st == QF_OK) {
        fprintf(af.f, "qforge-tactics %d\ndevice %s\n", CACHE_VERSION, tc->device);
        for (int i = 0; i < tc->n; i++) fprintf(af.f, "%s %d\n", tc->e[i].key, tc->e[i].value);
        st = qfi_atomic_commit(&af);
    }
    if (st != QF_OK) qf_log(QF_LOG_WARN, "tactic cache not saved: %s", qf_error_message());
    else tc->dirty = false;
}

void qfi_tactic_cache_free(qfi_tactic_cache *tc)
{
    if (!tc) return;
    for (int i = 0; i < tc->n; i++) free(tc->e[i].key);
    free(tc->e);
    free(tc->path);
    free(tc->device);
    free(tc);
}

const char *qfi_tactic_cache_path(const qfi_tactic_cache *tc)
{
    return tc ? tc->path : NULL;
}
