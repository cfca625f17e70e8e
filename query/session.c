/* session.c - the query session (see session.h): the model and store bound
 * and checked, the host tier of the document cache, the start-up preload,
 * and lz_query_answer: one answer run to its end (query/answer_run.c makes
 * the four modes' segments, prefills, samples and steps). */
#include "query/session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/sha256.h"
#include "ingest/model_desc.h"
#include "model/prompt.h"
#include "query/answer_run.h"
#include "query/session_priv.h"


/* The priors of LZ_COLD_AUTO's rates, before anything is measured: payload decode on a
 * 16-core host (bench_codec) and an 8B model's multi-document passes on an H200 (lazyingest
 * --gpu's forward seconds), the figures of bench/RESULTS.md. */
#define COLD_DECODE_PRIOR 4.0e9
#define COLD_RECOMPUTE_PRIOR 2.0e4

void lz_query_cold_rates(const lz_query_session *q, double *decode_bps, double *recompute_tps)
{
    *decode_bps = q->decode_bps;
    *recompute_tps = q->recompute_tps;
}

void lz_query_set_cold_rates(lz_query_session *q, double decode_bps, double recompute_tps)
{
    if (decode_bps > 0) q->decode_bps = decode_bps;
    if (recompute_tps > 0) q->recompute_tps = recompute_tps;
}

const char *lz_query_mode_name(int mode)
{
    static const char *names[] = {"lazy", "block", "prefix", "full"};
    return mode >= 0 && mode < 4 ? names[mode] : "?";
}

int lz_query_mode_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, lz_query_mode_name(i))) return i;
    return -1;
}

int lz_query_engine_rows(int mode) { return mode == LZ_MODE_FULL || mode == LZ_MODE_PREFIX ? 16384 : 4096; }

void lz_query_opts_default(lz_query_opts *o)
{
    memset(o, 0, sizeof *o);
    o->mode = LZ_MODE_LAZY;
    o->cache_bytes = (size_t)1 << 30;
    o->max_new_tokens = 64; /* a comparison answer gives its reasoning first (~35 tokens) */
    o->top_p = 0.9f;
    o->seed = 42;
    o->batch = 256;
}

void lz_query_result_free(lz_query_result *r)
{
    free(r->answer);
    free(r->answer_ids);
    free(r->logits);
    memset(r, 0, sizeof *r);
}

static void cache_free_value(void *v, void *ctx) { session_entry_free(ctx, v); }

typedef struct {
    lz_query_session *q;
    const char *what;
    kv_entry *e;
    int status;
    char *err;
    size_t errlen;
} load_ctx;

static int decode_in_place(const void *blob, size_t len, void *ctx)
{
    load_ctx *l = ctx;
    l->e = kv_entry_decode(&l->q->env, blob, len, l->what, &l->status, l->err, l->errlen);
    return l->e ? 0 : -1;
}

kv_entry *session_load_payload(lz_query_session *q, const uint8_t *key, const char *what, int *status, char *err,
                               size_t errlen)
{
    char e2[384] = "";
    load_ctx l = {q, what, NULL, -1, err, errlen};
    int rc = lz_store_read_payload(q->store, key, decode_in_place, &l, e2, sizeof e2);
    if (rc > 0) /* the store's status: nothing was decoded */
        snprintf(err, errlen, "%s: KV payload missing from the store (%s); run lazyingest --check --repair", what, e2);
    if (status) *status = rc < 0 && l.status == LZ_QUERY_ENOMEM ? LZ_QUERY_ENOMEM : -1;
    return rc ? NULL : l.e;
}

int lz_query_session_new(lz_llama *m, lz_store *s, const lz_query_opts *o, lz_query_session **out, char *err,
                         size_t errlen)
{
    *out = NULL;
    if (!m->tok) { snprintf(err, errlen, "the model has no tokenizer"); return -1; }
    lz_query_session *q = calloc(1, sizeof *q);
    if (!q) { snprintf(err, errlen, "out of memory"); return -1; }
    q->m = m;
    q->store = s;
    q->o = *o;
    q->decode_bps = COLD_DECODE_PRIOR;
    q->recompute_tps = COLD_RECOMPUTE_PRIOR;
    if (q->o.batch <= 0) q->o.batch = 256;
    lz_store_model_desc desc;
    lz_ingest_model_desc(m, NULL, &desc);
    int rc = lz_store_check_model(s, &desc, err, errlen);
    if (rc) { free(q); return rc; }
    q->cache = lz_doc_cache_new(o->cache_bytes, cache_free_value, q);
    if (q->cache) lz_doc_cache_set_policy(q->cache, (lz_cache_policy)o->cache_policy);
    q->codec = lz_payload_codec_new();
    q->env = (kv_entry_env){.cfg = &m->cfg, .fingerprint = m->fingerprint, .f32 = o->cache_f32,
                            .fp8 = (!o->backend || o->backend->reads_fp8) && !o->cache_f32, /* the CPU engine reads fp8 */
                            .backend = o->backend && o->backend->host_alloc && o->backend->host_free ? o->backend : NULL,
                            .codec = q->codec};
    /* the answers' forward passes where the backend does not run them (answer_run.c) */
    const lz_query_backend *be = o->backend;
    const int own_cpu = !be || (!be->reserve && o->mode == LZ_MODE_PREFIX &&
                                !(be->keep_own && be->resident && be->keep_own_in));
    if (be && be->reserve) q->cpu_be = be; /* the CPU engine's table itself */
    if (own_cpu && (q->cpu = lz_engine_cpu_query_new(m, q->o.batch))) {
        lz_engine_cpu_query_table(q->cpu, &q->cpu_table);
        q->cpu_be = &q->cpu_table;
    }
    if (!q->cache || !q->codec || (own_cpu && !q->cpu) ||
        lz_sampler_init(&q->sampler, m->cfg.vocab, o->temperature, o->top_p, o->seed) ||
        lz_prompt_prefix_tokens(m->tok, &q->prefix, &q->n_prefix)) {
        snprintf(err, errlen, "out of memory");
        lz_query_session_free(q);
        return -1;
    }
    /* the prefix this binary builds must be the one the store was encoded after */
    const int *sp;
    int sn;
    uint8_t prefix_key[LZ_META_KEY_LEN];
    lz_store_prefix(s, &sp, &sn, prefix_key);
    if (sn != q->n_prefix || memcmp(sp, q->prefix, (size_t)q->n_prefix * sizeof(int))) {
        snprintf(err, errlen, "the store was encoded after another prompt prefix (%d tokens, this build uses %d); "
                 "re-run lazyingest on the corpus", sn, q->n_prefix);
        lz_query_session_free(q);
        return -1;
    }
    lz_sha256(prefix_key, LZ_META_KEY_LEN, q->prefix_digest);
    kv_entry *pe = session_load_payload(q, prefix_key, "the prompt prefix", NULL, err, errlen);
    if (!pe) { lz_query_session_free(q); return -1; }
    if (pe->n != q->n_prefix) {
        snprintf(err, errlen, "the prompt prefix payload has %d tokens, expected %d", pe->n, q->n_prefix);
        session_entry_free(q, pe);
        lz_query_session_free(q);
        return -1;
    }
    q->prefix_kv = *pe;
    q->kv16 = pe->k16 || pe->k8; /* its own copies (prefix mode) bf16 */
    q->kv_elem = pe->k8 ? KV_ENTRY_FP8 : pe->k16 ? KV_ENTRY_BF16 : KV_ENTRY_F32;
    free(pe);
    *out = q;
    return 0;
}

void lz_query_session_free(lz_query_session *q)
{
    if (!q) return;
    lz_doc_cache_free(q->cache);
    lz_payload_codec_free(q->codec);
    lz_engine_cpu_query_free(q->cpu);
    lz_sampler_free(&q->sampler);
    free(q->prefix);
    kv_entry_clear(&q->env, &q->prefix_kv);
    free(q);
}

void lz_query_cache_stats(const lz_query_session *q, lz_doc_cache_stats *st) { lz_doc_cache_get_stats(q->cache, st); }
int lz_query_prefix_len(const lz_query_session *q) { return q->n_prefix; }
const lz_query_opts *lz_query_session_opts(const lz_query_session *q) { return &q->o; }

int64_t lz_query_doc_budget(const lz_query_session *q, const char *question)
{
    int *ids, n;
    if (q->o.max_positions <= 0) return INT64_MAX / 2;
    if (lz_prompt_question_tokens(q->m->tok, question, &ids, &n)) return -1;
    free(ids);
    return (int64_t)q->o.max_positions - q->n_prefix - n - q->o.max_new_tokens;
}

int lz_query_answer(lz_query_session *q, const char *question, const lz_query_doc *docs, int n_docs,
                    lz_query_result *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    lz_query_run *run;
    int rc = lz_query_run_start(q, question, docs, n_docs, NULL, &run, err, errlen);
    if (rc) return rc; /* -1 or LZ_QUERY_ENOMEM, as the run API says */
    const double t1 = lz_now_s();
    for (;;) { /* decode: the same segments, one token at a time */
        const char *piece;
        int pl;
        if (lz_query_run_next(run, &piece, &pl) && pl && q->o.on_piece) q->o.on_piece(piece, pl, q->o.ctx);
        if (lz_query_run_done(run)) break;
        if ((rc = lz_query_run_step(q, &run, 1, err, errlen))) {
            lz_query_run_free(run);
            return rc;
        }
    }
    lz_query_run_finish(run, r);
    r->t_decode = lz_now_s() - t1;
    return 0;
}

/* Start-up preload: the most accessed documents, in popularity order,
 * PRELOAD_BATCH at a time read in one snapshot and decoded together on all
 * threads (kv_entry_decode_many), then inserted in that order: the same
 * documents a one-by-one preload takes (room is planned with the entries'
 * exact sizes). */
#define PRELOAD_BATCH 64
typedef struct {
    uint8_t key[LZ_META_KEY_LEN];
    int64_t hits;
    int n_tokens;
    kv_entry *e;
} preload_item;

typedef struct {
    lz_query_session *q;
    lz_query_preload_result *res;
    int gpu_done; /* the backend's cache is full (or failed): no more offers */
    char *err;
    size_t errlen;
    preload_item items[PRELOAD_BATCH];
    int n;
    int (*keep)(const uint8_t *payload_key, void *ctx); /* NULL: every document */
    void *keep_ctx;
    int rest; /* with keep: the second walk, the other documents into the host tier's room */
} preload_ctx;

/* The backend's hook, when it has one and still takes documents. */
static const lz_query_backend *preload_backend(const preload_ctx *P)
{
    const lz_query_backend *be = P->q->o.backend;
    return be && be->preload && !P->gpu_done ? be : NULL;
}

/* In the batch's snapshot: which documents a tier has room for (in order), decoded at once. */
static int preload_decode(const void *const *blobs, const size_t *lens, void *ctx)
{
    preload_ctx *P = ctx;
    lz_query_session *q = P->q;
    lz_doc_cache_stats st;
    lz_doc_cache_get_stats(q->cache, &st);
    const void *take[PRELOAD_BATCH];
    int64_t planned = 0;
    for (int i = 0; i < P->n; i++) {
        take[i] = NULL;
        if (!blobs[i]) { P->res->failed++; continue; }
        const size_t need = kv_entry_bytes_of(&q->env, blobs[i], lens[i], P->items[i].n_tokens);
        const int host_room = (int64_t)need <= st.bytes_budget - st.bytes_used - planned;
        if (!host_room && !(P->items[i].hits > 0 && preload_backend(P))) continue; /* smaller ones may fit */
        if (host_room) planned += (int64_t)need;
        take[i] = blobs[i];
    }
    kv_entry *out[PRELOAD_BATCH];
    kv_entry_decode_many(&q->env, take, lens, P->n, out, NULL, NULL);
    for (int i = 0; i < P->n; i++) {
        P->items[i].e = out[i];
        if (take[i] && !out[i]) P->res->failed++;
    }
    return 0;
}

static void preload_batch(preload_ctx *P)
{
    lz_query_session *q = P->q;
    uint8_t keys[PRELOAD_BATCH][LZ_META_KEY_LEN];
    for (int i = 0; i < P->n; i++) memcpy(keys[i], P->items[i].key, LZ_META_KEY_LEN), P->items[i].e = NULL;
    char e2[256];
    if (P->n && lz_store_read_payloads(q->store, (const uint8_t(*)[LZ_META_KEY_LEN])keys, P->n, preload_decode, P, e2,
                                       sizeof e2))
        P->res->failed += P->n;
    for (int i = 0; i < P->n; i++) {
        kv_entry *e = P->items[i].e;
        if (!e) continue;
        const lz_query_backend *be = preload_backend(P);
        if (be && P->items[i].hits > 0) { /* the hottest into the backend's cache first, while it has room */
            uint8_t digest[32];
            lz_sha256(P->items[i].key, LZ_META_KEY_LEN, digest); /* the content key lz_query_answer hands it */
            const lz_kv_segment sg = kv_entry_segment(e, 0);
            const int kept = be->preload(be->ctx, &sg, digest, 0, P->err, P->errlen);
            if (kept > 0) { P->res->gpu++; P->res->gpu_bytes += (int64_t)e->bytes; }
            else P->gpu_done = 1; /* full, or failed (its message in err) */
        }
        if (lz_doc_cache_preload(q->cache, P->items[i].key, LZ_META_KEY_LEN, e, e->bytes)) {
            P->res->host++;
            P->res->host_bytes += (int64_t)e->bytes;
            if (P->keep && !P->rest) P->res->host_share++;
        } else {
            session_entry_free(q, e);
        }
    }
    P->n = 0;
}

/* One popular document: seed its frequencies, queue it for a batch. */
static int preload_one(int64_t doc_id, int64_t hits, const uint8_t *key, int n_tokens, void *ctx)
{
    preload_ctx *P = ctx;
    lz_query_session *q = P->q;
    (void)doc_id;
    if (P->rest) { /* the second walk: the others' documents, the host tier only */
        lz_doc_cache_stats st;
        lz_doc_cache_get_stats(q->cache, &st);
        if (st.bytes_used >= st.bytes_budget) return 1; /* full: the walk ends */
        if (P->keep(key, P->keep_ctx)) return 0;
    } else {
        lz_doc_cache_prior(q->cache, key, LZ_META_KEY_LEN, (double)hits);
        if (P->keep && !P->keep(key, P->keep_ctx)) return 0; /* another engine's share: the second walk's */
    }
    const lz_query_backend *be = preload_backend(P);
    if (be && hits > 0) {
        uint8_t digest[32];
        lz_sha256(key, LZ_META_KEY_LEN, digest);
        if (be->preload(be->ctx, NULL, digest, (double)hits, P->err, P->errlen) < 0) P->gpu_done = 1;
    }
    preload_item *it = &P->items[P->n++];
    memcpy(it->key, key, LZ_META_KEY_LEN);
    it->hits = hits;
    it->n_tokens = n_tokens;
    it->e = NULL;
    if (P->n == PRELOAD_BATCH) preload_batch(P);
    return 0;
}

/* Only LAZY (and BLOCK on a backend with begin_block) preloads: one copy serves every position,
 * while other BLOCK and PREFIX keys depend on placements that no query has made yet. */
int lz_query_preload(lz_query_session *q, int all, lz_query_preload_result *res, char *err, size_t errlen)
{
    return lz_query_preload_only(q, all, NULL, NULL, res, err, errlen);
}

int lz_query_preload_only(lz_query_session *q, int all, int (*keep)(const uint8_t *payload_key, void *ctx), void *ctx,
                          lz_query_preload_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    const double t0 = lz_now_s();
    /* lazy's entries serve every placement; so do block's on a backend that rotates its own copies */
    const int content = q->o.mode == LZ_MODE_LAZY || (q->o.mode == LZ_MODE_BLOCK && q->o.backend && q->o.backend->begin_block);
    if (!content || (q->o.cache_bytes == 0 && !(q->o.backend && q->o.backend->preload))) return 0;
    preload_ctx *P = calloc(1, sizeof *P);
    if (!P) { snprintf(err, errlen, "out of memory"); return -1; }
    *P = (preload_ctx){.q = q, .res = res, .err = err, .errlen = errlen, .keep = keep, .keep_ctx = ctx};
    err[0] = 0;
    int rc = lz_store_top_accessed(q->store, all ? INT32_MAX : 100000, all, preload_one, P, err, errlen);
    preload_batch(P); /* the rest (after an error too: nothing queued is lost) */
    if (keep && !rc && !err[0]) { /* then the others' documents, hottest first, while the host tier has room */
        P->rest = 1;
        P->gpu_done = 1;
        rc = lz_store_top_accessed(q->store, all ? INT32_MAX : 100000, all, preload_one, P, err, errlen);
        preload_batch(P);
    }
    free(P);
    res->seconds = lz_now_s() - t0;
    return rc || err[0] ? -1 : 0;
}
