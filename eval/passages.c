/* passages.c - the passage table of a dataset (passages.h): an array of
 * passages and an open-addressing hash from title to the passages under it,
 * each known by the SHA-256 of its text. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sha256.h"
#include "eval/passages.h"

typedef struct {
    char *title;         /* NULL: empty slot */
    int *idx;            /* passages under this title, in the order first seen (variant k: idx[k]) */
    uint8_t (*hash)[32]; /* their texts' SHA-256 */
    int n;
} title_slot;

struct lz_eval_passages {
    lz_eval_passage *p;
    int n, cap;
    title_slot *slots;
    size_t n_slots, used;
};

lz_eval_passages *lz_eval_passages_new(void) { return calloc(1, sizeof(lz_eval_passages)); }

void lz_eval_passages_free(lz_eval_passages *t)
{
    if (!t) return;
    for (int i = 0; i < t->n; i++) {
        free(t->p[i].title);
        free(t->p[i].text);
        free(t->p[i].id);
    }
    for (size_t i = 0; i < t->n_slots; i++) {
        free(t->slots[i].title);
        free(t->slots[i].idx);
        free(t->slots[i].hash);
    }
    free(t->p);
    free(t->slots);
    free(t);
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

/* the slot of title (an empty one where it would go); NULL when out of memory */
static title_slot *find_slot(lz_eval_passages *t, const char *title)
{
    if ((t->used + 1) * 2 > t->n_slots) {
        const size_t cap = t->n_slots ? t->n_slots * 2 : 256;
        title_slot *v = calloc(cap, sizeof *v);
        if (!v) return NULL;
        for (size_t i = 0; i < t->n_slots; i++) {
            if (!t->slots[i].title) continue;
            size_t j = hash_str(t->slots[i].title) & (cap - 1);
            while (v[j].title) j = (j + 1) & (cap - 1);
            v[j] = t->slots[i];
        }
        free(t->slots);
        t->slots = v;
        t->n_slots = cap;
    }
    size_t j = hash_str(title) & (t->n_slots - 1);
    while (t->slots[j].title && strcmp(t->slots[j].title, title)) j = (j + 1) & (t->n_slots - 1);
    return &t->slots[j];
}

int lz_eval_passages_add(lz_eval_passages *t, const char *title, const char *text, int owner, int *renamed)
{
    *renamed = 0;
    uint8_t h[32];
    lz_sha256(text, strlen(text), h);
    title_slot *s = find_slot(t, title);
    if (!s) return -1;
    for (int k = 0; k < s->n; k++)
        if (!memcmp(s->hash[k], h, 32)) return s->idx[k];
    if (!s->title) {
        if (!(s->title = strdup(title))) return -1;
        t->used++;
    }
    int *idx = realloc(s->idx, sizeof *idx * (size_t)(s->n + 1));
    if (idx) s->idx = idx;
    uint8_t (*hv)[32] = idx ? realloc(s->hash, sizeof *hv * (size_t)(s->n + 1)) : NULL;
    if (!hv) return -1;
    s->hash = hv;
    if (t->n == t->cap) {
        const int cap = t->cap ? t->cap * 2 : 256;
        lz_eval_passage *p = realloc(t->p, sizeof *p * (size_t)cap);
        if (!p) return -1;
        t->p = p;
        t->cap = cap;
    }
    lz_eval_passage *p = &t->p[t->n];
    const size_t idlen = strlen(title) + 16;
    p->title = strdup(title);
    p->text = strdup(text);
    p->id = malloc(idlen);
    p->owner = owner;
    if (!p->title || !p->text || !p->id) {
        free(p->title);
        free(p->text);
        free(p->id);
        return -1;
    }
    if (s->n == 0) snprintf(p->id, idlen, "%s", title);
    else snprintf(p->id, idlen, "%s (%d)", title, s->n + 1);
    *renamed = s->n > 0;
    s->idx[s->n] = t->n;
    memcpy(s->hash[s->n], h, 32);
    s->n++;
    return t->n++;
}

int lz_eval_passages_count(const lz_eval_passages *t) { return t->n; }
const lz_eval_passage *lz_eval_passages_get(const lz_eval_passages *t, int i) { return &t->p[i]; }

char *lz_eval_join_sentences(const char *const *sentences, int n)
{
    size_t cap = 1;
    for (int i = 0; i < n; i++) cap += strlen(sentences[i]) + 1;
    char *out = malloc(cap);
    if (!out) return NULL;
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        const char *x = sentences[i];
        const size_t xn = strlen(x);
        if (!xn) continue;
        if (len && !isspace((unsigned char)out[len - 1]) && !isspace((unsigned char)x[0])) out[len++] = ' ';
        memcpy(out + len, x, xn);
        len += xn;
    }
    out[len] = 0;
    return out;
}
