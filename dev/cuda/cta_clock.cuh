/* cta_clock.cuh - where a kernel's cycles go, CTA by CTA: one thread of every
 * CTA reads the SM clock at the kernel's start, at marks between its phases and
 * at its end, and the global timer at the start and the end; the host prints
 * each phase's mean cycles, the mean and longest CTA, and the span of the
 * launch. For a kernel under study, in a copy of it here in dev/ (the product's
 * kernels in kernels/ carry no instrumentation):
 *
 *   __device__ CtaClock g_clk[CTA_CLOCK_CTAS];        // once, beside the kernel
 *   CTA_CLOCK_BEGIN(c);                               // first statement of the kernel
 *   CTA_CLOCK_MARK(c, 1); ... CTA_CLOCK_MARK(c, n);   // after each phase (n < CTA_CLOCK_MARKS)
 *   CTA_CLOCK_END(c, g_clk, n + 1);                   // last statement (every thread reaches it)
 *   host: cta_clock_report(g_clk, n_ctas, names, n + 1);
 *
 * A mark costs a clock read and keeps its register live until the end, and
 * where the compiler may move it is not fixed: compare two copies of a kernel
 * marked alike, not a marked kernel with an unmarked one. CTA_CLOCK_TID picks
 * the thread (default 0). Example: cta_clock_demo.cu.
 */
#ifndef CTA_CLOCK_CUH
#define CTA_CLOCK_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#define CTA_CLOCK_MARKS 8     /* clock readings per CTA: start, marks, end */
#define CTA_CLOCK_CTAS 16384  /* CTAs recorded per launch (later ones are not) */
#ifndef CTA_CLOCK_TID
#define CTA_CLOCK_TID 0
#endif

struct CtaClock {
    unsigned long long t[CTA_CLOCK_MARKS]; /* SM cycles: t[0] start, t[1..] marks, t[n-1] end */
    unsigned long long g0, g1;             /* global timer (ns) at start and end */
    unsigned sm, n;                        /* the CTA's SM; readings in t */
};

#define CTA_CLOCK_BEGIN(c)                                                                 \
    unsigned long long c##_t[CTA_CLOCK_MARKS] = {0}, c##_g0;                               \
    c##_t[0] = clock64();                                                                  \
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(c##_g0))
#define CTA_CLOCK_MARK(c, i) (c##_t[(i)] = clock64())
#define CTA_CLOCK_END(c, buf, nr)                                                           \
    do {                                                                                   \
        const unsigned long long t_end_ = clock64();                                       \
        unsigned long long g1_;                                                            \
        unsigned sm_;                                                                      \
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g1_));                            \
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm_));                                   \
        const size_t cta_ = ((size_t)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x; \
        if (threadIdx.x == CTA_CLOCK_TID && threadIdx.y == 0 && threadIdx.z == 0 && cta_ < CTA_CLOCK_CTAS) { \
            CtaClock *d_ = &(buf)[cta_];                                                   \
            for (int i_ = 0; i_ < (nr) - 1; i_++) d_->t[i_] = c##_t[i_];                    \
            d_->t[(nr) - 1] = t_end_;                                                       \
            d_->g0 = c##_g0; d_->g1 = g1_; d_->sm = sm_; d_->n = (nr);                      \
        }                                                                                  \
    } while (0)

/* Mean cycles of each phase (names[i]: the phase ending at reading i, i = 1..n-1),
 * mean and longest CTA, the launch's span and the SMs used, from the device array
 * sym (the __device__ CtaClock array) after a launch of n_ctas CTAs. */
template <class SYM> static int cta_clock_report(const SYM &sym, int n_ctas, const char *const *names, int n)
{
    static CtaClock h[CTA_CLOCK_CTAS];
    if (n_ctas > CTA_CLOCK_CTAS) n_ctas = CTA_CLOCK_CTAS;
    cudaError_t e = cudaMemcpyFromSymbol(h, sym, sizeof(CtaClock) * (size_t)n_ctas);
    if (e != cudaSuccess) return (int)e;
    double ph[CTA_CLOCK_MARKS] = {0}, tot = 0, mx = 0;
    unsigned long long g0 = ~0ull, g1 = 0;
    static unsigned char sms[1024];
    int n_sm = 0;
    for (int c = 0; c < n_ctas; c++) {
        for (int i = 1; i < n; i++) ph[i] += (double)(h[c].t[i] - h[c].t[i - 1]);
        const double all = (double)(h[c].t[n - 1] - h[c].t[0]);
        tot += all;
        mx = all > mx ? all : mx;
        g0 = h[c].g0 < g0 ? h[c].g0 : g0;
        g1 = h[c].g1 > g1 ? h[c].g1 : g1;
        if (h[c].sm < sizeof sms && !sms[h[c].sm]) sms[h[c].sm] = 1, n_sm++;
    }
    printf("%d CTAs on %d SMs, mean cycles a CTA:", n_ctas, n_sm);
    for (int i = 1; i < n; i++) printf(" %s %.0f,", names[i], ph[i] / n_ctas);
    printf(" total %.0f (longest %.0f); span %.2f us\n", tot / n_ctas, mx, (g1 - g0) / 1e3);
    for (unsigned i = 0; i < sizeof sms; i++) sms[i] = 0;
    return 0;
}

#endif /* CTA_CLOCK_CUH */
