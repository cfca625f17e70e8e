/* test_repair.c - a real store (the shipped CPU model, models/default.gguf, on
 * 80 documents of the demo corpus: two leaves of payload keys) damaged below its API: payloads deleted,
 * unreferenced ones added, and LMDB's own pages overwritten in kv/data.mdb
 * (a leaf of the payload tree with garbage, the first page of one payload's
 * overflow run with zeros). Then, each on a fresh copy of that damage:
 *   - --check finds it (exit 4, the damaged pages named) without crashing;
 *   - ONE --repair gives a clean --check, and no unreferenced payload is left
 *     (LMDB holds exactly the rows' distinct keys and the prefix);
 *   - a plain re-run of the unchanged corpus restores what was lost (it checks
 *     that every row's payload exists) and leaves a clean store;
 *   - --gc removes every unreferenced payload of the damaged store.
 * Runs $LZ_BIN/lazyingest (default build/bin); SKIP when it or the model is absent. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "store/store.h"
#include "tests/store_inner.h"
#include "tests/test.h"

static char dir[256], bin[512], model[512], corpus[300];

/* ---- running the tool ---- */

static char out[1 << 16], errs[1 << 16];

static void slurp(const char *path, char *buf, size_t n)
{
    buf[0] = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    size_t k = fread(buf, 1, n - 1, f);
    buf[k] = 0;
    fclose(f);
}

/* Runs lazyingest with args (one string, shell words); stdout in out, stderr in errs. */
static int run(const char *args)
{
    int rc = lz_test_sh("%s %s > %s/out.txt 2> %s/err.txt", bin, args, dir, dir);
    char p[400];
    snprintf(p, sizeof p, "%s/out.txt", dir);
    slurp(p, out, sizeof out);
    snprintf(p, sizeof p, "%s/err.txt", dir);
    slurp(p, errs, sizeof errs);
    return rc;
}

/* An integer (or boolean) of the last JSON line of out; -999 when absent. */
static long jget(const char *key)
{
    const char *line = strrchr(out, '{');
    json_error_t e;
    json_t *j = line ? json_loads(line, 0, &e) : NULL;
    json_t *v = j ? json_object_get(j, key) : NULL;
    long r = !v ? -999 : json_is_boolean(v) ? json_is_true(v) : (long)json_integer_value(v);
    json_decref(j);
    return r;
}

/* ---- the store from the test's side ---- */

typedef struct {
    int n;
    uint8_t key[128][64];
} keys;

static int take_key(const lz_meta_doc *d, void *p)
{
    keys *k = p;
    if (k->n < 128) memcpy(k->key[k->n++], d->payload_key, 64);
    return 0;
}

static int row_keys(const char *store, keys *k)
{
    memset(k, 0, sizeof *k);
    lz_store *s;
    char err[1024];
    if (lz_store_open(store, LZ_STORE_RDONLY, &s, err, sizeof err)) return -1;
    int rc = lz_meta_doc_foreach(test_store_meta(s), take_key, k, err, sizeof err);
    lz_store_close(s);
    return rc;
}

/* LMDB's entry count (0 when it cannot be read). */
static uint64_t n_payloads(const char *store)
{
    char path[400], err[512];
    snprintf(path, sizeof path, "%s/kv", store);
    lz_kvdb *db;
    lz_kvdb_stats st = { 0 };
    if (lz_kvdb_open(path, LZ_KVDB_RDONLY, &db, err, sizeof err)) return 0;
    lz_kvdb_stat(db, &st, err, sizeof err);
    lz_kvdb_close(db);
    return st.entries;
}

static int distinct(const keys *k)
{
    int n = 0;
    for (int i = 0; i < k->n; i++) {
        int dup = 0;
        for (int j = 0; j < i && !dup; j++) dup = !memcmp(k->key[i], k->key[j], 64);
        n += !dup;
    }
    return n;
}

/* ---- damage ---- */

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint64_t rd64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* The live leaves of the payload tree (LMDB 0.9 layout, as store/kvdb_pages.c reads it): the
 * root from the newer meta page, its children when it is a branch. */
static int live_leaves(const uint8_t *m, size_t size, uint64_t *leaf, int max)
{
    const uint64_t P = 4096;
    const uint8_t *m0 = m + 16, *m1 = m + P + 16;
    const uint8_t *meta = rd64(m1 + 128) > rd64(m0 + 128) ? m1 : m0;
    uint64_t root = rd64(meta + 24 + 48 + 40);
    if (root * P + P > size) return 0;
    const uint8_t *pg = m + root * P;
    if (rd16(pg + 10) == 2) { leaf[0] = root; return 1; }
    int n = (rd16(pg + 12) - 16) / 2, k = 0;
    for (int i = 0; i < n && k < max; i++) {
        const uint8_t *nd = pg + rd16(pg + 16 + 2 * i);
        leaf[k++] = (uint64_t)rd16(nd) | (uint64_t)rd16(nd + 2) << 16 | (uint64_t)rd16(nd + 4) << 32;
    }
    return k;
}

/* Deletes 3 rows' payloads, adds 2 unreferenced ones (small, and first in key order: on the
 * first leaf), then overwrites the second live leaf with garbage and zeroes the overflow header
 * of the first payload of the first leaf. */
static void damage(const char *store)
{
    keys k;
    CHECK(row_keys(store, &k) == 0 && k.n >= 10, "rows of %s", store);
    lz_store *s;
    char err[1024];
    CHECK(lz_store_open(store, LZ_STORE_WRITER, &s, err, sizeof err) == 0, "open %s: %s", store, err);
    lz_kvdb_item del[3] = { { k.key[1], 64, NULL, 0 }, { k.key[4], 64, NULL, 0 }, { k.key[7], 64, NULL, 0 } };
    int n = 0;
    CHECK(lz_kvdb_del_batch(test_store_kvdb(s), del, 3, &n, err, sizeof err) == 0 && n == 3, "3 payloads deleted");
    uint8_t orphan[2][64];
    for (int i = 0; i < 2; i++) {
        memcpy(orphan[i], k.key[0], 32); /* this model's fingerprint, a digest no row has: the first keys */
        memset(orphan[i] + 32, 0, 32);
        orphan[i][63] = (uint8_t)(1 + i);
    }
    lz_kvdb_item put[2] = { { orphan[0], 64, "not a payload", 13 }, { orphan[1], 64, "another", 7 } };
    CHECK(lz_kvdb_put_batch(test_store_kvdb(s), put, 2, err, sizeof err) == 0, "2 unreferenced payloads: %s", err);
    lz_store_close(s);
    char path[600];
    snprintf(path, sizeof path, "%s/kv/data.mdb", store);
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL, "open %s", path);
    if (!f) return;
    fseek(f, 0, SEEK_END);
    size_t size = (size_t)ftell(f);
    uint8_t *m = malloc(size);
    fseek(f, 0, SEEK_SET);
    CHECK(m && fread(m, 1, size, f) == size, "read %s", path);
    uint64_t leaf[16];
    int nl = live_leaves(m, size, leaf, 16);
    CHECK(nl >= 2, "a payload tree of %d leaves (2 or more wanted)", nl);
    if (nl >= 2) {
        uint8_t junk[4096 - 16];
        uint32_t x = 12345;
        for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)((x = x * 1103515245u + 12345u) >> 16);
        fseek(f, (long)(leaf[1] * 4096 + 16), SEEK_SET);
        fwrite(junk, 1, sizeof junk, f);
        /* the first payload of the first leaf (the first node with an overflow run): its run's header */
        const uint8_t *pg = m + leaf[0] * 4096;
        int zeroed = 0;
        for (int i = 0; i < (rd16(pg + 12) - 16) / 2 && !zeroed; i++) {
            const uint8_t *nd = pg + rd16(pg + 16 + 2 * i);
            if (!(rd16(nd + 4) & 1)) continue;
            uint64_t ov = rd64(nd + 8 + rd16(nd + 6));
            static const uint8_t zero[16];
            fseek(f, (long)(ov * 4096), SEEK_SET);
            zeroed = fwrite(zero, 1, 16, f) == 16;
        }
        CHECK(zeroed, "an overflow header zeroed");
    }
    fclose(f);
    free(m);
}

/* The store passes --check with no unreferenced payload, and LMDB holds the rows' keys + the prefix. */
static void expect_clean(const char *store, const char *what)
{
    char a[2000];
    snprintf(a, sizeof a, "-s %s --check --json", store);
    int rc = run(a);
    CHECK(rc == 0 && jget("check_issues") == 0 && jget("unreferenced_payloads") == 0 && jget("kv_damaged") == 0,
          "%s: clean --check (exit %d): %s %.600s", what, rc, out, errs);
    keys k;
    row_keys(store, &k);
    uint64_t np = n_payloads(store);
    CHECK(k.n == 80 && np == (uint64_t)distinct(&k) + 1, "%s: %d rows, %llu payloads for %d distinct keys + prefix",
          what, k.n, (unsigned long long)np, distinct(&k));
}

static void copy_store(const char *from, const char *to)
{
    CHECK(lz_test_sh("rm -rf '%s' && cp -r '%s' '%s'", to, from, to) == 0, "copy %s", from);
}

int main(void)
{
    const char *b = getenv("LZ_BIN");
    snprintf(bin, sizeof bin, "%s/lazyingest", b ? b : "build/bin");
    snprintf(model, sizeof model, "models/default.gguf");
    if (access(bin, X_OK) != 0 || access(model, R_OK) != 0 || access("datasets/demo/corpus.jsonl", R_OK) != 0) {
        printf("SKIP %s, %s or datasets/demo/corpus.jsonl not found (run from the repository root)\n", bin, model);
        return lz_test_done();
    }
    if (!lz_test_tmpdir(dir, sizeof dir)) return 1;
    snprintf(corpus, sizeof corpus, "%s/corpus.jsonl", dir);
    CHECK(lz_test_sh("head -n 80 datasets/demo/corpus.jsonl > %s", corpus) == 0, "corpus");
    char clean[300], store[300], a[2000];
    snprintf(clean, sizeof clean, "%s/clean", dir);
    snprintf(a, sizeof a, "-m %s -s %s --quiet %s", model, clean, corpus);
    CHECK(run(a) == 0, "ingest: %s", errs);
    expect_clean(clean, "as ingested");
    char damaged[300];
    snprintf(damaged, sizeof damaged, "%s/damaged", dir);
    copy_store(clean, damaged);
    damage(damaged);

    /* --check: finds it, names the damaged page, does not crash */
    snprintf(store, sizeof store, "%s/check", dir);
    copy_store(damaged, store);
    snprintf(a, sizeof a, "-s %s --check --json", store);
    int rc = run(a);
    CHECK(rc == 4 && jget("kv_damaged") == 1 && jget("check_issues") >= 4, "--check finds the damage (exit %d): %s", rc, out);
    CHECK(strstr(errs, "damaged LMDB pages") && strstr(errs, "data.mdb: page ") && strstr(errs, "missing payload"),
          "--check names the damaged page and the documents: %.800s", errs);

    /* one --repair */
    snprintf(store, sizeof store, "%s/repair", dir);
    copy_store(damaged, store);
    snprintf(a, sizeof a, "-m %s -s %s --repair --json", model, store);
    rc = run(a);
    CHECK(rc == 0 && jget("repaired") >= 4 && jget("payloads_rebuilt") == 1, "one --repair (exit %d): %s %.800s", rc, out,
          errs);
    CHECK(!strstr(errs, "left"), "--repair left nothing: %.400s", errs);
    expect_clean(store, "after one --repair");

    /* a plain re-run of the same corpus */
    snprintf(store, sizeof store, "%s/rerun", dir);
    copy_store(damaged, store);
    snprintf(a, sizeof a, "-m %s -s %s --json %s", model, store, corpus);
    rc = run(a);
    CHECK(rc == 0 && jget("payloads_restored") >= 3 && jget("added") == 0, "a re-run restores (exit %d): %s %.400s", rc,
          out, errs);
    expect_clean(store, "after a re-run");

    /* --gc on the damaged store: no unreferenced payload left (what was lost is --repair's) */
    snprintf(store, sizeof store, "%s/gc", dir);
    copy_store(damaged, store);
    snprintf(a, sizeof a, "-s %s --gc --json", store);
    rc = run(a);
    CHECK(rc == 0 && jget("payloads_collected") >= 2, "--gc on a damaged store (exit %d): %s %.400s", rc, out, errs);
    snprintf(a, sizeof a, "-s %s --check --json", store);
    rc = run(a);
    CHECK(rc == 4 && jget("unreferenced_payloads") == 0 && jget("kv_damaged") == 0, "after --gc: no garbage, a sound "
          "tree, the lost payloads reported (exit %d): %s", rc, out);
    snprintf(a, sizeof a, "-m %s -s %s --repair --quiet", model, store);
    CHECK(run(a) == 0, "then --repair: %s", errs);
    expect_clean(store, "after --gc and --repair");

    lz_test_sh("rm -rf '%s'", dir);
    return lz_test_done();
}
