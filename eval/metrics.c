/* metrics.c - exact match and token F1 of one predicted answer against its
 * gold answers, as the official HotpotQA and 2Wiki scripts compute them
 * (metrics.h): normalise both, split at spaces, count the common tokens as
 * a multiset intersection. */
#include <stdlib.h>
#include <string.h>

#include "eval/metrics.h"
#include "eval/normalize.h"

/* the words of normalised s, in place (s is cut at its spaces); *n words, malloc'd */
static char **words(char *s, int *n)
{
    int k = 0, cap = 1;
    for (char *p = s; *p; p++) cap += *p == ' ';
    char **w = malloc(sizeof *w * (size_t)cap);
    if (!w) return NULL;
    for (char *p = s; *p;) {
        w[k++] = p;
        char *sp = strchr(p, ' ');
        if (!sp) break;
        *sp = 0;
        p = sp + 1;
    }
    *n = k;
    return w;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* the size of the multiset intersection of a[0..na) and b[0..nb) (both sorted here) */
static int common_tokens(char **a, int na, char **b, int nb)
{
    qsort(a, (size_t)na, sizeof *a, cmp_str);
    qsort(b, (size_t)nb, sizeof *b, cmp_str);
    int i = 0, j = 0, same = 0;
    while (i < na && j < nb) {
        const int c = strcmp(a[i], b[j]);
        if (c == 0) { same++; i++; j++; }
        else if (c < 0) i++;
        else j++;
    }
    return same;
}

static int is_yes_no(const char *s) { return !strcmp(s, "yes") || !strcmp(s, "no") || !strcmp(s, "noanswer"); }

int lz_eval_score_one(const char *prediction, const char *gold, lz_eval_score *out)
{
    memset(out, 0, sizeof *out);
    char *p = lz_eval_normalize(prediction), *g = lz_eval_normalize(gold);
    char **pw = NULL, **gw = NULL;
    int rc = -1, np = 0, ng = 0;
    if (!p || !g) goto done;
    out->em = strcmp(p, g) == 0;
    rc = 0;
    if ((is_yes_no(p) || is_yes_no(g)) && strcmp(p, g)) goto done; /* the yes / no / noanswer rule */
    rc = -1;
    if (!(pw = words(p, &np)) || !(gw = words(g, &ng))) goto done;
    rc = 0;
    const int same = common_tokens(pw, np, gw, ng);
    if (same == 0) goto done;
    out->precision = (double)same / np;
    out->recall = (double)same / ng;
    out->f1 = 2 * out->precision * out->recall / (out->precision + out->recall);
done:
    free(pw);
    free(gw);
    free(p);
    free(g);
    return rc;
}

int lz_eval_score_answer(const char *prediction, const char *const *golds, int n, lz_eval_score *out)
{
    memset(out, 0, sizeof *out);
    if (n < 1) return -1;
    for (int i = 0; i < n; i++) {
        lz_eval_score s;
        if (lz_eval_score_one(prediction, golds[i], &s)) return -1;
        if (s.em > out->em) out->em = s.em;
        if (s.f1 > out->f1) out->f1 = s.f1;
        if (s.precision > out->precision) out->precision = s.precision;
        if (s.recall > out->recall) out->recall = s.recall;
    }
    return 0;
}
