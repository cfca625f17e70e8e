/* lazyingest.c - encodes a corpus once into a store: every document's KV
 * (after the shared prompt prefix, keys at local positions) as a
 * content-addressed payload in LMDB, its row and full-text index in SQLite.
 * Re-runs encode only what changed; --prune, --gc, --check and --repair keep
 * a nightly re-indexed store consistent. Library pieces: ingest/corpus.h,
 * ingest/split.h, ingest/encode.h, store/store.h, model/prompt.h.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <omp.h>
#include <pthread.h>
#include <unistd.h>

#include "ingest/corpus.h"
#include "ingest/encode.h"
#include "ingest/kvpolicy.h"
#include "ingest/split.h"
#include "model/llama.h"
#ifdef LZ_CUDA
#include "model/llama_cuda.h"
#endif
#include "model/prompt.h"
#include "store/store.h"
#include "model/runtime.h"
#include "model/unicode.h"

enum { EXIT_OK = 0, EXIT_ERR = 1, EXIT_SKIPPED = 2, EXIT_CHECK = 3 };

typedef struct {
    const char *corpus, *model, *store;
    int batch_tokens, threads, max_doc_tokens, level, format, kv_dtype;
    int prune, strict, check, repair, gc, quiet, json, gpu;
    lz_kvpolicy kv;       /* KV eviction at ingest (--kv-policy, --kv-budget, ...) */
    const char *kv_budget_arg;
    const char *probe_text; /* --kv-probe-text: the question in the probe cue (NULL = "") */
    const char *learned;    /* --kv-learned: key-importance model file */
    const char *learn_out;  /* --kv-learn-out: fit one from this run's reconstruction scores */
} options;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lazyingest [options] corpus.jsonl | corpus.csv | -\n"
            "       lazyingest --check | --repair | --gc [options]\n"
            "Encodes every document of a corpus once and stores its KV for lazyquery.\n"
            "Input: JSONL, one {\"id\": string|int, \"text\": ..., \"title\": ...} per line, or CSV\n"
            "with a header naming id, text (and optionally title). '-' reads standard input.\n"
            "  -m, --model PATH       GGUF model (default: $%s, else <repo>/%s)\n"
            "  -s, --store DIR        store folder (default ./lazystore)\n"
            "  --batch-tokens N       tokens encoded between commits (default 8192)\n"
            "  --threads N            CPU threads (default: all cores); a small model (width <= 2048)\n"
            "                         encodes one document a thread, a larger one uses them all for\n"
            "                         each document; payloads are the same bytes either way\n"
            "  --max-doc-tokens N     split longer documents into passages id#0, id#1, ...\n"
            "                         at sentence or line boundaries (default 1024)\n"
            "  --level N              zstd level of the payloads, 1..19 (default %d)\n"
            "  --kv-dtype bf16|f32    element type of a new store's KV payloads (default bf16;\n"
            "                         fixed per store: f32 is exact, twice the size)\n"
            "  --kv-policy P          KV eviction at ingest: none (default), snapkv, ada-snapkv,\n"
            "                         pyramidkv, ada-pyramidkv; only the kept keys and values are stored\n"
            "  --kv-budget B          kept tokens per kv head: a fraction of the document (0.2) or an\n"
            "                         average count (128t); the window counts in it; documents shorter\n"
            "                         than window + budget are stored whole\n"
            "  --kv-window N          observation window: the last N tokens, always kept (default %d)\n"
            "  --kv-kernel K          max-pooling kernel along positions, odd (default %d)\n"
            "  --kv-alpha A           Ada: share of the budget reserved per head (default %g)\n"
            "  --kv-agg mean|max      GQA: aggregate a kv head's query heads (default mean)\n"
            "  --kv-probe             observation window = the prompt's question cue run after the\n"
            "                         document (scored, not stored) instead of the document's tail\n"
            "  --kv-probe-text Q      the same with question Q in the cue (UTF-8, at most 1024 bytes;\n"
            "                         recorded in each document's KV spec as a hash; --repair needs the\n"
            "                         same Q to re-encode such documents)\n"
            "  --kv-reconstruct       observation window = the document itself run again after it\n"
            "                         (KVzip-style: keys scored while the model re-reads the passage;\n"
            "                         best quality, costs about one more encoding of every document)\n"
            "  --kv-self              observation window = every document token's own query as it was\n"
            "                         encoded (H2O-style: a key scores the attention all later tokens\n"
            "                         gave it; no extra forward pass; recorded as 'self')\n"
            "  --kv-value-norm        value-aware scores: a key's attention score times the mean |v| of\n"
            "                         its value row over its layer's mean of that (VATP-style;\n"
            "                         recorded in the KV spec as 'vnorm')\n"
            "  --kv-value-power P     value-aware scores with (mean |v|)^P, P in (0, 16] (implies\n"
            "                         --kv-value-norm; 2 is best on the QA dev split; 'vnorm=P')\n"
            "  --kv-learned FILE      scores from a fitted key-importance model (a linear model per\n"
            "                         layer and kv head of the reconstruction score from each key's\n"
            "                         value and unrotated key; no extra forward pass; recorded as\n"
            "                         'learned=<hash>'; --repair needs the same FILE)\n"
            "  --kv-learn-out FILE    with --kv-reconstruct: fit that model on the documents this run\n"
            "                         encodes and write it to FILE (calibration; use a new store)\n"
            "  --kv-scope layer|model Ada-SnapKV: the joint selection over one layer's kv heads (default,\n"
            "                         as Ada-KV) or over every head of every layer, so layers get unequal\n"
            "                         budgets too (recorded in the KV spec as 'model')\n"
            "  --format jsonl|csv     input format when the file name does not tell\n"
            "  --prune                remove documents absent from this corpus\n"
            "  --strict               stop at the first bad record (all before it is committed)\n"
            "  --check                verify every document's payload (presence, checksum, model)\n"
            "  --repair               re-encode or remove what --check finds broken\n"
            "  --gc                   remove payloads no document references (runs also do this)\n"
            "  --quiet                no progress and no summary (errors still printed)\n"
            "  --json                 print the summary as JSON on standard output\n"
            "  --gpu                  encode documents on the GPU (CUDA builds: 'make cuda' makes\n"
            "                         build/cuda/lazyingest): bf16 activations, so payloads differ from\n"
            "                         the CPU's at bf16 level; --kv-probe / --kv-reconstruct stay on the CPU;\n"
            "                         documents take turns on the GPU while the others are packed on\n"
            "                         every core (the same bytes as one at a time)\n"
            "  -h, --help             this text\n"
            "Exit status: 0 ok, 1 error, 2 some records were skipped, 3 --check found problems.\n"
            "LAZY_INGEST_SERIAL=1 encodes one document at a time whatever the model.\n"
            "A batch's payloads are written to LMDB on a thread while the next batch is encoded\n"
            "(its rows committed after them); LAZY_INGEST_SYNC_COMMIT=1 writes them before.\n"
            LZ_RUNTIME_ENV_HELP,
            LZ_DEFAULT_MODEL_ENV, LZ_DEFAULT_MODEL, LZ_PAYLOAD_DEFAULT_LEVEL, LZ_KVPOLICY_DEFAULT_WINDOW,
            LZ_KVPOLICY_DEFAULT_KERNEL, (double)LZ_KVPOLICY_DEFAULT_ALPHA);
}

/* Online CPUs (at least 1). */
static int cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 && n < 4096 ? (int)n : 1;
}

static double now_s(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

static int parse_int(const char *s, const char *opt, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s ? s : "", &end, 10);
    if (!s || errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "lazyingest: %s expects an integer in [%d, %d], got '%s'\n", opt, lo, hi, s ? s : "");
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* ---- pass 1: ids, their last occurrence, duplicates ---- */

typedef struct {
    char *id;
    long ordinal, line;
} id_slot;

typedef struct {
    id_slot *v;
    size_t cap, n;
} id_map;

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

/* Returns the slot of id (inserting it with ordinal -1 when absent), NULL on OOM. */
static id_slot *id_map_get(id_map *m, const char *id, int insert)
{
    if (insert && (m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        id_slot *v = calloc(cap, sizeof *v);
        if (!v) return NULL;
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->v[i].id) continue;
            size_t j = hash_str(m->v[i].id) & (cap - 1);
            while (v[j].id) j = (j + 1) & (cap - 1);
            v[j] = m->v[i];
        }
        free(m->v);
        m->v = v;
        m->cap = cap;
    }
    if (!m->cap) return NULL;
    size_t j = hash_str(id) & (m->cap - 1);
    while (m->v[j].id) {
        if (strcmp(m->v[j].id, id) == 0) return &m->v[j];
        j = (j + 1) & (m->cap - 1);
    }
    if (!insert) return NULL;
    m->v[j].id = strdup(id);
    if (!m->v[j].id) return NULL;
    m->v[j].ordinal = -1;
    m->n++;
    return &m->v[j];
}

static void id_map_free(id_map *m)
{
    for (size_t i = 0; i < m->cap; i++) free(m->v[i].id);
    free(m->v);
}

/* ---- the run's state ---- */

typedef struct {
    char *ext_id, *source_id, *title, *text;
    int *ids;
    int n_tokens, passage;
    int64_t row_id;   /* existing row to update; 0 = insert */
    int kind;         /* K_ADDED, K_UPDATED, K_UNCHANGED, K_REHASH */
    int has_source_hash;
    uint8_t source_hash[32];
    uint8_t content_hash[32], key[LZ_META_KEY_LEN];
    int64_t raw_bytes, stored_bytes;
    char kv_spec[LZ_KVPOLICY_SPEC_MAX]; /* effective KV eviction ("" = stored whole) */
    int64_t kv_kept;                    /* keys stored over all (layer, kv head) */
} pend_doc;

/* A document to encode at the next commit, when documents are encoded in
 * parallel (ingest.par): doc indexes the batch; alias >= 0 names an earlier
 * job with the same payload key (its blob serves both). */
typedef struct {
    int doc, alias;
    void *blob;
    size_t len;
    char err[512];
} enc_job;

/* A batch's arrays: the ingest holds the batch being built; while its
 * payloads are written on a thread, the batch committed before it waits in
 * held (swapped with the ingest's fields, arrays kept for reuse). */
typedef struct {
    pend_doc *docs;
    int n_docs, cap_docs;
    lz_store_payload *pay;
    int n_pay, cap_pay;
    char **sources;
    int n_src, cap_src;
    char **keep_sources;
    int n_keep, cap_keep;
} batch_arrays;

/* A committed batch's payloads, written by a thread (lz_store_put_payloads_fixed). */
typedef struct {
    lz_store *s;
    const lz_store_payload *pay;
    int n, fixed, rc;
    char err[1024];
} pay_writer;

/* K_REHASH: same content and payload, only the row's source_hash is set
 * (rows from before schema version 2, or after a budget change): counted
 * as unchanged. */
enum { K_ADDED = 0, K_UPDATED = 1, K_UNCHANGED = 2, K_REHASH = 3 };

typedef struct {
    options o;
    lz_llama *m;
    lz_store *s;
    lz_meta *meta;
    lz_encoder *enc;
    lz_kvlearn scorer;      /* --kv-learned (w NULL when not given) */
    lz_kvlearn_acc *learn;  /* --kv-learn-out */
    lz_payload_codec *codec;
    int *prefix;
    int n_prefix;
    int64_t model_id, run;
    /* the batch being built */
    pend_doc *docs;
    int n_docs, cap_docs;
    lz_store_payload *pay;
    int n_pay, cap_pay;
    char **sources;       /* records finished in this batch: prune their stale passages */
    int n_src, cap_src;
    char **keep_sources;  /* bad records with a known id: keep their old rows */
    int n_keep, cap_keep;
    int64_t batch_tokens;
    /* the batch before: its payloads written on wthread (writing) while this one is encoded, its
     * rows committed at the next commit (held_pending); LAZY_INGEST_SYNC_COMMIT=1: at once */
    batch_arrays held;
    int held_pending, writing, sync_commit;
    pthread_t wthread;
    pay_writer wjob;
    /* par: documents encoded in parallel at each commit, one encoder (and codec) a thread: a
     * small model's forward pass scales poorly inside one document (1.24x on 2 cores) */
    int par;
    enc_job *jobs;
    int n_jobs, cap_jobs;
    lz_encoder **pool;        /* pool[0] is enc; the others are made at the first commit */
    lz_payload_codec **pool_codec;
    int n_pool;
    int *probe, n_probe;      /* the encoders' probe cue */
    /* committed counts */
    lz_meta_run_counts c;
    int64_t n_dupes, n_records_done, n_records_total, n_corpus_tokens;
    double t0, t_encode, last_progress;
    double t_load, t_setup, t_forward, t_pack, t_commit; /* model load (and GPU upload), + store and prefix,
                                                            forward passes, payload packing, commits */
    int64_t kv_kept, kv_full;  /* keys stored / keys before eviction, of the documents this run encoded */
    int progress;
#ifdef LZ_CUDA
    lz_llama_gpu *gpu;          /* --gpu */
    lz_encode_backend backend;
#endif
    char err[8192];
} ingest;

static void warnf(const ingest *g, const char *fmt, ...)
{
    if (g->progress) fputs("\r\033[K", stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static int push_ptr(char ***v, int *n, int *cap, const char *s)
{
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 64;
        char **p = realloc(*v, sizeof *p * (size_t)c);
        if (!p) return -1;
        *v = p;
        *cap = c;
    }
    if (!((*v)[*n] = strdup(s))) return -1;
    (*n)++;
    return 0;
}

/* Frees the batch arrays' contents (the arrays stay for the next batch). */
static void arrays_clear(ingest *g)
{
    for (int i = 0; i < g->n_docs; i++) {
        pend_doc *d = &g->docs[i];
        free(d->ext_id);
        free(d->source_id);
        free(d->title);
        free(d->text);
        free(d->ids);
    }
    for (int i = 0; i < g->n_pay; i++) free(g->pay[i].blob);
    for (int i = 0; i < g->n_src; i++) free(g->sources[i]);
    for (int i = 0; i < g->n_keep; i++) free(g->keep_sources[i]);
    g->n_docs = g->n_pay = g->n_src = g->n_keep = 0;
}

/* Exchanges the ingest's batch arrays with b's. */
static void arrays_swap(ingest *g, batch_arrays *b)
{
    batch_arrays t = *b;
    *b = (batch_arrays){g->docs, g->n_docs, g->cap_docs, g->pay, g->n_pay, g->cap_pay, g->sources, g->n_src, g->cap_src,
                        g->keep_sources, g->n_keep, g->cap_keep};
    g->docs = t.docs, g->n_docs = t.n_docs, g->cap_docs = t.cap_docs;
    g->pay = t.pay, g->n_pay = t.n_pay, g->cap_pay = t.cap_pay;
    g->sources = t.sources, g->n_src = t.n_src, g->cap_src = t.cap_src;
    g->keep_sources = t.keep_sources, g->n_keep = t.n_keep, g->cap_keep = t.cap_keep;
}

static void batch_clear(ingest *g)
{
    arrays_clear(g);
    for (int i = 0; i < g->n_jobs; i++) free(g->jobs[i].blob);
    g->n_jobs = 0;
    g->batch_tokens = 0;
}

static void batch_free(ingest *g)
{
    batch_clear(g);
    free(g->docs);
    free(g->pay);
    free(g->sources);
    free(g->keep_sources);
    free(g->jobs);
    arrays_swap(g, &g->held); /* the held batch's arrays (emptied by its commit) */
    arrays_clear(g);
    free(g->docs);
    free(g->pay);
    free(g->sources);
    free(g->keep_sources);
}

/* The KV eviction of an n-token document under this run's policy: its
 * effective spec ("" when stored whole) and keys stored. */
static int64_t doc_kv(const ingest *g, int n, char spec[LZ_KVPOLICY_SPEC_MAX])
{
    lz_kvpolicy_doc_spec(&g->o.kv, n, spec, LZ_KVPOLICY_SPEC_MAX);
    int B = lz_kvpolicy_budget(&g->o.kv, n);
    return (int64_t)g->m->cfg.n_layers * g->m->cfg.n_kv_heads * (B > 0 ? B : n);
}

/* Payload key of a document under this run's model, prefix and policy. */
static void doc_key(const ingest *g, const int *ids, int n, uint8_t key[LZ_META_KEY_LEN])
{
    char spec[LZ_KVPOLICY_SPEC_MAX];
    doc_kv(g, n, spec);
    lz_store_doc_key_kv(g->m->fingerprint, g->prefix, g->n_prefix, ids, n, spec, key);
}

/* Row columns of a spec (kv_policy, kv_budget, kv_window read back from it). */
static void set_kv_fields(const ingest *g, lz_meta_doc *d, const char *spec, int64_t kept)
{
    lz_kvpolicy p;
    (void)g;
    snprintf(d->kv_spec, sizeof d->kv_spec, "%s", spec);
    d->kv_kept = kept;
    if (!spec[0] || lz_kvpolicy_parse_spec(spec, &p)) return;
    snprintf(d->kv_policy, sizeof d->kv_policy, "%s", lz_kvpolicy_name(p.kind));
    lz_kvpolicy_budget_str(&p, d->kv_budget, sizeof d->kv_budget);
    d->kv_window = p.window;
}

/* Commits a batch: payloads first (one durable LMDB transaction), then every
 * row in one SQLite transaction; counts only what committed. The payloads of
 * batch k are written on a thread while batch k + 1 is encoded, and batch
 * k's rows are committed at batch k + 1's commit (commit_held), once the
 * payloads are durable: a killed run leaves payloads without rows at worst,
 * which the next run's gc removes. */
static int commit_rows(ingest *g);
static int run_jobs(ingest *g);

static void *write_payloads(void *p)
{
    pay_writer *w = p;
    w->rc = w->fixed ? lz_store_put_payloads_fixed(w->s, w->pay, w->n, w->err, sizeof w->err)
                     : lz_store_put_payloads(w->s, w->pay, w->n, w->err, sizeof w->err);
    return NULL;
}

/* The held batch: waits for its payloads, then commits its rows. 0 or -1. */
static int commit_held(ingest *g)
{
    if (!g->held_pending) return 0;
    if (g->writing) pthread_join(g->wthread, NULL);
    g->writing = g->held_pending = 0;
    int rc = g->wjob.rc;
    if (rc == LZ_STORE_EFULL) /* the room reserved was not enough: grow the map now, on this thread */
        rc = lz_store_put_payloads(g->s, g->held.pay, g->held.n_pay, g->wjob.err, sizeof g->wjob.err);
    arrays_swap(g, &g->held); /* the held batch in the ingest's fields */
    if (rc) snprintf(g->err, sizeof g->err, "%s", g->wjob.err);
    else rc = commit_rows(g);
    arrays_clear(g);
    arrays_swap(g, &g->held);
    return rc ? -1 : 0;
}

/* Hands the batch just encoded to the payload writer (a thread; this one when
 * LAZY_INGEST_SYNC_COMMIT=1 or no thread starts) and starts a new batch. */
static int start_commit(ingest *g)
{
    if (!g->n_docs && !g->n_src && !g->n_keep) return 0;
    if (!g->sync_commit && lz_store_reserve_payloads(g->s, g->pay, g->n_pay, g->err, sizeof g->err)) return -1;
    arrays_swap(g, &g->held); /* held: this batch; the ingest: the held batch's emptied arrays */
    g->batch_tokens = 0;
    g->held_pending = 1;
    g->wjob = (pay_writer){.s = g->s, .pay = g->held.pay, .n = g->held.n_pay, .fixed = !g->sync_commit};
    if (!g->sync_commit && g->held.n_pay > 0 && pthread_create(&g->wthread, NULL, write_payloads, &g->wjob) == 0) {
        g->writing = 1;
    } else {
        g->wjob.fixed = 0;
        write_payloads(&g->wjob);
    }
    return 0;
}

static int flush(ingest *g)
{
    if (run_jobs(g)) return -1; /* par: the batch's documents, encoded now */
    double t = now_s();
    int rc = commit_held(g); /* the batch before: its payloads were written meanwhile */
    if (!rc) rc = start_commit(g);
    if (!rc && g->sync_commit) rc = commit_held(g);
    g->t_commit += now_s() - t;
    return rc;
}

/* The last batch's rows (after the last flush, or when a run stops). */
static int finish_commits(ingest *g)
{
    double t = now_s();
    int rc = commit_held(g);
    g->t_commit += now_s() - t;
    return rc;
}

static int commit_rows(ingest *g)
{
    if (!g->n_docs && !g->n_src && !g->n_keep) return 0;
    lz_meta_run_counts add = { 0 };
    int rc = lz_meta_begin(g->meta, g->err, sizeof g->err);
    for (int i = 0; !rc && i < g->n_docs; i++) {
        pend_doc *p = &g->docs[i];
        if (p->kind == K_UNCHANGED) {
            rc = lz_meta_doc_touch(g->meta, p->row_id, g->run, g->err, sizeof g->err);
            add.n_unchanged++;
            continue;
        }
        lz_meta_doc d = { 0 };
        d.id = p->row_id;
        d.ext_id = p->ext_id;
        d.source_id = p->source_id;
        d.passage = p->passage;
        d.title = p->title;
        d.text = p->text;
        memcpy(d.content_hash, p->content_hash, 32);
        d.token_ids = p->ids;
        d.n_tokens = p->n_tokens;
        d.model_id = g->model_id;
        memcpy(d.payload_key, p->key, LZ_META_KEY_LEN);
        d.raw_bytes = p->raw_bytes;
        d.stored_bytes = p->stored_bytes;
        d.seen_run = g->run;
        d.has_source_hash = p->has_source_hash;
        memcpy(d.source_hash, p->source_hash, 32);
        set_kv_fields(g, &d, p->kv_spec, p->kv_kept);
        if (p->kind == K_ADDED) {
            rc = lz_meta_doc_insert(g->meta, &d, g->err, sizeof g->err);
            add.n_added++;
        } else {
            rc = lz_meta_doc_update(g->meta, &d, g->err, sizeof g->err);
            if (p->kind == K_REHASH) add.n_unchanged++;
            else add.n_updated++;
        }
    }
    for (int i = 0; !rc && i < g->n_src; i++) {
        int64_t n = 0;
        rc = lz_meta_source_prune(g->meta, g->sources[i], g->run, &n, g->err, sizeof g->err);
        add.n_removed += n;
    }
    for (int i = 0; !rc && i < g->n_keep; i++)
        rc = lz_meta_source_touch(g->meta, g->keep_sources[i], g->run, g->err, sizeof g->err);
    if (!rc) rc = lz_meta_commit(g->meta, g->err, sizeof g->err);
    if (rc) {
        lz_meta_rollback(g->meta);
        return -1;
    }
    g->c.n_added += add.n_added;
    g->c.n_updated += add.n_updated;
    g->c.n_unchanged += add.n_unchanged;
    g->c.n_removed += add.n_removed;
    for (int i = 0; i < g->n_pay; i++) g->c.stored_bytes += (int64_t)g->pay[i].len;
    return 0;
}

static void progress(ingest *g, int force)
{
    if (!g->progress) return;
    double t = now_s();
    if (!force && t - g->last_progress < 0.25) return;
    g->last_progress = t;
    double el = t - g->t0, rate = g->t_encode > 0 ? g->c.n_tokens / g->t_encode : 0;
    double frac = g->n_records_total ? (double)g->n_records_done / g->n_records_total : 0;
    double eta = frac > 0.001 ? el / frac - el : 0;
    fprintf(stderr, "\r\033[K%lld/%lld documents  %lld tokens encoded  %.0f tok/s  ETA %d:%02d",
            (long long)g->n_records_done, (long long)g->n_records_total, (long long)g->c.n_tokens, rate,
            (int)eta / 60, (int)eta % 60);
}

/* Uncompressed payload body bytes of n tokens: K and V, every layer and head. */
static int64_t raw_bytes(const ingest *g, int n)
{
    int64_t es = lz_store_kv_dtype(g->s) == LZ_PAYLOAD_DTYPE_F32 ? 4 : 2;
    return 2 * es * g->m->cfg.n_layers * g->m->cfg.n_kv_heads * (int64_t)n * g->m->cfg.head_dim;
}

/* Queues batch document d's new payload (the batch owns blob from here on,
 * freed on failure too) and counts its tokens, bytes and kept keys. */
static int queue_payload(ingest *g, pend_doc *d, void *blob, size_t len)
{
    if (g->n_pay == g->cap_pay) {
        int cap = g->cap_pay ? g->cap_pay * 2 : 64;
        lz_store_payload *p = realloc(g->pay, sizeof *p * (size_t)cap);
        if (!p) {
            free(blob);
            snprintf(g->err, sizeof g->err, "out of memory");
            return -1;
        }
        g->pay = p;
        g->cap_pay = cap;
    }
    lz_store_payload *p = &g->pay[g->n_pay++];
    memcpy(p->key, d->key, LZ_META_KEY_LEN);
    p->blob = blob;
    p->len = len;
    d->stored_bytes = (int64_t)len;
    char spec[LZ_KVPOLICY_SPEC_MAX];
    g->c.n_tokens += d->n_tokens;
    g->c.raw_bytes += d->raw_bytes;
    g->kv_kept += doc_kv(g, d->n_tokens, spec);
    g->kv_full += (int64_t)g->m->cfg.n_layers * g->m->cfg.n_kv_heads * d->n_tokens;
    return 0;
}

/* Encodes batch document di (unless a payload with its key already exists,
 * in the store or in this batch) and queues the payload; sets its raw and
 * stored sizes. With par, queues an encoding job instead (run_jobs). */
static int encode_doc(ingest *g, int di)
{
    pend_doc *d = &g->docs[di];
    const int *ids = d->ids, n = d->n_tokens;
    const uint8_t *key = d->key;
    int64_t *raw = &d->raw_bytes, *stored = &d->stored_bytes;
    char spec[LZ_KVPOLICY_SPEC_MAX];
    int64_t kept = doc_kv(g, n, spec), full = (int64_t)g->m->cfg.n_layers * g->m->cfg.n_kv_heads * n;
    int64_t raw_size = full ? raw_bytes(g, n) / full * kept : 0;
    *raw = raw_size;
    for (int i = 0; i < g->n_pay; i++)
        if (memcmp(g->pay[i].key, key, LZ_META_KEY_LEN) == 0) {
            *stored = (int64_t)g->pay[i].len;
            return 0;
        }
    for (int i = 0; g->held_pending && i < g->held.n_pay; i++) /* the batch before, being written */
        if (memcmp(g->held.pay[i].key, key, LZ_META_KEY_LEN) == 0) {
            *stored = (int64_t)g->held.pay[i].len;
            return 0;
        }
    void *blob = NULL;
    size_t len = 0;
    int alias = -1;
    for (int j = 0; g->par && j < g->n_jobs && alias < 0; j++)
        if (g->jobs[j].alias < 0 && memcmp(g->docs[g->jobs[j].doc].key, key, LZ_META_KEY_LEN) == 0) alias = j;
    int have = alias >= 0 ? 0 : lz_store_has_payload(g->s, key, &len, g->err, sizeof g->err);
    if (have < 0) return -1;
    if (have) { /* shared with an identical document, or left by an interrupted run */
        *stored = (int64_t)len;
        return 0;
    }
    if (g->par) { /* encoded with the batch's other documents at the commit */
        if (g->n_jobs == g->cap_jobs) {
            int cap = g->cap_jobs ? g->cap_jobs * 2 : 64;
            enc_job *j = realloc(g->jobs, sizeof *j * (size_t)cap);
            if (!j) {
                snprintf(g->err, sizeof g->err, "out of memory");
                return -1;
            }
            g->jobs = j;
            g->cap_jobs = cap;
        }
        g->jobs[g->n_jobs++] = (enc_job){.doc = di, .alias = alias};
        if (alias < 0) g->batch_tokens += n;
        return 0;
    }
    double t = now_s();
    if (lz_encoder_run(g->enc, ids, n, g->err, sizeof g->err)) return -1;
    double t1 = now_s();
    if (lz_encoder_pack(g->enc, 1, g->codec, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, g->o.level, &blob, &len, g->err,
                        sizeof g->err))
        return -1;
    double t2 = now_s();
    g->t_forward += t1 - t;
    g->t_pack += t2 - t1;
    g->t_encode += t2 - t;
    if (queue_payload(g, d, blob, len)) return -1;
    g->batch_tokens += n;
    return 0;
}

/* The encoder settings of this run (store element type, policy, scorer,
 * probe cue, calibration) on e. */
static void setup_encoder(ingest *g, lz_encoder *e)
{
    lz_encoder_set_dtype(e, lz_store_kv_dtype(g->s));
    if (g->o.learned) lz_encoder_set_scorer(e, &g->scorer);
    if (g->learn) lz_encoder_set_learn(e, g->learn);
    lz_encoder_set_kvpolicy(e, &g->o.kv);
}

/* par: encodes and packs the batch's jobs, one document a thread, each on
 * its own encoder and codec (made at the first call: the prefix runs again
 * for each, cheap for the small models par is chosen for), then queues the
 * payloads in batch order, exactly as encode_doc would have one by one. */
static int run_jobs(ingest *g)
{
    if (!g->par || g->n_jobs == 0) return 0;
    const int T = omp_get_max_threads() > 1 ? omp_get_max_threads() : 1;
    if (g->n_pool < T) {
        lz_encoder **pe = realloc(g->pool, sizeof *pe * (size_t)T);
        lz_payload_codec **pc = pe ? realloc(g->pool_codec, sizeof *pc * (size_t)T) : NULL;
        if (pe) g->pool = pe;
        if (pc) g->pool_codec = pc;
        if (!pe || !pc) {
            snprintf(g->err, sizeof g->err, "out of memory");
            return -1;
        }
        for (; g->n_pool < T; g->n_pool++) {
            lz_encoder *e = g->n_pool == 0 ? g->enc : NULL;
            /* the prefix's KV copied from the first encoder (an 8B model's takes seconds on the CPU) */
            if (!e && lz_encoder_new_like(g->enc, &e, g->err, sizeof g->err)) return -1;
            lz_payload_codec *c = lz_payload_codec_new();
            if (!c || (g->n_pool > 0 && lz_encoder_set_probe(e, g->probe, g->n_probe)) ||
                lz_payload_codec_set_threads(c, 1)) { /* 1 MiB frames, as the one-document path's codec */
                lz_payload_codec_free(c);
                if (e != g->enc) lz_encoder_free(e);
                snprintf(g->err, sizeof g->err, "out of memory");
                return -1;
            }
            if (g->n_pool > 0) {
                setup_encoder(g, e);
#ifdef LZ_CUDA
                if (g->o.gpu) lz_encoder_set_backend(e, &g->backend);
#endif
            }
            g->pool[g->n_pool] = e;
            g->pool_codec[g->n_pool] = c;
        }
    }
    const double t0 = now_s();
    double fwd = 0, pack = 0;
#pragma omp parallel for num_threads(T) schedule(dynamic, 1) reduction(+ : fwd, pack)
    for (int j = 0; j < g->n_jobs; j++) {
        enc_job *x = &g->jobs[j];
        if (x->alias >= 0) continue;
        const pend_doc *d = &g->docs[x->doc];
        lz_encoder *e = g->pool[omp_get_thread_num()];
        const double a = now_s();
        int rc = lz_encoder_run(e, d->ids, d->n_tokens, x->err, sizeof x->err);
        const double b = now_s();
        if (!rc)
            rc = lz_encoder_pack(e, 1, g->pool_codec[omp_get_thread_num()], LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, g->o.level,
                                 &x->blob, &x->len, x->err, sizeof x->err);
        if (rc && !x->err[0]) snprintf(x->err, sizeof x->err, "encoding failed");
        fwd += b - a;
        pack += now_s() - b;
    }
    const double wall = now_s() - t0;
    g->t_encode += wall;
    g->t_forward += fwd + pack > 0 ? wall * fwd / (fwd + pack) : 0;
    g->t_pack += fwd + pack > 0 ? wall * pack / (fwd + pack) : 0;
    for (int j = 0; j < g->n_jobs; j++) { /* batch order: the payloads and counts encode_doc would have made */
        enc_job *x = &g->jobs[j];
        pend_doc *d = &g->docs[x->doc];
        if (x->alias >= 0) {
            d->stored_bytes = (int64_t)g->jobs[x->alias].len;
            continue;
        }
        if (!x->blob) {
            snprintf(g->err, sizeof g->err, "document '%s': %s", d->ext_id ? d->ext_id : "?", x->err);
            return -1;
        }
        void *blob = x->blob;
        x->blob = NULL; /* the batch owns it now */
        if (queue_payload(g, d, blob, x->len)) return -1;
    }
    g->n_jobs = 0;
    return 0;
}

static pend_doc *new_pending(ingest *g)
{
    if (g->n_docs == g->cap_docs) {
        int cap = g->cap_docs ? g->cap_docs * 2 : 64;
        pend_doc *d = realloc(g->docs, sizeof *d * (size_t)cap);
        if (!d) return NULL;
        g->docs = d;
        g->cap_docs = cap;
    }
    pend_doc *d = &g->docs[g->n_docs++];
    memset(d, 0, sizeof *d);
    return d;
}

typedef struct {
    const lz_tokenizer *tok;
    const char *title;
} count_ctx;

static int count_tokens(void *p, const char *s, size_t n)
{
    count_ctx *c = p;
    int *ids = NULL, k = 0;
    if (lz_prompt_doc_tokens(c->tok, c->title, s, n, &ids, &k)) return -1;
    free(ids);
    return k;
}

/* The split fast path: rows of a source, checked in passage order. */
typedef struct {
    ingest *g;
    const uint8_t *hash;
    int64_t *ids;
    int n, cap, ok;
    int64_t tokens;
} split_check;

static int split_visit(const lz_meta_doc *d, void *p)
{
    split_check *c = p;
    ingest *g = c->g;
    uint8_t key[LZ_META_KEY_LEN];
    if (!d->token_ids || !d->has_source_hash || memcmp(d->source_hash, c->hash, 32) != 0 || d->passage != c->n ||
        d->model_id != g->model_id) {
        c->ok = 0;
        return 1;
    }
    doc_key(g, d->token_ids, d->n_tokens, key);
    if (memcmp(key, d->payload_key, LZ_META_KEY_LEN) != 0) {
        c->ok = 0;
        return 1;
    }
    if (c->n == c->cap) {
        int cap = c->cap ? c->cap * 2 : 16;
        int64_t *v = realloc(c->ids, sizeof *v * (size_t)cap);
        if (!v) {
            c->ok = 0;
            return 1;
        }
        c->ids = v;
        c->cap = cap;
    }
    c->ids[c->n++] = d->id;
    c->tokens += d->n_tokens;
    return 0;
}

/* Processes one valid record. Returns 0, 1 when it was bad (message in
 * g->err), -1 on a fatal error. */
static int do_record(ingest *g, const lz_corpus_record *r, const id_map *ids_seen, const char *where)
{
    const lz_tokenizer *tok = g->m->tok;
    lz_meta_doc row;
    char src[LZ_CORPUS_MAX_ID + 1];
    uint8_t hash[32];
    /* fast path: an unsplit document whose text and prefix are unchanged and
     * that still fits --max-doc-tokens */
    lz_store_content_hash(r->title, r->text, hash);
    int rc = lz_meta_doc_find(g->meta, r->id, &row, src, sizeof src, g->err, sizeof g->err);
    if (rc && rc != LZ_META_ENOTFOUND) return -1;
    if (!rc && strcmp(src, r->id) != 0) {
        snprintf(g->err, sizeof g->err, "%s: id '%s' collides with passage %d of document '%s'", where, r->id,
                 row.passage, src);
        return 1;
    }
    int same = 0;
    if (!rc && row.passage < 0 && memcmp(row.content_hash, hash, 32) == 0 && row.model_id == g->model_id &&
        row.n_tokens <= g->o.max_doc_tokens) {
        /* same text: unchanged if its payload key is the one this model and
         * prefix give its tokens (a new prompt prefix changes every key) */
        int *old = NULL, n_old = 0;
        uint8_t key[LZ_META_KEY_LEN];
        int st = lz_meta_doc_tokens(g->meta, row.id, &old, &n_old, g->err, sizeof g->err);
        if (st && st != LZ_META_EINVAL) return -1;
        if (!st) {
            doc_key(g, old, n_old, key);
            same = memcmp(key, row.payload_key, LZ_META_KEY_LEN) == 0;
        }
        free(old);
    }
    if (same) {
        pend_doc *d = new_pending(g);
        if (!d || !(d->source_id = strdup(r->id))) return -1;
        d->kind = K_UNCHANGED;
        d->row_id = row.id;
        g->n_corpus_tokens += row.n_tokens;
        return push_ptr(&g->sources, &g->n_src, &g->cap_src, r->id) ? -1 : 0;
    }

    /* fast path: a split record whose passages all carry this record's hash
     * (same text, same budget) and keys valid under this model and prefix */
    uint8_t split_hash[32];
    lz_store_split_hash(r->title, r->text, r->text_len, g->o.max_doc_tokens, split_hash);
    if (rc == LZ_META_ENOTFOUND) {
        split_check sc = { g, split_hash, NULL, 0, 0, 1, 0 };
        if (lz_meta_source_rows(g->meta, r->id, split_visit, &sc, g->err, sizeof g->err)) {
            free(sc.ids);
            return -1;
        }
        if (sc.ok && sc.n > 0) {
            for (int k = 0; k < sc.n; k++) {
                pend_doc *d = new_pending(g);
                if (!d) {
                    free(sc.ids);
                    return -1;
                }
                d->kind = K_UNCHANGED;
                d->row_id = sc.ids[k];
            }
            free(sc.ids);
            g->n_corpus_tokens += sc.tokens;
            return push_ptr(&g->sources, &g->n_src, &g->cap_src, r->id) ? -1 : 0;
        }
        free(sc.ids);
    }

    /* tokenize, split when over budget */
    int *all = NULL, n_all = 0;
    if (lz_prompt_doc_tokens(tok, r->title, r->text, r->text_len, &all, &n_all)) {
        snprintf(g->err, sizeof g->err, "out of memory");
        return -1;
    }
    lz_split_span *spans = NULL;
    int n_spans = 0, split = n_all > g->o.max_doc_tokens;
    if (split) {
        count_ctx cc = { tok, r->title };
        int st = lz_split_passages(r->text, r->text_len, g->o.max_doc_tokens, count_tokens, &cc, &spans, &n_spans);
        if (st) {
            free(all);
            snprintf(g->err, sizeof g->err, "%s: id '%s': cannot split into passages of %d tokens (%s)", where,
                     r->id, g->o.max_doc_tokens,
                     st == LZ_SPLIT_EINVAL ? "the title alone is longer" : "out of memory");
            return st == LZ_SPLIT_EINVAL ? 1 : -1;
        }
    }
    int n_parts = split ? n_spans : 1, first = g->n_docs;
    /* passage ids must not collide with other records' ids */
    for (int k = 0; split && k < n_parts; k++) {
        char pid[LZ_CORPUS_MAX_ID + 32];
        snprintf(pid, sizeof pid, "%s#%d", r->id, k);
        if (id_map_get((id_map *)ids_seen, pid, 0)) {
            snprintf(g->err, sizeof g->err, "%s: id '%s': passage id '%s' collides with a record of that id",
                     where, r->id, pid);
            free(all);
            free(spans);
            return 1;
        }
    }
    for (int k = 0; k < n_parts; k++) {
        char pid[LZ_CORPUS_MAX_ID + 32];
        const char *text = r->text;
        size_t text_len = r->text_len;
        int *ids = all, n = n_all;
        if (split) {
            snprintf(pid, sizeof pid, "%s#%d", r->id, k);
            text = r->text + spans[k].off;
            text_len = spans[k].len;
            ids = NULL;
            if (lz_prompt_doc_tokens(tok, r->title, text, text_len, &ids, &n)) {
                free(all);
                free(spans);
                snprintf(g->err, sizeof g->err, "out of memory");
                return -1;
            }
        } else {
            snprintf(pid, sizeof pid, "%s", r->id);
        }
        pend_doc *d = new_pending(g);
        if (!d) return -1;
        d->ext_id = strdup(pid);
        d->source_id = strdup(r->id);
        d->title = r->title ? strdup(r->title) : NULL;
        d->text = strndup(text, text_len);
        d->ids = split ? ids : malloc(sizeof(int) * (size_t)(n ? n : 1));
        if (!d->ext_id || !d->source_id || (r->title && !d->title) || !d->text || !d->ids) return -1;
        if (!split) memcpy(d->ids, all, sizeof(int) * (size_t)n);
        d->n_tokens = n;
        d->passage = split ? k : -1;
        d->has_source_hash = split;
        if (split) memcpy(d->source_hash, split_hash, 32);
        lz_store_content_hash(d->title, d->text, d->content_hash);
        doc_key(g, d->ids, n, d->key);
        d->kv_kept = doc_kv(g, n, d->kv_spec);
        g->n_corpus_tokens += n;
        rc = lz_meta_doc_find(g->meta, pid, &row, src, sizeof src, g->err, sizeof g->err);
        if (rc && rc != LZ_META_ENOTFOUND) return -1;
        if (!rc && strcmp(src, r->id) != 0) {
            snprintf(g->err, sizeof g->err, "%s: id '%s': passage id '%s' collides with document '%s'", where,
                     r->id, pid, src);
            for (int j = first; j < g->n_docs; j++) { /* drop this record's passages */
                pend_doc *x = &g->docs[j];
                free(x->ext_id);
                free(x->source_id);
                free(x->title);
                free(x->text);
                free(x->ids);
            }
            g->n_docs = first;
            while (g->n_jobs > 0 && g->jobs[g->n_jobs - 1].doc >= first) g->n_jobs--; /* nothing encoded yet */
            free(all);
            free(spans);
            return 1;
        }
        if (!rc && row.passage == d->passage && memcmp(row.content_hash, d->content_hash, 32) == 0 &&
            memcmp(row.payload_key, d->key, LZ_META_KEY_LEN) == 0 && row.model_id == g->model_id) {
            int hash_same = row.has_source_hash == d->has_source_hash &&
                            (!split || memcmp(row.source_hash, d->source_hash, 32) == 0);
            d->kind = hash_same ? K_UNCHANGED : K_REHASH;
            d->row_id = row.id;
            d->raw_bytes = row.raw_bytes;
            d->stored_bytes = row.stored_bytes;
            continue;
        }
        d->kind = rc ? K_ADDED : K_UPDATED;
        d->row_id = rc ? 0 : row.id;
        if (encode_doc(g, (int)(d - g->docs))) {
            free(all);
            free(spans);
            return -1;
        }
    }
    free(all);
    free(spans);
    return push_ptr(&g->sources, &g->n_src, &g->cap_src, r->id) ? -1 : 0;
}

/* ---- model, store, prefix ---- */

/* The model and its key-importance model, checked before the store is opened:
 * a refused model (unreadable, no tokenizer, a --kv-learned file of another
 * model) leaves no new store behind. */
static int load_model(ingest *g, const char *model_path)
{
    if (lz_llama_load(model_path, &g->m, g->err, sizeof g->err)) return -1;
    if (!g->m->tok) {
        snprintf(g->err, sizeof g->err, "%s: the model has no tokenizer", model_path);
        return -1;
    }
    /* always: without it OpenBLAS ran its own pool inside every OpenMP thread (16 x 16 threads
     * on a 16-core machine; 1.5-1.7x slower on 2 cores, more on many) */
    lz_llama_set_threads(g->o.threads);
    if (lz_prompt_prefix_tokens(g->m->tok, &g->prefix, &g->n_prefix)) {
        snprintf(g->err, sizeof g->err, "out of memory");
        return -1;
    }
    if (g->o.learned) { /* the key-importance model: this model's, this shape */
        const lz_llama_config *c = &g->m->cfg;
        if (lz_kvlearn_load(g->o.learned, &g->scorer, g->err, sizeof g->err)) return -1;
        if (memcmp(g->scorer.fingerprint, g->m->fingerprint, 32) || g->scorer.L != c->n_layers ||
            g->scorer.KV != c->n_kv_heads || g->scorer.d != c->head_dim) {
            snprintf(g->err, sizeof g->err, "%s was fitted for another model (not %s)", g->o.learned, g->m->fingerprint_hex);
            return -1;
        }
        g->o.kv.scorer_hash = g->scorer.hash;
    }
#ifdef LZ_CUDA
    if (g->o.gpu && lz_llama_gpu_new(g->m, g->o.max_doc_tokens, &g->gpu, g->err, sizeof g->err)) return -1; /* weights */
#endif
    return 0;
}

/* Binds the loaded model to the opened store, sets up the encoder, computes
 * the prefix KV and stores its payload when absent. */
#ifdef LZ_CUDA
static int gpu_encode(void *ctx, const int *ids, int n, lz_kv_cache *out, float *qwin, int c0, int cw, char *err,
                      size_t errlen)
{
    int rc;
    /* one device context: documents encoded in parallel (par) take turns on it, their
     * KV eviction scoring and packing run side by side */
#pragma omp critical(lz_gpu_encode)
    rc = lz_llama_gpu_encode((lz_llama_gpu *)ctx, ids, n, out, qwin, c0, cw, err, errlen);
    return rc;
}
#endif

static int setup_model(ingest *g, const char *model_path)
{
    char abs[PATH_MAX];
    lz_store_model_desc desc;
    lz_store_model_desc_of(g->m, realpath(model_path, abs) ? abs : model_path, &desc);
    desc.kv_dtype = g->o.kv_dtype;
    uint8_t pkey[LZ_META_KEY_LEN];
    int prefix_changed; /* every key changes; the key comparison in do_record sees it */
    if (lz_store_bind_model(g->s, &desc, g->prefix, g->n_prefix, &g->model_id, pkey, &prefix_changed, g->err,
                            sizeof g->err))
        return -1;
    const lz_encode_backend *pb = NULL; /* --gpu: the prefix too on the GPU */
#ifdef LZ_CUDA
    if (g->o.gpu) {
        g->backend = (lz_encode_backend){g->gpu, gpu_encode, g->o.max_doc_tokens};
        pb = &g->backend;
    }
#endif
    if (lz_encoder_new_on(g->m, g->prefix, g->n_prefix, pb, &g->enc, g->err, sizeof g->err)) return -1;
    if (g->o.learn_out) {
        const lz_llama_config *c = &g->m->cfg;
        if (!(g->learn = lz_kvlearn_acc_new(c->n_layers, c->n_kv_heads, c->head_dim))) {
            snprintf(g->err, sizeof g->err, "out of memory");
            return -1;
        }
    }
    setup_encoder(g, g->enc);
    /* documents in parallel: CPU encoding of a small model (width <= 2,048) on several threads;
     * with --gpu the documents take turns on the GPU while the others' scoring and packing
     * run on the CPU's threads; not while calibrating (one accumulator) */
    const char *serial = getenv("LAZY_INGEST_SERIAL"); /* 1: one document at a time (A/B, tests) */
    const char *sync = getenv("LAZY_INGEST_SYNC_COMMIT"); /* 1: payloads written before the next batch starts */
    g->sync_commit = sync && atoi(sync);
    g->par = !g->learn && omp_get_max_threads() > 1 && (g->o.gpu || g->m->cfg.dim <= 2048) && !(serial && atoi(serial));
    if (g->o.gpu) {
#ifdef LZ_CUDA
        if (lz_llama_gpu_set_prefix(g->gpu, lz_encoder_prefix_cache(g->enc), g->err, sizeof g->err)) return -1;
        lz_encoder_set_backend(g->enc, &g->backend);
#endif
    }
    /* the question cue, empty or --kv-probe-text (used by --kv-probe); kept for par's encoders */
    if (lz_prompt_question_tokens(g->m->tok, g->o.probe_text ? g->o.probe_text : "", &g->probe, &g->n_probe) ||
        lz_encoder_set_probe(g->enc, g->probe, g->n_probe)) {
        snprintf(g->err, sizeof g->err, "out of memory");
        return -1;
    }
    int have = lz_store_has_payload(g->s, pkey, NULL, g->err, sizeof g->err);
    if (have < 0) return -1;
    if (!have) {
        lz_store_payload p;
        memcpy(p.key, pkey, LZ_META_KEY_LEN);
        if (lz_encoder_pack(g->enc, 0, g->codec, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, g->o.level, &p.blob, &p.len, g->err,
                            sizeof g->err))
            return -1;
        int rc = lz_store_put_payloads(g->s, &p, 1, g->err, sizeof g->err);
        free(p.blob);
        if (rc) return -1;
    }
    return 0;
}

/* ---- check and repair ---- */

typedef struct {
    int64_t doc_id;
    char *ext_id;
    int *ids;
    int n, kind;
    char kv_spec[LZ_KVPOLICY_SPEC_MAX]; /* the row's KV eviction: re-encoded the same way */
} issue_copy;

typedef struct {
    ingest *g;
    issue_copy *v;
    int n, cap;
} issue_list;

static const char *issue_name(int kind)
{
    switch (kind) {
    case LZ_STORE_ISSUE_MISSING: return "missing payload";
    case LZ_STORE_ISSUE_CORRUPT: return "corrupt payload";
    case LZ_STORE_ISSUE_WRONG_MODEL: return "wrong model";
    case LZ_STORE_ISSUE_MISMATCH: return "payload does not match the row";
    case LZ_STORE_ISSUE_BAD_ROW: return "unusable row";
    default: return "?";
    }
}

static int on_issue(const lz_store_issue *is, void *ctx)
{
    issue_list *l = ctx;
    if (!l->g->o.quiet || !l->g->o.repair)
        warnf(l->g, "check: document '%s' (row %lld): %s: %s", is->ext_id, (long long)is->doc_id,
              issue_name(is->kind), is->message);
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        issue_copy *v = realloc(l->v, sizeof *v * (size_t)cap);
        if (!v) return 1;
        l->v = v;
        l->cap = cap;
    }
    issue_copy *c = &l->v[l->n++];
    c->doc_id = is->doc_id;
    c->ext_id = strdup(is->ext_id);
    c->kind = is->kind;
    c->n = is->n_tokens;
    snprintf(c->kv_spec, sizeof c->kv_spec, "%s", is->kv_spec ? is->kv_spec : "");
    c->ids = NULL;
    if (is->token_ids) {
        c->ids = malloc(sizeof(int) * (size_t)(is->n_tokens ? is->n_tokens : 1));
        if (c->ids) memcpy(c->ids, is->token_ids, sizeof(int) * (size_t)is->n_tokens);
    }
    return 0;
}

static void issues_free(issue_list *l)
{
    for (int i = 0; i < l->n; i++) {
        free(l->v[i].ext_id);
        free(l->v[i].ids);
    }
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

/* Re-encodes broken payloads from the rows' token ids; removes rows that
 * cannot be re-encoded. */
static int repair(ingest *g, issue_list *l, int64_t *n_fixed, int64_t *n_removed)
{
    *n_fixed = *n_removed = 0;
    for (int i = 0; i < l->n; i++) {
        issue_copy *c = &l->v[i];
        if (c->doc_id == 0) { /* the prefix */
            lz_store_payload p;
            lz_store_prefix_key(g->m->fingerprint, g->prefix, g->n_prefix, p.key);
            if (lz_encoder_pack(g->enc, 0, g->codec, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, g->o.level, &p.blob, &p.len,
                                g->err, sizeof g->err))
                return -1;
            int rc = lz_store_put_payloads(g->s, &p, 1, g->err, sizeof g->err);
            free(p.blob);
            if (rc) return -1;
            (*n_fixed)++;
            continue;
        }
        int bad_ids = !c->ids || c->kind == LZ_STORE_ISSUE_BAD_ROW;
        for (int j = 0; !bad_ids && j < c->n; j++) bad_ids = c->ids[j] < 0 || c->ids[j] >= g->m->cfg.vocab;
        if (bad_ids || c->kind == LZ_STORE_ISSUE_WRONG_MODEL) {
            /* rows of another model or with unusable tokens: removed (re-ingest re-adds them) */
            if (lz_meta_doc_delete(g->meta, c->doc_id, g->err, sizeof g->err)) return -1;
            warnf(g, "repair: removed document '%s' (%s); ingest its corpus again to restore it", c->ext_id,
                  issue_name(c->kind));
            (*n_removed)++;
            continue;
        }
        lz_store_payload p;
        lz_kvpolicy kp; /* re-encode under the row's own policy, so its key stays valid */
        if (lz_kvpolicy_parse_spec(c->kv_spec, &kp) || (kp.kind && lz_kvpolicy_budget(&kp, c->n) <= 0))
            lz_kvpolicy_default(&kp), c->kv_spec[0] = 0;
        if (kp.probe == LZ_KVPOLICY_PROBE_CUE && kp.probe_text != g->o.kv.probe_text) {
            /* the probe question is not stored, only its hash: re-encoding with
             * another one would store keys chosen by a different score */
            warnf(g, "repair: document '%s' was compressed with probe question %08x; run --repair with the "
                  "same --kv-probe-text (left as it is)", c->ext_id, (unsigned)kp.probe_text);
            continue;
        }
        if (kp.probe == LZ_KVPOLICY_PROBE_LEARNED && kp.scorer_hash != g->o.kv.scorer_hash) {
            warnf(g, "repair: document '%s' was compressed with key-importance model %08x; run --repair with the "
                  "same --kv-learned FILE (left as it is)", c->ext_id, (unsigned)kp.scorer_hash);
            continue;
        }
        lz_store_doc_key_kv(g->m->fingerprint, g->prefix, g->n_prefix, c->ids, c->n, c->kv_spec, p.key);
        lz_encoder_set_kvpolicy(g->enc, &kp);
        int erc = lz_encoder_run(g->enc, c->ids, c->n, g->err, sizeof g->err) ||
                  lz_encoder_pack(g->enc, 1, g->codec, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, g->o.level, &p.blob, &p.len,
                                  g->err, sizeof g->err);
        lz_encoder_set_kvpolicy(g->enc, &g->o.kv);
        if (erc) return -1;
        int B = lz_kvpolicy_budget(&kp, c->n);
        int64_t raw = B > 0 ? raw_bytes(g, c->n) / c->n * B : raw_bytes(g, c->n);
        int rc = lz_store_put_payloads(g->s, &p, 1, g->err, sizeof g->err);
        if (!rc) {
            rc = lz_meta_doc_set_payload(g->meta, c->doc_id, p.key, raw, (int64_t)p.len, g->err, sizeof g->err);
        }
        free(p.blob);
        if (rc) return -1;
        warnf(g, "repair: re-encoded document '%s' (%d tokens)", c->ext_id, c->n);
        (*n_fixed)++;
    }
    return 0;
}

/* ---- summary ---- */

/* Scoring and selection time of every encoder (par: the thread's own; summed, so CPU time). */
static double policy_seconds(const ingest *g)
{
    double t = g->enc ? lz_encoder_policy_seconds(g->enc) : 0.0;
    for (int i = 1; i < g->n_pool; i++) t += lz_encoder_policy_seconds(g->pool[i]);
    return t;
}

static void summary(ingest *g, const char *status, int64_t n_docs_total, const lz_store_gc_stats *gc,
                    const lz_store_check_stats *cs, int64_t fixed, int64_t removed_by_repair, int did_ingest,
                    int did_check)
{
    double wall = now_s() - g->t0;
    double ratio = g->c.stored_bytes ? (double)g->c.raw_bytes / (double)g->c.stored_bytes : 0;
    double tps = g->t_encode > 0 ? g->c.n_tokens / g->t_encode : 0;
    if (g->o.json) {
        json_t *j = json_object();
        json_object_set_new(j, "status", json_string(status));
        json_object_set_new(j, "store", json_string(g->o.store));
        if (did_ingest) {
            json_object_set_new(j, "corpus", json_string(g->o.corpus));
            json_object_set_new(j, "run", json_integer(g->run));
            json_object_set_new(j, "added", json_integer(g->c.n_added));
            json_object_set_new(j, "updated", json_integer(g->c.n_updated));
            json_object_set_new(j, "unchanged", json_integer(g->c.n_unchanged));
            json_object_set_new(j, "removed", json_integer(g->c.n_removed));
            json_object_set_new(j, "skipped", json_integer(g->c.n_skipped));
            json_object_set_new(j, "duplicates", json_integer(g->n_dupes));
            json_object_set_new(j, "corpus_tokens", json_integer(g->n_corpus_tokens));
            json_object_set_new(j, "tokens_encoded", json_integer(g->c.n_tokens));
            json_object_set_new(j, "tokens_per_s", json_real(tps));
            json_object_set_new(j, "raw_bytes", json_integer(g->c.raw_bytes));
            json_object_set_new(j, "stored_bytes", json_integer(g->c.stored_bytes));
            json_object_set_new(j, "compression_ratio", json_real(ratio));
            char spec[LZ_KVPOLICY_SPEC_MAX];
            lz_kvpolicy_spec(&g->o.kv, spec, sizeof spec);
            json_object_set_new(j, "kv_policy", json_string(spec[0] ? spec : "none"));
            json_object_set_new(j, "kv_kept_fraction", json_real(g->kv_full ? (double)g->kv_kept / g->kv_full : 1.0));
            json_object_set_new(j, "encode_s", json_real(g->t_encode));
            json_object_set_new(j, "load_s", json_real(g->t_load));
            json_object_set_new(j, "encoders", json_integer(g->par ? (g->n_pool > 0 ? g->n_pool : 1) : 1));
            json_object_set_new(j, "setup_s", json_real(g->t_setup));
            json_object_set_new(j, "forward_s", json_real(g->t_forward));
            json_object_set_new(j, "pack_s", json_real(g->t_pack));
            json_object_set_new(j, "commit_s", json_real(g->t_commit));
            json_object_set_new(j, "kv_policy_s", json_real(policy_seconds(g)));
        }
        if (did_check) {
            json_object_set_new(j, "checked", json_integer(cs->n_docs));
            json_object_set_new(j, "check_ok", json_integer(cs->n_ok));
            json_object_set_new(j, "check_issues", json_integer(cs->n_issues));
            json_object_set_new(j, "repaired", json_integer(fixed));
            json_object_set_new(j, "removed_by_repair", json_integer(removed_by_repair));
        }
        json_object_set_new(j, "documents", json_integer(n_docs_total));
        json_object_set_new(j, "payloads_collected", json_integer(gc ? gc->n_removed : 0));
        json_object_set_new(j, "bytes_collected", json_integer(gc ? gc->bytes_removed : 0));
        json_object_set_new(j, "wall_s", json_real(wall));
        char *s = json_dumps(j, JSON_COMPACT);
        if (s) puts(s);
        free(s);
        json_decref(j);
        return;
    }
    if (g->o.quiet) return;
    if (did_ingest)
        printf("lazyingest: %s -> %s: %lld added, %lld updated, %lld unchanged, %lld removed, %lld skipped"
               " (%lld duplicate ids)\n"
               "  tokens: %lld in corpus, %lld encoded (%.0f tok/s)\n"
               "  payloads written: %.2f MB raw, %.2f MB stored (%.2fx)\n",
               g->o.corpus, g->o.store, (long long)g->c.n_added, (long long)g->c.n_updated,
               (long long)g->c.n_unchanged, (long long)g->c.n_removed, (long long)g->c.n_skipped,
               (long long)g->n_dupes, (long long)g->n_corpus_tokens, (long long)g->c.n_tokens, tps,
               g->c.raw_bytes / 1e6, g->c.stored_bytes / 1e6, ratio);
    if (did_ingest)
        printf("  time: model load %.2f s, store and prefix %.2f s, forward passes %.2f s, packing %.2f s, commits %.2f s%s\n",
               g->t_load, g->t_setup - g->t_load, g->t_forward, g->t_pack, g->t_commit,
               g->par && g->n_pool > 1 ? " (documents encoded in parallel)" : "");
    if (did_ingest && g->o.gpu && g->enc) {
        long on_gpu = lz_encoder_backend_docs(g->enc);
        for (int i = 1; i < g->n_pool; i++) on_gpu += lz_encoder_backend_docs(g->pool[i]);
        printf("  GPU: %ld of the encoded documents (the rest are longer or have a probe: CPU)\n", on_gpu);
    }
    if (did_ingest && g->o.kv.kind != LZ_KVPOLICY_NONE) {
        char spec[LZ_KVPOLICY_SPEC_MAX];
        lz_kvpolicy_spec(&g->o.kv, spec, sizeof spec);
        double tp = policy_seconds(g);
        printf("  kv eviction %s: %.1f%% of the encoded keys kept; scoring %.3f s (%.1f%% of encoding)\n", spec,
               g->kv_full ? 100.0 * g->kv_kept / g->kv_full : 100.0, tp,
               g->t_encode > tp ? 100.0 * tp / (g->t_encode - tp) : 0.0);
    }
    if (did_check)
        printf("  check: %lld documents, %lld ok, %lld problems; %lld repaired, %lld removed; "
               "%lld unreferenced payloads\n",
               (long long)cs->n_docs, (long long)cs->n_ok, (long long)cs->n_issues, (long long)fixed,
               (long long)removed_by_repair, (long long)cs->n_unreferenced);
    printf("  store: %lld documents; gc removed %lld payloads (%.2f MB); %s in %.2f s\n", (long long)n_docs_total,
           (long long)(gc ? gc->n_removed : 0), gc ? gc->bytes_removed / 1e6 : 0.0, status, wall);
}

/* ---- the ingest pass ---- */

/* Returns the exit status. */
/* --kv-learn-out: the key-importance model fitted on this run's documents. */
static int write_scorer(ingest *g)
{
    lz_kvlearn m;
    if (!lz_kvlearn_acc_docs(g->learn)) {
        snprintf(g->err, sizeof g->err, "no document was encoded with --kv-reconstruct in this run (all unchanged or "
                 "stored whole?); fit on a new --store");
        return -1;
    }
    if (lz_kvlearn_fit(g->learn, 1e-4, &m)) {
        snprintf(g->err, sizeof g->err, "the fit failed (out of memory, or too few distinct keys)");
        return -1;
    }
    memcpy(m.fingerprint, g->m->fingerprint, 32);
    int rc = lz_kvlearn_save(&m, g->o.learn_out, g->err, sizeof g->err);
    if (!rc && !g->o.quiet)
        fprintf(stderr, "lazyingest: key-importance model fitted on %u documents -> %s (learned=%08x)\n", m.n_docs,
                g->o.learn_out, (unsigned)m.hash);
    lz_kvlearn_free(&m);
    return rc;
}

static int run_corpus(ingest *g, lz_corpus *cp)
{
    char err[2048];
    id_map seen = { 0 };
    lz_corpus_record r;
    int rc;
    /* pass 1: last occurrence of every id wins */
    while ((rc = lz_corpus_next(cp, &r, err, sizeof err)) != LZ_CORPUS_EOF) {
        if (rc == LZ_CORPUS_BAD) continue; /* reported in pass 2 */
        if (rc) {
            warnf(g, "lazyingest: %s", err);
            id_map_free(&seen);
            return EXIT_ERR;
        }
        id_slot *s = id_map_get(&seen, r.id, 1);
        if (!s) {
            warnf(g, "lazyingest: out of memory");
            id_map_free(&seen);
            return EXIT_ERR;
        }
        if (s->ordinal >= 0) {
            warnf(g, "%s:%ld: warning: id '%s' appears again at line %ld; the last one wins", lz_corpus_name(cp),
                  s->line, r.id, r.line);
            g->n_dupes++;
        } else {
            g->n_records_total++;
        }
        s->ordinal = r.ordinal;
        s->line = r.line;
    }
    if (lz_corpus_rewind(cp, err, sizeof err)) {
        warnf(g, "lazyingest: %s", err);
        id_map_free(&seen);
        return EXIT_ERR;
    }
    /* pass 2 */
    int stopped = 0, fatal = 0;
    long n_anonymous = 0; /* bad records whose id could not be read */
    while (!fatal && (rc = lz_corpus_next(cp, &r, err, sizeof err)) != LZ_CORPUS_EOF) {
        if (rc == LZ_CORPUS_BAD) {
            warnf(g, "%s", err);
            g->c.n_skipped++;
            if (!r.id) n_anonymous++;
            else if (push_ptr(&g->keep_sources, &g->n_keep, &g->cap_keep, r.id)) fatal = 1;
            if (g->o.strict) {
                stopped = 1;
                break;
            }
            continue;
        }
        if (rc) {
            warnf(g, "lazyingest: %s", err);
            fatal = 1;
            break;
        }
        id_slot *s = id_map_get(&seen, r.id, 0);
        if (s && s->ordinal != r.ordinal) continue; /* a later record with this id wins */
        char where[1100];
        snprintf(where, sizeof where, "%.1000s:%ld", lz_corpus_name(cp), r.line);
        int st = do_record(g, &r, &seen, where);
        if (st < 0) {
            warnf(g, "lazyingest: %s: %s", where, g->err);
            fatal = 1;
            break;
        }
        if (st > 0) {
            warnf(g, "%s", g->err);
            g->c.n_skipped++;
            if (push_ptr(&g->keep_sources, &g->n_keep, &g->cap_keep, r.id)) fatal = 1;
            if (g->o.strict) {
                stopped = 1;
                break;
            }
        }
        g->n_records_done++;
        if (g->batch_tokens >= g->o.batch_tokens || g->n_docs >= 4096) {
            if (flush(g)) {
                warnf(g, "lazyingest: %s", g->err);
                fatal = 1;
            }
        }
        progress(g, 0);
    }
    id_map_free(&seen);
    if (!fatal && flush(g)) {
        warnf(g, "lazyingest: %s", g->err);
        fatal = 1;
    }
    if (finish_commits(g) && !fatal) { /* a stop keeps what was committed before it */
        warnf(g, "lazyingest: %s", g->err);
        fatal = 1;
    }
    if (fatal) return EXIT_ERR;
    progress(g, 1);
    if (g->progress) fputs("\r\033[K", stderr);
    if (g->o.prune) {
        if (stopped) {
            warnf(g, "lazyingest: --prune skipped: the run stopped at a bad record (--strict)");
        } else if (n_anonymous) {
            /* their documents may be in the store: pruning would remove them */
            warnf(g, "lazyingest: --prune skipped: %ld bad records without a readable id", n_anonymous);
        } else {
            int64_t n = 0;
            int st = lz_meta_begin(g->meta, g->err, sizeof g->err);
            if (!st) st = lz_meta_prune(g->meta, g->run, &n, g->err, sizeof g->err);
            if (!st) st = lz_meta_commit(g->meta, g->err, sizeof g->err);
            if (st) {
                lz_meta_rollback(g->meta);
                warnf(g, "lazyingest: prune: %s", g->err);
                return EXIT_ERR;
            }
            g->c.n_removed += n;
        }
    }
    return stopped || g->c.n_skipped ? EXIT_SKIPPED : EXIT_OK;
}

static void join_args(int argc, char **argv, char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < argc && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? " " : "", argv[i]);
}

int main(int argc, char **argv)
{
    lz_runtime_init(argc, argv);
    ingest G;
    memset(&G, 0, sizeof G);
    ingest *g = &G;
    options *o = &g->o;
    o->store = "./lazystore";
    o->batch_tokens = 8192;
    o->max_doc_tokens = 1024;
    o->level = LZ_PAYLOAD_DEFAULT_LEVEL;
    lz_kvpolicy_default(&o->kv);
    int model_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return EXIT_OK;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!val) goto missing;
            o->model = val;
            model_given = 1;
            i++;
        } else if (!strcmp(a, "-s") || !strcmp(a, "--store")) {
            if (!val) goto missing;
            o->store = val;
            i++;
        } else if (!strcmp(a, "--batch-tokens")) {
            if (parse_int(val, a, 1, 1 << 30, &o->batch_tokens)) return EXIT_ERR;
            i++;
        } else if (!strcmp(a, "--threads")) {
            if (parse_int(val, a, 1, 4096, &o->threads)) return EXIT_ERR;
            i++;
        } else if (!strcmp(a, "--max-doc-tokens")) {
            if (parse_int(val, a, 16, 1 << 24, &o->max_doc_tokens)) return EXIT_ERR;
            i++;
        } else if (!strcmp(a, "--level")) {
            if (parse_int(val, a, 1, 19, &o->level)) return EXIT_ERR;
            i++;
        } else if (!strcmp(a, "--kv-dtype")) {
            if (!val) goto missing;
            if (!strcmp(val, "bf16")) o->kv_dtype = LZ_PAYLOAD_DTYPE_BF16;
            else if (!strcmp(val, "f32")) o->kv_dtype = LZ_PAYLOAD_DTYPE_F32;
            else {
                fprintf(stderr, "lazyingest: --kv-dtype expects bf16 or f32, got '%s'\n", val);
                return EXIT_ERR;
            }
            i++;
        } else if (!strcmp(a, "--kv-policy")) {
            if (!val) goto missing;
            int k = lz_kvpolicy_parse_name(val);
            if (k < 0) {
                fprintf(stderr, "lazyingest: --kv-policy expects none, snapkv, ada-snapkv, pyramidkv or "
                                "ada-pyramidkv, got '%s'\n", val);
                return EXIT_ERR;
            }
            o->kv.kind = k;
            i++;
        } else if (!strcmp(a, "--kv-budget")) {
            if (!val) goto missing;
            if (lz_kvpolicy_parse_budget(val, &o->kv)) {
                fprintf(stderr, "lazyingest: --kv-budget expects a fraction in (0, 1] (0.2) or a token count "
                                "(128t), got '%s'\n", val);
                return EXIT_ERR;
            }
            o->kv_budget_arg = val;
            i++;
        } else if (!strcmp(a, "--kv-window")) {
            if (parse_int(val, a, 1, 1 << 20, &o->kv.window)) return EXIT_ERR;
            i++;
        } else if (!strcmp(a, "--kv-kernel")) {
            if (parse_int(val, a, 1, 1023, &o->kv.kernel)) return EXIT_ERR;
            if (!(o->kv.kernel & 1)) {
                fprintf(stderr, "lazyingest: --kv-kernel must be odd, got %d\n", o->kv.kernel);
                return EXIT_ERR;
            }
            i++;
        } else if (!strcmp(a, "--kv-alpha")) {
            char *end;
            double x = val ? strtod(val, &end) : -1;
            if (!val || *end || end == val || !(x >= 0 && x <= 1)) {
                fprintf(stderr, "lazyingest: --kv-alpha expects a number in [0, 1], got '%s'\n", val ? val : "");
                return EXIT_ERR;
            }
            o->kv.alpha = (float)x;
            i++;
        } else if (!strcmp(a, "--kv-probe")) {
            o->kv.probe = LZ_KVPOLICY_PROBE_CUE;
        } else if (!strcmp(a, "--kv-probe-text")) {
            if (!val) goto missing;
            size_t len = strlen(val);
            if (len > 1024 || lz_utf8_valid_prefix((const unsigned char *)val, len) != len) {
                fprintf(stderr, "lazyingest: --kv-probe-text: %s\n",
                        len > 1024 ? "longer than 1024 bytes" : "not valid UTF-8");
                return EXIT_ERR;
            }
            o->kv.probe = LZ_KVPOLICY_PROBE_CUE;
            o->probe_text = val;
            o->kv.probe_text = lz_kvpolicy_text_hash(val);
            i++;
        } else if (!strcmp(a, "--kv-reconstruct")) {
            o->kv.probe = LZ_KVPOLICY_PROBE_RECONSTRUCT;
        } else if (!strcmp(a, "--kv-self")) {
            o->kv.probe = LZ_KVPOLICY_PROBE_SELF;
        } else if (!strcmp(a, "--kv-learned")) {
            if (!val) goto missing;
            o->kv.probe = LZ_KVPOLICY_PROBE_LEARNED;
            o->learned = val;
            i++;
        } else if (!strcmp(a, "--kv-learn-out")) {
            if (!val) goto missing;
            o->learn_out = val;
            i++;
        } else if (!strcmp(a, "--kv-value-norm")) {
            o->kv.value_norm = 1;
        } else if (!strcmp(a, "--kv-value-power")) {
            if (!val) goto missing;
            if (lz_kvpolicy_parse_power(val, &o->kv.value_power)) {
                fprintf(stderr, "lazyingest: --kv-value-power expects a number in (0, 16], got '%s'\n", val);
                return EXIT_ERR;
            }
            o->kv.value_norm = 1;
            i++;
        } else if (!strcmp(a, "--kv-scope")) {
            if (!val) goto missing;
            if (!strcmp(val, "layer")) o->kv.scope_model = 0;
            else if (!strcmp(val, "model")) o->kv.scope_model = 1;
            else {
                fprintf(stderr, "lazyingest: --kv-scope expects layer or model, got '%s'\n", val);
                return EXIT_ERR;
            }
            i++;
        } else if (!strcmp(a, "--kv-agg")) {
            if (!val) goto missing;
            if (!strcmp(val, "mean")) o->kv.agg = LZ_KVPOLICY_AGG_MEAN;
            else if (!strcmp(val, "max")) o->kv.agg = LZ_KVPOLICY_AGG_MAX;
            else {
                fprintf(stderr, "lazyingest: --kv-agg expects mean or max, got '%s'\n", val);
                return EXIT_ERR;
            }
            i++;
        } else if (!strcmp(a, "--format")) {
            if (!val) goto missing;
            if (!strcmp(val, "jsonl")) o->format = LZ_CORPUS_JSONL;
            else if (!strcmp(val, "csv")) o->format = LZ_CORPUS_CSV;
            else {
                fprintf(stderr, "lazyingest: --format expects jsonl or csv, got '%s'\n", val);
                return EXIT_ERR;
            }
            i++;
        } else if (!strcmp(a, "--prune")) o->prune = 1;
        else if (!strcmp(a, "--strict")) o->strict = 1;
        else if (!strcmp(a, "--check")) o->check = 1;
        else if (!strcmp(a, "--repair")) o->repair = o->check = 1;
        else if (!strcmp(a, "--gc")) o->gc = 1;
        else if (!strcmp(a, "--quiet")) o->quiet = 1;
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--gpu")) {
#ifndef LZ_CUDA
            fprintf(stderr, "lazyingest: --gpu: this build has no CUDA support ('make cuda' builds build/cuda/lazyingest)\n");
            return EXIT_ERR;
#endif
            o->gpu = 1;
        }
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "lazyingest: unknown option %s (see --help)\n", a);
            return EXIT_ERR;
        } else if (!o->corpus) o->corpus = a;
        else {
            fprintf(stderr, "lazyingest: one corpus at a time (got '%s' and '%s')\n", o->corpus, a);
            return EXIT_ERR;
        }
        continue;
    missing:
        fprintf(stderr, "lazyingest: %s needs a value\n", a);
        return EXIT_ERR;
    }
    if (!o->corpus && !o->check && !o->gc) {
        usage(stderr);
        return EXIT_ERR;
    }
    if (o->learn_out && (!o->corpus || o->kv.kind == LZ_KVPOLICY_NONE || o->kv.probe != LZ_KVPOLICY_PROBE_RECONSTRUCT)) {
        fprintf(stderr, "lazyingest: --kv-learn-out needs a corpus, --kv-policy, --kv-budget and --kv-reconstruct "
                        "(it learns the reconstruction scores)\n");
        return EXIT_ERR;
    }
    if (o->kv.scope_model && o->kv.kind != LZ_KVPOLICY_ADA_SNAPKV) {
        fprintf(stderr, "lazyingest: --kv-scope model needs --kv-policy ada-snapkv (got %s)\n",
                lz_kvpolicy_name(o->kv.kind));
        return EXIT_ERR;
    }
    if (o->kv.kind != LZ_KVPOLICY_NONE && !o->kv_budget_arg) {
        fprintf(stderr, "lazyingest: --kv-policy %s needs --kv-budget (0.2 or 128t)\n", lz_kvpolicy_name(o->kv.kind));
        return EXIT_ERR;
    }
    g->t0 = now_s();
    g->progress = !o->quiet && !o->json && isatty(2);
    int need_model = o->corpus || o->repair || model_given;
    char model_path[PATH_MAX];
    if (need_model && !o->model) {
        if (lz_prompt_default_model(model_path, sizeof model_path, g->err, sizeof g->err)) {
            fprintf(stderr, "lazyingest: %s\n", g->err);
            return EXIT_ERR;
        }
        o->model = model_path;
    }
    int status = EXIT_OK;
    lz_corpus *cp = NULL;
    if (o->corpus && lz_corpus_open(o->corpus, (lz_corpus_format)o->format, &cp, g->err, sizeof g->err)) {
        fprintf(stderr, "lazyingest: %s\n", g->err);
        return EXIT_ERR;
    }
    if (!cp) { /* maintenance only: never create an empty store */
        char meta_path[PATH_MAX + 16];
        snprintf(meta_path, sizeof meta_path, "%s/meta.sqlite", o->store);
        if (access(meta_path, F_OK) != 0) {
            fprintf(stderr, "lazyingest: no store at %s (%s not found); give --store\n", o->store, meta_path);
            return EXIT_ERR;
        }
    }
    double t_setup = now_s();
    int load_rc = need_model ? load_model(g, o->model) : 0;
    g->t_load = now_s() - t_setup;
    if (load_rc) { /* before the store: a refused model creates nothing */
        fprintf(stderr, "lazyingest: %s\n", g->err);
        status = EXIT_ERR;
        goto out;
    }
    g->codec = lz_payload_codec_new();
    /* payloads compressed on every thread (zstd workers; the bytes do not depend on the count) */
    if (g->codec && lz_payload_codec_set_threads(g->codec, o->threads > 0 ? o->threads : cpu_count()))
        warnf(g, "lazyingest: out of memory for the compression threads: payloads are compressed in one thread");
    /* --check alone (no model to bind) writes nothing: it reads beside a running writer,
     * without the writer lock */
    const int read_only = !cp && !o->repair && !o->gc && !need_model;
    if (!g->codec ||
        lz_store_open(o->store, read_only ? LZ_STORE_RDONLY : LZ_STORE_WRITER, &g->s, g->err, sizeof g->err)) {
        fprintf(stderr, "lazyingest: %s\n", g->codec ? g->err : "out of memory");
        status = EXIT_ERR;
        goto out;
    }
    g->meta = lz_store_meta(g->s);
    int setup_rc = need_model ? setup_model(g, o->model) : lz_store_bind_recorded(g->s, g->err, sizeof g->err);
    g->t_setup = now_s() - t_setup; /* model load, GPU upload, store binding, the prefix's forward pass */
    if (setup_rc) {
        fprintf(stderr, "lazyingest: %s\n", g->err);
        status = EXIT_ERR;
        goto out;
    }

    lz_store_check_stats cs = { 0 };
    lz_store_gc_stats gs = { 0 };
    int64_t fixed = 0, removed_by_repair = 0, n_total = 0;
    const char *run_status = "ok";
    if (cp) {
        char args[8192];
        join_args(argc, argv, args, sizeof args);
        int st = lz_meta_begin(g->meta, g->err, sizeof g->err);
        if (!st) st = lz_meta_run_begin(g->meta, args, g->model_id, &g->run, g->err, sizeof g->err);
        if (!st) st = lz_meta_commit(g->meta, g->err, sizeof g->err);
        if (st) {
            lz_meta_rollback(g->meta);
            fprintf(stderr, "lazyingest: %s\n", g->err);
            status = EXIT_ERR;
            goto out;
        }
        status = run_corpus(g, cp);
        run_status = status == EXIT_ERR ? "failed" : status == EXIT_SKIPPED ? "partial" : "ok";
        if (status != EXIT_ERR && g->learn && write_scorer(g)) {
            fprintf(stderr, "lazyingest: --kv-learn-out: %s\n", g->err);
            status = EXIT_ERR;
        }
    }
    if (status != EXIT_ERR && o->check) {
        issue_list l = { g, NULL, 0, 0 };
        if (lz_store_check(g->s, on_issue, &l, &cs, g->err, sizeof g->err)) {
            fprintf(stderr, "lazyingest: check: %s\n", g->err);
            status = EXIT_ERR;
        } else if (o->repair && l.n) {
            if (repair(g, &l, &fixed, &removed_by_repair)) {
                fprintf(stderr, "lazyingest: repair: %s\n", g->err);
                status = EXIT_ERR;
            } else {
                issues_free(&l);
                lz_store_check_stats again;
                if (lz_store_check(g->s, on_issue, &l, &again, g->err, sizeof g->err) == 0 && l.n) {
                    fprintf(stderr, "lazyingest: repair left %d problems\n", l.n);
                    status = EXIT_CHECK;
                }
            }
        } else if (l.n) {
            if (status == EXIT_OK) status = EXIT_CHECK;
        }
        issues_free(&l);
    }
    /* Garbage: payloads of removed or changed documents, and of batches an
     * interrupted run wrote without committing their rows. */
    if (status != EXIT_ERR && (cp || o->gc || o->repair)) {
        if (lz_store_gc(g->s, &gs, g->err, sizeof g->err)) {
            fprintf(stderr, "lazyingest: gc: %s\n", g->err);
            status = EXIT_ERR;
        }
        g->c.n_garbage = gs.n_removed;
    }
    if (cp && g->run) {
        if (status == EXIT_ERR) run_status = "failed";
        if (lz_meta_run_end(g->meta, g->run, &g->c, run_status, g->err, sizeof g->err))
            fprintf(stderr, "lazyingest: recording the run: %s\n", g->err);
    }
    lz_meta_doc_count(g->meta, &n_total, g->err, sizeof g->err);
    summary(g, status == EXIT_OK ? "ok" : status == EXIT_SKIPPED ? "partial" : status == EXIT_CHECK ? "problems"
                                                                                                    : "failed",
            n_total, (cp || o->gc || o->repair) ? &gs : NULL, &cs, fixed, removed_by_repair, cp != NULL, o->check);
out:
    batch_free(g);
    for (int i = 1; i < g->n_pool; i++) lz_encoder_free(g->pool[i]); /* pool[0] is enc */
    for (int i = 0; i < g->n_pool; i++) lz_payload_codec_free(g->pool_codec[i]);
    free(g->pool);
    free(g->pool_codec);
    free(g->probe);
    lz_encoder_free(g->enc);
#ifdef LZ_CUDA
    lz_llama_gpu_free(g->gpu);
#endif
    lz_kvlearn_free(&g->scorer);
    lz_kvlearn_acc_free(g->learn);
    lz_payload_codec_free(g->codec);
    lz_store_close(g->s);
    lz_corpus_close(cp);
    free(g->prefix);
    lz_llama_free(g->m);
    return status;
}
