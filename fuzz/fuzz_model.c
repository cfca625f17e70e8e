/* fuzz_model.c - libFuzzer target: the GGUF model loader (model/llama_gguf.c:
 * hyper-parameters, rotary scaling, every weight's shape, the tokenizer)
 * on a file holding the input, then a short forward pass (4 tokens, then 2
 * more on the same cache) when it loads with a small enough shape. Seeds:
 * tiny models from lz_mkmodel (fuzz/make_seeds.c). Invariant beside the
 * sanitizers: a refusal returns no model and names the file. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/llama.h"
#include "fuzz/fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    lz_llama_set_threads(1); /* one thread: deterministic, and the fuzzer runs two targets side by side */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("model.gguf", data, size);
    lz_llama *m = NULL;
    char err[1024] = "";
    if (lz_llama_load_gguf(path, &m, err, sizeof err) != 0) {
        FUZZ_CHECK(m == NULL, "a refused model is not returned");
        FUZZ_CHECK(err[0] && strstr(err, "model.gguf"), "a refusal names the file: '%s'", err);
        return 0;
    }
    const lz_llama_config *c = &m->cfg;
    /* a forward pass costs dim x (ffn + vocab) per token: only small shapes run it */
    const double cost = (double)c->n_layers * c->dim * ((double)c->ffn_dim * 3 + (double)c->dim * 4) +
                        (double)c->dim * c->vocab;
    if (c->vocab > 0 && cost < 4e6) {
        lz_llama_scratch *s = lz_llama_scratch_new(m, 4);
        lz_kv_cache cache;
        memset(&cache, 0, sizeof cache);
        float *logits = malloc(sizeof(float) * (size_t)c->vocab);
        if (s && logits && lz_kv_cache_init(&cache, c, 8) == 0) {
            int toks[4];
            for (int i = 0; i < 4; i++) toks[i] = (int)((data[i % (size ? size : 1)] * 131u + (unsigned)i) % (unsigned)c->vocab);
            lz_llama_forward(m, s, &cache, NULL, 0, toks, 4, logits, LZ_LOGITS_LAST);
            /* a second call continues the cache: positions 4.. */
            lz_llama_forward(m, s, &cache, NULL, 0, toks, 2, logits, LZ_LOGITS_LAST);
        }
        lz_kv_cache_free(&cache);
        free(logits);
        lz_llama_scratch_free(s);
    }
    lz_llama_free(m);
    return 0;
}
