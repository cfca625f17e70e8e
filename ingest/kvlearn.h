/* kvlearn.h - learned key importance for KV eviction at ingest ("retaining
 * heads", as Locret): per (layer, kv head) a linear model that predicts the
 * log of a key's reconstruction score (the attention the model gives it while
 * it re-reads the document, --kv-reconstruct) from what encoding already has:
 * the key's value row, the key unrotated to position 0, and three position
 * features. Fitted once by ridge regression on calibration documents encoded
 * with --kv-reconstruct (lazyingest --kv-learn-out); used by --kv-learned: no
 * extra forward pass, F multiply-adds a key.
 *
 * Features of key j of an n-token document placed after s prefix tokens
 * (F = 2d + 4; keys are stored rotated at s + j):
 *   x = [ v_j (d) | R(-(s + j)) k_j (d) | j / n | 1 / (1 + j) | j == 0 | 1 ]
 *   score_j = exp(w_lg . x)   (an attention-like mass; kvpolicy weights and pools it)
 *
 * File (little-endian): "LZKVLRN1" | u32 L, KV, d, F, n_docs | 32-byte model
 * fingerprint | f32 w[L][KV][F] | sha256 of everything before it (32 bytes).
 * Its hash (the sha256's first 4 bytes) enters the KV spec as learned=%08x, so
 * a document scored by another model file is "changed".
 */
#ifndef LZ_KVLEARN_H
#define LZ_KVLEARN_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int L, KV, d, F;
    uint32_t n_docs;         /* calibration documents it was fitted on */
    uint8_t fingerprint[32]; /* the model's (lz_llama.fingerprint) */
    uint32_t hash;           /* never 0 */
    float *w;                /* (L, KV, F) */
} lz_kvlearn;

/* F for head_dim d. */
int lz_kvlearn_nfeat(int d);

/* Features of the n keys of one (layer, kv head) block: x (n, F) from keys k
 * and values v (rows 0..n-1, d each) and the unrotation tables cs (n, d/2)
 * pairs (cos, sin) of -(s + j) * inv_freq (lz_kvlearn_unrotation). */
void lz_kvlearn_features(float *x, const float *k, const float *v, const float *cs, int d, int n, int layout);
/* cs (n, d/2, 2) for keys rotated at s + j. */
void lz_kvlearn_unrotation(float *cs, int n, int s, int d, const float *inv_freq);

/* ---- fitting ---- */
typedef struct lz_kvlearn_acc lz_kvlearn_acc;
lz_kvlearn_acc *lz_kvlearn_acc_new(int L, int KV, int d);
void lz_kvlearn_acc_free(lz_kvlearn_acc *a);
/* One document: keys k and values v (L, KV, T, d) (token j at row j, keys
 * rotated at s + j), attention-only reconstruction scores attn (L, KV, n).
 * Adds (x, log(attn + 1e-6)) of every key to the normal equations. Returns 0
 * or -1 (out of memory). */
int lz_kvlearn_acc_doc(lz_kvlearn_acc *a, const float *k, const float *v, int T, int s, int n, const float *attn,
                       int layout, const float *inv_freq);
uint32_t lz_kvlearn_acc_docs(const lz_kvlearn_acc *a);
/* Ridge solution per head (lambda = ridge * mean diagonal of X^T X), into
 * out (w allocated; fingerprint and hash left to the caller / save). Returns
 * 0, or -1 without any document or on allocation failure. */
int lz_kvlearn_fit(const lz_kvlearn_acc *a, double ridge, lz_kvlearn *out);

/* ---- file ---- */
/* Writes m (its hash is set from the bytes written). Returns 0 or -1 with err. */
int lz_kvlearn_save(lz_kvlearn *m, const char *path, char *err, size_t errlen);
/* Reads and verifies (magic, sizes, checksum). Returns 0 or -1 with err
 * naming the file and what is wrong. */
int lz_kvlearn_load(const char *path, lz_kvlearn *m, char *err, size_t errlen);
void lz_kvlearn_free(lz_kvlearn *m);

/* ---- scoring ---- */
/* out (L, KV, n) = exp(w . x) of every key (k, v as lz_kvlearn_acc_doc).
 * Returns 0 or -1 (out of memory). */
int lz_kvlearn_predict(const lz_kvlearn *m, const float *k, const float *v, int T, int s, int n, int layout,
                       const float *inv_freq, float *out);

#endif /* LZ_KVLEARN_H */
