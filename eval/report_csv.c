/* report_csv.c - questions.csv (report.h): one row per request of every
 * run, fields quoted when they hold a comma, a quote or a line break. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "eval/report.h"
#include "query/session.h"

static void field(FILE *f, const char *s, int last)
{
    if (!s) s = "";
    if (strpbrk(s, ",\"\r\n")) {
        fputc('"', f);
        for (const char *p = s; *p; p++) {
            if (*p == '"') fputc('"', f);
            fputc(*p, f);
        }
        fputc('"', f);
    } else {
        fputs(s, f);
    }
    fputc(last ? '\n' : ',', f);
}

static void num(FILE *f, const char *fmt, double v)
{
    fprintf(f, fmt, v);
    fputc(',', f);
}

static const char *const header[] = {
    "run", "mode", "setting", "host_cache_bytes", "request", "id", "type", "level", "status", "error", "question",
    "gold", "aliases", "prediction", "em", "f1", "warmup", "n_docs", "sources", "retrieved", "recall", "ttft_s",
    "latency_s", "kv_load_s", "decode_s", "decode_tok_s", "prompt_tokens", "computed_tokens", "answer_tokens",
    "cache_hits", "cache_misses", "bytes_loaded", "arrival_s", "wait_s"};

int lz_eval_write_csv(const char *path, const lz_eval_dataset *d, const lz_eval_report_run *runs, int n, char *err,
                      size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) return lz_fail(err, errlen, -1, "%s: %s", path, strerror(errno));
    const int nh = (int)(sizeof header / sizeof header[0]);
    for (int i = 0; i < nh; i++) field(f, header[i], i == nh - 1);
    for (int k = 0; k < n; k++) {
        const lz_eval_report_run *r = &runs[k];
        for (int i = 0; i < r->res->n_rows; i++) {
            const lz_eval_row *w = &r->res->rows[i];
            const lz_eval_question *q = &d->q[w->question];
            char aliases[4096] = "";
            size_t al = 0;
            for (int g = 1; g < q->n_golds && al + 4 < sizeof aliases; g++)
                al += (size_t)snprintf(aliases + al, sizeof aliases - al, "%s%s", g > 1 ? " | " : "", q->golds[g]);
            field(f, r->label, 0);
            field(f, lz_query_mode_name(r->mode), 0);
            field(f, lz_eval_setting_name(r->setting), 0);
            fprintf(f, "%zu,%d,", r->host_budget, i);
            field(f, q->id, 0);
            field(f, q->type, 0);
            field(f, q->level, 0);
            field(f, w->ok ? "ok" : "error", 0);
            field(f, w->error, 0);
            field(f, q->question, 0);
            field(f, q->n_golds ? q->golds[0] : "", 0);
            field(f, aliases, 0);
            field(f, w->prediction, 0);
            if (w->scored) fprintf(f, "%g,%.6f,", w->score.em, w->score.f1);
            else fputs(",,", f);
            fprintf(f, "%d,%d,", w->warmup, w->n_docs);
            field(f, w->sources, 0);
            if (w->recall >= 0) fprintf(f, "%d,%.6f,", w->n_retrieved, w->recall);
            else fputs(",,", f);
            if (!w->ok) { /* a failed question has no timings */
                fprintf(f, ",,,,,,,,,,,%.6f,%.6f\n", w->arrival, w->start - w->arrival);
                continue;
            }
            num(f, "%.6f", w->t_ttft);
            num(f, "%.6f", w->latency);
            num(f, "%.6f", w->t_load);
            num(f, "%.6f", w->t_decode);
            num(f, "%.3f", w->n_answer > 1 && w->t_decode > 0 ? (w->n_answer - 1) / w->t_decode : 0.0);
            fprintf(f, "%d,%d,%d,%lld,%lld,%lld,%.6f,%.6f\n", w->n_prompt, w->n_computed, w->n_answer,
                    (long long)w->hits, (long long)w->misses, (long long)w->bytes_loaded, w->arrival,
                    w->start - w->arrival);
        }
    }
    if (fclose(f)) return lz_fail(err, errlen, -1, "%s: %s", path, strerror(errno));
    return 0;
}
