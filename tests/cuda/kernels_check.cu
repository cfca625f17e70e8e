/* kernels_check.cu - the attention kernels' one driver, in the manner of ggml's
 * test-backend-ops: one table of cases (each names the kernel it runs, its
 * shape and what the result is compared with) and two modes over it.
 *
 *   kernels_check test   every test case: the GPU kernels against the CPU
 *                        references (the kernels' *_ref.c) on fresh random inputs,
 *                        and lazy against non-lazy on materialised keys
 *                        (bodies: tests/cuda/kernels_test.cuh); prints
 *                        'N passed, N failed' and exits 1 when a check failed
 *   kernels_check perf   every perf case: the lazy kernel and its twin timed
 *                        in interleaved pairs, the copy bandwidth beside them
 *                        (bodies: bench/kernels/kernels_perf.cuh); writes the
 *                        JSON that bench/kernels/overhead_ci.py and
 *                        sdpa_peer.py read; the fp8/ cases time fp8 documents
 *                        against bf16 on the same shapes (--filter fp8)
 *
 * Run with --help for the options and the environment. A test case's inputs
 * come from the seed and the case's name: '--seed N --filter NAME' repeats one
 * case's inputs exactly.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <string>
#include <vector>

#include "tests/cuda/kernels_test.cuh"
#include "tests/cuda/kernels_test_group.cuh"
#include "bench/kernels/kernels_perf.cuh"
#include "bench/kernels/kernels_perf_group.cuh"

enum { TEST = 1, PERF = 2 };

struct Case {
    int mode;           /* TEST or PERF */
    std::string name;   /* what --filter matches */
    const char *kernel; /* the entry points it runs */
    std::string shape;  /* its inputs */
    const char *ref;    /* what the kernels' output (test) or time (perf) is compared with */
    std::function<void()> run;
};

static std::string fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static std::string fmt(const char *f, ...)
{
    char b[512];
    va_list ap;
    va_start(ap, f);
    vsnprintf(b, sizeof b, f, ap);
    va_end(ap);
    return b;
}

static std::string ask(int x) { return x ? fmt("%d", x) : std::string("plan"); } /* 0: the plan's choice */

/* Test cases: each of these prefill and decode variants for every group of
 * layout (adjacent, half) x head_dim (64, 128) x GQA ratio G (1, 4, 8). S is
 * s_lo, or s_lo..s_lo + s_span - 1 drawn at random; 0 (n_split, rows_per_warp,
 * rows_per_cta, wgmma) leaves the choice to the plan (lz_prefill_plan,
 * lz_decode_splits). */
struct PrefillVariant {
    int s_lo, s_span, M, n_split, rpw, bm, wgmma;
};
static const PrefillVariant PREFILL_VARIANTS[] = {
    /* 20 segments / few rows, few segments / many rows, split forced; rows per
     * warp 32 is the shape chosen for ingest-sized row counts */
    {20, 0, 1, 0, 0, 0, 0},
    {1, 20, 37, 0, 0, 0, 0},
    {1, 6, 160, 1, 16, 128, 0}, /* 8 warps x 16 rows */
    {1, 6, 130, 7, 32, 0, 0},
    {1, 20, 37, 3, 32, 0, 0},
    {1, 0, 256, 1, 32, 0, 0},
    {0, 0, 300, 1, 32, 0, 0},
    /* 64 rows a CTA (4 warps of 16, two CTAs per SM) with the mma.sync tile loop */
    {20, 0, 3, 0, 16, 64, 1},
    {1, 20, 45, 5, 16, 64, 1},
    {0, 0, 200, 1, 16, 64, 1},
    /* the same shape with the wgmma tile loop (the default for it) */
    {20, 0, 3, 0, 16, 64, 2},
    {1, 20, 45, 5, 16, 64, 2},
    {1, 6, 130, 0, 16, 64, 2},
    {0, 0, 200, 1, 16, 64, 2},
    /* more than 32 segments: the tile list's later chunks of 32 (one lane a
     * segment, a ballot per chunk), up to LZ_PREFILL_MAX_SEG; split parts
     * starting and ending in them */
    {33, LZ_PREFILL_MAX_SEG - 32, 5, 7, 16, 64, 2},
    {LZ_PREFILL_MAX_SEG, 0, 3, 0, 16, 64, 1},
    {33, 64, 37, 3, 32, 0, 0},
};
struct DecodeVariant {
    int B, S_max, n_split;
    int64_t base; /* offsets from base + [0, 50000) */
    int vsep;     /* values at rows of their own (p.v_rows) */
};
static const DecodeVariant DECODE_VARIANTS[] = {
    /* auto split, no split, many splits; offsets near 2^21 once */
    {3, 20, 0, 70000, 0},
    {2, 20, 1, 70000, 0},
    {2, 5, 13, LZ_DECODE_MAX_OFFSET - 50000 - 6 * 6200, 0},
    /* more CTAs than SMs: the 3-stage, 2-CTAs-per-SM shape */
    {40, 6, 4, 70000, 0},
    /* values apart from the keys (p.v_rows), both shapes */
    {1, 12, 0, 70000, 1},
    {40, 6, 4, 70000, 1},
};
/* fp8 documents (e4m3 with a scale per kv head; mode 1: every document fp8,
 * 2: each fp8 or bf16 at random; the own keys bf16): every kernel shape the
 * prefill plan can choose, segment counts 1..128; decode's split counts, B >
 * 1, both ring shapes, values apart, offsets near 2^21. */
struct Prefill8Variant {
    int s_lo, s_span, M, n_split, rpw, bm, wgmma, mode;
};
static const Prefill8Variant PREFILL8_VARIANTS[] = {
    {20, 0, 1, 0, 0, 0, 0, 2},       /* the plan: wgmma, split */
    {1, 20, 37, 0, 0, 0, 0, 1},
    {1, 6, 160, 1, 16, 128, 0, 2},   /* 8 warps x 16 rows, 3 stages */
    {1, 20, 37, 3, 32, 0, 0, 1},     /* 32 rows a warp */
    {1, 20, 45, 5, 16, 64, 1, 2},    /* 64 rows a CTA on mma.sync */
    {20, 0, 3, 0, 16, 64, 2, 1},     /* 64 rows a CTA on wgmma */
    {1, 6, 130, 0, 16, 64, 2, 2},
    {33, LZ_PREFILL_MAX_SEG - 32, 5, 7, 16, 64, 2, 2},
    {LZ_PREFILL_MAX_SEG, 0, 3, 0, 16, 64, 1, 1},
};
struct Decode8Variant {
    int B, S_max, n_split;
    int64_t base;
    int vsep, mode;
};
static const Decode8Variant DECODE8_VARIANTS[] = {
    {3, 20, 0, 70000, 0, 1},
    {2, 20, 1, 70000, 0, 2},
    {2, 5, 13, LZ_DECODE_MAX_OFFSET - 50000 - 6 * 6200, 0, 2},
    {40, 6, 4, 70000, 0, 2}, /* more CTAs than SMs: two CTAs per SM */
    {1, 12, 0, 70000, 1, 2},
    {40, 6, 4, 70000, 1, 1},
};
/* Perf cases: the kernels issue's shapes (H = 32, KV = 8, d = 128, 10 segments). */
struct PerfShape {
    char kind; /* 'd' decode: B sequences of N keys; 'p' prefill: M rows over N cached keys */
    int a, b;
};
static const PerfShape PERF_SHAPES[] = {{'d', 16, 4096}, {'d', 64, 2048}, {'d', 1, 16384},
                                        {'p', 32, 1536}, {'p', 32, 4096}, {'p', 128, 1536},
                                        {'p', 128, 4096}, {'p', 2048, 0}};

static float perf_inv[kc_perf::D / 2], *perf_d_inv; /* the perf cases' inverse frequencies (llama3) */
static double perf_copy_tbs;

static std::vector<Case> all_cases(void)
{
    std::vector<Case> v;
    const char *pf_ref = "lz_prefill_lazy_ref (CPU); lz_prefill on keys materialised by lz_rerotate; "
                         "lz_rerotate vs lz_rerotate_ref";
    v.push_back({TEST, "prefill/refusal", "lz_prefill_lazy, lz_prefill",
                 "65,536 row tiles; a cos/sin table off 16 bytes; fp8 decode without v_scales",
                 "LZ_ATTN_EARG before any launch",
                 [] { kc_test::refusal_cases(); }});
    for (int c = 0; c < 12; c++) {
        const int layout = c / 6, d = (c / 3) % 2 ? 128 : 64, gi = c % 3;
        const int G = gi == 0 ? 1 : (gi == 1 ? 4 : 8), KV = G == 1 ? 4 : (G == 4 ? 2 : 1);
        const int llama3 = c & 1;
        const std::string grp = fmt("%s/d%d/g%d", kc_test::LNAME[layout], d, G);
        const std::string dims = fmt("%s d=%d G=%d KV=%d rope=%s", kc_test::LNAME[layout], d, G, KV,
                                     llama3 ? "llama3" : "plain");
        int i = 0;
        for (const PrefillVariant &t : PREFILL_VARIANTS) {
            const char *loop = !t.rpw ? "plan" : t.rpw == 32 ? "r32" : t.bm == 128 ? "r16x128"
                             : t.wgmma == 2 ? "wgmma64" : "mma64";
            const std::string segs = t.s_span ? fmt("s%d-%d", t.s_lo, t.s_lo + t.s_span - 1) : fmt("s%d", t.s_lo);
            const std::string split = t.n_split ? fmt("split%d", t.n_split) : std::string("split-plan");
            v.push_back({TEST, fmt("prefill/%s/%02d-%s-%s-m%d-%s", grp.c_str(), i++, loop, segs.c_str(), t.M, split.c_str()),
                         "lz_prefill_lazy, lz_prefill, lz_rerotate",
                         fmt("%s S=%s M=%d split=%s rows/warp=%s rows/cta=%s loop=%s", dims.c_str(), segs.c_str() + 1,
                             t.M, ask(t.n_split).c_str(), ask(t.rpw).c_str(), ask(t.bm).c_str(),
                             t.wgmma == 2 ? "wgmma" : t.wgmma == 1 ? "mma.sync" : "plan"),
                         pf_ref, [=] {
                             const int S = t.s_lo + (t.s_span ? (int)(kc_test::urand() * t.s_span) : 0);
                             kc_test::prefill_case(layout, d, G, KV, S, t.M, t.n_split, llama3, t.rpw, t.bm, t.wgmma);
                         }});
        }
        i = 0;
        for (const Prefill8Variant &t : PREFILL8_VARIANTS) {
            const char *loop = !t.rpw ? "plan" : t.rpw == 32 ? "r32" : t.bm == 128 ? "r16x128"
                             : t.wgmma == 2 ? "wgmma64" : "mma64";
            const std::string segs = t.s_span ? fmt("s%d-%d", t.s_lo, t.s_lo + t.s_span - 1) : fmt("s%d", t.s_lo);
            const std::string split = t.n_split ? fmt("split%d", t.n_split) : std::string("split-plan");
            v.push_back({TEST, fmt("fp8/prefill/%s/%02d-%s-%s-m%d-%s-%s", grp.c_str(), i++, loop, segs.c_str(), t.M,
                                   split.c_str(), t.mode == 1 ? "fp8" : "mixed"),
                         "lz_prefill_lazy, lz_prefill, lz_rerotate (fp8)",
                         fmt("%s S=%s M=%d split=%s rows/warp=%s rows/cta=%s loop=%s, %s", dims.c_str(), segs.c_str() + 1,
                             t.M, ask(t.n_split).c_str(), ask(t.rpw).c_str(), ask(t.bm).c_str(),
                             t.wgmma == 2 ? "wgmma" : t.wgmma == 1 ? "mma.sync" : "plan",
                             t.mode == 1 ? "fp8 segments" : "fp8 and bf16 segments"),
                         "lz_prefill_lazy_ref / lz_prefill_ref (CPU); lazy vs lz_prefill on fp8 re-rotated copies",
                         [=] {
                             const int S = t.s_lo + (t.s_span ? (int)(kc_test::urand() * t.s_span) : 0);
                             kc_test::prefill_case_fp8(layout, d, G, KV, S, t.M, t.n_split, llama3, t.rpw, t.bm, t.wgmma,
                                                       t.mode);
                         }});
        }
        i = 0;
        for (const Decode8Variant &t : DECODE8_VARIANTS) {
            v.push_back({TEST,
                         fmt("fp8/decode/%s/%02d-b%d-s1-%d-%s%s%s-%s", grp.c_str(), i++, t.B, t.S_max,
                             t.n_split ? fmt("split%d", t.n_split).c_str() : "split-plan",
                             t.base != 70000 ? "-far" : "", t.vsep ? "-vrows" : "", t.mode == 1 ? "fp8" : "mixed"),
                         "lz_decode_lazy, lz_decode, lz_rerotate (fp8)",
                         fmt("%s B=%d S=1-%d (+ own keys, bf16) split=%s offsets from %lld%s, %s", dims.c_str(), t.B,
                             t.S_max, ask(t.n_split).c_str(), (long long)t.base,
                             t.vsep ? ", values at rows of their own" : "",
                             t.mode == 1 ? "fp8 documents" : "fp8 and bf16 documents"),
                         "lz_decode_lazy_ref / lz_decode_ref (CPU); lazy vs lz_decode on fp8 re-rotated copies",
                         [=] {
                             kc_test::decode_case_fp8(layout, d, G, KV, t.B, t.S_max, t.n_split, llama3, t.base, t.vsep,
                                                      t.mode);
                         }});
        }
        i = 0;
        for (const DecodeVariant &t : DECODE_VARIANTS) {
            v.push_back({TEST,
                         fmt("decode/%s/%02d-b%d-s1-%d-%s%s%s", grp.c_str(), i++, t.B, t.S_max,
                             t.n_split ? fmt("split%d", t.n_split).c_str() : "split-plan",
                             t.base != 70000 ? "-far" : "", t.vsep ? "-vrows" : ""),
                         "lz_decode_lazy, lz_decode, lz_rerotate",
                         fmt("%s B=%d S=1-%d (+ own keys) split=%s offsets from %lld%s", dims.c_str(), t.B, t.S_max,
                             ask(t.n_split).c_str(), (long long)t.base, t.vsep ? ", values at rows of their own" : ""),
                         "lz_decode_lazy_ref (CPU); lz_decode on a pool materialised by lz_rerotate",
                         [=] { kc_test::decode_case(layout, d, G, KV, t.B, t.S_max, t.n_split, llama3, t.base, t.vsep); }});
        }
        i = 0;
        for (const DecodeVariant &t : DECODE_VARIANTS) {
            v.push_back({TEST,
                         fmt("decode/%s/pdl-%02d-b%d-s1-%d-%s%s", grp.c_str(), i++, t.B, t.S_max,
                             t.n_split ? fmt("split%d", t.n_split).c_str() : "split-plan", t.vsep ? "-vrows" : ""),
                         "lz_decode_lazy (a programmatic dependent launch)",
                         fmt("%s B=%d S=1-%d (+ own keys) split=%s, the query and each (b, h)'s last block written "
                             "by the kernel before, late", dims.c_str(), t.B, t.S_max, ask(t.n_split).c_str()),
                         "lz_decode_lazy_ref (CPU)",
                         [=] { kc_test::decode_case(layout, d, G, KV, t.B, t.S_max, t.n_split, llama3, t.base, t.vsep, 1); }});
        }
    }
    for (int layout = 0; layout < 2; layout++) /* grouped decode: every layout x d x G */
        for (int d = 64; d <= 128; d += 64)
            for (int G : {1, 4, 8}) {
                const int KV = G == 8 ? 2 : 3;
                const std::string grp = fmt("%s/d%d/g%d", kc_test::LNAME[layout], d, G);
                struct { int B, ND, chunk, pdl, fp8; } vs[] = {{24, 6, 2, 0, 0}, {5, 40, 64, 0, 0}, {40, 8, 8, 1, 0},
                                                               {24, 6, 2, 0, 1}, {40, 8, 8, 1, 1}};
                int i = 0;
                for (auto t : vs)
                    v.push_back({TEST, fmt("decode-group/%s/%02d-b%d-docs%d-chunk%d%s%s", grp.c_str(), i++, t.B, t.ND,
                                           t.chunk, t.pdl ? "-pdl" : "", t.fp8 ? "-fp8" : ""),
                                 "lz_decode_group (items of lz_decode_group_plan)",
                                 fmt("%s d=%d G=%d KV=%d B=%d over %d shared documents%s, chunks of %d blocks",
                                     kc_test::LNAME[layout], d, G, KV, t.B, t.ND, t.fp8 ? " (e4m3, own rows bf16)" : "",
                                     t.chunk),
                                 "lz_decode_group_ref (CPU); lz_decode_lazy on the same block words",
                                 [=] { kc_test::decode_group_case(layout, d, G, KV, t.B, t.ND, t.chunk, t.pdl, t.fp8); }});
            }
    for (const PerfShape &sh : PERF_SHAPES) {
        const int a = sh.a, b = sh.b;
        if (sh.kind == 'd')
            v.push_back({PERF, fmt("decode/d%dx%d", a, b), "lz_decode_lazy, lz_decode",
                         fmt("B=%d N=%d H=32 KV=8 d=128 S=10", a, b), "the twin (lz_decode); the copy bandwidth",
                         [=] { kc_perf::bench_decode(a, b, perf_copy_tbs, kc_perf::opt.sweep, perf_d_inv); }});
        else
            v.push_back({PERF, fmt("prefill/p%dx%d", a, b), "lz_prefill_lazy, lz_prefill",
                         b ? fmt("M=%d N=%d H=32 KV=8 d=128 S=10", a, b)
                           : fmt("M=%d own keys only (causal ingest) H=32 KV=8 d=128", a),
                         "the twin (lz_prefill)",
                         [=] { kc_perf::bench_prefill(a, b, b ? kc_perf::opt.sweep : 0, perf_d_inv, perf_inv); }});
    }
    for (int B : {8, 32, 40}) /* grouped decode on the paper's serving setup: 100 x 2,048 tokens, 5 a row, Zipf(2.1) */
        v.push_back({PERF, fmt("decode-group/paper-b%d", B), "lz_decode_group, lz_decode_lazy",
                     fmt("B=%d rows, 5 of 100 documents of 2,048 tokens a row by Zipf(2.1), 48 own keys, H=32 KV=8 d=128", B),
                     "lz_decode_lazy over the same block words; the copy bandwidth",
                     [=] { kc_perf::bench_decode_group(B, 100, 5, 2048, 2.1, perf_copy_tbs, perf_d_inv); }});
    for (int B : {8, 40}) /* the same, documents e4m3 */
        v.push_back({PERF, fmt("decode-group/fp8-paper-b%d", B), "lz_decode_group, lz_decode_lazy (fp8 blocks)",
                     fmt("B=%d rows, 5 of 100 e4m3 documents of 2,048 tokens a row by Zipf(2.1), 48 own keys (bf16), "
                         "H=32 KV=8 d=128", B),
                     "lz_decode_lazy over the same block words; the copy bandwidth in fp8 bytes",
                     [=] { kc_perf::bench_decode_group(B, 100, 5, 2048, 2.1, perf_copy_tbs, perf_d_inv, 1); }});
    for (const PerfShape &sh : PERF_SHAPES) { /* fp8 documents against bf16, after the bf16 cases */
        const int a = sh.a, b = sh.b;
        if (sh.kind == 'd')
            v.push_back({PERF, fmt("fp8/decode/d%dx%d", a, b), "lz_decode_lazy, lz_decode (fp8 blocks)",
                         fmt("B=%d N=%d H=32 KV=8 d=128 S=10, every block e4m3; then documents e4m3, question bf16", a, b),
                         "lz_decode_lazy on the same blocks in bf16; the copy bandwidth in fp8 bytes",
                         [=] { kc_perf::bench_decode_fp8(a, b, perf_copy_tbs, kc_perf::opt.sweep, perf_d_inv); }});
        else if (b) /* ingest (no documents) has nothing in fp8 */
            v.push_back({PERF, fmt("fp8/prefill/p%dx%d", a, b), "lz_prefill_lazy, lz_prefill (fp8 segments)",
                         fmt("M=%d N=%d H=32 KV=8 d=128 S=10 e4m3 segments, own keys bf16", a, b),
                         "lz_prefill_lazy on the same segments in bf16",
                         [=] { kc_perf::bench_prefill_fp8(a, b, perf_d_inv, perf_inv); }});
    }
    return v;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kernels_check [test|perf] [options]   (default: test)\n"
            "  test              every test case against the CPU references; 'N passed, N failed', exit 1 on a failure\n"
            "  perf              every perf case timed (lazy / twin pairs); writes the JSON file of --out\n"
            "  --filter TEXT     only the cases whose name contains TEXT (e.g. /half/d128/g4/, wgmma, p128x4096)\n"
            "  --list            print the mode's cases (name, kernel, shape, reference) and exit\n"
            "  --seed N          test: the seed of every case's inputs (default: from /dev/urandom, printed)\n"
            "  --out FILE        perf: the JSON file (default ours.json)\n"
            "  --sweep 0|1       perf: the split-KV and kernel-shape sweeps (default 1)\n"
            "environment (perf; read once, at start):\n"
            "  LZ_BENCH_ROUNDS=R        lazy / twin pairs per shape (default 3)\n"
            "  LZ_BENCH_WARM_S=T        both kernels in turn for T seconds before the pairs (default 0.5)\n"
            "  LZ_BENCH_PROFILE=1       every timing is 3 plain calls, no graph, no warm-up (for ncu)\n"
            "  LZ_BENCH_DECODE_SPLIT=N  decode parts instead of the plan's choice\n");
}

static uint64_t name_hash(const std::string &s) /* FNV-1a */
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
    return h;
}
static uint64_t mix(uint64_t z) /* splitmix64's finaliser */
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int run_test(const std::vector<const Case *> &sel, uint64_t seed, int seeded)
{
    if (!seeded) {
        FILE *ur = fopen("/dev/urandom", "rb");
        if (!ur || fread(&seed, 8, 1, ur) != 1) seed = 0x9e3779b97f4a7c15ull;
        if (ur) fclose(ur);
    }
    printf("seed %llu\n", (unsigned long long)seed);
    std::vector<std::string> failed;
    for (const Case *c : sel) {
        kc_test::rng = mix(seed ^ name_hash(c->name)) | 1;
        const int f0 = lz_test_failed;
        printf("%s: ", c->name.c_str());
        fflush(stdout);
        c->run();
        fflush(stdout);
        if (lz_test_failed != f0) {
            failed.push_back(c->name);
            fprintf(stderr, "FAIL case %s (again: --seed %llu --filter %s)\n", c->name.c_str(),
                    (unsigned long long)seed, c->name.c_str());
        }
    }
    printf("%zu of %zu cases clean\n", sel.size() - failed.size(), sel.size());
    return lz_test_done();
}

static int run_perf(const std::vector<const Case *> &sel, const char *out)
{
    kc_perf::js = fopen(out, "w");
    if (!kc_perf::js) {
        perror(out);
        return 2;
    }
    int dev;
    cudaDeviceProp prop;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    kc_perf::n_sm = prop.multiProcessorCount;
    float div[kc_perf::D / 2];
    lz_rope_llama3_divisors(div, kc_perf::D, 500000.0f, 8.0f, 1.0f, 4.0f, 8192.0f);
    lz_rope_inv_freqs(perf_inv, kc_perf::D, 500000.0f, div);
    CK(cudaMalloc(&perf_d_inv, sizeof perf_inv));
    CK(cudaMemcpy(perf_d_inv, perf_inv, sizeof perf_inv, cudaMemcpyHostToDevice));
    perf_copy_tbs = lz_copy_tbs();
    printf("device %s, %d SMs; device-to-device copy %.2f TB/s (read + write)\n", prop.name, kc_perf::n_sm,
           perf_copy_tbs);
    fprintf(kc_perf::js, "{\"device\":\"%s\",\"copy_tbs\":%.4f,\"results\":[", prop.name, perf_copy_tbs);
    for (const Case *c : sel) c->run();
    fprintf(kc_perf::js, "\n]}\n");
    fclose(kc_perf::js);
    CK(cudaFree(perf_d_inv));
    return 0;
}

int main(int argc, char **argv)
{
    int mode = TEST, list = 0, seeded = 0;
    const char *filter = NULL, *out = "ours.json";
    uint64_t seed = 0;
    kc_perf::opt.sweep = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int more = i + 1 < argc;
        if (!strcmp(a, "test")) mode = TEST;
        else if (!strcmp(a, "perf")) mode = PERF;
        else if (!strcmp(a, "--list")) list = 1;
        else if (!strcmp(a, "--filter") && more) filter = argv[++i];
        else if (!strcmp(a, "--seed") && more) seed = strtoull(argv[++i], NULL, 0), seeded = 1;
        else if (!strcmp(a, "--out") && more) out = argv[++i];
        else if (!strcmp(a, "--sweep") && more) kc_perf::opt.sweep = atoi(argv[++i]);
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "kernels_check: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    /* the environment, read once */
    const char *e;
    kc_perf::opt.rounds = (e = getenv("LZ_BENCH_ROUNDS")) ? atoi(e) : 3;
    kc_perf::opt.warm_s = (e = getenv("LZ_BENCH_WARM_S")) ? atof(e) : 0.5;
    kc_perf::opt.profile = (e = getenv("LZ_BENCH_PROFILE")) ? atoi(e) : 0;
    kc_perf::opt.decode_split = (e = getenv("LZ_BENCH_DECODE_SPLIT")) ? atoi(e) : -1;

    const std::vector<Case> cases = all_cases();
    std::vector<const Case *> sel;
    for (const Case &c : cases)
        if (c.mode == mode && (!filter || strstr(c.name.c_str(), filter))) sel.push_back(&c);
    if (list) {
        for (const Case *c : sel)
            printf("%-52s %-42s %s | %s\n", c->name.c_str(), c->kernel, c->shape.c_str(), c->ref);
        return 0;
    }
    if (sel.empty()) {
        fprintf(stderr, "kernels_check: no %s case matches '%s' (--list shows them)\n", mode == TEST ? "test" : "perf",
                filter ? filter : "");
        return 2;
    }
    return mode == TEST ? run_test(sel, seed, seeded) : run_perf(sel, out);
}
