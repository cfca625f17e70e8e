/* kvpolicy.h - KV eviction at ingest (SnapKV, Ada-SnapKV, PyramidKV,
 * Ada-PyramidKV): a document is compressed once, when it is encoded, and
 * only the kept keys and values of every (layer, kv head) are stored. No
 * question exists at ingest, so the observation window is the document's own
 * tail (question-agnostic). Scoring, pooling, GQA aggregation, budget
 * allocation and in-place compaction live here; encode.c calls them.
 *
 * Legend: L = layers, H = query heads, KV = kv heads (GQA group G = H / KV),
 * d = head_dim, n = document tokens, w = observation window (the last w
 * tokens, always kept), m = n - w candidate keys per head, s = prefix tokens
 * (attention sink, always present at query time, never evicted), B = kept
 * tokens per kv head on average (window included), b = B - w selected ones.
 *
 *   scores[l][g][j] = pool_k( agg_{h in group g} sum_{r < w} softmax_r(q_r . K / sqrt d)[j] ),  j < m
 *   (value-aware option: the pooled quantity is multiplied by (mean_e |V[j][e]|)^P first, over
 *   its layer's mean of that: a per-layer constant, so only the model scope sees it)
 *
 * The softmax of window row r runs over every key it saw when encoded (the
 * prefix and the document up to itself), so a head whose attention sits on
 * the sink scores the document's keys low, as the Ada-KV L1 bound wants.
 *
 * Allocation of a layer's selected total KV * b_l:
 *   SnapKV      every head keeps its own top b_l
 *   Ada         every head first keeps its top floor(alpha * b_l), then the
 *               rest is the top of all remaining candidates of ALL heads of
 *               the layer jointly; a head's budget is what it wins
 *   Pyramid     b_l decreases linearly with depth (PyramidKV, beta = 20),
 *               sum over layers = L * b
 *   model scope (Ada-SnapKV option) the joint top runs over all L * KV heads
 *               at once: layers get unequal budgets too
 * Kept tokens stay in their original order; stored keys carry their own
 * rotation R(s + j), so no per-token position is stored.
 *
 * Probe variants: the window is a text run after the document, scored like
 * the tail window and then dropped; every document token is a candidate and
 * nothing is kept by force. CUE: the prompt's question cue. RECONSTRUCT: the
 * document itself again (spec suffix " recon"). SELF: no probe is run; the
 * window is every document token's own query as encoded (H2O-style: key j
 * scored by the attention mass the later tokens j .. n-1 gave it; spec suffix
 * " self"): the scores cost one more pass of attention, no forward pass.
 */
#ifndef LZ_KVPOLICY_H
#define LZ_KVPOLICY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    LZ_KVPOLICY_NONE = 0,
    LZ_KVPOLICY_SNAPKV = 1,
    LZ_KVPOLICY_ADA_SNAPKV = 2,
    LZ_KVPOLICY_PYRAMIDKV = 3,
    LZ_KVPOLICY_ADA_PYRAMIDKV = 4
} lz_kvpolicy_kind;

enum { LZ_KVPOLICY_AGG_MEAN = 0, LZ_KVPOLICY_AGG_MAX = 1 };
enum {
    LZ_KVPOLICY_PROBE_NONE = 0,
    LZ_KVPOLICY_PROBE_CUE = 1,
    LZ_KVPOLICY_PROBE_RECONSTRUCT = 2,
    LZ_KVPOLICY_PROBE_SELF = 3,
    LZ_KVPOLICY_PROBE_LEARNED = 4
};

#define LZ_KVPOLICY_DEFAULT_WINDOW 32
#define LZ_KVPOLICY_DEFAULT_KERNEL 7
#define LZ_KVPOLICY_DEFAULT_ALPHA 0.2f
#define LZ_KVPOLICY_PYRAMID_BETA 20.0
#define LZ_KVPOLICY_SPEC_MAX 128

typedef struct {
    int kind;            /* lz_kvpolicy_kind */
    double budget_frac;  /* > 0: B = round(frac * n) ("0.2"); 0 when budget_tokens is used */
    int budget_tokens;   /* > 0: B tokens per kv head on average ("128t") */
    int window;          /* w, >= 1 */
    int kernel;          /* max-pool kernel along positions, odd, >= 1 (1 = no pooling) */
    float alpha;         /* Ada safeguard: share of b reserved per head, in [0, 1] */
    int agg;             /* GQA: LZ_KVPOLICY_AGG_MEAN or _MAX over a kv head's query heads */
    int probe;           /* LZ_KVPOLICY_PROBE_*: 0 the document's tail is the observation
                          * window; CUE: a fixed probe text run after the document (the
                          * prompt's question cue, lz_encoder_set_probe); RECONSTRUCT: the
                          * document's own tokens run again after it (KVzip-style: each key
                          * is scored by the attention it gets while the model re-reads the
                          * passage; costs about one more encoding); SELF: every document
                          * token's own query, causal (no extra forward pass). With a probe every
                          * document token is a candidate, the probe's keys are not stored,
                          * B counts only document tokens */
    uint32_t probe_text; /* CUE: lz_kvpolicy_text_hash of the question in the cue (0 = the
                          * empty question; spec " probe", else " probe=%08x") */
    int value_norm;      /* 1: a key's score is its attention times the mean |v| of its value
                          * row (to the power value_power) over the layer's mean of that
                          * (value-aware scoring, as VATP; spec suffix " vnorm", or
                          * " vnorm=P" when value_power P != 1) */
    float value_power;   /* P in (0, 16], default 1: > 1 favours the rows with large values more */
    uint32_t scorer_hash;/* LEARNED: the key-importance model file's hash (ingest/kvlearn.h;
                          * spec " learned=%08x") */
    int scope_model;     /* Ada-SnapKV only, 1: the joint selection runs over all heads of ALL
                          * layers (total L * KV * b, each head's floor(alpha * b) reserved)
                          * instead of one layer's heads (spec suffix " model") */
} lz_kvpolicy;

/* FNV-1a hash of a probe question (never 0 for a non-empty text; 0 for ""). */
uint32_t lz_kvpolicy_text_hash(const char *text);

/* none, budget 0, window 32, kernel 7, alpha 0.2, mean. */
void lz_kvpolicy_default(lz_kvpolicy *p);
const char *lz_kvpolicy_name(int kind); /* "none", "snapkv", ... */
int lz_kvpolicy_parse_name(const char *s); /* kind, or -1 */
/* "0.2" (fraction in (0, 1]) or "128t" (tokens >= 1). Returns 0 or -1. */
int lz_kvpolicy_parse_budget(const char *s, lz_kvpolicy *p);
/* A value-norm power: a number in (0, 16]. Returns 0 or -1. */
int lz_kvpolicy_parse_power(const char *s, float *power);
/* The budget as given: "0.2" / "128t" ("" for none). */
void lz_kvpolicy_budget_str(const lz_kvpolicy *p, char *buf, size_t n);
/* Canonical text of every parameter ("" for none), e.g.
 * "ada-snapkv b=0.2 w=32 k=7 a=0.2 mean". It enters the payload key, so a
 * changed parameter makes the document "changed". */
void lz_kvpolicy_spec(const lz_kvpolicy *p, char *buf, size_t n);
/* Reads a spec back ("" or "none" gives kind NONE). Returns 0 or -1. */
int lz_kvpolicy_parse_spec(const char *spec, lz_kvpolicy *p);

/* Kept tokens per kv head on average for an n-token document: max(B, w)
 * (the window is always kept, and counts in the budget), or 0 when the
 * document is stored whole: policy none, or a short document, n < w + B.
 * With a probe: B, or 0 when n <= B. */
int lz_kvpolicy_budget(const lz_kvpolicy *p, int n);
/* The effective spec of an n-token document: p's spec when it is
 * compressed, "" when stored whole (its payload then equals policy none's). */
void lz_kvpolicy_doc_spec(const lz_kvpolicy *p, int n, char *buf, size_t len);

/* ---- scoring ---- */
typedef struct {
    const float *q;   /* (L, w, H, d) rotated queries of document tokens n-w .. n-1 */
    const float *k;   /* (L, KV, T, d) rotated document keys, token j at row j */
    int k_stride;     /* T >= n */
    const float *pk;  /* (L, KV, S, d) rotated prefix keys (attention sink), or NULL */
    int pk_stride;    /* S >= n_prefix */
    int n_prefix;     /* s */
    int n, w;         /* document tokens, window: rows are tokens n - w .. n - 1 (w < n, or
                       * w <= n when m is set) */
    int m;            /* candidate keys: tokens 0 .. m - 1 (1 <= m <= n); 0 = n - w, the tokens
                       * before the window. A row only scores the candidates it saw (causal):
                       * with the self window (w = m = n) key j gets the mass of rows j .. n-1 */
    int L, H, KV, d;
    int agg;          /* LZ_KVPOLICY_AGG_* */
    int kernel;       /* max-pool kernel (odd) */
    const float *v;   /* (L, KV, T, d) document values, row j = token j: the aggregated score of
                       * key j is multiplied by (mean_e |v_j[e]|)^v_power before pooling (over
                       * the layer's mean of that); NULL = attention only */
    float v_power;    /* 0 or 1: plain mean |v| */
    int v_stride;     /* T >= n when v is set */
} lz_kvscore_params;

/* scores (L, KV, m) pooled; raw (L, KV, m) before pooling, or NULL.
 * Returns 0, or -1 on bad shapes or allocation failure. It is
 * lz_kvpolicy_mass then lz_kvpolicy_finish. */
int lz_kvpolicy_score(const lz_kvscore_params *p, float *scores, float *raw);
/* The heavy part: mass (L, KV, G, m), for head hh of kv group g the
 * window's softmax attention (over the prefix and the keys each row saw)
 * summed over its rows, of candidate key j < m (kernels/lz_kvmass.h
 * computes it on the GPU). 0 or -1. */
int lz_kvpolicy_mass(const lz_kvscore_params *p, float *mass);
/* The rest, from mass: the group's heads aggregated (p->agg), times the
 * value weights (p->v), pooled (p->kernel) into scores and raw. 0 or -1. */
int lz_kvpolicy_finish(const lz_kvscore_params *p, const float *mass, float *scores, float *raw);
/* Attention-like masses attn (L, KV, m), m = p->m, from elsewhere (the
 * learned scorer) -> scores and raw as lz_kvpolicy_score makes them: times
 * the value weights when p->v is set, pooled with p->kernel (p->q, p->k, the
 * window and the aggregation are not used). Returns 0 or -1. */
int lz_kvpolicy_weigh(const lz_kvscore_params *p, const float *attn, float *scores, float *raw);
/* The same by plain loops (tests): one query row at a time. */
int lz_kvpolicy_score_naive(const lz_kvscore_params *p, float *scores, float *raw);
/* out[j] = max(x[j - k/2 .. j + k/2] within [0, m)). */
void lz_kvpolicy_maxpool(float *out, const float *x, int m, int kernel);

/* ---- allocation ---- */
/* Per-layer selected budgets b_l (per head on average) for a total of L * b,
 * each capped at m (excess moved to layers with room). uniform (pyramid = 0)
 * or PyramidKV's linear decrease (pyramid = 1). The sum is exactly
 * min(L * b, L * m). */
void lz_kvpolicy_layer_budgets(int *b_l, int L, int b, int m, int pyramid);
/* Selects total = KV * b keys of one layer from scores (KV, m) (tie order:
 * score, then tie (KV, m) or NULL, descending; then head, position
 * ascending). adaptive = 0: every head its top b. adaptive = 1: every head
 * its top floor(alpha * b), then the joint top of the rest. keep (KV, m)
 * receives 0/1; head_budget (KV) the counts. 0 <= b <= m. Returns 0 or -1
 * (allocation failure). */
int lz_kvpolicy_select(unsigned char *keep, int *head_budget, const float *scores, const float *tie, int KV,
                       int m, int b, int adaptive, float alpha);

/* Full plan of one document: scores (L, KV, m) (tie may be NULL; m = n,
 * or n - w without a probe) ->
 * n_kept (L, KV) and rows (L, KV, n): head (l, h) keeps tokens
 * rows[(l*KV+h)*n + i], i < n_kept, ascending, the window included
 * (without a probe).
 * B = lz_kvpolicy_budget(p, n) must be > 0. Returns 0 or -1. */
int lz_kvpolicy_plan(const lz_kvpolicy *p, const float *scores, const float *tie, int L, int KV, int n, int *n_kept,
                     int *rows);
/* Moves each head's kept rows to the front of its block, in order, in
 * k and v (L, KV, T, d). */
void lz_kvpolicy_compact(float *k, float *v, int T, int L, int KV, int d, int n, const int *n_kept, const int *rows);

#ifdef __cplusplus
}
#endif
#endif /* LZ_KVPOLICY_H */
