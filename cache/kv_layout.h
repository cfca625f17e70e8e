/* kv_layout.h - the layout a cached document's K and V take in HBM (the
 * host tier keeps the same bytes for a document stored whole, so its miss is
 * one contiguous copy; Ada-KV documents stay packed there): per layer l, its KV heads of cap[l] rows each, cap[l]
 * the longest head the layer keeps (Ada-KV keeps unequal counts per head; a
 * document stored whole keeps n everywhere and has no padding), head (l, h)
 * from row first[l] + h * cap[l]; all of K's rows, then all of V's. A row is
 * head_dim values. This is also the layout the GPU kernels' segment
 * descriptors address (lz_attn_segment: a layer's K from row first[l], heads
 * cap[l] rows apart).
 *
 * Legend: L = layers, KV = kv heads, n = the document's tokens. */
#ifndef LZ_KV_LAYOUT_H
#define LZ_KV_LAYOUT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fills cap (L) and first (L) from kept (L * KV rows per head; NULL: n each)
 * and returns the rows of K (as many of V follow them). */
size_t lz_kv_layout(int L, int KV, const int *kept, int n, int *cap, size_t *first);

#ifdef __cplusplus
}
#endif
#endif /* LZ_KV_LAYOUT_H */
