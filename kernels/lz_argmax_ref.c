/* lz_argmax_ref.c - the CPU reference of lz_argmax (lz_argmax.h): the same
 * sequential scan as lz_sample_argmax, over a row and over the row with its
 * banned ids masked. */
#include <math.h>

#include "kernels/lz_argmax.h"

/* value j of a row, -inf when j is banned (ban NULL: none) */
static float masked(const float *row, int j, const int *ban)
{
    if (ban)
        for (int b = 1; b <= ban[0]; b++)
            if (ban[b] == j) return -INFINITY;
    return row[j];
}

int lz_argmax_ref(int *next, const float *logits, int rows, int V, size_t ld, const int *ban, void *stream)
{
    (void)stream;
    if (rows < 0 || V < 1 || ld < (size_t)V || (ban && (ban[0] < 0 || ban[0] > LZ_ARGMAX_MAX_BAN))) return LZ_ARGMAX_EINVAL;
    for (int i = 0; i < rows; i++) {
        const float *row = logits + (size_t)i * ld;
        int all = 0, kept = 0;
        float kv = masked(row, 0, ban);
        for (int j = 1; j < V; j++) {
            if (row[j] > row[all]) all = j;
            const float m = masked(row, j, ban);
            if (m > kv) kept = j, kv = m;
        }
        next[2 * i] = all;
        next[2 * i + 1] = kept;
    }
    return 0;
}
