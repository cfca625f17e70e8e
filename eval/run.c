/* run.c - one lazyeval run (run.h): a session over the store, then for each
 * request its documents (its context's passages, BM25, or the stream's
 * draw), the answer through lz_query_answer, and its row. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/unicode.h"
#include "eval/run.h"
#include "model/prompt.h"
#include "query/retrieve.h"

const char *lz_eval_setting_name(int setting) { return setting == LZ_EVAL_OPEN ? "open" : "distractor"; }

/* s with every byte that starts no valid UTF-8 sequence replaced by U+FFFD (as lazyquery prints
 * answers), malloc'd */
static char *utf8_clean(const char *s, size_t n)
{
    char *out = malloc(3 * n + 1);
    size_t o = 0;
    if (!out) return NULL;
    for (size_t i = 0; i < n;) {
        const int len = lz_utf8_seq_len((const unsigned char *)s + i, n - i);
        if (len > 0) { memcpy(out + o, s + i, (size_t)len); o += (size_t)len; i += (size_t)len; }
        else { memcpy(out + o, "\xef\xbf\xbd", 3); o += 3; i++; }
    }
    out[o] = 0;
    return out;
}

static void sleep_until(double t0, double at)
{
    for (;;) {
        const double left = at - (lz_now_s() - t0);
        if (left <= 0) return;
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        if (nanosleep(&ts, NULL) == 0) return;
        if (errno != EINTR) return;
    }
}

static void tiers_now(lz_query_session *q, const lz_eval_run_opts *o, lz_eval_tiers *t)
{
    memset(t, 0, sizeof *t);
    lz_query_cache_stats(q, &t->host);
    if (o->gpu_tier) o->gpu_tier(o->gpu_ctx, &t->gpu);
}

/* open setting: the share of the question's gold titles among docs[0..n) (titles as stored, cut at
 * the 255 bytes a lz_query_doc holds) */
static void gold_recall(const lz_eval_question *qq, const lz_query_doc *docs, int n, lz_eval_row *row)
{
    row->recall = -1;
    if (!qq->n_gold_titles) return;
    int found = 0;
    for (int g = 0; g < qq->n_gold_titles; g++)
        for (int i = 0; i < n; i++)
            if (!strncmp(docs[i].title, qq->gold_titles[g], sizeof docs[i].title - 1)) { found++; break; }
    row->recall = (double)found / qq->n_gold_titles;
    row->all_gold = found == qq->n_gold_titles;
}

/* The documents of request i in the order they are placed (*docs malloc'd). 0, or -1 with err. */
static int request_docs(lz_store *st, lz_query_session *q, const lz_eval_dataset *d, const lz_eval_stream *s, int i,
                        const lz_eval_run_opts *o, lz_eval_row *row, lz_query_doc **docs, int *n_docs, char *err,
                        size_t errlen)
{
    const lz_eval_question *qq = &d->q[s->question[i]];
    *docs = NULL;
    *n_docs = 0;
    if (s->docs || o->setting == LZ_EVAL_DISTRACTOR) { /* explicit ids, placed in their order */
        const int n = s->docs ? s->K : qq->n_passages;
        const char **ids = malloc(sizeof *ids * (size_t)(n ? n : 1));
        if (!ids) return lz_fail(err, errlen, -1, "out of memory");
        for (int j = 0; j < n; j++) {
            const int p = s->docs ? s->docs[(size_t)i * s->K + j] : qq->passages[j];
            if (o->map && o->map->state[p] != LZ_EVAL_PASSAGE_OK) { /* not in the store, or another text there */
                lz_eval_store_map_why(o->map, d->passages, p, o->max_doc_tokens, err, errlen);
                free(ids);
                return -1;
            }
            ids[j] = o->map ? o->map->id[p] : lz_eval_passages_get(d->passages, p)->id;
        }
        const int rc = lz_retrieve_resolve_ids(st, ids, n, docs, n_docs, err, errlen);
        free(ids);
        return rc ? -1 : 0;
    }
    if (lz_retrieve_search(st, qq->question, o->top_k, docs, n_docs, err, errlen)) return -1;
    row->n_retrieved = *n_docs;
    gold_recall(qq, *docs, *n_docs, row);
    /* as lazyquery: the retrieved documents that do not fit the model's context are dropped, lowest
     * ranked first; then the best is placed last, nearest the question */
    const int64_t budget = lz_query_doc_budget(q, qq->question);
    int64_t used = 0;
    int fit = 0;
    while (fit < *n_docs && used + (*docs)[fit].n_tokens <= budget) used += (*docs)[fit++].n_tokens;
    *n_docs = fit;
    for (int a = 0, b = fit - 1; a < b; a++, b--) {
        const lz_query_doc t = (*docs)[a];
        (*docs)[a] = (*docs)[b];
        (*docs)[b] = t;
    }
    return 0;
}

static char *sources_json(const lz_query_doc *docs, int n)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) {
        char *c = utf8_clean(docs[i].ext_id, strlen(docs[i].ext_id)); /* ids are cut at 255 bytes */
        json_array_append_new(a, json_string(c ? c : ""));
        free(c);
    }
    char *s = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return s ? s : strdup("[]");
}

/* Answers request i into row. 0; -1 only when out of memory (a failed question is row->error). */
static int answer_request(lz_query_session *q, lz_store *st, const lz_eval_dataset *d, const lz_eval_stream *s, int i,
                          const lz_eval_run_opts *o, lz_eval_row *row)
{
    const lz_eval_question *qq = &d->q[s->question[i]];
    char err[1024] = "";
    lz_query_doc *docs = NULL;
    int n_docs = 0;
    const double t0 = lz_now_s();
    if (request_docs(st, q, d, s, i, o, row, &docs, &n_docs, err, sizeof err)) goto fail;
    row->t_retrieve = lz_now_s() - t0;
    row->n_docs = n_docs;
    row->no_docs = n_docs == 0;
    if (!(row->sources = sources_json(docs, n_docs))) goto oom;
    lz_query_result r;
    if (lz_query_answer(q, qq->question, docs, n_docs, &r, err, sizeof err)) goto fail;
    if (o->record_hits)
        for (int j = 0; j < n_docs; j++) {
            char e2[256];
            lz_store_hit(st, docs[j].id, e2, sizeof e2); /* a count not recorded changes no answer */
        }
    size_t fl;
    const char *fin = lz_prompt_final_answer(r.answer, &fl, NULL);
    row->prediction = utf8_clean(fin, fl);
    row->generated = utf8_clean(r.answer, strlen(r.answer));
    row->ok = 1;
    row->t_load = r.t_load;
    row->t_ttft = r.t_ttft;
    row->t_decode = r.t_decode;
    row->n_prompt = r.n_prompt;
    row->n_computed = r.n_computed;
    row->n_answer = r.n_answer;
    row->n_recomputed = r.n_recomputed;
    row->hits = r.hits;
    row->misses = r.misses;
    row->bytes_loaded = r.bytes_loaded;
    lz_query_result_free(&r);
    if (!row->prediction || !row->generated) goto oom;
    row->latency = (row->start - row->arrival) + row->t_retrieve + row->t_ttft;
    if (row->scorable) {
        if (lz_eval_score_answer(row->prediction, (const char *const *)qq->golds, qq->n_golds, &row->score)) goto oom;
        row->scored = 1;
    }
    free(docs);
    return 0;
fail:
    row->ok = 0;
    free(row->error);
    row->error = strdup(err[0] ? err : "failed");
    free(docs);
    return row->error ? 0 : -1;
oom:
    free(docs);
    return -1;
}

int lz_eval_run(lz_llama *m, lz_store *st, const lz_eval_dataset *d, const lz_eval_stream *s,
                const lz_eval_run_opts *o, lz_eval_run_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    res->has_gpu = o->gpu_tier != NULL;
    if (!(res->rows = calloc((size_t)(s->n ? s->n : 1), sizeof *res->rows)))
        return lz_fail(err, errlen, -1, "out of memory");
    lz_query_session *q = NULL;
    if (lz_query_session_new(m, st, &o->qo, &q, err, errlen)) return -1;
    if (o->preload) { /* what a preload that stopped early did still counts */
        res->preloaded = 1;
        if (!lz_query_preload(q, o->preload == 2, &res->preload, res->preload_error, sizeof res->preload_error))
            res->preload_error[0] = 0;
    }
    const double t0 = lz_now_s();
    int rc = 0;
    for (int i = 0; i < s->n; i++) {
        lz_eval_row *row = &res->rows[i];
        row->question = s->question[i];
        row->warmup = i == 0;
        row->recall = -1;
        row->scorable = d->q[s->question[i]].n_golds > 0 && !s->docs;
        row->arrival = s->arrival[i];
        sleep_until(t0, s->arrival[i]);
        row->start = lz_now_s() - t0;
        if (s->back_to_back) row->arrival = row->start;
        res->n_rows = i + 1;
        if (answer_request(q, st, d, s, i, o, row)) { rc = lz_fail(err, errlen, -1, "out of memory"); break; }
        if (i == 0) tiers_now(q, o, &res->after_warmup);
        if (o->on_row) o->on_row(row, i, s->n, o->row_ctx);
    }
    res->wall_s = lz_now_s() - t0;
    tiers_now(q, o, &res->at_end);
    lz_query_session_free(q);
    return rc;
}

void lz_eval_run_result_free(lz_eval_run_result *r)
{
    for (int i = 0; i < r->n_rows; i++) {
        free(r->rows[i].error);
        free(r->rows[i].prediction);
        free(r->rows[i].generated);
        free(r->rows[i].sources);
    }
    free(r->rows);
    memset(r, 0, sizeof *r);
}
