/* ingest_report.c - lazyingest's reports (ingest/ingest_run.h): the issues
 * --check finds (printed, and copied for --repair, which re-encodes each
 * affected document from its stored token ids the way it was encoded, or
 * removes the row when that cannot be done; damaged LMDB pages are
 * lazyingest.c's to rebuild first), and the run's summary (text lines or one
 * JSON object). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "ingest/ingest_run.h"

static const char *issue_name(int kind)
{
    switch (kind) {
    case LZ_STORE_ISSUE_MISSING: return "missing payload";
    case LZ_STORE_ISSUE_CORRUPT: return "corrupt payload";
    case LZ_STORE_ISSUE_WRONG_MODEL: return "wrong model";
    case LZ_STORE_ISSUE_MISMATCH: return "payload does not match the row";
    case LZ_STORE_ISSUE_BAD_ROW: return "unusable row";
    case LZ_STORE_ISSUE_KV_DAMAGED: return "damaged LMDB pages";
    case LZ_STORE_ISSUE_MISPLACED: return "misplaced document";
    case LZ_STORE_ISSUE_SHARD: return "incomplete set";
    default: return "?";
    }
}

int ingest_on_issue(const lz_store_issue *is, void *ctx)
{
    issue_list *l = ctx;
    if (!l->silent && (!l->g->o.quiet || !l->g->o.repair)) {
        if (is->kind == LZ_STORE_ISSUE_SHARD) /* a shard as a whole: no document to name */
            ingest_warnf(l->g, "check: %s: %s: %s", is->ext_id, issue_name(is->kind), is->message);
        else
            ingest_warnf(l->g, "check: document '%s' (row %lld): %s: %s", is->ext_id, (long long)is->doc_id,
                         issue_name(is->kind), is->message);
    }
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        issue_copy *v = realloc(l->v, sizeof *v * (size_t)cap);
        if (!v) return 1;
        l->v = v;
        l->cap = cap;
    }
    issue_copy *c = &l->v[l->n++];
    c->doc_id = is->doc_id;
    c->ext_id = strdup(is->ext_id);
    c->kind = is->kind;
    c->n = is->n_tokens;
    snprintf(c->kv_spec, sizeof c->kv_spec, "%s", is->kv_spec ? is->kv_spec : "");
    c->ids = NULL;
    if (is->token_ids) {
        c->ids = malloc(sizeof(int) * (size_t)(is->n_tokens ? is->n_tokens : 1));
        if (c->ids) memcpy(c->ids, is->token_ids, sizeof(int) * (size_t)is->n_tokens);
    }
    return 0;
}

void ingest_issues_free(issue_list *l)
{
    for (int i = 0; i < l->n; i++) {
        free(l->v[i].ext_id);
        free(l->v[i].ids);
    }
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

/* Re-encodes broken payloads from the rows' token ids; removes rows that
 * cannot be re-encoded. */
int ingest_repair(ingest *g, issue_list *l, int64_t *n_fixed, int64_t *n_removed)
{
    *n_fixed = *n_removed = 0;
    for (int i = 0; i < l->n; i++) {
        issue_copy *c = &l->v[i];
        if (c->kind == LZ_STORE_ISSUE_KV_DAMAGED) continue; /* the database itself: lazyingest.c rebuilds it first */
        if (c->kind == LZ_STORE_ISSUE_MISPLACED || c->kind == LZ_STORE_ISSUE_SHARD) continue; /* a set's: re-ingest (--prune) */
        if (c->doc_id == 0) { /* the prefix */
            lz_store_payload p;
            lz_store_prefix_key(g->m->fingerprint, g->prefix, g->n_prefix, p.key);
            if (lz_encoder_pack(g->enc, 0, g->codec, g->o.codec, g->o.level, &p.blob, &p.len,
                                g->err, sizeof g->err))
                return -1;
            int rc = lz_store_put_payloads(g->s, &p, 1, g->err, sizeof g->err);
            free(p.blob);
            if (rc) return -1;
            (*n_fixed)++;
            continue;
        }
        int bad_ids = !c->ids || c->kind == LZ_STORE_ISSUE_BAD_ROW;
        for (int j = 0; !bad_ids && j < c->n; j++) bad_ids = c->ids[j] < 0 || c->ids[j] >= g->m->cfg.vocab;
        if (bad_ids || c->kind == LZ_STORE_ISSUE_WRONG_MODEL) {
            /* rows of another model or with unusable tokens: removed (re-ingest re-adds them) */
            if (lz_store_doc_delete(g->s, c->doc_id, g->err, sizeof g->err)) return -1;
            ingest_warnf(g, "repair: removed document '%s' (%s); ingest its corpus again to restore it", c->ext_id,
                  issue_name(c->kind));
            (*n_removed)++;
            continue;
        }
        lz_store_payload p;
        lz_kvpolicy kp; /* re-encode under the row's own policy, so its key stays valid */
        if (lz_kvpolicy_parse_spec(c->kv_spec, &kp) || (kp.kind && lz_kvpolicy_budget(&kp, c->n) <= 0))
            lz_kvpolicy_default(&kp), c->kv_spec[0] = 0;
        if (kp.probe == LZ_KVPOLICY_PROBE_CUE && kp.probe_text != g->o.kv.probe_text) {
            /* the probe question is not stored, only its hash: re-encoding with
             * another one would store keys chosen by a different score */
            ingest_warnf(g, "repair: document '%s' was compressed with probe question %08x; run --repair with the "
                  "same --kv-probe-text (left as it is)", c->ext_id, (unsigned)kp.probe_text);
            continue;
        }
        if (kp.probe == LZ_KVPOLICY_PROBE_LEARNED && kp.scorer_hash != g->o.kv.scorer_hash) {
            ingest_warnf(g, "repair: document '%s' was compressed with key-importance model %08x; run --repair with the "
                  "same --kv-learned FILE (left as it is)", c->ext_id, (unsigned)kp.scorer_hash);
            continue;
        }
        lz_store_doc_key_kv(g->m->fingerprint, g->prefix, g->n_prefix, c->ids, c->n, c->kv_spec, p.key);
        lz_encoder_set_kvpolicy(g->enc, &kp);
        int erc = lz_encoder_run(g->enc, c->ids, c->n, g->err, sizeof g->err) ||
                  lz_encoder_pack(g->enc, 1, g->codec, g->o.codec, g->o.level, &p.blob, &p.len,
                                  g->err, sizeof g->err);
        lz_encoder_set_kvpolicy(g->enc, &g->o.kv);
        if (erc) return -1;
        int B = lz_kvpolicy_budget(&kp, c->n);
        int64_t raw = B > 0 ? ingest_raw_bytes(g, c->n) / c->n * B : ingest_raw_bytes(g, c->n);
        int rc = lz_store_put_payloads(g->s, &p, 1, g->err, sizeof g->err);
        if (!rc) {
            rc = lz_store_doc_set_payload(g->s, c->doc_id, p.key, raw, (int64_t)p.len, g->err, sizeof g->err);
        }
        free(p.blob);
        if (rc) return -1;
        ingest_warnf(g, "repair: re-encoded document '%s' (%d tokens)", c->ext_id, c->n);
        (*n_fixed)++;
    }
    return 0;
}

/* ---- summary ---- */

/* Scoring and selection time of every encoder (par: the thread's own; summed, so CPU time). */
/* Documents the encoders handed to the backend (--gpu; the reference: what 0), those scored
 * from the backend's attention masses (1), or packed from its planes (2). */
static long backend_docs_of(const ingest *g, int what)
{
    long n = 0;
    for (int i = 0; i < (g->n_pool > 0 ? g->n_pool : 1); i++) {
        const lz_encoder *e = i ? g->pool[i] : g->enc;
        if (e) n += what == 1 ? lz_encoder_mass_docs(e) : what == 2 ? lz_encoder_plane_docs(e) : lz_encoder_backend_docs(e);
    }
    for (int i = 0; i < g->n_eng; i++) /* N pipelines: their own encoders */
        for (int t = 0; g->eng[i].pool && t < g->eng[i].threads; t++) {
            const lz_encoder *e = g->eng[i].pool[t];
            if (e) n += what == 1 ? lz_encoder_mass_docs(e) : what == 2 ? lz_encoder_plane_docs(e) : lz_encoder_backend_docs(e);
        }
    return n;
}
static long backend_docs(const ingest *g) { return backend_docs_of(g, 0); }

static double policy_seconds(const ingest *g)
{
    double t = g->enc ? lz_encoder_policy_seconds(g->enc) : 0.0;
    for (int i = 1; i < g->n_pool; i++) t += lz_encoder_policy_seconds(g->pool[i]);
    for (int i = 0; i < g->n_eng; i++)
        for (int k = 0; g->eng[i].pool && k < g->eng[i].threads; k++)
            if (g->eng[i].pool[k]) t += lz_encoder_policy_seconds(g->eng[i].pool[k]);
    return t;
}

/* Encoders working side by side: the single pipeline's pool, or every pipeline's. */
static int n_encoders(const ingest *g)
{
    int n = 0;
    for (int i = 0; i < g->n_eng; i++) n += g->eng[i].threads;
    return g->n_eng ? n : g->par ? (g->n_pool > 0 ? g->n_pool : 1) : 1;
}

/* Pipeline i's figures (with one pipeline: the run's). */
typedef struct {
    char name[32];
    int64_t docs, tokens;
    double forward, pack, busy;
    long passes;
    int threads;
} pipe_figures;

static pipe_figures pipe_of(const ingest *g, int i)
{
    pipe_figures f = { "", 0, 0, 0, 0, 0, 0, 0 };
    ingest_engine_name(g, i, f.name, sizeof f.name);
    if (g->n_eng > 1) {
        const ingest_engine *e = &g->eng[i];
        f.docs = e->n_docs, f.tokens = e->n_tokens, f.forward = e->t_forward, f.pack = e->t_pack, f.busy = e->t_busy;
        f.passes = e->n_passes, f.threads = e->threads;
    } else {
        if (g->o.n_devs > 0) snprintf(f.name, sizeof f.name, "GPU %d", g->o.devs[0]);
        f.docs = g->n_encoded, f.tokens = g->c.n_tokens, f.forward = g->t_forward, f.pack = g->t_pack, f.busy = g->t_encode;
        f.passes = g->n_passes, f.threads = n_encoders(g);
    }
    return f;
}

/* Each pipeline's figures as flat arrays, one entry a pipeline (one with one pipeline), so a
 * run over several GPUs shows its balance and the summary stays one flat object of scalars and
 * arrays: pipeline_devices, _documents, _tokens, _forward_s, _pack_s, _busy_s, _passes, _threads. */
static void pipelines_json(json_t *j, const ingest *g)
{
    static const char *const keys[] = { "pipeline_devices", "pipeline_documents", "pipeline_tokens", "pipeline_forward_s",
                                        "pipeline_pack_s", "pipeline_busy_s", "pipeline_passes", "pipeline_threads" };
    json_t *a[8];
    for (int k = 0; k < 8; k++) a[k] = json_array();
    for (int i = 0; i < (g->n_eng > 1 ? g->n_eng : 1); i++) {
        const pipe_figures f = pipe_of(g, i);
        json_array_append_new(a[0], json_string(f.name));
        json_array_append_new(a[1], json_integer(f.docs));
        json_array_append_new(a[2], json_integer(f.tokens));
        json_array_append_new(a[3], json_real(f.forward));
        json_array_append_new(a[4], json_real(f.pack));
        json_array_append_new(a[5], json_real(f.busy));
        json_array_append_new(a[6], json_integer(f.passes));
        json_array_append_new(a[7], json_integer(f.threads));
    }
    json_object_set_new(j, "pipelines", json_integer(g->n_eng > 1 ? g->n_eng : 1));
    for (int k = 0; k < 8; k++) json_object_set_new(j, keys[k], a[k]);
}

void ingest_summary(ingest *g, const char *status, int64_t n_docs_total, const lz_store_gc_stats *gc,
                    const lz_store_check_stats *cs, int64_t fixed, int64_t removed_by_repair, int did_ingest,
                    int did_check)
{
    double wall = lz_now_s() - g->t0;
    double ratio = g->c.stored_bytes ? (double)g->c.raw_bytes / (double)g->c.stored_bytes : 0;
    double tps = g->t_encode > 0 ? g->c.n_tokens / g->t_encode : 0;
    if (g->o.json) {
        json_t *j = json_object();
        json_object_set_new(j, "status", json_string(status));
        json_object_set_new(j, "store", json_string(g->o.store));
        if (g->n_shards) { /* one shard's run of a sharded store */
            json_object_set_new(j, "shard", json_integer(g->shard));
            json_object_set_new(j, "shards", json_integer(g->n_shards));
        }
        if (did_ingest) {
            json_object_set_new(j, "corpus", json_string(g->o.corpus));
            if (g->corpus_format) json_object_set_new(j, "corpus_format", json_string(g->corpus_format));
            json_object_set_new(j, "run", json_integer(g->run));
            json_object_set_new(j, "added", json_integer(g->c.n_added));
            json_object_set_new(j, "updated", json_integer(g->c.n_updated));
            json_object_set_new(j, "unchanged", json_integer(g->c.n_unchanged));
            json_object_set_new(j, "removed", json_integer(g->c.n_removed));
            json_object_set_new(j, "skipped", json_integer(g->c.n_skipped));
            json_object_set_new(j, "duplicates", json_integer(g->n_dupes));
            json_object_set_new(j, "corpus_tokens", json_integer(g->n_corpus_tokens));
            json_object_set_new(j, "tokens_encoded", json_integer(g->c.n_tokens));
            json_object_set_new(j, "tokens_per_s", json_real(tps));
            json_object_set_new(j, "raw_bytes", json_integer(g->c.raw_bytes));
            json_object_set_new(j, "stored_bytes", json_integer(g->c.stored_bytes));
            json_object_set_new(j, "compression_ratio", json_real(ratio));
            static const char *const codecs[] = INGEST_CODEC_NAMES;
            json_object_set_new(j, "codec", json_string(codecs[g->o.codec]));
            char spec[LZ_KVPOLICY_SPEC_MAX];
            lz_kvpolicy_spec(&g->o.kv, spec, sizeof spec);
            json_object_set_new(j, "kv_policy", json_string(spec[0] ? spec : "none"));
            json_object_set_new(j, "kv_kept_fraction", json_real(g->kv_full ? (double)g->kv_kept / g->kv_full : 1.0));
            json_object_set_new(j, "encode_s", json_real(g->t_encode));
            json_object_set_new(j, "load_s", json_real(g->t_load));
            json_object_set_new(j, "encoders", json_integer(n_encoders(g)));
            json_object_set_new(j, "documents_encoded", json_integer(g->n_encoded));
            pipelines_json(j, g);
            json_object_set_new(j, "backend_docs", json_integer(backend_docs(g)));
            json_object_set_new(j, "passes", json_integer(g->n_passes));
            json_object_set_new(j, "pass_docs", json_integer(g->n_pass_docs));
            json_object_set_new(j, "backend_masses", json_integer(backend_docs_of(g, 1)));
            json_object_set_new(j, "backend_planes", json_integer(backend_docs_of(g, 2)));
            json_object_set_new(j, "setup_s", json_real(g->t_setup));
            json_object_set_new(j, "forward_s", json_real(g->t_forward));
            json_object_set_new(j, "pack_s", json_real(g->t_pack));
            json_object_set_new(j, "commit_s", json_real(g->t_commit));
            json_object_set_new(j, "device_finish_s", json_real(g->t_dev_finish));
            json_object_set_new(j, "device_wait_fetch_s", json_real(g->t_dev_wait));
            json_object_set_new(j, "kv_policy_s", json_real(policy_seconds(g)));
        }
        if (did_check) {
            json_object_set_new(j, "checked", json_integer(cs->n_docs));
            json_object_set_new(j, "check_ok", json_integer(cs->n_ok));
            json_object_set_new(j, "check_issues", json_integer(cs->n_issues));
            json_object_set_new(j, "repaired", json_integer(fixed));
            json_object_set_new(j, "removed_by_repair", json_integer(removed_by_repair));
            json_object_set_new(j, "unreferenced_payloads", json_integer(cs->n_unreferenced));
            json_object_set_new(j, "kv_damaged", json_boolean(cs->kv_damaged));
        }
        if (did_ingest) json_object_set_new(j, "payloads_restored", json_integer(g->n_restored));
        json_object_set_new(j, "payloads_rebuilt", json_boolean(g->rebuilt || (gc && gc->rebuilt)));
        json_object_set_new(j, "documents", json_integer(n_docs_total));
        json_object_set_new(j, "payloads_collected", json_integer(gc ? gc->n_removed : 0));
        json_object_set_new(j, "bytes_collected", json_integer(gc ? gc->bytes_removed : 0));
        json_object_set_new(j, "wall_s", json_real(wall));
        char *s = json_dumps(j, JSON_COMPACT);
        if (s) puts(s);
        free(s);
        json_decref(j);
        return;
    }
    if (g->o.quiet) return;
    if (did_ingest)
        printf("lazyingest: %s -> %s: %lld added, %lld updated, %lld unchanged, %lld removed, %lld skipped"
               " (%lld duplicate ids)\n"
               "  tokens: %lld in corpus, %lld encoded (%.0f tok/s)\n"
               "  payloads written: %.2f MB raw, %.2f MB stored (%.2fx)\n",
               g->o.corpus, g->o.store, (long long)g->c.n_added, (long long)g->c.n_updated,
               (long long)g->c.n_unchanged, (long long)g->c.n_removed, (long long)g->c.n_skipped,
               (long long)g->n_dupes, (long long)g->n_corpus_tokens, (long long)g->c.n_tokens, tps,
               g->c.raw_bytes / 1e6, g->c.stored_bytes / 1e6, ratio);
    if (did_ingest)
        printf("  time: model load %.2f s, store and prefix %.2f s, forward passes %.2f s, packing %.2f s, commits %.2f s%s\n",
               g->t_load, g->t_setup - g->t_load, g->t_forward, g->t_pack, g->t_commit,
               g->par && g->n_pool > 1 ? " (documents encoded in parallel)" : "");
    for (int i = 0; did_ingest && g->n_eng > 1 && i < g->n_eng; i++) {
        const pipe_figures f = pipe_of(g, i);
        printf("  pipeline %d (%s, %d thread%s): %lld documents, %lld tokens (%.1f%%), forward %.2f s, packing %.2f s, "
               "busy %.2f s of %.2f s\n", i, f.name, f.threads, f.threads == 1 ? "" : "s", (long long)f.docs, (long long)f.tokens,
               g->c.n_tokens ? 100.0 * f.tokens / g->c.n_tokens : 0.0, f.forward, f.pack, f.busy, g->t_engines);
    }
    if (did_ingest && g->o.gpu && g->enc)
        printf("  GPU: %ld of the encoded documents, %ld in %ld multi-document passes (the rest are longer or have a "
               "probe: CPU); the passes' driver %.2f s waiting for a pass to compute and be read back, %.2f s for the "
               "pass before to be fetched (the device idle)\n",
               backend_docs(g), g->n_pass_docs, g->n_passes, g->t_dev_finish, g->t_dev_wait);
    if (did_ingest && g->o.kv.kind != LZ_KVPOLICY_NONE) {
        char spec[LZ_KVPOLICY_SPEC_MAX];
        lz_kvpolicy_spec(&g->o.kv, spec, sizeof spec);
        double tp = policy_seconds(g);
        printf("  kv eviction %s: %.1f%% of the encoded keys kept; scoring %.3f s (%.1f%% of encoding)\n", spec,
               g->kv_full ? 100.0 * g->kv_kept / g->kv_full : 100.0, tp,
               g->t_encode > tp ? 100.0 * tp / (g->t_encode - tp) : 0.0);
    }
    if (did_ingest && g->n_restored)
        printf("  restored: %lld unchanged documents had lost their payload: encoded again\n", (long long)g->n_restored);
    if (g->rebuilt || (gc && gc->rebuilt))
        printf("  the payload database was damaged: rebuilt from its intact pages\n");
    if (did_check)
        printf("  check: %lld documents, %lld ok, %lld problems; %lld repaired, %lld removed; "
               "%lld unreferenced payloads\n",
               (long long)cs->n_docs, (long long)cs->n_ok, (long long)cs->n_issues, (long long)fixed,
               (long long)removed_by_repair, (long long)cs->n_unreferenced);
    printf("  store: %lld documents; gc removed %lld payloads (%.2f MB); %s in %.2f s\n", (long long)n_docs_total,
           (long long)(gc ? gc->n_removed : 0), gc ? gc->bytes_removed / 1e6 : 0.0, status, wall);
}
