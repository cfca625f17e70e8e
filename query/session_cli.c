/* session_cli.c - the query session's shared command-line options and the
 * opening of the store and the model (session_cli.h). */
#include "query/session_cli.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/cli.h"

void lz_session_cli_default(lz_session_cli *o, int cuda_build)
{
    memset(o, 0, sizeof *o);
    o->store_dir = "lazystore";
    o->top_k = 5;
    o->preload = 1;
    o->stats = 1;
    o->cold = -1;
    o->cuda_build = cuda_build;
    lz_query_opts_default(&o->qo);
}

int lz_session_cli_parse(lz_session_cli *o, int c, const char *arg)
{
    static const char *const policies[] = {"lfu", "lru", NULL}; /* in lz_cache_policy's order */
    static const char *const colds[] = {"recompute", "load", "auto", NULL};
    static const char *const preloads[] = {"none", "hot", "all", NULL};
    int k;
    long x;
    double d;
    switch (c) {
    case 's': o->store_dir = arg; return 1;
    case 'm': o->model_path = arg; return 1;
    case 'k': return lz_cli_int("--top-k", arg, 1, 1000, &o->top_k) ? LZ_EXIT_USAGE : 1;
    case 'n': return lz_cli_int("--max-tokens", arg, 1, 1 << 16, &o->qo.max_new_tokens) ? LZ_EXIT_USAGE : 1;
    case 't': return lz_cli_int("--threads", arg, 1, 4096, &o->threads) ? LZ_EXIT_USAGE : 1;
    case LZ_SCLI_MODE:
        if ((o->qo.mode = lz_query_mode_parse(arg)) < 0)
            return lz_cli_usage("--mode: expected lazy, block, prefix or full, got '%s'", arg);
        return 1;
    case LZ_SCLI_CACHE: /* the earlier name of --host-cache-bytes */
    case LZ_SCLI_HOST_CACHE:
        return lz_cli_size(c == LZ_SCLI_CACHE ? "--cache-bytes" : "--host-cache-bytes", arg, &o->qo.cache_bytes)
                   ? LZ_EXIT_USAGE : 1;
    case LZ_SCLI_POLICY: return lz_cli_choice("--cache-policy", arg, policies, &o->qo.cache_policy) ? LZ_EXIT_USAGE : 1;
    case LZ_SCLI_GPU_CACHE:
        if (lz_cli_size("--gpu-cache-bytes", arg, &o->gpu_cache)) return LZ_EXIT_USAGE;
        if (!o->gpu_cache) return lz_cli_usage("--gpu-cache-bytes: expected a size above 0, got '%s'", arg);
        return 1;
    case LZ_SCLI_COLD:
        if (lz_cli_choice("--cold", arg, colds, &k)) return LZ_EXIT_USAGE;
        o->cold = k == 2 ? LZ_COLD_AUTO : k ? LZ_COLD_LOAD : LZ_COLD_RECOMPUTE;
        return 1;
    case LZ_SCLI_TEMP:
        if (lz_cli_double("--temp", arg, 0, 100, &d)) return LZ_EXIT_USAGE;
        o->qo.temperature = (float)d;
        return 1;
    case LZ_SCLI_TOP_P:
        if (lz_cli_double("--top-p", arg, 0, 1, &d)) return LZ_EXIT_USAGE;
        if (!(d > 0)) return lz_cli_usage("--top-p: expected a number in (0, 1], got '%s'", arg);
        o->qo.top_p = (float)d;
        return 1;
    case LZ_SCLI_SEED:
        if (lz_cli_long("--seed", arg, 0, 0x7fffffffL, &x)) return LZ_EXIT_USAGE;
        o->qo.seed = (uint64_t)x;
        return 1;
    case LZ_SCLI_NO_PRELOAD: o->preload = 0; return 1;
    case LZ_SCLI_PRELOAD:
        if (lz_cli_choice("--preload", arg, preloads, &k)) return LZ_EXIT_USAGE;
        o->preload = k; /* 0 none, 1 hot, 2 all */
        return 1;
    case LZ_SCLI_CACHE_F32: o->qo.cache_f32 = 1; return 1;
    case LZ_SCLI_GPU:
        if (!o->cuda_build)
            return lz_cli_usage("--gpu: this build has no CUDA support ('make cuda' builds build/cuda/%s)", lz_cli_prog());
        o->gpu = 1;
        return 1;
    case LZ_SCLI_NO_STATS: o->stats = 0; return 1;
    default: return 0;
    }
}

int lz_session_cli_open_store(lz_session_cli *o, lz_store **st)
{
    *st = NULL;
    /* a host budget past the machine's memory is clamped to 90% of it, with a note */
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    const size_t phys = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0, host_max = phys / 10 * 9;
    if (phys && o->qo.cache_bytes > host_max) {
        fprintf(stderr, "%s: note: --host-cache-bytes %.2f GiB is more than this machine's %.2f GiB of memory; "
                "using %.2f GiB\n", lz_cli_prog(), o->qo.cache_bytes / 1073741824.0, phys / 1073741824.0,
                host_max / 1073741824.0);
        o->qo.cache_bytes = host_max;
    }
    /* a store that is not there is refused before anything is opened: nothing is created (a
     * sharded store's root, with its shards.manifest, opens as one store) */
    if (!lz_store_exists(o->store_dir))
        return lz_cli_usage("no store at %s (%s/meta.sqlite not found); build one with lazyingest or give --store",
                            o->store_dir, o->store_dir);
    lz_llama_set_threads(o->threads);
    char err[1024] = "";
    const int open_rc = lz_store_open(o->store_dir, o->stats ? 0 : LZ_STORE_RDONLY, st, err, sizeof err);
    if (open_rc) {
        fprintf(stderr, "%s: %s\n", lz_cli_prog(), err);
        return open_rc == LZ_ENOTFOUND || open_rc == LZ_ESCHEMA ? LZ_EXIT_USAGE : LZ_EXIT_RUNTIME;
    }
    return 0;
}

int lz_session_cli_load_model(lz_session_cli *o, lz_llama **m)
{
    *m = NULL;
    char err[1024] = "";
    static char model_buf[4096];
    if (!o->model_path) {
        if (lz_prompt_default_model(model_buf, sizeof model_buf, err, sizeof err)) return lz_cli_fail("%s", err);
        o->model_path = model_buf;
    }
    if (lz_llama_load(o->model_path, m, err, sizeof err)) {
        fprintf(stderr, "%s: %s\n", lz_cli_prog(), err);
        return LZ_EXIT_RUNTIME;
    }
    o->qo.max_positions = (*m)->cfg.ctx;
    return 0;
}
