/* serve_stream.h - bench_serve's request stream: the ids and titles of a JSONL
 * corpus, K distinct documents a request by Zipf(alpha) popularity (eval/zipf.h)
 * drawn over the corpus in its order (--stream draw, the HTTP mode's draws) or
 * bench_workload's stream over a seeded permutation of it (--stream workload:
 * the documents `bench_workload --alpha A --seed S --docs K --emit-questions`
 * names, for a corpus whose i-th line is d%05d i), and a question about the
 * last one, cut or padded to a chosen number of tokens under the model's
 * tokenizer (--question-tokens). One stream serves every mode and rate of a
 * run; its hash says so in the JSON lines. Header-only, for bench/bench_serve.c.
 * What it leaves out: arrival times and the runs (bench/serve_inproc.h). */
#ifndef LZ_BENCH_SERVE_STREAM_H
#define LZ_BENCH_SERVE_STREAM_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/zipf.h"
#include "model/prompt.h"
#include "query/retrieve.h"
#include "tokenizer/tokenizer.h"

#define LZ_BS_MAX_K 64

enum { LZ_BS_STREAM_DRAW = 0, LZ_BS_STREAM_WORKLOAD = 1 };

/* One request of the stream. */
typedef struct {
    char *question;                /* malloc'd */
    const char *docs[LZ_BS_MAX_K]; /* document ids, the last one nearest the question (the corpus's strings) */
    int n_docs;
    int q_tokens;                  /* the question's tokens, encoded alone (0 when no tokenizer was given) */
} lz_bs_req;

typedef struct {
    const char *corpus;   /* JSONL, one {"id", "title"?, ...} a line */
    int n;                /* requests */
    int K;                /* documents a request, 1..LZ_BS_MAX_K */
    double alpha;         /* Zipf exponent (0: uniform) */
    uint64_t seed;
    int kind;             /* LZ_BS_STREAM_DRAW or _WORKLOAD */
    int question_tokens;  /* > 0: each question exactly this many tokens (as near as the tokenizer allows) */
    const lz_tokenizer *tok; /* counts them (needed with question_tokens; NULL: none counted) */
} lz_bs_stream_opts;

typedef struct {
    int n_corpus;
    char **ids, **titles; /* (n_corpus) malloc'd; the title is the id where the record has none */
    int n;
    lz_bs_req *r;         /* (n) */
    double mean_q_tokens; /* over the requests (0 without a tokenizer) */
    uint64_t hash;        /* FNV-1a of every request's documents and question */
} lz_bs_stream;

/* The ids and titles of a JSONL corpus (records without an id are skipped) into malloc'd
 * arrays: their count, or -1 with a message when the file cannot be read. */
static int lz_bs_read_corpus(const char *path, char ***ids_out, char ***titles_out, char *err, size_t errlen)
{
    *ids_out = *titles_out = NULL;
    FILE *f = fopen(path, "r");
    if (!f) { snprintf(err, errlen, "cannot read %s", path); return -1; }
    char **ids = NULL, **titles = NULL, *line = NULL;
    size_t lcap = 0;
    int n = 0, cap = 0, oom = 0;
    while (!oom && getline(&line, &lcap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        const char *id = json_string_value(json_object_get(o, "id")), *t = json_string_value(json_object_get(o, "title"));
        if (id) {
            if (n == cap) {
                cap = cap ? 2 * cap : 256;
                char **a = (char **)realloc(ids, (size_t)cap * sizeof *a);
                if (a) ids = a;
                char **b = a ? (char **)realloc(titles, (size_t)cap * sizeof *b) : NULL;
                if (b) titles = b;
                oom = !a || !b;
            }
            if (!oom) {
                ids[n] = strdup(id);
                titles[n] = strdup(t ? t : id);
                oom = !ids[n] || !titles[n];
                n++;
            }
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    if (oom) {
        for (int i = 0; i < n; i++) { free(ids[i]); free(titles[i]); }
        free(ids);
        free(titles);
        snprintf(err, errlen, "out of memory reading %s", path);
        return -1;
    }
    *ids_out = ids, *titles_out = titles;
    return n;
}

static uint64_t lz_bs_fnv(uint64_t h, const char *s)
{
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return (h ^ 0xff) * 0x100000001b3ull; /* a separator */
}

/* Tokens of text encoded alone (no BOS); -1 when out of memory. */
static int lz_bs_count_tokens(const lz_tokenizer *tok, const char *text)
{
    int *ids = NULL, n = 0;
    if (lz_tokenizer_encode(tok, text, strlen(text), 0, &ids, &n)) return -1;
    free(ids);
    return n;
}

/* base padded with filler words past want tokens, then cut to the longest prefix of its first
 * want tokens that encodes in at most want tokens (want itself but where a cut word merges
 * differently): malloc'd, *got its tokens; NULL when out of memory. */
static char *lz_bs_question_of(const lz_tokenizer *tok, const char *base, int want, int *got)
{
    static const char *const fill[] = {"river", "castle", "stone", "north", "king", "bridge", "market", "winter",
                                       "garden", "tower", "harbor", "forest", "silver", "letter", "council", "battle"};
    size_t cap = strlen(base) + 16 * (size_t)want + 64, len = strlen(base);
    char *text = (char *)malloc(cap);
    if (!text) return NULL;
    memcpy(text, base, len + 1);
    int *ids = NULL, n = 0;
    for (int w = 0;; w++) { /* every filler word is at least one token: want of them are enough */
        free(ids);
        ids = NULL;
        if (lz_tokenizer_encode(tok, text, len, 0, &ids, &n)) { free(text); return NULL; }
        if (n >= want || w > want) break;
        len += (size_t)snprintf(text + len, cap - len, " %s", fill[w % 16]);
    }
    char *best = NULL;
    *got = 0;
    for (int k = n < want ? n : want; k > 0 && !best; k--) {
        char *cut = NULL;
        size_t cl = 0;
        if (lz_tokenizer_decode(tok, ids, k, &cut, &cl)) break;
        const int c = lz_bs_count_tokens(tok, cut);
        if (c > 0 && c <= want) { best = cut; *got = c; }
        else free(cut);
    }
    free(ids);
    free(text);
    return best;
}

static void lz_bs_stream_free(lz_bs_stream *s)
{
    for (int i = 0; i < s->n && s->r; i++) free(s->r[i].question);
    free(s->r);
    for (int i = 0; i < s->n_corpus; i++) { free(s->ids[i]); free(s->titles[i]); }
    free(s->ids);
    free(s->titles);
    memset(s, 0, sizeof *s);
}

static double lz_bs_u01(void *ctx) { return lz_eval_rng_u01((lz_eval_rng *)ctx); }

/* The stream of o. 0, or -1 with a message (an unreadable corpus, fewer documents than K, out
 * of memory); *s is then empty. */
static int lz_bs_stream_make(const lz_bs_stream_opts *o, lz_bs_stream *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (o->K < 1 || o->K > LZ_BS_MAX_K || o->n < 1) { snprintf(err, errlen, "k 1..%d and requests >= 1", LZ_BS_MAX_K); return -1; }
    if (o->question_tokens > 0 && !o->tok) { snprintf(err, errlen, "--question-tokens needs the model's tokenizer"); return -1; }
    s->n_corpus = lz_bs_read_corpus(o->corpus, &s->ids, &s->titles, err, errlen);
    if (s->n_corpus < 0) { s->n_corpus = 0; lz_bs_stream_free(s); return -1; }
    const int N = s->n_corpus;
    if (N < o->K) {
        snprintf(err, errlen, "%s: %d documents, fewer than k %d", o->corpus, N, o->K);
        lz_bs_stream_free(s);
        return -1;
    }
    s->r = (lz_bs_req *)calloc((size_t)o->n, sizeof *s->r);
    double *cdf = (double *)malloc((size_t)N * sizeof *cdf);
    int *rows = o->kind == LZ_BS_STREAM_WORKLOAD ? lz_eval_zipf_stream(N, o->n, o->K, o->alpha, o->seed, o->seed) : NULL;
    if (!s->r || !cdf || (o->kind == LZ_BS_STREAM_WORKLOAD && !rows)) {
        free(cdf);
        free(rows);
        lz_bs_stream_free(s);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->n = o->n;
    const double z = lz_eval_zipf_cdf(cdf, N, o->alpha);
    lz_eval_rng rng = {o->seed};
    uint64_t h = 0xcbf29ce484222325ull;
    double qsum = 0;
    int rc = 0;
    for (int i = 0; i < o->n && !rc; i++) {
        int pick[LZ_BS_MAX_K];
        if (rows) memcpy(pick, rows + (size_t)i * o->K, (size_t)o->K * sizeof *pick);
        else lz_eval_zipf_draw(pick, o->K, cdf, N, z, NULL, lz_bs_u01, &rng);
        lz_bs_req *r = &s->r[i];
        r->n_docs = o->K;
        for (int k = 0; k < o->K; k++) h = lz_bs_fnv(h, r->docs[k] = s->ids[pick[k]]);
        char q[800];
        const char *about = s->titles[pick[o->K - 1]];
        if (o->question_tokens > 0) {
            snprintf(q, sizeof q, "What do these passages say about %.600s (question %d), and who is named there?",
                     about, i);
            r->question = lz_bs_question_of(o->tok, q, o->question_tokens, &r->q_tokens);
        } else {
            snprintf(q, sizeof q, "What is known about %.700s?", about);
            r->question = strdup(q);
            r->q_tokens = o->tok ? lz_bs_count_tokens(o->tok, q) : 0;
        }
        if (!r->question || r->q_tokens < 0) { rc = -1; break; }
        h = lz_bs_fnv(h, r->question);
        qsum += r->q_tokens;
    }
    free(cdf);
    free(rows);
    if (rc) { lz_bs_stream_free(s); snprintf(err, errlen, "out of memory"); return -1; }
    s->hash = h;
    s->mean_q_tokens = qsum / o->n;
    return 0;
}

/* The longest whole prompt of the stream in tokens (prefix, documents, question and answer
 * cue) plus max_tokens: what a request of full mode holds as its own; -1 with a message
 * (an id not in the store). */
static int64_t lz_bs_stream_max_own(const lz_bs_stream *s, lz_store *st, const lz_tokenizer *tok, int max_tokens,
                                    char *err, size_t errlen)
{
    int *ids = NULL, n_prefix = 0;
    if (lz_prompt_prefix_tokens(tok, &ids, &n_prefix)) { snprintf(err, errlen, "out of memory"); return -1; }
    free(ids);
    int64_t best = 0;
    for (int i = 0; i < s->n; i++) {
        lz_query_doc *docs;
        int nd, nq = 0;
        if (lz_retrieve_resolve_ids(st, s->r[i].docs, s->r[i].n_docs, &docs, &nd, err, errlen)) return -1;
        int64_t t = n_prefix + max_tokens;
        for (int k = 0; k < nd; k++) t += docs[k].n_tokens;
        free(docs);
        ids = NULL;
        if (lz_prompt_question_tokens(tok, s->r[i].question, &ids, &nq)) { snprintf(err, errlen, "out of memory"); return -1; }
        free(ids);
        t += nq;
        if (t > best) best = t;
    }
    return best;
}

#endif /* LZ_BENCH_SERVE_STREAM_H */
