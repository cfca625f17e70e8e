/* engines.h - the engines a server routes to (serve/router.h), made from one
 * model and one store: N CPU engines (lazyserve --engines N), or one GPU
 * engine per listed device (--gpus LIST; a device may repeat: "0,0" is two
 * engines on one GPU). Each engine has its own query session (its host tier),
 * its own store handle (engine 0 the caller's, the others lz_store_open_shared:
 * a handle serves one thread), and on the GPU its own GPU engine made on its
 * device (its weights, its GPU tier of gpu_cache bytes, its slots) and a
 * scheduler hook that makes that device current on the engine thread (CUDA's
 * current device is per host thread). The router gets a handle of its own.
 * CPU engines share the threads: each takes threads / N (at least 1).
 * Every engine is an lz_engine (engine/engine.h): GPU engines exist in the
 * programs of 'make cuda'. What it leaves out: routing (router.c), HTTP. */
#ifndef LZ_SERVE_ENGINES_H
#define LZ_SERVE_ENGINES_H

#include "engine/engine.h"
#include "query/session.h"
#include "serve/router.h"
#include "store/store.h"

/* One engine's parts (owned by lz_serve_engines). */
typedef struct {
    int dev;                 /* its GPU (-1: a CPU engine) */
    lz_store *store;         /* its handle (engine 0: the caller's, not owned) */
    lz_query_session *q;
    lz_engine *engine;       /* its compute engine (the CPU's, or its GPU's) */
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

/* The preload's filter of engine `engine` (lz_query_preload_only's keep, ctx an
 * lz_serve_engine_share): the documents planned to be its own. */
typedef struct {
    lz_serve_homes *homes;
    int engine;
} lz_serve_engine_share;
int lz_serve_engine_keeps(const uint8_t *payload_key, void *ctx);

/* Makes the device of engine i current on this thread (a no-op on the CPU). */
int lz_serve_engines_use(const lz_serve_engines *E, int i, char *err, size_t errlen);

/* Opens eo->n engines of model m over store base (borrowed; both outlive E) with session
 * options qo (each engine's copy; on the GPU its backend set) and scheduler options so (each
 * engine's copy: max_running cut to its slots, on_start and tier_stats set on the GPU).
 * 0, or -1 with a message naming the engine (what was made is closed). */
int lz_serve_engines_open(lz_serve_engines *E, lz_llama *m, lz_store *base, const lz_query_opts *qo,
                          const lz_serve_sched_opts *so, const lz_serve_engines_opts *eo, char *err, size_t errlen);
void lz_serve_engines_close(lz_serve_engines *E);

#endif /* LZ_SERVE_ENGINES_H */
