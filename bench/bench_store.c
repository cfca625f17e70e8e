/* bench_store.c - the storage side of ingest: bytes per token of real KV
 * (computed by the engine for real passages) as raw bf16, zstd and byte
 * shuffle + zstd at several levels, with encode/decode speed; then LMDB
 * write (durable batches) and read MB/s of such payloads.
 *
 * usage: bench_store [--model PATH.gguf] [--docs N] [--lmdb-mb N] [--threads N]
 * Model default: ../shared/fixtures/models/stories260K.gguf, else a generated
 * tiny random model. Passages: ../shared/fixtures/qa/2wikimqa_corpus.json
 * when present, else generated sentences. Not a test: prints a table.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "ingest/encode.h"
#include "model/llama.h"
#include "model/mkmodel.h"
#include "model/prompt.h"
#include "store/kvdb.h"
#include "store/payload.h"

typedef struct {
    char **title, **text;
    int n;
} passages;

static void load_passages(int want, passages *p)
{
    p->title = calloc((size_t)want, sizeof(char *));
    p->text = calloc((size_t)want, sizeof(char *));
    p->n = 0;
    const char *dir = getenv("LZ_FIXTURES");
    char path[512];
    snprintf(path, sizeof path, "%s/qa/2wikimqa_corpus.json", dir ? dir : "../shared/fixtures");
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (j && json_is_array(j)) {
        for (size_t i = 0; i < json_array_size(j) && p->n < want; i++) {
            json_t *o = json_array_get(j, i * 7 % json_array_size(j));
            const char *t = json_string_value(json_object_get(o, "title"));
            const char *x = json_string_value(json_object_get(o, "text"));
            if (!x || strlen(x) < 200) continue;
            p->title[p->n] = strdup(t ? t : "");
            p->text[p->n] = strdup(x);
            p->n++;
        }
        printf("passages: %d from %s\n", p->n, path);
    }
    json_decref(j);
    static const char *w[] = { "the", "river", "city", "was", "founded", "in", "by", "a", "famous", "king",
                               "who", "ruled", "for", "many", "years", "and", "built", "bridges" };
    unsigned seed = 1;
    while (p->n < want) {
        char buf[2048];
        size_t o = 0;
        for (int k = 0; k < 120; k++) {
            seed = seed * 1103515245u + 12345u;
            o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", w[(seed >> 16) % 18], k % 12 == 11 ? ". " : " ");
        }
        p->title[p->n] = strdup("Generated");
        p->text[p->n] = strdup(buf);
        p->n++;
    }
}

typedef struct {
    int codec, level;
    double bytes, t_enc, t_dec;
} row;

int main(int argc, char **argv)
{
    const char *model = NULL;
    int docs = 24, lmdb_mb = 256, threads = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--docs") && i + 1 < argc) docs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--lmdb-mb") && i + 1 < argc) lmdb_mb = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_store [--model PATH.gguf] [--docs N] [--lmdb-mb N] [--threads N]\n");
            return 1;
        }
    }
    char tmp[256], err[1024], gen[300];
    snprintf(tmp, sizeof tmp, "%s/lzbench.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp)) return 1;
    if (!model) {
        const char *dir = getenv("LZ_FIXTURES");
        static char fx[512];
        snprintf(fx, sizeof fx, "%s/models/stories260K.gguf", dir ? dir : "../shared/fixtures");
        if (access(fx, R_OK) == 0) model = fx;
        else {
            lz_mkmodel_opts o;
            lz_mkmodel_defaults(&o);
            snprintf(gen, sizeof gen, "%s/tiny.gguf", tmp);
            if (lz_mkmodel_write(&o, gen, err, sizeof err)) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            model = gen;
        }
    }
    lz_llama *m;
    if (lz_llama_load(model, &m, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (threads > 0) lz_llama_set_threads(threads);
    const lz_llama_config *c = &m->cfg;
    printf("model: %s (L=%d KV=%d d=%d): %d bf16 bytes of K+V per token\n", model, c->n_layers, c->n_kv_heads,
           c->head_dim, 4 * c->n_layers * c->n_kv_heads * c->head_dim);
    passages P;
    load_passages(docs, &P);
    int *prefix, np;
    lz_prompt_prefix_tokens(m->tok, &prefix, &np);
    lz_encoder *e;
    if (lz_encoder_new(m, prefix, np, &e, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    lz_payload_codec *codec = lz_payload_codec_new();
    static const int levels[] = { 1, 3, 9, 19 };
    row rows[1 + 2 * 4];
    int nr = 0;
    rows[nr++] = (row){ LZ_PAYLOAD_CODEC_RAW, 0, 0, 0, 0 };
    for (int cd = LZ_PAYLOAD_CODEC_ZSTD; cd <= LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD; cd++)
        for (int l = 0; l < 4; l++) rows[nr++] = (row){ cd, levels[l], 0, 0, 0 };
    long tokens = 0;
    double raw_bytes = 0;
    /* payloads kept for the LMDB part (shuffle+zstd level 3) */
    void **keep = calloc((size_t)P.n, sizeof(void *));
    size_t *keep_len = calloc((size_t)P.n, sizeof(size_t));
    float *kbuf = NULL, *vbuf = NULL;
    size_t kcap = 0;
    for (int i = 0; i < P.n; i++) {
        int *ids, n;
        lz_prompt_doc_tokens(m->tok, P.title[i], P.text[i], strlen(P.text[i]), &ids, &n);
        if (n > 1024) n = 1024;
        if (lz_encoder_run(e, ids, n, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        free(ids);
        tokens += n;
        size_t need = (size_t)c->n_layers * c->n_kv_heads * n * c->head_dim;
        if (need > kcap) {
            kcap = need;
            kbuf = realloc(kbuf, kcap * 4);
            vbuf = realloc(vbuf, kcap * 4);
        }
        for (int r = 0; r < nr; r++) {
            void *blob;
            size_t len;
            double t0 = lz_now_s();
            if (lz_encoder_pack(e, 1, codec, rows[r].codec, rows[r].level, &blob, &len, err, sizeof err)) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            double t1 = lz_now_s();
            lz_payload_info info;
            if (lz_payload_decode_f32(codec, blob, len, kbuf, vbuf, n, NULL, &info, err, sizeof err)) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            double t2 = lz_now_s();
            rows[r].bytes += (double)len;
            rows[r].t_enc += t1 - t0;
            rows[r].t_dec += t2 - t1;
            if (r == 0) raw_bytes += (double)info.raw_size;
            if (rows[r].codec == LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD && rows[r].level == 3) {
                keep[i] = blob;
                keep_len[i] = len;
            } else {
                free(blob);
            }
        }
    }
    printf("\n%d passages, %ld tokens (prefix %d tokens not counted), %.2f MB of raw bf16 K+V\n", P.n, tokens, np,
           raw_bytes / 1e6);
    printf("| codec | zstd level | bytes/token | ratio vs raw bf16 | encode MB/s | decode MB/s |\n");
    printf("|---|---|---|---|---|---|\n");
    for (int r = 0; r < nr; r++)
        printf("| %s | %s%d | %.1f | %.2fx | %.0f | %.0f |\n", lz_payload_codec_name(rows[r].codec),
               rows[r].codec ? "" : "-", rows[r].level, rows[r].bytes / tokens, raw_bytes / rows[r].bytes,
               raw_bytes / 1e6 / rows[r].t_enc, raw_bytes / 1e6 / rows[r].t_dec);
    printf("(MB/s of raw bf16; encode includes fp32->bf16 and the CRC32C, decode the CRC32C and bf16->fp32)\n");

    /* LMDB: durable batches of 32 payloads, then reads */
    char path[400];
    snprintf(path, sizeof path, "%s/kv", tmp);
    lz_kvdb *db;
    if (lz_kvdb_open(path, 0, &db, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    double target = lmdb_mb * 1e6, written = 0;
    int n_items = 0;
    enum { B = 32 };
    lz_kvdb_item items[B];
    uint8_t keys[B][64];
    double t0 = lz_now_s();
    int nb = 0;
    while (written < target) {
        for (int j = 0; j < B; j++) {
            int src = (n_items + j) % P.n;
            memset(keys[j], 0, 64);
            memcpy(keys[j], &(int){ n_items + j }, sizeof(int));
            items[j] = (lz_kvdb_item){ keys[j], 64, keep[src], keep_len[src] };
            written += (double)keep_len[src];
        }
        if (lz_kvdb_put_batch(db, items, B, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        n_items += B;
        nb++;
    }
    double t_write = lz_now_s() - t0;
    lz_kvdb_reader *rd;
    lz_kvdb_reader_begin(db, &rd, err, sizeof err);
    double read_bytes = 0;
    uint32_t sink = 0;
    t0 = lz_now_s();
    for (int i = 0; i < n_items; i++) {
        uint8_t key[64] = { 0 };
        memcpy(key, &i, sizeof(int));
        const void *v;
        size_t len;
        if (lz_kvdb_reader_get(rd, key, 64, &v, &len, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        sink += lz_crc32c(0, v, len); /* touch every byte */
        read_bytes += (double)len;
    }
    double t_read = lz_now_s() - t0;
    /* read + full decode to fp32 */
    t0 = lz_now_s();
    double dec_raw = 0;
    for (int i = 0; i < n_items && i < 4 * P.n; i++) {
        uint8_t key[64] = { 0 };
        memcpy(key, &i, sizeof(int));
        const void *v;
        size_t len;
        lz_kvdb_reader_get(rd, key, 64, &v, &len, err, sizeof err);
        lz_payload_info info;
        if (lz_payload_decode_f32(codec, v, len, kbuf, vbuf, (int)(kcap / ((size_t)c->n_layers * c->n_kv_heads * c->head_dim)),
                                  NULL, &info, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        dec_raw += (double)info.raw_size;
    }
    double t_dec = lz_now_s() - t0;
    lz_kvdb_reader_end(rd);
    lz_kvdb_stats st;
    lz_kvdb_stat(db, &st, err, sizeof err);
    lz_kvdb_close(db);
    printf("\nLMDB (%s): %d payloads of %.1f KB average, %.0f MB\n", tmp, n_items, written / n_items / 1e3,
           written / 1e6);
    printf("| operation | MB/s | per payload |\n|---|---|---|\n");
    printf("| write, %d-payload durable transactions (%d commits) | %.0f | %.1f us |\n", B, nb, written / 1e6 / t_write,
           t_write / n_items * 1e6);
    printf("| read (zero-copy get + CRC32C over the bytes, warm page cache) | %.0f | %.1f us |\n",
           read_bytes / 1e6 / t_read, t_read / n_items * 1e6);
    printf("| read + decode to fp32 (MB of raw bf16 produced) | %.0f | %.1f us |\n", dec_raw / 1e6 / t_dec,
           t_dec / (n_items < 4 * P.n ? n_items : 4 * P.n) * 1e6);
    printf("map size %.0f MB, %llu entries (sink %u)\n", st.map_size / 1e6, (unsigned long long)st.entries, sink);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", tmp);
    for (int i = 0; i < P.n; i++) {
        free(keep[i]);
        free(P.title[i]);
        free(P.text[i]);
    }
    free(keep);
    free(keep_len);
    free(P.title);
    free(P.text);
    free(kbuf);
    free(vbuf);
    free(prefix);
    lz_payload_codec_free(codec);
    lz_encoder_free(e);
    lz_llama_free(m);
    return 0;
}
