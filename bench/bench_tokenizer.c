/* bench_tokenizer.c - single-thread tokenizer speed: load time, encode MB/s
 * and decode MB/s of the SentencePiece (Llama-2) and byte-level BPE (Llama-3)
 * vocabularies over ~20 MB of text (2WikiMQA passages plus the multilingual
 * vocab test inputs, repeated), encoded one document per call and in 1 MB
 * chunks. Fixtures absent -> SKIP, exit 0.
 * usage: bench_tokenizer [--mb N] */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

static const char *fixtures(void)
{
    const char *d = getenv("LZ_FIXTURES");
    return d ? d : "../shared/fixtures";
}

typedef struct {
    char *buf;              /* all documents back to back */
    size_t len, cap;
    size_t *off;            /* document starts; off[n] = len */
    int n, ncap;
} corpus;

static void add_doc(corpus *c, const char *s, size_t n)
{
    if (c->len + n > c->cap) {
        c->cap = (c->len + n) * 2;
        c->buf = realloc(c->buf, c->cap);
    }
    if (c->n + 2 > c->ncap) {
        c->ncap = c->ncap ? c->ncap * 2 : 1024;
        c->off = realloc(c->off, (size_t)c->ncap * sizeof *c->off);
    }
    memcpy(c->buf + c->len, s, n);
    c->off[c->n++] = c->len;
    c->len += n;
    c->off[c->n] = c->len;
}

/* Source documents: 2WikiMQA passages and the .inp cases, or a built-in text. */
static int load_sources(corpus *src)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/qa/2wikimqa_corpus.json", fixtures());
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    for (size_t i = 0; i < json_array_size(root); i++) {
        json_t *o = json_array_get(root, i);
        const char *title = json_string_value(json_object_get(o, "title"));
        json_t *text = json_object_get(o, "text");
        if (!title || !json_is_string(text)) continue;
        char *doc = malloc(strlen(title) + json_string_length(text) + 2);
        size_t n = (size_t)sprintf(doc, "%s\n", title);
        memcpy(doc + n, json_string_value(text), json_string_length(text));
        add_doc(src, doc, n + json_string_length(text));
        free(doc);
    }
    json_decref(root);
    snprintf(path, sizeof path, "%s/tokenizers/ggml-vocab-llama-bpe.gguf.inp", fixtures());
    FILE *f = fopen(path, "rb");
    if (f) {
        static char inp[1 << 16];
        size_t n = fread(inp, 1, sizeof inp - 1, f);
        fclose(f);
        inp[n] = '\0';
        for (char *p = inp, *q; (q = strstr(p, "\n__ggml_vocab_test__\n")); p = q + 21)
            if (q > p) add_doc(src, p, (size_t)(q - p));
    }
    if (src->n == 0) {
        static const char builtin[] =
            "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. "
            "It is named after the engineer Gustave Eiffel, whose company designed and built the tower "
            "from 1887 to 1889.\n\nLocally nicknamed \"La dame de fer\" (French for \"Iron Lady\"), it "
            "was constructed as the centerpiece of the 1889 World's Fair. Its height is 330 m (1,083 ft).";
        add_doc(src, builtin, sizeof builtin - 1);
    }
    return src->n;
}

static lz_tokenizer *load(const char *rel, double *ms)
{
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/%s", fixtures(), rel);
    double t0 = lz_now_s();
    lz_gguf *g = NULL;
    lz_tokenizer *t = NULL;
    if (lz_gguf_open(path, &g, err, sizeof err) != 0) {
        printf("SKIP %s: %s\n", path, err);
        return NULL;
    }
    if (lz_tokenizer_from_gguf(g, &t, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", path, err);
        t = NULL;
    }
    lz_gguf_close(g);
    *ms = 1e3 * (lz_now_s() - t0);
    return t;
}

static int bench(const char *name, const lz_tokenizer *t, double load_ms, const corpus *c)
{
    double mb = (double)c->len / 1e6;
    /* one call per document */
    long ntok = 0;
    int *all = NULL;
    size_t nall = 0, cap = 0;
    double t0 = lz_now_s();
    for (int d = 0; d < c->n; d++) {
        int *ids, n;
        if (lz_tokenizer_encode(t, c->buf + c->off[d], c->off[d + 1] - c->off[d], 0, &ids, &n) != 0) return 1;
        ntok += n;
        if (nall + (size_t)n > cap) {
            cap = (nall + (size_t)n) * 2;
            all = realloc(all, cap * sizeof *all);
        }
        memcpy(all + nall, ids, (size_t)n * sizeof *ids);
        nall += (size_t)n;
        free(ids);
    }
    double te = lz_now_s() - t0;
    /* 1 MB chunks */
    t0 = lz_now_s();
    long ntok_chunk = 0;
    for (size_t o = 0; o < c->len; o += 1 << 20) {
        size_t n = c->len - o < (1u << 20) ? c->len - o : 1u << 20;
        int *ids, k;
        if (lz_tokenizer_encode(t, c->buf + o, n, 0, &ids, &k) != 0) return 1;
        ntok_chunk += k;
        free(ids);
    }
    double tc = lz_now_s() - t0;
    /* decode everything back */
    t0 = lz_now_s();
    char *out;
    size_t olen;
    if (lz_tokenizer_decode(t, all, (int)nall, &out, &olen) != 0) return 1;
    double td = lz_now_s() - t0;
    free(out);
    free(all);
    printf("%-4s load %6.1f ms | encode %.1f MB in %.2f s = %5.2f MB/s per document (%d docs, %ld tokens, "
           "%.2f B/token), %5.2f MB/s in 1 MB chunks | decode %6.1f MB/s\n",
           name, load_ms, mb, te, mb / te, c->n, ntok, (double)c->len / (double)ntok, mb / tc,
           (double)olen / 1e6 / td);
    (void)ntok_chunk;
    return 0;
}

int main(int argc, char **argv)
{
    double target_mb = 20;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mb") == 0 && i + 1 < argc) target_mb = atof(argv[++i]);
        else { fprintf(stderr, "usage: %s [--mb N]\n", argv[0]); return 2; }
    }
    corpus src = {0}, c = {0};
    load_sources(&src);
    while ((double)c.len < target_mb * 1e6)
        for (int d = 0; d < src.n && (double)c.len < target_mb * 1e6; d++)
            add_doc(&c, src.buf + src.off[d], src.off[d + 1] - src.off[d]);
    printf("bench_tokenizer: %.1f MB, %d documents (from %d sources), 1 thread\n", (double)c.len / 1e6, c.n, src.n);
    int rc = 0, ran = 0;
    double ms;
    lz_tokenizer *t = load("tokenizers/ggml-vocab-llama-spm.gguf", &ms);
    if (t) { rc |= bench("spm", t, ms, &c); ran++; }
    lz_tokenizer_free(t);
    t = load("tokenizers/llama3-vocab.gguf", &ms);
    if (t) { rc |= bench("bpe", t, ms, &c); ran++; }
    lz_tokenizer_free(t);
    if (!ran) printf("SKIP no tokenizer fixtures\n");
    free(src.buf); free(src.off); free(c.buf); free(c.off);
    return rc;
}
