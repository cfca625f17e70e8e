/* ingest_batch.c - lazyingest's batches (ingest/ingest_run.h): the documents
 * of a batch encoded, one at a time or queued for ingest_jobs.c (in
 * parallel), their payloads written to LMDB on a thread while the next batch
 * is encoded, their rows committed to SQLite after (payload first, row
 * second: a stopped run leaves payloads without rows at worst, which the next
 * run's gc removes); progress lines. */
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ingest/ingest_run.h"

void ingest_warnf(const ingest *g, const char *fmt, ...)
{
    if (g->progress) fputs("\r\033[K", stderr);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int ingest_push_ptr(char ***v, int *n, int *cap, const char *s)
{
    if (*n == *cap) {
        int c = *cap ? *cap * 2 : 64;
        char **p = realloc(*v, sizeof *p * (size_t)c);
        if (!p) return -1;
        *v = p;
        *cap = c;
    }
    if (!((*v)[*n] = strdup(s))) return -1;
    (*n)++;
    return 0;
}

void ingest_pend_doc_free(pend_doc *d)
{
    free(d->ext_id);
    free(d->source_id);
    free(d->title);
    free(d->text);
    free(d->ids);
}

/* Frees the batch arrays' contents (the arrays stay for the next batch). */
static void arrays_clear(ingest *g)
{
    for (int i = 0; i < g->n_docs; i++) ingest_pend_doc_free(&g->docs[i]);
    for (int i = 0; i < g->n_pay; i++) free(g->pay[i].blob);
    for (int i = 0; i < g->n_src; i++) free(g->sources[i]);
    for (int i = 0; i < g->n_keep; i++) free(g->keep_sources[i]);
    g->n_docs = g->n_pay = g->n_src = g->n_keep = 0;
}

/* Exchanges the ingest's batch arrays with b's. */
static void arrays_swap(ingest *g, batch_arrays *b)
{
    batch_arrays t = *b;
    *b = (batch_arrays){g->docs, g->n_docs, g->cap_docs, g->pay, g->n_pay, g->cap_pay, g->sources, g->n_src, g->cap_src,
                        g->keep_sources, g->n_keep, g->cap_keep};
    g->docs = t.docs, g->n_docs = t.n_docs, g->cap_docs = t.cap_docs;
    g->pay = t.pay, g->n_pay = t.n_pay, g->cap_pay = t.cap_pay;
    g->sources = t.sources, g->n_src = t.n_src, g->cap_src = t.cap_src;
    g->keep_sources = t.keep_sources, g->n_keep = t.n_keep, g->cap_keep = t.cap_keep;
}

static void batch_clear(ingest *g)
{
    arrays_clear(g);
    for (int i = 0; i < g->n_jobs; i++) free(g->jobs[i].blob);
    g->n_jobs = 0;
    g->batch_tokens = 0;
}

void ingest_batch_free(ingest *g)
{
    batch_clear(g);
    free(g->docs);
    free(g->pay);
    free(g->sources);
    free(g->keep_sources);
    free(g->jobs);
    arrays_swap(g, &g->held); /* the held batch's arrays (emptied by its commit) */
    arrays_clear(g);
    free(g->docs);
    free(g->pay);
    free(g->sources);
    free(g->keep_sources);
}

/* The KV eviction of an n-token document under this run's policy: its
 * effective spec ("" when stored whole) and keys stored. */
int64_t ingest_doc_kv(const ingest *g, int n, char spec[LZ_KVPOLICY_SPEC_MAX])
{
    lz_kvpolicy_doc_spec(&g->o.kv, n, spec, LZ_KVPOLICY_SPEC_MAX);
    int B = lz_kvpolicy_budget(&g->o.kv, n);
    return (int64_t)g->m->cfg.n_layers * g->m->cfg.n_kv_heads * (B > 0 ? B : n);
}


/* Row columns of a spec (kv_policy, kv_budget, kv_window read back from it). */
static void set_kv_fields(const ingest *g, lz_meta_doc *d, const char *spec, int64_t kept)
{
    lz_kvpolicy p;
    (void)g;
    snprintf(d->kv_spec, sizeof d->kv_spec, "%s", spec);
    d->kv_kept = kept;
    if (!spec[0] || lz_kvpolicy_parse_spec(spec, &p)) return;
    snprintf(d->kv_policy, sizeof d->kv_policy, "%s", lz_kvpolicy_name(p.kind));
    lz_kvpolicy_budget_str(&p, d->kv_budget, sizeof d->kv_budget);
    d->kv_window = p.window;
}

/* Commits a batch: payloads first (one durable LMDB transaction), then every
 * row in one SQLite transaction; counts only what committed. The payloads of
 * batch k are written on a thread while batch k + 1 is encoded, and batch
 * k's rows are committed at batch k + 1's commit (commit_held), once the
 * payloads are durable: a killed run leaves payloads without rows at worst,
 * which the next run's gc removes. */
static int commit_rows(ingest *g);

static void *write_payloads(void *p)
{
    pay_writer *w = p;
    w->rc = w->fixed ? lz_store_put_payloads_fixed(w->s, w->pay, w->n, w->err, sizeof w->err)
                     : lz_store_put_payloads(w->s, w->pay, w->n, w->err, sizeof w->err);
    return NULL;
}

/* The held batch: waits for its payloads, then commits its rows. 0 or -1. */
static int commit_held(ingest *g)
{
    if (!g->held_pending) return 0;
    if (g->writing) pthread_join(g->wthread, NULL);
    g->writing = g->held_pending = 0;
    int rc = g->wjob.rc;
    if (rc == LZ_EFULL) /* the room reserved was not enough: grow the map now, on this thread */
        rc = lz_store_put_payloads(g->s, g->held.pay, g->held.n_pay, g->wjob.err, sizeof g->wjob.err);
    arrays_swap(g, &g->held); /* the held batch in the ingest's fields */
    if (rc) snprintf(g->err, sizeof g->err, "%s", g->wjob.err);
    else rc = commit_rows(g);
    arrays_clear(g);
    arrays_swap(g, &g->held);
    return rc ? -1 : 0;
}

/* Hands the batch just encoded to the payload writer (a thread; this one when
 * --sync-commit or no thread starts) and starts a new batch. */
static int start_commit(ingest *g)
{
    if (!g->n_docs && !g->n_src && !g->n_keep) return 0;
    if (!g->sync_commit && lz_store_reserve_payloads(g->s, g->pay, g->n_pay, g->err, sizeof g->err)) return -1;
    arrays_swap(g, &g->held); /* held: this batch; the ingest: the held batch's emptied arrays */
    g->batch_tokens = 0;
    g->held_pending = 1;
    g->wjob = (pay_writer){.s = g->s, .pay = g->held.pay, .n = g->held.n_pay, .fixed = !g->sync_commit};
    if (!g->sync_commit && g->held.n_pay > 0 && pthread_create(&g->wthread, NULL, write_payloads, &g->wjob) == 0) {
        g->writing = 1;
    } else {
        g->wjob.fixed = 0;
        write_payloads(&g->wjob);
    }
    return 0;
}

int ingest_flush(ingest *g)
{
    if (ingest_run_jobs(g)) return -1; /* par: the batch's documents, encoded now */
    double t = lz_now_s();
    int rc = commit_held(g); /* the batch before: its payloads were written meanwhile */
    if (!rc) rc = start_commit(g);
    if (!rc && g->sync_commit) rc = commit_held(g);
    g->t_commit += lz_now_s() - t;
    return rc;
}

/* The last batch's rows (after the last flush, or when a run stops). */
int ingest_finish_commits(ingest *g)
{
    double t = lz_now_s();
    int rc = commit_held(g);
    g->t_commit += lz_now_s() - t;
    return rc;
}

static int commit_rows(ingest *g)
{
    if (!g->n_docs && !g->n_src && !g->n_keep) return 0;
    lz_meta_run_counts add = { 0 };
    int rc = lz_store_begin(g->s, g->err, sizeof g->err);
    for (int i = 0; !rc && i < g->n_docs; i++) {
        pend_doc *p = &g->docs[i];
        if (p->kind == K_UNCHANGED) {
            rc = lz_store_doc_touch(g->s, p->row_id, g->run, g->err, sizeof g->err);
            add.n_unchanged++;
            continue;
        }
        lz_meta_doc d = { 0 };
        d.id = p->row_id;
        d.ext_id = p->ext_id;
        d.source_id = p->source_id;
        d.passage = p->passage;
        d.title = p->title;
        d.text = p->text;
        memcpy(d.content_hash, p->content_hash, 32);
        d.token_ids = p->ids;
        d.n_tokens = p->n_tokens;
        d.model_id = g->model_id;
        memcpy(d.payload_key, p->key, LZ_META_KEY_LEN);
        d.raw_bytes = p->raw_bytes;
        d.stored_bytes = p->stored_bytes;
        d.seen_run = g->run;
        d.has_source_hash = p->has_source_hash;
        memcpy(d.source_hash, p->source_hash, 32);
        set_kv_fields(g, &d, p->kv_spec, p->kv_kept);
        if (p->kind == K_ADDED) {
            rc = lz_store_doc_insert(g->s, &d, g->err, sizeof g->err);
            add.n_added++;
        } else {
            rc = lz_store_doc_update(g->s, &d, g->err, sizeof g->err);
            if (p->kind == K_REHASH) add.n_unchanged++;
            else add.n_updated++;
        }
    }
    for (int i = 0; !rc && i < g->n_src; i++) {
        int64_t n = 0;
        rc = lz_store_source_prune(g->s, g->sources[i], g->run, &n, g->err, sizeof g->err);
        add.n_removed += n;
    }
    for (int i = 0; !rc && i < g->n_keep; i++)
        rc = lz_store_source_touch(g->s, g->keep_sources[i], g->run, g->err, sizeof g->err);
    if (!rc) rc = lz_store_commit(g->s, g->err, sizeof g->err);
    if (rc) {
        lz_store_rollback(g->s);
        return -1;
    }
    g->c.n_added += add.n_added;
    g->c.n_updated += add.n_updated;
    g->c.n_unchanged += add.n_unchanged;
    g->c.n_removed += add.n_removed;
    for (int i = 0; i < g->n_pay; i++) g->c.stored_bytes += (int64_t)g->pay[i].len;
    return 0;
}

void ingest_progress(ingest *g, int force)
{
    if (!g->progress) return;
    double t = lz_now_s();
    if (!force && t - g->last_progress < 0.25) return;
    g->last_progress = t;
    double el = t - g->t0, rate = g->t_encode > 0 ? g->c.n_tokens / g->t_encode : 0;
    double frac = g->n_records_total ? (double)g->n_records_done / g->n_records_total : 0;
    double eta = frac > 0.001 ? el / frac - el : 0;
    fprintf(stderr, "\r\033[K%lld/%lld documents  %lld tokens encoded  %.0f tok/s  ETA %d:%02d",
            (long long)g->n_records_done, (long long)g->n_records_total, (long long)g->c.n_tokens, rate,
            (int)eta / 60, (int)eta % 60);
    if (g->n_eng > 1) { /* the pipelines' balance: tokens each (the first 8) */
        fputs("  pipelines", stderr);
        for (int i = 0; i < g->n_eng && i < 8; i++) fprintf(stderr, " %.1fk", g->eng[i].n_tokens / 1e3);
        if (g->n_eng > 8) fputs(" ...", stderr);
    }
}

/* Uncompressed payload body bytes of n tokens: K and V, every layer and head. */
int64_t ingest_raw_bytes(const ingest *g, int n)
{
    const int dt = lz_store_kv_dtype(g->s);
    int64_t es = dt == LZ_PAYLOAD_DTYPE_F32 ? 4 : dt == LZ_PAYLOAD_DTYPE_FP8 ? 1 : 2;
    return 2 * es * g->m->cfg.n_layers * g->m->cfg.n_kv_heads * (int64_t)n * g->m->cfg.head_dim;
}

/* Queues batch document d's new payload (the batch owns blob from here on,
 * freed on failure too) and counts its tokens, bytes and kept keys. */
int ingest_queue_payload(ingest *g, pend_doc *d, void *blob, size_t len)
{
    if (g->n_pay == g->cap_pay) {
        int cap = g->cap_pay ? g->cap_pay * 2 : 64;
        lz_store_payload *p = realloc(g->pay, sizeof *p * (size_t)cap);
        if (!p) {
            free(blob);
            snprintf(g->err, sizeof g->err, "out of memory");
            return -1;
        }
        g->pay = p;
        g->cap_pay = cap;
    }
    lz_store_payload *p = &g->pay[g->n_pay++];
    memcpy(p->key, d->key, LZ_META_KEY_LEN);
    p->blob = blob;
    p->len = len;
    d->stored_bytes = (int64_t)len;
    char spec[LZ_KVPOLICY_SPEC_MAX];
    g->c.n_tokens += d->n_tokens;
    g->n_encoded++;
    g->c.raw_bytes += d->raw_bytes;
    g->kv_kept += ingest_doc_kv(g, d->n_tokens, spec);
    g->kv_full += (int64_t)g->m->cfg.n_layers * g->m->cfg.n_kv_heads * d->n_tokens;
    return 0;
}

/* Encodes batch document di (unless a payload with its key already exists,
 * in the store or in this batch) and queues the payload; sets its raw and
 * stored sizes. With par, queues an encoding job instead (ingest_run_jobs). */
int ingest_encode_doc(ingest *g, int di)
{
    pend_doc *d = &g->docs[di];
    const int *ids = d->ids, n = d->n_tokens;
    const uint8_t *key = d->key;
    int64_t *raw = &d->raw_bytes, *stored = &d->stored_bytes;
    char spec[LZ_KVPOLICY_SPEC_MAX];
    int64_t kept = ingest_doc_kv(g, n, spec), full = (int64_t)g->m->cfg.n_layers * g->m->cfg.n_kv_heads * n;
    int64_t raw_size = full ? ingest_raw_bytes(g, n) / full * kept : 0;
    *raw = raw_size;
    for (int i = 0; i < g->n_pay; i++)
        if (memcmp(g->pay[i].key, key, LZ_META_KEY_LEN) == 0) {
            *stored = (int64_t)g->pay[i].len;
            return 0;
        }
    for (int i = 0; g->held_pending && i < g->held.n_pay; i++) /* the batch before, being written */
        if (memcmp(g->held.pay[i].key, key, LZ_META_KEY_LEN) == 0) {
            *stored = (int64_t)g->held.pay[i].len;
            return 0;
        }
    void *blob = NULL;
    size_t len = 0;
    int alias = -1;
    for (int j = 0; g->par && j < g->n_jobs && alias < 0; j++)
        if (g->jobs[j].alias < 0 && memcmp(g->docs[g->jobs[j].doc].key, key, LZ_META_KEY_LEN) == 0) alias = j;
    int have = alias >= 0 ? 0 : lz_store_has_payload(g->s, key, &len, g->err, sizeof g->err);
    if (have < 0) return -1;
    if (have) { /* shared with an identical document, or left by an interrupted run */
        *stored = (int64_t)len;
        return 0;
    }
    if (g->par) { /* encoded with the batch's other documents at the commit */
        if (g->n_jobs == g->cap_jobs) {
            int cap = g->cap_jobs ? g->cap_jobs * 2 : 64;
            enc_job *j = realloc(g->jobs, sizeof *j * (size_t)cap);
            if (!j) {
                snprintf(g->err, sizeof g->err, "out of memory");
                return -1;
            }
            g->jobs = j;
            g->cap_jobs = cap;
        }
        g->jobs[g->n_jobs++] = (enc_job){.doc = di, .alias = alias};
        if (alias < 0) g->batch_tokens += n;
        return 0;
    }
    double t = lz_now_s();
    if (lz_encoder_run(g->enc, ids, n, g->err, sizeof g->err)) return -1;
    double t1 = lz_now_s();
    if (lz_encoder_pack(g->enc, 1, g->codec, g->o.codec, g->o.level, &blob, &len, g->err,
                        sizeof g->err))
        return -1;
    double t2 = lz_now_s();
    g->t_forward += t1 - t;
    g->t_pack += t2 - t1;
    g->t_encode += t2 - t;
    if (ingest_queue_payload(g, d, blob, len)) return -1;
    g->batch_tokens += n;
    return 0;
}

/* The encoder settings of this run (store element type, policy, scorer,
 * probe cue, calibration) on e. */
void ingest_setup_encoder(ingest *g, lz_encoder *e)
{
    lz_encoder_set_dtype(e, lz_store_kv_dtype(g->s));
    if (g->o.learned) lz_encoder_set_scorer(e, &g->scorer);
    if (g->learn) lz_encoder_set_learn(e, g->learn);
    lz_encoder_set_kvpolicy(e, &g->o.kv);
}

