/* session_cli.h - the command-line options of a query session that
 * lazyquery and lazyserve share, parsed by one function and described by one
 * --help block: the store and the model, documents to retrieve, the answer
 * mode, the host and GPU caches and their policy, the start-up preload,
 * --gpu and --cold, sampling defaults, threads, access counts; and opening
 * the store and the model as both do. What each tool adds (questions, JSON,
 * HTTP) stays in the tool. */
#ifndef LZ_QUERY_SESSION_CLI_H
#define LZ_QUERY_SESSION_CLI_H

#include <getopt.h>
#include <stddef.h>

#include "base/cli.h"
#include "model/llama.h"
#include "model/prompt.h"
#include "query/session.h"
#include "store/store.h"

typedef struct {
    const char *store_dir;  /* -s, --store (default "lazystore") */
    const char *model_path; /* -m, --model (NULL: $LAZY_MODEL, else the embedded default) */
    int top_k;              /* -k, --top-k: documents BM25 retrieves (default 5) */
    int threads;            /* -t, --threads (0: every core) */
    int preload;            /* --preload: 0 none, 1 hot (default), 2 all */
    int stats;              /* write access counts back (default 1; --no-stats: the store read-only) */
    int gpu;                /* --gpu (CUDA builds only) */
    int cuda_build;         /* set by the program: whether --gpu is there */
    size_t gpu_cache;       /* --gpu-cache-bytes (0: the default) */
    int cold;               /* --cold: LZ_COLD_*, -1 = the default (auto with --gpu) */
    lz_query_opts qo;       /* mode, caches, policy, max tokens, temperature, top-p, seed */
} lz_session_cli;

/* Defaults (lz_query_opts_default for qo); cuda_build: the program has GPU engines (lz_engine_gpu_built). */
void lz_session_cli_default(lz_session_cli *o, int cuda_build);

/* getopt_long codes of the shared long options, and their table entries (the short ones:
 * "s:m:k:n:t:" in the program's short option string). */
enum {
    LZ_SCLI_MODE = 0x1000, LZ_SCLI_CACHE, LZ_SCLI_HOST_CACHE, LZ_SCLI_POLICY, LZ_SCLI_GPU_CACHE, LZ_SCLI_COLD,
    LZ_SCLI_TEMP, LZ_SCLI_TOP_P, LZ_SCLI_SEED, LZ_SCLI_NO_PRELOAD, LZ_SCLI_PRELOAD, LZ_SCLI_CACHE_F32, LZ_SCLI_GPU,
    LZ_SCLI_NO_STATS
};
#define LZ_SESSION_CLI_SHORT "s:m:k:n:t:"
#define LZ_SESSION_CLI_LONGOPTS                                                                                    \
    LZ_CLI_OPT_STORE, LZ_CLI_OPT_MODEL, LZ_OPT_ARG("top-k", 'k'), LZ_CLI_OPT_MAX_TOKENS,                             \
        {"max-new-tokens", required_argument, NULL, 'n'}, LZ_CLI_OPT_THREADS, LZ_OPT_ARG("mode", LZ_SCLI_MODE),      \
        LZ_OPT_ARG("cache-bytes", LZ_SCLI_CACHE), LZ_OPT_ARG("host-cache-bytes", LZ_SCLI_HOST_CACHE),               \
        LZ_OPT_ARG("cache-policy", LZ_SCLI_POLICY), LZ_OPT_ARG("gpu-cache-bytes", LZ_SCLI_GPU_CACHE),                \
        LZ_OPT_ARG("cold", LZ_SCLI_COLD), LZ_OPT_ARG("temp", LZ_SCLI_TEMP), LZ_OPT_ARG("top-p", LZ_SCLI_TOP_P),     \
        LZ_OPT_ARG("seed", LZ_SCLI_SEED), LZ_OPT_FLAG("no-preload", LZ_SCLI_NO_PRELOAD),                           \
        LZ_OPT_ARG("preload", LZ_SCLI_PRELOAD), LZ_OPT_FLAG("cache-f32", LZ_SCLI_CACHE_F32),                       \
        LZ_OPT_FLAG("gpu", LZ_SCLI_GPU), LZ_OPT_FLAG("no-stats", LZ_SCLI_NO_STATS)

/* Handles option c (its value arg): 1 when it is one of these, 0 when not (the program's
 * own), or LZ_EXIT_USAGE after printing what is wrong with the value. */
int lz_session_cli_parse(lz_session_cli *o, int c, const char *arg);

/* The --help lines of these options. */
#define LZ_SESSION_CLI_HELP                                                                                       \
    "  -s, --store DIR        store folder built by lazyingest (default ./lazystore); it must\n"                  \
    "                         exist: it is never created. A sharded store's folder (lazyingest\n"                \
    "                         --shards) opens as one store, every shard needed\n"                                 \
    "  -m, --model PATH       model (default: $" LZ_DEFAULT_MODEL_ENV ", else <repo>/" LZ_DEFAULT_MODEL ");\n"      \
    "                         must be the model the store was built with\n"                                        \
    "  -k, --top-k K          documents to retrieve with BM25 (default 5)\n"                                       \
    "      --mode MODE        lazy (default): one cached copy per document, rotation in the kernel\n"              \
    "                         block: a re-rotated copy per (document, position) (Block-Attention)\n"               \
    "                         prefix: reuse only exact prefixes (vLLM automatic prefix caching)\n"                 \
    "                         full: recompute the whole prompt\n"                                                  \
    "      --host-cache-bytes N  host memory the documents' KV may keep, e.g. 512M, 2G (default 1G;\n"            \
    "                         --cache-bytes is the same option)\n"                                                 \
    "      --cache-policy P   lfu (default): documents admitted and evicted by access frequency\n"                 \
    "                         (TinyLFU, seeded with the store's access counts); lru: least\n"                      \
    "                         recently used out first; for the host and the GPU caches alike\n"                    \
    "      --preload WHAT     at start, fill the host tier with documents' KV: hot (default):\n"                   \
    "                         the most accessed (the store's counts, which also seed the policy's\n"               \
    "                         frequencies); all: those, then every other document while there is\n"               \
    "                         room (a host tier that holds the corpus); none. Its time and size\n"                 \
    "                         are printed (standard error) unless --quiet\n"                                       \
    "      --no-preload       --preload none\n"                                                                    \
    "      --gpu              every mode on the GPU (CUDA builds: 'make cuda' makes\n"                             \
    "                         build/cuda/<tool>), bf16 activations, over the same tiers: lazy\n"                   \
    "                         places documents by the lazy attention kernels; block rotates a copy\n"              \
    "                         per placement on the GPU; prefix keeps the documents it computes in\n"               \
    "                         GPU memory by chain; full recomputes the prompt there. Documents stay\n"             \
    "                         in GPU memory and are not read again while they are there; an fp8\n"                 \
    "                         store's stay fp8 in both tiers (half the bytes), read as they are\n"                 \
    "      --gpu-cache-bytes N  GPU memory documents may keep (default: half of what is free)\n"                   \
    "      --cold WHAT        a cold document (in neither the host nor the GPU tier) in lazy mode\n"               \
    "                         with --gpu: auto (default) takes, per document, whichever costs less,\n"             \
    "                         its KV bytes over the store's decode rate or its tokens over the\n"                  \
    "                         GPU's recompute rate (both measured as the session runs, from priors\n"              \
    "                         of 4 GB/s and 20,000 tokens/s); recompute runs its stored token ids\n"               \
    "                         through the model on the GPU, as lazyingest did; load reads and\n"                   \
    "                         decodes its KV from the store. Documents stored with KV eviction\n"                  \
    "                         (--kv-policy) or longer than 4,096 tokens are always loaded\n"                       \
    "      --cache-f32        cache a bf16 store's KV widened to fp32 (twice the memory; by default\n"             \
    "                         it stays bf16: lazy results are the same, block / prefix copies rounded)\n"          \
    "  -n, --max-tokens N     answer length limit (default 64; alias --max-new-tokens)\n"                         \
    "      --temp T           sampling temperature, 0 = greedy (default 0)\n"                                      \
    "      --top-p P          nucleus sampling mass, (0, 1] (used when --temp > 0)\n"                              \
    "      --seed S           sampling seed (default 42)\n"                                                        \
    "  -t, --threads N        CPU threads (default: all cores)\n"                                                  \
    "      --no-stats         do not write access counts back to the store (opens it read-only)\n"

/* Opens the store the options name, as lazyquery and lazyserve do: a host budget past the
 * machine's memory clamped to 90% of it (with a note), the store refused when it is not
 * there (nothing is created), opened read-only with --no-stats, the thread count applied.
 * 0 with *st, or an exit status after printing why. */
int lz_session_cli_open_store(lz_session_cli *o, lz_store **st);
/* Loads the model (--model, else $LAZY_MODEL, else the embedded default) and sets the
 * session's context from it. 0 with *m, or an exit status after printing why. */
int lz_session_cli_load_model(lz_session_cli *o, lz_llama **m);

#endif /* LZ_QUERY_SESSION_CLI_H */
