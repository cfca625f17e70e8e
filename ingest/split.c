/* split.c - passage splitting: sentence/line units, refined to words and
 * characters where one unit alone is over budget, packed greedily with an
 * estimate (sum of unit counts) and an exact count of every passage. */
#include "ingest/split.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    lz_split_span *v;
    int n, cap;
} spans;

static int add(spans *a, size_t off, size_t len)
{
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 16;
        lz_split_span *v = realloc(a->v, sizeof *v * (size_t)cap);
        if (!v) return LZ_ENOMEM;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = (lz_split_span){ off, len };
    return LZ_OK;
}

static int is_space(char c) { return isspace((unsigned char)c) != 0; }

/* Units ending after a line break, or after . ! ? (and closing quotes or
 * brackets) followed by whitespace; trailing whitespace stays with the unit. */
static int sentence_units(const char *t, size_t off, size_t len, spans *out)
{
    size_t start = off, end = off + len, i = off;
    while (i < end) {
        int cut = 0;
        if (t[i] == '\n') {
            cut = 1;
        } else if (t[i] == '.' || t[i] == '!' || t[i] == '?') {
            size_t j = i + 1;
            while (j < end && (t[j] == '"' || t[j] == '\'' || t[j] == ')' || t[j] == ']')) j++;
            if (j == end || is_space(t[j])) {
                cut = 1;
                i = j - 1;
            }
        }
        i++;
        if (cut) {
            while (i < end && is_space(t[i])) i++;
            if (add(out, start, i - start)) return LZ_ENOMEM;
            start = i;
        }
    }
    if (start < end && add(out, start, end - start)) return LZ_ENOMEM;
    return LZ_OK;
}

/* Units ending after whitespace runs (words with their trailing spaces). */
static int word_units(const char *t, size_t off, size_t len, spans *out)
{
    size_t start = off, end = off + len, i = off;
    while (i < end) {
        while (i < end && !is_space(t[i])) i++;
        while (i < end && is_space(t[i])) i++;
        if (add(out, start, i - start)) return LZ_ENOMEM;
        start = i;
    }
    return LZ_OK;
}

static size_t utf8_back(const char *t, size_t off, size_t pos)
{
    while (pos > off && ((unsigned char)t[pos] & 0xC0) == 0x80) pos--;
    return pos;
}

/* Character chunks of at most max tokens: the longest prefix that fits, by bisection. */
static int char_units(const char *t, size_t off, size_t len, int max, lz_split_count_fn count, void *ctx,
                      spans *out)
{
    size_t end = off + len, start = off;
    while (start < end) {
        size_t lo = 1, hi = end - start, best = 0;
        while (lo <= hi) {
            size_t mid = (lo + hi) / 2;
            size_t cut = utf8_back(t, start, start + mid);
            if (cut == start) cut = start + mid; /* a single sequence longer than mid bytes */
            int c = count(ctx, t + start, cut - start);
            if (c < 0) return LZ_ECOUNT;
            if (c <= max) {
                best = cut - start;
                lo = mid + 1;
            } else {
                hi = mid - 1;
            }
        }
        if (best == 0) { /* not even one character fits: take one anyway */
            best = 1;
            while (start + best < end && ((unsigned char)t[start + best] & 0xC0) == 0x80) best++;
        }
        if (add(out, start, best)) return LZ_ENOMEM;
        start += best;
    }
    return LZ_OK;
}

/* Appends s trimmed, unless it is all whitespace. */
static int add_trimmed(spans *a, const char *t, size_t off, size_t len)
{
    while (len && is_space(t[off])) {
        off++;
        len--;
    }
    while (len && is_space(t[off + len - 1])) len--;
    return len ? add(a, off, len) : LZ_OK;
}

int lz_split_passages(const char *text, size_t len, int max, lz_split_count_fn count, void *ctx,
                      lz_split_span **out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    spans res = { 0 }, units = { 0 }, fine = { 0 }, tmp = { 0 };
    int *cnt = NULL, rc = LZ_OK;
    int whole = count(ctx, text, len), overhead = count(ctx, "", 0);
    if (whole < 0 || overhead < 0) return LZ_ECOUNT;
    if (whole <= max) {
        rc = add_trimmed(&res, text, 0, len);
        goto done;
    }
    if (max <= overhead) return LZ_EINVAL;

    /* 1. sentence units, refined where one alone is over budget */
    if ((rc = sentence_units(text, 0, len, &units))) goto done;
    for (int i = 0; i < units.n; i++) {
        int c = count(ctx, text + units.v[i].off, units.v[i].len);
        if (c < 0) {
            rc = LZ_ECOUNT;
            goto done;
        }
        if (c <= max) {
            if ((rc = add(&fine, units.v[i].off, units.v[i].len))) goto done;
            continue;
        }
        tmp.n = 0;
        if ((rc = word_units(text, units.v[i].off, units.v[i].len, &tmp))) goto done;
        for (int j = 0; j < tmp.n; j++) {
            int cw = count(ctx, text + tmp.v[j].off, tmp.v[j].len);
            if (cw < 0) {
                rc = LZ_ECOUNT;
                goto done;
            }
            rc = cw <= max ? add(&fine, tmp.v[j].off, tmp.v[j].len)
                           : char_units(text, tmp.v[j].off, tmp.v[j].len, max, count, ctx, &fine);
            if (rc) goto done;
        }
    }

    /* 2. unit costs without the per-passage formatting */
    cnt = malloc(sizeof(int) * (size_t)(fine.n ? fine.n : 1));
    if (!cnt) {
        rc = LZ_ENOMEM;
        goto done;
    }
    for (int i = 0; i < fine.n; i++) {
        int c = count(ctx, text + fine.v[i].off, fine.v[i].len);
        if (c < 0) {
            rc = LZ_ECOUNT;
            goto done;
        }
        cnt[i] = c - overhead > 0 ? c - overhead : 1;
    }

    /* 3. greedy packing, each passage counted exactly */
    for (int i = 0; i < fine.n;) {
        int j = i, est = overhead;
        while (j < fine.n && (j == i || est + cnt[j] <= max)) est += cnt[j++];
        for (;;) {
            size_t off = fine.v[i].off, l = fine.v[j - 1].off + fine.v[j - 1].len - off;
            int c = count(ctx, text + off, l);
            if (c < 0) {
                rc = LZ_ECOUNT;
                goto done;
            }
            if (c <= max || j == i + 1) break;
            j--;
        }
        if ((rc = add_trimmed(&res, text, fine.v[i].off, fine.v[j - 1].off + fine.v[j - 1].len - fine.v[i].off)))
            goto done;
        i = j;
    }
done:
    free(units.v);
    free(fine.v);
    free(tmp.v);
    free(cnt);
    if (rc) {
        free(res.v);
        return rc;
    }
    *out = res.v;
    *n_out = res.n;
    return LZ_OK;
}
