/* engines.h - the engines a server routes to (serve/router.h), made from one
 * model and one store: N CPU engines (lazyserve --engines N), or one GPU
 * engine per listed device (--gpus LIST; a device may repeat: "0,0" is two
 * engines on one GPU). Each engine has its own query session (its host tier),
 * its own store handle (engine 0 the caller's, the others lz_store_open_shared:
 * a handle serves one thread), and on the GPU its own lz_llama_gpu made on its
 * device (its weights, its GPU tier of gpu_cache bytes, its slots) and a
 * scheduler hook that makes that device current on the engine thread (CUDA's
 * current device is per host thread). The router gets a handle of its own.
 * CPU engines share the threads: each takes threads / N (at least 1).
 * Header-only, as query/gpu_backend.h: the GPU part is compiled in the
 * programs built with LZ_CUDA (lazyserve, bench_serve), the CPU build sees
 * none of it. What it leaves out: routing (router.c), HTTP. */
#ifndef LZ_SERVE_ENGINES_H
#define LZ_SERVE_ENGINES_H

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "query/session.h"
#include "serve/router.h"
#include "store/store.h"
#ifdef LZ_CUDA
#include "query/gpu_backend.h"
#endif

/* One engine's parts (owned by lz_serve_engines). */
typedef struct {
    int dev;                 /* its GPU (-1: a CPU engine) */
    lz_store *store;         /* its handle (engine 0: the caller's, not owned) */
    lz_query_session *q;
#ifdef LZ_CUDA
    lz_llama_gpu *gpu;
    lz_query_backend backend; /* the session points at it: the array is never moved */
#endif
} lz_serve_engine_parts;

typedef struct {
    int n;
    lz_serve_engine_parts *p;  /* (n) */
    lz_serve_engine *e;        /* (n) what lz_serve_router_new takes */
    lz_store *route_store;     /* the router's handle (n > 1; NULL with one engine) */
    lz_store *base;
    lz_serve_homes *homes;     /* n > 1 with a preload: the documents' homes planned before it
                                  (lz_serve_homes_plan), each engine preloading its own; give them
                                  to the router (lz_serve_router_opts.homes); NULL otherwise */
} lz_serve_engines;

typedef struct {
    int n;                 /* engines (>= 1) */
    const int *devs;       /* (n) their GPUs, or NULL: CPU engines */
    size_t gpu_cache;      /* each GPU engine's tier budget (0: the engine's default) */
    int gpu_seq_tokens;    /* own tokens of a slot (0: 2048 in lazy and block, 16384 in full and prefix) */
    int cold;              /* LZ_COLD_* on the GPU, -1: auto */
    int preload;           /* 0 none, 1 hot, 2 all (lz_query_preload); with several engines each
                              preloads the documents planned to be its own (E->homes) */
    int threads;           /* CPU threads in all (0: every core) */
    int quiet;             /* no start-up lines on stderr */
    const char *prog;      /* the messages' program name (NULL: lazyserve) */
} lz_serve_engines_opts;

#ifdef LZ_CUDA
/* The scheduler's on_start: the engine thread makes its GPU current. */
static inline void lz_serve_engine_on_start(void *ctx)
{
    char err[256];
    if (lz_llama_gpu_use_device(*(const int *)ctx, err, sizeof err)) fprintf(stderr, "lazyserve: %s\n", err);
}
#endif

/* Makes the device of engine i current on this thread (a no-op on the CPU). */
static inline int lz_serve_engines_use(const lz_serve_engines *E, int i, char *err, size_t errlen)
{
#ifdef LZ_CUDA
    if (E->p[i].dev >= 0) return lz_llama_gpu_use_device(E->p[i].dev, err, errlen);
#endif
    (void)E; (void)i; (void)err; (void)errlen;
    return 0;
}

static inline void lz_serve_engines_close(lz_serve_engines *E)
{
    for (int i = E->n - 1; E->p && i >= 0; i--) {
        char err[256];
        lz_serve_engines_use(E, i, err, sizeof err);
        lz_query_session_free(E->p[i].q);
#ifdef LZ_CUDA
        lz_llama_gpu_free(E->p[i].gpu);
#endif
        if (E->p[i].store != E->base) lz_store_close(E->p[i].store);
    }
    lz_store_close(E->route_store);
    lz_serve_homes_free(E->homes);
    free(E->p);
    free(E->e);
    memset(E, 0, sizeof *E);
}

/* Opens eo->n engines of model m over store base (borrowed; both outlive E) with session
 * options qo (each engine's copy; on the GPU its backend set) and scheduler options so (each
 * engine's copy: max_running cut to its slots, on_start and tier_stats set on the GPU).
 * 0, or -1 with a message naming the engine (what was made is closed). */
/* The preload's filter of engine `engine`: the documents planned to be its own. */
typedef struct {
    lz_serve_homes *homes;
    int engine;
} lz_serve_engine_share;
static inline int lz_serve_engine_keeps(const uint8_t *payload_key, void *ctx)
{
    const lz_serve_engine_share *s = (const lz_serve_engine_share *)ctx;
    char key[LZ_SERVE_HOME_KEY];
    lz_serve_home_key_payload(payload_key, key);
    return lz_serve_homes_get(s->homes, key) == s->engine;
}

static inline int lz_serve_engines_open(lz_serve_engines *E, lz_llama *m, lz_store *base, const lz_query_opts *qo,
                                        const lz_serve_sched_opts *so, const lz_serve_engines_opts *eo, char *err,
                                        size_t errlen)
{
    memset(E, 0, sizeof *E);
    E->base = base;
    if (eo->n < 1 || eo->n > LZ_SERVE_MAX_ENGINES) {
        snprintf(err, errlen, "%d engines: expected 1 to %d", eo->n, LZ_SERVE_MAX_ENGINES);
        return -1;
    }
#ifndef LZ_CUDA
    if (eo->devs) { snprintf(err, errlen, "GPU engines need the CUDA build (make cuda)"); return -1; }
#endif
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
#ifdef LZ_CUDA
        if (p->dev >= 0) {
            const int full = qo->mode == LZ_MODE_FULL || qo->mode == LZ_MODE_PREFIX;
            const int own = full ? 16384 : 4096;
            if (lz_llama_gpu_use_device(p->dev, e2, sizeof e2) || lz_llama_gpu_new(m, own, &p->gpu, e2, sizeof e2)) {
                snprintf(err, errlen, "engine %d (GPU %d): %.900s", i, p->dev, e2);
                goto fail;
            }
            if (eo->gpu_cache) lz_llama_gpu_set_cache(p->gpu, eo->gpu_cache);
            lz_llama_gpu_set_cache_policy(p->gpu, qo->cache_policy);
            /* the batch's sequences: as many as asked while they fit its memory (a batch of one
             * keeps the single sequence of max_tokens rows, lazyquery's) */
            const int seq = eo->gpu_seq_tokens ? eo->gpu_seq_tokens : full ? own : 2048;
            for (int n = s.max_running; n > 1; n /= 2) {
                if (!lz_llama_gpu_set_slots(p->gpu, n, seq, e2, sizeof e2)) break;
                fprintf(stderr, "%s: %s%s\n", prog, who, e2);
            }
            p->backend = lz_query_gpu_backend(p->gpu);
            if (p->backend.n_slots < s.max_running) s.max_running = p->backend.n_slots;
            o.backend = &p->backend;
            o.cold = eo->cold < 0 ? LZ_COLD_AUTO : eo->cold;
            s.tier_stats = lz_query_gpu_tier;
            s.tier_ctx = p->gpu;
            s.on_start = lz_serve_engine_on_start;
            s.start_ctx = &p->dev;
        }
#else
        (void)m;
#endif
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

#endif /* LZ_SERVE_ENGINES_H */
