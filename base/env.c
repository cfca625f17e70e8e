/* env.c - see env.h: every LAZY_* switch parsed here, once. */
#include "base/env.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lz_env env_now;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

/* the first error wins */
static int bad(lz_env *e, const char *name, const char *v, const char *what)
{
    if (!e->error[0]) snprintf(e->error, sizeof e->error, "%s='%.200s': expected %s", name, v, what);
    return -1;
}

/* the whole of v as an integer in [lo, hi] */
static int whole_int(const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

int lz_env_parse(lz_env *e, const char *(*get)(const char *name, void *ctx), void *ctx)
{
    memset(e, 0, sizeof *e);
    e->ingest_gpu_pass = 2048;
    e->ingest_gpu_mass = 1;
    e->ingest_planes = 1;
    e->gpu_decode_group = 2;
    int rc = 0;
    const char *v;
    long x;
    if ((v = get("LAZY_MODEL", ctx)) && *v) {
        if (strlen(v) >= sizeof e->model) rc = bad(e, "LAZY_MODEL", v, "a path shorter than 4096 bytes");
        else snprintf(e->model, sizeof e->model, "%s", v);
    }
    v = get("LAZY_F32_WEIGHTS", ctx);
    e->f32_weights = v && *v && strcmp(v, "0") != 0;
    if ((v = get("LAZY_GPU_DECODE", ctx)) && *v) {
        if (!strcmp(v, "prefill")) e->gpu_decode_prefill = 1;
        else if (whole_int(v, 0, 256, &x)) rc = bad(e, "LAZY_GPU_DECODE", v, "prefill or split parts 0..256");
        else e->gpu_decode_split = (int)x;
    }
    if ((v = get("LAZY_GPU_DECODE_GROUP", ctx)) && *v) {
        if (!strcmp(v, "auto")) e->gpu_decode_group = 2;
        else if (whole_int(v, 0, 1, &x)) rc = bad(e, "LAZY_GPU_DECODE_GROUP", v, "0, 1 or auto");
        else e->gpu_decode_group = (int)x;
    }
    if ((v = get("LAZY_GPU_GEMV", ctx)) && *v) {
        char a[32], b[32];
        const char *comma = strchr(v, ',');
        long y;
        if (!comma || comma - v >= (long)sizeof a || strlen(comma + 1) >= sizeof b) {
            rc = bad(e, "LAZY_GPU_GEMV", v, "blocks_per_sm,silu_blocks_per_sm (0..1024 each)");
        } else {
            memcpy(a, v, (size_t)(comma - v));
            a[comma - v] = 0;
            snprintf(b, sizeof b, "%s", comma + 1);
            if (whole_int(a, 0, 1024, &x) || whole_int(b, 0, 1024, &y))
                rc = bad(e, "LAZY_GPU_GEMV", v, "blocks_per_sm,silu_blocks_per_sm (0..1024 each)");
            else e->gpu_gemv_bps = (int)x, e->gpu_gemv_silu_bps = (int)y;
        }
    }
    if ((v = get("LAZY_INGEST_GPU_PASS", ctx)) && *v) {
        if (whole_int(v, 0, 1 << 20, &x))
            rc = bad(e, "LAZY_INGEST_GPU_PASS", v, "tokens a pass, 0 (one document a pass) to 1048576");
        else e->ingest_gpu_pass = (int)x;
    }
    if ((v = get("LAZY_INGEST_GPU_MASS", ctx)) && *v) {
        if (whole_int(v, 0, 1, &x)) rc = bad(e, "LAZY_INGEST_GPU_MASS", v, "0 (masses on the CPU) or 1");
        else e->ingest_gpu_mass = (int)x;
    }
    if ((v = get("LAZY_INGEST_PLANES", ctx)) && *v) {
        if (whole_int(v, 0, 1, &x)) rc = bad(e, "LAZY_INGEST_PLANES", v, "0 (widened on the host) or 1");
        else e->ingest_planes = (int)x;
    }
    if ((v = get("LAZY_INGEST_REF_PASSES", ctx)) && *v) {
        if (whole_int(v, 0, 1 << 20, &x)) rc = bad(e, "LAZY_INGEST_REF_PASSES", v, "tokens a pass, 0 (off) to 1048576");
        else e->ingest_ref_passes = (int)x;
    }
    static const char *const retired[][2] = {
        {"LAZY_INGEST_SERIAL", "lazyingest --serial"},
        {"LAZY_INGEST_SYNC_COMMIT", "lazyingest --sync-commit"},
        {"LAZY_INGEST_REF_FAIL_PASS", "a test build's --test-fail-pass (build/tests/lazyingest-hooks)"},
    };
    for (size_t i = 0; i < sizeof retired / sizeof retired[0] && !e->retired[0]; i++)
        if (get(retired[i][0], ctx))
            snprintf(e->retired, sizeof e->retired, "%s is no longer read; use %s", retired[i][0], retired[i][1]);
    return rc;
}

static const char *from_environ(const char *name, void *ctx)
{
    (void)ctx;
    return getenv(name);
}

static void load(void)
{
    lz_env t;
    lz_env_parse(&t, from_environ, NULL);
    env_now = t;
}

const lz_env *lz_env_get(void)
{
    pthread_once(&env_once, load);
    return &env_now;
}

void lz_env_reload(void)
{
    pthread_once(&env_once, load);
    load();
}
