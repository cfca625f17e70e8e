/* kv_layout.h - the layout a cached document's K and V take in HBM, the same
 * as the host tier's entries (query/kv_entry.h), so that a miss is one
 * contiguous copy: per layer l from row first[l], its KV heads one after
 * another, head (l, h) keeping kept[l * KV + h] rows from row first[l] +
 * row[l * KV + h] (Ada-KV keeps unequal counts per head and they take only
 * their rows; a document stored whole keeps n everywhere, head h at h * n);
 * all of K's rows, then all of V's. A row is head_dim values. The GPU
 * kernels address it so: a layer's segment descriptor points at row first[l]
 * and the attention's seg_row (kernels/lz_prefill.h) and block words
 * (kernels/lz_decode.h) carry each head's row.
 *
 * Legend: L = layers, KV = kv heads, n = the document's tokens. */
#ifndef LZ_KV_LAYOUT_H
#define LZ_KV_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fills row (L * KV) and first (L) from kept (L * KV rows per head; NULL: n each)
 * and returns the rows of K (as many of V follow them). */
size_t lz_kv_layout(int L, int KV, const int *kept, int n, int32_t *row, size_t *first);

#ifdef __cplusplus
}
#endif
#endif /* LZ_KV_LAYOUT_H */
