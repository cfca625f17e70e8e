/* fuzz_fts_query.c - libFuzzer target: the FTS query builder, the function
 * that turns a user's question into an FTS5 MATCH expression
 * (lz_meta_fts_quote, store/meta.c, used by lz_store_search for every
 * lazyquery question), and SQLite's FTS5 on what it builds. The input (to
 * its first NUL) is the question. Invariants beside the sanitizers:
 *   - the expression keeps the question's words: it is exactly each word
 *     (a run of ASCII letters and digits and bytes >= 0x80), in order,
 *     quoted, joined by " OR " (nothing of the question is FTS5 syntax);
 *   - FTS5 accepts it (no syntax error) in a real store's index;
 *   - a document whose text is the question is found by it whenever the
 *     question holds an ASCII letter or digit.
 * Each input's document is inserted in a transaction that is rolled back. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/meta.h"
#include "fuzz/fuzz_common.h"

static lz_meta *meta;
static int64_t model_id;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char path[600], err[1024];
    snprintf(path, sizeof path, "%s/meta.sqlite", fuzz_dir());
    if (lz_meta_open(path, 0, &meta, err, sizeof err)) { fprintf(stderr, "%s\n", err); abort(); }
    lz_meta_model mm;
    memset(&mm, 0, sizeof mm);
    snprintf(mm.fingerprint, sizeof mm.fingerprint, "%064d", 0);
    snprintf(mm.arch, sizeof mm.arch, "llama");
    mm.n_layers = mm.n_kv_heads = mm.head_dim = 1;
    snprintf(mm.rope_layout, sizeof mm.rope_layout, "adjacent");
    snprintf(mm.rope_scaling, sizeof mm.rope_scaling, "none");
    mm.rope_theta = 10000;
    mm.kv_dtype = 1;
    int prefix = 1;
    mm.prefix_tokens = &prefix;
    mm.n_prefix = 1;
    if (lz_meta_begin(meta, err, sizeof err) || lz_meta_model_insert(meta, &mm, err, sizeof err) ||
        lz_meta_commit(meta, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        abort();
    }
    model_id = mm.id;
    return 0;
}

static int is_word_byte(unsigned char c)
{
    return c >= 0x80 || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
}

/* The expression the question must give, written from the rule itself. */
static char *expected(const char *q, int *has_ascii_word)
{
    size_t n = strlen(q);
    char *e = malloc(n * 6 + 8), *o = e;
    if (!e) abort();
    *has_ascii_word = 0;
    int terms = 0;
    for (const unsigned char *p = (const unsigned char *)q; *p;) {
        if (!is_word_byte(*p)) { p++; continue; }
        if (terms++) o += sprintf(o, " OR ");
        *o++ = '"';
        for (; *p && is_word_byte(*p); p++) {
            *has_ascii_word |= *p < 0x80;
            *o++ = (char)*p;
        }
        *o++ = '"';
    }
    *o = 0;
    return e;
}

static int count_hit(const lz_meta_hit *h, void *ctx)
{
    (*(int *)ctx)++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *q = fuzz_strndup(data, size); /* to the first NUL, as a C string question */
    char *fts = lz_meta_fts_quote(q);
    FUZZ_CHECK(fts != NULL, "out of memory");
    int ascii = 0;
    char *want = expected(q, &ascii);
    FUZZ_CHECK(strcmp(fts, want) == 0, "the expression '%.200s' is not the question's words '%.200s'", fts, want);
    if (fts[0]) {
        char err[1024];
        lz_meta_doc d;
        memset(&d, 0, sizeof d);
        uint8_t hash[32] = { 0 };
        d.ext_id = "q";
        d.source_id = "q";
        d.passage = -1;
        d.text = q;
        memcpy(d.content_hash, hash, 32);
        int tok = 0;
        d.token_ids = &tok;
        d.n_tokens = 1;
        d.model_id = model_id;
        d.raw_bytes = d.stored_bytes = 1;
        FUZZ_CHECK(lz_meta_begin(meta, err, sizeof err) == 0, "begin: %s", err);
        FUZZ_CHECK(lz_meta_doc_insert(meta, &d, err, sizeof err) == 0, "insert: %s", err);
        int hits = 0;
        int rc = lz_meta_search(meta, fts, 5, count_hit, &hits, err, sizeof err);
        FUZZ_CHECK(rc == 0, "FTS5 refused '%.200s': %s", fts, err);
        FUZZ_CHECK(hits == 1 || !ascii, "the question's own text was not found by '%.200s' (%d hits)", fts, hits);
        lz_meta_rollback(meta);
    }
    free(want);
    free(fts);
    free(q);
    return 0;
}
