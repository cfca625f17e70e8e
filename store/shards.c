/* shards.c - a sharded store's files (shards.h, schema/SHARDS.md): the
 * manifest and each shard's shard.id, written once and atomically (a
 * temporary file linked into place, so a task racing another either wins or
 * reads the winner's), read back strictly; the shard of a record id. Opening
 * a root as one store is store_shards.c's. */
#include "store/shards.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/sha256.h"
#include "store/payload.h"

#define HASH_NAME "lazyshard-v1" /* the manifest's 'hash' line; a new scheme gets a new name */

int lz_store_exists(const char *dir)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/meta.sqlite", dir);
    if (access(p, F_OK) == 0) return 1;
    return lz_shards_is_root(dir);
}

int lz_shards_is_root(const char *dir)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, LZ_SHARDS_MANIFEST);
    return access(p, F_OK) == 0;
}

int lz_shards_of(const char *source_id, int n)
{
    if (n <= 1) return 0;
    lz_sha256_ctx h;
    uint8_t d[32];
    lz_sha256_init(&h);
    lz_sha256_update(&h, HASH_NAME, strlen(HASH_NAME));
    lz_sha256_update(&h, source_id, strlen(source_id));
    lz_sha256_final(&h, d);
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = x << 8 | d[i];
    return (int)(x % (uint64_t)n);
}

int lz_shards_candidates(const char *ext_id, int n, int out[2])
{
    out[0] = lz_shards_of(ext_id, n);
    const char *h = strrchr(ext_id, '#');
    if (!h || !h[1] || h - ext_id >= 4096) return 1;
    for (const char *p = h + 1; *p; p++)
        if (*p < '0' || *p > '9') return 1;
    char src[4096];
    memcpy(src, ext_id, (size_t)(h - ext_id));
    src[h - ext_id] = 0;
    out[1] = lz_shards_of(src, n);
    return out[1] == out[0] ? 1 : 2;
}

void lz_shards_dir(const char *root, int i, char *buf, size_t len) { snprintf(buf, len, "%s/shard-%04d", root, i); }

static const char *dtype_word(int dtype)
{
    return dtype == LZ_PAYLOAD_DTYPE_F32 ? "f32" : dtype == LZ_PAYLOAD_DTYPE_FP8 ? "fp8" : "bf16";
}

static int dtype_of(const char *w)
{
    return !strcmp(w, "bf16") ? LZ_PAYLOAD_DTYPE_BF16 : !strcmp(w, "f32") ? LZ_PAYLOAD_DTYPE_F32
                                                      : !strcmp(w, "fp8") ? LZ_PAYLOAD_DTYPE_FP8 : 0;
}

static int is_hex(const char *s, size_t n)
{
    if (strlen(s) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

/* ---- reading: "key value" lines after a format line; '#' starts a comment line ---- */

typedef struct {
    char format[32];
    int version;
    char set[256], model[256], hash[256], dtype[256];
    int shards, shard; /* -1 when absent */
} kv_file;

/* Reads path into k. ENOTFOUND when absent; ECORRUPT names the line. */
static int read_kv(const char *path, kv_file *k, char *err, size_t errlen)
{
    memset(k, 0, sizeof *k);
    k->shards = k->shard = -1;
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? lz_fail(err, errlen, LZ_ENOTFOUND, "%s not found", path)
                                   : lz_fail(err, errlen, LZ_EIO, "cannot read %s: %s", path, strerror(errno));
    char line[512];
    int ln = 0, st = LZ_OK;
    while (!st && fgets(line, sizeof line, f)) {
        ln++;
        size_t n = strlen(line);
        if (n && line[n - 1] != '\n' && !feof(f)) {
            st = lz_fail(err, errlen, LZ_ECORRUPT, "%s:%d: line too long", path, ln);
            break;
        }
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ')) line[--n] = 0;
        if (!n || line[0] == '#') continue;
        char key[32], val[256] = "";
        const int got = sscanf(line, "%31s %255s", key, val);
        if (got < 1 || (got < 2 && k->format[0])) {
            st = lz_fail(err, errlen, LZ_ECORRUPT, "%s:%d: expected 'key value', got '%.80s'", path, ln, line);
            break;
        }
        char *end;
        if (!k->format[0]) { /* the first line: the format and its version */
            snprintf(k->format, sizeof k->format, "%s", key);
            k->version = (int)strtol(val, &end, 10);
            if (*end) st = lz_fail(err, errlen, LZ_ECORRUPT, "%s:%d: bad format version '%s'", path, ln, val);
        } else if (!strcmp(key, "set")) snprintf(k->set, sizeof k->set, "%s", val);
        else if (!strcmp(key, "model")) snprintf(k->model, sizeof k->model, "%s", val);
        else if (!strcmp(key, "hash")) snprintf(k->hash, sizeof k->hash, "%s", val);
        else if (!strcmp(key, "kv_dtype")) snprintf(k->dtype, sizeof k->dtype, "%s", val);
        else if (!strcmp(key, "shards") || !strcmp(key, "shard")) {
            long v = strtol(val, &end, 10);
            if (*end || v < 0 || v > LZ_SHARDS_MAX)
                st = lz_fail(err, errlen, LZ_ECORRUPT, "%s:%d: bad %s '%s'", path, ln, key, val);
            else if (key[5]) k->shards = (int)v;
            else k->shard = (int)v;
        } /* other keys (created, ...) are informational */
    }
    if (!st && ferror(f)) st = lz_fail(err, errlen, LZ_EIO, "cannot read %s", path);
    fclose(f);
    return st;
}

int lz_shards_read(const char *root, lz_shards_manifest *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", root, LZ_SHARDS_MANIFEST);
    kv_file k;
    int st = read_kv(path, &k, err, errlen);
    if (st) return st;
    if (strcmp(k.format, "lazy-shards") || k.version != 1)
        return lz_fail(err, errlen, LZ_ECORRUPT, "%s: not a shard manifest of version 1 (first line '%s %d')", path,
                       k.format, k.version);
    if (strcmp(k.hash, HASH_NAME))
        return lz_fail(err, errlen, LZ_ECORRUPT, "%s: hash '%s' is not one this build knows (%s)", path, k.hash,
                       HASH_NAME);
    if (k.shards < 1) return lz_fail(err, errlen, LZ_ECORRUPT, "%s: no 'shards N' line (N >= 1)", path);
    if (!is_hex(k.set, 32)) return lz_fail(err, errlen, LZ_ECORRUPT, "%s: 'set' is not 32 hex digits", path);
    if (!is_hex(k.model, 64)) return lz_fail(err, errlen, LZ_ECORRUPT, "%s: 'model' is not a fingerprint (64 hex digits)", path);
    if (!(m->kv_dtype = dtype_of(k.dtype)))
        return lz_fail(err, errlen, LZ_ECORRUPT, "%s: kv_dtype '%s' is none of bf16, f32, fp8", path, k.dtype);
    m->n_shards = k.shards;
    snprintf(m->set_id, sizeof m->set_id, "%.32s", k.set);
    snprintf(m->model, sizeof m->model, "%.64s", k.model);
    return LZ_OK;
}

/* ---- writing once: a temporary file linked into place (EEXIST: another was first) ---- */

/* Writes text as path unless path exists (then nothing is written: another was first). LZ_OK or EIO. */
static int write_once(const char *path, const char *text, char *err, size_t errlen)
{
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%ld", path, (long)getpid(), (long)time(NULL));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0) return lz_fail(err, errlen, LZ_EIO, "cannot create %s: %s", tmp, strerror(errno));
    size_t n = strlen(text);
    int ok = write(fd, text, n) == (ssize_t)n && fsync(fd) == 0;
    int e = errno;
    close(fd);
    if (!ok) {
        unlink(tmp);
        return lz_fail(err, errlen, LZ_EIO, "cannot write %s: %s", tmp, strerror(e));
    }
    int rc = link(tmp, path), le = errno;
    unlink(tmp);
    if (rc == 0) {
        char dir[4300]; /* the new name durable too */
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) fsync(dfd), close(dfd);
        return LZ_OK;
    }
    if (le == EEXIST) return LZ_OK;
    return lz_fail(err, errlen, LZ_EIO, "cannot create %s: %s", path, strerror(le));
}

static void random_hex(char out[33])
{
    uint8_t b[16] = { 0 }, d[32];
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    ssize_t got = fd >= 0 ? read(fd, b, sizeof b) : -1;
    if (fd >= 0) close(fd);
    if (got != (ssize_t)sizeof b) { /* no urandom: time, pid and an address */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        long x[4] = { (long)ts.tv_sec, ts.tv_nsec, (long)getpid(), (long)(intptr_t)&ts };
        memcpy(b, x, sizeof b < sizeof x ? sizeof b : sizeof x);
    }
    lz_sha256(b, sizeof b, d);
    char hex[65];
    lz_sha256_hex(d, hex);
    memcpy(out, hex, 32);
    out[32] = 0;
}

int lz_shards_create(const char *root, int n, const uint8_t fingerprint[32], int kv_dtype, lz_shards_manifest *out,
                     char *err, size_t errlen)
{
    if (n < 1 || n > LZ_SHARDS_MAX) return lz_fail(err, errlen, LZ_EINVAL, "shard count %d outside 1..%d", n, LZ_SHARDS_MAX);
    char path[4200], fp[65];
    lz_sha256_hex(fingerprint, fp);
    snprintf(path, sizeof path, "%s/meta.sqlite", root);
    if (access(path, F_OK) == 0)
        return lz_fail(err, errlen, LZ_EINVAL, "store %s is an unsharded store (%s): a sharded store needs a new folder",
                       root, path);
    if (mkdir(root, 0777) != 0 && errno != EEXIST)
        return lz_fail(err, errlen, LZ_EIO, "store %s: cannot create folder: %s", root, strerror(errno));
    snprintf(path, sizeof path, "%s/%s", root, LZ_SHARDS_MANIFEST);
    if (access(path, F_OK) != 0) {
        char set[33], text[1024], when[40];
        random_hex(set);
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        snprintf(text, sizeof text,
                 "lazy-shards 1\n# a sharded lazy store (schema/SHARDS.md); written once, never edited\n"
                 "set %s\nshards %d\nhash %s\nmodel %s\nkv_dtype %s\ncreated %s\n",
                 set, n, HASH_NAME, fp, dtype_word(kv_dtype), when);
        int rc = write_once(path, text, err, errlen);
        if (rc) return rc;
    }
    int st = lz_shards_read(root, out, err, errlen);
    if (st) return st;
    if (out->n_shards != n)
        return lz_fail(err, errlen, LZ_EINVAL, "store %s has %d shards (%s), not %d: give --shards %d, or use a new store",
                       root, out->n_shards, path, n, out->n_shards);
    if (strcmp(out->model, fp))
        return lz_fail(err, errlen, LZ_EINVAL, "store %s was built with model %.16s (%s); refusing model %.16s: a store "
                       "holds one model. Use another --store or the original model", root, out->model, path, fp);
    if (kv_dtype && kv_dtype != out->kv_dtype)
        return lz_fail(err, errlen, LZ_EINVAL, "store %s holds %s KV payloads (%s); refusing --kv-dtype %s", root,
                       dtype_word(out->kv_dtype), path, dtype_word(kv_dtype));
    return LZ_OK;
}

int lz_shards_check_id(const char *root, const lz_shards_manifest *m, int i, char *err, size_t errlen)
{
    char dir[4200], path[4300];
    lz_shards_dir(root, i, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/%s", dir, LZ_SHARDS_ID_FILE);
    kv_file k;
    int st = read_kv(path, &k, err, errlen);
    if (st == LZ_ENOTFOUND)
        return lz_fail(err, errlen, LZ_ENOTFOUND, "store %s: shard %d of %d (%s) has no %s: a folder of no sharded store",
                       root, i, m->n_shards, dir, LZ_SHARDS_ID_FILE);
    if (st) return st;
    if (strcmp(k.format, "lazy-shard") || k.version != 1)
        return lz_fail(err, errlen, LZ_ECORRUPT, "%s: not a shard id of version 1", path);
    if (strcmp(k.set, m->set_id) || k.shard != i || k.shards != m->n_shards)
        return lz_fail(err, errlen, LZ_EINVAL,
                       "store %s: shard folder %s is shard %d of %d of set %.12s, but the manifest wants shard %d of %d "
                       "of set %.12s: it belongs to another sharded store (copied or renamed?)",
                       root, dir, k.shard, k.shards, k.set, i, m->n_shards, m->set_id);
    return LZ_OK;
}

int lz_shards_claim(const char *root, const lz_shards_manifest *m, int i, char *err, size_t errlen)
{
    if (i < 0 || i >= m->n_shards)
        return lz_fail(err, errlen, LZ_EINVAL, "store %s: shard %d outside 0..%d", root, i, m->n_shards - 1);
    char dir[4200], path[4300], text[256];
    lz_shards_dir(root, i, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/%s", dir, LZ_SHARDS_ID_FILE);
    if (access(path, F_OK) == 0) return lz_shards_check_id(root, m, i, err, errlen);
    snprintf(path, sizeof path, "%s/meta.sqlite", dir);
    if (access(path, F_OK) == 0) /* a store put there by hand: not ours to adopt */
        return lz_fail(err, errlen, LZ_EINVAL, "store %s: %s holds a store but no %s: not a shard of this set", root, dir,
                       LZ_SHARDS_ID_FILE);
    /* a new shard joins the shards there: one of them must agree with the manifest (an edited
     * manifest would otherwise add shards of another count to the set) */
    for (int j = 0; j < m->n_shards; j++) {
        char other[4200], id[4300];
        lz_shards_dir(root, j, other, sizeof other);
        snprintf(id, sizeof id, "%s/%s", other, LZ_SHARDS_ID_FILE);
        if (j == i || access(id, F_OK) != 0) continue;
        int st = lz_shards_check_id(root, m, j, err, errlen);
        if (st) return st;
        break;
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return lz_fail(err, errlen, LZ_EIO, "store %s: cannot create %s: %s", root, dir, strerror(errno));
    snprintf(path, sizeof path, "%s/%s", dir, LZ_SHARDS_ID_FILE);
    snprintf(text, sizeof text, "lazy-shard 1\nset %s\nshard %d\nshards %d\n", m->set_id, i, m->n_shards);
    int rc = write_once(path, text, err, errlen);
    if (rc) return rc;
    return lz_shards_check_id(root, m, i, err, errlen);
}
