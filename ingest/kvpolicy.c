/* kvpolicy.c - question-agnostic KV eviction at ingest (see kvpolicy.h):
 * observation-window scores by GEMM per (layer, kv head), max-pooling,
 * SnapKV / Ada / Pyramid allocation, in-place compaction.
 *
 * Legend: L = layers, H/KV = heads, G = H / KV, d = head_dim, n = document
 * tokens, w = window, m = n - w candidates, s = prefix tokens.
 */
#include "ingest/kvpolicy.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const NAMES[] = {"none", "snapkv", "ada-snapkv", "pyramidkv", "ada-pyramidkv"};

void lz_kvpolicy_default(lz_kvpolicy *p)
{
    memset(p, 0, sizeof *p);
    p->kind = LZ_KVPOLICY_NONE;
    p->window = LZ_KVPOLICY_DEFAULT_WINDOW;
    p->kernel = LZ_KVPOLICY_DEFAULT_KERNEL;
    p->alpha = LZ_KVPOLICY_DEFAULT_ALPHA;
    p->agg = LZ_KVPOLICY_AGG_MEAN;
    p->value_power = 1.0f;
}

uint32_t lz_kvpolicy_text_hash(const char *text)
{
    uint32_t h = 2166136261u;
    if (!text || !*text) return 0;
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) h = (h ^ *c) * 16777619u;
    return h ? h : 1;
}

const char *lz_kvpolicy_name(int kind) { return kind >= 0 && kind <= 4 ? NAMES[kind] : "?"; }

int lz_kvpolicy_parse_name(const char *s)
{
    for (int i = 0; i <= 4; i++)
        if (s && !strcmp(s, NAMES[i])) return i;
    return -1;
}

int lz_kvpolicy_parse_budget(const char *s, lz_kvpolicy *p)
{
    if (!s || !*s) return -1;
    char *end;
    size_t n = strlen(s);
    if (s[n - 1] == 't') {
        long v = strtol(s, &end, 10);
        if (end != s + n - 1 || v < 1 || v > (1 << 24)) return -1;
        p->budget_tokens = (int)v;
        p->budget_frac = 0;
        return 0;
    }
    double f = strtod(s, &end);
    if (*end || end == s || !(f > 0) || f > 1) return -1;
    p->budget_frac = f;
    p->budget_tokens = 0;
    return 0;
}

void lz_kvpolicy_budget_str(const lz_kvpolicy *p, char *buf, size_t n)
{
    if (p->kind == LZ_KVPOLICY_NONE) snprintf(buf, n, "%s", "");
    else if (p->budget_tokens > 0) snprintf(buf, n, "%dt", p->budget_tokens);
    else snprintf(buf, n, "%g", p->budget_frac);
}

void lz_kvpolicy_spec(const lz_kvpolicy *p, char *buf, size_t n)
{
    if (p->kind == LZ_KVPOLICY_NONE) { snprintf(buf, n, "%s", ""); return; }
    char b[32];
    lz_kvpolicy_budget_str(p, b, sizeof b);
    char probe[24] = "";
    if (p->probe == LZ_KVPOLICY_PROBE_RECONSTRUCT) snprintf(probe, sizeof probe, " recon");
    else if (p->probe == LZ_KVPOLICY_PROBE_SELF) snprintf(probe, sizeof probe, " self");
    else if (p->probe == LZ_KVPOLICY_PROBE_LEARNED) snprintf(probe, sizeof probe, " learned=%08x", (unsigned)p->scorer_hash);
    else if (p->probe && p->probe_text) snprintf(probe, sizeof probe, " probe=%08x", (unsigned)p->probe_text);
    else if (p->probe) snprintf(probe, sizeof probe, " probe");
    char vnorm[32] = "";
    if (p->value_norm && p->value_power != 1.0f && p->value_power != 0.0f) snprintf(vnorm, sizeof vnorm, " vnorm=%g", (double)p->value_power);
    else if (p->value_norm) snprintf(vnorm, sizeof vnorm, " vnorm");
    snprintf(buf, n, "%s b=%s w=%d k=%d a=%g %s%s%s%s", lz_kvpolicy_name(p->kind), b, p->window, p->kernel,
             (double)p->alpha, p->agg == LZ_KVPOLICY_AGG_MAX ? "max" : "mean", probe, vnorm,
             p->scope_model ? " model" : "");
}

int lz_kvpolicy_parse_spec(const char *spec, lz_kvpolicy *p)
{
    lz_kvpolicy_default(p);
    if (!spec || !*spec || !strcmp(spec, "none")) return 0;
    char name[32], b[32], agg[8], tok[40];
    int w, k, used = 0, n;
    float a;
    if (sscanf(spec, "%31s b=%31s w=%d k=%d a=%f %7s%n", name, b, &w, &k, &a, agg, &used) != 6 || !used) return -1;
    int kind = lz_kvpolicy_parse_name(name);
    if (kind <= 0 || lz_kvpolicy_parse_budget(b, p) || w < 1 || k < 1 || !(k & 1) || a < 0 || a > 1) return -1;
    if (strcmp(agg, "mean") && strcmp(agg, "max")) return -1;
    /* optional tokens, in this order, each at most once: a probe (probe, probe=<8 hex>,
     * recon, self, learned=<8 hex>), vnorm or vnorm=P (P != 1), model; nothing else */
    int stage = 0;
    for (const char *c = spec + used; sscanf(c, " %39s%n", tok, &n) == 1; c += n) {
        unsigned hash = 0;
        char tail;
        if (stage < 1 && !strcmp(tok, "probe")) p->probe = LZ_KVPOLICY_PROBE_CUE, stage = 1;
        else if (stage < 1 && !strcmp(tok, "recon")) p->probe = LZ_KVPOLICY_PROBE_RECONSTRUCT, stage = 1;
        else if (stage < 1 && !strcmp(tok, "self")) p->probe = LZ_KVPOLICY_PROBE_SELF, stage = 1;
        else if (stage < 1 && strlen(tok) == 16 && sscanf(tok, "learned=%8x%c", &hash, &tail) == 1 && hash != 0)
            p->probe = LZ_KVPOLICY_PROBE_LEARNED, p->scorer_hash = (uint32_t)hash, stage = 1;
        else if (stage < 1 && strlen(tok) == 14 && sscanf(tok, "probe=%8x%c", &hash, &tail) == 1 && hash != 0)
            p->probe = LZ_KVPOLICY_PROBE_CUE, p->probe_text = (uint32_t)hash, stage = 1;
        else if (stage < 2 && !strcmp(tok, "vnorm")) p->value_norm = 1, stage = 2;
        else if (stage < 2 && !strncmp(tok, "vnorm=", 6) && lz_kvpolicy_parse_power(tok + 6, &p->value_power) == 0 &&
                 p->value_power != 1.0f)
            p->value_norm = 1, stage = 2;
        else if (stage < 3 && !strcmp(tok, "model") && kind == LZ_KVPOLICY_ADA_SNAPKV) p->scope_model = 1, stage = 3;
        else return -1;
    }
    p->kind = kind;
    p->window = w;
    p->kernel = k;
    p->alpha = a;
    p->agg = strcmp(agg, "max") ? LZ_KVPOLICY_AGG_MEAN : LZ_KVPOLICY_AGG_MAX;
    return 0;
}

int lz_kvpolicy_parse_power(const char *s, float *power)
{
    char *end;
    double x = s && *s ? strtod(s, &end) : -1;
    if (!s || !*s || *end || !(x > 0 && x <= 16)) return -1;
    *power = (float)x;
    return 0;
}

int lz_kvpolicy_budget(const lz_kvpolicy *p, int n)
{
    if (p->kind == LZ_KVPOLICY_NONE || n <= 0) return 0;
    long B = p->budget_tokens > 0 ? p->budget_tokens : lround(p->budget_frac * n);
    if (B < 1) B = 1;
    if (p->probe) return n > B ? (int)B : 0;
    if ((long)n < p->window + B) return 0; /* short: stored whole */
    return B < p->window ? p->window : (int)B; /* the window is always kept */
}

void lz_kvpolicy_doc_spec(const lz_kvpolicy *p, int n, char *buf, size_t len)
{
    if (lz_kvpolicy_budget(p, n) > 0) lz_kvpolicy_spec(p, buf, len);
    else snprintf(buf, len, "%s", "");
}

/* ---- scoring ---- */

void lz_kvpolicy_maxpool(float *out, const float *x, int m, int kernel)
{
    int h = kernel / 2;
    for (int j = 0; j < m; j++) {
        int a = j - h < 0 ? 0 : j - h, b = j + h >= m ? m - 1 : j + h;
        float mx = x[a];
        for (int t = a + 1; t <= b; t++) mx = x[t] > mx ? x[t] : mx;
        out[j] = mx;
    }
}

static int bad_params(const lz_kvscore_params *p)
{
    return !p->q || !p->k || p->n <= 0 || p->w < 1 || p->m < 0 || p->m > p->n || (p->m ? p->w > p->n : p->w >= p->n) ||
           p->k_stride < p->n || p->L < 1 || p->KV < 1 ||
           p->H < p->KV || p->H % p->KV || p->d < 1 || p->n_prefix < 0 || (p->n_prefix > 0 && !p->pk) ||
           (p->n_prefix > 0 && p->pk_stride < p->n_prefix) || p->kernel < 1 || (p->v && p->v_stride < p->n);
}

/* The value-aware weights vn (L, KV, m): the mean |v| of value row j of
 * (layer l, kv head g) to the power v_power, divided by the mean of that over the layer's heads
 * and rows (1 where a layer's values are all zero). The division scales a
 * whole layer alike, so no selection within a layer changes; it makes layers
 * comparable for the model scope (values grow with depth: raw weights handed
 * the deep layers most of the budget). */
static void value_weights(float *vn, const lz_kvscore_params *p, int m)
{
    for (int l = 0; l < p->L; l++) {
        double t = 0;
        float *w = vn + (size_t)l * p->KV * m;
        for (int g = 0; g < p->KV; g++)
            for (int j = 0; j < m; j++) {
                const float *v = p->v + (((size_t)l * p->KV + g) * (size_t)p->v_stride + j) * p->d;
                float a = 0;
                for (int e = 0; e < p->d; e++) a += fabsf(v[e]);
                a /= (float)p->d;
                w[(size_t)g * m + j] = p->v_power == 0.0f || p->v_power == 1.0f ? a : powf(a, p->v_power);
                t += w[(size_t)g * m + j];
            }
        t /= (double)p->KV * m;
        const float inv = t > 0 ? (float)(1.0 / t) : 1.0f;
        for (size_t i = 0; i < (size_t)p->KV * m; i++) w[i] *= inv;
    }
}

/* e^x for x <= 0 (softmax after subtracting the row maximum), branch-free so
 * the loops below vectorize: x = k ln2 + r, |r| <= ln2 / 2, e^r by its Taylor
 * series to r^7 (relative error < 1e-7, below fp32 rounding); inputs under
 * -87 give e^-87 ~ 1.6e-38 instead of denormals (libm's expf spends its time
 * on those slow paths here). */
/* lets GCC if-convert the clamp below and vectorize the softmax loops (no
 * FP exception flags are read anywhere) */
#pragma GCC optimize("no-trapping-math")
static inline float exp_neg(float x)
{
    x = x < -87.0f ? -87.0f : x;
    /* round x / ln2 to the nearest integer k by the 1.5 * 2^23 trick: k sits in t's low mantissa bits */
    union { float f; int32_t i; } t = {.f = x * 1.44269504088896341f + 12582912.0f}, u;
    float k = t.f - 12582912.0f;
    float r = x - k * 0.693145751953125f - k * 1.42860682030941723e-6f; /* ln2 split in two */
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.66666672e-1f + r * (4.16666679e-2f + r * (8.33333377e-3f +
              r * (1.38888892e-3f + r * 1.98412701e-4f))))));
    u.i = (t.i - 0x4B400000 + 127) << 23; /* 2^k */
    return p * u.f;
}

/* acc (G, m) summed window weights per query head -> aggregated (m), times
 * the value weights vn (m) when given, pooled. */
static void finish_head(float *scores, float *raw, const float *acc, const float *vn, int G, int m, int agg,
                        int kernel, float *tmp)
{
    for (int j = 0; j < m; j++) {
        float a = acc[j];
        for (int hh = 1; hh < G; hh++) {
            float x = acc[(size_t)hh * m + j];
            a = agg == LZ_KVPOLICY_AGG_MAX ? (x > a ? x : a) : a + x;
        }
        tmp[j] = (agg == LZ_KVPOLICY_AGG_MAX ? a : a / (float)G) * (vn ? vn[j] : 1.0f);
    }
    if (raw) memcpy(raw, tmp, (size_t)m * sizeof(float));
    lz_kvpolicy_maxpool(scores, tmp, m, kernel);
}

int lz_kvpolicy_mass(const lz_kvscore_params *p, float *mass)
{
    if (bad_params(p)) return -1;
    const int L = p->L, H = p->H, KV = p->KV, G = H / KV, d = p->d, n = p->n, w = p->w, s = p->n_prefix;
    const int m = p->m ? p->m : n - w, nk = s + n, rows = G * w; /* keys per row; matrix rows r = hh * w + t */
    const float scale = 1.0f / sqrtf((float)d);
    const size_t per_task = (size_t)rows * d + (size_t)rows * nk;
    int failed = 0;
#pragma omp parallel
    {
        float *buf = malloc(per_task * sizeof(float));
        if (!buf) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(dynamic, 1)
        for (int task = 0; task < L * KV; task++) {
            if (!buf) continue;
            const int l = task / KV, g = task % KV;
            float *Q = buf, *S = Q + (size_t)rows * d, *acc = mass + (size_t)task * G * m;
            for (int hh = 0; hh < G; hh++)
                for (int t = 0; t < w; t++)
                    memcpy(Q + ((size_t)hh * w + t) * d, p->q + (((size_t)l * w + t) * H + g * G + hh) * d,
                           (size_t)d * sizeof(float));
            if (s > 0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, s, d, scale, Q, d,
                            p->pk + ((size_t)l * KV + g) * (size_t)p->pk_stride * d, d, 0.0f, S, nk);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, n, d, scale, Q, d,
                        p->k + ((size_t)l * KV + g) * (size_t)p->k_stride * d, d, 0.0f, S + s, nk);
            memset(acc, 0, (size_t)G * m * sizeof(float));
            for (int r = 0; r < rows; r++) {
                const int t = r % w, visible = s + n - w + t + 1; /* row t is document token n - w + t */
                const int mv = visible - s < m ? visible - s : m;  /* the candidates it saw */
                float *x = S + (size_t)r * nk, mx = -INFINITY, sum = 0;
#pragma omp simd reduction(max : mx)
                for (int j = 0; j < visible; j++) mx = x[j] > mx ? x[j] : mx;
#pragma omp simd
                for (int j = 0; j < visible; j++) x[j] = exp_neg(x[j] - mx);
#pragma omp simd reduction(+ : sum)
                for (int j = 0; j < visible; j++) sum += x[j];
                float inv = 1.0f / sum, *a = acc + (size_t)(r / w) * m;
#pragma omp simd
                for (int j = 0; j < mv; j++) a[j] += x[s + j] * inv;
            }
        }
        free(buf);
    }
    return failed ? -1 : 0;
}

/* scores and raw (L, KV, m) from per-head masses (L, KV, G, m): the group's
 * heads aggregated (agg), times the value weights when p->v is set, pooled. */
static int finish_all(const lz_kvscore_params *p, const float *mass, int G, int agg, int m, float *scores, float *raw)
{
    float *vw = p->v ? malloc((size_t)p->L * p->KV * m * sizeof(float)) : NULL, *tmp = malloc((size_t)m * sizeof(float));
    if ((p->v && !vw) || !tmp) {
        free(vw);
        free(tmp);
        return -1;
    }
    if (vw) value_weights(vw, p, m);
    for (int task = 0; task < p->L * p->KV; task++) {
        const size_t o = (size_t)task * m;
        finish_head(scores + o, raw ? raw + o : NULL, mass + (size_t)task * G * m, vw ? vw + o : NULL, G, m, agg,
                    p->kernel, tmp);
    }
    free(vw);
    free(tmp);
    return 0;
}

int lz_kvpolicy_finish(const lz_kvscore_params *p, const float *mass, float *scores, float *raw)
{
    if (bad_params(p)) return -1;
    return finish_all(p, mass, p->H / p->KV, p->agg, p->m ? p->m : p->n - p->w, scores, raw);
}

int lz_kvpolicy_score(const lz_kvscore_params *p, float *scores, float *raw)
{
    if (bad_params(p)) return -1;
    const int G = p->H / p->KV, m = p->m ? p->m : p->n - p->w;
    float *mass = malloc((size_t)p->L * p->KV * G * m * sizeof(float));
    const int rc = !mass || lz_kvpolicy_mass(p, mass) || lz_kvpolicy_finish(p, mass, scores, raw) ? -1 : 0;
    free(mass);
    return rc;
}

int lz_kvpolicy_weigh(const lz_kvscore_params *p, const float *attn, float *scores, float *raw)
{
    const int m = p->m;
    if (m < 1 || p->L < 1 || p->KV < 1 || p->d < 1 || p->kernel < 1 || (p->v && p->v_stride < m)) return -1;
    return finish_all(p, attn, 1, LZ_KVPOLICY_AGG_MEAN, m, scores, raw);
}

int lz_kvpolicy_score_naive(const lz_kvscore_params *p, float *scores, float *raw)
{
    if (bad_params(p)) return -1;
    const int L = p->L, H = p->H, KV = p->KV, G = H / KV, d = p->d, n = p->n, w = p->w, s = p->n_prefix;
    const int m = p->m ? p->m : n - w;
    float *logit = malloc((size_t)(s + n) * sizeof(float));
    float *acc = malloc((size_t)G * m * sizeof(float)), *tmp = malloc((size_t)m * sizeof(float));
    if (!logit || !acc || !tmp) { free(logit); free(acc); free(tmp); return -1; }
    for (int l = 0; l < L; l++) {
        /* value-aware: the layer's mean of (mean |v| of a row)^P over its heads and candidate rows */
        const double pw = p->v_power == 0.0f ? 1.0 : (double)p->v_power;
        double lt = 0;
        for (int g2 = 0; p->v && g2 < KV; g2++)
            for (int j2 = 0; j2 < m; j2++) {
                double r = 0;
                for (int e = 0; e < d; e++) r += fabs(p->v[(((size_t)l * KV + g2) * p->v_stride + j2) * d + e]);
                lt += pow(r / d, pw);
            }
        lt /= (double)KV * m;
        for (int g = 0; g < KV; g++) {
            memset(acc, 0, (size_t)G * m * sizeof(float));
            for (int hh = 0; hh < G; hh++)
                for (int t = 0; t < w; t++) {
                    const float *q = p->q + (((size_t)l * w + t) * H + g * G + hh) * d;
                    int nv = 0;
                    double mx = -INFINITY, sum = 0;
                    for (int j = 0; j < s; j++) {
                        const float *k = p->pk + (((size_t)l * KV + g) * p->pk_stride + j) * d;
                        double x = 0;
                        for (int e = 0; e < d; e++) x += (double)q[e] * k[e];
                        logit[nv++] = (float)(x / sqrt((double)d));
                    }
                    for (int j = 0; j <= n - w + t; j++) {
                        const float *k = p->k + (((size_t)l * KV + g) * p->k_stride + j) * d;
                        double x = 0;
                        for (int e = 0; e < d; e++) x += (double)q[e] * k[e];
                        logit[nv++] = (float)(x / sqrt((double)d));
                    }
                    for (int j = 0; j < nv; j++) mx = logit[j] > mx ? logit[j] : mx;
                    for (int j = 0; j < nv; j++) sum += exp(logit[j] - mx);
                    for (int j = 0; j < m && j <= n - w + t; j++)
                        acc[(size_t)hh * m + j] += (float)(exp(logit[s + j] - mx) / sum);
                }
            size_t o = ((size_t)l * KV + g) * (size_t)m;
            for (int j = 0; j < m; j++) { /* aggregation by the obvious loop */
                float a = p->agg == LZ_KVPOLICY_AGG_MAX ? -INFINITY : 0;
                for (int hh = 0; hh < G; hh++) {
                    float x = acc[(size_t)hh * m + j];
                    if (p->agg == LZ_KVPOLICY_AGG_MAX) a = x > a ? x : a;
                    else a += x / (float)G;
                }
                if (p->v) { /* value-aware: times mean |v| over the layer's mean of it, by the obvious loops */
                    double vs = 0;
                    for (int e = 0; e < d; e++) vs += fabs(p->v[(((size_t)l * KV + g) * p->v_stride + j) * d + e]);
                    a *= (float)(pow(vs / d, pw) / (lt > 0 ? lt : 1.0));
                }
                tmp[j] = a;
            }
            if (raw) memcpy(raw + o, tmp, (size_t)m * sizeof(float));
            for (int j = 0; j < m; j++) {
                float mx = -INFINITY;
                for (int t = j - p->kernel / 2; t <= j + p->kernel / 2; t++)
                    if (t >= 0 && t < m && tmp[t] > mx) mx = tmp[t];
                scores[o + j] = mx;
            }
        }
    }
    free(logit);
    free(acc);
    free(tmp);
    return 0;
}

/* ---- allocation ---- */

void lz_kvpolicy_layer_budgets(int *b_l, int L, int b, int m, int pyramid)
{
    long total = (long)L * b, cap = (long)L * m;
    if (total > cap) total = cap;
    if (!pyramid || L == 1) {
        for (int l = 0; l < L; l++) b_l[l] = (int)(total / L) + (l < total % L ? 1 : 0);
    } else {
        /* PyramidKV: from max_num (layer 0) down to min_num (last), mean b */
        double mean = (double)total / L, lo = mean / LZ_KVPOLICY_PYRAMID_BETA, hi = 2 * mean - lo;
        double step = (hi - lo) / (L - 1);
        long sum = 0;
        for (int l = 0; l < L; l++) { b_l[l] = (int)floor(hi - step * l); sum += b_l[l]; }
        /* largest fractional parts first (upper layers on ties) get the remainder */
        while (sum < total) {
            int best = -1;
            double bf = -1;
            for (int l = 0; l < L; l++) {
                double f = (hi - step * l) - b_l[l];
                if (f > bf) { bf = f; best = l; }
            }
            b_l[best]++;
            sum++;
        }
        for (int l = L - 1; sum > total && l >= 0; l--) /* float rounding only */
            if (b_l[l] > 0) { b_l[l]--; sum--; }
    }
    /* cap at m; move the excess to layers with room, upper layers first */
    long excess = 0;
    for (int l = 0; l < L; l++)
        if (b_l[l] > m) { excess += b_l[l] - m; b_l[l] = m; }
    for (int l = 0; l < L && excess > 0; l++) {
        long room = m - b_l[l], t = room < excess ? room : excess;
        b_l[l] += (int)t;
        excess -= t;
    }
}

typedef struct {
    float score, tie;
    int head, pos;
} cand;

static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->tie != y->tie) return x->tie > y->tie ? -1 : 1;
    if (x->head != y->head) return x->head - y->head;
    return x->pos - y->pos;
}

int lz_kvpolicy_select(unsigned char *keep, int *head_budget, const float *scores, const float *tie, int KV, int m,
                       int b, int adaptive, float alpha)
{
    memset(keep, 0, (size_t)KV * m);
    memset(head_budget, 0, (size_t)KV * sizeof(int));
    if (b <= 0 || m <= 0) return 0;
    if (b > m) b = m;
    cand *c = malloc((size_t)KV * m * sizeof *c);
    if (!c) return -1;
    int reserve = adaptive ? (int)floorf(alpha * (float)b + 1e-6f) : b;
    if (reserve > b) reserve = b;
    /* every head: its own top `reserve` (all of b for SnapKV) */
    for (int h = 0; h < KV; h++) {
        cand *ch = c + (size_t)h * m;
        for (int j = 0; j < m; j++)
            ch[j] = (cand){scores[(size_t)h * m + j], tie ? tie[(size_t)h * m + j] : 0.0f, h, j};
        qsort(ch, (size_t)m, sizeof *ch, cand_cmp);
        for (int i = 0; i < reserve; i++) keep[(size_t)h * m + ch[i].pos] = 1;
        head_budget[h] = reserve;
    }
    if (adaptive) { /* the rest: the joint top over all heads of what is left */
        long left = (long)KV * b - (long)KV * reserve, nr = 0;
        for (int h = 0; h < KV; h++)
            for (int i = reserve; i < m; i++) c[nr++] = c[(size_t)h * m + i];
        qsort(c, (size_t)nr, sizeof *c, cand_cmp);
        for (long i = 0; i < left && i < nr; i++) {
            keep[(size_t)c[i].head * m + c[i].pos] = 1;
            head_budget[c[i].head]++;
        }
    }
    free(c);
    return 0;
}

int lz_kvpolicy_plan(const lz_kvpolicy *p, const float *scores, const float *tie, int L, int KV, int n, int *n_kept,
                     int *rows)
{
    const int B = lz_kvpolicy_budget(p, n), w = p->probe ? 0 : p->window, m = n - w;
    if (B <= 0 || m <= 0) return -1;
    const int pyramid = p->kind == LZ_KVPOLICY_PYRAMIDKV || p->kind == LZ_KVPOLICY_ADA_PYRAMIDKV;
    const int adaptive = p->kind == LZ_KVPOLICY_ADA_SNAPKV || p->kind == LZ_KVPOLICY_ADA_PYRAMIDKV;
    /* model scope (Ada-SnapKV): one joint selection over all L * KV heads */
    const int joint = adaptive && !pyramid && p->scope_model, NH = joint ? L * KV : KV;
    int *b_l = malloc((size_t)L * sizeof(int)), *hb = malloc((size_t)NH * sizeof(int));
    unsigned char *keep = malloc((size_t)NH * m);
    if (!b_l || !hb || !keep) { free(b_l); free(hb); free(keep); return -1; }
    lz_kvpolicy_layer_budgets(b_l, L, B - w, m, pyramid);
    int rc = joint ? lz_kvpolicy_select(keep, hb, scores, tie, L * KV, m, B - w < m ? B - w : m, 1, p->alpha) : 0;
    for (int l = 0; l < L && !rc; l++) {
        size_t o = (size_t)l * KV * m;
        if (!joint)
            rc = lz_kvpolicy_select(keep, hb, scores + o, tie ? tie + o : NULL, KV, m, b_l[l], adaptive, p->alpha);
        const unsigned char *kl = joint ? keep + o : keep;
        for (int h = 0; h < KV && !rc; h++) {
            int *r = rows + ((size_t)l * KV + h) * n, k = 0;
            for (int j = 0; j < m; j++)
                if (kl[(size_t)h * m + j]) r[k++] = j;
            for (int j = m; j < n; j++) r[k++] = j; /* the window */
            n_kept[l * KV + h] = k;
        }
    }
    free(b_l);
    free(hb);
    free(keep);
    return rc;
}

void lz_kvpolicy_compact(float *k, float *v, int T, int L, int KV, int d, int n, const int *n_kept, const int *rows)
{
    for (int lh = 0; lh < L * KV; lh++) {
        float *kb = k + (size_t)lh * T * d, *vb = v + (size_t)lh * T * d;
        const int *r = rows + (size_t)lh * n;
        for (int i = 0; i < n_kept[lh]; i++) {
            if (r[i] == i) continue; /* r ascending, r[i] >= i: forward copies never clobber a source */
            memcpy(kb + (size_t)i * d, kb + (size_t)r[i] * d, (size_t)d * sizeof(float));
            memcpy(vb + (size_t)i * d, vb + (size_t)r[i] * d, (size_t)d * sizeof(float));
        }
    }
}
