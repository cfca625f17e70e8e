/* tokenizer.c - the shared tokenizer handle: vocabulary arena and hash maps,
 * GGUF loading and dispatch to SentencePiece or byte-level BPE, the special
 * token splitter, encode/decode/piece and the accessors. The merge algorithms
 * live in tokenizer_spm.c and tokenizer_bpe.c, tokenizer.json in tokenizer_hf.c. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_impl.h"

void lz_tok_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* ---- small containers ---- */

int lz_idvec_push(lz_idvec *v, int id)
{
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 64;
        int *p = realloc(v->v, (size_t)cap * sizeof *p);
        if (!p) return LZ_ENOMEM;
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = id;
    return 0;
}

static int pair_before(const lz_pair *a, const lz_pair *b)
{
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

int lz_heap_push(lz_heap *h, lz_pair p)
{
    if (h->n == h->cap) {
        int cap = h->cap ? h->cap * 2 : 64;
        lz_pair *a = realloc(h->a, (size_t)cap * sizeof *a);
        if (!a) return LZ_ENOMEM;
        h->a = a;
        h->cap = cap;
    }
    int i = h->n++;
    while (i > 0) {
        int up = (i - 1) / 2;
        if (!pair_before(&p, &h->a[up])) break;
        h->a[i] = h->a[up];
        i = up;
    }
    h->a[i] = p;
    return 0;
}

lz_pair lz_heap_pop(lz_heap *h)
{
    lz_pair top = h->a[0];
    lz_pair last = h->a[--h->n];
    int i = 0, n = h->n;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && pair_before(&h->a[c + 1], &h->a[c])) c++;
        if (!pair_before(&h->a[c], &last)) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (n > 0) h->a[i] = last;
    return top;
}

int lz_scratch_syms(lz_tok_scratch *s, size_t n)
{
    if (n > (size_t)0x7fffffff) return LZ_ENOMEM;
    if ((int)n <= s->sym_cap) return 0;
    size_t cap = n < 256 ? 256 : n + n / 2;
    if (cap > (size_t)0x7fffffff) cap = n;
    lz_sym *p = realloc(s->sym, cap * sizeof *p);
    if (!p) return LZ_ENOMEM;
    s->sym = p;
    s->sym_cap = (int)cap;
    return 0;
}

void lz_scratch_free(lz_tok_scratch *s)
{
    free(s->sym);
    free(s->heap.a);
    free(s->buf);
    if (s->md) pcre2_match_data_free(s->md);
    memset(s, 0, sizeof *s);
}

/* ---- vocabulary ---- */

uint32_t lz_tok_hash(const char *s, size_t n)
{
    /* FNV-1a over 32-bit words would be faster; tokens are short, so bytes it is */
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return (uint32_t)(h ^ (h >> 32));
}

int lz_tok_alloc(lz_tokenizer **out, lz_tokenizer_kind kind, int n_vocab)
{
    lz_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return LZ_ENOMEM;
    t->kind = kind;
    t->n_vocab = n_vocab;
    t->toks = calloc(n_vocab > 0 ? (size_t)n_vocab : 1, sizeof *t->toks);
    if (!t->toks) { free(t); return LZ_ENOMEM; }
    t->bos = t->eos = t->unk = -1;
    for (int b = 0; b < 256; b++) t->byte_tok[b] = -1;
    *out = t;
    return 0;
}

int lz_tok_arena_add(lz_tokenizer *t, const void *s, size_t n, uint32_t *off)
{
    if (t->arena_len + n + 1 > 0xffffffffu) return LZ_ENOMEM;
    if (t->arena_len + n + 1 > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 1 << 16;
        while (cap < t->arena_len + n + 1) cap *= 2;
        char *p = realloc(t->arena, cap);
        if (!p) return LZ_ENOMEM;
        t->arena = p;
        t->arena_cap = cap;
    }
    *off = (uint32_t)t->arena_len;
    if (n) memcpy(t->arena + t->arena_len, s, n);
    t->arena[t->arena_len + n] = '\0'; /* texts are also C strings */
    t->arena_len += n + 1;
    return 0;
}

static void key_of(const lz_tokenizer *t, const lz_strmap *m, int id, const char **s, size_t *n)
{
    const lz_tok_entry *e = &t->toks[id];
    if (m->use_piece) { *s = t->arena + e->piece_off; *n = e->piece_len; }
    else { *s = t->arena + e->text_off; *n = e->text_len; }
}

int lz_strmap_find(const lz_tokenizer *t, const lz_strmap *m, const char *s, size_t n)
{
    if (!m->id) return -1;
    uint32_t h = lz_tok_hash(s, n);
    for (uint32_t i = h & m->mask;; i = (i + 1) & m->mask) {
        int id = m->id[i];
        if (id < 0) return -1;
        if (m->hash[i] != h) continue;
        const char *k;
        size_t kn;
        key_of(t, m, id, &k, &kn);
        if (kn == n && memcmp(k, s, n) == 0) return id;
    }
}

static void strmap_free(lz_strmap *m)
{
    free(m->hash);
    free(m->id);
    m->hash = NULL;
    m->id = NULL;
}

/* Indexes the tokens accepted by keep(); a later duplicate replaces an earlier one. */
static int strmap_build(lz_tokenizer *t, lz_strmap *m, int use_piece, int (*keep)(const lz_tok_entry *))
{
    uint32_t cap = 1024;
    while (cap < (uint32_t)t->n_vocab * 2u) cap *= 2;
    m->hash = malloc(cap * sizeof *m->hash);
    m->id = malloc(cap * sizeof *m->id);
    if (!m->hash || !m->id) { strmap_free(m); return LZ_ENOMEM; }
    memset(m->id, 0xff, cap * sizeof *m->id);
    m->mask = cap - 1;
    m->use_piece = use_piece;
    for (int id = 0; id < t->n_vocab; id++) {
        if (!keep(&t->toks[id])) continue;
        const char *s;
        size_t n;
        key_of(t, m, id, &s, &n);
        uint32_t h = lz_tok_hash(s, n);
        for (uint32_t i = h & m->mask;; i = (i + 1) & m->mask) {
            int o = m->id[i];
            if (o < 0) { m->id[i] = id; m->hash[i] = h; break; }
            if (m->hash[i] != h) continue;
            const char *k;
            size_t kn;
            key_of(t, m, o, &k, &kn);
            if (kn == n && memcmp(k, s, n) == 0) { m->id[i] = id; break; }
        }
    }
    return 0;
}

static int keep_any_text(const lz_tok_entry *e) { return e->text_len > 0; }
static int keep_normal(const lz_tok_entry *e) { return e->type == LZ_TOKTYPE_NORMAL && e->piece_len > 0; }

static int is_splitter(const lz_tok_entry *e)
{
    return e->text_len > 0 && (e->type == LZ_TOKTYPE_CONTROL || e->type == LZ_TOKTYPE_USER ||
                               e->type == LZ_TOKTYPE_UNKNOWN);
}

typedef struct {
    unsigned char first;
    uint32_t len;
    int id;
} special_key;

/* by first byte, then longest first (so the longest special token wins), then id */
static int cmp_special(const void *a, const void *b)
{
    const special_key *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id - y->id;
}

static void add_eog(lz_tokenizer *t, int id)
{
    if (id < 0 || id >= t->n_vocab) return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    if (t->n_eog < (int)(sizeof t->eog / sizeof t->eog[0])) t->eog[t->n_eog++] = id;
}

int lz_tok_index_text(lz_tokenizer *t) { return strmap_build(t, &t->by_text, 0, keep_any_text); }

int lz_tok_finish(lz_tokenizer *t)
{
    int rc;
    if (!t->by_text.id && (rc = lz_tok_index_text(t))) return rc;
    if (t->kind == LZ_TOKENIZER_BPE && (rc = strmap_build(t, &t->by_piece, 1, keep_normal))) return rc;

    int n = 0;
    for (int id = 0; id < t->n_vocab; id++) n += is_splitter(&t->toks[id]);
    special_key *keys = malloc((n ? (size_t)n : 1) * sizeof *keys);
    t->special = malloc((n ? (size_t)n : 1) * sizeof *t->special);
    if (!keys || !t->special) { free(keys); return LZ_ENOMEM; }
    n = 0;
    for (int id = 0; id < t->n_vocab; id++) {
        const lz_tok_entry *e = &t->toks[id];
        if (!is_splitter(e)) continue;
        keys[n].first = (unsigned char)t->arena[e->text_off];
        keys[n].len = e->text_len;
        keys[n++].id = id;
    }
    qsort(keys, (size_t)n, sizeof *keys, cmp_special);
    for (int i = 0; i < n; i++) t->special[i] = keys[i].id;
    t->n_special = n;
    int k = 0;
    for (int b = 0; b < 256; b++) {
        while (k < n && keys[k].first < b) k++;
        t->special_first[b] = k;
    }
    t->special_first[256] = n;
    free(keys);

    add_eog(t, t->eos);
    static const char *const eog_names[] = {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>",
                                            "<|endoftext|>", "<|im_end|>", "<end_of_turn>"};
    for (size_t i = 0; i < sizeof eog_names / sizeof eog_names[0]; i++)
        add_eog(t, lz_strmap_find(t, &t->by_text, eog_names[i], strlen(eog_names[i])));
    return 0;
}

void lz_tokenizer_free(lz_tokenizer *t)
{
    if (!t) return;
    free(t->toks);
    free(t->arena);
    strmap_free(&t->by_text);
    strmap_free(&t->by_piece);
    free(t->special);
    free(t->merges);
    if (t->re) pcre2_code_free(t->re);
    free(t);
}

/* ---- GGUF ---- */

/* Integer or bool metadata value; returns 1 when present and numeric. */
static int gguf_num(const lz_gguf *g, const char *key, int64_t *out)
{
    const lz_gguf_value *v = lz_gguf_get(g, key);
    if (!v) return 0;
    switch (v->type) {
    case LZ_GGUF_BOOL: case LZ_GGUF_UINT8: case LZ_GGUF_UINT16: case LZ_GGUF_UINT32:
    case LZ_GGUF_UINT64: *out = (int64_t)v->num.u; return 1;
    case LZ_GGUF_INT8: case LZ_GGUF_INT16: case LZ_GGUF_INT32: case LZ_GGUF_INT64:
        *out = v->num.i; return 1;
    default: return 0;
    }
}

static int gguf_token_id(const lz_gguf *g, const lz_tokenizer *t, const char *key, int *out,
                         char *err, size_t errlen)
{
    int64_t v;
    if (!gguf_num(g, key, &v)) return 0;
    if (v < 0 || v >= t->n_vocab) {
        /* some converters write -1 or a sentinel for "none" */
        if (v == -1 || v == 0xffffffffll) return 0;
        lz_tok_err(err, errlen, "%s = %lld is outside the vocabulary (%d tokens)", key,
                   (long long)v, t->n_vocab);
        return LZ_ECORRUPT;
    }
    *out = (int)v;
    return 0;
}

static int str_is(const char *s, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

static int gguf_load_bpe(const lz_gguf *g, lz_tokenizer *t, char *err, size_t errlen)
{
    const char *pre = "default";
    size_t pre_len = 7;
    lz_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &pre_len);
    const char *pattern;
    if (str_is(pre, pre_len, "llama-bpe") || str_is(pre, pre_len, "llama3") ||
        str_is(pre, pre_len, "smaug-bpe")) {
        pattern = lz_bpe_re_llama3;
        t->ignore_merges = 1;
    } else if (str_is(pre, pre_len, "default") || str_is(pre, pre_len, "gpt-2") ||
               str_is(pre, pre_len, "gpt2")) {
        pattern = lz_bpe_re_gpt2;
    } else {
        lz_tok_err(err, errlen,
                   "tokenizer.ggml.pre = '%.*s' is not supported (supported: llama-bpe, default)",
                   (int)pre_len, pre);
        return LZ_EUNSUPPORTED;
    }
    int rc = lz_bpe_set_regex(t, pattern, strlen(pattern), 0, err, errlen);
    if (rc) return rc;
    if ((rc = lz_bpe_prepare(t, err, errlen))) return rc;

    const lz_gguf_value *m = lz_gguf_get(g, "tokenizer.ggml.merges");
    if (!m) {
        lz_tok_err(err, errlen, "tokenizer.ggml.merges is missing (needed by a gpt2 tokenizer)");
        return LZ_ECORRUPT;
    }
    if (m->type != LZ_GGUF_ARRAY || m->elem_type != LZ_GGUF_STRING) {
        lz_tok_err(err, errlen, "tokenizer.ggml.merges is not an array of strings");
        return LZ_ECORRUPT;
    }
    if (m->n > 0x7fffffff) return LZ_ECORRUPT;
    if ((rc = lz_bpe_alloc_merges(t, (size_t)m->n))) return rc;
    for (uint64_t i = 0; i < m->n; i++) {
        const char *s;
        size_t n;
        if (lz_gguf_arr_str(m, i, &s, &n) != 0) {
            lz_tok_err(err, errlen, "tokenizer.ggml.merges[%llu] is unreadable", (unsigned long long)i);
            return LZ_ECORRUPT;
        }
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp) {
            lz_tok_err(err, errlen, "tokenizer.ggml.merges[%llu] = '%.*s' has no space", (unsigned long long)i,
                       (int)(n > 64 ? 64 : n), s);
            return LZ_ECORRUPT;
        }
        if ((rc = lz_bpe_add_merge(t, s, (size_t)(sp - s), sp + 1, n - (size_t)(sp - s) - 1, (int)i)))
            return rc;
    }
    return 0;
}

int lz_tokenizer_from_gguf(const lz_gguf *g, lz_tokenizer **out, char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!g || !out) return LZ_EINVAL;
    *out = NULL;
    const char *model;
    size_t model_len;
    if (lz_gguf_get_str(g, "tokenizer.ggml.model", &model, &model_len) != 0) {
        lz_tok_err(err, errlen, "tokenizer.ggml.model is missing: the GGUF has no tokenizer");
        return LZ_ECORRUPT;
    }
    lz_tokenizer_kind kind;
    if (str_is(model, model_len, "llama")) kind = LZ_TOKENIZER_SPM;
    else if (str_is(model, model_len, "gpt2")) kind = LZ_TOKENIZER_BPE;
    else {
        lz_tok_err(err, errlen, "tokenizer.ggml.model = '%.*s' is not supported (llama, gpt2)",
                   (int)model_len, model);
        return LZ_EUNSUPPORTED;
    }

    const lz_gguf_value *tokens = lz_gguf_get(g, "tokenizer.ggml.tokens");
    if (!tokens || tokens->type != LZ_GGUF_ARRAY || tokens->elem_type != LZ_GGUF_STRING) {
        lz_tok_err(err, errlen, "tokenizer.ggml.tokens is missing or not an array of strings");
        return LZ_ECORRUPT;
    }
    if (tokens->n == 0 || tokens->n > (1u << 26)) {
        lz_tok_err(err, errlen, "tokenizer.ggml.tokens has %llu entries", (unsigned long long)tokens->n);
        return LZ_ECORRUPT;
    }
    int n = (int)tokens->n;
    const lz_gguf_value *scores = lz_gguf_get(g, "tokenizer.ggml.scores");
    const lz_gguf_value *types = lz_gguf_get(g, "tokenizer.ggml.token_type");
    if (scores && (scores->type != LZ_GGUF_ARRAY || scores->n != tokens->n)) {
        lz_tok_err(err, errlen, "tokenizer.ggml.scores has %llu entries, tokens has %d",
                   (unsigned long long)scores->n, n);
        return LZ_ECORRUPT;
    }
    if (types && (types->type != LZ_GGUF_ARRAY || types->n != tokens->n)) {
        lz_tok_err(err, errlen, "tokenizer.ggml.token_type has %llu entries, tokens has %d",
                   (unsigned long long)types->n, n);
        return LZ_ECORRUPT;
    }

    lz_tokenizer *t;
    int rc = lz_tok_alloc(&t, kind, n);
    if (rc) return rc;
    for (int i = 0; i < n && !rc; i++) {
        const char *s;
        size_t len;
        lz_tok_entry *e = &t->toks[i];
        if (lz_gguf_arr_str(tokens, (uint64_t)i, &s, &len) != 0) {
            lz_tok_err(err, errlen, "tokenizer.ggml.tokens[%d] is unreadable", i);
            rc = LZ_ECORRUPT;
            break;
        }
        if ((rc = lz_tok_arena_add(t, s, len, &e->text_off))) break;
        e->text_len = (uint32_t)len;
        double sc = 0;
        if (scores && lz_gguf_arr_float(scores, (uint64_t)i, &sc) != 0) {
            lz_tok_err(err, errlen, "tokenizer.ggml.scores[%d] is not a number", i);
            rc = LZ_ECORRUPT;
            break;
        }
        e->score = (float)sc;
        int64_t ty = LZ_TOKTYPE_NORMAL;
        if (types && lz_gguf_arr_int(types, (uint64_t)i, &ty) != 0) {
            lz_tok_err(err, errlen, "tokenizer.ggml.token_type[%d] is not an integer", i);
            rc = LZ_ECORRUPT;
            break;
        }
        e->type = (ty >= 0 && ty <= LZ_TOKTYPE_BYTE) ? (uint8_t)ty : LZ_TOKTYPE_NORMAL;
        if (e->type == LZ_TOKTYPE_UNDEFINED) e->type = LZ_TOKTYPE_NORMAL;
    }
    if (!rc) rc = gguf_token_id(g, t, "tokenizer.ggml.bos_token_id", &t->bos, err, errlen);
    if (!rc) rc = gguf_token_id(g, t, "tokenizer.ggml.eos_token_id", &t->eos, err, errlen);
    if (!rc) rc = gguf_token_id(g, t, "tokenizer.ggml.unknown_token_id", &t->unk, err, errlen);
    int eot = -1, eom = -1;
    if (!rc) rc = gguf_token_id(g, t, "tokenizer.ggml.eot_token_id", &eot, err, errlen);
    if (!rc) rc = gguf_token_id(g, t, "tokenizer.ggml.eom_token_id", &eom, err, errlen);
    add_eog(t, eot);
    add_eog(t, eom);
    int64_t v;
    t->add_bos = gguf_num(g, "tokenizer.ggml.add_bos_token", &v) ? v != 0 : kind == LZ_TOKENIZER_SPM;
    t->add_space_prefix = gguf_num(g, "tokenizer.ggml.add_space_prefix", &v) ? v != 0
                                                                             : kind == LZ_TOKENIZER_SPM;
    if (!rc) rc = lz_tok_index_text(t);
    if (!rc) {
        if (kind == LZ_TOKENIZER_SPM) rc = lz_spm_prepare(t, err, errlen);
        else rc = gguf_load_bpe(g, t, err, errlen);
    }
    if (!rc) rc = lz_tok_finish(t);
    if (rc) {
        if (rc == LZ_ENOMEM && err && !err[0]) lz_tok_err(err, errlen, "out of memory loading the tokenizer");
        lz_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ---- encode / decode ---- */

static int encode_raw(const lz_tokenizer *t, const char *s, size_t n, int after_special,
                      lz_tok_scratch *sc, lz_idvec *out)
{
    if (t->kind == LZ_TOKENIZER_SPM)
        return lz_spm_encode(t, s, n, t->add_space_prefix && after_special, sc, out);
    return lz_bpe_encode(t, s, n, sc, out);
}

int lz_tokenizer_encode(const lz_tokenizer *t, const char *text, size_t len, int flags, int **ids,
                        int *n)
{
    if (ids) *ids = NULL;
    if (n) *n = 0;
    if (!t || !ids || !n || (!text && len)) return LZ_EINVAL;
    lz_idvec out = {0};
    lz_tok_scratch sc = {0};
    int rc = 0;
    if ((flags & LZ_TOK_BOS) && t->bos >= 0) rc = lz_idvec_push(&out, t->bos);

    const int parse_control = (flags & LZ_TOK_SPECIAL) != 0;
    int after_special = 1; /* the start counts as "after a special token" */
    size_t start = 0, i = 0;
    while (!rc && t->n_special && i < len) {
        unsigned char b = (unsigned char)text[i];
        int lo = t->special_first[b], hi = t->special_first[b + 1], hit = -1;
        for (int k = lo; k < hi; k++) {
            int id = t->special[k];
            const lz_tok_entry *e = &t->toks[id];
            if (e->type != LZ_TOKTYPE_USER && !parse_control) continue;
            if (e->text_len <= len - i && memcmp(text + i, t->arena + e->text_off, e->text_len) == 0) {
                hit = id;
                break;
            }
        }
        if (hit < 0) { i++; continue; }
        if (i > start) {
            rc = encode_raw(t, text + start, i - start, after_special, &sc, &out);
            if (rc) break;
        }
        rc = lz_idvec_push(&out, hit);
        after_special = 1;
        i += t->toks[hit].text_len;
        start = i;
    }
    if (!rc && start < len) rc = encode_raw(t, text + start, len - start, after_special, &sc, &out);
    lz_scratch_free(&sc);
    if (rc) { free(out.v); return rc; }
    if (!out.v) { /* always hand back a buffer the caller can free */
        out.v = malloc(sizeof *out.v);
        if (!out.v) return LZ_ENOMEM;
    }
    *ids = out.v;
    *n = out.n;
    return 0;
}

/* The bytes of id after prev, without copying; -1 if id is out of range. */
static int piece_span(const lz_tokenizer *t, int prev, int id, const char **p, size_t *n)
{
    if (id < 0 || id >= t->n_vocab) return -1;
    const lz_tok_entry *e = &t->toks[id];
    *p = t->arena + e->piece_off;
    *n = e->piece_len;
    if (id == t->bos) { *n = 0; return 0; }
    if (t->kind == LZ_TOKENIZER_SPM && t->add_space_prefix && (prev < 0 || prev == t->bos) &&
        *n > 0 && (*p)[0] == ' ') {
        (*p)++;
        (*n)--;
    }
    return 0;
}

int lz_tokenizer_piece(const lz_tokenizer *t, int prev, int id, char *buf, size_t cap)
{
    const char *p;
    size_t n;
    if (!t || piece_span(t, prev, id, &p, &n) < 0) return -1;
    if (buf && cap) memcpy(buf, p, n < cap ? n : cap);
    return (int)n;
}

int lz_tokenizer_decode(const lz_tokenizer *t, const int *ids, int n, char **out, size_t *len)
{
    if (out) *out = NULL;
    if (len) *len = 0;
    if (!t || !out || n < 0 || (!ids && n)) return LZ_EINVAL;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        const char *p;
        size_t m;
        if (piece_span(t, i ? ids[i - 1] : -1, ids[i], &p, &m) < 0) return LZ_EINVAL;
        total += m;
    }
    char *s = malloc(total + 1);
    if (!s) return LZ_ENOMEM;
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        const char *p = NULL;
        size_t m = 0;
        piece_span(t, i ? ids[i - 1] : -1, ids[i], &p, &m);
        memcpy(s + k, p, m);
        k += m;
    }
    s[k] = '\0';
    *out = s;
    if (len) *len = k;
    return 0;
}

/* ---- accessors ---- */

lz_tokenizer_kind lz_tokenizer_type(const lz_tokenizer *t) { return t ? t->kind : LZ_TOKENIZER_SPM; }
int lz_tokenizer_vocab_size(const lz_tokenizer *t) { return t ? t->n_vocab : 0; }
int lz_tokenizer_bos(const lz_tokenizer *t) { return t ? t->bos : -1; }
int lz_tokenizer_eos(const lz_tokenizer *t) { return t ? t->eos : -1; }
int lz_tokenizer_add_bos(const lz_tokenizer *t) { return t ? t->add_bos : 0; }

int lz_tokenizer_is_eog(const lz_tokenizer *t, int id)
{
    if (!t || id < 0) return 0;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return 1;
    return 0;
}

int lz_tokenizer_find(const lz_tokenizer *t, const char *text)
{
    if (!t || !text) return -1;
    return lz_strmap_find(t, &t->by_text, text, strlen(text));
}

const char *lz_tokenizer_token_text(const lz_tokenizer *t, int id, size_t *len)
{
    if (!t || id < 0 || id >= t->n_vocab) return NULL;
    if (len) *len = t->toks[id].text_len;
    return lz_tok_text(t, id);
}
