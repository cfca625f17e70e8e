/* adakv_padding.c - how much room a store's Ada-KV documents would take in a
 * layout that pads each layer's heads to the layer's longest kept head (the
 * GPU tier's before cache/kv_layout.h packed them) against their packed rows
 * (the host tier's, the payload's and now the GPU tier's): sums over every
 * document of a store, and the worst document.
 * Build and run (repo root, after make):
 *   cc -O2 -I. dev/store/adakv_padding.c build/liblazy.a $(pkg-config --libs lmdb sqlite3 libzstd) \
 *      -ljansson -lopenblas -fopenmp -lm -o /tmp/adakv_padding && /tmp/adakv_padding STORE */
#include <stdio.h>
#include <stdlib.h>

#include "store/payload.h"
#include "store/store.h"

typedef struct {
    lz_store *s;
    long docs, whole;
    double packed, padded, worst;
} tally;

static int one(int64_t id, int64_t hits, const uint8_t *key, int n_tokens, void *ctx)
{
    tally *t = ctx;
    void *blob;
    size_t len;
    char err[512];
    lz_payload_info info;
    if (lz_store_get_payload(t->s, key, &blob, &len, err, sizeof err) ||
        lz_payload_parse(blob, len, 0, &info, err, sizeof err)) {
        fprintf(stderr, "document %lld: %s\n", (long long)id, err);
        return 0;
    }
    const int L = info.n_layers, KV = info.n_kv_heads;
    int *kept = malloc(sizeof(int) * L * KV);
    lz_payload_kept(blob, &info, kept);
    size_t rows = 0; /* padded: KV heads of the layer's longest */
    for (int l = 0; l < L; l++) {
        int most = 0;
        for (int h = 0; h < KV; h++) most = kept[l * KV + h] > most ? kept[l * KV + h] : most;
        rows += (size_t)KV * most;
    }
    t->docs++;
    t->whole += info.n_kept_sum == (uint64_t)L * KV * info.n_tokens;
    t->packed += (double)info.n_kept_sum;
    t->padded += (double)rows;
    if (info.n_kept_sum && (double)rows / info.n_kept_sum > t->worst) t->worst = (double)rows / info.n_kept_sum;
    free(kept), free(blob);
    (void)hits, (void)n_tokens;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: adakv_padding STORE\n"); return 2; }
    tally t = {0};
    char err[512];
    if (lz_store_open(argv[1], LZ_STORE_RDONLY, &t.s, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    if (lz_store_top_accessed(t.s, 1 << 30, 1, one, &t, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    printf("%ld documents (%ld stored whole): kept rows %.0f packed, %.0f padded per layer: %.3fx (worst %.3fx)\n",
           t.docs, t.whole, t.packed, t.padded, t.packed ? t.padded / t.packed : 0, t.worst);
    lz_store_close(t.s);
    return 0;
}
