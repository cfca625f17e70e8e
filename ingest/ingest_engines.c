/* ingest_engines.c - N encoder pipelines for one ingest (--gpus LIST on N
 * GPUs of one host, --engines N on the CPU; ingest/ingest_run.h). At each
 * commit the batch's documents to encode are dealt to the pipelines by token
 * count (longest first, each to the least loaded), every pipeline runs its
 * share on a host thread of its own (its backend's passes, its encoders and
 * codecs: ingest_jobs.c's pipeline), and once all are done the payloads are
 * queued in batch order for the run's one writer (ingest_batch.c): commits,
 * their order and what a resumed run skips are those of one pipeline, and a
 * document's payload does not depend on which pipeline encoded it (the CPU
 * engines' and the reference's bytes are exact; a GPU's are as a pass of
 * that GPU makes them). What it leaves out: the GPU contexts themselves
 * (lazyingest.c makes them, each on its device) and the writer.
 */
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "ingest/ingest_run.h"

typedef struct {
    int tok, j;
} deal_item;

/* Longest first; ties: the earlier job. */
static int by_tokens(const void *a, const void *b)
{
    const deal_item *x = a, *y = b;
    if (x->tok != y->tok) return x->tok > y->tok ? -1 : 1;
    return x->j < y->j ? -1 : x->j > y->j;
}

void ingest_deal(const int *tokens, int n, int n_eng, int *engine_of)
{
    int64_t load[INGEST_MAX_ENGINES] = { 0 };
    if (n_eng < 1) n_eng = 1;
    if (n_eng > INGEST_MAX_ENGINES) n_eng = INGEST_MAX_ENGINES;
    deal_item *v = malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
    if (!v) { /* out of memory: round robin, still deterministic */
        for (int j = 0; j < n; j++) engine_of[j] = j % n_eng;
        return;
    }
    for (int j = 0; j < n; j++) v[j] = (deal_item){tokens[j], j};
    qsort(v, (size_t)n, sizeof *v, by_tokens);
    for (int k = 0; k < n; k++) {
        int best = 0;
        for (int e = 1; e < n_eng; e++)
            if (load[e] < load[best]) best = e;
        engine_of[v[k].j] = best;
        load[best] += v[k].tok;
    }
    free(v);
}

const char *ingest_engine_name(const ingest *g, int i, char *buf, size_t n)
{
    const int dev = g->eng && i >= 0 && i < g->n_eng ? g->eng[i].dev : -1;
    if (dev >= 0) snprintf(buf, n, "GPU %d", dev);
    else snprintf(buf, n, "%s", g->o.gpu ? "GPU" : "CPU");
    return buf;
}

static void engine_free(ingest_engine *e)
{
    for (int t = 0; t < e->threads; t++) {
        if (e->pool) lz_encoder_free(e->pool[t]);
        if (e->codec) lz_payload_codec_free(e->codec[t]);
    }
    free(e->pool);
    free(e->codec);
    for (int k = 0; k < e->n_jobs; k++) free(e->jobs[k].blob);
    free(e->jobs);
    free(e->job_of);
    lz_pass_ref_free(e->ref);
}

void ingest_engines_free(ingest *g)
{
    for (int i = 0; g->eng && i < g->n_eng; i++) engine_free(&g->eng[i]);
    free(g->eng);
    g->eng = NULL;
    g->n_eng = 0;
}

/* Engine e's encoders and codecs, one a thread, set up as the run's (dtype, policy, scorer,
 * probe cue, backend). 0 or -1 (g->err). */
static int engine_encoders(ingest *g, ingest_engine *e)
{
    if (!(e->pool = calloc((size_t)e->threads, sizeof *e->pool)) ||
        !(e->codec = calloc((size_t)e->threads, sizeof *e->codec))) {
        snprintf(g->err, sizeof g->err, "out of memory");
        return -1;
    }
    for (int t = 0; t < e->threads; t++) {
        /* the prefix's KV copied from the run's encoder (an 8B model's takes seconds on the CPU) */
        if (lz_encoder_new_like(g->enc, &e->pool[t], g->err, sizeof g->err)) return -1;
        if (!(e->codec[t] = lz_payload_codec_new()) || lz_encoder_set_probe(e->pool[t], g->probe, g->n_probe) ||
            lz_payload_codec_set_threads(e->codec[t], 1)) { /* 1 MiB frames, as the one-document path's codec */
            snprintf(g->err, sizeof g->err, "out of memory");
            return -1;
        }
        ingest_setup_encoder(g, e->pool[t]);
        if (e->backend.encode) lz_encoder_set_backend(e->pool[t], &e->backend);
    }
    return 0;
}

int ingest_engines_open(ingest *g, int n, const lz_encode_backend *b, const int *devs)
{
    if (n < 2 || n > INGEST_MAX_ENGINES) {
        snprintf(g->err, sizeof g->err, "%d pipelines: expected 2 to %d", n, INGEST_MAX_ENGINES);
        return -1;
    }
    if (!(g->eng = calloc((size_t)n, sizeof *g->eng))) {
        snprintf(g->err, sizeof g->err, "out of memory");
        return -1;
    }
    g->n_eng = n;
    /* the host's threads shared out: a pipeline of passes needs two (one drives its device while
     * the other packs), a CPU engine one */
    const int T = omp_get_max_threads() > 1 ? omp_get_max_threads() : 1;
    const int ref = lz_env_get()->ingest_ref_passes;
    for (int i = 0; i < n; i++) {
        ingest_engine *e = &g->eng[i];
        e->id = i;
        e->dev = devs ? devs[i] : -1;
        if (b) {
            e->backend = b[i];
        } else if (ref > 0) { /* --gpu's pipeline of passes on the CPU reference, one a pipeline */
            if (!(e->ref = lz_pass_ref_new(g->m, lz_encoder_prefix_cache(g->enc)))) {
                snprintf(g->err, sizeof g->err, "out of memory");
                return -1;
            }
            e->backend = lz_pass_ref_backend(e->ref, g->o.max_doc_tokens, ref);
            if (!lz_env_get()->ingest_planes) e->backend.fetch_planes = NULL;
        }
        const int passes = e->backend.start && e->backend.pass_tokens > 0;
        e->threads = T / n > (passes ? 2 : 1) ? T / n : passes ? 2 : 1;
        if (engine_encoders(g, e)) {
            char name[32];
            const size_t k = strlen(g->err);
            snprintf(g->err + k, sizeof g->err - k, " (pipeline %d, %s)", i, ingest_engine_name(g, i, name, sizeof name));
            return -1;
        }
    }
    return 0;
}

/* Adds batch job j to engine e's share (a copy; its blob comes back after the run). */
static int engine_take(ingest *g, ingest_engine *e, int j)
{
    if (e->n_jobs == e->cap_jobs) {
        const int cap = e->cap_jobs ? e->cap_jobs * 2 : 64;
        enc_job *v = realloc(e->jobs, sizeof *v * (size_t)cap);
        if (v) e->jobs = v;
        int *w = v ? realloc(e->job_of, sizeof *w * (size_t)cap) : NULL;
        if (w) e->job_of = w;
        if (!v || !w) {
            snprintf(g->err, sizeof g->err, "out of memory");
            return -1;
        }
        e->cap_jobs = cap;
    }
    e->jobs[e->n_jobs] = g->jobs[j];
    e->jobs[e->n_jobs].alias = -1;
    e->job_of[e->n_jobs++] = j;
    return 0;
}

/* One pipeline's run of its share: in (g, e), out (its passes and thread-seconds). */
typedef struct {
    ingest *g;
    ingest_engine *e;
    long n_passes, n_pass_docs;
    double fwd, pack, dev_finish, dev_wait;
} engine_arg;

/* One pipeline's share of the batch, on its own host thread. */
static void *engine_main(void *arg)
{
    engine_arg *a = arg;
    ingest *g = a->g;
    ingest_engine *e = a->e;
    const double t0 = lz_now_s();
    job_pipe p = {.docs = g->docs, .level = g->o.level, .codec_id = g->o.codec,
                  .jobs = e->jobs, .n_jobs = e->n_jobs, .pool = e->pool,
                  .codec = e->codec, .threads = e->threads, .backend = &e->backend, .err = e->err,
                  .errlen = sizeof e->err};
    e->err[0] = 0;
    e->rc = ingest_pipe_run(&p);
    const double wall = lz_now_s() - t0;
    e->n_passes += p.n_passes;
    e->n_pass_docs += p.n_pass_docs;
    e->t_busy += wall;
    e->t_forward += p.fwd + p.pack > 0 ? wall * p.fwd / (p.fwd + p.pack) : 0;
    e->t_pack += p.fwd + p.pack > 0 ? wall * p.pack / (p.fwd + p.pack) : 0;
    a->n_passes = p.n_passes, a->n_pass_docs = p.n_pass_docs;
    a->fwd = p.fwd, a->pack = p.pack;
    a->dev_finish = p.dev_finish, a->dev_wait = p.dev_wait;
    return NULL;
}

int ingest_engines_run(ingest *g)
{
    const int N = g->n_eng;
    int *tok = calloc((size_t)g->n_jobs + 1, sizeof *tok), *of = malloc(sizeof *of * (size_t)(g->n_jobs + 1));
    int *idx = malloc(sizeof *idx * (size_t)(g->n_jobs + 1)), n = 0;
    if (!tok || !of || !idx) {
        free(tok), free(of), free(idx);
        snprintf(g->err, sizeof g->err, "out of memory");
        return -1;
    }
    for (int j = 0; j < g->n_jobs; j++) { /* what is encoded: jobs that alias an earlier one are not */
        g->jobs[j].engine = -1;
        if (g->jobs[j].alias >= 0) continue;
        idx[n] = j;
        tok[n++] = g->docs[g->jobs[j].doc].n_tokens;
    }
    ingest_deal(tok, n, N, of);
    int rc = 0;
    for (int i = 0; i < N; i++) g->eng[i].n_jobs = 0;
    for (int k = 0; !rc && k < n; k++) { /* each pipeline's share in batch order */
        g->jobs[idx[k]].engine = of[k];
        rc = engine_take(g, &g->eng[of[k]], idx[k]);
    }
    free(tok), free(of), free(idx);
    if (rc) return -1;
    const double t0 = lz_now_s();
    engine_arg args[INGEST_MAX_ENGINES];
    pthread_t th[INGEST_MAX_ENGINES];
    int started[INGEST_MAX_ENGINES] = { 0 };
    for (int i = 0; i < N; i++) {
        args[i] = (engine_arg){.g = g, .e = &g->eng[i]};
        if (g->eng[i].n_jobs == 0) continue;
        started[i] = pthread_create(&th[i], NULL, engine_main, &args[i]) == 0;
        if (!started[i]) engine_main(&args[i]); /* no thread: on this one */
    }
    double fwd = 0, pack = 0;
    for (int i = 0; i < N; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        fwd += args[i].fwd, pack += args[i].pack;
        g->t_dev_finish += args[i].dev_finish, g->t_dev_wait += args[i].dev_wait; /* summed over the pipelines */
        g->n_passes += args[i].n_passes;
        g->n_pass_docs += args[i].n_pass_docs;
    }
    const double wall = lz_now_s() - t0;
    /* the results back into the batch's jobs (their blobs with them); the first failed
     * pipeline, in pipeline order, names itself and what failed */
    int failed = -1;
    for (int i = 0; i < N; i++) {
        ingest_engine *e = &g->eng[i];
        if (e->n_jobs && e->rc && failed < 0) failed = i;
        for (int k = 0; k < e->n_jobs; k++) {
            enc_job *x = &g->jobs[e->job_of[k]], *y = &e->jobs[k];
            x->blob = y->blob, x->len = y->len;
            memcpy(x->err, y->err, sizeof x->err);
            y->blob = NULL;
            if (x->blob) e->n_docs++, e->n_tokens += g->docs[x->doc].n_tokens;
        }
        e->n_jobs = 0;
    }
    g->t_encode += wall;
    g->t_engines += wall;
    g->t_forward += fwd + pack > 0 ? wall * fwd / (fwd + pack) : 0;
    g->t_pack += fwd + pack > 0 ? wall * pack / (fwd + pack) : 0;
    if (failed >= 0) {
        char name[32];
        snprintf(g->err, sizeof g->err, "pipeline %d (%s): %s", failed, ingest_engine_name(g, failed, name, sizeof name),
                 g->eng[failed].err[0] ? g->eng[failed].err : "failed");
        return -1;
    }
    return ingest_queue_jobs(g);
}
