/* engines.c - the engines a server routes to (serve/engines.h): each its own
 * compute engine (lz_engine: the CPU's, or a GPU's made on its device with its
 * slots), query session, store handle and preloaded share of the documents.
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/engines.h"

/* The scheduler's on_start: the engine thread makes its GPU current. */
static void engine_on_start(void *ctx)
{
    char err[256];
    if (lz_engine_use_device(*(const int *)ctx, err, sizeof err)) fprintf(stderr, "lazyserve: %s\n", err);
}

int lz_serve_engines_use(const lz_serve_engines *E, int i, char *err, size_t errlen)
{
    return lz_engine_use_device(E->p[i].dev, err, errlen);
}

void lz_serve_engines_close(lz_serve_engines *E)
{
    for (int i = E->n - 1; E->p && i >= 0; i--) {
        char err[256];
        lz_serve_engines_use(E, i, err, sizeof err);
        lz_query_session_free(E->p[i].q);
        lz_engine_free(E->p[i].engine);
        if (E->p[i].store != E->base) lz_store_close(E->p[i].store);
    }
    lz_store_close(E->route_store);
    lz_serve_homes_free(E->homes);
    free(E->p);
    free(E->e);
    memset(E, 0, sizeof *E);
}

int lz_serve_engine_keeps(const uint8_t *payload_key, void *ctx)
{
    const lz_serve_engine_share *s = (const lz_serve_engine_share *)ctx;
    char key[LZ_SERVE_HOME_KEY];
    lz_serve_home_key_payload(payload_key, key);
    return lz_serve_homes_get(s->homes, key) == s->engine;
}

int lz_serve_engines_open(lz_serve_engines *E, lz_llama *m, lz_store *base, const lz_query_opts *qo,
                          const lz_serve_sched_opts *so, const lz_serve_engines_opts *eo, char *err, size_t errlen)
{
    memset(E, 0, sizeof *E);
    E->base = base;
    if (eo->n < 1 || eo->n > LZ_SERVE_MAX_ENGINES) {
        snprintf(err, errlen, "%d engines: expected 1 to %d", eo->n, LZ_SERVE_MAX_ENGINES);
        return -1;
    }
    if (eo->devs && !lz_engine_gpu_built()) {
        snprintf(err, errlen, "GPU engines need the CUDA build (make cuda)");
        return -1;
    }
    E->p = (lz_serve_engine_parts *)calloc((size_t)eo->n, sizeof *E->p);
    E->e = (lz_serve_engine *)calloc((size_t)eo->n, sizeof *E->e);
    if (!E->p || !E->e) { free(E->p); free(E->e); E->p = NULL; E->e = NULL; snprintf(err, errlen, "out of memory"); return -1; }
    E->n = eo->n;
    char e2[1024];
    const char *prog = eo->prog ? eo->prog : "lazyserve";
    /* several engines preloading: the hot set dealt to them first, each preloading its share */
    if (eo->n > 1 && eo->preload &&
        (!(E->homes = lz_serve_homes_new()) || lz_serve_homes_plan(E->homes, base, eo->n, eo->preload == 2, e2, sizeof e2))) {
        snprintf(err, errlen, "planning the documents' homes: %.900s", E->homes ? e2 : "out of memory");
        goto fail;
    }
    for (int i = 0; i < eo->n; i++) {
        lz_serve_engine_parts *p = &E->p[i];
        char who[32] = ""; /* how messages name the engine: only when there are several */
        if (eo->n > 1) snprintf(who, sizeof who, "engine %d: ", i);
        p->dev = eo->devs ? eo->devs[i] : -1;
        p->store = base;
        if (i > 0 && lz_store_open_shared(base, &p->store, e2, sizeof e2)) {
            snprintf(err, errlen, "engine %d: %.900s", i, e2);
            goto fail;
        }
        lz_query_opts o = *qo;
        lz_serve_sched_opts s = *so;
        const int full = qo->mode == LZ_MODE_FULL || qo->mode == LZ_MODE_PREFIX;
        const lz_engine_opts engo = {.gpu = p->dev >= 0, .device = p->dev, .own_tokens = lz_query_engine_rows(qo->mode),
                                     .gpu_cache = eo->gpu_cache, .cache_policy = qo->cache_policy,
                                     .batch = qo->batch};
        if (lz_engine_open(m, &engo, &p->engine, e2, sizeof e2)) {
            if (p->dev >= 0) snprintf(err, errlen, "engine %d (GPU %d): %.900s", i, p->dev, e2);
            else snprintf(err, errlen, "engine %d: %.900s", i, e2);
            goto fail;
        }
        o.backend = lz_engine_query(p->engine); /* its question table (a GPU's slots made below, in place) */
        if (p->dev >= 0) {
            /* the batch's sequences: as many as asked while they fit its memory (a batch of one
             * keeps the single sequence of max_tokens rows, lazyquery's) */
            const int seq = eo->gpu_seq_tokens ? eo->gpu_seq_tokens : full ? engo.own_tokens : 2048;
            for (int n = s.max_running; n > 1; n /= 2) {
                if (!lz_engine_set_slots(p->engine, n, seq, e2, sizeof e2)) break;
                fprintf(stderr, "%s: %s%s\n", prog, who, e2);
            }
            if (o.backend->n_slots < s.max_running) s.max_running = o.backend->n_slots;
            o.cold = eo->cold < 0 ? LZ_COLD_AUTO : eo->cold;
            s.tier_stats = lz_engine_policy_stats;
            s.decode_stats = lz_engine_decode_stats;
            s.tier_ctx = p->engine;
            s.on_start = engine_on_start;
            s.start_ctx = &p->dev;
        }
        if (lz_query_session_new(m, p->store, &o, &p->q, e2, sizeof e2)) {
            snprintf(err, errlen, "%s%.900s", who, e2);
            goto fail;
        }
        if (eo->preload) {
            lz_query_preload_result pr;
            lz_serve_engine_share share = {E->homes, i};
            if (lz_query_preload_only(p->q, eo->preload == 2, E->homes ? lz_serve_engine_keeps : NULL, &share, &pr, e2,
                                      sizeof e2))
                fprintf(stderr, "%s: warning: %spreload: %s\n", prog, who, e2);
            if (!eo->quiet && pr.gpu + pr.host > 0)
                fprintf(stderr, "%s: %spreloaded %d documents (%.2f GB of KV) into the GPU tier and %d (%.2f GB; %d of "
                        "its share) into the host tier in %.2f s\n", prog, who, pr.gpu, pr.gpu_bytes / 1e9, pr.host,
                        pr.host_bytes / 1e9, E->homes ? pr.host_share : pr.host, pr.seconds);
        }
        E->e[i] = (lz_serve_engine){.q = p->q, .store = p->store, .so = s};
    }
    if (eo->n > 1 && lz_store_open_shared(base, &E->route_store, e2, sizeof e2)) {
        snprintf(err, errlen, "the router's store handle: %.900s", e2);
        goto fail;
    }
    if (eo->n > 1 && !eo->devs) { /* CPU engines share the cores: their schedulers take this thread's count */
        const int all = eo->threads > 0 ? eo->threads : omp_get_num_procs();
        omp_set_num_threads(all / eo->n > 1 ? all / eo->n : 1);
    }
    return 0;
fail:
    lz_serve_engines_close(E);
    return -1;
}

