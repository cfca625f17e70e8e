/* test_engine.c - engine/engine.h in a program without a GPU engine (the CPU
 * build: the library's engine_cpu_only.c): no GPU built or counted, a GPU
 * engine refused with a message naming the build that has one, nothing
 * opened; the CPU engine's tables empty (the pipelines compute themselves),
 * its slots refused, its tier figures zero. The forwarding to a GPU table:
 * tests/test_engine_table.c. */
#include <string.h>

#include "engine/engine.h"
#include "tests/test.h"

int main(void)
{
    char err[512] = "";
    CHECK(lz_engine_gpu_built() == 0, "a CPU build has no GPU engine");
    CHECK(lz_engine_gpu_count() == 0, "and counts no device");
    CHECK(lz_engine_use_device(0, err, sizeof err) == 0, "making a device current is a no-op");

    lz_engine *e = (lz_engine *)&err; /* set to NULL by a refusal */
    const lz_engine_opts gpu = {.gpu = 1, .device = 0};
    CHECK(lz_engine_open(NULL, &gpu, &e, err, sizeof err) == -1 && e == NULL, "a GPU engine is refused");
    CHECK(strstr(err, "no CUDA support") && strstr(err, "make cuda"), "naming the build that has one: %s", err);

    const lz_engine_opts cpu = {.gpu = 0, .device = 3, .gpu_cache = 1 << 30};
    CHECK(lz_engine_open(NULL, &cpu, &e, err, sizeof err) == 0 && e, "the CPU engine opens: %s", err);
    CHECK(!lz_engine_is_gpu(e) && lz_engine_device(e) == -1 && lz_engine_gpu_cache(e) == 0,
          "a CPU engine: no device, no GPU tier");
    CHECK(lz_engine_query(e) == NULL, "no question table: the session computes on the CPU");
    const lz_engine_encode_opts eo = {.max_tokens = 512, .pass_tokens = 2048, .masses = 1, .planes = 1};
    const lz_encode_backend b = lz_engine_encoder(e, &eo);
    CHECK(!b.ctx && !b.encode && !b.start && !b.finish && !b.fetch && !b.fetch_mass && !b.fetch_planes &&
              b.max_tokens == 0 && b.pass_tokens == 0, "an empty document table: the encoder computes itself");
    CHECK(lz_engine_set_prefix(e, NULL, 1, err, sizeof err) == 0, "the prefix stays with the encoder");
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
    return lz_test_done();
}
