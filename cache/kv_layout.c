/* kv_layout.c - the tiers' shared document layout (kv_layout.h). */
#include "cache/kv_layout.h"

size_t lz_kv_layout(int L, int KV, const int *kept, int n, int32_t *row, size_t *first)
{
    size_t rows = 0;
    for (int l = 0; l < L; l++) {
        first[l] = rows;
        int32_t at = 0;
        for (int h = 0; h < KV; h++) {
            row[l * KV + h] = at;
            at += kept ? kept[l * KV + h] : n;
        }
        rows += (size_t)at;
    }
    return rows;
}
