/* test_engine_table.c - engine/engine.c over a GPU table given at link time,
 * as the programs of 'make cuda' get engine_gpu.c's: this test defines its own
 * lz_engine_gpu_ops (a recording fake), which keeps the library's stand-in
 * (engine_cpu_only.c) out of the link. Checked: a GPU build is reported; the
 * options reach the table's open; a failed open leaves no engine; the
 * question table is the one the table filled, at a fixed address that
 * set_slots updates in place (a session keeps the pointer); tier figures,
 * the document table and the prefix forwarded; free closes the context once. */
#include <string.h>

#include "engine/engine_gpu_ops.h"
#include "tests/test.h"
#include "tests/test_model.h"

static struct {
    int opens, closes, queries, slots_n, slots_seq, prefix_fp8, uses, fail_open;
    lz_engine_opts seen;
    const lz_kv_cache *prefix;
    void *ctx;
} rec;
static int ctx_word;

static int f_count(void) { return 3; }
static int f_use(int dev, char *err, size_t errlen) { rec.uses += dev + 1; return 0; }
static void *f_open(const lz_llama *m, const lz_engine_opts *o, size_t *granted, char *err, size_t errlen)
{
    rec.opens++;
    rec.seen = *o;
    if (rec.fail_open) {
        snprintf(err, errlen, "GPU 2: out of device memory");
        return NULL;
    }
    *granted = o->gpu_cache / 2; /* the device had less free */
    return rec.ctx = &ctx_word;
}
static void f_close(void *ctx) { rec.closes += ctx == &ctx_word; }
static void f_query(void *ctx, lz_query_backend *b)
{
    rec.queries++;
    memset(b, 0, sizeof *b);
    b->ctx = ctx;
    b->n_slots = rec.slots_n ? rec.slots_n : 1;
    b->seq_tokens = rec.slots_seq;
    b->reads_fp8 = 1;
}
static int f_set_slots(void *ctx, int n, int seq, char *err, size_t errlen)
{
    if (n > 16) {
        snprintf(err, errlen, "16 slots fit");
        return LZ_QUERY_ENOMEM;
    }
    rec.slots_n = n, rec.slots_seq = seq;
    return 0;
}
static void f_tiers(void *ctx, lz_doc_cache_stats *p, lz_engine_tiers *t)
{
    p->hits = 7, p->bytes_budget = 1 << 20;
    t->copies = 5, t->bytes_in = 1000, t->copy_s = 0.5, t->pool_regions = 2;
    t->grouped_steps = 3, t->grouped_blocks_read = 40, t->grouped_blocks_placed = 100;
}
static int f_encode(void *ctx, const int *ids, int n, lz_kv_cache *out, float *qwin, int c0, int cw, char *err,
                    size_t errlen)
{
    return 0;
}
static lz_encode_backend f_encoder(void *ctx, const lz_engine_encode_opts *o)
{
    lz_encode_backend b = {.ctx = ctx, .encode = f_encode, .max_tokens = o->max_tokens, .pass_tokens = o->pass_tokens};
    return b;
}
static int f_set_prefix(void *ctx, const lz_kv_cache *prefix, int fp8, char *err, size_t errlen)
{
    rec.prefix = prefix, rec.prefix_fp8 = fp8;
    return 0;
}
static const lz_engine_gpu_table fake = {f_count, f_use, f_open, f_close, f_query, f_set_slots, f_tiers, f_encoder,
                                         f_set_prefix};

const lz_engine_gpu_table *lz_engine_gpu_ops(void) { return &fake; }

int main(void)
{
    char err[512] = "";
    CHECK(lz_engine_gpu_built() == 1 && lz_engine_gpu_count() == 3, "a GPU build, its devices counted");
    CHECK(lz_engine_use_device(1, err, sizeof err) == 0 && rec.uses == 2, "a device made current by the table");
    CHECK(lz_engine_use_device(-1, err, sizeof err) == 0 && rec.uses == 2, "device -1: nothing to make current");

    rec.fail_open = 1;
    lz_engine *e = (lz_engine *)&ctx_word;
    const lz_engine_opts o = {.gpu = 1, .device = 2, .own_tokens = 16384, .gpu_cache = 1 << 30,
                              .cache_policy = LZ_CACHE_LRU};
    CHECK(lz_engine_open(NULL, &o, &e, err, sizeof err) == -1 && !e && strstr(err, "GPU 2"),
          "a failed open: no engine, the table's message: %s", err);
    rec.fail_open = 0;
    CHECK(lz_engine_open(NULL, &o, &e, err, sizeof err) == 0 && e, "open: %s", err);
    CHECK(rec.opens == 2 && rec.seen.device == 2 && rec.seen.own_tokens == 16384 && rec.seen.gpu_cache == 1 << 30 &&
              rec.seen.cache_policy == LZ_CACHE_LRU, "the options reach the table");
    CHECK(lz_engine_is_gpu(e) && lz_engine_device(e) == 2 && lz_engine_gpu_cache(e) == (size_t)1 << 29,
          "a GPU engine on device 2, its tier as granted");
    const lz_query_backend *q = lz_engine_query(e);
    CHECK(q && q->ctx == &ctx_word && q->n_slots == 1 && q->reads_fp8 == 1, "the question table the table filled");
    CHECK(lz_engine_set_slots(e, 8, 2048, err, sizeof err) == 0 && lz_engine_query(e) == q && q->n_slots == 8 &&
              q->seq_tokens == 2048, "set_slots updates the table in place");
    CHECK(lz_engine_set_slots(e, 64, 2048, err, sizeof err) == LZ_QUERY_ENOMEM && strstr(err, "16 slots"),
          "a shortage of memory as LZ_QUERY_ENOMEM: %s", err);
    lz_doc_cache_stats st;
    lz_engine_tiers t;
    lz_engine_tier_stats(e, &st, &t);
    CHECK(st.hits == 7 && st.bytes_budget == 1 << 20 && t.copies == 5 && t.bytes_in == 1000 && t.copy_s == 0.5 &&
              t.pool_regions == 2 && t.pinned_bytes == 0, "tier figures forwarded");
    memset(&st, 0, sizeof st);
    lz_engine_policy_stats(e, &st);
    CHECK(st.hits == 7, "the policy hook forwards too");
    int64_t gs = 0, gr = 0, gpl = 0;
    lz_engine_decode_stats(e, &gs, &gr, &gpl);
    CHECK(gs == 3 && gr == 40 && gpl == 100, "the grouped-decode counts forwarded (%lld %lld %lld)", (long long)gs,
          (long long)gr, (long long)gpl);
    const lz_engine_encode_opts eo = {.max_tokens = 512, .pass_tokens = 2048};
    const lz_encode_backend b = lz_engine_encoder(e, &eo);
    CHECK(b.ctx == &ctx_word && b.encode == f_encode && b.max_tokens == 512 && b.pass_tokens == 2048,
          "the document table the table made");
    lz_kv_cache pc;
    CHECK(lz_engine_set_prefix(e, &pc, 1, err, sizeof err) == 0 && rec.prefix == &pc && rec.prefix_fp8 == 1,
          "the prefix forwarded");
    lz_engine_free(e);
    CHECK(rec.closes == 1, "free closes the context once");

    const lz_engine_opts cpu = {0};
    char mdir[256], mpath[320];
    lz_llama *m = lz_test_model(1, 2, 1, 8, 16, mdir, sizeof mdir, mpath, sizeof mpath);
    if (!m) return lz_test_done();
    const int queries = rec.queries;
    CHECK(lz_engine_open(m, &cpu, &e, err, sizeof err) == 0 && !lz_engine_is_gpu(e) && rec.opens == 2 &&
              rec.queries == queries, "a CPU engine in a GPU build opens nothing on the table");
    const lz_query_backend *cq = lz_engine_query(e);
    CHECK(cq && cq->ctx != &ctx_word && cq->reserve && cq->own_kv, "its question table the CPU engine's: %p", cq ? cq->ctx : NULL);
    const lz_encode_backend cb = lz_engine_encoder(e, &eo);
    CHECK(cb.ctx != &ctx_word && cb.encode != f_encode && cb.encode_probe, "and its document table");
    const lz_kv_cache none = {0};
    CHECK(lz_engine_set_prefix(e, &none, 0, err, sizeof err) == 0 && rec.prefix == &pc && rec.prefix_fp8 == 1,
          "its prefix kept off the GPU table");
    lz_engine_free(e);
    CHECK(rec.closes == 1, "nor closes anything");
    lz_test_model_free(m, mdir, mpath);
    return lz_test_done();
}
