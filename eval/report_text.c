/* report_text.c - a run as lazyeval prints it (report.h): the counts, EM /
 * F1 per type, TTFT and decode speed, the warm-up, the tiers' hit rates,
 * recall@k and the first failures, a few lines each. */
#include <stdio.h>

#include "eval/report.h"

static void fmt_size(size_t b, char *buf, size_t n)
{
    if (b >= (size_t)1 << 30 && b % ((size_t)1 << 30) == 0) snprintf(buf, n, "%zu GiB", b >> 30);
    else if (b >= (size_t)1 << 30) snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
    else if (b >= (size_t)1 << 20) snprintf(buf, n, "%.0f MiB", b / 1048576.0);
    else snprintf(buf, n, "%.0f KiB", b / 1024.0);
}

void lz_eval_print_run(FILE *f, const lz_eval_report_run *r)
{
    const lz_eval_summary *s = r->sum;
    char hb[32];
    fmt_size(r->host_budget, hb, sizeof hb);
    fprintf(f, "\n== %s (%s setting, host tier %s%s)\n", r->label, lz_eval_setting_name(r->setting), hb,
               r->gpu ? ", GPU" : "");
    fprintf(f, "  questions %d: answered %d, failed %d%s", s->requests, s->answered, s->failed,
               s->unscored ? "" : "\n");
    if (s->unscored) fprintf(f, ", unscored %d\n", s->unscored);
    if (s->scored) {
        fprintf(f, "  %-20s %6s %7s %7s\n", "type", "n", "EM", "F1");
        for (int t = 0; t < s->n_types; t++)
            fprintf(f, "  %-20s %6d %7.2f %7.2f%s\n", s->types[t].type[0] ? s->types[t].type : "(none)", s->types[t].n,
                       s->types[t].em, s->types[t].f1, s->types[t].failed ? " (+ failed)" : "");
        fprintf(f, "  %-20s %6d %7.2f %7.2f\n", "all", s->scored, s->em, s->f1);
    }
    if (s->ttft.n)
        fprintf(f, "  TTFT ms: mean %.2f, p50 %.2f, p95 %.2f, p99 %.2f (%d questions after the warm-up); decode %.1f tok/s\n",
                   1e3 * s->ttft.mean, 1e3 * s->ttft.p50, 1e3 * s->ttft.p95, 1e3 * s->ttft.p99, s->ttft.n, s->decode_tok_s);
    if (s->has_warmup && s->warmup.ok) fprintf(f, "  warm-up (first question): TTFT %.2f ms\n", 1e3 * s->warmup.t_ttft);
    if (s->latency.n && r->poisson)
        fprintf(f, "  latency from arrival ms: mean %.2f, p50 %.2f, p95 %.2f, p99 %.2f; %.2f requests/s\n",
                   1e3 * s->latency.mean, 1e3 * s->latency.p50, 1e3 * s->latency.p95, 1e3 * s->latency.p99, s->throughput);
    if (s->host_hit_rate >= 0)
        fprintf(f, "  host tier: %.1f%% hits (%lld of %lld lookups after the warm-up)\n", 100 * s->host_hit_rate,
                   (long long)s->host_hits, (long long)(s->host_hits + s->host_misses));
    if (s->has_gpu && s->gpu_hit_rate >= 0)
        fprintf(f, "  GPU tier: %.1f%% hits (%lld of %lld lookups)\n", 100 * s->gpu_hit_rate, (long long)s->gpu_hits,
                   (long long)(s->gpu_hits + s->gpu_misses));
    if (r->setting == LZ_EVAL_OPEN && s->recall_n)
        fprintf(f, "  recall@%d of the gold passages: %.1f%% (all of them: %.1f%% of %d questions)\n", r->top_k,
                   s->recall_at_k, s->all_gold_at_k, s->recall_n);
    for (int i = 0, shown = 0; i < r->res->n_rows && shown < 3; i++)
        if (!r->res->rows[i].ok) {
            fprintf(f, "  failed: %s\n", r->res->rows[i].error);
            if (++shown == 3 && s->failed > 3) fprintf(f, "  ... (%d failed in all: report.json \"failures\")\n", s->failed);
        }
}
