/* report_json.c - one run of report.json (report.h): settings, quality per
 * type, speed after the warm-up, the warm-up itself, the cache tiers, the
 * open setting's recall, the failed questions, the rows. */
#include <stdlib.h>
#include <string.h>

#include "eval/report.h"
#include "query/session.h"

static json_t *dist_json(const lz_eval_dist *d)
{
    return json_pack("{s:i, s:f, s:f, s:f, s:f, s:f, s:f}", "n", d->n, "mean", d->mean, "p50", d->p50, "p95", d->p95,
                     "p99", d->p99, "min", d->min, "max", d->max);
}

static json_t *tier_json(const lz_doc_cache_stats *end, int64_t hits, int64_t misses, double rate)
{
    json_t *t = json_pack("{s:I, s:I, s:o}", "hits", (json_int_t)hits, "misses", (json_int_t)misses, "hit_rate",
                          rate >= 0 ? json_real(rate) : json_null());
    json_object_set_new(t, "session", json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "hits", (json_int_t)end->hits,
                                                "misses", (json_int_t)end->misses, "admitted", (json_int_t)end->admitted,
                                                "rejected", (json_int_t)end->rejected, "evicted", (json_int_t)end->evicted,
                                                "bytes_used", (json_int_t)end->bytes_used, "bytes_budget",
                                                (json_int_t)end->bytes_budget));
    return t;
}

static json_t *golds_json(const lz_eval_question *q)
{
    json_t *a = json_array();
    for (int i = 0; i < q->n_golds; i++) json_array_append_new(a, json_string(q->golds[i]));
    return a;
}

static json_t *row_json(const lz_eval_dataset *d, const lz_eval_row *r)
{
    const lz_eval_question *q = &d->q[r->question];
    json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:b, s:b}", "id", q->id, "type", q->type, "question", q->question,
                          "gold", golds_json(q), "ok", r->ok, "warmup", r->warmup);
    if (!o) return NULL;
    if (!r->ok) {
        json_object_set_new(o, "error", json_string(r->error ? r->error : "failed"));
        return o;
    }
    json_object_set_new(o, "prediction", json_string(r->prediction));
    json_object_set_new(o, "generated", json_string(r->generated));
    if (r->scored) {
        json_object_set_new(o, "em", json_real(r->score.em));
        json_object_set_new(o, "f1", json_real(r->score.f1));
    }
    json_t *src = r->sources ? json_loads(r->sources, 0, NULL) : NULL;
    json_object_set_new(o, "sources", src ? src : json_array());
    if (r->recall >= 0) json_object_set_new(o, "recall", json_real(r->recall));
    json_object_set_new(o, "timings", json_pack("{s:f, s:f, s:f, s:f, s:f, s:f}", "retrieval_s", r->t_retrieve,
                                                "kv_load_s", r->t_load, "ttft_s", r->t_ttft, "decode_s", r->t_decode,
                                                "arrival_s", r->arrival, "latency_s", r->latency));
    json_object_set_new(o, "tokens", json_pack("{s:i, s:i, s:i}", "prompt", r->n_prompt, "computed", r->n_computed,
                                               "answer", r->n_answer));
    json_object_set_new(o, "cache", json_pack("{s:I, s:I, s:I, s:i}", "hits", (json_int_t)r->hits, "misses",
                                              (json_int_t)r->misses, "bytes_loaded", (json_int_t)r->bytes_loaded,
                                              "recomputed", r->n_recomputed));
    return o;
}

json_t *lz_eval_run_json(const lz_eval_dataset *d, const lz_eval_report_run *r, int with_rows)
{
    const lz_eval_summary *s = r->sum;
    const lz_eval_run_result *res = r->res;
    json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:s, s:b, s:i, s:i, s:i, s:i, s:i}", "label", r->label, "mode",
                          lz_query_mode_name(r->mode), "setting", lz_eval_setting_name(r->setting), "host_cache_bytes",
                          (json_int_t)r->host_budget, "cache_policy", r->policy, "gpu", r->gpu, "requests", s->requests,
                          "answered", s->answered, "failed", s->failed, "unscored", s->unscored, "no_documents",
                          s->no_docs);
    if (!o) return NULL;
    if (r->gpu) json_object_set_new(o, "gpu_cache_bytes", json_integer((json_int_t)r->gpu_budget));
    json_object_set_new(o, "arrivals", json_string(r->poisson ? "poisson" : "back-to-back"));
    json_t *types = json_object();
    for (int i = 0; i < s->n_types; i++)
        json_object_set_new(types, s->types[i].type[0] ? s->types[i].type : "(none)",
                            json_pack("{s:i, s:i, s:f, s:f}", "n", s->types[i].n, "failed", s->types[i].failed, "em",
                                      s->types[i].em, "f1", s->types[i].f1));
    json_object_set_new(o, "quality", json_pack("{s:i, s:f, s:f, s:f, s:f, s:o}", "scored", s->scored, "em", s->em,
                                                "f1", s->f1, "em_with_failures", s->em_all, "f1_with_failures",
                                                s->f1_all, "by_type", types));
    json_object_set_new(o, "speed", json_pack("{s:o, s:o, s:o, s:f, s:f, s:f}", "ttft_s", dist_json(&s->ttft),
                                              "latency_s", dist_json(&s->latency), "kv_load_s", dist_json(&s->load),
                                              "decode_tok_s", s->decode_tok_s, "throughput_qps", s->throughput,
                                              "wall_s", res->wall_s));
    if (s->has_warmup) {
        const lz_eval_row *w = &s->warmup;
        json_object_set_new(o, "warmup", json_pack("{s:s, s:b, s:f, s:f, s:f, s:I, s:I}", "id", d->q[w->question].id,
                                                   "ok", w->ok, "ttft_s", w->t_ttft, "kv_load_s", w->t_load,
                                                   "decode_tok_s", w->n_answer > 1 && w->t_decode > 0
                                                       ? (w->n_answer - 1) / w->t_decode : 0.0,
                                                   "hits", (json_int_t)w->hits, "misses", (json_int_t)w->misses));
    }
    json_t *cache = json_object();
    json_object_set_new(cache, "host", tier_json(&res->at_end.host, s->host_hits, s->host_misses, s->host_hit_rate));
    if (s->has_gpu) json_object_set_new(cache, "gpu", tier_json(&res->at_end.gpu, s->gpu_hits, s->gpu_misses, s->gpu_hit_rate));
    json_object_set_new(o, "cache", cache);
    json_t *pre = json_null();
    if (res->preloaded) {
        pre = json_pack("{s:i, s:i, s:i, s:I, s:I, s:f}", "gpu", res->preload.gpu, "host", res->preload.host, "failed",
                        res->preload.failed, "gpu_bytes", (json_int_t)res->preload.gpu_bytes, "host_bytes",
                        (json_int_t)res->preload.host_bytes, "seconds", res->preload.seconds);
        if (pre && res->preload_error[0]) json_object_set_new(pre, "error", json_string(res->preload_error));
    }
    json_object_set_new(o, "preload", pre);
    if (r->setting == LZ_EVAL_OPEN)
        json_object_set_new(o, "retrieval", json_pack("{s:i, s:i, s:f, s:f}", "k", r->top_k, "questions", s->recall_n,
                                                      "recall_at_k", s->recall_at_k, "all_gold_at_k", s->all_gold_at_k));
    json_t *fails = json_array();
    for (int i = 0; i < res->n_rows; i++)
        if (!res->rows[i].ok)
            json_array_append_new(fails, json_pack("{s:s, s:s}", "id", d->q[res->rows[i].question].id, "error",
                                                   res->rows[i].error ? res->rows[i].error : "failed"));
    json_object_set_new(o, "failures", fails);
    if (with_rows) {
        json_t *rows = json_array();
        for (int i = 0; i < res->n_rows; i++) json_array_append_new(rows, row_json(d, &res->rows[i]));
        json_object_set_new(o, "questions", rows);
    }
    return o;
}
