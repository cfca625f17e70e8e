/* kv_layout.c - the tiers' shared document layout (kv_layout.h). */
#include "cache/kv_layout.h"

size_t lz_kv_layout(int L, int KV, const int *kept, int n, int *cap, size_t *first)
{
    size_t rows = 0;
    for (int l = 0; l < L; l++) {
        int most = 0;
        for (int h = 0; h < KV; h++) {
            const int k = kept ? kept[l * KV + h] : n;
            most = k > most ? k : most;
        }
        cap[l] = most;
        first[l] = rows;
        rows += (size_t)KV * most;
    }
    return rows;
}
