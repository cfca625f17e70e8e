/* plot.c - lazyeval's plots (plot.h): small data files and one gnuplot
 * script per report, run by gnuplot in the plots folder. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/error.h"
#include "eval/plot.h"
#include "query/session.h"

int lz_eval_find_program(const char *name, char *buf, size_t n)
{
    if (strchr(name, '/')) {
        snprintf(buf, n, "%s", name);
        return access(buf, X_OK) == 0;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const size_t l = strcspn(path, ":");
        snprintf(buf, n, "%.*s/%s", (int)l, path, name);
        if (l && access(buf, X_OK) == 0) return 1;
        path += l + (path[l] == ':');
    }
    return 0;
}

/* s inside a gnuplot single-quoted string ('' for a quote), into buf */
static const char *gp_quote(const char *s, char *buf, size_t n)
{
    size_t o = 0;
    for (; *s && o + 3 < n; s++) {
        if (*s == '\'') buf[o++] = '\'';
        buf[o++] = *s;
    }
    buf[o] = 0;
    return buf;
}

static FILE *open_in(const char *dir, const char *name, char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) lz_fail(err, errlen, -1, "%s: %s", path, strerror(errno));
    return f;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ttft_K.dat for each run: its timed requests' TTFT (ms) sorted, with the fraction at or below */
static int ttft_plot(FILE *gp, const lz_eval_report_run *runs, int n, const char *dir, char *err, size_t errlen)
{
    double lo = 1e300, hi = 0;
    int any = 0;
    for (int k = 0; k < n; k++) {
        const lz_eval_run_result *res = runs[k].res;
        double *v = malloc(sizeof *v * (size_t)(res->n_rows ? res->n_rows : 1));
        if (!v) return lz_fail(err, errlen, -1, "out of memory");
        int m = 0;
        for (int i = 0; i < res->n_rows; i++)
            if (res->rows[i].ok && !res->rows[i].warmup) v[m++] = 1e3 * res->rows[i].t_ttft;
        qsort(v, (size_t)m, sizeof *v, cmp_double);
        char name[64];
        snprintf(name, sizeof name, "ttft_%d.dat", k);
        FILE *f = open_in(dir, name, err, errlen);
        if (!f) { free(v); return -1; }
        fprintf(f, "# %s: TTFT (ms) of the answered questions after the warm-up, fraction at or below\n", runs[k].label);
        for (int i = 0; i < m; i++) fprintf(f, "%.6f %.6f\n", v[i], (double)(i + 1) / m);
        fclose(f);
        if (m) { any = 1; lo = v[0] < lo ? v[0] : lo; hi = v[m - 1] > hi ? v[m - 1] : hi; }
        free(v);
    }
    if (!any) return 0;
    fprintf(gp, "set output 'ttft.png'\nset title 'Time to first token (answered questions after the warm-up)'\n"
                "set xlabel 'TTFT (ms)'\nset ylabel 'fraction of questions'\nset yrange [0:1.02]\nset key bottom right\n"
                "set grid\n%s", lo > 0 && hi / lo > 20 ? "set logscale x\n" : "");
    fprintf(gp, "plot ");
    for (int k = 0; k < n; k++) {
        char q[600];
        fprintf(gp, "%s'ttft_%d.dat' using 1:2 with steps lw 2 title '%s (p50 %.1f ms, p99 %.1f ms)'", k ? ", \\\n     " : "",
                k, gp_quote(runs[k].label, q, sizeof q), 1e3 * runs[k].sum->ttft.p50, 1e3 * runs[k].sum->ttft.p99);
    }
    fprintf(gp, "\nunset logscale x\nset yrange [*:*]\nunset title\n");
    return 1;
}

/* quality.dat: a row per type (then "all"), EM and F1 of the first run of each mode */
static int quality_plot(FILE *gp, const lz_eval_report_run *runs, int n, const char *dir, char *err, size_t errlen)
{
    int pick[8], np = 0;
    for (int k = 0; k < n && np < 8; k++) {
        int seen = 0;
        for (int j = 0; j < np; j++) seen |= runs[pick[j]].mode == runs[k].mode;
        if (!seen && runs[k].sum->scored) pick[np++] = k;
    }
    if (!np) return 0;
    FILE *f = open_in(dir, "quality.dat", err, errlen);
    if (!f) return -1;
    fprintf(f, "# type");
    for (int j = 0; j < np; j++) fprintf(f, " em_%s f1_%s", lz_query_mode_name(runs[pick[j]].mode), lz_query_mode_name(runs[pick[j]].mode));
    fprintf(f, "\n");
    const lz_eval_summary *s0 = runs[pick[0]].sum;
    for (int t = 0; t <= s0->n_types; t++) {
        const char *type = t < s0->n_types ? (s0->types[t].type[0] ? s0->types[t].type : "(none)") : "all";
        fprintf(f, "\"%s\"", type);
        for (int j = 0; j < np; j++) {
            const lz_eval_summary *s = runs[pick[j]].sum;
            double em = s->em, f1 = s->f1;
            if (t < s0->n_types) {
                em = f1 = 0;
                for (int u = 0; u < s->n_types; u++)
                    if (!strcmp(s->types[u].type, s0->types[t].type)) { em = s->types[u].em; f1 = s->types[u].f1; }
            }
            fprintf(f, " %.4f %.4f", em, f1);
        }
        fprintf(f, "\n");
    }
    fclose(f);
    fprintf(gp, "set output 'quality.png'\nset multiplot layout 2,1 title 'Exact match and F1 per question type (%d "
                "scored)'\nset style data histogram\nset style histogram cluster gap 1\nset style fill solid 0.8 border -1\n"
                "set boxwidth 0.9\nset yrange [0:105]\nset key outside right top vertical\nset grid ytics\n"
                "unset xlabel\nunset title\n", s0->scored);
    for (int m = 0; m < 2; m++) {
        fprintf(gp, "set ylabel '%s (%%)'\nplot ", m ? "F1" : "EM");
        for (int j = 0; j < np; j++)
            fprintf(gp, "%s'quality.dat' using %d%s title '%s'", j ? ", " : "", 2 + 2 * j + m, j ? "" : ":xtic(1)",
                    lz_query_mode_name(runs[pick[j]].mode));
        fprintf(gp, "\n");
    }
    fprintf(gp, "unset multiplot\nset yrange [*:*]\nset style data lines\nset key inside\n");
    return 1;
}

/* hit_<tier>_<mode>.dat: (budget MiB, hit rate %) per mode, for a tier whose budget varied; a mode
 * without lookups there (full) is left out */
static int hit_plot(FILE *gp, const lz_eval_report_run *runs, int n, const char *dir, char *err, size_t errlen)
{
    int vary[2] = {0, 0}, drawn = 0; /* host, gpu */
    for (int k = 1; k < n; k++) {
        vary[0] |= runs[k].host_budget != runs[0].host_budget;
        vary[1] |= runs[k].gpu && runs[k].gpu_budget_asked != runs[0].gpu_budget_asked; /* as asked: a default
                                                                                         differs run to run */
    }
    for (int tier = 0; tier < 2; tier++) {
        if (!vary[tier]) continue;
        const char *tn = tier ? "gpu" : "host";
        char cmd[2048] = "";
        size_t cl = 0;
        for (int mode = 0; mode < 4; mode++) {
            int idx[64], m = 0;
            for (int k = 0; k < n && m < 64; k++) {
                const double rate = tier ? runs[k].sum->gpu_hit_rate : runs[k].sum->host_hit_rate;
                if (runs[k].mode == mode && rate >= 0) idx[m++] = k;
            }
            if (!m) continue;
            for (int i = 1; i < m; i++) /* budgets in increasing order */
                for (int j = i; j > 0; j--) {
                    const size_t bj = tier ? runs[idx[j]].gpu_budget : runs[idx[j]].host_budget;
                    const size_t bp = tier ? runs[idx[j - 1]].gpu_budget : runs[idx[j - 1]].host_budget;
                    if (bj >= bp) break;
                    const int t = idx[j];
                    idx[j] = idx[j - 1];
                    idx[j - 1] = t;
                }
            char name[64];
            snprintf(name, sizeof name, "hit_%s_%s.dat", tn, lz_query_mode_name(mode));
            FILE *f = open_in(dir, name, err, errlen);
            if (!f) return -1;
            fprintf(f, "# %s mode: %s tier budget (MiB), hit rate (%%) after the warm-up\n", lz_query_mode_name(mode), tn);
            for (int i = 0; i < m; i++) {
                const lz_eval_report_run *r = &runs[idx[i]];
                fprintf(f, "%.4f %.4f\n", (tier ? r->gpu_budget : r->host_budget) / 1048576.0,
                        100 * (tier ? r->sum->gpu_hit_rate : r->sum->host_hit_rate));
            }
            fclose(f);
            cl += (size_t)snprintf(cmd + cl, sizeof cmd - cl, "%s'%s' using 1:2 with linespoints lw 2 pt 7 title '%s'",
                                   cl ? ", " : "", name, lz_query_mode_name(mode));
        }
        if (!cl) continue;
        if (!drawn++) fprintf(gp, "set output 'hit_rate.png'\n%s", vary[0] && vary[1] ? "set multiplot layout 1,2\n" : "");
        fprintf(gp, "set title 'Hit rate of the %s tier against its budget (after the warm-up)'\nset logscale x 2\n"
                    "set xlabel '%s tier budget (MiB)'\nset ylabel 'hit rate (%%)'\nset yrange [0:100]\n"
                    "set key bottom right\nset grid\nplot %s\nunset logscale x\nset yrange [*:*]\n",
                tier ? "GPU" : "host", tier ? "GPU" : "host", cmd);
    }
    if (vary[0] && vary[1] && drawn) fprintf(gp, "unset multiplot\n");
    return drawn > 0;
}

int lz_eval_plot(const lz_eval_report_run *runs, int n, const char *dir, const char *gnuplot, char *made,
                 size_t madelen, char *err, size_t errlen)
{
    made[0] = 0;
    FILE *gp = open_in(dir, "plots.gp", err, errlen);
    if (!gp) return -1;
    fprintf(gp, "# plots.gp - lazyeval's plots; redraw with: gnuplot plots.gp (in this folder)\n"
                "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
                "    set terminal pngcairo size 960,640 noenhanced\n"
                "} else {\n"
                "    set terminal png size 960,640 noenhanced\n"
                "}\n");
    const int t = ttft_plot(gp, runs, n, dir, err, errlen);
    const int q = t < 0 ? -1 : quality_plot(gp, runs, n, dir, err, errlen);
    const int h = q < 0 ? -1 : hit_plot(gp, runs, n, dir, err, errlen);
    fprintf(gp, "set output\n");
    const int closed = fclose(gp);
    if (t < 0 || q < 0 || h < 0) return -1; /* err says which file */
    if (closed) return lz_fail(err, errlen, -1, "%s/plots.gp: cannot write", dir);
    snprintf(made, madelen, "%s%s%s", t ? "ttft.png " : "", q ? "quality.png " : "", h ? "hit_rate.png" : "");
    if (!gnuplot) return 0;
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) return lz_fail(err, errlen, -1, "cannot start %s: %s", gnuplot, strerror(errno));
    if (pid == 0) {
        if (chdir(dir) != 0) _exit(126);
        const int fd = open("gnuplot.log", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); close(fd); }
        execl(gnuplot, gnuplot, "plots.gp", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) break;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return lz_fail(err, errlen, -1, "%s failed on %s/plots.gp (its messages: %s/gnuplot.log)", gnuplot, dir, dir);
    return 0;
}
