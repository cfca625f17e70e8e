/* tokenizer_bpe.c - byte-level BPE (GPT-2 / Llama-3): the text is split into
 * pre-tokens by a regex (PCRE2, UTF + UCP, JIT when available), each
 * pre-token's bytes start as one symbol each, and merges apply lowest rank
 * first (ties: leftmost). Bytes of invalid UTF-8 skip the regex and go out as
 * single-byte tokens, so any input encodes and decodes back bytewise. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_impl.h"
#include "base/unicode.h"

const char lz_bpe_re_llama3[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char lz_bpe_re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

int lz_bpe_prepare(lz_tokenizer *t, char *err, size_t errlen)
{
    /* the token of each byte: its GPT-2 code point as a one-character token */
    for (int b = 0; b < 256; b++) {
        char u[4];
        int n = lz_utf8_encode(lz_byte_to_cp((uint8_t)b), u);
        t->byte_tok[b] = lz_strmap_find(t, &t->by_text, u, (size_t)n);
        if (t->byte_tok[b] < 0) {
            lz_tok_err(err, errlen,
                       "byte-level vocabulary has no token for byte 0x%02X (U+%04X): not a GPT-2 style vocabulary",
                       b, (unsigned)lz_byte_to_cp((uint8_t)b));
            return LZ_ECORRUPT;
        }
    }
    /* pieces: NORMAL tokens map their code points back to bytes */
    int inv[256 + 68]; /* code point -> byte, -1 if none */
    for (uint32_t cp = 0; cp < 256 + 68; cp++) inv[cp] = lz_cp_to_byte(cp);
    char *tmp = NULL;
    size_t tmp_cap = 0;
    int rc = 0;
    for (int id = 0; id < t->n_vocab && !rc; id++) {
        lz_tok_entry *e = &t->toks[id];
        e->piece_off = e->text_off;
        e->piece_len = 0;
        if (e->type == LZ_TOKTYPE_CONTROL || e->type == LZ_TOKTYPE_UNUSED) continue;
        if (e->type == LZ_TOKTYPE_USER) { e->piece_len = e->text_len; continue; }
        const unsigned char *s = (const unsigned char *)t->arena + e->text_off;
        size_t n = e->text_len;
        if (n > tmp_cap) {
            char *p = realloc(tmp, n);
            if (!p) { rc = LZ_ENOMEM; break; }
            tmp = p;
            tmp_cap = n;
        }
        size_t k = 0;
        int same = 1; /* piece equals text: share the bytes */
        for (size_t i = 0; i < n;) {
            int l = lz_utf8_seq_len(s + i, n - i);
            if (l == 0) { tmp[k++] = (char)s[i++]; continue; } /* not UTF-8: keep as is */
            uint32_t cp = lz_utf8_decode(s + i, l);
            int b = cp < 256 + 68 ? inv[cp] : -1;
            if (b < 0) { memcpy(tmp + k, s + i, (size_t)l); k += (size_t)l; }
            else { tmp[k++] = (char)b; same &= (l == 1); }
            i += (size_t)l;
        }
        if (same && k == n) { e->piece_len = (uint32_t)n; continue; }
        rc = lz_tok_arena_add(t, tmp, k, &t->toks[id].piece_off);
        t->toks[id].piece_len = (uint32_t)k;
    }
    free(tmp);
    return rc;
}

/* A literal string as a regex matching exactly it: every ASCII punctuation
 * byte behind a backslash (always a literal in PCRE2), the rest as is.
 * PCRE2_LITERAL itself cannot be used: it refuses PCRE2_UCP ("invalid option
 * bits with PCRE2_LITERAL" in 10.42), which the regex path needs. Returns a
 * malloc'd string of *out_len bytes, or NULL when out of memory. */
static char *escape_literal(const char *s, size_t len, size_t *out_len)
{
    char *r = malloc(2 * len + 1);
    if (!r) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80 && ((c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
                         (c >= 0x7B && c <= 0x7E)))
            r[k++] = '\\';
        r[k++] = (char)c;
    }
    r[k] = 0;
    *out_len = k;
    return r;
}

int lz_bpe_set_regex(lz_tokenizer *t, const char *pattern, size_t len, int literal, char *err,
                     size_t errlen)
{
    int ec;
    PCRE2_SIZE eo;
    char *escaped = NULL;
    if (literal) {
        if (!(escaped = escape_literal(pattern, len, &len))) {
            lz_tok_err(err, errlen, "out of memory for the pre-tokenizer pattern");
            return LZ_ENOMEM;
        }
        pattern = escaped;
    }
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    free(escaped);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        lz_tok_err(err, errlen, "pre-tokenizer regex does not compile at offset %zu: %s",
                   (size_t)eo, (const char *)msg);
        return LZ_ECORRUPT;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: the interpreter works without */
    if (t->re) pcre2_code_free(t->re);
    t->re = re;
    return 0;
}

static inline uint32_t merge_slot(uint64_t key, uint32_t mask)
{
    key *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(key >> 32) & mask;
}

int lz_bpe_alloc_merges(lz_tokenizer *t, size_t n)
{
    uint32_t cap = 1024; /* load factor <= 3/4 */
    while ((size_t)cap / 4 * 3 <= n && cap < (1u << 30)) cap *= 2;
    free(t->merges);
    t->merges = malloc(cap * sizeof *t->merges);
    if (!t->merges) return LZ_ENOMEM;
    for (uint32_t i = 0; i < cap; i++) t->merges[i].key = UINT64_MAX;
    t->merge_mask = cap - 1;
    t->n_merges = 0;
    return 0;
}

int lz_bpe_add_merge(lz_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen, int rank)
{
    int ia = lz_strmap_find(t, &t->by_text, a, alen);
    int ib = lz_strmap_find(t, &t->by_text, b, blen);
    if (ia < 0 || ib < 0) return 0;
    char stack[256], *ab = stack;
    if (alen + blen > sizeof stack && !(ab = malloc(alen + blen))) return LZ_ENOMEM;
    memcpy(ab, a, alen);
    memcpy(ab + alen, b, blen);
    int id = lz_strmap_find(t, &t->by_text, ab, alen + blen);
    if (ab != stack) free(ab);
    if (id < 0) return 0;
    if ((uint32_t)t->n_merges >= (t->merge_mask + 1) / 4 * 3) return LZ_ENOMEM; /* sized too small */
    uint64_t key = (uint64_t)ia << 32 | (uint32_t)ib;
    for (uint32_t i = merge_slot(key, t->merge_mask);; i = (i + 1) & t->merge_mask) {
        lz_merge *m = &t->merges[i];
        if (m->key == key) return 0; /* the first (lowest-rank) merge of a pair wins */
        if (m->key == UINT64_MAX) {
            *m = (lz_merge){key, rank, id};
            t->n_merges++;
            return 0;
        }
    }
}

static const lz_merge *find_merge(const lz_tokenizer *t, int a, int b)
{
    uint64_t key = (uint64_t)a << 32 | (uint32_t)b;
    for (uint32_t i = merge_slot(key, t->merge_mask);; i = (i + 1) & t->merge_mask) {
        const lz_merge *m = &t->merges[i];
        if (m->key == key) return m;
        if (m->key == UINT64_MAX) return NULL;
    }
}

static int try_pair(const lz_tokenizer *t, lz_sym *sym, lz_heap *h, int l, int r)
{
    const lz_merge *m = find_merge(t, sym[l].id, sym[r].id);
    if (!m) return 0;
    lz_pair p = {-(float)m->rank, l, r, sym[l].len + sym[r].len, m->id};
    return lz_heap_push(h, p);
}

/* Encodes one pre-token w[0..n). */
static int encode_word(const lz_tokenizer *t, const unsigned char *w, size_t n, lz_tok_scratch *s,
                       lz_idvec *out)
{
    if (n == 1) return lz_idvec_push(out, t->byte_tok[w[0]]);
    if (t->ignore_merges) {
        int id = lz_strmap_find(t, &t->by_piece, (const char *)w, n);
        if (id >= 0) return lz_idvec_push(out, id);
    }
    int rc = lz_scratch_syms(s, n);
    if (rc) return rc;
    lz_sym *sym = s->sym;
    int ns = (int)n;
    for (int k = 0; k < ns; k++) sym[k] = (lz_sym){k, 1, k - 1, k + 1, t->byte_tok[w[k]]};
    sym[ns - 1].next = -1;
    if (t->merges) {
        lz_heap *h = &s->heap;
        h->n = 0;
        for (int k = 0; k + 1 < ns; k++)
            if ((rc = try_pair(t, sym, h, k, k + 1))) return rc;
        while (h->n > 0) {
            lz_pair p = lz_heap_pop(h);
            if (!lz_sym_merge(sym, &p)) continue;
            lz_sym *L = &sym[p.left];
            if (L->prev >= 0 && (rc = try_pair(t, sym, h, L->prev, p.left))) return rc;
            if (L->next >= 0 && (rc = try_pair(t, sym, h, p.left, L->next))) return rc;
        }
    }
    for (int k = 0; k >= 0; k = sym[k].next)
        if ((rc = lz_idvec_push(out, sym[k].id))) return rc;
    return 0;
}

/* Splits valid UTF-8 run[0..n) with the pre-tokenizer regex ("Isolated":
 * matches and the gaps between them are all pre-tokens). */
static int encode_run(const lz_tokenizer *t, const unsigned char *run, size_t n, lz_tok_scratch *s,
                      lz_idvec *out)
{
    if (!t->re) return encode_word(t, run, n, s, out);
    if (!s->md && !(s->md = pcre2_match_data_create_from_pattern(t->re, NULL))) return LZ_ENOMEM;
    size_t gap = 0, from = 0;
    int rc = 0;
    while (from < n) {
        int m = pcre2_match(t->re, run, n, from, PCRE2_NO_UTF_CHECK, s->md, NULL);
        if (m < 0) break; /* no match (or a matching limit): the rest is one pre-token */
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t a = ov[0], b = ov[1];
        if (a > gap && (rc = encode_word(t, run + gap, a - gap, s, out))) return rc;
        if (b > a) {
            if ((rc = encode_word(t, run + a, b - a, s, out))) return rc;
            gap = from = b;
        } else { /* empty match: step over one character, it joins the next gap */
            int l = lz_utf8_seq_len(run + a, n - a);
            gap = a;
            from = a + (size_t)(l > 0 ? l : 1);
        }
    }
    if (gap < n) rc = encode_word(t, run + gap, n - gap, s, out);
    return rc;
}

int lz_bpe_encode(const lz_tokenizer *t, const char *text, size_t len, lz_tok_scratch *s, lz_idvec *out)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t i = 0;
    int rc = 0;
    while (i < len && !rc) {
        size_t v = lz_utf8_valid_prefix(p + i, len - i);
        if (v > 0) {
            if ((rc = encode_run(t, p + i, v, s, out))) break;
            i += v;
        }
        if (i < len) rc = lz_idvec_push(out, t->byte_tok[p[i++]]); /* an invalid byte */
    }
    return rc;
}
