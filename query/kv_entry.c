/* kv_entry.c - the session's host-tier entries (kv_entry.h): allocation in the
 * backend's pinned memory or the heap, and their making from store payloads, one
 * at a time or many at once on all threads (fp32, bf16 or, for a backend that
 * reads it, fp8 as stored). */
#include "query/kv_entry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The bytes of an entry of rows kept rows (at least one) of element elem: K, V, fp8's scales. */
static size_t entry_bytes(const lz_llama_config *c, size_t rows, int elem)
{
    const size_t nh = (size_t)c->n_layers * c->n_kv_heads;
    return 2 * (rows ? rows : 1) * c->head_dim * (size_t)elem + (elem == KV_ENTRY_FP8 ? 2 * nh * sizeof(float) : 0);
}

kv_entry *kv_entry_alloc(const kv_entry_env *env, int n, const int *kept, int elem)
{
    const lz_llama_config *c = env->cfg;
    const size_t nh = (size_t)c->n_layers * c->n_kv_heads;
    kv_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->n = n;
    e->n_kept = malloc(nh * sizeof(int));
    e->head_row = malloc(nh * sizeof(int64_t));
    if (!e->n_kept || !e->head_row) { kv_entry_free(env, e); return NULL; }
    size_t rows = 0;
    for (size_t i = 0; i < nh; i++) {
        e->n_kept[i] = kept ? kept[i] : n;
        e->head_row[i] = (int64_t)rows;
        rows += (size_t)e->n_kept[i];
    }
    const size_t per = (rows ? rows : 1) * c->head_dim;
    e->bytes = entry_bytes(c, rows, elem);
    const lz_query_backend *be = env->backend;
    if (be && be->host_alloc && be->host_free) e->pinned = (e->block = be->host_alloc(be->ctx, e->bytes)) != NULL;
    if (!e->block && !(e->block = env->heap ? env->heap(e->bytes) : malloc(e->bytes))) {
        kv_entry_free(env, e);
        return NULL;
    }
    if (elem == KV_ENTRY_FP8) {
        e->k8 = e->block;
        e->v8 = e->k8 + per;
        e->k_scales = (float *)(void *)(e->v8 + per); /* per is a multiple of d (even): aligned */
        e->v_scales = e->k_scales + nh;
    } else if (elem == KV_ENTRY_BF16) {
        e->k16 = e->block;
        e->v16 = e->k16 + per;
    } else {
        e->k = e->block;
        e->v = e->k + per;
    }
    return e;
}

void kv_entry_clear(const kv_entry_env *env, kv_entry *e)
{
    const lz_query_backend *be = env->backend;
    if (e->pinned) be->host_free(be->ctx, e->block, e->bytes);
    else free(e->block);
    free(e->n_kept);
    free(e->head_row);
}

void kv_entry_free(const kv_entry_env *env, kv_entry *e)
{
    if (!e) return;
    kv_entry_clear(env, e);
    free(e);
}

lz_kv_segment kv_entry_segment(const kv_entry *e, int64_t rot)
{
    lz_kv_segment s = {.k = e->k, .v = e->v, .n_kept = e->n_kept, .n = e->n, .stride = e->n > 0 ? e->n : 1, .rot = rot,
                       .head_row = e->head_row, .k16 = e->k16, .v16 = e->v16, .k8 = e->k8, .v8 = e->v8,
                       .k_scales = e->k_scales, .v_scales = e->v_scales};
    return s;
}

/* The element an entry of a payload with this header takes (fp8 kept only in the batch
 * decoder's formats, which can hand its bytes over). */
static int entry_elem(const kv_entry_env *env, const lz_payload_info *info)
{
    if (env->f32) return KV_ENTRY_F32;
    if (info->dtype == LZ_PAYLOAD_DTYPE_FP8)
        return env->fp8 && lz_payload_batch_format(info) ? KV_ENTRY_FP8 : KV_ENTRY_BF16; /* else dequantised */
    return info->dtype == LZ_PAYLOAD_DTYPE_BF16 ? KV_ENTRY_BF16 : KV_ENTRY_F32;
}

/* An undecoded entry sized for blob, after its header's checks; *elem says which decoder,
 * *enomem 1 when it failed for memory. */
static kv_entry *entry_for(const kv_entry_env *env, const void *blob, size_t len, int *elem, int *enomem, char *err,
                           size_t errlen)
{
    const lz_llama_config *c = env->cfg;
    char e2[200] = "";
    lz_payload_info info;
    if (lz_payload_parse(blob, len, 0, &info, e2, sizeof e2)) {
        snprintf(err, errlen, "corrupt KV payload: %s", e2);
        return NULL;
    }
    if (memcmp(info.model, env->fingerprint, 32) || info.n_layers != c->n_layers ||
        info.n_kv_heads != c->n_kv_heads || info.head_dim != c->head_dim) {
        snprintf(err, errlen, "KV payload was built by another model (%d layers, %d kv heads, head_dim %d)",
                 info.n_layers, info.n_kv_heads, info.head_dim);
        return NULL;
    }
    if (info.n_tokens > QUERY_MAX_POSITIONS) { /* a header that asks for absurd memory is corrupt, not a shortage */
        snprintf(err, errlen, "corrupt KV payload: %d tokens, more than a prompt's %d positions", info.n_tokens,
                 QUERY_MAX_POSITIONS);
        return NULL;
    }
    *elem = entry_elem(env, &info);
    int *kept = malloc((size_t)c->n_layers * c->n_kv_heads * sizeof *kept);
    if (kept) lz_payload_kept(blob, &info, kept);
    kv_entry *e = kept ? kv_entry_alloc(env, info.n_tokens, kept, *elem) : NULL;
    free(kept);
    if (!e) snprintf(err, errlen, "out of memory for %d tokens of KV", info.n_tokens), *enomem = 1;
    return e;
}

int kv_entry_decode_many(const kv_entry_env *env, const void *const *blobs, const size_t *lens, int n,
                         kv_entry **out, char (*errs)[256], int *status)
{
    lz_payload_job *jobs = calloc((size_t)(n > 0 ? n : 1), sizeof *jobs);
    int *job_of = malloc((size_t)(n > 0 ? n : 1) * sizeof *job_of), nj = 0, made = 0;
    for (int i = 0; i < n; i++) {
        char e2[256] = "";
        out[i] = NULL;
        if (job_of) job_of[i] = -1;
        if (status) status[i] = 0;
        if (!blobs[i]) { if (errs) errs[i][0] = 0; continue; }
        int elem = 0, enomem = 0, drc;
        if (!jobs || !job_of) snprintf(e2, sizeof e2, "out of memory"), enomem = 1;
        else if ((out[i] = entry_for(env, blobs[i], lens[i], &elem, &enomem, e2, sizeof e2)) && elem != KV_ENTRY_F32) {
            const kv_entry *e = out[i];
            jobs[nj] = (lz_payload_job){.blob = blobs[i], .len = lens[i], .k = e->k16, .v = e->v16, .k8 = e->k8,
                                        .v8 = e->v8, .k_scales = e->k_scales, .v_scales = e->v_scales};
            job_of[i] = nj++;
        } else if (out[i] && (drc = lz_payload_decode_f32_packed(env->codec, blobs[i], lens[i], out[i]->k, out[i]->v,
                                                                 NULL, NULL, e2, sizeof e2))) {
            char m[256];
            snprintf(m, sizeof m, "%s%.200s", drc == LZ_ENOMEM ? "" : "corrupt KV payload: ", e2);
            memcpy(e2, m, sizeof e2);
            enomem = drc == LZ_ENOMEM;
            kv_entry_free(env, out[i]);
            out[i] = NULL;
        }
        if (errs) memcpy(errs[i], e2, sizeof errs[i]);
        if (status && !out[i]) status[i] = enomem ? LZ_QUERY_ENOMEM : -1;
    }
    if (nj) lz_payload_decode_batch(env->codec, jobs, nj);
    for (int i = 0; i < n; i++) {
        const int j = job_of ? job_of[i] : -1;
        if (j >= 0 && jobs[j].status) {
            const int enomem = jobs[j].status == LZ_ENOMEM; /* its scratch, not its bytes */
            if (errs) snprintf(errs[i], sizeof errs[i], "%s%s", enomem ? "" : "corrupt KV payload: ", jobs[j].err);
            if (status) status[i] = enomem ? LZ_QUERY_ENOMEM : -1;
            kv_entry_free(env, out[i]);
            out[i] = NULL;
        }
        made += out[i] != NULL;
    }
    free(jobs);
    free(job_of);
    return made;
}

kv_entry *kv_entry_decode(const kv_entry_env *env, const void *blob, size_t len, const char *what, int *status,
                          char *err, size_t errlen)
{
    kv_entry *e;
    char e2[1][256];
    int st = 0;
    if (kv_entry_decode_many(env, &blob, &len, 1, &e, e2, &st) != 1) snprintf(err, errlen, "%s: %s", what, e2[0]);
    if (status) *status = st;
    return e;
}

size_t kv_entry_bytes_of(const kv_entry_env *env, const void *blob, size_t len, int n)
{
    const lz_llama_config *c = env->cfg;
    lz_payload_info info;
    char e2[256];
    const size_t nh = (size_t)c->n_layers * c->n_kv_heads;
    size_t rows = nh * (n > 0 ? n : 1);
    int elem = KV_ENTRY_F32;
    if (!lz_payload_parse(blob, len, 0, &info, e2, sizeof e2)) {
        rows = info.n_kept_sum;
        elem = entry_elem(env, &info);
    }
    return entry_bytes(c, rows, elem);
}
