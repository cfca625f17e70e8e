/* ingest_jobs.c - a batch's documents encoded in parallel (ingest.par,
 * ingest/ingest_run.h): one document a thread on its own encoder and codec,
 * or, with a multi-document backend (--gpu; ingest/pass_ref.h), a pipeline
 * of passes: one thread drives the device, the others fetch, score and
 * pack; then the payloads queued in batch order, as one at a time would.
 * The same pipeline runs each of N engines' share (ingest_engines.c). */
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ingest/ingest_run.h"

/* Job x on thread t's encoder: its forward pass (or the backend's result,
 * fetched) and KV eviction; 0, or -1 with x->err. */
static int forward_job(job_pipe *p, enc_job *x, int t)
{
    const pend_doc *d = &p->docs[x->doc];
    lz_encoder *e = p->pool[t];
    int rc = x->pass >= 0 ? lz_encoder_run_fetched(e, d->ids, d->n_tokens, x->slot, x->err, sizeof x->err)
                          : lz_encoder_run(e, d->ids, d->n_tokens, x->err, sizeof x->err);
    if (rc && !x->err[0]) snprintf(x->err, sizeof x->err, "encoding failed");
    return rc;
}

/* Job x's payload from thread t's encoder and codec: x->blob, or x->err. */
static void pack_job(job_pipe *p, enc_job *x, int t)
{
    if (lz_encoder_pack(p->pool[t], 1, p->codec[t], p->codec_id, p->level, &x->blob, &x->len, x->err,
                        sizeof x->err) &&
        !x->err[0])
        snprintf(x->err, sizeof x->err, "encoding failed");
}

/* Job x on thread t, forward pass then payload (their seconds added to *fwd, *pack). */
static void encode_job(job_pipe *p, enc_job *x, int t, double *fwd, double *pack)
{
    const double a = lz_now_s();
    const int rc = forward_job(p, x, t);
    const double b = lz_now_s();
    if (!rc) pack_job(p, x, t);
    *fwd += b - a;
    *pack += lz_now_s() - b;
}

/* A multi-document backend (--gpu; the reference): the jobs it takes, in order,
 * in passes of at most pass_tokens tokens (x->pass, x->slot, the window); a
 * document longer than that, up to the backend's max_tokens (what a pass can
 * hold), in a pass of its own; the others keep pass -1. Returns the number
 * of passes. */
static int plan_passes(job_pipe *p)
{
    const lz_encode_backend *b = p->backend;
    int n_pass = 0, rows = 0, slot = 0;
    for (int j = 0; j < p->n_jobs; j++) {
        enc_job *x = &p->jobs[j];
        x->pass = x->slot = -1;
        if (!b || !b->start || !b->finish || !b->fetch || b->pass_tokens <= 0 || x->alias >= 0) continue;
        const int n = p->docs[x->doc].n_tokens, room = b->pass_tokens > b->max_tokens ? b->pass_tokens : b->max_tokens;
        if (n > room || !lz_encoder_backend_plan(p->pool[0], n, &x->c0, &x->cw)) continue;
        if (n_pass == 0 || rows + n > b->pass_tokens) n_pass++, rows = 0, slot = 0;
        x->pass = n_pass - 1;
        x->slot = slot++;
        rows += n;
    }
    return n_pass;
}

/* Enqueues pass P on the backend; 0, or -1 with p->err. */
static int start_pass(job_pipe *p, int P)
{
    int n = 0;
    for (int j = 0; j < p->n_jobs; j++) n += p->jobs[j].pass == P;
    const int **ids = malloc(sizeof *ids * (size_t)n);
    int *len = malloc(sizeof *len * (size_t)n * 3), first = -1;
    if (!ids || !len) {
        free(ids);
        free(len);
        snprintf(p->err, p->errlen, "out of memory");
        return -1;
    }
    for (int j = 0; j < p->n_jobs; j++) {
        const enc_job *x = &p->jobs[j];
        if (x->pass != P) continue;
        if (first < 0) first = x->doc;
        ids[x->slot] = p->docs[x->doc].ids;
        len[x->slot] = p->docs[x->doc].n_tokens;
        len[n + x->slot] = x->c0;
        len[2 * n + x->slot] = x->cw;
    }
    char err[512] = "";
    int rc = p->backend->start(p->backend->ctx, ids, len, len + n, len + 2 * n, n, err, sizeof err);
    p->n_passes += !rc;
    p->n_pass_docs += rc ? 0 : n;
    if (rc)
        snprintf(p->err, p->errlen, "a pass of documents '%s' and the %d after it failed: %s",
                 p->docs[first].ext_id ? p->docs[first].ext_id : "?", n - 1, err);
    free(ids);
    free(len);
    return rc ? -1 : 0;
}

/* The passes as a pipeline: thread 0 drives the device (pass P + 1 runs
 * while the others fetch pass P; a pass is read back only once every
 * document of the pass before has been fetched, since the read-back
 * overwrites it), the other threads take the jobs in order, each waiting
 * for its pass, then fetch, score and pack it. Packing is the longer part
 * on an 8B model (its KV is 131 KB a token), so it must not wait for the
 * passes: a pass holds fewer documents than there are threads. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    double t_finish, t_wait; /* the driver's seconds in finish and waiting for fetches */
    int done;   /* passes read back: pass done - 1 is the fetchable one */
    int *left;  /* per pass: its documents not fetched yet */
    int failed; /* the device failed: p->err says why */
    int next;   /* the next job to take */
} pass_sync;

static void pass_driver(job_pipe *p, pass_sync *ps, int n_pass)
{
    for (int P = 0; P < n_pass; P++) {
        const double t0 = lz_now_s();
        pthread_mutex_lock(&ps->mu);
        while (P > 0 && ps->left[P - 1] > 0) pthread_cond_wait(&ps->cv, &ps->mu);
        pthread_mutex_unlock(&ps->mu);
        const double t1 = lz_now_s();
        int rc = p->backend->finish(p->backend->ctx, p->err, p->errlen);
        ps->t_wait += t1 - t0, ps->t_finish += lz_now_s() - t1;
        pthread_mutex_lock(&ps->mu);
        if (rc) ps->failed = 1;
        else ps->done = P + 1;
        pthread_cond_broadcast(&ps->cv);
        pthread_mutex_unlock(&ps->mu);
        if (rc || (P + 1 < n_pass && start_pass(p, P + 1))) {
            pthread_mutex_lock(&ps->mu);
            ps->failed = 1;
            pthread_cond_broadcast(&ps->cv);
            pthread_mutex_unlock(&ps->mu);
            return;
        }
    }
}

static void pass_worker(job_pipe *p, pass_sync *ps, int t, double *fwd, double *pack)
{
    for (;;) {
        pthread_mutex_lock(&ps->mu);
        while (ps->next < p->n_jobs && p->jobs[ps->next].pass < 0) ps->next++;
        const int j = ps->next < p->n_jobs ? ps->next++ : -1;
        pthread_mutex_unlock(&ps->mu);
        if (j < 0) return;
        enc_job *x = &p->jobs[j];
        const double a = lz_now_s();
        pthread_mutex_lock(&ps->mu);
        while (ps->done <= x->pass && !ps->failed) pthread_cond_wait(&ps->cv, &ps->mu);
        const int failed = ps->done <= x->pass;
        pthread_mutex_unlock(&ps->mu);
        if (failed) {
            snprintf(x->err, sizeof x->err, "not encoded: the GPU failed on its batch");
            continue;
        }
        const int rc = forward_job(p, x, t);
        pthread_mutex_lock(&ps->mu);
        if (--ps->left[x->pass] == 0) pthread_cond_broadcast(&ps->cv);
        pthread_mutex_unlock(&ps->mu);
        const double b = lz_now_s();
        if (!rc) pack_job(p, x, t);
        *fwd += b - a;
        *pack += lz_now_s() - b;
    }
}

/* The passes on one thread: each finished, then its documents encoded, then the next started. */
static void pass_alone(job_pipe *p, pass_sync *ps, int n_pass, double *fwd, double *pack)
{
    for (int P = 0; P < n_pass && !ps->failed; P++) {
        const double t0 = lz_now_s();
        const int frc = p->backend->finish(p->backend->ctx, p->err, p->errlen);
        ps->t_finish += lz_now_s() - t0;
        if (frc) {
            ps->failed = 1;
            break;
        }
        for (int j = 0; j < p->n_jobs; j++)
            if (p->jobs[j].pass == P) encode_job(p, &p->jobs[j], 0, fwd, pack);
        if (P + 1 < n_pass && start_pass(p, P + 1)) ps->failed = 1;
    }
}

/* Runs the n_pass passes of the jobs planned by plan_passes on p's threads; 0 or -1 (p->err). */
static int run_passes(job_pipe *p, int n_pass)
{
    pass_sync ps = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    if (!(ps.left = calloc((size_t)n_pass, sizeof *ps.left))) {
        snprintf(p->err, p->errlen, "out of memory");
        return -1;
    }
    for (int j = 0; j < p->n_jobs; j++)
        if (p->jobs[j].pass >= 0) ps.left[p->jobs[j].pass]++;
    double f = 0, k = 0;
    int rc = start_pass(p, 0);
    if (!rc) {
#pragma omp parallel num_threads(p->threads) reduction(+ : f, k)
        {
            if (omp_get_num_threads() < 2) pass_alone(p, &ps, n_pass, &f, &k); /* the runtime gave one thread */
            else if (omp_get_thread_num() == 0) pass_driver(p, &ps, n_pass);
            else pass_worker(p, &ps, omp_get_thread_num(), &f, &k);
        }
        rc = ps.failed ? -1 : 0;
    }
    p->fwd += f;
    p->pack += k;
    p->dev_finish += ps.t_finish;
    p->dev_wait += ps.t_wait;
    free(ps.left);
    pthread_mutex_destroy(&ps.mu);
    pthread_cond_destroy(&ps.cv);
    return rc;
}

int ingest_pipe_run(job_pipe *p)
{
    double fwd = 0, pack = 0;
    const int n_pass = plan_passes(p);
    if (n_pass > 0 && run_passes(p, n_pass)) return -1;
    /* the others: on the CPU, or one at a time on the device */
#pragma omp parallel for num_threads(p->threads) schedule(dynamic, 1) reduction(+ : fwd, pack)
    for (int j = 0; j < p->n_jobs; j++)
        if (p->jobs[j].alias < 0 && p->jobs[j].pass < 0) encode_job(p, &p->jobs[j], omp_get_thread_num(), &fwd, &pack);
    p->fwd += fwd;
    p->pack += pack;
    return 0;
}

int ingest_queue_jobs(ingest *g)
{
    for (int j = 0; j < g->n_jobs; j++) { /* batch order: the payloads and counts ingest_encode_doc would have made */
        enc_job *x = &g->jobs[j];
        pend_doc *d = &g->docs[x->doc];
        if (x->alias >= 0) {
            d->stored_bytes = (int64_t)g->jobs[x->alias].len;
            continue;
        }
        if (!x->blob) {
            char who[64] = "";
            if (x->engine >= 0 && g->n_eng > 1) {
                char name[32];
                snprintf(who, sizeof who, " (pipeline %d, %s)", x->engine, ingest_engine_name(g, x->engine, name, sizeof name));
            }
            snprintf(g->err, sizeof g->err, "document '%s'%s: %s", d->ext_id ? d->ext_id : "?", who,
                     x->err[0] ? x->err : "not encoded");
            return -1;
        }
        void *blob = x->blob;
        x->blob = NULL; /* the batch owns it now */
        if (ingest_queue_payload(g, d, blob, x->len)) return -1;
    }
    g->n_jobs = 0;
    return 0;
}

/* par: encodes and packs the batch's jobs, one document a thread, each on
 * its own encoder and codec (made at the first call: the prefix runs again
 * for each, cheap for the small models par is chosen for), then queues the
 * payloads in batch order, exactly as ingest_encode_doc would have one by one. */
int ingest_run_jobs(ingest *g)
{
    if (!g->par || g->n_jobs == 0) return 0;
    if (g->n_eng > 1) return ingest_engines_run(g); /* N pipelines (ingest_engines.c) */
    const int T = omp_get_max_threads() > 1 ? omp_get_max_threads() : 1;
    if (g->n_pool < T) {
        lz_encoder **pe = realloc(g->pool, sizeof *pe * (size_t)T);
        lz_payload_codec **pc = pe ? realloc(g->pool_codec, sizeof *pc * (size_t)T) : NULL;
        if (pe) g->pool = pe;
        if (pc) g->pool_codec = pc;
        if (!pe || !pc) {
            snprintf(g->err, sizeof g->err, "out of memory");
            return -1;
        }
        for (; g->n_pool < T; g->n_pool++) {
            lz_encoder *e = g->n_pool == 0 ? g->enc : NULL;
            /* the prefix's KV copied from the first encoder (an 8B model's takes seconds on the CPU) */
            if (!e && lz_encoder_new_like(g->enc, &e, g->err, sizeof g->err)) return -1;
            lz_payload_codec *c = lz_payload_codec_new();
            if (!c || (g->n_pool > 0 && lz_encoder_set_probe(e, g->probe, g->n_probe)) ||
                lz_payload_codec_set_threads(c, 1)) { /* 1 MiB frames, as the one-document path's codec */
                lz_payload_codec_free(c);
                if (e != g->enc) lz_encoder_free(e);
                snprintf(g->err, sizeof g->err, "out of memory");
                return -1;
            }
            if (g->n_pool > 0) {
                ingest_setup_encoder(g, e);
                if (g->backend.encode) lz_encoder_set_backend(e, &g->backend); /* --gpu, or the reference */
            }
            g->pool[g->n_pool] = e;
            g->pool_codec[g->n_pool] = c;
        }
    }
    const double t0 = lz_now_s();
    for (int j = 0; j < g->n_jobs; j++) g->jobs[j].engine = -1;
    job_pipe p = {.docs = g->docs, .level = g->o.level, .codec_id = g->o.codec,
                  .jobs = g->jobs, .n_jobs = g->n_jobs, .pool = g->pool,
                  .codec = g->pool_codec, .threads = T, .backend = &g->backend, .err = g->err, .errlen = sizeof g->err};
    const int rc = ingest_pipe_run(&p);
    g->n_passes += p.n_passes;
    g->n_pass_docs += p.n_pass_docs;
    g->t_dev_finish += p.dev_finish;
    g->t_dev_wait += p.dev_wait;
    if (rc) return -1;
    const double wall = lz_now_s() - t0;
    g->t_encode += wall;
    g->t_forward += p.fwd + p.pack > 0 ? wall * p.fwd / (p.fwd + p.pack) : 0;
    g->t_pack += p.fwd + p.pack > 0 ? wall * p.pack / (p.fwd + p.pack) : 0;
    return ingest_queue_jobs(g);
}
