/* answer_run.c - one answer in progress (answer_run.h): begin places the
 * documents as the mode makes its segments (the four modes differ only
 * there), prefill runs the questions of several answers in one batched pass,
 * next samples, step runs the sampled tokens of several answers in one
 * batched pass. The documents an answer reads stay held in the host tier
 * until it is freed, so answers can run side by side; every forward pass
 * goes through an engine's question table (engine/backend.h): the session's
 * backend, or the CPU engine's (engine/cpu_query.h) when there is none or it
 * lacks what the mode needs; on a table with slots each answer holds one
 * (its sequence there) and the batched passes go to its prefill_many /
 * decode_many. How a document's entry is had from the tiers below the
 * backend: doc_tiers.c. What it leaves out: which answers run together and
 * when (serve/). */
#include "query/answer_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/half.h"
#include "base/sha256.h"
#include "kernels/lz_argmax.h"
#include "model/prompt.h"
#include "query/doc_tiers.h"
#include "query/session_priv.h"

struct lz_query_run {
    lz_query_session *q;
    lz_query_result r;          /* the answer so far */
    size_t cap, len;            /* bytes of r.answer allocated, used */
    int max_new;
    lz_sampler own;             /* the answer's sampler (opts given), */
    lz_sampler *sampler;        /* or the session's */
    float *logits;              /* (V) the next token's */
    int *qids, n_q;             /* the question's tokens */
    int prev;                   /* the last token (its piece depends on it) */
    int pending;                /* the token sampled and not yet stepped, -1 none */
    int ready;                  /* logits (or next_greedy) ready for next */
    int next_greedy;            /* >= 0: the greedy token the backend chose (decode_next), logits unread */
    int done, failed, settled;
    int plain;                  /* plain prompt: the answer ends at its first line break */
    int *eog, n_eog;            /* ignore_eos: the end-of-generation ids, masked before sampling */
    const lz_query_backend *be; /* runs the question and the answer: the backend's table or the CPU engine's */
    int slot;                   /* its sequence on a table with slots (backend_slots != 1), or -1 */
    lz_kv_segment *segs;        /* (n_segs) prefix, documents */
    int n_segs;
    kv_entry **owned;           /* entries the tier did not take: freed with the run */
    int n_owned;
    uint8_t (*held)[LZ_DOC_CACHE_KEY_MAX]; /* keys held in the host tier (n_held, lengths held_len) */
    uint8_t *held_len;
    int n_held;
    size_t bytes;               /* lz_query_run_bytes */
    double t0, t_first;         /* begin; the first answer token's logits */
    char piece[256];
};

/* Copies tokens [t0, t0 + n) of a sequence's own cache into a new entry
 * (PREFIX mode), bf16 (rounded, as the store's entries) or fp32. */
static kv_entry *slice_cache(lz_query_session *q, const lz_kv_cache *lc, int t0, int n, int bf16)
{
    const lz_llama_config *c = &q->m->cfg;
    kv_entry *e = kv_entry_alloc(&q->env, n, NULL, bf16 ? KV_ENTRY_BF16 : KV_ENTRY_F32);
    if (!e) return NULL;
    const size_t cnt = (size_t)n * c->head_dim;
    for (int l = 0; l < c->n_layers; l++)
        for (int h = 0; h < c->n_kv_heads; h++) {
            size_t src = (((size_t)l * c->n_kv_heads + h) * lc->cap + t0) * c->head_dim;
            size_t dst = ((size_t)l * c->n_kv_heads + h) * cnt;
            if (bf16) {
                lz_f32_to_bf16_n(e->k16 + dst, lc->k + src, cnt);
                lz_f32_to_bf16_n(e->v16 + dst, lc->v + src, cnt);
            } else {
                memcpy(e->k + dst, lc->k + src, cnt * sizeof(float));
                memcpy(e->v + dst, lc->v + src, cnt * sizeof(float));
            }
        }
    return e;
}

/* Sequences the table b runs at once through its slot hooks (see lz_query_backend): n_slots, 0 for
 * any number (host sequences: the CPU engine's), or 1 (begin / step: one at a time). */
static int backend_slots(const lz_query_backend *b)
{
    if (!b || !b->idle_slot || !b->begin_in || !b->step_in || !b->release || !b->decode_many) return 1;
    if (b->reserve && b->own_kv && b->prefill_many) return 0;
    return b->n_slots > 1 ? b->n_slots : 1;
}

/* 1 when b's sequences are host memory reserved per answer (the CPU engine's table). */
static int host_seqs(const lz_query_backend *b) { return b && backend_slots(b) == 0; }

/* The backend's step, in the run's slot when it has one. */
static int be_step(const lz_query_backend *be, int slot, const int *ids, int n, float *logits, char *err,
                   size_t errlen)
{
    return slot >= 0 ? be->step_in(be->ctx, slot, ids, n, logits, err, errlen) : be->step(be->ctx, ids, n, logits, err, errlen);
}

/* A failed call's status as the run API passes it on: LZ_QUERY_ENOMEM as it is, any other -1. */
static int run_status(int rc) { return rc == LZ_QUERY_ENOMEM ? LZ_QUERY_ENOMEM : -1; }

int lz_query_run_parallel(const lz_query_session *q)
{
    return backend_slots(q->o.backend ? q->o.backend : q->cpu_be);
}

/* PREFIX's chain keys: the key of the prompt prefix alone, then chain_next folds in each
 * document in order (a document's key names it after exactly these predecessors). */
static void chain_start(const lz_query_session *q, uint8_t chain[32])
{
    lz_sha256(q->prefix, (size_t)q->n_prefix * sizeof(int), chain);
}

static void chain_next(uint8_t chain[32], const lz_query_doc *d)
{
    uint8_t buf[32 + LZ_META_KEY_LEN];
    memcpy(buf, chain, 32);
    memcpy(buf + 32, d->payload_key, LZ_META_KEY_LEN);
    lz_sha256(buf, sizeof buf, chain);
}

/* FULL and PREFIX on a backend: after begin (none, or the prefix and the reused chain), every
 * token the prompt still needs in one step: FULL the prefix, the documents and the question;
 * PREFIX the documents from local_from and the question; then PREFIX keeps each document it
 * computed under its chain key (backend->keep_own), as vLLM's prefix cache keeps its blocks.
 * The first answer token's logits in logits (V). 0, -1 or LZ_QUERY_ENOMEM. */
static int backend_prompt(lz_query_session *q, const lz_query_backend *be, int slot, const lz_query_doc *docs,
                          int n_docs, int local_from, const int *qids, int n_q, float *logits, lz_query_result *r,
                          char *err, size_t errlen)
{
    const int s = q->n_prefix, full = q->o.mode == LZ_MODE_FULL;
    size_t n_all = (size_t)n_q + (full ? (size_t)s : 0);
    for (int i = local_from; i < n_docs; i++) n_all += (size_t)docs[i].n_tokens;
    int *all = malloc(n_all * sizeof *all), *t0s = malloc(((size_t)n_docs + 1) * sizeof *t0s);
    int rc = -1, hrc;
    size_t at = 0;
    if (!all || !t0s) { snprintf(err, errlen, "out of memory"); rc = LZ_QUERY_ENOMEM; goto done; }
    if (full) { memcpy(all, q->prefix, (size_t)s * sizeof *all); at = (size_t)s; }
    for (int i = local_from; i < n_docs; i++) {
        int *ids, n;
        if (tiers_doc_tokens(q, &docs[i], &ids, &n, err, errlen)) goto done;
        t0s[i] = (int)at;
        memcpy(all + at, ids, (size_t)n * sizeof *ids);
        at += (size_t)n;
        free(ids);
    }
    memcpy(all + at, qids, (size_t)n_q * sizeof *qids);
    if ((hrc = be_step(be, slot, all, (int)n_all, logits, err, errlen))) { rc = run_status(hrc); goto done; }
    r->n_computed += (int)n_all;
    if (!full) {
        uint8_t chain[32];
        chain_start(q, chain);
        for (int i = 0; i < n_docs; i++) {
            chain_next(chain, &docs[i]);
            if (i < local_from || docs[i].n_tokens <= 0) continue;
            hrc = slot >= 0 ? be->keep_own_in(be->ctx, slot, t0s[i], docs[i].n_tokens, chain, err, errlen)
                            : be->keep_own(be->ctx, t0s[i], docs[i].n_tokens, chain, err, errlen);
            if (hrc < 0) { rc = run_status(hrc); goto done; }
        }
    }
    rc = 0;
done:
    free(all);
    free(t0s);
    return rc;
}

/* ---- the run ---- */

void lz_query_run_opts_default(const lz_query_session *q, lz_query_run_opts *o)
{
    *o = (lz_query_run_opts){.max_new_tokens = q->o.max_new_tokens, .temperature = q->o.temperature,
                             .top_p = q->o.top_p, .seed = q->o.seed};
}

/* Holds a host-tier entry for the run's lifetime (released by lz_query_run_free). */
static void run_hold(lz_query_run *run, const uint8_t *key, size_t klen, size_t bytes)
{
    if (!lz_doc_cache_hold(run->q->cache, key, klen)) return;
    memcpy(run->held[run->n_held], key, klen);
    run->held_len[run->n_held++] = (uint8_t)klen;
    run->bytes += bytes;
}

/* A failure after the backend may have been handed memory: it settles before that memory goes. */
static void run_settle(lz_query_run *run)
{
    const lz_query_backend *b = run->q->o.backend;
    if (b && b->settle && !run->settled) b->settle(b->ctx);
    run->settled = 1;
}

void lz_query_run_free(lz_query_run *run)
{
    if (!run) return;
    lz_query_session *q = run->q;
    if (!run->done && !run->failed) run_settle(run); /* stopped mid-answer: copies may be in flight */
    if (run->slot >= 0) run->be->release(run->be->ctx, run->slot); /* its sequence there ends */
    for (int i = 0; i < run->n_held; i++) lz_doc_cache_release(q->cache, run->held[i], run->held_len[i]);
    for (int i = 0; i < run->n_owned; i++) session_entry_free(q, run->owned[i]);
    if (run->sampler == &run->own) lz_sampler_free(&run->own);
    lz_query_result_free(&run->r);
    free(run->logits);
    free(run->qids);
    free(run->segs);
    free(run->owned);
    free(run->held);
    free(run->held_len);
    free(run->eog);
    free(run);
}

/* KV bytes of one token of the model's local cache (fp32, K and V). */
static size_t token_kv_bytes(const lz_llama_config *c) { return 2 * sizeof(float) * (size_t)c->n_layers * c->n_kv_heads * c->head_dim; }

int64_t lz_query_run_estimate(const lz_query_session *q, const char *question, const lz_query_doc *docs, int n_docs,
                              int max_new_tokens)
{
    const lz_llama_config *c = &q->m->cfg;
    int *ids, n_q;
    if (lz_prompt_question_tokens(q->m->tok, question ? question : "", &ids, &n_q)) return -1;
    free(ids);
    int64_t doc_tokens = 0;
    for (int i = 0; i < n_docs; i++) doc_tokens += docs[i].n_tokens;
    const int elem = q->kv_elem; /* the host tier's element */
    const int64_t per_doc_token = (int64_t)token_kv_bytes(c) / 4 * elem;
    int64_t local = (int64_t)n_q + max_new_tokens;                    /* question and answer */
    if (q->o.mode == LZ_MODE_PREFIX || q->o.mode == LZ_MODE_FULL) local += doc_tokens + q->n_prefix;
    if (q->o.backend && !host_seqs(q->o.backend)) local = 1;          /* its own tokens live there */
    return local * (int64_t)token_kv_bytes(c) + doc_tokens * per_doc_token + (int64_t)c->vocab * 4;
}

/* The first token's logits are there: the answer's TTFT, the logits kept when asked. */
static void run_first_token(lz_query_run *run)
{
    lz_query_session *q = run->q;
    run->r.t_ttft = lz_now_s() - run->t0;
    run->t_first = lz_now_s();
    run->ready = 1;
    if (q->o.keep_logits && !run->r.logits) {
        const size_t V = (size_t)q->m->cfg.vocab;
        run->r.logits = malloc(V * sizeof(float));
        if (run->r.logits) memcpy(run->r.logits, run->logits, V * sizeof(float));
    }
}

int lz_query_run_begin(lz_query_session *q, const char *question, const lz_query_doc *docs, int n_docs,
                       const lz_query_run_opts *ro, lz_query_run **out, char *err, size_t errlen)
{
    const lz_llama_config *c = &q->m->cfg;
    const int s = q->n_prefix, mode = q->o.mode;
    *out = NULL;
    if (!question || !*question) { snprintf(err, errlen, "the question is empty"); return -1; }
    lz_query_run *run = calloc(1, sizeof *run);
    if (!run) { snprintf(err, errlen, "out of memory"); return LZ_QUERY_ENOMEM; }
    run->q = q;
    run->pending = -1;
    run->next_greedy = -1;
    run->slot = -1;
    lz_query_result *r = &run->r;
    run->max_new = ro ? ro->max_new_tokens : q->o.max_new_tokens;
    if (run->max_new < 0) run->max_new = 0;
    run->sampler = &q->sampler;
    if (ro && lz_sampler_init(&run->own, c->vocab, ro->temperature, ro->top_p, ro->seed) == 0)
        run->sampler = &run->own;
    else if (ro) { free(run); snprintf(err, errlen, "out of memory"); return LZ_QUERY_ENOMEM; }
    if (lz_prompt_question_tokens(q->m->tok, question, &run->qids, &run->n_q)) {
        snprintf(err, errlen, "out of memory");
        lz_query_run_free(run);
        return LZ_QUERY_ENOMEM;
    }
    if (ro && ro->ignore_eos) { /* the ids sampling must skip */
        const int V = c->vocab;
        for (int i = 0; i < V; i++) run->n_eog += lz_tokenizer_is_eog(q->m->tok, i);
        run->eog = malloc((size_t)(run->n_eog > 0 ? run->n_eog : 1) * sizeof *run->eog);
        if (!run->eog) { snprintf(err, errlen, "out of memory"); lz_query_run_free(run); return LZ_QUERY_ENOMEM; }
        run->n_eog = 0;
        for (int i = 0; i < V; i++)
            if (lz_tokenizer_is_eog(q->m->tok, i)) run->eog[run->n_eog++] = i;
    }
    const int *qids = run->qids, n_q = run->n_q;
    int64_t total = s + (int64_t)n_q + run->max_new;
    for (int i = 0; i < n_docs; i++) total += docs[i].n_tokens;
    if (q->o.max_positions > 0 && total > q->o.max_positions) {
        snprintf(err, errlen, "the prompt needs %lld positions (prefix %d, %d documents, question %d, answer %d) "
                 "but the model's context is %d", (long long)total, s, n_docs, n_q, run->max_new, q->o.max_positions);
        run->failed = 1;
        lz_query_run_free(run);
        return -1;
    }
    if (total > QUERY_MAX_POSITIONS) {
        snprintf(err, errlen, "the prompt would need %lld positions (question %d tokens, %d documents); too long",
                 (long long)total, n_q, n_docs);
        run->failed = 1;
        lz_query_run_free(run);
        return -1;
    }
    r->n_prompt = (int)(total - run->max_new);
    const int mat = mode == LZ_MODE_BLOCK && q->o.backend && q->o.backend->begin_block; /* see lz_query_backend */
    const int slotted = backend_slots(q->o.backend) > 1; /* each answer a sequence of its own there */
    const int gpu_prefix = mode == LZ_MODE_PREFIX && q->o.backend && q->o.backend->keep_own && q->o.backend->resident &&
                           (!slotted || q->o.backend->keep_own_in);
    run->t0 = lz_now_s();
    int rc = -1, hrc; /* rc: the status returned (-1 until done); hrc: a hook's or a helper's */
    lz_doc_cache_begin(q->cache);
    run->segs = calloc((size_t)n_docs + 1, sizeof *run->segs);
    run->owned = calloc((size_t)n_docs + 1, sizeof *run->owned);
    run->held = calloc((size_t)n_docs + 1, sizeof *run->held);
    run->held_len = calloc((size_t)n_docs + 1, 1);
    run->logits = malloc((size_t)c->vocab * sizeof(float));
    uint8_t(*digest)[32] = calloc((size_t)n_docs + 1, 32); /* content keys of the segments (backend) */
    const uint8_t **digests = calloc((size_t)n_docs + 1, sizeof *digests);
    kv_entry **pre = calloc((size_t)n_docs + 1, sizeof *pre); /* decoded ahead (preload_misses) */
    uint8_t *held = calloc((size_t)n_docs + 1, 1);            /* resident on the backend: never loaded */
    lz_kv_segment *segs = run->segs;
    int n_segs = 0;
    if (!segs || !run->owned || !run->held || !run->held_len || !run->logits || !digest || !digests || !pre || !held) {
        snprintf(err, errlen, "out of memory");
        rc = LZ_QUERY_ENOMEM;
        goto done;
    }
    run->bytes = (size_t)c->vocab * sizeof(float);

    int64_t p = s;      /* offset of the next document */
    int local_from = 0; /* first document computed into the local cache (PREFIX, FULL) */
    if (mode == LZ_MODE_FULL) {
        local_from = 0;
    } else {
        memcpy(digest[n_segs], q->prefix_digest, 32);
        segs[n_segs++] = kv_entry_segment(&q->prefix_kv, 0);
        if (mode == LZ_MODE_LAZY || mode == LZ_MODE_BLOCK) {
            /* block on a backend that rotates its own copies: the host tier keyed as lazy's */
            const int hmode = mat ? LZ_MODE_LAZY : mode;
            /* the documents an accelerator still holds (and the CPU cache does not) are neither
             * loaded nor decoded: its cache is the larger (GPU memory), the CPU's the smaller */
            const lz_query_backend *rb = q->o.backend && q->o.backend->resident ? q->o.backend : NULL;
            int64_t pp = p;
            for (int i = 0; i < n_docs; pp += docs[i].n_tokens, i++) {
                uint8_t key[LZ_META_KEY_LEN + 8];
                size_t klen = tiers_cache_key(mode, &docs[i], pp, key);
                lz_sha256(key, klen, digest[1 + i]); /* block: the copy at this offset */
                klen = tiers_cache_key(hmode, &docs[i], pp, key);
                held[i] = rb && !lz_doc_cache_contains(q->cache, key, klen) && rb->resident(rb->ctx, digest[1 + i]);
            }
            const lz_query_backend *eb = q->o.backend;
            if (mode == LZ_MODE_LAZY && (q->o.cold == LZ_COLD_RECOMPUTE || q->o.cold == LZ_COLD_AUTO) && eb &&
                eb->encode && eb->resident &&
                (hrc = tiers_recompute_cold(q, eb, docs, n_docs, p, held, &segs[0], digest, r, err, errlen))) {
                rc = run_status(hrc);
                goto done;
            }
            tiers_load_misses(q, docs, n_docs, hmode, p, held, pre);
            for (int i = 0; i < n_docs; i++) {
                if (held[i]) { /* a segment without data: the backend reads only its placement */
                    if (held[i] == 2) r->misses++; /* recomputed just now */
                    else r->hits++;
                    segs[n_segs++] = (lz_kv_segment){.n = docs[i].n_tokens, .stride = docs[i].n_tokens > 0 ? docs[i].n_tokens : 1,
                                                     .rot = mode == LZ_MODE_LAZY || mat ? p - s : 0};
                    p += docs[i].n_tokens;
                    continue;
                }
                uint8_t key[LZ_META_KEY_LEN + 8];
                size_t klen = tiers_cache_key(hmode, &docs[i], p, key);
                int own, fst;
                kv_entry *e = tiers_fetch(q, key, klen, &docs[i], mode == LZ_MODE_BLOCK && !mat ? p - s : 0, pre[i], &own,
                                          &fst, r, err, errlen);
                pre[i] = NULL; /* fetch took it */
                if (!e) {
                    rc = fst; /* LZ_QUERY_ENOMEM: memory other requests may give back */
                    goto done;
                }
                if (own) {
                    run->owned[run->n_owned++] = e;
                    run->bytes += e->bytes;
                } else {
                    run_hold(run, key, klen, e->bytes);
                }
                segs[n_segs++] = kv_entry_segment(e, mode == LZ_MODE_LAZY || mat ? p - s : 0);
                p += docs[i].n_tokens;
            }
            local_from = n_docs;
        } else { /* PREFIX: the longest chain of documents computed after exactly these predecessors */
            uint8_t chain[32];
            chain_start(q, chain);
            for (local_from = 0; local_from < n_docs; local_from++) {
                chain_next(chain, &docs[local_from]);
                if (gpu_prefix) { /* the chains live in the backend's memory, as vLLM's */
                    if (!q->o.backend->resident(q->o.backend->ctx, chain)) { r->misses++; break; }
                    r->hits++;
                    memcpy(digest[n_segs], chain, 32);
                    segs[n_segs++] = (lz_kv_segment){.n = docs[local_from].n_tokens,
                                                     .stride = docs[local_from].n_tokens > 0 ? docs[local_from].n_tokens : 1};
                    p += docs[local_from].n_tokens;
                    continue;
                }
                kv_entry *e = lz_doc_cache_get(q->cache, chain, 32);
                if (!e) { r->misses++; break; }
                r->hits++;
                run_hold(run, chain, 32, e->bytes);
                segs[n_segs++] = kv_entry_segment(e, 0);
                p += docs[local_from].n_tokens;
            }
        }
    }
    run->n_segs = n_segs;
    r->t_load = lz_now_s() - run->t0;

    /* lazy, block, full, prefix (with keep_own): the prompt's rest, the question and the answer
     * on the accelerator when there is one; the rest on the CPU engine's table */
    const lz_query_backend *be =
        q->o.backend && (mode != LZ_MODE_PREFIX || gpu_prefix || host_seqs(q->o.backend)) ? q->o.backend : q->cpu_be;
    if (!be) { snprintf(err, errlen, "no engine for %s mode's forward passes", lz_query_mode_name(mode)); goto done; }
    run->be = be;
    const int host = host_seqs(be); /* its own rows in host memory, the CPU's forward calls */
    const int64_t pos0 = mode == LZ_MODE_FULL ? 0 : p;
    for (int i = 0; i < n_segs; i++) digests[i] = digest[i];
    if (backend_slots(be) != 1) { /* a sequence of its own there: a free slot, its own tokens within it */
        int64_t own = (int64_t)n_q + run->max_new + (mode == LZ_MODE_FULL ? s : 0);
        for (int i = mode == LZ_MODE_FULL || mode == LZ_MODE_PREFIX ? local_from : n_docs; i < n_docs; i++)
            own += docs[i].n_tokens;
        if (be->seq_tokens > 0 && own > be->seq_tokens) {
            snprintf(err, errlen, "the answer needs %lld own tokens on the GPU (question %d, answer %d%s) but a sequence "
                     "there holds %d", (long long)own, n_q, run->max_new, mode == LZ_MODE_FULL || mode == LZ_MODE_PREFIX ?
                     ", and the documents computed in the prompt" : "", be->seq_tokens);
            goto done;
        }
        if ((run->slot = be->idle_slot(be->ctx)) < 0 && host) {
            snprintf(err, errlen, "out of memory");
            rc = LZ_QUERY_ENOMEM;
            goto done;
        }
        if (run->slot < 0) {
            snprintf(err, errlen, "every one of the backend's %d sequence slots is in use", be->n_slots);
            goto done;
        }
    }
    /* the own rows: documents still to compute (PREFIX/FULL), question, answer */
    if (host && (hrc = be->reserve(be->ctx, run->slot, total - pos0, err, errlen))) {
        rc = run_status(hrc);
        goto done;
    }
    if ((hrc = run->slot >= 0 ? be->begin_in(be->ctx, run->slot, mat, segs, digests, n_segs, pos0, err, errlen)
                              : (mat ? be->begin_block : be->begin)(be->ctx, segs, digests, n_segs, pos0, err, errlen))) {
        rc = run_status(hrc);
        goto done;
    }
    run->bytes += (size_t)(host ? total - pos0 : 1) * token_kv_bytes(c); /* a device's own rows: one counted */
    if (!host && (mode == LZ_MODE_FULL || mode == LZ_MODE_PREFIX)) { /* every token after the reused ones, one step */
        if ((hrc = backend_prompt(q, be, run->slot, docs, n_docs, local_from, qids, n_q, run->logits, r, err, errlen))) {
            rc = hrc;
            goto done;
        }
        run_first_token(run);
    }
    /* host sequences: the prefix (FULL) and each document still to compute a forward call of its own
     * (a failure named by what failed, as these calls always were: e2 holds the table's words) */
    char e2[256];
    if (host && mode == LZ_MODE_FULL && be->step_in(be->ctx, run->slot, q->prefix, s, NULL, e2, sizeof e2)) {
        snprintf(err, errlen, "forward pass failed on the prefix");
        goto done;
    }
    if (host && mode == LZ_MODE_FULL) r->n_computed += s;
    uint8_t chain[32];
    if (mode == LZ_MODE_PREFIX) { /* recompute the chain key up to local_from */
        chain_start(q, chain);
        for (int i = 0; i < local_from; i++) chain_next(chain, &docs[i]);
    }
    for (int i = host ? local_from : n_docs; i < n_docs; i++) {
        int *ids, n;
        if (tiers_doc_tokens(q, &docs[i], &ids, &n, err, errlen)) goto done;
        const lz_kv_cache *own = be->own_kv(be->ctx, run->slot); /* its rows, read after the step */
        const int start = own->n;
        int frc = n ? be->step_in(be->ctx, run->slot, ids, n, NULL, e2, sizeof e2) : 0;
        free(ids);
        if (frc) { snprintf(err, errlen, "forward pass failed on document '%s'", docs[i].ext_id); goto done; }
        r->n_computed += n;
        if (mode == LZ_MODE_PREFIX) {
            chain_next(chain, &docs[i]);
            kv_entry *e = slice_cache(q, own, start, n, q->kv16);
            if (e && !lz_doc_cache_put(q->cache, chain, 32, e, e->bytes)) session_entry_free(q, e);
        }
    }
    run->prev = qids[n_q - 1];
    run->plain = lz_prompt_style_of(q->m->tok) == LZ_PROMPT_PLAIN;
    run->cap = 256;
    r->answer = malloc(run->cap);
    r->answer_ids = malloc((size_t)(run->max_new > 0 ? run->max_new : 1) * sizeof(int));
    if (!r->answer || !r->answer_ids) { snprintf(err, errlen, "out of memory"); rc = LZ_QUERY_ENOMEM; goto done; }
    r->answer[0] = 0;
    rc = 0;
done:
    for (int i = 0; pre && i < n_docs; i++) session_entry_free(q, pre[i]); /* left by an error */
    free(pre);
    free(held);
    free(digest);
    free(digests);
    if (rc) {
        run_settle(run); /* before memory goes */
        run->failed = 1;
        lz_query_run_free(run);
        return rc;
    }
    *out = run;
    return 0;
}

/* Marks every run of a failed batched call; returns the call's status (rc: what failed it). */
static int runs_failed(lz_query_run *const *runs, int n, int rc)
{
    for (int i = 0; i < n; i++) {
        run_settle(runs[i]);
        runs[i]->failed = 1;
    }
    return run_status(rc);
}

/* The questions of the backend runs who[0..m) (each in its slot) in one batched pass. 0, -1 or
 * LZ_QUERY_ENOMEM. */
static int backend_prefill(lz_query_run *const *who, int m, char *err, size_t errlen)
{
    const lz_query_backend *be = who[0]->be;
    int *slots = malloc((size_t)m * sizeof *slots), *ns = malloc((size_t)m * sizeof *ns);
    const int **ids = malloc((size_t)m * sizeof *ids);
    float **logits = malloc((size_t)m * sizeof *logits);
    int rc = LZ_QUERY_ENOMEM;
    if (!slots || !ns || !ids || !logits) { snprintf(err, errlen, "out of memory"); goto done; }
    for (int i = 0; i < m; i++) slots[i] = who[i]->slot, ids[i] = who[i]->qids, ns[i] = who[i]->n_q, logits[i] = who[i]->logits;
    if ((rc = be->prefill_many(be->ctx, slots, ids, ns, m, logits, err, errlen))) rc = run_status(rc);
done:
    free(slots);
    free(ns);
    free(ids);
    free(logits);
    return rc;
}

int lz_query_run_prefill(lz_query_session *q, lz_query_run *const *runs, int n, char *err, size_t errlen)
{
    lz_query_run **who = malloc((size_t)(n > 0 ? n : 1) * sizeof *who);
    int m = 0, rc = -1;
    if (!who) { snprintf(err, errlen, "out of memory"); rc = LZ_QUERY_ENOMEM; goto done; }
    for (int i = 0; i < n; i++) {
        lz_query_run *run = runs[i];
        if (run->ready || run->done || run->failed) continue; /* FULL / PREFIX on a backend: prefilled by begin */
        if (run->slot >= 0 && run->be->prefill_many) { /* in one batched pass below */
            who[m++] = run;
            continue;
        }
        if (n != 1 && run->slot < 0) {
            snprintf(err, errlen, "a backend prefills one answer at a time (got %d)", n);
            goto done;
        }
        const int src = be_step(run->be, run->slot, run->qids, run->n_q, run->logits, err, errlen);
        if (src) { rc = src; goto done; }
        run->r.n_computed += run->n_q;
        run_first_token(run);
    }
    if (m) {
        const int brc = backend_prefill(who, m, err, errlen);
        if (brc) { rc = brc; goto done; }
    }
    for (int i = 0; i < m; i++) {
        who[i]->r.n_computed += who[i]->n_q;
        run_first_token(who[i]);
    }
    rc = 0;
done:
    free(who);
    return rc ? runs_failed(runs, n, rc) : 0;
}

int lz_query_run_start(lz_query_session *q, const char *question, const lz_query_doc *docs, int n_docs,
                       const lz_query_run_opts *o, lz_query_run **out, char *err, size_t errlen)
{
    int rc = lz_query_run_begin(q, question, docs, n_docs, o, out, err, errlen);
    if (rc) return rc;
    if ((rc = lz_query_run_prefill(q, out, 1, err, errlen))) {
        lz_query_run_free(*out);
        *out = NULL;
        return rc;
    }
    return 0;
}

int lz_query_run_next(lz_query_run *run, const char **piece, int *len)
{
    *piece = run->piece;
    *len = 0;
    if (run->done || run->failed || !run->ready) return 0;
    lz_query_session *q = run->q;
    lz_query_result *r = &run->r;
    run->ready = 0;
    if (r->n_answer >= run->max_new) { run->done = 1; return 0; }
    int next = run->next_greedy;
    run->next_greedy = -1;
    if (next < 0) {
        for (int i = 0; i < run->n_eog; i++) run->logits[run->eog[i]] = -INFINITY; /* ignore_eos */
        next = lz_sample(run->sampler, run->logits);
    }
    if (lz_tokenizer_is_eog(q->m->tok, next)) { run->done = 1; return 0; }
    int pl = lz_tokenizer_piece(q->m->tok, run->prev, next, run->piece, sizeof run->piece);
    if (pl > (int)sizeof run->piece) pl = (int)sizeof run->piece;
    if (pl < 0) pl = 0;
    /* plain prompts end the answer at its first line break */
    if (run->plain && !run->eog && run->len > 0 && memchr(run->piece, '\n', (size_t)pl)) { run->done = 1; return 0; }
    if (run->len + (size_t)pl + 1 > run->cap) {
        size_t cap = run->cap;
        while (run->len + (size_t)pl + 1 > cap) cap *= 2;
        char *a = realloc(r->answer, cap);
        if (!a) { run->done = 1; return 0; } /* out of memory: the answer ends here */
        r->answer = a;
        run->cap = cap;
    }
    r->answer_ids[r->n_answer++] = next;
    memcpy(r->answer + run->len, run->piece, (size_t)pl);
    run->len += (size_t)pl;
    r->answer[run->len] = 0;
    run->prev = next;
    r->t_decode = lz_now_s() - run->t_first;
    if (r->n_answer == run->max_new) run->done = 1; /* the last one: not stepped */
    else run->pending = next;
    *len = pl;
    return 1;
}

int lz_query_run_done(const lz_query_run *run) { return run->done || run->failed; }

void lz_query_run_stop(lz_query_run *run)
{
    if (run->done || run->failed) return;
    run_settle(run); /* mid-answer on a backend: its copies may still read the documents */
    run->done = 1;
}

/* A decode pass of runs[0..n) (each a slot of its own, or the one sequence: n 1) by the backend's
 * decode_next: a greedy run (temperature 0; ignore_eos with at most LZ_ARGMAX_MAX_BAN ids, the
 * runs' ban lists alike) takes its greedy token from there and moves no logits, the others get
 * their logits. 0 or the hook's status. */
static int step_next(lz_query_run *const *runs, int n, char *err, size_t errlen)
{
    const lz_query_backend *be = runs[0]->be;
    int *slots = malloc((size_t)n * sizeof *slots), *ids = malloc((size_t)n * sizeof *ids);
    int *next = malloc((size_t)n * 2 * sizeof *next), *greedy = malloc((size_t)n * sizeof *greedy);
    float **logits = malloc((size_t)n * sizeof *logits);
    int rc = LZ_QUERY_ENOMEM;
    const int *ban = NULL;
    int n_ban = 0;
    if (!slots || !ids || !next || !greedy || !logits) { snprintf(err, errlen, "out of memory"); goto done; }
    for (int i = 0; i < n; i++) /* the ban list: the first masking run's */
        if (runs[i]->n_eog > 0 && runs[i]->n_eog <= LZ_ARGMAX_MAX_BAN) { ban = runs[i]->eog, n_ban = runs[i]->n_eog; break; }
    for (int i = 0; i < n; i++) {
        const lz_query_run *r = runs[i];
        const int same = !r->n_eog || (r->n_eog == n_ban && !memcmp(r->eog, ban, (size_t)n_ban * sizeof *ban));
        greedy[i] = r->sampler->temperature == 0 && same;
        slots[i] = r->slot, ids[i] = r->pending, logits[i] = greedy[i] ? NULL : r->logits;
    }
    rc = be->decode_next(be->ctx, runs[0]->slot >= 0 ? slots : NULL, ids, n, logits, next, ban, n_ban, err, errlen);
    for (int i = 0; !rc && i < n; i++)
        if (greedy[i]) runs[i]->next_greedy = next[2 * i + (runs[i]->n_eog > 0)];
done:
    free(slots);
    free(ids);
    free(next);
    free(greedy);
    free(logits);
    return rc;
}

int lz_query_run_step(lz_query_session *q, lz_query_run *const *runs, int n, char *err, size_t errlen)
{
    if (n <= 0) return 0;
    for (int i = 0; i < n; i++)
        if (runs[i]->pending < 0 || runs[i]->done || runs[i]->failed) {
            snprintf(err, errlen, "an answer with no token to step (ended, or not sampled)");
            return -1;
        }
    if (runs[0]->be->decode_next && (runs[0]->slot >= 0 || n == 1)) {
        const int brc = step_next(runs, n, err, errlen); /* the greedy ones choose on the backend */
        if (brc) return runs_failed(runs, n, brc);
    } else if (runs[0]->slot >= 0) { /* every run a sequence of its own there: one batched pass */
        const lz_query_backend *be = runs[0]->be;
        int *slots = malloc((size_t)n * sizeof *slots), *ids = malloc((size_t)n * sizeof *ids);
        float **logits = malloc((size_t)n * sizeof *logits);
        int brc = LZ_QUERY_ENOMEM;
        if (!slots || !ids || !logits) snprintf(err, errlen, "out of memory");
        else {
            for (int i = 0; i < n; i++) slots[i] = runs[i]->slot, ids[i] = runs[i]->pending, logits[i] = runs[i]->logits;
            brc = be->decode_many(be->ctx, slots, ids, n, logits, err, errlen);
        }
        free(slots);
        free(ids);
        free(logits);
        if (brc) return runs_failed(runs, n, brc);
    } else {
        lz_query_run *run = runs[0];
        if (n != 1) { snprintf(err, errlen, "a backend steps one answer at a time (got %d)", n); return runs_failed(runs, n, -1); }
        const int src = run->be->step(run->be->ctx, &run->pending, 1, run->logits, err, errlen);
        if (src) return runs_failed(runs, n, src);
    }
    for (int i = 0; i < n; i++) {
        runs[i]->pending = -1;
        runs[i]->ready = 1;
        runs[i]->r.t_decode = lz_now_s() - runs[i]->t_first;
    }
    return 0;
}

const lz_query_result *lz_query_run_result(const lz_query_run *run) { return &run->r; }

size_t lz_query_run_bytes(const lz_query_run *run) { return run->bytes; }

void lz_query_run_finish(lz_query_run *run, lz_query_result *out)
{
    *out = run->r;
    memset(&run->r, 0, sizeof run->r);
    run->done = 1;
    lz_query_run_free(run);
}
