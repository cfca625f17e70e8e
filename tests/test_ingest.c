/* test_ingest.c - lazyingest end to end on a generated tiny model: stored
 * payloads decode to the computed KV bit for bit (and match a joint forward
 * pass over prefix + document), passage splitting, incremental runs
 * (unchanged, changed, pruned, duplicate content), every bad-input case,
 * --strict, CSV and stdin input, a JSON array corpus (bad records named by
 * line and index, a broken array refused whole), --id-field, HotpotQA context
 * records (and the ../shared/fixtures/qa files, SKIP when absent),
 * wrong-model refusal, --check/--repair/--gc,
 * documents encoded in parallel storing the same bytes as one at a time,
 * a full disk (file size capped: the run stops naming the store, which stays
 * consistent and is completed by the next run; and a real 4 MB tmpfs, where
 * it says "no space left on device"), lazyquery on a store with no documents
 * (a warning; an error under --strict), and a crash test: SIGKILL
 * at random moments (25 kills), rerun, and the store must equal the corpus
 * with no committed document lost or duplicated.
 * Runs $LZ_BIN/lazyingest (default build/bin). */
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "ingest/corpus.h"
#include "ingest/encode.h"
#include "formats/gguf.h"
#include "base/half.h"
#include "model/llama.h"
#include "model/mkmodel.h"
#include "model/prompt.h"
#include "base/env.h"
#include "store/store.h"
#include "tests/run_tool.h"
#include "tests/store_inner.h"
#include "tests/test.h"

static char dir[256], bin[512], model_a[300], model_b[300];

/* Runs lazyingest with args (NULL-terminated), stdin from in_path (may be
 * NULL); stdout/stderr into out/errbuf. kill_after_s > 0: SIGKILL then.
 * Returns the exit status, or 128 + signal. */
static long long file_cap; /* > 0: the tool runs with files capped at this many bytes (a full disk) */

static int run_tool(const char *const *args, const char *in_path, double kill_after_s, char *out, size_t outn,
                    char *errbuf, size_t errn)
{
    const lz_test_run_opts o = {in_path, kill_after_s, file_cap};
    return lz_test_run(dir, bin, args, &o, out, outn, errbuf, errn);
}

/* run_tool with the test build of lazyingest (its fault injection: --test-fail-pass), made by
 * 'make tests' beside this program; the shipped build/bin/lazyingest has no such option. */
static int run_hooks(const char *const *args, char *out, size_t outn, char *errbuf, size_t errn)
{
    char saved[sizeof bin], self[400];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    char *slash = strrchr(self, '/');
    if (slash) *slash = 0;
    memcpy(saved, bin, sizeof bin);
    snprintf(bin, sizeof bin, "%s/lazyingest-hooks", self);
    int rc = -1;
    if (access(bin, X_OK) == 0) rc = run_tool(args, NULL, 0, out, outn, errbuf, errn);
    else snprintf(errbuf, errn, "%s not built ('make tests' builds it)", bin);
    memcpy(bin, saved, sizeof bin);
    return rc;
}

static long jget(const char *json, const char *key)
{
    json_error_t e;
    json_t *j = json_loads(json, 0, &e);
    if (!j) return -999;
    json_t *v = json_object_get(j, key);
    long r = v ? (long)json_integer_value(v) : -998;
    json_decref(j);
    return r;
}

/* A number of the JSON summary (-1 when absent) */
static double jnum(const char *json, const char *key)
{
    json_error_t e;
    json_t *j = json_loads(json, 0, &e);
    if (!j) return -1;
    json_t *v = json_object_get(j, key);
    double r = v && json_is_number(v) ? json_number_value(v) : -1;
    json_decref(j);
    return r;
}

/* A corpus of n documents; version v > 0 changes every 4th text, or every
 * text when all_change. */
static char *make_corpus_k(int n, int v, int with_dup_content, int all_change)
{
    static const char *w[] = { "the", "cat", "sat", "on", "a", "mat", "and", "then", "it", "ran", "to", "big",
                               "red", "house", "where", "people", "lived" };
    size_t cap = (size_t)n * 400 + 1000, o = 0;
    char *s = malloc(cap);
    unsigned seed = 7;
    for (int i = 0; i < n; i++) {
        char text[300];
        size_t t = 0;
        int words = 6 + (int)(seed % 30);
        for (int k = 0; k < words; k++) {
            seed = seed * 1103515245u + 12345u;
            t += (size_t)snprintf(text + t, sizeof text - t, "%s%s", k ? " " : "", w[(seed >> 16) % 17]);
        }
        const char *ver = (v > 0 && (all_change || i % 4 == 0)) ? " Changed." : ".";
        o += (size_t)snprintf(s + o, cap - o, "{\"id\": \"d%d\", \"title\": \"T%d\", \"text\": \"%s%s\"}\n", i,
                              i % 7, text, ver);
    }
    if (with_dup_content) {
        o += (size_t)snprintf(s + o, cap - o, "{\"id\": \"copy1\", \"title\": \"Same\", \"text\": \"Same words.\"}\n");
        o += (size_t)snprintf(s + o, cap - o, "{\"id\": \"copy2\", \"title\": \"Same\", \"text\": \"Same words.\"}\n");
    }
    return s;
}

static char *make_corpus(int n, int v, int with_dup_content) { return make_corpus_k(n, v, with_dup_content, 0); }

/* ---- reading a store from the test ---- */

typedef struct {
    int n;
    char ids[512][32];
    uint8_t hash[512][32];
    uint8_t key[512][64];
} rows;

static int collect(const lz_meta_doc *d, void *p)
{
    rows *r = p;
    if (r->n < 512) {
        snprintf(r->ids[r->n], 32, "%s", d->ext_id);
        memcpy(r->hash[r->n], d->content_hash, 32);
        memcpy(r->key[r->n], d->payload_key, 64);
    }
    r->n++;
    return 0;
}

static int read_rows(const char *store, rows *r)
{
    memset(r, 0, sizeof *r);
    lz_store *s;
    char err[1024];
    if (lz_store_open(store, LZ_STORE_RDONLY, &s, err, sizeof err)) return -1;
    int rc = lz_meta_doc_foreach(test_store_meta(s), collect, r, err, sizeof err);
    lz_store_close(s);
    return rc;
}

static int find_row(const rows *r, const char *id)
{
    for (int i = 0; i < r->n && i < 512; i++)
        if (strcmp(r->ids[i], id) == 0) return i;
    return -1;
}

static lz_kvdb_stats kv_stats(const char *store)
{
    char path[400], err[512];
    snprintf(path, sizeof path, "%s/kv", store);
    lz_kvdb *db;
    lz_kvdb_stats st = { 0 };
    if (lz_kvdb_open(path, LZ_KVDB_RDONLY, &db, err, sizeof err)) return st;
    lz_kvdb_stat(db, &st, err, sizeof err);
    lz_kvdb_close(db);
    return st;
}

static uint64_t n_payloads(const char *store)
{
    return kv_stats(store).entries;
}

/* The store holds exactly want's rows (ids, content, payload keys), passes
 * --check, and keeps no payload beyond its rows' distinct keys + the prefix.
 * 1 if so; else 0 with the reason in why. */
static int store_equals(const char *store, const rows *want, char *why, size_t whyn)
{
    static rows fin;
    static char o[65536], e[4096];
    read_rows(store, &fin);
    int ok = fin.n == want->n;
    for (int i = 0; ok && i < want->n; i++) {
        int j = find_row(&fin, want->ids[i]);
        ok = j >= 0 && memcmp(fin.hash[j], want->hash[i], 32) == 0 && memcmp(fin.key[j], want->key[i], 64) == 0;
    }
    if (!ok) { snprintf(why, whyn, "rows %d, want %d, or a row differs", fin.n, want->n); return 0; }
    const char *ac[] = { "-s", store, "--check", "--json", NULL };
    const long long cap = file_cap;
    file_cap = 0;
    int rcc = run_tool(ac, NULL, 0, o, sizeof o, e, sizeof e);
    file_cap = cap;
    if (rcc != 0 || jget(o, "check_issues") != 0) { snprintf(why, whyn, "check: exit %d %.400s", rcc, o); return 0; }
    int distinct = 0;
    for (int i = 0; i < fin.n; i++) {
        int dup = 0;
        for (int j = 0; j < i && !dup; j++) dup = memcmp(fin.key[i], fin.key[j], 64) == 0;
        distinct += !dup;
    }
    uint64_t np = n_payloads(store);
    if (np != (uint64_t)distinct + 1) {
        snprintf(why, whyn, "%llu payloads for %d distinct keys + prefix", (unsigned long long)np, distinct);
        return 0;
    }
    return 1;
}

/* ---- tests ---- */

typedef struct {
    int n;
    char ext[8][32];
    int *ids[8];
    int n_ids[8];
    uint8_t key[8][64];
} sample;

static int take_sample(const lz_meta_doc *d, void *p)
{
    sample *s = p;
    if (s->n >= 8) return 1;
    snprintf(s->ext[s->n], 32, "%s", d->ext_id);
    s->ids[s->n] = malloc(sizeof(int) * (size_t)(d->n_tokens + 1));
    memcpy(s->ids[s->n], d->token_ids, sizeof(int) * (size_t)d->n_tokens);
    s->n_ids[s->n] = d->n_tokens;
    memcpy(s->key[s->n], d->payload_key, 64);
    s->n++;
    return 0;
}

/* Payloads decode to bf16 of the encoder's fp32 KV bit for bit, and agree
 * with one joint forward pass over prefix + document (to bf16 rounding). */
static void test_bits(const char *store)
{
    lz_llama *m;
    char err[1024];
    if (lz_llama_load(model_a, &m, err, sizeof err)) {
        CHECK(0, "load: %s", err);
        return;
    }
    lz_llama_set_threads(1);
    int *prefix, np;
    lz_prompt_prefix_tokens(m->tok, &prefix, &np);
    CHECK(np > 1 && prefix[0] == lz_tokenizer_bos(m->tok), "prefix starts with BOS (%d tokens)", np);
    lz_encoder *e;
    CHECK(lz_encoder_new(m, prefix, np, &e, err, sizeof err) == 0, "encoder: %s", err);
    lz_store *s;
    CHECK(lz_store_open(store, LZ_STORE_RDONLY, &s, err, sizeof err) == 0, "open: %s", err);
    sample smp = { 0 };
    lz_meta_doc_foreach(test_store_meta(s), take_sample, &smp, err, sizeof err);
    CHECK(smp.n == 8, "sampled %d rows", smp.n);
    lz_payload_codec *codec = lz_payload_codec_new();
    const int L = m->cfg.n_layers, KV = m->cfg.n_kv_heads, d = m->cfg.head_dim;
    int checked = 0;
    double worst = 0;
    for (int t = 0; t < smp.n; t++) {
        const int n = smp.n_ids[t];
        uint8_t key[64];
        lz_store_doc_key(m->fingerprint, prefix, np, smp.ids[t], n, key);
        CHECK(memcmp(key, smp.key[t], 64) == 0, "%s: key = fingerprint + hash of prefix and token ids", smp.ext[t]);
        void *blob;
        size_t len;
        if (lz_store_get_payload(s, smp.key[t], &blob, &len, err, sizeof err)) {
            CHECK(0, "payload of %s: %s", smp.ext[t], err);
            continue;
        }
        lz_payload_info info;
        size_t N = (size_t)L * KV * n * d;
        float *k = calloc(N + 1, 4), *v = calloc(N + 1, 4);
        CHECK(lz_payload_decode_f32(codec, blob, len, k, v, n, NULL, &info, err, sizeof err) == 0, "decode: %s", err);
        CHECK(info.pos_base == np && info.n_tokens == n, "base %d n %d", info.pos_base, info.n_tokens);
        CHECK(memcmp(info.model, m->fingerprint, 32) == 0, "model fingerprint in the header");
        free(blob);
        /* recompute exactly as ingest does */
        CHECK(lz_encoder_run(e, smp.ids[t], n, err, sizeof err) == 0, "run: %s", err);
        const lz_kv_cache *c = lz_encoder_doc_cache(e);
        int same = 1;
        for (int i = 0; i < L * KV; i++)
            for (int j = 0; j < n * d; j++) {
                size_t src = (size_t)i * c->cap * d + j, dst = (size_t)i * n * d + j;
                same &= lz_f32_to_bf16(c->k[src]) == lz_f32_to_bf16(k[dst]) &&
                        lz_f32_to_bf16(c->v[src]) == lz_f32_to_bf16(v[dst]) &&
                        lz_bf16_to_f32(lz_f32_to_bf16(c->k[src])) == k[dst];
            }
        CHECK(same, "%s: decoded KV equals the computed KV bit for bit", smp.ext[t]);
        /* joint forward pass: prefix and document in one cache */
        lz_kv_cache joint;
        lz_kv_cache_init(&joint, &m->cfg, np + n);
        lz_kv_cache_reset(&joint, 0);
        lz_llama_scratch *sc = lz_llama_scratch_new(m, 64);
        int *all = malloc(sizeof(int) * (size_t)(np + n));
        memcpy(all, prefix, sizeof(int) * (size_t)np);
        memcpy(all + np, smp.ids[t], sizeof(int) * (size_t)n);
        lz_llama_forward(m, sc, &joint, NULL, 0, all, np + n, NULL, LZ_LOGITS_NONE);
        int close_all = 1;
        for (int i = 0; i < L * KV; i++)
            for (int j = 0; j < n * d; j++) {
                float want_k = joint.k[((size_t)i * joint.cap + np) * d + j], got_k = k[(size_t)i * n * d + j];
                float want_v = joint.v[((size_t)i * joint.cap + np) * d + j], got_v = v[(size_t)i * n * d + j];
                double ek = fabs(want_k - got_k) / (1e-3 + fabs(want_k)), ev = fabs(want_v - got_v) / (1e-3 + fabs(want_v));
                if (ek > worst) worst = ek;
                if (ev > worst) worst = ev;
                close_all &= ek < 1e-2 && ev < 1e-2;
            }
        CHECK(close_all, "%s: stored KV matches a joint forward pass (worst rel %.3g)", smp.ext[t], worst);
        free(all);
        lz_llama_scratch_free(sc);
        lz_kv_cache_free(&joint);
        free(k);
        free(v);
        checked++;
    }
    printf("bits: %d documents checked, worst relative difference to the joint pass %.3g\n", checked, worst);
    for (int t = 0; t < smp.n; t++) free(smp.ids[t]);
    lz_payload_codec_free(codec);
    lz_store_close(s);
    lz_encoder_free(e);
    free(prefix);
    lz_llama_free(m);
}

static char out[65536], errs[65536];

static void test_incremental(void)
{
    char store[300];
    snprintf(store, sizeof store, "%s/inc", dir);
    char *c0 = make_corpus(40, 0, 1);
    const char *p0 = lz_test_write_file(dir, "v0.jsonl", c0);
    const char *a0[] = { "-m", model_a, "-s", store, "--json", "--threads", "1", p0, NULL };
    int rc = run_tool(a0, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0, "first run exit %d: %s", rc, errs);
    CHECK(jget(out, "added") == 42 && jget(out, "tokens_encoded") > 0, "added %ld: %s", jget(out, "added"), out);
    CHECK(n_payloads(store) == 42, "copy1 and copy2 share one payload: %llu entries (41 + prefix)",
          (unsigned long long)n_payloads(store));
    test_bits(store);

    /* the same corpus again: nothing encoded */
    rc = run_tool(a0, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "unchanged") == 42 && jget(out, "added") == 0 && jget(out, "tokens_encoded") == 0,
          "rerun: %s", out);

    /* a row whose payload key is not what its tokens give (e.g. written under
     * another prompt prefix) is re-encoded even though its text is the same */
    {
        lz_store *st;
        char err[512];
        CHECK(lz_store_open(store, LZ_STORE_WRITER, &st, err, sizeof err) == 0, "open: %s", err);
        lz_meta_doc row;
        lz_meta_doc_find(test_store_meta(st), "d7", &row, NULL, 0, err, sizeof err);
        lz_meta_doc row2;
        lz_meta_doc_find(test_store_meta(st), "d8", &row2, NULL, 0, err, sizeof err);
        lz_meta_doc_set_payload(test_store_meta(st), row.id, row2.payload_key, row2.raw_bytes, row2.stored_bytes, err,
                                sizeof err);
        lz_store_close(st);
    }
    rc = run_tool(a0, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "updated") == 1 && jget(out, "unchanged") == 41, "stale key re-encoded: %s", out);

    /* version 1: every 4th document changed */
    char *c1 = make_corpus(40, 1, 1);
    const char *p1 = lz_test_write_file(dir, "v1.jsonl", c1);
    const char *a1[] = { "-m", model_a, "-s", store, "--json", "--threads", "1", p1, NULL };
    rc = run_tool(a1, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "updated") == 10 && jget(out, "unchanged") == 32 && jget(out, "added") == 0,
          "changed: %s", out);
    CHECK(jget(out, "payloads_collected") == 10, "old payloads of changed documents collected: %s", out);
    CHECK(n_payloads(store) == 42, "entries %llu", (unsigned long long)n_payloads(store));

    /* a shorter corpus without --prune keeps the rest; with --prune removes it */
    char *c2 = make_corpus(30, 1, 0);
    const char *p2 = lz_test_write_file(dir, "v2.jsonl", c2);
    const char *a2[] = { "-m", model_a, "-s", store, "--json", p2, NULL };
    rc = run_tool(a2, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "removed") == 0 && jget(out, "documents") == 42, "no prune: %s", out);
    const char *a3[] = { "-m", model_a, "-s", store, "--json", "--prune", p2, NULL };
    rc = run_tool(a3, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "removed") == 12 && jget(out, "documents") == 30 && jget(out, "unchanged") == 30,
          "prune: %s", out);
    CHECK(jget(out, "payloads_collected") == 11, "pruned payloads collected (copy1/copy2 shared one): %s", out);
    CHECK(n_payloads(store) == 31, "entries after prune %llu", (unsigned long long)n_payloads(store));

    /* --prune never runs on a corpus with a bad record whose id is unreadable */
    char *c3 = malloc(strlen(c2) + 64);
    sprintf(c3, "%s{not json\n", c2);
    /* the first 5 records dropped: pruning would remove them */
    char *cut = c3;
    for (int i = 0; i < 5; i++) cut = strchr(cut, '\n') + 1;
    const char *p3 = lz_test_write_file(dir, "v3.jsonl", cut);
    const char *a4[] = { "-m", model_a, "-s", store, "--json", "--prune", p3, NULL };
    rc = run_tool(a4, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 2 && jget(out, "removed") == 0 && jget(out, "documents") == 30 &&
              strstr(errs, "--prune skipped: 1 bad records without a readable id"), "prune withheld: %s %s", out, errs);
    free(c3);

    /* --check on a healthy store; then break it and --repair */
    const char *ac[] = { "-s", store, "--check", "--json", NULL };
    rc = run_tool(ac, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "check_issues") == 0 && jget(out, "checked") == 30, "check: %s %s", out, errs);
    {   /* --check reads beside a writer: it does not need the writer lock */
        char err[512];
        lz_store *w;
        int held = lz_store_open(store, LZ_STORE_WRITER, &w, err, sizeof err) == 0;
        CHECK(held, "hold the writer lock: %s", err);
        rc = run_tool(ac, NULL, 0, out, sizeof out, errs, sizeof errs);
        CHECK(rc == 0 && jget(out, "checked") == 30, "--check while a writer holds the store: %d %s", rc, errs);
        const char *agc[] = { "-s", store, "--gc", NULL };
        rc = run_tool(agc, NULL, 0, out, sizeof out, errs, sizeof errs);
        CHECK(rc == 3 && strstr(errs, "another process is writing"), "--gc still waits for the writer (exit 3): %d %s",
              rc, errs);
        if (held) lz_store_close(w);
    }
    rows r;
    read_rows(store, &r);
    {
        char path[400], err[512];
        snprintf(path, sizeof path, "%s/kv", store);
        lz_kvdb *db;
        lz_kvdb_open(path, 0, &db, err, sizeof err);
        lz_kvdb_item del = { r.key[3], 64, NULL, 0 };
        lz_kvdb_del_batch(db, &del, 1, NULL, err, sizeof err);
        void *blob;
        size_t len;
        lz_kvdb_get(db, r.key[5], 64, &blob, &len, err, sizeof err);
        ((uint8_t *)blob)[len / 2] ^= 0x40;
        lz_kvdb_item put = { r.key[5], 64, blob, len };
        lz_kvdb_put_batch(db, &put, 1, err, sizeof err);
        free(blob);
        lz_kvdb_close(db);
    }
    rc = run_tool(ac, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 4 && jget(out, "check_issues") == 2, "check finds 2 (exit %d, want 4): %s", rc, out);
    CHECK(strstr(errs, "missing payload") && strstr(errs, "corrupt payload") && strstr(errs, r.ids[3]) &&
              strstr(errs, r.ids[5]), "check names them: %s", errs);
    const char *ar[] = { "-m", model_a, "-s", store, "--repair", "--json", NULL };
    rc = run_tool(ar, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "repaired") == 2, "repair (exit %d): %s %s", rc, out, errs);
    rc = run_tool(ac, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "check_issues") == 0, "clean after repair: %s", out);
    rows r2;
    read_rows(store, &r2);
    CHECK(r2.n == 30 && memcmp(r2.key[5], r.key[5], 64) == 0, "repair keeps rows and keys");

    /* --gc removes a stray payload */
    {
        char path[400], err[512];
        snprintf(path, sizeof path, "%s/kv", store);
        lz_kvdb *db;
        lz_kvdb_open(path, 0, &db, err, sizeof err);
        uint8_t k[64] = { 1, 2, 3 };
        lz_kvdb_item put = { k, 64, "garbage", 7 };
        lz_kvdb_put_batch(db, &put, 1, err, sizeof err);
        lz_kvdb_close(db);
    }
    const char *ag[] = { "-s", store, "--gc", "--json", NULL };
    rc = run_tool(ag, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "payloads_collected") == 1, "gc: %s", out);

    /* another model is refused, naming both */
    const char *aw[] = { "-m", model_b, "-s", store, p2, NULL };
    rc = run_tool(aw, NULL, 0, out, sizeof out, errs, sizeof errs);
    lz_llama *ma, *mb;
    char err[512];
    lz_llama_load(model_a, &ma, err, sizeof err);
    lz_llama_load(model_b, &mb, err, sizeof err);
    char fa[17], fb[17];
    memcpy(fa, ma->fingerprint_hex, 16);
    memcpy(fb, mb->fingerprint_hex, 16);
    fa[16] = fb[16] = 0;
    CHECK(rc == 1 && strstr(errs, "refusing model") && strstr(errs, fa) && strstr(errs, fb) &&
              strstr(errs, "a.gguf") && strstr(errs, "b.gguf"), "wrong model (exit %d): %s", rc, errs);
    lz_llama_free(ma);
    lz_llama_free(mb);
    const char *awc[] = { "-m", model_b, "-s", store, "--check", NULL };
    rc = run_tool(awc, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 1 && strstr(errs, "refusing model"), "--check with another model refused too");
    free(c0);
    free(c1);
    free(c2);
}

static void test_bad_inputs(void)
{
    char store[300];
    snprintf(store, sizeof store, "%s/bad", dir);
    const char *p = lz_test_write_file(dir, "bad.jsonl",
                               "{\"id\": \"ok1\", \"text\": \"First good one.\"}\n"
                               "{\"id\": \"u\", \"text\": \"bad \xff utf8\"}\n"
                               "{\"id\": \"j\" \"text\": 1}\n"
                               "{\"text\": \"no id\"}\n"
                               "{\"id\": \"nt\"}\n"
                               "{\"id\": \"et\", \"text\": \"\"}\n"
                               "{\"id\": [1], \"text\": \"array id\"}\n"
                               "{\"id\": \"tt\", \"text\": \"x\", \"title\": 3}\n"
                               "{\"id\": 42, \"text\": \"Integer id is fine.\"}\n"
                               "{\"id\": \"ok1\", \"text\": \"First good one, second version.\"}\n");
    const char *a[] = { "-m", model_a, "-s", store, "--json", p, NULL };
    int rc = run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 2, "exit 2 when records were skipped (got %d)", rc);
    CHECK(jget(out, "added") == 2 && jget(out, "skipped") == 7 && jget(out, "duplicates") == 1, "counts: %s", out);
    static const char *want[] = { "bad.jsonl:2: invalid UTF-8", "bad.jsonl:3: invalid JSON",
                                  "bad.jsonl:4: missing \"id\"", "bad.jsonl:5: id 'nt': missing \"text\"",
                                  "bad.jsonl:6: id 'et': \"text\" is empty", "bad.jsonl:7: \"id\" must be",
                                  "bad.jsonl:8: id 'tt': \"title\" must be a string",
                                  "bad.jsonl:1: warning: id 'ok1' appears again at line 10" };
    for (int i = 0; i < 8; i++) CHECK(strstr(errs, want[i]) != NULL, "message '%s' in: %s", want[i], errs);
    rows r;
    read_rows(store, &r);
    CHECK(r.n == 2 && find_row(&r, "42") >= 0 && find_row(&r, "ok1") >= 0, "valid records committed (%d)", r.n);

    /* --strict: stops at line 2, line 1 committed, nothing after */
    char store2[300];
    snprintf(store2, sizeof store2, "%s/strict", dir);
    const char *p2 = lz_test_write_file(dir, "strict.jsonl", "{\"id\": \"s1\", \"text\": \"Before.\"}\n"
                                                "{\"id\": \"s2\", \"text\": 7}\n"
                                                "{\"id\": \"s3\", \"text\": \"After.\"}\n");
    const char *as[] = { "-m", model_a, "-s", store2, "--strict", "--json", p2, NULL };
    rc = run_tool(as, NULL, 0, out, sizeof out, errs, sizeof errs);
    read_rows(store2, &r);
    CHECK(rc == 2 && r.n == 1 && find_row(&r, "s1") == 0, "strict: exit %d, %d rows", rc, r.n);
    CHECK(strstr(errs, "strict.jsonl:2: id 's2': \"text\" must be a string") != NULL, "strict message: %s", errs);

    /* CSV from stdin: quotes, embedded newlines, CRLF, bad rows */
    char store3[300];
    snprintf(store3, sizeof store3, "%s/csv", dir);
    const char *p3 = lz_test_write_file(dir, "in.csv", "id,title,text\r\n"
                                          "c1,One,\"Quoted, with comma.\"\r\n"
                                          "c2,,\"Two lines\r\nof text.\"\r\n"
                                          "c3,Three\r\n"
                                          "c4,Four,\"bad \"quote\r\n"
                                          "c5,Five,Plain text.\r\n");
    const char *ac[] = { "-m", model_a, "-s", store3, "--json", "--format", "csv", "-", NULL };
    rc = run_tool(ac, p3, 0, out, sizeof out, errs, sizeof errs);
    read_rows(store3, &r);
    CHECK(rc == 2 && r.n == 3 && jget(out, "skipped") == 2, "csv: exit %d rows %d: %s %s", rc, r.n, out, errs);
    CHECK(strstr(errs, "<stdin>:5: expected 3 fields") && strstr(errs, "<stdin>:6: malformed CSV"), "csv messages: %s",
          errs);
    const char *p4 = lz_test_write_file(dir, "nohdr.csv", "name,body\nx,y\n");
    const char *an[] = { "-m", model_a, "-s", store3, p4, NULL };
    rc = run_tool(an, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 1 && strstr(errs, "must name the columns id and text"), "no header: %d %s", rc, errs);
    const char *am[] = { "-m", "/nonexistent.gguf", "-s", store3, p4, NULL };
    rc = run_tool(am, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 1 && strstr(errs, "/nonexistent.gguf"), "missing model: %s", errs);
    char nostore[300];
    snprintf(nostore, sizeof nostore, "%s/nostore", dir);
    const char *ax[] = { "-s", nostore, "--check", NULL };
    rc = run_tool(ax, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 2 && strstr(errs, "no store at") && access(nostore, F_OK) != 0, "--check of a missing store (exit 2): %s",
          errs);
    /* the embedded default model ships in the repo: point the default at a missing file */
    const char *ad[] = { "-s", store3, p4, NULL };
    setenv("LAZY_MODEL", "/nonexistent-default.gguf", 1);
    rc = run_tool(ad, NULL, 0, out, sizeof out, errs, sizeof errs);
    unsetenv("LAZY_MODEL");
    CHECK(rc == 1 && strstr(errs, "--model") && strstr(errs, "/nonexistent-default.gguf"), "no default model: %s", errs);
}

static void test_split(void)
{
    char store[300];
    snprintf(store, sizeof store, "%s/split", dir);
    char *text = malloc(20000);
    size_t o = 0;
    for (int i = 0; i < 60; i++)
        o += (size_t)sprintf(text + o, "Sentence number %d tells a small story about a red house.%s", i,
                             i % 10 == 9 ? "\\n" : " ");
    char *rec = malloc(21000);
    sprintf(rec, "{\"id\": \"big\", \"title\": \"Long\", \"text\": \"%s\"}\n{\"id\": \"small\", \"text\": \"Tiny.\"}\n", text);
    const char *p = lz_test_write_file(dir, "long.jsonl", rec);
    const char *a[] = { "-m", model_a, "-s", store, "--json", "--max-doc-tokens", "200", p, NULL };
    int rc = run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0, "split run: %d %s", rc, errs);
    rows r;
    read_rows(store, &r);
    int parts = 0;
    for (int i = 0; i < r.n; i++) parts += strncmp(r.ids[i], "big#", 4) == 0;
    CHECK(parts >= 3 && find_row(&r, "big#0") >= 0 && find_row(&r, "small") >= 0 && find_row(&r, "big") < 0,
          "passages big#0..: %d parts of %d rows", parts, r.n);
    /* each passage within budget and on a sentence boundary */
    lz_store *s;
    char err[512];
    lz_store_open(store, LZ_STORE_RDONLY, &s, err, sizeof err);
    lz_meta_doc row;
    int ok = 1;
    for (int k = 0; k < parts; k++) {
        char id[32];
        snprintf(id, sizeof id, "big#%d", k);
        ok &= lz_meta_doc_find(test_store_meta(s), id, &row, NULL, 0, err, sizeof err) == 0 && row.n_tokens <= 200 &&
              row.passage == k && lz_store_has_payload(s, row.payload_key, NULL, err, sizeof err) == 1;
    }
    CHECK(ok, "every passage <= 200 tokens with its own payload");
    lz_store_close(s);
    /* the same corpus again: the split record is recognised as unchanged */
    rc = run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "unchanged") == parts + 1 && jget(out, "tokens_encoded") == 0, "split rerun: %s", out);
    /* a larger budget keeps it whole; the smaller one splits it again */
    const char *a1000[] = { "-m", model_a, "-s", store, "--json", "--max-doc-tokens", "100000", p, NULL };
    rc = run_tool(a1000, NULL, 0, out, sizeof out, errs, sizeof errs);
    read_rows(store, &r);
    CHECK(rc == 0 && r.n == 2 && find_row(&r, "big") >= 0 && jget(out, "removed") == parts, "whole again: %s", out);
    rc = run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs);
    read_rows(store, &r);
    CHECK(rc == 0 && r.n == parts + 1 && find_row(&r, "big#0") >= 0 && find_row(&r, "big") < 0,
          "split again under the smaller budget: %d rows %s", r.n, out);

    /* shrink the document: stale passages are removed without --prune */
    sprintf(rec, "{\"id\": \"big\", \"title\": \"Long\", \"text\": \"Now short.\"}\n{\"id\": \"small\", \"text\": \"Tiny.\"}\n");
    p = lz_test_write_file(dir, "long.jsonl", rec);
    rc = run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs);
    read_rows(store, &r);
    CHECK(rc == 0 && r.n == 2 && find_row(&r, "big") >= 0 && jget(out, "removed") == parts,
          "shrunk: %d rows, %s", r.n, out);
    free(text);
    free(rec);
}

/* A store of exact fp32 payloads: decodes bit for bit to the engine's fp32
 * KV; its dtype is fixed. */
static void test_f32_store(void)
{
    char store[300];
    snprintf(store, sizeof store, "%s/f32", dir);
    char *c = make_corpus(6, 0, 0);
    const char *p = lz_test_write_file(dir, "f32.jsonl", c);
    const char *a[] = { "-m", model_a, "-s", store, "--json", "--threads", "1", "--kv-dtype", "f32", p, NULL };
    int rc = run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "added") == 6, "f32 ingest: %s %s", out, errs);
    lz_llama *m;
    char err[1024];
    lz_llama_load(model_a, &m, err, sizeof err);
    lz_llama_set_threads(1);
    int *prefix, np;
    lz_prompt_prefix_tokens(m->tok, &prefix, &np);
    lz_encoder *e;
    lz_encoder_new(m, prefix, np, &e, err, sizeof err);
    lz_store *s;
    CHECK(lz_store_open(store, LZ_STORE_RDONLY, &s, err, sizeof err) == 0, "open");
    sample smp = { 0 };
    lz_meta_doc_foreach(test_store_meta(s), take_sample, &smp, err, sizeof err);
    lz_payload_codec *codec = lz_payload_codec_new();
    const int L = m->cfg.n_layers, KV = m->cfg.n_kv_heads, d = m->cfg.head_dim;
    int exact = 1;
    for (int t = 0; t < smp.n; t++) {
        void *blob;
        size_t len;
        lz_store_get_payload(s, smp.key[t], &blob, &len, err, sizeof err);
        int n = smp.n_ids[t];
        float *k = calloc((size_t)L * KV * n * d + 1, 4), *v = calloc((size_t)L * KV * n * d + 1, 4);
        lz_payload_info info;
        exact &= lz_payload_decode_f32(codec, blob, len, k, v, n, NULL, &info, err, sizeof err) == 0 &&
                 info.dtype == LZ_PAYLOAD_DTYPE_F32;
        lz_encoder_run(e, smp.ids[t], n, err, sizeof err);
        const lz_kv_cache *kc = lz_encoder_doc_cache(e);
        for (int i = 0; i < L * KV; i++)
            exact &= memcmp(k + (size_t)i * n * d, kc->k + (size_t)i * kc->cap * d, sizeof(float) * (size_t)n * d) == 0 &&
                     memcmp(v + (size_t)i * n * d, kc->v + (size_t)i * kc->cap * d, sizeof(float) * (size_t)n * d) == 0;
        free(k);
        free(v);
        free(blob);
        free(smp.ids[t]);
    }
    CHECK(exact && smp.n == 6, "fp32 payloads equal the engine's fp32 KV bit for bit (%d)", smp.n);
    lz_payload_codec_free(codec);
    lz_store_close(s);
    lz_encoder_free(e);
    free(prefix);
    lz_llama_free(m);
    const char *ab[] = { "-m", model_a, "-s", store, "--kv-dtype", "bf16", p, NULL };
    rc = run_tool(ab, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 1 && strstr(errs, "holds fp32 KV payloads"), "dtype fixed per store: %s", errs);
    const char *an[] = { "-m", model_a, "-s", store, "--json", p, NULL };
    rc = run_tool(an, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "unchanged") == 6, "without --kv-dtype the store's is used: %s", out);
    const char *ac[] = { "-s", store, "--check", "--json", NULL };
    rc = run_tool(ac, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "check_issues") == 0, "f32 store checks clean: %s", out);
    free(c);
}

/* --codec raw: the payloads stored as encoded (codec raw), decoding to the same bf16 bits as the
 * default shuffle-zstd store's, larger on disk, checked clean, named in the summary; an unknown
 * codec refused. */
static void test_raw_codec(void)
{
    char zs[300], rs[300];
    snprintf(zs, sizeof zs, "%s/codec-z", dir);
    snprintf(rs, sizeof rs, "%s/codec-raw", dir);
    char *c = make_corpus(5, 0, 0);
    const char *p = lz_test_write_file(dir, "codec.jsonl", c);
    const char *az[] = { "-m", model_a, "-s", zs, "--json", "--threads", "2", p, NULL };
    int rc = run_tool(az, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "added") == 5 && strstr(out, "\"codec\":\"shuffle-zstd\""), "default codec: %s %s", out,
          errs);
    const long zbytes = jget(out, "stored_bytes");
    const char *ar[] = { "-m", model_a, "-s", rs, "--json", "--threads", "2", "--codec", "raw", p, NULL };
    rc = run_tool(ar, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "added") == 5 && strstr(out, "\"codec\":\"raw\""), "--codec raw: %s %s", out, errs);
    CHECK(jget(out, "stored_bytes") > zbytes * 6 / 5, "raw is larger: %ld against %ld", jget(out, "stored_bytes"), zbytes);
    char err[1024];
    lz_store *z, *r;
    CHECK(lz_store_open(zs, LZ_STORE_RDONLY, &z, err, sizeof err) == 0 &&
              lz_store_open(rs, LZ_STORE_RDONLY, &r, err, sizeof err) == 0, "open: %s", err);
    sample smp = { 0 };
    lz_meta_doc_foreach(test_store_meta(z), take_sample, &smp, err, sizeof err);
    lz_payload_codec *codec = lz_payload_codec_new();
    int same = smp.n > 0, raw = 1;
    for (int t = 0; t < smp.n; t++) {
        void *bz, *br;
        size_t lz_, lr;
        const int ok = lz_store_get_payload(z, smp.key[t], &bz, &lz_, err, sizeof err) == 0 &&
                       lz_store_get_payload(r, smp.key[t], &br, &lr, err, sizeof err) == 0;
        same &= ok;
        if (ok) {
            lz_payload_info iz, ir;
            lz_payload_parse(bz, lz_, 0, &iz, err, sizeof err);
            lz_payload_parse(br, lr, 0, &ir, err, sizeof err);
            raw &= ir.codec == LZ_PAYLOAD_CODEC_RAW && iz.codec == LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD;
            const size_t half = (size_t)iz.n_kept_sum * iz.head_dim + 1;
            uint16_t *kz = calloc(half, 2), *vz = calloc(half, 2), *kr = calloc(half, 2), *vr = calloc(half, 2);
            same &= lz_payload_decode_bf16_packed(codec, bz, lz_, kz, vz, NULL, NULL, err, sizeof err) == 0 &&
                    lz_payload_decode_bf16_packed(codec, br, lr, kr, vr, NULL, NULL, err, sizeof err) == 0 &&
                    !memcmp(kz, kr, half * 2) && !memcmp(vz, vr, half * 2);
            free(kz), free(vz), free(kr), free(vr);
            free(bz), free(br);
        }
        free(smp.ids[t]);
    }
    CHECK(same && raw, "raw payloads decode to the shuffle-zstd store's bits (%d documents): %s", smp.n, err);
    lz_payload_codec_free(codec);
    lz_store_close(z);
    lz_store_close(r);
    const char *ac[] = { "-s", rs, "--check", "--json", NULL };
    rc = run_tool(ac, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "check_issues") == 0, "a raw store checks clean: %s", out);
    const char *ab[] = { "-m", model_a, "-s", rs, "--codec", "lz4", p, NULL };
    rc = run_tool(ab, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 2 && strstr(errs, "--codec"), "an unknown codec: usage, named: %s", errs);
    free(c);
}

/* SIGKILL at random moments; after each kill the store must be consistent
 * (every row has its payload); a rerun completes it; the committed rows
 * survive unchanged; the final store equals the corpus exactly. */
static void test_crash(void)
{
    char store[300];
    snprintf(store, sizeof store, "%s/crash", dir);
    char *cv[2] = { make_corpus_k(80, 0, 0, 1), make_corpus_k(70, 1, 1, 1) };
    const char *pv[2] = { lz_test_write_file(dir, "crash0.jsonl", cv[0]), lz_test_write_file(dir, "crash1.jsonl", cv[1]) };
    /* expected final contents per version */
    rows want[2];
    for (int v = 0; v < 2; v++) {
        char ws[300];
        snprintf(ws, sizeof ws, "%s/want%d", dir, v);
        const char *a[] = { "-m", model_a, "-s", ws, "--quiet", "--threads", "1", "--batch-tokens", "256", pv[v], NULL };
        double t0 = lz_now_s();
        int rc = run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs);
        CHECK(rc == 0, "reference run %d: %s", v, errs);
        read_rows(ws, &want[v]);
        if (v == 0) printf("crash: a full run takes %.2f s\n", lz_now_s() - t0);
    }
    double full = 0;
    {
        const char *a[] = { "-m", model_a, "-s", store, "--quiet", "--threads", "1", "--batch-tokens", "256", "--prune", pv[0], NULL };
        double t0 = lz_now_s();
        run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs);
        full = lz_now_s() - t0;
    }
    srand((unsigned)time(NULL));
    /* Trials until 25 runs were killed mid-run (at most 50). The kill time is
     * uniform over the expected length of a full run, re-estimated from runs
     * that finished before their kill (the machine's load varies). */
    int trials = 0, killed = 0, bad_after_kill = 0, bad_final = 0, lost = 0;
    for (int t = 0; killed < 25 && t < 50; t++, trials++) {
        int v = (t + 1) % 2;
        const char *a[] = { "-m", model_a, "-s", store, "--quiet", "--threads", "1", "--batch-tokens", "256", "--prune", pv[v], NULL };
        double when = full * (0.02 + 0.9 * rand() / (double)RAND_MAX), t_run = lz_now_s();
        int rc = run_tool(a, NULL, when, out, sizeof out, errs, sizeof errs);
        t_run = lz_now_s() - t_run;
        if (rc == 128 + SIGKILL) killed++;
        else full = 0.5 * full + 0.5 * t_run; /* finished first: runs are shorter than thought */
        /* consistent right after the kill: every row has a valid payload */
        const char *ac[] = { "-s", store, "--check", "--json", NULL };
        int rcc = run_tool(ac, NULL, 0, out, sizeof out, errs, sizeof errs);
        if (rcc != 0 || jget(out, "check_issues") != 0) {
            bad_after_kill++;
            fprintf(stderr, "trial %d: check after kill: exit %d %s %s\n", t, rcc, out, errs);
        }
        rows mid;
        read_rows(store, &mid);
        /* rerun to completion */
        rc = run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs);
        rows fin;
        read_rows(store, &fin);
        /* rows committed before the kill with this version's content are still there, same payload */
        for (int i = 0; i < mid.n && i < 512; i++) {
            int w = find_row(&want[v], mid.ids[i]);
            if (w < 0 || memcmp(want[v].hash[w], mid.hash[i], 32) != 0) continue;
            int j = find_row(&fin, mid.ids[i]);
            if (j < 0 || memcmp(fin.key[j], mid.key[i], 64) != 0) lost++;
        }
        /* the corpus exactly, checked clean, no garbage left */
        char why[600];
        if (rc != 0 || !store_equals(store, &want[v], why, sizeof why)) {
            bad_final++;
            fprintf(stderr, "trial %d: final store differs from the corpus (exit %d): %s\n", t, rc, rc ? errs : why);
        }
    }
    printf("crash: %d trials, %d killed mid-run, full run about %.2f s\n", trials, killed, full);
    CHECK(killed >= 20, "at least 20 runs killed mid-run (%d of %d trials)", killed, trials);
    CHECK(bad_after_kill == 0, "%d trials inconsistent right after SIGKILL", bad_after_kill);
    CHECK(bad_final == 0, "%d trials with a wrong final store", bad_final);
    CHECK(lost == 0, "%d committed documents lost or changed", lost);
    free(cv[0]);
    free(cv[1]);
}

/* A full disk: runs capped at a file size (RLIMIT_FSIZE; a write past it
 * fails) from a tenth of the payload file's full size up to most of it, and
 * one so small that the metadata database cannot grow. Each must stop with an
 * error naming the store, leave it consistent (--check clean: every row has
 * its payload), keep what it committed, and a run without the cap then
 * completes it to the corpus exactly. */
static void test_disk_full(void)
{
    char ref[300], store[300];
    snprintf(ref, sizeof ref, "%s/full-ref", dir);
    char *cv = make_corpus_k(80, 0, 0, 1);
    const char *pv = lz_test_write_file(dir, "full.jsonl", cv);
    static rows want, mid;
    const char *a0[] = { "-m", model_a, "-s", ref, "--quiet", "--batch-tokens", "256", pv, NULL };
    CHECK(run_tool(a0, NULL, 0, out, sizeof out, errs, sizeof errs) == 0, "disk full: reference run: %s", errs);
    read_rows(ref, &want);
    /* the pages in use (the writer's file is as large as its map, mostly unallocated) */
    const long long full = (long long)kv_stats(ref).used_bytes;
    CHECK(full > 0 && want.n > 0, "disk full: the reference store (%lld bytes of payloads, %d rows)", full, want.n);
    const long long caps[] = { 40 << 10, full / 10, full / 3, full * 2 / 3, full * 9 / 10 };
    int stopped = 0, named = 0, consistent = 0, kept = 0, completed = 0;
    for (int c = 0; c < 5; c++) {
        snprintf(store, sizeof store, "%s/full%d", dir, c);
        const char *a[] = { "-m", model_a, "-s", store, "--quiet", "--batch-tokens", "256", pv, NULL };
        file_cap = caps[c];
        int rc = run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs);
        file_cap = 0;
        stopped += rc == 1;
        named += strstr(errs, store) != NULL;
        if (rc != 1 || !strstr(errs, store))
            fprintf(stderr, "disk full at %lld bytes: exit %d, stderr: %s\n", caps[c], rc, errs);
        /* consistent as it stopped (a store never created is consistent too), and what it committed
         * is what the corpus says */
        const char *ac[] = { "-s", store, "--check", "--json", NULL };
        struct stat ss;
        const int exists = stat(store, &ss) == 0;
        int rcc = exists ? run_tool(ac, NULL, 0, out, sizeof out, errs, sizeof errs) : 0;
        /* stopped while creating the metadata: said so, and nothing in it */
        const int unborn = rcc != 0 && strstr(errs, "creation did not complete") != NULL;
        if (exists && !unborn) read_rows(store, &mid);
        else memset(&mid, 0, sizeof mid);
        consistent += unborn || (rcc == 0 && (!exists || jget(out, "check_issues") == 0));
        if (rcc != 0 && !unborn)
            fprintf(stderr, "disk full at %lld bytes: check: exit %d %s %s\n", caps[c], rcc, out, errs);
        int same = 1;
        for (int i = 0; i < mid.n && i < 512; i++) {
            int w = find_row(&want, mid.ids[i]);
            same &= w >= 0 && !memcmp(want.hash[w], mid.hash[i], 32) && !memcmp(want.key[w], mid.key[i], 64);
        }
        kept += same;
        rc = run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs);
        char why[600] = "";
        const int ok = rc == 0 && store_equals(store, &want, why, sizeof why);
        completed += ok;
        if (!ok) fprintf(stderr, "disk full at %lld bytes: the run after: exit %d %s %s\n", caps[c], rc, errs, why);
        printf("disk full at %lld of %lld bytes: stopped with %d rows committed; completed after: %s\n", caps[c], full,
               mid.n, ok ? "yes" : "no");
    }
    CHECK(stopped == 5 && named == 5, "disk full: %d of 5 runs stopped with an error, %d named the store", stopped, named);
    CHECK(consistent == 5, "disk full: %d of 5 stores consistent as the run stopped", consistent);
    CHECK(kept == 5, "disk full: committed rows as the corpus says in %d of 5", kept);
    CHECK(completed == 5, "disk full: %d of 5 completed by the next run", completed);
    free(cv);
}

/* A really full disk: a 4 MB tmpfs mounted in a private mount namespace
 * (unshare -rm, which needs no root where user namespaces are allowed; SKIP
 * where they are not), the shipped model's payloads (24 MB for the demo
 * corpus) written to it in small batches. The run must stop with exit 1 and
 * "no space left on device" naming the store (LMDB's short write is EIO, the
 * refused one ENOSPC, SQLite's "database or disk is full": each said as
 * such), and what it committed must pass --check. */
static void test_disk_full_tmpfs(void)
{
    if (access("models/default.gguf", R_OK) != 0 || access("datasets/demo/corpus.jsonl", R_OK) != 0) {
        printf("SKIP disk full on a tmpfs: models/default.gguf or the demo corpus not found\n");
        return;
    }
    char mnt[300], store[400];
    snprintf(mnt, sizeof mnt, "%s/tmpfs", dir);
    snprintf(store, sizeof store, "%s/store", mnt);
    mkdir(mnt, 0777);
    if (lz_test_sh("unshare -rm sh -c 'mount -t tmpfs -o size=4m tmpfs %s' > /dev/null 2>&1", mnt) != 0) {
        printf("SKIP disk full on a tmpfs: no private mount namespace here (unshare -rm, mount -t tmpfs)\n");
        return;
    }
    int rc = lz_test_sh("unshare -rm sh -c 'mount -t tmpfs -o size=4m tmpfs %s && "
                        "%s -m models/default.gguf -s %s --quiet --batch-tokens 1024 datasets/demo/corpus.jsonl "
                        "2> %s/full.err; echo $? > %s/full.rc; %s -s %s --check --json > %s/full.check 2>&1; "
                        "echo $? >> %s/full.rc'",
                        mnt, bin, store, dir, dir, bin, store, dir, dir);
    char path[400], e[8192] = "", rcs[64] = "", chk[8192] = "";
    FILE *f;
    snprintf(path, sizeof path, "%s/full.err", dir);
    if ((f = fopen(path, "rb"))) { e[fread(e, 1, sizeof e - 1, f)] = 0; fclose(f); }
    snprintf(path, sizeof path, "%s/full.rc", dir);
    if ((f = fopen(path, "rb"))) { rcs[fread(rcs, 1, sizeof rcs - 1, f)] = 0; fclose(f); }
    snprintf(path, sizeof path, "%s/full.check", dir);
    if ((f = fopen(path, "rb"))) { chk[fread(chk, 1, sizeof chk - 1, f)] = 0; fclose(f); }
    int run_rc = -1, check_rc = -1;
    sscanf(rcs, "%d %d", &run_rc, &check_rc);
    CHECK(rc == 0 && run_rc == 1, "disk full on a tmpfs: the run exits 1 (got %d, shell %d): %.400s", run_rc, rc, e);
    CHECK(strstr(e, "no space left on device") && strstr(e, store), "disk full on a tmpfs: says so, naming the store: %.600s", e);
    CHECK(check_rc == 0 && jget(chk, "check_issues") == 0, "disk full on a tmpfs: what was committed passes --check "
          "(exit %d): %.400s", check_rc, chk);
    printf("disk full on a 4 MB tmpfs: %.200s\n", e);
}

/* A store with no documents (an empty corpus ingested): lazyquery says so once, naming the
 * store, answers from the question alone (exit 0, "warning": "no documents" in --json), and
 * refuses under --strict (exit 2) before answering anything. */
static void test_empty_store(void)
{
    char store[300], q[700], cmd[2400];
    snprintf(store, sizeof store, "%s/empty-store", dir);
    const char *pe = lz_test_write_file(dir, "empty.jsonl", "");
    const char *a[] = { "-m", model_a, "-s", store, "--quiet", pe, NULL };
    CHECK(run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs) == 0, "empty corpus ingested: %s", errs);
    snprintf(q, sizeof q, "%.280s/lazyquery", getenv("LZ_BIN") ? getenv("LZ_BIN") : "build/bin");
    snprintf(cmd, sizeof cmd, "%s -m %s -s %s --json 'What is the capital of Foxaria?' > %s/eq.out 2> %s/eq.err", q, model_a,
             store, dir, dir);
    int rc = lz_test_sh("%s", cmd);
    char p[400], o[8192] = "", e[8192] = "";
    FILE *f;
    snprintf(p, sizeof p, "%s/eq.out", dir);
    if ((f = fopen(p, "rb"))) { o[fread(o, 1, sizeof o - 1, f)] = 0; fclose(f); }
    snprintf(p, sizeof p, "%s/eq.err", dir);
    if ((f = fopen(p, "rb"))) { e[fread(e, 1, sizeof e - 1, f)] = 0; fclose(f); }
    CHECK(rc == 0 && strstr(o, "\"warning\":\"no documents\""), "empty store: answered with a warning (exit %d): %.300s", rc, o);
    CHECK(strstr(e, "holds no documents") && strstr(e, store), "empty store: the warning names the store: %.400s", e);
    snprintf(cmd, sizeof cmd, "%s -m %s -s %s --strict 'What is the capital of Foxaria?' > %s/eq.out 2> %s/eq.err", q,
             model_a, store, dir, dir);
    rc = lz_test_sh("%s", cmd);
    snprintf(p, sizeof p, "%s/eq.err", dir);
    e[0] = 0;
    if ((f = fopen(p, "rb"))) { e[fread(e, 1, sizeof e - 1, f)] = 0; fclose(f); }
    CHECK(rc == 2 && strstr(e, "holds no documents") && strstr(e, "--strict") && strstr(e, store),
          "empty store under --strict: exit 2 naming the store (got %d): %.400s", rc, e);
}

static char *decode(const lz_tokenizer *t, const int *ids, int n)
{
    char *s = NULL;
    size_t len;
    if (lz_tokenizer_decode(t, ids, n, &s, &len)) return strdup("");
    return s;
}

static int count_id(const int *ids, int n, int id)
{
    int k = 0;
    for (int i = 0; i < n; i++) k += ids[i] == id;
    return k;
}

/* The shared prompt pieces: plain style on the generated model's vocabulary,
 * Llama-3 style on the Llama-3 vocabulary (fixture), default model lookup. */
static void test_prompt(void)
{
    lz_llama *m;
    char err[1024];
    if (lz_llama_load(model_a, &m, err, sizeof err)) {
        CHECK(0, "load: %s", err);
        return;
    }
    const lz_tokenizer *t = m->tok;
    CHECK(lz_prompt_style_of(t) == LZ_PROMPT_PLAIN, "generated vocabulary: plain style");
    int *ids, n;
    CHECK(lz_prompt_prefix_tokens(t, &ids, &n) == 0 && n > 1 && ids[0] == lz_tokenizer_bos(t), "plain prefix");
    char *s = decode(t, ids, n);
    CHECK(strstr(s, "Answer the question using only the documents below") != NULL, "plain prefix text: '%s'", s);
    free(s);
    free(ids);
    CHECK(lz_prompt_doc_tokens(t, "Paris", "Capital of France.", 18, &ids, &n) == 0 && ids[0] != lz_tokenizer_bos(t),
          "document without BOS");
    s = decode(t, ids, n);
    CHECK(strstr(s, "Document: Paris\nCapital of France.\n\n") != NULL, "document text: '%s'", s);
    free(s);
    free(ids);
    char *dt = lz_prompt_doc_text(NULL, "x", 1);
    CHECK(strcmp(dt, "Document:\nx\n\n") == 0, "untitled document: '%s'", dt);
    free(dt);
    CHECK(lz_prompt_question_tokens(t, "Where?", &ids, &n) == 0, "question");
    s = decode(t, ids, n);
    CHECK(strstr(s, "Question: Where?\nAnswer:") != NULL, "question text: '%s'", s);
    free(s);
    free(ids);
    lz_llama_free(m);

    char fx[512];
    if (lz_test_fixture("tokenizers/llama3-vocab.gguf", fx, sizeof fx)) {
        lz_gguf *g;
        lz_tokenizer *t3 = NULL;
        if (lz_gguf_open(fx, &g, err, sizeof err) == 0) {
            lz_tokenizer_from_gguf(g, &t3, err, sizeof err);
            lz_gguf_close(g);
        }
        CHECK(t3 != NULL, "llama3 vocab: %s", err);
        if (t3) {
            int sh = lz_tokenizer_find(t3, "<|start_header_id|>"), eh = lz_tokenizer_find(t3, "<|end_header_id|>"),
                eot = lz_tokenizer_find(t3, "<|eot_id|>");
            CHECK(lz_prompt_style_of(t3) == LZ_PROMPT_LLAMA3, "llama3 style");
            lz_prompt_prefix_tokens(t3, &ids, &n);
            CHECK(n > 6 && ids[0] == 128000 && ids[1] == sh && ids[3] == eh && count_id(ids, n, eot) == 1 &&
                      ids[n - 2] == eh, "llama3 prefix: BOS, system header, eot, user header (%d tokens)", n);
            s = decode(t3, ids, n);
            CHECK(strstr(s, "system") && strstr(s, "Answer briefly.") && strstr(s, "user"), "llama3 prefix text '%s'", s);
            free(s);
            free(ids);
            /* special-token text in a question stays text */
            lz_prompt_question_tokens(t3, "what is <|eot_id|> here?", &ids, &n);
            int at = -1;
            for (int i = 0; i < n; i++)
                if (ids[i] == eot) at = i;
            CHECK(count_id(ids, n, eot) == 1 && at > 4 && at + 1 < n && ids[at + 1] == sh,
                  "only the cue's <|eot_id|> is special (at %d of %d)", at, n);
            CHECK(count_id(ids, n, sh) == 1 && count_id(ids, n, eh) == 1, "assistant header once");
            free(ids);
            lz_prompt_doc_tokens(t3, "T", "<|start_header_id|>", 19, &ids, &n);
            CHECK(count_id(ids, n, sh) == 0, "document text never becomes a special token");
            free(ids);
            lz_tokenizer_free(t3);
        }
    }

    /* default model: $LAZY_MODEL, else an error that says --model */
    char path[1024];
    setenv("LAZY_MODEL", model_a, 1);
    lz_env_reload(); /* the switches are read once (base/env.h) */
    CHECK(lz_prompt_default_model(path, sizeof path, err, sizeof err) == 0 && strcmp(path, model_a) == 0, "env");
    setenv("LAZY_MODEL", "/nonexistent/m.gguf", 1);
    lz_env_reload();
    CHECK(lz_prompt_default_model(path, sizeof path, err, sizeof err) == -1 && strstr(err, "--model") &&
              strstr(err, "/nonexistent/m.gguf"), "env to a missing file: %s", err);
    unsetenv("LAZY_MODEL");
    lz_env_reload();
}

typedef struct {
    int n;
    char ext[64][32];
    uint8_t key[64][64];
} keys_of;

static int take_key(const lz_meta_doc *d, void *p)
{
    keys_of *k = p;
    if (k->n >= 64) return 1;
    snprintf(k->ext[k->n], 32, "%s", d->ext_id);
    memcpy(k->key[k->n++], d->payload_key, 64);
    return 0;
}

/* Documents encoded in parallel (several threads, a small model: one
 * encoder a thread) store exactly the payloads of one at a time
 * (lazyingest --serial) with as many threads, duplicate content included,
 * and decode to what an encoder computes (test_bits). */
/* Every document of stores a and b (want rows each) has the same id, key
 * and payload bytes; 1 if so. */
static int same_payloads(const char *sa, const char *sb, int want)
{
    char err[512];
    lz_store *a, *b;
    if (lz_store_open(sa, LZ_STORE_RDONLY, &a, err, sizeof err)) return printf("open: %s\n", err), 0;
    if (lz_store_open(sb, LZ_STORE_RDONLY, &b, err, sizeof err)) {
        lz_store_close(a);
        return printf("open: %s\n", err), 0;
    }
    keys_of ka = { 0 }, kb = { 0 };
    lz_meta_doc_foreach(test_store_meta(a), take_key, &ka, err, sizeof err);
    lz_meta_doc_foreach(test_store_meta(b), take_key, &kb, err, sizeof err);
    int same = ka.n == kb.n && ka.n == want;
    for (int i = 0; ka.n == kb.n && i < ka.n; i++) {
        void *x = NULL, *y = NULL;
        size_t lx = 0, ly = 0;
        int same1 = !strcmp(ka.ext[i], kb.ext[i]) && !memcmp(ka.key[i], kb.key[i], 64) &&
               !lz_store_get_payload(a, ka.key[i], &x, &lx, err, sizeof err) &&
               !lz_store_get_payload(b, kb.key[i], &y, &ly, err, sizeof err) && lx == ly && !memcmp(x, y, lx);
        if (!same1 && same) printf("first difference: %s (%zu and %zu bytes)\n", ka.ext[i], lx, ly);
        same &= same1;
        free(x);
        free(y);
    }
    if (ka.n != want || kb.n != want) printf("rows %d and %d, want %d\n", ka.n, kb.n, want);
    lz_store_close(a);
    lz_store_close(b);
    return same;
}

static void test_parallel(void)
{
    char ser[300], par[300], pas[300];
    snprintf(ser, sizeof ser, "%s/ser", dir);
    snprintf(par, sizeof par, "%s/par", dir);
    snprintf(pas, sizeof pas, "%s/pas", dir);
    char *c0 = make_corpus(40, 3, 1);
    const char *p0 = lz_test_write_file(dir, "par.jsonl", c0);
    /* --sync-commit: and each batch's payloads written before the next batch */
    const char *as[] = { "-m", model_a, "-s", ser, "--json", "--threads", "2", "--batch-tokens", "300", "--serial",
                         "--sync-commit", p0, NULL };
    const char *ap[] = { "-m", model_a, "-s", par, "--json", "--threads", "2", "--batch-tokens", "300", p0, NULL };
    const char *aq[] = { "-m", model_a, "-s", pas, "--json", "--threads", "3", "--batch-tokens", "300", p0, NULL };
    int rc = run_tool(as, NULL, 0, out, sizeof out, errs, sizeof errs);
    long added_s = jget(out, "added"), stored_s = jget(out, "stored_bytes");
    CHECK(rc == 0 && added_s == 42 && jget(out, "encoders") == 1, "one at a time: exit %d, %ld added, %ld encoders: %s",
          rc, added_s, jget(out, "encoders"), errs);
    rc = run_tool(ap, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "added") == 42 && jget(out, "stored_bytes") == stored_s && jget(out, "encoders") == 2,
          "in parallel: exit %d, %ld added, %ld stored bytes (one at a time %ld), %ld encoders: %s", rc,
          jget(out, "added"), jget(out, "stored_bytes"), stored_s, jget(out, "encoders"), errs);
    CHECK(n_payloads(par) == n_payloads(ser), "the same payloads (%llu and %llu)", (unsigned long long)n_payloads(par),
          (unsigned long long)n_payloads(ser));
    CHECK(same_payloads(ser, par, 42), "every document's payload identical, in parallel with batches committed while the "
                                       "next is encoded, and one at a time with each batch committed before the next");
    /* --gpu's pipeline of multi-document passes, on the CPU reference backend: passes of at
     * most 250 tokens (two or three documents a pass, a pass or two a batch), one thread driving
     * them, two fetching and packing (the CPU engine's bits do not depend on the thread count) */
    setenv("LAZY_INGEST_REF_PASSES", "250", 1);
    rc = run_tool(aq, NULL, 0, out, sizeof out, errs, sizeof errs);
    unsetenv("LAZY_INGEST_REF_PASSES");
    const long passes = jget(out, "passes"), pass_docs = jget(out, "pass_docs");
    CHECK(rc == 0 && jget(out, "added") == 42 && jget(out, "stored_bytes") == stored_s && passes > 6 && pass_docs > 2 * passes &&
              pass_docs == jget(out, "backend_docs"),
          "in passes: exit %d, %ld added, %ld stored bytes (%ld), %ld documents in %ld passes: %s", rc, jget(out, "added"),
          jget(out, "stored_bytes"), stored_s, pass_docs, passes, errs);
    CHECK(same_payloads(ser, pas, 42), "every document's payload identical through the pipeline of passes");
    {   /* the driver's time: in finish (every pass computes there on the reference), waiting for fetches */
        const double fin = jnum(out, "device_finish_s"), wait = jnum(out, "device_wait_fetch_s"), wall = jnum(out, "wall_s");
        CHECK(fin > 0 && wait >= 0 && fin + wait <= wall, "the passes' driver: %.3f s in finish, %.3f s waiting, of %.3f s",
              fin, wait, wall);
    }
    CHECK(jget(out, "backend_planes") == pass_docs, "packed from the backend's bf16 planes: %ld of %ld",
          jget(out, "backend_planes"), pass_docs);
    {   /* passes shorter than the documents: each document in a pass of its own (up to
         * --max-doc-tokens, what the backend holds), none left to one-document calls */
        char p_long[300];
        snprintf(p_long, sizeof p_long, "%s/paslong", dir);
        const char *al[] = { "-m", model_a, "-s", p_long, "--json", "--threads", "3", "--batch-tokens", "300", p0, NULL };
        setenv("LAZY_INGEST_REF_PASSES", "8", 1);
        rc = run_tool(al, NULL, 0, out, sizeof out, errs, sizeof errs);
        unsetenv("LAZY_INGEST_REF_PASSES");
        CHECK(rc == 0 && jget(out, "added") == 42 && jget(out, "passes") == pass_docs && jget(out, "pass_docs") == pass_docs &&
                  jget(out, "backend_docs") == pass_docs,
              "passes of 8 tokens: exit %d, %ld documents in %ld passes, %ld on the backend (encoded: %ld): %s", rc,
              jget(out, "pass_docs"), jget(out, "passes"), jget(out, "backend_docs"), pass_docs, errs);
        CHECK(same_payloads(ser, p_long, 42), "every document's payload identical, each in a pass of its own");
    }
    /* fp8 through the passes from the backend's fp8 planes (the GPU quantises on the device),
     * and widened on the host (LAZY_INGEST_PLANES=0): the bytes of one-at-a-time fp8 encoding */
    {
        char f_ser[300], f_pas[300], f_wid[300];
        snprintf(f_ser, sizeof f_ser, "%s/f8ser", dir);
        snprintf(f_pas, sizeof f_pas, "%s/f8pas", dir);
        snprintf(f_wid, sizeof f_wid, "%s/f8wid", dir);
        const char *fs[] = { "-m", model_a, "-s", f_ser, "--json", "--kv-dtype", "fp8", "--batch-tokens", "300", "--serial", p0, NULL };
        const char *fp[] = { "-m", model_a, "-s", f_pas, "--json", "--kv-dtype", "fp8", "--threads", "3", "--batch-tokens", "300", p0, NULL };
        const char *fw[] = { "-m", model_a, "-s", f_wid, "--json", "--kv-dtype", "fp8", "--threads", "3", "--batch-tokens", "300", p0, NULL };
        rc = run_tool(fs, NULL, 0, out, sizeof out, errs, sizeof errs);
        const long f_stored = jget(out, "stored_bytes");
        CHECK(rc == 0 && jget(out, "added") == 42 && f_stored < stored_s, "fp8 one at a time: exit %d, %ld bytes (bf16 %ld): %s",
              rc, f_stored, stored_s, errs);
        setenv("LAZY_INGEST_REF_PASSES", "250", 1);
        rc = run_tool(fp, NULL, 0, out, sizeof out, errs, sizeof errs);
        CHECK(rc == 0 && jget(out, "stored_bytes") == f_stored && jget(out, "backend_planes") == jget(out, "pass_docs") &&
                  jget(out, "pass_docs") > 0,
              "fp8 in passes from fp8 planes: exit %d, %ld bytes (%ld), %ld of %ld documents from planes: %s", rc,
              jget(out, "stored_bytes"), f_stored, jget(out, "backend_planes"), jget(out, "pass_docs"), errs);
        setenv("LAZY_INGEST_PLANES", "0", 1);
        rc = run_tool(fw, NULL, 0, out, sizeof out, errs, sizeof errs);
        unsetenv("LAZY_INGEST_PLANES");
        unsetenv("LAZY_INGEST_REF_PASSES");
        CHECK(rc == 0 && jget(out, "stored_bytes") == f_stored && jget(out, "backend_planes") == 0,
              "fp8 in passes widened on the host: exit %d, %ld bytes (%ld), %ld from planes: %s", rc,
              jget(out, "stored_bytes"), f_stored, jget(out, "backend_planes"), errs);
        CHECK(same_payloads(f_ser, f_pas, 42) && same_payloads(f_ser, f_wid, 42),
              "fp8: every payload identical from planes, widened, and one at a time");
    }
    /* the same passes when the OpenMP runtime gives the pipeline one thread (OMP_THREAD_LIMIT=1
     * with --threads 3): each pass finished, its documents encoded, the next started, on one
     * thread; then a failing pass on that path */
    char p1[300], p1f[300];
    snprintf(p1, sizeof p1, "%s/pas1", dir);
    snprintf(p1f, sizeof p1f, "%s/pas1fail", dir);
    const char *a1[] = { "-m", model_a, "-s", p1, "--json", "--threads", "3", "--batch-tokens", "300", p0, NULL };
    /* the failing pass: fault injection of the test build only (build/tests/lazyingest-hooks) */
    const char *a1f[] = { "-m", model_a, "-s", p1f, "--json", "--threads", "3", "--batch-tokens", "300",
                          "--test-fail-pass", "9", p0, NULL };
    setenv("LAZY_INGEST_REF_PASSES", "250", 1);
    setenv("OMP_THREAD_LIMIT", "1", 1);
    rc = run_tool(a1, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "added") == 42 && jget(out, "stored_bytes") == stored_s && jget(out, "passes") == passes &&
              jget(out, "pass_docs") == pass_docs && jget(out, "backend_docs") == pass_docs,
          "in passes on one thread: exit %d, %ld added, %ld stored bytes (%ld), %ld documents in %ld passes (%ld in %ld): %s",
          rc, jget(out, "added"), jget(out, "stored_bytes"), stored_s, jget(out, "pass_docs"), jget(out, "passes"),
          pass_docs, passes, errs);
    CHECK(same_payloads(ser, p1, 42), "every document's payload identical through the passes on one thread");
    rc = run_hooks(a1f, out, sizeof out, errs, sizeof errs);
    unsetenv("OMP_THREAD_LIMIT");
    unsetenv("LAZY_INGEST_REF_PASSES");
    rows got1;
    read_rows(p1f, &got1);
    CHECK(rc == 1 && strstr(errs, "failed (injected)") && got1.n > 0 && got1.n < 42,
          "a failed pass on one thread: exit %d, %d rows committed before it: %s", rc, got1.n, errs);
    /* a pass that fails (as a device error would): the run stops with the documents named, the
     * batches before it committed and whole, and the next run completes the store */
    char pf[300];
    snprintf(pf, sizeof pf, "%s/pasfail", dir);
    const char *af[] = { "-m", model_a, "-s", pf, "--json", "--threads", "3", "--batch-tokens", "300", p0, NULL };
    const char *aff[] = { "-m", model_a, "-s", pf, "--json", "--threads", "3", "--batch-tokens", "300",
                          "--test-fail-pass", "9", p0, NULL };
    setenv("LAZY_INGEST_REF_PASSES", "250", 1);
    rc = run_hooks(aff, out, sizeof out, errs, sizeof errs);
    rows got;
    read_rows(pf, &got);
    CHECK(rc == 1 && strstr(errs, "a pass of documents '") && strstr(errs, "failed (injected)") && got.n > 0 && got.n < 42,
          "a failed pass: exit %d, %d rows committed before it: %s", rc, got.n, errs);
    const char *ac[] = { "-s", pf, "--check", "--json", NULL };
    rc = run_tool(ac, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && jget(out, "check_issues") == 0, "the store after a failed pass passes --check: %s", out);
    rc = run_tool(af, NULL, 0, out, sizeof out, errs, sizeof errs);
    unsetenv("LAZY_INGEST_REF_PASSES");
    CHECK(rc == 0 && jget(out, "added") == 42 - got.n, "the next run adds the rest: exit %d, %ld added after %d: %s", rc,
          jget(out, "added"), got.n, errs);
    CHECK(same_payloads(ser, pf, 42), "and every payload is the one-at-a-time bytes");
    /* KV eviction through the passes: the backend's attention masses (fetch_mass) finish the
     * scoring; the stores equal one-at-a-time encoding byte for byte */
    char ks[300], kp[300];
    snprintf(ks, sizeof ks, "%s/kvser", dir);
    snprintf(kp, sizeof kp, "%s/kvpas", dir);
    const char *aks[] = { "-m", model_a, "-s", ks, "--json", "--threads", "2", "--batch-tokens", "300", "--kv-policy",
                          "ada-snapkv", "--kv-budget", "0.5", "--kv-window", "8", "--serial", p0, NULL };
    const char *akp[] = { "-m", model_a, "-s", kp, "--json", "--threads", "3", "--batch-tokens", "300", "--kv-policy",
                          "ada-snapkv", "--kv-budget", "0.5", "--kv-window", "8", p0, NULL };
    rc = run_tool(aks, NULL, 0, out, sizeof out, errs, sizeof errs);
    const long kv_stored = jget(out, "stored_bytes");
    CHECK(rc == 0 && jget(out, "added") == 42, "KV eviction one at a time: exit %d: %s", rc, errs);
    setenv("LAZY_INGEST_REF_PASSES", "250", 1);
    rc = run_tool(akp, NULL, 0, out, sizeof out, errs, sizeof errs);
    unsetenv("LAZY_INGEST_REF_PASSES");
    CHECK(rc == 0 && jget(out, "added") == 42 && jget(out, "stored_bytes") == kv_stored && jget(out, "backend_masses") > 20,
          "KV eviction in passes: exit %d, %ld stored bytes (%ld), %ld documents scored from the backend's masses: %s", rc,
          jget(out, "stored_bytes"), kv_stored, jget(out, "backend_masses"), errs);
    CHECK(same_payloads(ks, kp, 42), "KV eviction: every payload identical through the passes");
    test_bits(par);
    free(c0);
}

/* ---- JSON arrays, --id-field, HotpotQA context records (issue #31) ---- */

/* The text (or title) of row ext_id of a store, copied into buf ("" when absent). */
typedef struct {
    const char *id;
    char *buf;
    size_t n;
    int title, found;
} text_of;

static int take_text(const lz_meta_doc *d, void *p)
{
    text_of *t = p;
    if (strcmp(d->ext_id, t->id)) return 0;
    const char *s = t->title ? d->title : d->text;
    snprintf(t->buf, t->n, "%s", s ? s : "");
    t->found = 1;
    return 1;
}

static int row_text(const char *store, const char *id, int title, char *buf, size_t n)
{
    text_of t = { id, buf, n, title, 0 };
    buf[0] = 0;
    lz_store *s;
    char err[512];
    if (lz_store_open(store, LZ_STORE_RDONLY, &s, err, sizeof err)) return 0;
    lz_meta_doc_foreach(test_store_meta(s), take_text, &t, err, sizeof err);
    lz_store_close(s);
    return t.found;
}

/* Every record of path through the corpus reader: ids (joined by '|'), warnings and bad
 * messages (joined by '\n'), counts; the reader's format. */
typedef struct {
    int n_ok, n_bad, n_warn, status;
    lz_corpus_format fmt;
    char ids[8192], msgs[16384];
    long first_line, first_index;
} corpus_read;

static void read_corpus(const char *path, const char *id_field, corpus_read *r)
{
    memset(r, 0, sizeof *r);
    lz_corpus *c;
    char err[2048];
    if ((r->status = lz_corpus_open(path, LZ_CORPUS_AUTO, &c, err, sizeof err))) {
        snprintf(r->msgs, sizeof r->msgs, "%s", err);
        return;
    }
    if (id_field) lz_corpus_set_id_field(c, id_field);
    r->fmt = lz_corpus_get_format(c);
    lz_corpus_record rec;
    int rc;
    size_t oi = 0, om = 0;
    while ((rc = lz_corpus_next(c, &rec, err, sizeof err)) != LZ_CORPUS_EOF) {
        if (rc == LZ_CORPUS_BAD) {
            r->n_bad++;
            if (om < sizeof r->msgs) om += (size_t)snprintf(r->msgs + om, sizeof r->msgs - om, "%s\n", err);
            continue;
        }
        if (rc) {
            r->status = rc;
            if (om < sizeof r->msgs) om += (size_t)snprintf(r->msgs + om, sizeof r->msgs - om, "%s\n", err);
            break;
        }
        if (!r->n_ok) r->first_line = rec.line, r->first_index = rec.index;
        r->n_ok++;
        if (rec.warning) {
            r->n_warn++;
            if (om < sizeof r->msgs) om += (size_t)snprintf(r->msgs + om, sizeof r->msgs - om, "%s\n", rec.warning);
        }
        if (oi < sizeof r->ids) oi += (size_t)snprintf(r->ids + oi, sizeof r->ids - oi, "%s|", rec.id);
    }
    lz_corpus_close(c);
}

/* A corpus that is one JSON array: detected from its first byte (whatever the name, from
 * standard input too), its format said in the text summary, bad records named by file, line
 * and index and skipped, a broken array refused before anything is stored, a rerun unchanged. */
static void test_json_array(void)
{
    char store[300];
    snprintf(store, sizeof store, "%s/array", dir);
    const char *p = lz_test_write_file(dir, "arr.json",
                                       "\xEF\xBB\xBF  [\n"
                                       "  {\"id\": \"a1\", \"title\": \"First\",\n"
                                       "   \"text\": \"The first record of the array.\"},\n"
                                       "  {\"id\": \"a2\"},\n"                                    /* line 4 */
                                       "  {\"id\": \"a3\", \"text\": \"bad \xff byte\"},\n"       /* line 5 */
                                       "  {\"id\": \"a4\",\n    \"text\": \"x\" \"y\"},\n"        /* line 6, error on 7 */
                                       "  17,\n"                                                 /* line 8 */
                                       "  {\"id\": 5, \"text\": \"An integer id, last.\"}\n"
                                       "]\n");
    corpus_read cr;
    read_corpus(p, NULL, &cr);
    CHECK(cr.fmt == LZ_CORPUS_JSON_ARRAY && !strcmp(lz_corpus_format_name(cr.fmt), "json-array"),
          "a '[' after a BOM and spaces: a JSON array (%d)", cr.fmt);
    CHECK(cr.n_ok == 2 && cr.n_bad == 4 && !strcmp(cr.ids, "a1|5|") && cr.first_line == 2 && cr.first_index == 0,
          "array records: %d ok (%s), %d bad, first at line %ld index %ld", cr.n_ok, cr.ids, cr.n_bad, cr.first_line,
          cr.first_index);
    static const char *want[] = { "arr.json:4: record [1]: id 'a2': missing \"text\"",
                                  "arr.json:5: record [2]: invalid UTF-8 at line 5",
                                  "arr.json:6: record [3]: invalid JSON at line 7",
                                  "arr.json:8: record [4]: expected a JSON object, found a scalar" };
    for (int i = 0; i < 4; i++) CHECK(strstr(cr.msgs, want[i]) != NULL, "message '%s' in: %s", want[i], cr.msgs);

    const char *a[] = { "-m", model_a, "-s", store, p, NULL };
    int rc = run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs);
    rows r;
    read_rows(store, &r);
    CHECK(rc == 2 && r.n == 2 && find_row(&r, "a1") >= 0 && find_row(&r, "5") >= 0, "array ingest: exit %d, %d rows: %s",
          rc, r.n, errs);
    CHECK(strstr(out, "read as json-array") != NULL, "the summary says the format: %s", out);
    for (int i = 0; i < 4; i++) CHECK(strstr(errs, want[i]) != NULL, "lazyingest names '%s': %s", want[i], errs);
    CHECK(!strstr(errs, "invalid JSON at column"), "no JSONL-style line errors for an array: %s", errs);
    const char *aj[] = { "-m", model_a, "-s", store, "--json", p, NULL };
    rc = run_tool(aj, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 2 && jget(out, "unchanged") == 2 && jget(out, "added") == 0 && jget(out, "skipped") == 4,
          "array rerun unchanged: %s", out);
    CHECK(strstr(out, "\"corpus_format\":\"json-array\"") != NULL, "--json names the format: %s", out);

    /* standard input, no name to go by; JSONL still read as JSONL */
    char store2[300];
    snprintf(store2, sizeof store2, "%s/array-stdin", dir);
    const char *ps = lz_test_write_file(dir, "arr.txt", "[{\"id\": \"s1\", \"text\": \"From standard input.\"}]");
    const char *as[] = { "-m", model_a, "-s", store2, "-", NULL };
    rc = run_tool(as, ps, 0, out, sizeof out, errs, sizeof errs);
    read_rows(store2, &r);
    CHECK(rc == 0 && r.n == 1 && find_row(&r, "s1") == 0 && strstr(out, "<stdin>: read as json-array"),
          "array on stdin: exit %d, %d rows: %s %s", rc, r.n, out, errs);
    const char *pl = lz_test_write_file(dir, "one.jsonl", "{\"id\": \"j1\", \"text\": \"A JSONL line.\"}\n");
    const char *al[] = { "-m", model_a, "-s", store2, pl, NULL };
    rc = run_tool(al, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 0 && strstr(out, "read as jsonl"), "JSONL says so: %s", out);
    read_corpus(pl, NULL, &cr);
    CHECK(cr.fmt == LZ_CORPUS_JSONL && cr.n_ok == 1 && cr.first_index == -1, "JSONL records have no index");

    /* a broken array: refused as a whole, nothing stored */
    static const struct { const char *text, *msg; } broken[] = {
        { "[{\"id\": \"b1\", \"text\": \"ok\"},\n {\"id\": \"b2\", \"text\": \"open\"\n", "arr-bad.json:2: record [1]: not closed" },
        { "[{\"id\": \"b1\", \"text\": \"ok\"}\n {\"id\": \"b2\", \"text\": \"no comma\"}]", "',' or ']' expected after record [0]" },
        { "[{\"id\": \"b1\", \"text\": \"ok\"},]", "a record expected in the JSON array, found ']'" },
        { "[{\"id\": \"b1\", \"text\": \"ok\"}] {}", "text after the closing ']'" },
        { "[{\"id\": \"b1\", \"text\": \"ok\"}", "the JSON array is not closed" },
    };
    for (int i = 0; i < 5; i++) {
        char sb[300];
        snprintf(sb, sizeof sb, "%s/array-bad%d", dir, i);
        const char *pb = lz_test_write_file(dir, "arr-bad.json", broken[i].text);
        const char *ab[] = { "-m", model_a, "-s", sb, pb, NULL };
        rc = run_tool(ab, NULL, 0, out, sizeof out, errs, sizeof errs);
        read_rows(sb, &r);
        CHECK(rc == 1 && r.n == 0 && strstr(errs, broken[i].msg), "broken array %d: exit %d, %d rows: %s", i, rc, r.n,
              errs);
    }
    read_corpus(lz_test_write_file(dir, "empty.json", " [ ] \n"), NULL, &cr);
    CHECK(cr.status == 0 && cr.n_ok == 0 && cr.n_bad == 0, "an empty array: no records (%d)", cr.status);
    read_corpus(lz_test_write_file(dir, "notarr.json", "   "), NULL, &cr);
    CHECK(cr.fmt == LZ_CORPUS_JSONL && cr.n_ok == 0, "blank JSON input: JSONL, no records");
}

/* --id-field: records without "id" ({"title", "text"}, as 2WikiMultihopQA's passages) are
 * ingested with their titles as ids, commas and all; without it each is named and skipped. */
static void test_id_field(void)
{
    char store[300];
    snprintf(store, sizeof store, "%s/idfield", dir);
    const char *p = lz_test_write_file(dir, "titles.json",
                                       "[{\"title\": \"Ackworth, Yorkshire\", \"text\": \"A village in Yorkshire.\"},\n"
                                       " {\"title\": \"Teutberga\", \"text\": \"A queen of Lotharingia.\"},\n"
                                       " {\"text\": \"No title at all.\"}]\n");
    const char *a0[] = { "-m", model_a, "-s", store, "--json", p, NULL };
    int rc = run_tool(a0, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 2 && jget(out, "added") == 0 && jget(out, "skipped") == 3 &&
              strstr(errs, "titles.json:1: record [0]: missing \"id\"") && strstr(errs, "titles.json:2: record [1]: missing \"id\""),
          "no id field: every record named and skipped: exit %d %s", rc, errs);
    const char *a[] = { "-m", model_a, "-s", store, "--json", "--id-field", "title", p, NULL };
    rc = run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs);
    rows r;
    read_rows(store, &r);
    CHECK(rc == 2 && jget(out, "added") == 2 && r.n == 2 && find_row(&r, "Ackworth, Yorkshire") >= 0 &&
              find_row(&r, "Teutberga") >= 0,
          "--id-field title: exit %d, %d rows: %s %s", rc, r.n, out, errs);
    CHECK(strstr(errs, "titles.json:3: record [2]: missing \"title\"") != NULL, "a record without the id field: %s", errs);
    char t[256];
    CHECK(row_text(store, "Teutberga", 1, t, sizeof t) && !strcmp(t, "Teutberga"), "the title stays the title: '%s'", t);
    /* JSONL and CSV alike; an integer field works as an id */
    char store2[300];
    snprintf(store2, sizeof store2, "%s/idfield2", dir);
    const char *pj = lz_test_write_file(dir, "ids.jsonl", "{\"key\": \"k-one\", \"text\": \"One.\"}\n"
                                                         "{\"key\": 2, \"text\": \"Two.\"}\n");
    const char *aj[] = { "-m", model_a, "-s", store2, "--id-field=key", pj, NULL };
    rc = run_tool(aj, NULL, 0, out, sizeof out, errs, sizeof errs);
    read_rows(store2, &r);
    CHECK(rc == 0 && r.n == 2 && find_row(&r, "k-one") >= 0 && find_row(&r, "2") >= 0, "JSONL --id-field key: %d %s",
          rc, errs);
    const char *pc = lz_test_write_file(dir, "ids.csv", "Title,text\n\"Comma, Town\",A town with a comma.\n");
    const char *ac[] = { "-m", model_a, "-s", store2, "--id-field", "title", pc, NULL };
    rc = run_tool(ac, NULL, 0, out, sizeof out, errs, sizeof errs);
    read_rows(store2, &r);
    CHECK(rc == 0 && find_row(&r, "Comma, Town") >= 0, "CSV --id-field title: %d %s", rc, errs);
    CHECK(row_text(store2, "Comma, Town", 1, t, sizeof t) && !strcmp(t, "Comma, Town"), "CSV title kept: '%s'", t);
    const char *pn = lz_test_write_file(dir, "noid.csv", "name,text\nx,y\n");
    const char *an[] = { "-m", model_a, "-s", store2, "--id-field", "key", pn, NULL };
    rc = run_tool(an, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 1 && strstr(errs, "must name the columns key and text"), "CSV header without the id field: %s", errs);
    const char *ae[] = { "-m", model_a, "-s", store2, "--id-field", "", pj, NULL };
    rc = run_tool(ae, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 2 && strstr(errs, "--id-field"), "an empty --id-field refused: %d %s", rc, errs);
}

/* HotpotQA's records ("context": [[title, [sentences...]], ...], no "text"): one document per
 * pair, sentences joined with single spaces, a repeated pair once, a title with other text
 * "title (2)" with a warning (the same in both passes over the corpus). */
static void test_context_records(void)
{
    char store[300];
    snprintf(store, sizeof store, "%s/context", dir);
    const char *p = lz_test_write_file(dir, "hotpot.json",
        "[{\"_id\": \"q1\", \"question\": \"Who?\", \"answer\": \"x\",\n"
        "  \"context\": [[\"Alpha\", [\"Alpha is a river.\", \" It is long.\"]],\n"
        "               [\"Beta, Town\", [\"Beta is a town.\", \"It has a mill.\"]]]},\n"
        " {\"_id\": \"q2\", \"question\": \"What?\",\n"
        "  \"context\": [[\"Alpha\", [\"Alpha is a river.\", \" It is long.\"]],\n"
        "               [\"Beta, Town\", [\"Beta is another town.\"]],\n"
        "               [\"Gamma\", \"not a list\"],\n"
        "               [\"Delta\", [\"Delta.\"]]]}]\n");
    corpus_read cr;
    read_corpus(p, NULL, &cr);
    CHECK(cr.n_ok == 4 && cr.n_bad == 1 && cr.n_warn == 1 && !strcmp(cr.ids, "Alpha|Beta, Town|Beta, Town (2)|Delta|"),
          "context pairs: %d ok (%s), %d bad, %d warnings: %s", cr.n_ok, cr.ids, cr.n_bad, cr.n_warn, cr.msgs);
    CHECK(strstr(cr.msgs, "hotpot.json:4: record [1]: \"context\" [2]: expected [title, [sentences...]]") &&
              strstr(cr.msgs, "'Beta, Town' was seen before with other text; this one is stored as 'Beta, Town (2)'"),
          "context messages: %s", cr.msgs);
    const char *a[] = { "-m", model_a, "-s", store, "--json", p, NULL };
    int rc = run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs);
    rows r;
    read_rows(store, &r);
    CHECK(rc == 2 && r.n == 4 && jget(out, "added") == 4 && jget(out, "skipped") == 1 && jget(out, "duplicates") == 0,
          "context ingest: exit %d, %d rows: %s %s", rc, r.n, out, errs);
    char t[256];
    CHECK(row_text(store, "Alpha", 0, t, sizeof t) && !strcmp(t, "Alpha is a river. It is long."), "Alpha: '%s'", t);
    CHECK(row_text(store, "Beta, Town", 0, t, sizeof t) && !strcmp(t, "Beta is a town. It has a mill."), "Beta: '%s'", t);
    CHECK(row_text(store, "Beta, Town (2)", 0, t, sizeof t) && !strcmp(t, "Beta is another town."), "Beta (2): '%s'", t);
    CHECK(row_text(store, "Beta, Town (2)", 1, t, sizeof t) && !strcmp(t, "Beta, Town"), "Beta (2)'s title: '%s'", t);
    const char *warn = strstr(errs, "stored as 'Beta, Town (2)'");
    CHECK(warn && !strstr(warn + 1, "stored as 'Beta, Town (2)'"), "the warning once per run: %s", errs);
    rc = run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs);
    CHECK(rc == 2 && jget(out, "unchanged") == 4 && jget(out, "added") == 0, "context rerun unchanged: %s", out);
}

/* The fixtures of issue #31 (../shared/fixtures/qa; SKIP when absent): the official HotpotQA
 * sample (a JSON array, 11,127 lines, read line by line before) and 2WikiMultihopQA's passages
 * (an array of {"title", "text"}, no ids). */
static void test_qa_fixtures(void)
{
    char fb[600], fw[600];
    const char *hp = lz_test_fixture("qa/hotpotqa_sample100.json", fb, sizeof fb);
    if (hp) {
        corpus_read cr;
        read_corpus(hp, NULL, &cr);
        CHECK(cr.status == 0 && cr.fmt == LZ_CORPUS_JSON_ARRAY && cr.n_ok == 994 && cr.n_bad == 0 && cr.n_warn == 0,
              "HotpotQA sample: %d documents, %d bad, %d warnings: %.500s", cr.n_ok, cr.n_bad, cr.n_warn, cr.msgs);
        /* lazyingest on its first two questions (the whole sample: bench/) */
        size_t len;
        char *s = lz_test_read_file(hp, &len);
        json_error_t je;
        json_t *all = s ? json_loads(s, 0, &je) : NULL, *two = json_array();
        for (size_t i = 0; i < 2 && i < json_array_size(all); i++) json_array_append(two, json_array_get(all, i));
        char *txt = json_dumps(two, JSON_INDENT(2));
        const char *p = lz_test_write_file(dir, "hotpot2.json", txt ? txt : "");
        char store[300];
        snprintf(store, sizeof store, "%s/hotpot2", dir);
        const char *a[] = { "-m", model_a, "-s", store, "--json", p, NULL };
        int rc = run_tool(a, NULL, 0, out, sizeof out, errs, sizeof errs);
        CHECK(rc == 0 && jget(out, "added") >= 20 && jget(out, "skipped") == 0, "two HotpotQA questions: exit %d %s %s", rc,
              out, errs);
        char t[4096];
        CHECK(row_text(store, "Demon Dice", 0, t, sizeof t) &&
                  !strncmp(t, "Demon Dice, originally published as Chaos Progenitus", 40) && strstr(t, "Tim Brown. In it,"),
              "a HotpotQA paragraph's sentences joined: '%.120s'", t);
        free(txt);
        json_decref(two);
        json_decref(all);
        free(s);
    }
    const char *wp = lz_test_fixture("qa/2wikimqa_corpus.json", fw, sizeof fw);
    if (wp) {
        corpus_read cr;
        read_corpus(wp, NULL, &cr);
        CHECK(cr.fmt == LZ_CORPUS_JSON_ARRAY && cr.n_ok == 0 && cr.n_bad > 6000 && strstr(cr.msgs, "record [0]: missing \"id\""),
              "2Wiki without --id-field: %d ok, %d bad", cr.n_ok, cr.n_bad);
        read_corpus(wp, "title", &cr);
        CHECK(cr.status == 0 && cr.n_ok > 6000 && cr.n_bad == 0 && strstr(cr.ids, "Lambert, Margrave of Tuscany|"),
              "2Wiki with --id-field title: %d ok, %d bad: %.300s", cr.n_ok, cr.n_bad, cr.msgs);
    }
}

int main(void)
{
    if (!lz_test_tmpdir(dir, sizeof dir)) return 1;
    const char *b = getenv("LZ_BIN");
    snprintf(bin, sizeof bin, "%s/lazyingest", b ? b : "build/bin");
    if (access(bin, X_OK) != 0) {
        printf("SKIP %s not built\n", bin);
        return lz_test_done();
    }
    char err[512];
    lz_mkmodel_opts mo;
    lz_mkmodel_defaults(&mo);
    snprintf(model_a, sizeof model_a, "%s/a.gguf", dir);
    snprintf(model_b, sizeof model_b, "%s/b.gguf", dir);
    CHECK(lz_mkmodel_write(&mo, model_a, err, sizeof err) == 0, "model a: %s", err);
    mo.seed = 2;
    CHECK(lz_mkmodel_write(&mo, model_b, err, sizeof err) == 0, "model b: %s", err);
    unsetenv("LAZY_MODEL");
    double t0 = lz_now_s();
    test_prompt();
    test_incremental();
    test_bad_inputs();
    test_split();
    test_json_array();
    test_id_field();
    test_context_records();
    test_qa_fixtures();
    test_f32_store();
    test_raw_codec();
    test_parallel();
    test_disk_full();
    test_disk_full_tmpfs();
    test_empty_store();
    printf("functional tests: %.1f s\n", lz_now_s() - t0);
    test_crash();
    printf("total: %.1f s\n", lz_now_s() - t0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    return lz_test_done();
}
