/* summary.c - a run's rows summed up (summary.h): scores per type, the
 * distributions of the timed requests, tier hit rates from the counters'
 * differences, recall@k. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/summary.h"

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double percentile(const double *v, int n, double p)
{
    const double pos = p / 100.0 * (n - 1);
    const int lo = (int)pos;
    if (lo + 1 >= n) return v[n - 1];
    return v[lo] + (pos - lo) * (v[lo + 1] - v[lo]);
}

void lz_eval_dist_of(double *v, int n, lz_eval_dist *out)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    if (n <= 0) return;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += v[i];
    out->mean = sum / n;
    out->p50 = percentile(v, n, 50);
    out->p95 = percentile(v, n, 95);
    out->p99 = percentile(v, n, 99);
    out->min = v[0];
    out->max = v[n - 1];
}

static lz_eval_type_score *type_slot(lz_eval_summary *s, const char *type)
{
    for (int i = 0; i < s->n_types; i++)
        if (!strncmp(s->types[i].type, type, sizeof s->types[i].type - 1)) return &s->types[i];
    lz_eval_type_score *v = realloc(s->types, sizeof *v * (size_t)(s->n_types + 1));
    if (!v) return NULL;
    s->types = v;
    lz_eval_type_score *t = &v[s->n_types++];
    memset(t, 0, sizeof *t);
    snprintf(t->type, sizeof t->type, "%s", type);
    return t;
}

static double rate(int64_t hits, int64_t misses) { return hits + misses ? (double)hits / (double)(hits + misses) : -1; }

int lz_eval_summarize(const lz_eval_dataset *d, const lz_eval_run_result *res, lz_eval_summary *s)
{
    memset(s, 0, sizeof *s);
    const int n = res->n_rows;
    double *ttft = malloc(sizeof(double) * (size_t)(n ? n : 1)), *lat = malloc(sizeof(double) * (size_t)(n ? n : 1));
    double *load = malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (!ttft || !lat || !load) { free(ttft); free(lat); free(load); return -1; }
    int nt = 0, failed_gold = 0;
    double em = 0, f1 = 0, dec_tokens = 0, dec_s = 0, recall = 0, all_gold = 0;
    s->requests = n;
    for (int i = 0; i < n; i++) {
        const lz_eval_row *r = &res->rows[i];
        const lz_eval_question *q = &d->q[r->question];
        if (r->warmup) { s->has_warmup = 1; s->warmup = *r; }
        if (!r->ok) {
            s->failed++;
            failed_gold += r->scorable;
            /* a failed question of a type still makes the type appear */
            if (r->scorable) {
                lz_eval_type_score *t = type_slot(s, q->type);
                if (!t) goto oom;
                t->failed++;
            }
            continue;
        }
        s->answered++;
        s->no_docs += r->no_docs;
        if (r->scored) {
            s->scored++;
            em += r->score.em;
            f1 += r->score.f1;
            lz_eval_type_score *t = type_slot(s, q->type);
            if (!t) goto oom;
            t->n++;
            t->em += r->score.em;
            t->f1 += r->score.f1;
        } else {
            s->unscored++;
        }
        if (r->recall >= 0) {
            s->recall_n++;
            recall += r->recall;
            all_gold += r->all_gold;
        }
        if (r->warmup) continue;
        ttft[nt] = r->t_ttft;
        lat[nt] = r->latency;
        load[nt++] = r->t_load;
        if (r->n_answer > 1) { dec_tokens += r->n_answer - 1; dec_s += r->t_decode; }
    }
    s->em = s->scored ? 100 * em / s->scored : 0;
    s->f1 = s->scored ? 100 * f1 / s->scored : 0;
    s->em_all = s->scored + failed_gold ? 100 * em / (s->scored + failed_gold) : 0;
    s->f1_all = s->scored + failed_gold ? 100 * f1 / (s->scored + failed_gold) : 0;
    for (int i = 0; i < s->n_types; i++) {
        lz_eval_type_score *t = &s->types[i];
        if (t->n) { t->em = 100 * t->em / t->n; t->f1 = 100 * t->f1 / t->n; }
    }
    lz_eval_dist_of(ttft, nt, &s->ttft);
    lz_eval_dist_of(lat, nt, &s->latency);
    lz_eval_dist_of(load, nt, &s->load);
    s->decode_tok_s = dec_s > 0 ? dec_tokens / dec_s : 0;
    s->throughput = res->wall_s > 0 ? s->answered / res->wall_s : 0;
    s->host_hits = res->at_end.host.hits - res->after_warmup.host.hits;
    s->host_misses = res->at_end.host.misses - res->after_warmup.host.misses;
    s->host_hit_rate = rate(s->host_hits, s->host_misses);
    s->has_gpu = res->has_gpu;
    s->gpu_hits = res->at_end.gpu.hits - res->after_warmup.gpu.hits;
    s->gpu_misses = res->at_end.gpu.misses - res->after_warmup.gpu.misses;
    s->gpu_hit_rate = rate(s->gpu_hits, s->gpu_misses);
    s->recall_at_k = s->recall_n ? 100 * recall / s->recall_n : 0;
    s->all_gold_at_k = s->recall_n ? 100 * all_gold / s->recall_n : 0;
    free(ttft);
    free(lat);
    free(load);
    return 0;
oom:
    free(ttft);
    free(lat);
    free(load);
    lz_eval_summary_free(s);
    return -1;
}

void lz_eval_summary_free(lz_eval_summary *s)
{
    free(s->types);
    s->types = NULL;
    s->n_types = 0;
}
