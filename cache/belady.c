/* belady.c - the clairvoyant bound over a recorded request stream (see
 * belady.h). One backward pass finds every use's next use. Each method only
 * decides, for every use, whether the key stays resident until its next use
 * (acc[i]: that next use is then a hit); one replay of those decisions
 * counts the hits and bytes, checks the budget and reports every admission
 * and eviction, the same way for every method. */
#include "cache/belady.h"

#include <stdlib.h>
#include <string.h>

#define NEVER INT32_MAX

typedef struct {
    int32_t n_keys, n_req;
    int64_t n_acc;
    const uint64_t *size;
    const int64_t *off;
    const int32_t *keys;
    uint64_t budget;
    int64_t *next_idx; /* occurrence -> the next occurrence of its key, -1: none */
    int32_t *req_of;   /* occurrence -> its request */
} stream;

const char *lz_belady_method_name(lz_belady_method m)
{
    return m == LZ_BELADY_NEXT_USE_SIZE ? "min-size" : m == LZ_BELADY_INTERVALS ? "intervals" : m == LZ_BELADY_STATIC ? "static" : "min";
}

/* ---- the per-request choice (MIN, MIN by size) ---- */
typedef struct {
    int32_t key;
    int32_t miss;     /* 1: a miss of this request, 0: resident */
    int64_t np;       /* the occurrence of its next use, -1: never */
    double rank;      /* smaller = keep first */
    uint64_t size;
} cand;

/* Keep x before y? Rank first; on a tie the later uses decide, one by one (two keys next used by the
 * same request are worth the same until then, and the one used again sooner after it is worth more:
 * with several keys a request this is what keeps MIN optimal on unit sizes); then the smaller (more
 * room left), then the resident one (nothing to load). */
static int before(const stream *s, const cand *x, const cand *y)
{
    if (x->rank != y->rank) return x->rank < y->rank;
    int64_t a = x->np, b = y->np;
    while (a >= 0 && b >= 0 && s->req_of[a] == s->req_of[b]) { a = s->next_idx[a]; b = s->next_idx[b]; }
    if (a >= 0 || b >= 0) {
        if (a < 0) return 0;
        if (b < 0) return 1;
        return s->req_of[a] < s->req_of[b];
    }
    if (x->size != y->size) return x->size < y->size;
    if (x->miss != y->miss) return x->miss < y->miss;
    return x->key < y->key;
}

/* stable merge sort by before() (qsort has no context argument) */
static void sort_cands(const stream *s, cand *a, cand *tmp, int32_t n)
{
    for (int32_t w = 1; w < n; w *= 2) {
        for (int32_t lo = 0; lo < n; lo += 2 * w) {
            int32_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = before(s, &a[j], &a[i]) ? a[j++] : a[i++];
            while (i < mid) tmp[k++] = a[i++];
            while (j < hi) tmp[k++] = a[j++];
        }
        memcpy(a, tmp, (size_t)n * sizeof *a);
    }
}

static int per_request(const stream *s, int by_size, uint8_t *acc)
{
    const int32_t nk = s->n_keys ? s->n_keys : 1;
    int64_t *np = malloc((size_t)nk * sizeof *np);      /* a resident key's next occurrence */
    int64_t *lastocc = malloc((size_t)nk * sizeof *lastocc);
    int32_t *pos = malloc((size_t)nk * sizeof *pos);     /* its place in res[], -1 when absent */
    int32_t *res = malloc((size_t)nk * sizeof *res);
    int32_t *inreq = malloc((size_t)nk * sizeof *inreq);
    cand *cs = malloc((size_t)nk * sizeof *cs), *tmp = malloc((size_t)nk * sizeof *tmp);
    int rc = -1;
    if (!np || !lastocc || !pos || !res || !inreq || !cs || !tmp) goto done;
    for (int32_t k = 0; k < s->n_keys; k++) { pos[k] = -1; inreq[k] = -1; lastocc[k] = -1; }
    int32_t n_res = 0;
    uint64_t used = 0;
    for (int32_t r = 0; r < s->n_req; r++) {
        uint64_t hit_bytes = 0, miss_bytes = 0;
        for (int64_t i = s->off[r]; i < s->off[r + 1]; i++) {
            const int32_t k = s->keys[i];
            inreq[k] = r;
            if (pos[k] >= 0) { hit_bytes += s->size[k]; acc[lastocc[k]] = 1; } /* resident since its last use */
            else miss_bytes += s->size[k];
            lastocc[k] = i;
            np[k] = s->next_idx[i];
        }
        if (used + miss_bytes <= s->budget) { /* room for every miss */
            for (int64_t i = s->off[r]; i < s->off[r + 1]; i++) {
                const int32_t k = s->keys[i];
                if (pos[k] >= 0) continue;
                pos[k] = n_res;
                res[n_res++] = k;
                used += s->size[k];
            }
            continue;
        }
        /* the choice: the request's hits stay; the rest competes for what is left */
        int32_t nc = 0;
        for (int32_t j = 0; j < n_res; j++)
            if (inreq[res[j]] != r) cs[nc++] = (cand){ res[j], 0, np[res[j]], 0, s->size[res[j]] };
        for (int64_t i = s->off[r]; i < s->off[r + 1]; i++)
            if (pos[s->keys[i]] < 0) cs[nc++] = (cand){ s->keys[i], 1, np[s->keys[i]], 0, s->size[s->keys[i]] };
        for (int32_t j = 0; j < nc; j++) {
            const int64_t n = cs[j].np;
            if (n < 0) cs[j].rank = 1e300;
            else if (by_size) cs[j].rank = (double)(s->req_of[n] - r) * (double)cs[j].size;
            else cs[j].rank = (double)s->req_of[n];
        }
        sort_cands(s, cs, tmp, nc);
        uint64_t room = s->budget > hit_bytes ? s->budget - hit_bytes : 0;
        for (int32_t j = 0; j < nc; j++) {
            const int keep = cs[j].np >= 0 && cs[j].size <= room;
            if (keep) room -= cs[j].size;
            const int32_t k = cs[j].key;
            if (cs[j].miss && keep) {
                pos[k] = n_res;
                res[n_res++] = k;
                used += s->size[k];
            } else if (!cs[j].miss && !keep) {
                const int32_t p = pos[k];
                res[p] = res[--n_res];
                pos[res[p]] = p;
                pos[k] = -1;
                used -= s->size[k];
            }
        }
    }
    rc = 0;
done:
    free(np); free(lastocc); free(pos); free(res); free(inreq); free(cs); free(tmp);
    return rc;
}

/* ---- reuse intervals packed greedily ---- */
typedef struct {
    uint64_t *mx, *lz; /* max of the subtree, pending add */
    int32_t n;
} segtree;

static void st_add(segtree *t, int32_t node, int32_t lo, int32_t hi, int32_t a, int32_t b, uint64_t v)
{
    if (b < lo || hi < a) return;
    if (a <= lo && hi <= b) { t->mx[node] += v; t->lz[node] += v; return; }
    const int32_t mid = lo + (hi - lo) / 2;
    st_add(t, 2 * node, lo, mid, a, b, v);
    st_add(t, 2 * node + 1, mid + 1, hi, a, b, v);
    const uint64_t l = t->mx[2 * node], r = t->mx[2 * node + 1];
    t->mx[node] = (l > r ? l : r) + t->lz[node];
}

static uint64_t st_max(const segtree *t, int32_t node, int32_t lo, int32_t hi, int32_t a, int32_t b)
{
    if (b < lo || hi < a) return 0;
    if (a <= lo && hi <= b) return t->mx[node];
    const int32_t mid = lo + (hi - lo) / 2;
    const uint64_t l = st_max(t, 2 * node, lo, mid, a, b), r = st_max(t, 2 * node + 1, mid + 1, hi, a, b);
    return (l > r ? l : r) + t->lz[node];
}

typedef struct {
    uint64_t cost, size;
    int64_t occ;
} ival;

static int cmp_ival(const void *a, const void *b)
{
    const ival *x = a, *y = b;
    if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
    if (x->size != y->size) return x->size < y->size ? -1 : 1;
    return x->occ < y->occ ? -1 : x->occ > y->occ;
}

static int intervals(const stream *s, uint8_t *acc)
{
    const int64_t na = s->n_acc ? s->n_acc : 1;
    ival *iv = malloc((size_t)na * sizeof *iv);
    uint8_t *cov = calloc((size_t)na, 1);   /* the key is resident during this use's request */
    int64_t *unit = malloc((size_t)na * sizeof *unit);
    segtree t = { calloc((size_t)4 * (s->n_req + 1), sizeof(uint64_t)), calloc((size_t)4 * (s->n_req + 1), sizeof(uint64_t)),
                  s->n_req };
    int rc = -1;
    if (!iv || !cov || !unit || !t.mx || !t.lz) goto done;
    int64_t n = 0;
    for (int64_t i = 0; i < s->n_acc; i++) {
        const int64_t j = s->next_idx[i];
        if (j < 0) continue;
        const uint64_t sz = s->size[s->keys[i]];
        iv[n++] = (ival){ sz * (uint64_t)(s->req_of[j] - s->req_of[i]), sz, i };
    }
    qsort(iv, (size_t)n, sizeof *iv, cmp_ival);
    const int32_t R = s->n_req - 1;
    for (int64_t q = 0; q < n; q++) {
        const int64_t i = iv[q].occ;
        if (acc[i]) continue;
        const uint64_t sz = iv[q].size;
        if (sz > s->budget) continue;
        /* the unit: this interval, and the ones its end forces (a use in the very next request) */
        int64_t nu = 0, x = i;
        unit[nu++] = x;
        for (;;) {
            const int64_t j = s->next_idx[x], l = j >= 0 ? s->next_idx[j] : -1;
            if (l < 0 || s->req_of[l] != s->req_of[j] + 1 || acc[j]) break;
            unit[nu++] = j;
            x = j;
        }
        int ok = 1;
        for (int64_t u = 0; u < nu && ok; u++) {
            const int64_t a = unit[u], b = s->next_idx[a];
            const int32_t lo = cov[a] ? s->req_of[a] + 1 : s->req_of[a], hi = cov[b] ? s->req_of[b] - 1 : s->req_of[b];
            if (lo <= hi && st_max(&t, 1, 0, R, lo, hi) + sz > s->budget) ok = 0;
        }
        if (!ok) continue;
        for (int64_t u = 0; u < nu; u++) {
            const int64_t a = unit[u], b = s->next_idx[a];
            const int32_t lo = cov[a] ? s->req_of[a] + 1 : s->req_of[a], hi = cov[b] ? s->req_of[b] - 1 : s->req_of[b];
            if (lo <= hi) st_add(&t, 1, 0, R, lo, hi, sz);
            cov[a] = cov[b] = 1;
            acc[a] = 1;
        }
    }
    rc = 0;
done:
    free(iv); free(cov); free(unit); free(t.mx); free(t.lz);
    return rc;
}

/* ---- the best fixed set ---- */
typedef struct {
    double value; /* the stream's uses of the key after its first, per byte */
    int32_t key;
} dens;

static int cmp_dens(const void *a, const void *b)
{
    const dens *x = a, *y = b;
    if (x->value != y->value) return x->value > y->value ? -1 : 1;
    return x->key - y->key;
}

static int fixed_set(const stream *s, uint8_t *acc)
{
    const int32_t nk = s->n_keys ? s->n_keys : 1;
    int64_t *cnt = calloc((size_t)nk, sizeof *cnt);
    dens *d = malloc((size_t)nk * sizeof *d);
    uint8_t *in = calloc((size_t)nk, 1);
    if (!cnt || !d || !in) { free(cnt); free(d); free(in); return -1; }
    for (int64_t i = 0; i < s->n_acc; i++) cnt[s->keys[i]]++;
    int32_t n = 0;
    for (int32_t k = 0; k < s->n_keys; k++)
        if (cnt[k] > 1) d[n++] = (dens){ (double)(cnt[k] - 1) / (double)(s->size[k] ? s->size[k] : 1), k };
    qsort(d, (size_t)n, sizeof *d, cmp_dens);
    uint64_t room = s->budget;
    for (int32_t j = 0; j < n; j++)
        if (s->size[d[j].key] <= room) { room -= s->size[d[j].key]; in[d[j].key] = 1; }
    for (int64_t i = 0; i < s->n_acc; i++) acc[i] = in[s->keys[i]];
    free(cnt); free(d); free(in);
    return 0;
}

/* ---- the replay of the decisions ---- */
static int replay(const stream *s, const uint8_t *acc, const lz_belady_opts *o, lz_belady_stats *out)
{
    const int32_t nk = s->n_keys ? s->n_keys : 1;
    const int64_t na = s->n_acc ? s->n_acc : 1;
    uint8_t *resident = calloc((size_t)nk, 1);
    int32_t *until = malloc((size_t)nk * sizeof *until);  /* the last request it stays for */
    int64_t *head = malloc((size_t)(s->n_req + 1) * sizeof *head), *link = malloc((size_t)na * sizeof *link);
    int32_t *who = malloc((size_t)na * sizeof *who);
    int rc = -1;
    if (!resident || !until || !head || !link || !who) goto done;
    for (int32_t r = 0; r <= s->n_req; r++) head[r] = -1;
    int64_t n_link = 0;
    uint64_t used = 0;
    for (int32_t r = 0; r < s->n_req; r++) {
        if (r > 0) /* what stayed for the previous request only leaves */
            for (int64_t e = head[r - 1]; e >= 0; e = link[e]) {
                const int32_t k = who[e];
                if (!resident[k] || until[k] != r - 1) continue;
                resident[k] = 0;
                used -= s->size[k];
                out->evicted++;
                if (o->on_evict) o->on_evict(k, r, o->ctx);
            }
        for (int64_t i = s->off[r]; i < s->off[r + 1]; i++) {
            const int32_t k = s->keys[i];
            const int h = resident[k];
            if (o->hit) o->hit[i] = (uint8_t)h;
            if (h) { out->hits++; out->bytes_hit += (int64_t)s->size[k]; }
            else { out->misses++; out->bytes_missed += (int64_t)s->size[k]; }
        }
        for (int64_t i = s->off[r]; i < s->off[r + 1]; i++) {
            const int32_t k = s->keys[i];
            const int stay = s->next_idx[i] >= 0 && acc[i];
            if (!stay && !resident[k]) { out->bypassed++; continue; }
            if (!resident[k]) {
                resident[k] = 1;
                used += s->size[k];
                out->admitted++;
                if (o->on_admit) o->on_admit(k, r, o->ctx);
            }
            until[k] = stay ? s->req_of[s->next_idx[i]] : r;
            who[n_link] = k;
            link[n_link] = head[until[k]];
            head[until[k]] = n_link++;
        }
        if (used > (uint64_t)out->peak_bytes) out->peak_bytes = (int64_t)used;
    }
    rc = 0;
done:
    free(resident); free(until); free(head); free(link); free(who);
    return rc;
}

int lz_belady_run(int32_t n_keys, const uint64_t *size, int32_t n_req, const int64_t *off, const int32_t *keys,
                  uint64_t budget, const lz_belady_opts *opts, lz_belady_stats *out)
{
    lz_belady_opts o = { 0 };
    if (opts) o = *opts;
    memset(out, 0, sizeof *out);
    stream s = { n_keys, n_req, n_req > 0 ? off[n_req] : 0, size, off, keys, budget, NULL, NULL };
    const int64_t na = s.n_acc ? s.n_acc : 1;
    int64_t *last = malloc((size_t)(n_keys ? n_keys : 1) * sizeof *last);
    int32_t *seen = malloc((size_t)(n_keys ? n_keys : 1) * sizeof *seen);
    uint8_t *acc = calloc((size_t)na, 1);
    s.next_idx = malloc((size_t)na * sizeof *s.next_idx);
    s.req_of = malloc((size_t)na * sizeof *s.req_of);
    int rc = -1;
    if (!last || !seen || !acc || !s.next_idx || !s.req_of) goto done;
    for (int32_t k = 0; k < n_keys; k++) { last[k] = -1; seen[k] = -1; }
    for (int32_t r = n_req - 1; r >= 0; r--)
        for (int64_t i = off[r]; i < off[r + 1]; i++) {
            const int32_t k = keys[i];
            if (k < 0 || k >= n_keys || seen[k] == r) goto done; /* out of range, or twice in one request */
            seen[k] = r;
            s.next_idx[i] = last[k];
            last[k] = i;
            s.req_of[i] = r;
        }
    if (o.method == LZ_BELADY_INTERVALS ? intervals(&s, acc)
        : o.method == LZ_BELADY_STATIC  ? fixed_set(&s, acc)
                                        : per_request(&s, o.method == LZ_BELADY_NEXT_USE_SIZE, acc))
        goto done;
    rc = replay(&s, acc, &o, out);
done:
    free(last); free(seen); free(acc); free(s.next_idx); free(s.req_of);
    return rc;
}

int lz_belady_best(int32_t n_keys, const uint64_t *size, int32_t n_req, const int64_t *off, const int32_t *keys,
                   uint64_t budget, lz_belady_stats *out, lz_belady_method *method)
{
    int best = -1;
    for (int m = 0; m < LZ_BELADY_N_METHODS; m++) {
        lz_belady_opts o = { .method = (lz_belady_method)m };
        lz_belady_stats st;
        if (lz_belady_run(n_keys, size, n_req, off, keys, budget, &o, &st)) return -1;
        if (best < 0 || st.hits > out->hits) { *out = st; best = m; }
    }
    if (method) *method = (lz_belady_method)best;
    return 0;
}
