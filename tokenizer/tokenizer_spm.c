/* tokenizer_spm.c - SentencePiece BPE as llama.cpp runs it: spaces become
 * U+2581 (one is prepended), the text splits into UTF-8 characters, and the
 * adjacent pair whose concatenation is the highest-scoring token merges first
 * (ties: leftmost). Leftover characters that are not tokens go out as <0xNN>
 * byte tokens. Invalid UTF-8 bytes are one-byte characters. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_impl.h"
#include "base/unicode.h"

static const char SPACE_MARK[] = "\xe2\x96\x81"; /* U+2581 LOWER ONE EIGHTH BLOCK */

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* "<0xNN>" -> NN, else -1 */
static int parse_byte_token(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static int has_space_mark(const char *s, size_t n)
{
    for (size_t i = 0; i + 3 <= n; i++)
        if (memcmp(s + i, SPACE_MARK, 3) == 0) return 1;
    return 0;
}

int lz_spm_prepare(lz_tokenizer *t, char *err, size_t errlen)
{
    char *tmp = NULL;
    size_t tmp_cap = 0;
    int rc = 0;
    for (int id = 0; id < t->n_vocab && !rc; id++) {
        lz_tok_entry *e = &t->toks[id];
        const char *s = t->arena + e->text_off;
        size_t n = e->text_len;
        e->piece_off = e->text_off;
        e->piece_len = 0;
        switch (e->type) {
        case LZ_TOKTYPE_CONTROL:
        case LZ_TOKTYPE_UNUSED:
            break;
        case LZ_TOKTYPE_UNKNOWN: /* shown as U+2585, as llama.cpp does */
            rc = lz_tok_arena_add(t, "\xe2\x96\x85", 3, &e->piece_off);
            e = &t->toks[id];
            e->piece_len = 3;
            break;
        case LZ_TOKTYPE_BYTE: {
            int b = parse_byte_token(s, n);
            if (b >= 0) {
                unsigned char c = (unsigned char)b;
                if (t->byte_tok[b] < 0) t->byte_tok[b] = id;
                rc = lz_tok_arena_add(t, &c, 1, &e->piece_off);
                t->toks[id].piece_len = 1;
                break;
            }
        } /* a BYTE token that is not <0xNN> is plain text */
            __attribute__((fallthrough));
        default: {
            /* the piece is the text with U+2581 -> ' ' (shares the text when there is none) */
            if (!has_space_mark(s, n)) { e->piece_len = (uint32_t)n; break; }
            if (n > tmp_cap) {
                char *p = realloc(tmp, n);
                if (!p) { rc = LZ_ENOMEM; break; }
                tmp = p;
                tmp_cap = n;
            }
            size_t k = 0;
            for (size_t i = 0; i < n;) {
                if (i + 3 <= n && memcmp(s + i, SPACE_MARK, 3) == 0) { tmp[k++] = ' '; i += 3; }
                else tmp[k++] = s[i++];
            }
            rc = lz_tok_arena_add(t, tmp, k, &t->toks[id].piece_off);
            t->toks[id].piece_len = (uint32_t)k;
        }
        }
    }
    free(tmp);
    if (rc) return rc;
    /* vocabularies whose byte tokens are not typed BYTE: find them by text */
    for (int b = 0; b < 256; b++) {
        if (t->byte_tok[b] >= 0) continue;
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_tok[b] = lz_strmap_find(t, &t->by_text, name, 6);
    }
    /* Can the text be cut before each space run? Only if no mergeable token
     * has U+2581 after a character other than U+2581. */
    t->spm_split = 1;
    for (int id = 0; id < t->n_vocab && t->spm_split; id++) {
        const lz_tok_entry *e = &t->toks[id];
        if (e->type != LZ_TOKTYPE_NORMAL && e->type != LZ_TOKTYPE_USER) continue;
        const char *s = t->arena + e->text_off;
        size_t i = 0;
        while (i + 3 <= e->text_len && memcmp(s + i, SPACE_MARK, 3) == 0) i += 3;
        if (i < e->text_len && has_space_mark(s + i, e->text_len - i)) t->spm_split = 0;
    }
    (void)err;
    (void)errlen;
    return 0;
}

/* Only plain vocabulary entries take part in merging: a control token such as
 * "<s>" or a byte token "<0x0A>" spelled out in the text stays text. */
static int mergeable(const lz_tokenizer *t, int id)
{
    int ty = t->toks[id].type;
    return ty == LZ_TOKTYPE_NORMAL || ty == LZ_TOKTYPE_USER;
}

static int try_pair(const lz_tokenizer *t, const char *buf, lz_sym *sym, lz_heap *h, int l, int r)
{
    int size = sym[l].len + sym[r].len;
    int id = lz_strmap_find(t, &t->by_text, buf + sym[l].start, (size_t)size);
    if (id < 0 || !mergeable(t, id)) return 0;
    lz_pair p = {t->toks[id].score, l, r, size, id};
    return lz_heap_push(h, p);
}

/* Merges buf[0..bn) (escaped text) and appends its tokens to out. */
static int merge_word(const lz_tokenizer *t, const char *buf, size_t bn, lz_tok_scratch *s, lz_idvec *out)
{
    int rc = lz_scratch_syms(s, bn);
    if (rc) return rc;
    lz_sym *sym = s->sym;
    int ns = 0;
    for (size_t i = 0; i < bn;) {
        int l = lz_utf8_seq_len((const unsigned char *)buf + i, bn - i);
        if (l == 0) l = 1;
        sym[ns] = (lz_sym){(int)i, l, ns - 1, ns + 1, -1};
        ns++;
        i += (size_t)l;
    }
    sym[ns - 1].next = -1;

    lz_heap *h = &s->heap;
    h->n = 0;
    for (int k = 0; k + 1 < ns; k++)
        if ((rc = try_pair(t, buf, sym, h, k, k + 1))) return rc;
    while (h->n > 0) {
        lz_pair p = lz_heap_pop(h);
        if (!lz_sym_merge(sym, &p)) continue;
        lz_sym *L = &sym[p.left];
        if (L->prev >= 0 && (rc = try_pair(t, buf, sym, h, L->prev, p.left))) return rc;
        if (L->next >= 0 && (rc = try_pair(t, buf, sym, h, p.left, L->next))) return rc;
    }

    for (int k = 0; k >= 0; k = sym[k].next) {
        int id = sym[k].id;
        if (id < 0) {
            id = lz_strmap_find(t, &t->by_text, buf + sym[k].start, (size_t)sym[k].len);
            if (id >= 0 && !mergeable(t, id)) id = -1;
        }
        if (id >= 0) {
            if ((rc = lz_idvec_push(out, id))) return rc;
            continue;
        }
        for (int j = 0; j < sym[k].len; j++) {
            int b = (unsigned char)buf[sym[k].start + j];
            int bt = t->byte_tok[b] >= 0 ? t->byte_tok[b] : t->unk;
            if (bt < 0) continue; /* no byte token and no <unk>: nothing to emit */
            if ((rc = lz_idvec_push(out, bt))) return rc;
        }
    }
    return 0;
}

int lz_spm_encode(const lz_tokenizer *t, const char *text, size_t len, int prefix_space,
                  lz_tok_scratch *s, lz_idvec *out)
{
    if (len == 0) return 0;
    if (len > (size_t)0x7fffffff / 3 - 3) return LZ_ENOMEM; /* symbol offsets are int */
    size_t need = len * 3 + 3;
    if (need > s->buf_cap) {
        char *p = realloc(s->buf, need);
        if (!p) return LZ_ENOMEM;
        s->buf = p;
        s->buf_cap = need;
    }
    char *buf = s->buf;
    size_t bn = 0;
    if (prefix_space) { memcpy(buf, SPACE_MARK, 3); bn = 3; }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') { memcpy(buf + bn, SPACE_MARK, 3); bn += 3; }
        else buf[bn++] = text[i];
    }

    /* Merge each word on its own when no token can span the start of a
     * space run (the result is the same, the heap stays small). */
    int rc = 0;
    size_t w0 = 0;
    for (size_t i = 3; i + 3 <= bn && t->spm_split; i++) {
        if (memcmp(buf + i, SPACE_MARK, 3) != 0) continue;
        if (i >= w0 + 3 && memcmp(buf + i - 3, SPACE_MARK, 3) == 0) { i += 2; continue; }
        if ((rc = merge_word(t, buf + w0, i - w0, s, out))) return rc;
        w0 = i;
        i += 2;
    }
    return merge_word(t, buf + w0, bn - w0, s, out);
}
