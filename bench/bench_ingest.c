/* bench_ingest.c - ingest throughput on the CPU: tokens/s of the encoder
 * alone (forward pass after the cached prefix + payload packing) and of the
 * whole lazyingest tool (parse, tokenize, encode, LMDB + SQLite commits),
 * for stories260K (fixture, if present) and a ~100M-parameter random model
 * (generated: dim 768, 12 layers, 12/4 heads, ffn 2048, vocab 32000).
 *
 * usage: bench_ingest [--docs N] [--threads N] [--skip-100m]
 * Passages: ../shared/fixtures/qa/2wikimqa_corpus.json, else generated.
 * The lazyingest binary is $LZ_BIN/lazyingest (default build/bin).
 */
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "ingest/encode.h"
#include "model/llama.h"
#include "model/mkmodel.h"
#include "model/prompt.h"

/* Writes a JSONL corpus of n passages to path. */
static int write_corpus(const char *path, int n)
{
    const char *dir = getenv("LZ_FIXTURES");
    char fx[512];
    snprintf(fx, sizeof fx, "%s/qa/2wikimqa_corpus.json", dir ? dir : "../shared/fixtures");
    json_error_t e;
    json_t *j = json_load_file(fx, 0, &e);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int k = 0;
    for (size_t i = 0; j && json_is_array(j) && i < json_array_size(j) && k < n; i++) {
        json_t *o = json_array_get(j, i * 13 % json_array_size(j));
        json_t *rec = json_pack("{s:s, s:O, s:O}", "id", "", "title", json_object_get(o, "title"), "text",
                                json_object_get(o, "text"));
        char id[32];
        snprintf(id, sizeof id, "p%d", k);
        json_object_set_new(rec, "id", json_string(id));
        char *line = json_dumps(rec, JSON_COMPACT);
        fprintf(f, "%s\n", line);
        free(line);
        json_decref(rec);
        k++;
    }
    json_decref(j);
    for (; k < n; k++)
        fprintf(f, "{\"id\": \"g%d\", \"title\": \"Generated %d\", \"text\": \"The river city was founded by a famous "
                   "king who ruled for many years and built bridges. People came from far away to trade. %d\"}\n",
                k, k, k);
    fclose(f);
    return 0;
}

/* Encoder alone over the corpus passages; returns tokens/s. */
static double bench_encoder(const char *model, const char *corpus, int threads, long *tokens)
{
    lz_llama *m;
    char err[1024];
    if (lz_llama_load(model, &m, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 0;
    }
    lz_llama_set_threads(threads);
    int *prefix, np;
    lz_prompt_prefix_tokens(m->tok, &prefix, &np);
    lz_encoder *e;
    lz_encoder_new(m, prefix, np, &e, err, sizeof err);
    lz_payload_codec *c = lz_payload_codec_new();
    FILE *f = fopen(corpus, "r");
    char *line = NULL;
    size_t cap = 0;
    double t = 0;
    *tokens = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        const char *title = json_string_value(json_object_get(o, "title"));
        const char *text = json_string_value(json_object_get(o, "text"));
        int *ids, n;
        lz_prompt_doc_tokens(m->tok, title, text, strlen(text), &ids, &n);
        double t0 = lz_now_s();
        void *blob;
        size_t len;
        lz_encoder_run(e, ids, n, err, sizeof err);
        lz_encoder_pack(e, 1, c, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, LZ_PAYLOAD_DEFAULT_LEVEL, &blob, &len, err, sizeof err);
        t += lz_now_s() - t0;
        *tokens += n;
        free(blob);
        free(ids);
        json_decref(o);
    }
    free(line);
    fclose(f);
    lz_payload_codec_free(c);
    lz_encoder_free(e);
    free(prefix);
    lz_llama_free(m);
    return t > 0 ? *tokens / t : 0;
}

/* The lazyingest tool end to end; fills its JSON summary into out. */
static int bench_tool(const char *bin, const char *model, const char *corpus, const char *store, int threads,
                      char *out, size_t outn)
{
    char th[16], cmd[2048];
    snprintf(th, sizeof th, "%d", threads);
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -s '%s' --json --threads %s '%s'", bin, model, store, th, corpus);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t k = fread(out, 1, outn - 1, p);
    out[k] = 0;
    return pclose(p);
}

int main(int argc, char **argv)
{
    int docs = 40, threads = 2, skip100 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--docs") && i + 1 < argc) docs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--skip-100m")) skip100 = 1;
        else {
            fprintf(stderr, "usage: bench_ingest [--docs N] [--threads N] [--skip-100m]\n");
            return 1;
        }
    }
    char tmp[256], err[1024], corpus[300], bin[512];
    snprintf(tmp, sizeof tmp, "%s/lzbench.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp)) return 1;
    snprintf(bin, sizeof bin, "%s/lazyingest", getenv("LZ_BIN") ? getenv("LZ_BIN") : "build/bin");
    snprintf(corpus, sizeof corpus, "%s/corpus.jsonl", tmp);
    write_corpus(corpus, docs);

    const char *models[2];
    const char *names[2];
    int nm = 0;
    const char *dir = getenv("LZ_FIXTURES");
    static char fx[512], big[300];
    snprintf(fx, sizeof fx, "%s/models/stories260K.gguf", dir ? dir : "../shared/fixtures");
    if (access(fx, R_OK) == 0) {
        models[nm] = fx;
        names[nm++] = "stories260K (5 layers, dim 64)";
    } else {
        printf("SKIP stories260K: %s not found\n", fx);
    }
    if (!skip100) {
        lz_mkmodel_opts o;
        lz_mkmodel_defaults(&o);
        o.dim = 768;
        o.n_layers = 12;
        o.n_heads = 12;
        o.n_kv_heads = 4;
        o.head_dim = 64;
        o.ffn_dim = 2048;
        o.vocab = 32000;
        snprintf(big, sizeof big, "%s/m100.gguf", tmp);
        double t0 = lz_now_s();
        if (lz_mkmodel_write(&o, big, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        printf("generated the 100M model in %.1f s\n", lz_now_s() - t0);
        models[nm] = big;
        names[nm++] = "random ~100M (12 layers, dim 768, 12/4 heads, ffn 2048, vocab 32000)";
    }
    printf("%d passages, %d threads\n", docs, threads);
    printf("| model | tokens | encoder tok/s | lazyingest tok/s (encode only) | lazyingest wall s | rerun (unchanged) wall s | stored bytes/token |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < nm; i++) {
        long tokens = 0;
        double enc = bench_encoder(models[i], corpus, threads, &tokens);
        char store[300], out[8192];
        snprintf(store, sizeof store, "%s/store%d", tmp, i);
        int rc = bench_tool(bin, models[i], corpus, store, threads, out, sizeof out);
        json_error_t je;
        json_t *j = json_loads(out, 0, &je);
        double tps = json_real_value(json_object_get(j, "tokens_per_s"));
        double wall = json_real_value(json_object_get(j, "wall_s"));
        double stored = (double)json_integer_value(json_object_get(j, "stored_bytes"));
        long enc_tokens = (long)json_integer_value(json_object_get(j, "tokens_encoded"));
        json_decref(j);
        /* the same corpus again: nothing to encode */
        int rc2 = bench_tool(bin, models[i], corpus, store, threads, out, sizeof out);
        j = json_loads(out, 0, &je);
        double rewall = json_real_value(json_object_get(j, "wall_s"));
        long reenc = (long)json_integer_value(json_object_get(j, "tokens_encoded"));
        json_decref(j);
        printf("| %s | %ld | %.0f | %.0f | %.2f | %.3f (%ld tokens encoded) | %.0f |%s\n", names[i], tokens, enc, tps,
               wall, rewall, reenc, enc_tokens ? stored / enc_tokens : 0,
               rc || rc2 ? " (lazyingest failed)" : "");
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", tmp);
    return 0;
}
