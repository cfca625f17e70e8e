/* kernels_perf.cuh - the performance bodies of kernels_check (tests/cuda/kernels_check.cu,
 * its perf mode): the lazy attention kernels and their non-lazy twins on the
 * shapes of the kernels issue (32 query / 8 kv heads, d = 128, keys in 10
 * segments), timed with CUDA events around CUDA-graph replays of 20 calls
 * (median per call), beside a device-to-device copy for the bandwidth
 * ceiling. Each case appends one or two records to the JSON file that
 * overhead_ci.py and sdpa_peer.py read. Inputs are random; several input sets
 * rotate so that decode reads come from HBM, not L2. The fp8 cases (records
 * of kind decode_fp8 / prefill_fp8, which those scripts and bench/results.py
 * pass over) time fp8 documents against bf16 on the same shapes.
 * Legend: B = sequences, H = 32 query heads, KV = 8 kv heads, d = 128,
 * N = keys per sequence, M = query rows, S = 10 segments.
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "kernels/lz_decode.h"
#include "kernels/lz_prefill.h"
#include "base/half.h"
#include "base/rope.h"
#include "tests/cuda/cuda_check.h"

#define LZ(x)                                                                                  \
    do {                                                                                       \
        int r_ = (x);                                                                          \
        if (r_) {                                                                              \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, lz_attn_strerror(r_));  \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

namespace kc_perf {

/* The perf mode's settings, read once by the driver (its --help lists the variables). */
struct Opts {
    int rounds;       /* LZ_BENCH_ROUNDS: lazy / twin pairs per shape (default 3) */
    double warm_s;    /* LZ_BENCH_WARM_S: both kernels in turn for this long before the pairs (default 0.5) */
    int profile;      /* LZ_BENCH_PROFILE=1: every timing is 3 plain calls, no graph, no warm-up (for ncu) */
    int decode_split; /* LZ_BENCH_DECODE_SPLIT: decode parts instead of the plan's (-1: unset) */
    int sweep;        /* --sweep: the split-KV and kernel-shape sweeps (default 1) */
};
static Opts opt;

static const int H = 32, KV = 8, D = 128, NSEG = 10;
static int n_sm;
static FILE *js;
static int js_first = 1;

static void jrec(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void jrec(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(js, "%s\n  {", js_first ? "" : ",");
    vfprintf(js, fmt, ap);
    fprintf(js, "}");
    va_end(ap);
    js_first = 0;
}

__global__ void fill_kernel(__nv_bfloat16 *x, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
        z ^= z >> 31; z *= 0xbf58476d1ce4e5b9ull; z ^= z >> 29;
        x[i] = __float2bfloat16((float)((z >> 40) & 0xffff) / 32768.0f - 1.0f);
    }
}
static lz_bf16 *rand_dev(size_t n, uint64_t seed)
{
    lz_bf16 *p;
    CK(cudaMalloc(&p, n * 2 + 16));
    fill_kernel<<<1024, 256>>>((__nv_bfloat16 *)p, n, seed);
    CK(cudaGetLastError());
    return p;
}

static double median(std::vector<float> v)
{
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

/* The lazy kernel and its twin timed in R interleaved pairs (LZ_BENCH_ROUNDS,
 * default 3), the order alternating (lazy first in even pairs, the twin in
 * odd ones, so neither always runs on a warmer GPU): each one's best median,
 * and the lazy overhead of every pair, whose median and range say how far a
 * 1% figure can be trusted on short kernels (overhead_ci.py pools the pairs
 * of several runs). run_one(lazy) times one of the two. */
struct Paired {
    double lazy_us, twin_us, ov_med, ov_lo, ov_hi;
    int rounds;
    std::vector<double> ov; /* every pair's overhead, in pair order */
};
template <class F> static Paired paired(F run_one)
{
    Paired r = {1e30, 1e30, 0, 0, 0, opt.rounds, {}};
    if (r.rounds < 1) r.rounds = 1;
    /* warm-up: both kernels in turn for LZ_BENCH_WARM_S seconds (default 0.5),
     * so the first pairs do not run while the clocks still climb (a process
     * timing one shape from an idle GPU sees another overhead than the same
     * shape late in a full run); none when profiling, so that every launch
     * is at a known place for ncu's --launch-skip */
    const double warm_s = opt.profile ? 0.0 : opt.warm_s;
    for (auto t0 = std::chrono::steady_clock::now();
         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < warm_s;) {
        run_one(0);
        run_one(1);
    }
    for (int k = 0; k < r.rounds; k++) {
        double a, b;
        if (k % 2 == 0) {
            a = run_one(1);
            b = run_one(0);
        } else {
            b = run_one(0);
            a = run_one(1);
        }
        r.lazy_us = std::min(r.lazy_us, a);
        r.twin_us = std::min(r.twin_us, b);
        r.ov.push_back(100 * (a / b - 1));
    }
    std::vector<double> ov = r.ov;
    std::sort(ov.begin(), ov.end());
    size_t n = ov.size();
    r.ov_med = n % 2 ? ov[n / 2] : 0.5 * (ov[n / 2 - 1] + ov[n / 2]);
    r.ov_lo = ov.front();
    r.ov_hi = ov.back();
    return r;
}
static void print_paired(const Paired &r)
{
    printf("  lazy overhead per pair (%d pairs): median %+.2f%%, range %+.2f%% .. %+.2f%%\n", r.rounds, r.ov_med,
           r.ov_lo, r.ov_hi);
}
/* the pairs' overheads as a JSON array (for jrec's "%s") */
static std::string pairs_json(const Paired &r)
{
    std::string j = "[";
    char b[32];
    for (size_t i = 0; i < r.ov.size(); i++) {
        snprintf(b, sizeof b, "%s%.3f", i ? "," : "", r.ov[i]);
        j += b;
    }
    return j + "]";
}

/* Median microseconds per call of fn(set, stream): CALLS calls (rotating
 * among n_sets) are captured into one CUDA graph, so host launch overhead is
 * excluded as it is for the torch peer; the graph is replayed reps times. */
template <class F> static double time_us(F fn, int n_sets, int reps)
{
    const int CALLS = 20;
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (int i = 0; i < 3; i++) fn(i % n_sets, st); /* warm-up, sets kernel attributes */
    CK(cudaStreamSynchronize(st));
    if (opt.profile) { /* LZ_BENCH_PROFILE=1: the 3 plain calls above (for ncu), no graph */
        CK(cudaStreamDestroy(st));
        return 1.0;
    }
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < CALLS; i++) fn(i % n_sets, st);
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<float> t;
    for (int i = 0; i < reps; i++) t.push_back(lz_graph_ms(ge, st, a, b) * 1000.f / CALLS);
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(st));
    return median(t);
}


static void bench_decode(int B, int N, double copy_tbs, int sweep, float *d_inv)
{
    /* pool per set: sequence b, segment s: (KV, len, d) rows */
    const int len = N / NSEG, last = N - len * (NSEG - 1);
    const size_t rows = (size_t)B * N * KV;
    const double bytes = 2.0 * rows * D * 2; /* K + V */
    int n_sets = (int)std::max<double>(1.0, ceil(1.2e9 / bytes));
    lz_bf16 *kp = rand_dev(rows * D * n_sets, 11), *vp = rand_dev(rows * D * n_sets, 12);
    lz_bf16 *q = rand_dev((size_t)B * H * D * n_sets, 13), *o;
    CK(cudaMalloc(&o, (size_t)B * H * D * 2));
    const int NB = NSEG * ((last + 63) / 64 + 1);
    std::vector<uint64_t> w((size_t)n_sets * B * KV * NB);
    std::vector<int32_t> nb((size_t)n_sets * B * KV);
    for (int set = 0; set < n_sets; set++) {
        size_t r = (size_t)set * rows;
        for (int b = 0; b < B; b++) {
            int64_t pos = 1000; /* after a prefix; doc offsets grow, the last segment is the question at 0 */
            for (int s = 0; s < NSEG; s++) {
                int l = s == NSEG - 1 ? last : len;
                int64_t off = s == NSEG - 1 ? 0 : pos;
                for (int h = 0; h < KV; h++) {
                    size_t i = ((size_t)set * B + b) * KV + h;
                    LZ(lz_decode_add_segment(&w[i * NB], &nb[i], NB, r + (size_t)h * l, l, off));
                }
                r += (size_t)KV * l;
                pos += l;
            }
        }
    }
    /* diagnostic: the same blocks with every offset 0 (lazy code path, no rotation work) */
    std::vector<uint64_t> w0(w);
    for (auto &x : w0) x = lz_decode_word(lz_decode_word_row(x), 0, lz_decode_word_keys(x));
    uint64_t *d_w, *d_w0;
    int32_t *d_nb;
    CK(cudaMalloc(&d_w0, w0.size() * 8));
    CK(cudaMemcpy(d_w0, w0.data(), w0.size() * 8, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&d_w, w.size() * 8));
    CK(cudaMalloc(&d_nb, nb.size() * 4));
    CK(cudaMemcpy(d_w, w.data(), w.size() * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_nb, nb.data(), nb.size() * 4, cudaMemcpyHostToDevice));
    lz_decode_params p;
    memset(&p, 0, sizeof p);
    p.o = o; p.k_pool = kp; p.v_pool = vp; p.inv_freq = d_inv; p.max_blocks = NB; p.batch = B;
    p.n_heads = H; p.n_kv_heads = KV; p.head_dim = D; p.rope_layout = LZ_ROPE_HALF;
    p.scale = 1.0f / sqrtf((float)D);
    size_t wb = 0;
    for (int ns = 1; ns <= 256; ns++) wb = std::max(wb, lz_decode_workspace(&p, ns));
    CK(cudaMalloc(&p.work, wb));
    p.work_bytes = wb;
    auto run = [&](int lazy, int ns, int zero_off = 0) {
        CK(cudaMemset(p.work, 0, wb)); /* split counters start at zero */
        return time_us([&](int set, cudaStream_t st) {
            lz_decode_params x = p;
            x.n_split = ns;
            x.q = q + (size_t)set * B * H * D;
            x.blocks = (zero_off ? d_w0 : d_w) + (size_t)set * B * KV * NB;
            x.n_blocks = d_nb + (size_t)set * B * KV;
            LZ(lazy ? lz_decode_lazy(&x, st) : lz_decode(&x, st));
        }, n_sets, 30);
    };
    int auto_ns = lz_decode_splits(&p, n_sm);
    if (opt.decode_split >= 0) auto_ns = opt.decode_split; /* A/B of the split choice */
    /* interleave lazy and twin, keep each one's best median */
    const Paired pr = paired([&](int lazy) { return run(lazy, auto_ns); });
    const double tl = pr.lazy_us, tn = pr.twin_us;
    printf("decode B=%3d N=%5d: split %3d lazy %8.2f us (%.2f TB/s, %.1f%% of copy)  twin %8.2f us (%.2f TB/s)  overhead %+.2f%%\n",
           B, N, auto_ns, tl, bytes / tl / 1e6, 100 * bytes / tl / 1e6 / copy_tbs, tn, bytes / tn / 1e6,
           100 * (tl / tn - 1));
    print_paired(pr);
    jrec("\"kind\":\"decode\",\"B\":%d,\"N\":%d,\"split\":%d,\"lazy_us\":%.3f,\"twin_us\":%.3f,\"bytes\":%.0f,"
         "\"overhead_median_pct\":%.3f,\"overhead_lo_pct\":%.3f,\"overhead_hi_pct\":%.3f,\"pairs\":%d,"
         "\"overhead_pairs_pct\":%s",
         B, N, auto_ns, tl, tn, bytes, pr.ov_med, pr.ov_lo, pr.ov_hi, pr.rounds, pairs_json(pr).c_str());
    printf("  diagnostic: lazy kernel with every offset 0 (no rotation work): %.2f us\n", run(1, auto_ns, 1));
    if (sweep) {
        int cand[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128};
        printf("  split sweep (lazy us):");
        for (int ns : cand) {
            if (ns > NB) break;
            printf(" %d:%.1f", ns, run(1, ns));
        }
        printf("\n");
    }
    CK(cudaFree(kp)); CK(cudaFree(vp)); CK(cudaFree(q)); CK(cudaFree(o)); CK(cudaFree(d_w));
    CK(cudaFree(d_w0));
    CK(cudaFree(d_nb)); CK(cudaFree(p.work));
}

/* Question prefill: M rows over N cached keys in 10 segments (+ own keys);
 * N = 0 and M = 2048 is the causal ingest shape. */
static void bench_prefill(int M, int N, int sweep, float *d_inv, const float *inv_host)
{
    const int nseg = N ? NSEG : 0, len = N / NSEG;
    const size_t kv_elems = (size_t)KV * (N + M) * D;
    int n_sets = N ? 8 : 2;
    std::vector<lz_bf16 *> kk(n_sets), vv(n_sets), qq(n_sets);
    std::vector<lz_attn_segment *> d_segs(n_sets);
    std::vector<float *> d_cs(n_sets); /* the lazy kernel's cos/sin table, built once per set as an
                                          engine builds it once per forward pass for every layer */
    std::vector<int32_t> lens((size_t)std::max(nseg, 1) * KV);
    for (int s = 0; s < nseg; s++)
        for (int h = 0; h < KV; h++) lens[s * KV + h] = s == nseg - 1 ? N - len * (nseg - 1) : len;
    int32_t *d_len;
    CK(cudaMalloc(&d_len, lens.size() * 4));
    CK(cudaMemcpy(d_len, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
    for (int set = 0; set < n_sets; set++) {
        kk[set] = rand_dev(kv_elems, 100 + set);
        vv[set] = rand_dev(kv_elems, 200 + set);
        qq[set] = rand_dev((size_t)H * M * D, 300 + set);
        std::vector<lz_attn_segment> sg(std::max(nseg, 1));
        size_t r = 0;
        int64_t pos = 1000;
        for (int s = 0; s < nseg; s++) {
            int l = lens[s * KV];
            sg[s] = (lz_attn_segment){kk[set] + r * D, vv[set] + r * D, pos, l};
            r += (size_t)KV * l;
            pos += l;
        }
        CK(cudaMalloc(&d_segs[set], sg.size() * sizeof(lz_attn_segment)));
        CK(cudaMemcpy(d_segs[set], sg.data(), sg.size() * sizeof(lz_attn_segment), cudaMemcpyHostToDevice));
        std::vector<int64_t> offs(std::max(nseg, 1));
        for (int s = 0; s < nseg; s++) offs[s] = sg[s].offset;
        std::vector<float> cs((size_t)(nseg + 1) * D);
        lz_prefill_rope_table(cs.data(), offs.data(), nseg, N ? 0 : 1000, inv_host, D);
        CK(cudaMalloc(&d_cs[set], cs.size() * 4));
        CK(cudaMemcpy(d_cs[set], cs.data(), cs.size() * 4, cudaMemcpyHostToDevice));
    }
    lz_bf16 *o;
    CK(cudaMalloc(&o, (size_t)H * M * D * 2));
    lz_prefill_params p;
    memset(&p, 0, sizeof p);
    p.o = o; p.inv_freq = d_inv; p.seg_len = d_len; p.seg_keys = N; p.n_seg = nseg; p.n_rows = M;
    p.n_heads = H; p.n_kv_heads = KV; p.head_dim = D; p.rope_layout = LZ_ROPE_HALF;
    p.scale = 1.0f / sqrtf((float)D); p.self_offset = N ? 0 : 1000;
    size_t wb = 0;
    for (int ns = 1; ns <= 64; ns++) wb = std::max(wb, lz_prefill_workspace(&p, ns));
    if (wb) CK(cudaMalloc(&p.work, wb));
    p.work_bytes = wb;
    auto run = [&](int lazy, int ns, int rpw = 0, int bm = 0, int wg = 0, int table = 1, int no_pdl = 0) {
        return time_us([&](int set, cudaStream_t st) {
            lz_prefill_params x = p;
            x.no_pdl = no_pdl;
            x.rope_cs = table ? d_cs[set] : NULL;
            x.n_split = ns;
            x.rows_per_warp = rpw;
            x.rows_per_cta = bm;
            x.wgmma = wg;
            x.q = qq[set];
            x.segs = d_segs[set];
            x.k_self = kk[set] + (size_t)KV * N * D;
            x.v_self = vv[set] + (size_t)KV * N * D;
            LZ(lazy ? lz_prefill_lazy(&x, st) : lz_prefill(&x, st));
        }, n_sets, N ? 30 : 10);
    };
    int auto_ns = lz_prefill_splits(&p, n_sm);
    const Paired pr = paired([&](int lazy) { return run(lazy, auto_ns); });
    const double tl = pr.lazy_us, tn = pr.twin_us;
    /* visible (query, key) pairs x 4 d flops: all cached keys + causal own keys */
    double flops = 4.0 * H * D * ((double)M * N + (double)M * (M + 1) / 2);
    printf("prefill M=%4d N=%5d: split %2d lazy %8.2f us (%.1f TFLOP/s)  twin %8.2f us (%.1f TFLOP/s)  overhead %+.2f%%\n",
           M, N, auto_ns, tl, flops / tl / 1e6, tn, flops / tn / 1e6, 100 * (tl / tn - 1));
    print_paired(pr);
    jrec("\"kind\":\"prefill\",\"M\":%d,\"N\":%d,\"split\":%d,\"lazy_us\":%.3f,\"twin_us\":%.3f,\"flops\":%.0f,"
         "\"overhead_median_pct\":%.3f,\"overhead_lo_pct\":%.3f,\"overhead_hi_pct\":%.3f,\"pairs\":%d,"
         "\"overhead_pairs_pct\":%s",
         M, N, auto_ns, tl, tn, flops, pr.ov_med, pr.ov_lo, pr.ov_hi, pr.rounds, pairs_json(pr).c_str());
    {
        double tt = 1e30;
        for (int k = 0; k < 3; k++) tt = std::min(tt, run(1, auto_ns, 0, 0, 0, 0));
        printf("  lazy computing its own cos/sin (no table): %.2f us (%+.2f%% over the twin)\n", tt, 100 * (tt / tn - 1));
    }
    if (N) { /* the engine's packed layout: each head's first row read from seg_row (here the same rows) */
        std::vector<int32_t> rows((size_t)nseg * KV);
        for (int s = 0; s < nseg; s++)
            for (int h = 0; h < KV; h++) rows[s * KV + h] = h * lens[s * KV + h];
        int32_t *d_row;
        CK(cudaMalloc(&d_row, rows.size() * 4));
        CK(cudaMemcpy(d_row, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
        double plain = 1e30, rowed = 1e30;
        for (int k = 0; k < 5; k++) { /* alternating, the best of each */
            plain = std::min(plain, run(1, auto_ns));
            p.seg_row = d_row;
            rowed = std::min(rowed, run(1, auto_ns));
            p.seg_row = NULL;
        }
        CK(cudaFree(d_row));
        printf("  heads addressed by seg_row (the packed layout): lazy %.2f us against %.2f us without (%+.2f%%)\n", rowed,
               plain, 100 * (rowed / plain - 1));
        jrec("\"kind\":\"prefill_seg_row\",\"M\":%d,\"N\":%d,\"rowed_us\":%.3f,\"plain_us\":%.3f", M, N, rowed, plain);
    }
    if (auto_ns > 1) { /* A/B: the combine kernel launched plainly instead of as a programmatic dependent */
        double pl = 1e30, pn = 1e30;
        for (int k = 0; k < 3; k++) {
            pl = std::min(pl, run(1, auto_ns, 0, 0, 0, 1, 1));
            pn = std::min(pn, run(0, auto_ns, 0, 0, 0, 1, 1));
        }
        printf("  combine without programmatic dependent launch: lazy %.2f us, twin %.2f us\n", pl, pn);
    }
    if (!N) { /* the engine's ingest: own keys at their final positions (self_offset 0: R(0), no rotation) */
        std::vector<float> cs0(D);
        lz_prefill_rope_table(cs0.data(), NULL, 0, 0, inv_host, D);
        float *d_cs0;
        CK(cudaMalloc(&d_cs0, cs0.size() * 4));
        CK(cudaMemcpy(d_cs0, cs0.data(), cs0.size() * 4, cudaMemcpyHostToDevice));
        std::vector<float *> keep = d_cs;
        for (auto &c : d_cs) c = d_cs0;
        p.self_offset = 0;
        const Paired p0 = paired([&](int lazy) { return run(lazy, auto_ns); });
        p.self_offset = 1000;
        d_cs = keep;
        CK(cudaFree(d_cs0));
        printf("  own keys at offset 0 (the engine's ingest): lazy %.2f us, twin %.2f us, overhead %+.2f%% "
               "(pairs: median %+.2f%%, %+.2f%% .. %+.2f%%)\n", p0.lazy_us, p0.twin_us, 100 * (p0.lazy_us / p0.twin_us - 1),
               p0.ov_med, p0.ov_lo, p0.ov_hi);
        jrec("\"kind\":\"prefill_self0\",\"M\":%d,\"lazy_us\":%.3f,\"twin_us\":%.3f,\"overhead_median_pct\":%.3f,"
             "\"overhead_lo_pct\":%.3f,\"overhead_hi_pct\":%.3f,\"pairs\":%d,\"overhead_pairs_pct\":%s", M, p0.lazy_us,
             p0.twin_us, p0.ov_med, p0.ov_lo, p0.ov_hi, p0.rounds, pairs_json(p0).c_str());
    }
    if (!N) {
        double t16 = run(1, 1, 16, 64, 1), t16n = run(0, 1, 16, 64, 1);
        printf("  16 rows/warp 64-row mma.sync shape: lazy %.2f us (%.1f TFLOP/s), twin %.2f us\n", t16, flops / t16 / 1e6, t16n);
        double t32 = run(1, 1, 32, 128, 1), t32n = run(0, 1, 32, 128, 1);
        printf("  32 rows/warp 128-row mma.sync shape: lazy %.2f us (%.1f TFLOP/s), twin %.2f us\n", t32, flops / t32 / 1e6, t32n);
    }
    if (sweep && N) {
        int cand[] = {1, 2, 4, 6, 8, 12, 16, 24, 32};
        printf("  split sweep (lazy us):");
        for (int ns : cand) printf(" %d:%.1f", ns, run(1, ns));
        printf("\n  32 rows/warp (2 CTAs/SM) sweep (lazy us):");
        for (int ns : cand) printf(" %d:%.1f", ns, run(1, ns, 32));
        printf("\n  64 rows/CTA mma.sync (4 warps x 16 rows, 2 CTAs/SM) sweep (lazy us):");
        for (int ns : cand) printf(" %d:%.1f", ns, run(1, ns, 16, 64, 1));
        printf("\n  64 rows/CTA mma.sync twin sweep (us):");
        for (int ns : cand) printf(" %d:%.1f", ns, run(0, ns, 16, 64, 1));
        printf("\n  64 rows/CTA wgmma sweep (lazy us):");
        for (int ns : cand) printf(" %d:%.1f", ns, run(1, ns, 16, 64, 2));
        printf("\n  64 rows/CTA wgmma twin sweep (us):");
        for (int ns : cand) printf(" %d:%.1f", ns, run(0, ns, 16, 64, 2));
        printf("\n  128 rows/CTA twin sweep (us):");
        for (int ns : cand) printf(" %d:%.1f", ns, run(0, ns, 16, 128));
        printf("\n");
    }
    for (int set = 0; set < n_sets; set++) {
        CK(cudaFree(kk[set])); CK(cudaFree(vv[set])); CK(cudaFree(qq[set])); CK(cudaFree(d_segs[set]));
        CK(cudaFree(d_cs[set]));
    }
    CK(cudaFree(o)); CK(cudaFree(d_len));
    if (p.work) CK(cudaFree(p.work));
}

} /* namespace kc_perf */

/* ---- fp8 (e4m3) documents against bf16 on the same shapes ---- */
namespace kc_perf {

/* random e4m3 bytes (no NaN) */
__global__ void fill8_kernel(uint8_t *x, size_t n, uint64_t seed)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull ^ seed;
        z ^= z >> 31; z *= 0xbf58476d1ce4e5b9ull; z ^= z >> 29;
        uint8_t b = (uint8_t)(z >> 40);
        if ((b & 0x7f) == 0x7f) b ^= 1;
        x[i] = b;
    }
}
static uint8_t *rand_dev8(size_t n, uint64_t seed)
{
    uint8_t *p;
    CK(cudaMalloc(&p, n + 16));
    fill8_kernel<<<1024, 256>>>(p, n, seed);
    CK(cudaGetLastError());
    return p;
}
static std::string list_json(const std::vector<double> &v)
{
    std::string j = "[";
    char b[32];
    for (size_t i = 0; i < v.size(); i++) {
        snprintf(b, sizeof b, "%s%.3f", i ? "," : "", v[i]);
        j += b;
    }
    return j + "]";
}

/* Decode over B sequences of N keys in 10 segments (bench_decode's layout):
 * every block fp8 against every block bf16, timed in interleaved pairs (the
 * speedup of each pair); the fp8 twin; the engine's mix (documents fp8, the
 * question's segment at offset 0 bf16). Bytes counted as read: K + V rows,
 * 1 byte an element for fp8. */
static void bench_decode_fp8(int B, int N, double copy_tbs, int sweep, float *d_inv)
{
    const int len = N / NSEG, last = N - len * (NSEG - 1);
    const size_t rows = (size_t)B * N * KV, qrows = (size_t)B * last * KV;
    const double bytes16 = 2.0 * rows * D * 2, bytes8 = 2.0 * rows * D;
    const double bytes_mix = 2.0 * (rows - qrows) * D + 2.0 * qrows * D * 2;
    const int n_sets = (int)std::max<double>(1.0, ceil(1.2e9 / bytes8));
    lz_bf16 *kp = rand_dev(rows * D * n_sets, 21), *vp = rand_dev(rows * D * n_sets, 22);
    uint8_t *kp8 = rand_dev8(rows * D * n_sets, 23), *vp8 = rand_dev8(rows * D * n_sets, 24);
    lz_bf16 *q = rand_dev((size_t)B * H * D * n_sets, 25), *o;
    CK(cudaMalloc(&o, (size_t)B * H * D * 2));
    const int NB = NSEG * ((last + 63) / 64 + 1);
    const size_t nw = (size_t)n_sets * B * KV * NB;
    std::vector<uint64_t> w(nw);
    std::vector<float> s8(nw, 0.f), smix(nw, 0.f), vsc(nw, 0.f);
    std::vector<int32_t> nb((size_t)n_sets * B * KV);
    for (int set = 0; set < n_sets; set++) {
        size_t r = (size_t)set * rows;
        for (int b = 0; b < B; b++) {
            int64_t pos = 1000;
            for (int s = 0; s < NSEG; s++) {
                const int l = s == NSEG - 1 ? last : len;
                const int64_t off = s == NSEG - 1 ? 0 : pos;
                for (int h = 0; h < KV; h++) {
                    const size_t i = ((size_t)set * B + b) * KV + h;
                    const int n0 = nb[i];
                    LZ(lz_decode_add_segment(&w[i * NB], &nb[i], NB, r + (size_t)h * l, l, off));
                    for (int k = n0; k < nb[i]; k++) {
                        s8[i * NB + k] = 0.01f; /* every block fp8 */
                        vsc[i * NB + k] = 0.01f;
                        smix[i * NB + k] = s == NSEG - 1 ? 0.f : 0.01f; /* the question's segment bf16 */
                    }
                }
                r += (size_t)KV * l;
                pos += l;
            }
        }
    }
    uint64_t *d_w;
    int32_t *d_nb;
    float *d_s8, *d_smix, *d_vs;
    CK(cudaMalloc(&d_w, nw * 8));
    CK(cudaMalloc(&d_nb, nb.size() * 4));
    CK(cudaMalloc(&d_s8, nw * 4));
    CK(cudaMalloc(&d_smix, nw * 4));
    CK(cudaMalloc(&d_vs, nw * 4));
    CK(cudaMemcpy(d_w, w.data(), nw * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_nb, nb.data(), nb.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_s8, s8.data(), nw * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_smix, smix.data(), nw * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_vs, vsc.data(), nw * 4, cudaMemcpyHostToDevice));
    lz_decode_params p;
    memset(&p, 0, sizeof p);
    p.o = o; p.k_pool = kp; p.v_pool = vp; p.inv_freq = d_inv; p.max_blocks = NB; p.batch = B;
    p.n_heads = H; p.n_kv_heads = KV; p.head_dim = D; p.rope_layout = LZ_ROPE_HALF;
    p.scale = 1.0f / sqrtf((float)D);
    size_t wb = 0;
    for (int ns = 1; ns <= 256; ns++) wb = std::max(wb, lz_decode_workspace(&p, ns));
    CK(cudaMalloc(&p.work, wb));
    p.work_bytes = wb;
    /* kind 0: bf16, 1: fp8, 2: the mix */
    auto run = [&](int kind, int lazy, int ns) {
        CK(cudaMemset(p.work, 0, wb));
        return time_us([&](int set, cudaStream_t st) {
            lz_decode_params x = p;
            x.n_split = ns;
            x.q = q + (size_t)set * B * H * D;
            x.blocks = d_w + (size_t)set * B * KV * NB;
            x.n_blocks = d_nb + (size_t)set * B * KV;
            if (kind) {
                x.k_pool8 = kp8; x.v_pool8 = vp8;
                x.k_scales = (kind == 1 ? d_s8 : d_smix) + (size_t)set * B * KV * NB;
                x.v_scales = d_vs + (size_t)set * B * KV * NB;
            }
            LZ(lazy ? lz_decode_lazy(&x, st) : lz_decode(&x, st));
        }, n_sets, 30);
    };
    int ns = lz_decode_splits(&p, n_sm);
    if (opt.decode_split >= 0) ns = opt.decode_split;
    /* pairs: fp8 lazy ("lazy" of paired) against bf16 lazy ("twin"); speedup = bf16 / fp8 */
    const Paired pr = paired([&](int f8) { return run(f8 ? 1 : 0, 1, ns); });
    std::vector<double> sp;
    for (double ov : pr.ov) sp.push_back(1.0 / (1.0 + ov / 100.0));
    std::vector<double> sps = sp;
    std::sort(sps.begin(), sps.end());
    const double t8 = pr.lazy_us, t16 = pr.twin_us, tw8 = run(1, 0, ns), tmix = run(2, 1, ns);
    const double tbs = bytes8 / t8 / 1e6;
    printf("fp8 decode B=%3d N=%5d: split %3d fp8 lazy %8.2f us (%.2f TB/s in fp8 bytes, %.1f%% of copy), bf16 lazy "
           "%8.2f us: %.2fx (pairs: median %.2fx, %.2fx .. %.2fx)\n",
           B, N, ns, t8, tbs, 100 * tbs / copy_tbs, t16, t16 / t8, sps[sps.size() / 2], sps.front(), sps.back());
    printf("  fp8 twin %.2f us; documents fp8 + question bf16 (the engine's mix) %.2f us (%.2f TB/s)\n", tw8, tmix,
           bytes_mix / tmix / 1e6);
    jrec("\"kind\":\"decode_fp8\",\"B\":%d,\"N\":%d,\"split\":%d,\"fp8_us\":%.3f,\"bf16_us\":%.3f,\"speedup\":%.4f,"
         "\"fp8_bytes\":%.0f,\"fp8_tbs\":%.4f,\"fp8_pct_copy\":%.2f,\"twin_fp8_us\":%.3f,\"mixed_us\":%.3f,"
         "\"mixed_bytes\":%.0f,\"pairs\":%d,\"speedup_pairs\":%s",
         B, N, ns, t8, t16, t16 / t8, bytes8, tbs, 100 * tbs / copy_tbs, tw8, tmix, bytes_mix, pr.rounds,
         list_json(sp).c_str());
    if (sweep) {
        int cand[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
        printf("  fp8 split sweep (lazy us):");
        for (int c : cand) {
            if (c > NB) break;
            printf(" %d:%.1f", c, run(1, 1, c));
        }
        printf("\n");
    }
    CK(cudaFree(kp)); CK(cudaFree(vp)); CK(cudaFree(kp8)); CK(cudaFree(vp8)); CK(cudaFree(q)); CK(cudaFree(o));
    CK(cudaFree(d_w)); CK(cudaFree(d_nb)); CK(cudaFree(d_s8)); CK(cudaFree(d_smix)); CK(cudaFree(d_vs));
    CK(cudaFree(p.work));
}

/* Question prefill, M rows over N cached keys in 10 segments (bench_prefill's
 * layout), the segments fp8 against bf16 (own keys bf16 in both), timed in
 * interleaved pairs; the fp8 twin. */
static void bench_prefill_fp8(int M, int N, float *d_inv, const float *inv_host)
{
    const int nseg = NSEG, len = N / NSEG;
    const int n_sets = 8;
    std::vector<lz_bf16 *> kk(n_sets), vv(n_sets), qq(n_sets);
    std::vector<uint8_t *> k8(n_sets), v8(n_sets);
    std::vector<lz_attn_segment *> d_segs(n_sets), d_segs8(n_sets);
    std::vector<float *> d_cs(n_sets);
    std::vector<int32_t> lens((size_t)nseg * KV);
    for (int s = 0; s < nseg; s++)
        for (int h = 0; h < KV; h++) lens[s * KV + h] = s == nseg - 1 ? N - len * (nseg - 1) : len;
    int32_t *d_len;
    float *d_sc;
    CK(cudaMalloc(&d_len, lens.size() * 4));
    CK(cudaMemcpy(d_len, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
    std::vector<float> sc(KV, 0.01f);
    CK(cudaMalloc(&d_sc, KV * 4));
    CK(cudaMemcpy(d_sc, sc.data(), KV * 4, cudaMemcpyHostToDevice));
    for (int set = 0; set < n_sets; set++) {
        kk[set] = rand_dev((size_t)KV * (N + M) * D, 400 + set);
        vv[set] = rand_dev((size_t)KV * (N + M) * D, 500 + set);
        qq[set] = rand_dev((size_t)H * M * D, 600 + set);
        k8[set] = rand_dev8((size_t)KV * N * D, 700 + set);
        v8[set] = rand_dev8((size_t)KV * N * D, 800 + set);
        std::vector<lz_attn_segment> sg(nseg), sg8(nseg);
        size_t r = 0;
        int64_t pos = 1000;
        for (int s = 0; s < nseg; s++) {
            const int l = lens[s * KV];
            memset(&sg[s], 0, sizeof sg[s]);
            sg[s].k = kk[set] + r * D; sg[s].v = vv[set] + r * D; sg[s].offset = pos; sg[s].cap = l;
            sg8[s] = sg[s];
            sg8[s].k8 = k8[set] + r * D; sg8[s].v8 = v8[set] + r * D; sg8[s].k_scale = d_sc; sg8[s].v_scale = d_sc;
            r += (size_t)KV * l;
            pos += l;
        }
        CK(cudaMalloc(&d_segs[set], nseg * sizeof(lz_attn_segment)));
        CK(cudaMalloc(&d_segs8[set], nseg * sizeof(lz_attn_segment)));
        CK(cudaMemcpy(d_segs[set], sg.data(), nseg * sizeof(lz_attn_segment), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_segs8[set], sg8.data(), nseg * sizeof(lz_attn_segment), cudaMemcpyHostToDevice));
        std::vector<int64_t> offs(nseg);
        for (int s = 0; s < nseg; s++) offs[s] = sg[s].offset;
        std::vector<float> cs((size_t)(nseg + 1) * D);
        lz_prefill_rope_table(cs.data(), offs.data(), nseg, 0, inv_host, D);
        CK(cudaMalloc(&d_cs[set], cs.size() * 4));
        CK(cudaMemcpy(d_cs[set], cs.data(), cs.size() * 4, cudaMemcpyHostToDevice));
    }
    lz_bf16 *o;
    CK(cudaMalloc(&o, (size_t)H * M * D * 2));
    lz_prefill_params p;
    memset(&p, 0, sizeof p);
    p.o = o; p.inv_freq = d_inv; p.seg_len = d_len; p.seg_keys = N; p.n_seg = nseg; p.n_rows = M;
    p.n_heads = H; p.n_kv_heads = KV; p.head_dim = D; p.rope_layout = LZ_ROPE_HALF;
    p.scale = 1.0f / sqrtf((float)D);
    size_t wb = 0;
    for (int ns = 1; ns <= 64; ns++) wb = std::max(wb, lz_prefill_workspace(&p, ns));
    if (wb) CK(cudaMalloc(&p.work, wb));
    p.work_bytes = wb;
    auto run = [&](int f8, int lazy) {
        return time_us([&](int set, cudaStream_t st) {
            lz_prefill_params x = p;
            x.rope_cs = d_cs[set];
            x.q = qq[set];
            x.segs = f8 ? d_segs8[set] : d_segs[set];
            x.seg_fp8 = f8;
            x.k_self = kk[set] + (size_t)KV * N * D;
            x.v_self = vv[set] + (size_t)KV * N * D;
            LZ(lazy ? lz_prefill_lazy(&x, st) : lz_prefill(&x, st));
        }, n_sets, 30);
    };
    const int ns = lz_prefill_splits(&p, n_sm);
    const Paired pr = paired([&](int f8) { return run(f8, 1); });
    std::vector<double> sp;
    for (double ov : pr.ov) sp.push_back(1.0 / (1.0 + ov / 100.0));
    std::vector<double> sps = sp;
    std::sort(sps.begin(), sps.end());
    const double t8 = pr.lazy_us, t16 = pr.twin_us, tw8 = run(1, 0);
    const double flops = 4.0 * H * D * ((double)M * N + (double)M * (M + 1) / 2);
    printf("fp8 prefill M=%4d N=%5d: split %2d fp8 lazy %8.2f us (%.1f TFLOP/s), bf16 lazy %8.2f us: %.2fx "
           "(pairs: median %.2fx, %.2fx .. %.2fx); fp8 twin %.2f us\n",
           M, N, ns, t8, flops / t8 / 1e6, t16, t16 / t8, sps[sps.size() / 2], sps.front(), sps.back(), tw8);
    jrec("\"kind\":\"prefill_fp8\",\"M\":%d,\"N\":%d,\"split\":%d,\"fp8_us\":%.3f,\"bf16_us\":%.3f,\"speedup\":%.4f,"
         "\"twin_fp8_us\":%.3f,\"flops\":%.0f,\"pairs\":%d,\"speedup_pairs\":%s",
         M, N, ns, t8, t16, t16 / t8, tw8, flops, pr.rounds, list_json(sp).c_str());
    for (int set = 0; set < n_sets; set++) {
        CK(cudaFree(kk[set])); CK(cudaFree(vv[set])); CK(cudaFree(qq[set])); CK(cudaFree(k8[set]));
        CK(cudaFree(v8[set])); CK(cudaFree(d_segs[set])); CK(cudaFree(d_segs8[set])); CK(cudaFree(d_cs[set]));
    }
    CK(cudaFree(o)); CK(cudaFree(d_len)); CK(cudaFree(d_sc));
    if (p.work) CK(cudaFree(p.work));
}

} /* namespace kc_perf */
