/* store_map.c - passages to store documents by content (store_map.h): the
 * passage's own id first, then its title and 'title (2)', 'title (3)', ...
 * until a name holds no document. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/status.h"
#include "eval/store_map.h"

/* What document name holds of passage p: 1 the passage (whole, or as the source of its split
 * passages); 2 split passages whose hash is not that of p under max_doc_tokens (another text, or
 * another budget); 0 another text; -1 no such document; -2 a read error */
static int holds(lz_store *st, const char *name, const uint8_t whole[32], const uint8_t split[32], char *err,
                 size_t errlen)
{
    lz_meta_doc d;
    char src[1100], p0[1100];
    memset(&d, 0, sizeof d);
    int rc = lz_store_doc_find(st, name, &d, src, sizeof src, err, errlen);
    if (rc == 0) return d.passage < 0 && !memcmp(d.content_hash, whole, 32);
    if (rc != LZ_ENOTFOUND) return -2;
    snprintf(p0, sizeof p0, "%s#0", name);
    rc = lz_store_doc_find(st, p0, &d, src, sizeof src, err, errlen);
    if (rc == LZ_ENOTFOUND) return -1;
    if (rc) return -2;
    if (strcmp(src, name) || !d.has_source_hash) return 0;
    return memcmp(d.source_hash, split, 32) ? 2 : 1;
}

int lz_eval_store_map_build(lz_store *st, const lz_eval_passages *t, int max_doc_tokens, int budget_known,
                            lz_eval_store_map *m, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->n = lz_eval_passages_count(t);
    m->id = calloc((size_t)(m->n ? m->n : 1), sizeof *m->id);
    m->state = calloc((size_t)(m->n ? m->n : 1), 1);
    if (!m->id || !m->state) { lz_eval_store_map_free(m); return lz_fail(err, errlen, -1, "out of memory"); }
    for (int i = 0; i < m->n; i++) {
        const lz_eval_passage *p = lz_eval_passages_get(t, i);
        uint8_t whole[32], split[32];
        lz_store_content_hash(p->title, p->text, whole);
        lz_store_split_hash(p->title, p->text, strlen(p->text), max_doc_tokens, split);
        const size_t cap = strlen(p->title) + strlen(p->id) + 16;
        char *name = malloc(cap), *maybe = NULL; /* maybe: split passages not checked (budget unknown) */
        if (!name) { lz_eval_store_map_free(m); return lz_fail(err, errlen, -1, "out of memory"); }
        const int own = holds(st, p->id, whole, split, err, errlen);
        int found = own == 1, any = own >= 0, rc = own;
        if (own == -2) goto fail;
        if (own == 2 && !(maybe = strdup(p->id))) goto oom;
        if (found) snprintf(name, cap, "%s", p->id);
        for (int k = 1; !found; k++) { /* the title, then its variants, while there are documents under them */
            if (k == 1) snprintf(name, cap, "%s", p->title);
            else snprintf(name, cap, "%s (%d)", p->title, k);
            rc = !strcmp(name, p->id) ? own : holds(st, name, whole, split, err, errlen);
            if (rc == -2) goto fail;
            if (rc == -1 && k > 1) break;
            any |= rc >= 0;
            found = rc == 1;
            if (rc == 2 && !maybe && !(maybe = strdup(name))) goto oom;
        }
        if (!found && maybe && !budget_known) { /* split with a budget this run cannot tell: taken unchecked */
            snprintf(name, cap, "%s", maybe);
            found = 1;
            m->n_unchecked++;
        }
        free(maybe);
        if (found) {
            m->id[i] = name;
        } else {
            free(name);
            m->state[i] = any ? LZ_EVAL_PASSAGE_OTHER : LZ_EVAL_PASSAGE_MISSING;
            m->n_missing += !any;
            m->n_other += any;
        }
        continue;
    oom:
        snprintf(err, errlen, "out of memory");
    fail:
        free(maybe);
        free(name);
        lz_eval_store_map_free(m);
        return -1;
    }
    return 0;
}

void lz_eval_store_map_free(lz_eval_store_map *m)
{
    for (int i = 0; m->id && i < m->n; i++) free(m->id[i]);
    free(m->id);
    free(m->state);
    memset(m, 0, sizeof *m);
}

void lz_eval_store_map_why(const lz_eval_store_map *m, const lz_eval_passages *t, int p, int max_doc_tokens, char *buf,
                           size_t n)
{
    const lz_eval_passage *x = lz_eval_passages_get(t, p);
    if (m->state[p] == LZ_EVAL_PASSAGE_MISSING)
        snprintf(buf, n, "passage '%.300s' is not in the store (no document under that title)", x->title);
    else
        snprintf(buf, n, "passage '%.300s': the store's documents under that title hold other text (a store built "
                 "from another file, or split with another --max-doc-tokens than %d)", x->title, max_doc_tokens);
}
