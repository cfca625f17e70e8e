/* fuzz_safetensors.c - libFuzzer target: the safetensors reader
 * (formats/safetensors.c). The input's first byte picks the case: even, one
 * file (lz_st_open, and lz_st_set_open_dir on a folder holding it as
 * model.safetensors); odd, a shard index: the rest split at FUZZ_PART_SEP
 * into model.safetensors.index.json and the shards shard-1.safetensors ..
 * shard-3.safetensors of one folder (lz_st_set_open_dir). Invariants beside
 * the sanitizers: every accepted tensor's element count is the product of
 * its shape and its bytes are that count times its dtype's size; tensors are
 * found by name; small ones convert to fp32 (F32, F16, BF16); a refusal
 * names a file (of the folder). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/safetensors.h"
#include "fuzz/fuzz_common.h"

static void check_tensor(const lz_st_tensor *t)
{
    FUZZ_CHECK(t && t->name, "tensor without a name");
    unsigned __int128 prod = 1;
    for (int d = 0; d < t->n_dims; d++) {
        FUZZ_CHECK(t->shape[d] >= 0, "tensor '%s': dimension %d is %lld", t->name, d, (long long)t->shape[d]);
        prod *= (unsigned __int128)(uint64_t)t->shape[d];
    }
    FUZZ_CHECK(prod == (unsigned __int128)(uint64_t)t->n_elements, "tensor '%s': %lld elements for its shape", t->name,
               (long long)t->n_elements);
    size_t es = lz_st_dtype_size(t->dtype);
    FUZZ_CHECK(es > 0, "tensor '%s': accepted dtype %d", t->name, t->dtype);
    FUZZ_CHECK((unsigned __int128)(uint64_t)t->n_elements * es == t->nbytes, "tensor '%s': %llu bytes for %lld elements",
               t->name, (unsigned long long)t->nbytes, (long long)t->n_elements);
    if (t->n_elements <= 4096 && (t->dtype == LZ_ST_F32 || t->dtype == LZ_ST_F16 || t->dtype == LZ_ST_BF16)) {
        float *out = malloc(sizeof(float) * (size_t)(t->n_elements ? t->n_elements : 1));
        if (out) FUZZ_CHECK(lz_st_to_f32(t, out) == 0, "tensor '%s': to f32", t->name);
        free(out);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    char dir[600], err[1024] = "";
    if (!(data[0] & 1)) {
        snprintf(dir, sizeof dir, "%s/single", fuzz_dir());
        mkdir(dir, 0700);
        const char *path = fuzz_write("single/model.safetensors", data + 1, size - 1);
        lz_safetensors *f = NULL;
        if (lz_st_open(path, &f, err, sizeof err) == 0) {
            for (int64_t i = 0; i < lz_st_n_tensors(f); i++) {
                const lz_st_tensor *t = lz_st_tensor_at(f, i);
                check_tensor(t);
                FUZZ_CHECK(lz_st_find(f, t->name) != NULL, "tensor '%s' not found by name", t->name);
            }
            lz_st_close(f);
        } else {
            FUZZ_CHECK(f == NULL && strstr(err, "model.safetensors"), "a refusal names the file: '%s'", err);
        }
        err[0] = 0;
    } else {
        snprintf(dir, sizeof dir, "%s/sharded", fuzz_dir());
        mkdir(dir, 0700);
        const uint8_t *part[4];
        size_t len[4];
        int n = fuzz_split(data + 1, size - 1, part, len, 4);
        fuzz_write("sharded/model.safetensors.index.json", part[0], len[0]);
        for (int i = 1; i < 4; i++) {
            char name[64];
            snprintf(name, sizeof name, "sharded/shard-%d.safetensors", i);
            fuzz_write(name, i < n ? part[i] : (const uint8_t *)"", i < n ? len[i] : 0);
        }
    }
    lz_st_set *s = NULL;
    if (lz_st_set_open_dir(dir, &s, err, sizeof err) == 0) {
        FUZZ_CHECK(lz_st_set_n_files(s) >= 1, "a set of no file");
        lz_st_set_close(s);
    } else {
        FUZZ_CHECK(s == NULL && strstr(err, fuzz_dir()), "a refusal names a file: '%s'", err);
    }
    return 0;
}
