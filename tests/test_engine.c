/* test_engine.c - engine/engine.h in a program without a GPU engine (the CPU
 * build: the library's engine_cpu_only.c): no GPU built or counted, a GPU
 * engine refused with a message naming the build that has one, nothing
 * opened; the CPU engine's two tables filled (its question table's sequence
 * hooks at a fixed address, its document table's encode and encode_probe,
 * its prefix taken), its slots refused, its tier figures zero. What the CPU
 * tables compute: tests/test_engine_cpu.c. The forwarding to a GPU table:
 * tests/test_engine_table.c. */
#include <string.h>

#include "engine/engine.h"
#include "tests/test.h"
#include "tests/test_model.h"

int main(void)
{
    char err[512] = "", mdir[256], mpath[320];
    lz_llama *m = lz_test_model(1, 2, 1, 8, 16, mdir, sizeof mdir, mpath, sizeof mpath);
    if (!m) return lz_test_done();
    CHECK(lz_engine_gpu_built() == 0, "a CPU build has no GPU engine");
    CHECK(lz_engine_gpu_count() == 0, "and counts no device");
    CHECK(lz_engine_use_device(0, err, sizeof err) == 0, "making a device current is a no-op");

    lz_engine *e = (lz_engine *)&err; /* set to NULL by a refusal */
    const lz_engine_opts gpu = {.gpu = 1, .device = 0};
    CHECK(lz_engine_open(NULL, &gpu, &e, err, sizeof err) == -1 && e == NULL, "a GPU engine is refused");
    CHECK(strstr(err, "no CUDA support") && strstr(err, "make cuda"), "naming the build that has one: %s", err);

    const lz_engine_opts cpu = {.gpu = 0, .device = 3, .gpu_cache = 1 << 30};
    CHECK(lz_engine_open(m, &cpu, &e, err, sizeof err) == 0 && e, "the CPU engine opens: %s", err);
    CHECK(!lz_engine_is_gpu(e) && lz_engine_device(e) == -1 && lz_engine_gpu_cache(e) == 0,
          "a CPU engine: no device, no GPU tier");
    const lz_query_backend *q = lz_engine_query(e);
    CHECK(q && q->ctx && q == lz_engine_query(e), "a question table, at a fixed address");
    CHECK(q && q->idle_slot && q->reserve && q->begin_in && q->step_in && q->own_kv && q->release &&
              q->prefill_many && q->decode_many && q->n_slots == 0 && q->seq_tokens == 0 && q->reads_fp8 == 1,
          "its host sequences: any number, no bound, fp8 read as stored");
    CHECK(q && !q->begin && !q->step && !q->resident && !q->encode && !q->host_alloc && !q->preload &&
              !q->begin_block && !q->keep_own && !q->fits && !q->decode_next,
          "none of a device cache's hooks: the session keeps its host tier and samples");
    const lz_engine_encode_opts eo = {.max_tokens = 512, .pass_tokens = 2048, .masses = 1, .planes = 1};
    const lz_encode_backend b = lz_engine_encoder(e, &eo);
    CHECK(b.ctx && b.encode && b.encode_probe && !b.start && !b.finish && !b.fetch && !b.fetch_mass &&
              !b.fetch_planes && b.max_tokens == 512 && b.pass_tokens == 0,
          "a document table: encode and probes, no passes, masses or planes");
    const lz_encode_backend b2 = lz_engine_encoder(e, &eo);
    CHECK(b2.ctx == b.ctx, "the same table asked again");
    CHECK(lz_engine_set_prefix(e, NULL, 1, err, sizeof err) == 0, "no prefix: documents at 0..n-1: %s", err);
    err[0] = 0;
    CHECK(lz_engine_set_slots(e, 8, 2048, err, sizeof err) == -1 && strstr(err, "GPU"), "slots refused: %s", err);
    lz_doc_cache_stats st;
    lz_engine_tiers t;
    memset(&st, 0x5a, sizeof st);
    memset(&t, 0x5a, sizeof t);
    lz_engine_tier_stats(e, &st, &t);
    CHECK(st.hits == 0 && st.misses == 0 && st.bytes_budget == 0 && t.copies == 0 && t.bytes_in == 0 &&
              t.copy_s == 0 && t.pool_bytes == 0 && t.pinned_bytes == 0, "tier figures zero");
    memset(&st, 0x5a, sizeof st);
    lz_engine_policy_stats(e, &st);
    CHECK(st.evicted == 0 && st.bytes_used == 0, "the policy hook zero too");
    lz_engine_free(e);
    lz_engine_free(NULL);
    lz_test_model_free(m, mdir, mpath);
    return lz_test_done();
}
