/* dataset.c - reads HotpotQA and 2WikiMultihopQA files (dataset.h): each
 * record's question, gold answers, type and level, its context pairs turned
 * into passages of the shared table, and the titles of its gold passages. */
#include <ctype.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "eval/dataset.h"

#define MAX_TITLE 512  /* lazyingest's LZ_CORPUS_MAX_ID: a longer title is skipped there */
#define MAX_WARNINGS 20

const char *lz_eval_format_name(lz_eval_format f)
{
    return f == LZ_EVAL_FORMAT_HOTPOTQA ? "hotpotqa" : f == LZ_EVAL_FORMAT_2WIKI ? "2wiki" : "auto";
}

int lz_eval_format_parse(const char *s)
{
    if (!strcmp(s, "auto")) return LZ_EVAL_FORMAT_AUTO;
    if (!strcmp(s, "hotpotqa") || !strcmp(s, "hotpot")) return LZ_EVAL_FORMAT_HOTPOTQA;
    if (!strcmp(s, "2wiki") || !strcmp(s, "2wikimqa") || !strcmp(s, "2wikimultihopqa")) return LZ_EVAL_FORMAT_2WIKI;
    return -1;
}

int lz_eval_dataset_init(lz_eval_dataset *d)
{
    memset(d, 0, sizeof *d);
    d->passages = lz_eval_passages_new();
    return d->passages ? 0 : -1;
}

static void free_strs(char **v, int n)
{
    for (int i = 0; i < n && v; i++) free(v[i]);
    free(v);
}

void lz_eval_dataset_free(lz_eval_dataset *d)
{
    for (int i = 0; i < d->n_q; i++) {
        lz_eval_question *q = &d->q[i];
        free(q->id);
        free(q->question);
        free_strs(q->golds, q->n_golds);
        free(q->type);
        free(q->level);
        free(q->answer_id);
        free(q->passages);
        free_strs(q->gold_titles, q->n_gold_titles);
    }
    free(d->q);
    lz_eval_passages_free(d->passages);
    free_strs(d->warnings, d->n_warnings);
    memset(d, 0, sizeof *d);
}

static void warn(lz_eval_dataset *d, const char *fmt, ...)
{
    d->n_warnings_total++;
    if (d->n_warnings >= MAX_WARNINGS) return;
    char **v = realloc(d->warnings, sizeof *v * (size_t)(d->n_warnings + 1));
    if (!v) return;
    d->warnings = v;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if ((v[d->n_warnings] = strdup(buf))) d->n_warnings++;
}

/* appends a copy of s to (*v)[*n] unless already there (distinct: 1). 0 or -1 */
static int push_str(char ***v, int *n, const char *s, int distinct)
{
    if (distinct)
        for (int i = 0; i < *n; i++)
            if (!strcmp((*v)[i], s)) return 0;
    char **nv = realloc(*v, sizeof *nv * (size_t)(*n + 1));
    if (!nv) return -1;
    *v = nv;
    if (!(nv[*n] = strdup(s))) return -1;
    (*n)++;
    return 0;
}

static int is_blank(const char *s)
{
    while (*s && isspace((unsigned char)*s)) s++;
    return !*s;
}

static char *dup_field(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return strdup(s ? s : "");
}

/* The context of record r into q's passages. 0, -1 (out of memory), -2 (malformed: err set) */
static int read_context(lz_eval_dataset *d, lz_eval_question *q, json_t *ctx, const char *where, char *err,
                        size_t errlen)
{
    const size_t n = json_array_size(ctx);
    q->passages = malloc(sizeof *q->passages * (n ? n : 1));
    if (!q->passages) return -1;
    for (size_t i = 0; i < n; i++) {
        json_t *pair = json_array_get(ctx, i), *tv = json_array_get(pair, 0), *sv = json_array_get(pair, 1);
        if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_string(tv) || !json_is_array(sv)) {
            snprintf(err, errlen, "%s: \"context\" [%zu]: expected [title, [sentences...]]", where, i);
            return -2;
        }
        const size_t ns = json_array_size(sv);
        const char **sents = malloc(sizeof *sents * (ns ? ns : 1));
        if (!sents) return -1;
        for (size_t k = 0; k < ns; k++)
            if (!(sents[k] = json_string_value(json_array_get(sv, k)))) {
                free(sents);
                snprintf(err, errlen, "%s: \"context\" [%zu]: sentence %zu is not a string", where, i, k);
                return -2;
            }
        char *text = lz_eval_join_sentences(sents, (int)ns);
        free(sents);
        if (!text) return -1;
        const char *title = json_string_value(tv);
        const char *why = is_blank(title) ? "the title is empty" : is_blank(text) ? "the sentences are empty"
                          : strlen(title) > MAX_TITLE - 8 ? "the title is longer than lazyingest takes" : NULL;
        if (why) { /* lazyingest would skip this pair: it is no document */
            warn(d, "%s: \"context\" [%zu] ('%.80s'): %s; dropped from the question", where, i, title, why);
            q->n_dropped++;
            d->n_dropped++;
            free(text);
            continue;
        }
        int renamed;
        const int k = lz_eval_passages_add(d->passages, title, text, d->n_q, &renamed);
        free(text);
        if (k < 0) return -1;
        if (renamed) {
            d->n_renamed++;
            warn(d, "%s: context title '%.200s' was seen before with other text; this one is the document '%.200s'",
                 where, title, lz_eval_passages_get(d->passages, k)->id);
        }
        q->passages[q->n_passages++] = k;
    }
    return 0;
}

/* The gold answers of record r: answer (a string, or a list of strings), then answer_aliases. */
static int read_golds(lz_eval_question *q, json_t *r)
{
    json_t *a = json_object_get(r, "answer");
    if (json_is_string(a) && push_str(&q->golds, &q->n_golds, json_string_value(a), 1)) return -1;
    if (json_is_array(a))
        for (size_t i = 0; i < json_array_size(a); i++) {
            const char *s = json_string_value(json_array_get(a, i));
            if (s && push_str(&q->golds, &q->n_golds, s, 1)) return -1;
        }
    json_t *al = json_object_get(r, "answer_aliases");
    for (size_t i = 0; q->n_golds && i < json_array_size(al); i++) {
        const char *s = json_string_value(json_array_get(al, i));
        if (s && push_str(&q->golds, &q->n_golds, s, 1)) return -1;
    }
    return 0;
}

/* The titles of the gold passages: supporting_facts [[title, i]], else evidences [[subject, relation, object]]. */
static int read_gold_titles(lz_eval_question *q, json_t *r)
{
    json_t *sf = json_object_get(r, "supporting_facts");
    for (size_t i = 0; i < json_array_size(sf); i++) {
        const char *t = json_string_value(json_array_get(json_array_get(sf, i), 0));
        if (t && push_str(&q->gold_titles, &q->n_gold_titles, t, 1)) return -1;
    }
    if (q->n_gold_titles) return 0;
    json_t *ev = json_object_get(r, "evidences");
    for (size_t i = 0; i < json_array_size(ev); i++) {
        const char *t = json_string_value(json_array_get(json_array_get(ev, i), 0));
        if (t && push_str(&q->gold_titles, &q->n_gold_titles, t, 1)) return -1;
    }
    return 0;
}

int lz_eval_dataset_read(lz_eval_dataset *d, const char *path, lz_eval_format fmt, int limit, char *err,
                         size_t errlen)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return lz_fail(err, errlen, -1, "%s: line %d: %s", path, je.line, je.text);
    int rc = -1, file = 0;
    for (int i = 0; i < d->n_q; i++) file = d->q[i].file + 1;
    if (!json_is_array(root)) {
        snprintf(err, errlen, "%s: expected a JSON array of questions (HotpotQA or 2WikiMultihopQA), found %s", path,
                 json_is_object(root) ? "an object" : "a scalar");
        goto done;
    }
    if (fmt == LZ_EVAL_FORMAT_AUTO)
        fmt = json_object_get(json_array_get(root, 0), "evidences") ? LZ_EVAL_FORMAT_2WIKI : LZ_EVAL_FORMAT_HOTPOTQA;
    if (!d->n_q) d->format = fmt;
    const size_t n = json_array_size(root);
    for (size_t i = 0; i < n && (limit <= 0 || d->n_q < limit); i++) {
        json_t *r = json_array_get(root, i);
        char where[1200];
        snprintf(where, sizeof where, "%s: record [%zu]", path, i);
        const char *question = json_string_value(json_object_get(r, "question"));
        json_t *ctx = json_object_get(r, "context");
        if (!json_is_object(r) || !question) { snprintf(err, errlen, "%s: no \"question\" string", where); goto done; }
        if (!json_is_array(ctx)) { snprintf(err, errlen, "%s: no \"context\" list of [title, [sentences]]", where); goto done; }
        if (d->n_q == d->cap_q) {
            const int cap = d->cap_q ? d->cap_q * 2 : 256;
            lz_eval_question *v = realloc(d->q, sizeof *v * (size_t)cap);
            if (!v) goto oom;
            d->q = v;
            d->cap_q = cap;
        }
        lz_eval_question *q = &d->q[d->n_q];
        memset(q, 0, sizeof *q);
        q->file = file;
        d->n_q++; /* from here on, freed with d */
        json_t *idv = json_object_get(r, "_id");
        if (!idv) idv = json_object_get(r, "id");
        char idbuf[64];
        const char *id = idbuf;
        if (json_is_string(idv)) id = json_string_value(idv);
        else if (json_is_integer(idv)) snprintf(idbuf, sizeof idbuf, "%lld", (long long)json_integer_value(idv));
        else snprintf(idbuf, sizeof idbuf, "%zu", i);
        if (!(q->id = strdup(id)) || !(q->question = strdup(question)) || !(q->type = dup_field(r, "type")) ||
            !(q->level = dup_field(r, "level")))
            goto oom;
        const char *aid = json_string_value(json_object_get(r, "answer_id"));
        if (aid && !(q->answer_id = strdup(aid))) goto oom;
        if (read_golds(q, r) || read_gold_titles(q, r)) goto oom;
        const int c = read_context(d, q, ctx, where, err, errlen);
        if (c == -1) goto oom;
        if (c) goto done;
    }
    rc = 0;
    goto done;
oom:
    snprintf(err, errlen, "%s: out of memory", path);
done:
    json_decref(root);
    return rc;
}

/* question indices sorted by answer_id (those with one and an answer) */
static const lz_eval_dataset *sort_d;
static int cmp_answer_id(const void *a, const void *b)
{
    return strcmp(sort_d->q[*(const int *)a].answer_id, sort_d->q[*(const int *)b].answer_id);
}

/* adds the names of alias record o ("aliases", "demonyms") to question q. 0 or -1 */
static int add_aliases(lz_eval_dataset *d, lz_eval_question *q, json_t *o)
{
    static const char *const keys[] = {"aliases", "demonyms"};
    for (int k = 0; k < 2; k++) {
        json_t *a = json_object_get(o, keys[k]);
        for (size_t j = 0; j < json_array_size(a); j++) {
            const char *s = json_string_value(json_array_get(a, j));
            const int before = q->n_golds;
            if (s && push_str(&q->golds, &q->n_golds, s, 1)) return -1;
            d->n_aliases += q->n_golds - before;
        }
    }
    return 0;
}

int lz_eval_dataset_read_aliases(lz_eval_dataset *d, const char *path, char *err, size_t errlen)
{
    int *by = malloc(sizeof *by * (size_t)(d->n_q ? d->n_q : 1)), nb = 0;
    if (!by) return lz_fail(err, errlen, -1, "out of memory");
    for (int i = 0; i < d->n_q; i++)
        if (d->q[i].answer_id && d->q[i].n_golds) by[nb++] = i;
    sort_d = d;
    qsort(by, (size_t)nb, sizeof *by, cmp_answer_id);
    FILE *f = fopen(path, "r");
    if (!f) { free(by); return lz_fail(err, errlen, -1, "%s: cannot open", path); }
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    int rc = 0;
    while (!rc && getline(&line, &cap, f) > 0) {
        lineno++;
        if (is_blank(line)) continue;
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        const char *qid = o ? json_string_value(json_object_get(o, "Q_id")) : NULL;
        if (!qid) {
            rc = lz_fail(err, errlen, -1, "%s:%ld: %s", path, lineno, o ? "no \"Q_id\" string" : je.text);
            json_decref(o);
            break;
        }
        int lo = 0, hi = nb; /* the first question whose answer_id >= qid */
        while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (strcmp(d->q[by[mid]].answer_id, qid) < 0) lo = mid + 1;
            else hi = mid;
        }
        for (int i = lo; i < nb && !rc && !strcmp(d->q[by[i]].answer_id, qid); i++)
            if (add_aliases(d, &d->q[by[i]], o)) rc = lz_fail(err, errlen, -1, "out of memory");
        json_decref(o);
    }
    free(line);
    fclose(f);
    free(by);
    return rc;
}
