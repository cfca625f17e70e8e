/* lazyingest.c - encodes a corpus once into a store: every document's KV
 * (after the shared prompt prefix, keys at local positions) as a
 * content-addressed payload in LMDB, its row and full-text index in SQLite.
 * Re-runs encode only what changed; --prune, --gc, --check and --repair keep
 * a nightly re-indexed store consistent. This file: the options, the model
 * and store, the pass over the corpus, main. The tool's other pieces:
 * ingest/ingest_run.h (the run's state; ingest_record.c, ingest_batch.c,
 * ingest_jobs.c, ingest_engines.c, ingest_gpus.c: --gpu's engines, ingest_report.c).
 * Library pieces: ingest/corpus.h, ingest/split.h, ingest/encode.h, engine/engine.h, store/store.h,
 * model/prompt.h.
 */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include <pthread.h>
#include <unistd.h>

#include "ingest/ingest_run.h"
#include "ingest/split.h"
#include "model/prompt.h"
#include "base/cli.h"
#include "base/env.h"
#include "base/runtime.h"
#include "base/unicode.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lazyingest [options] corpus.jsonl | corpus.json | corpus.csv | -\n"
            "       lazyingest --check | --repair | --gc [options]\n"
            "       lazyingest --shards N | --shard I/N [options] corpus   (a sharded store)\n"
            "Encodes every document of a corpus once and stores its KV for lazyquery.\n"
            "Input: JSONL, one {\"id\": string|int, \"text\": ..., \"title\": ...} per line; a JSON\n"
            "array of such objects (input starting with '['); or CSV with a header naming id, text\n"
            "(and optionally title). '-' reads standard input. A JSON record with no \"text\" but a\n"
            "\"context\" list of [title, [sentences...]] pairs (HotpotQA) gives one document per pair:\n"
            "id and title = the title, text = the sentences joined; a pair seen before is stored once,\n"
            "a title seen with other text gets the id \"title (2)\" (with a warning).\n"
            "Options take their value as '--opt value' or '--opt=value'; '--' ends the options.\n"
            "  -m, --model PATH       GGUF model (default: $%s, else <repo>/%s)\n"
            "  -s, --store DIR        store folder (default ./lazystore)\n"
            "  -t, --threads N        CPU threads (default: all cores); a small model (width <= 2048)\n"
            "                         encodes one document a thread, a larger one uses them all for\n"
            "                         each document; payloads are the same bytes either way\n"
            "  -q, --quiet            no progress and no summary (errors still printed)\n"
            "      --json             print the summary as JSON on standard output\n"
            "      --batch-tokens N   tokens encoded between commits (default 8192, times the pipelines of\n"
            "                         --gpus or --engines)\n"
            "      --max-doc-tokens N split longer documents into passages id#0, id#1, ...\n"
            "                         at sentence or line boundaries (default 1024)\n"
            "      --level N          zstd level of the payloads, 1..19 (default %d); 1 and 2 look\n"
            "                         only for matches of 7+ bytes (K/V's gain is in the entropy coding)\n"
            "      --codec C          the payloads' codec: shuffle-zstd (default: byte planes, then zstd;\n"
            "                         about 1.5x smaller than raw at bf16), zstd, or raw (stored as\n"
            "                         encoded: the largest store, read at memory speed on a miss); for\n"
            "                         the payloads this run writes (a store may mix them)\n"
            "      --kv-dtype bf16|f32|fp8  element type of a new store's KV payloads (default bf16;\n"
            "                         fixed per store: f32 is exact, twice the size; fp8 is e4m3 with a\n"
            "                         scale per (K or V, layer, kv head), half the size, answers close\n"
            "                         to bf16's: schema/PAYLOAD.md)\n"
            "      --kv-policy P      KV eviction at ingest: none (default), snapkv, ada-snapkv,\n"
            "                         pyramidkv, ada-pyramidkv; only the kept keys and values are stored\n"
            "      --kv-budget B      kept tokens per kv head: a fraction of the document (0.2) or an\n"
            "                         average count (128t); the window counts in it; documents shorter\n"
            "                         than window + budget are stored whole\n"
            "      --kv-window N      observation window: the last N tokens, always kept (default %d)\n"
            "      --kv-kernel K      max-pooling kernel along positions, odd (default %d)\n"
            "      --kv-alpha A       Ada: share of the budget reserved per head (default %g)\n"
            "      --kv-agg mean|max  GQA: aggregate a kv head's query heads (default mean)\n"
            "      --kv-probe         observation window = the prompt's question cue run after the\n"
            "                         document (scored, not stored) instead of the document's tail\n"
            "      --kv-probe-text Q  the same with question Q in the cue (UTF-8, at most 1024 bytes;\n"
            "                         recorded in each document's KV spec as a hash; --repair needs the\n"
            "                         same Q to re-encode such documents)\n"
            "      --kv-reconstruct   observation window = the document itself run again after it\n"
            "                         (KVzip-style: keys scored while the model re-reads the passage;\n"
            "                         one more forward pass over every document)\n"
            "      --kv-self          observation window = every document token's own query as it was\n"
            "                         encoded (H2O-style: a key scores the attention all later tokens\n"
            "                         gave it; no extra forward pass; recorded as 'self')\n"
            "      --kv-value-norm    value-aware scores: a key's attention score times the mean |v| of\n"
            "                         its value row over its layer's mean of that (VATP-style;\n"
            "                         recorded in the KV spec as 'vnorm')\n"
            "      --kv-value-power P value-aware scores with (mean |v|)^P, P in (0, 16] (implies\n"
            "                         --kv-value-norm; recorded as 'vnorm=P')\n"
            "      --kv-learned FILE  scores from a fitted key-importance model (a linear model per\n"
            "                         layer and kv head of the reconstruction score from each key's\n"
            "                         value and unrotated key; no extra forward pass; recorded as\n"
            "                         'learned=<hash>'; --repair needs the same FILE)\n"
            "      --kv-learn-out FILE  with --kv-reconstruct: fit that model on the documents this run\n"
            "                         encodes and write it to FILE (calibration; use a new store)\n"
            "      --kv-scope layer|model  Ada-SnapKV: the joint selection over one layer's kv heads\n"
            "                         (default, as Ada-KV) or over every head of every layer, so layers\n"
            "                         get unequal budgets too (recorded in the KV spec as 'model')\n"
            "      --format jsonl|csv input format when the file name does not tell (JSON input that\n"
            "                         starts with '[' is read as a JSON array either way)\n"
            "      --id-field NAME    the record field (CSV: column) holding the document id (default\n"
            "                         id); --id-field title makes the titles the ids\n"
            "      --prune            remove documents absent from this corpus\n"
            "      --strict           stop at the first bad record (all before it is committed)\n"
            "      --check            verify LMDB's pages and every document's payload (presence,\n"
            "                         checksum, model)\n"
            "      --repair           re-encode or remove what --check finds broken, in one pass (damaged\n"
            "                         LMDB pages: the database is rebuilt from its intact pages first)\n"
            "      --gc               remove payloads no document references (runs also do this)\n"
            "      --shards N         a sharded store of N shards (documents by a hash of their record id,\n"
            "                         each shard its own LMDB, SQLite and writer: --store is the set's\n"
            "                         folder); all N shards are ingested one after the other. A store\n"
            "                         that is sharded already is ingested (checked, ...) shard by shard\n"
            "                         without it; lazyquery and lazyserve open it as one store\n"
            "      --shard I/N        only shard I of N (0 <= I < N): one task of a job array (each task\n"
            "                         its shard, at once; tools/slurm/submit.sh); resumable as any run.\n"
            "                         --check without --shard checks the whole set: each shard, every\n"
            "                         document in one shard (its own), every shard's last run finished\n"
            "      --serial           encode one document at a time whatever the model (the same bytes)\n"
            "      --sync-commit      write a batch's payloads before the next batch is encoded (by\n"
            "                         default they are written on a thread meanwhile, rows after them)\n"
            "      --gpu              encode documents on the GPU (CUDA builds: 'make cuda' makes\n"
            "                         build/cuda/lazyingest): bf16 activations, so payloads differ from\n"
            "                         the CPU's at bf16 level; --kv-probe / --kv-reconstruct stay on the CPU;\n"
            "                         a batch's documents go through in passes of up to 2,048 tokens\n"
            "                         (LAZY_INGEST_GPU_PASS; one read of the weights a pass) while the\n"
            "                         pass before is packed on every core\n"
            "      --gpus LIST        one encoder pipeline per listed GPU of this host (implies --gpu;\n"
            "                         CUDA builds): 'all', '0,2', '0-3'; an index may repeat ('0,0': two\n"
            "                         pipelines on one GPU). A batch's documents are dealt to the pipelines\n"
            "                         by token count (longest first, each to the least loaded); one writer\n"
            "                         commits them in batch order, as one pipeline would. A batch holds\n"
            "                         N x 8192 tokens unless --batch-tokens is given. The summary gives\n"
            "                         each pipeline's documents, tokens and seconds\n"
            "      --engines N        N encoder pipelines on the CPU (2..%d), dealt to and committed as\n"
            "                         --gpus's: the same store as one pipeline's, byte for byte (tests and\n"
            "                         CPU hosts; the host's threads are shared among them)\n"
#ifdef LZ_INGEST_TEST_HOOKS
            "      --test-fail-pass K (test build only) pass K of LAZY_INGEST_REF_PASSES fails, as a\n"
            "                         device error would\n"
            "      --test-pause-ms MS (test build only) sleep MS after each batch is flushed: a run slow\n"
            "                         enough to be killed mid-way\n"
            "      --test-fail-engine E (test build only) --test-fail-pass K counts the passes of pipeline E\n"
            "                         (--engines; default 0)\n"
#endif
            LZ_CLI_COMMON_HELP
            "\n" LZ_ENV_HELP
            "\nlazyingest also exits 2 when some records were skipped (the others are stored), and 4\n"
            "when --check found problems (or --repair left some).\n" LZ_CLI_EXIT_HELP,
            LZ_DEFAULT_MODEL_ENV, LZ_DEFAULT_MODEL, LZ_PAYLOAD_DEFAULT_LEVEL, LZ_KVPOLICY_DEFAULT_WINDOW,
            LZ_KVPOLICY_DEFAULT_KERNEL, (double)LZ_KVPOLICY_DEFAULT_ALPHA, INGEST_MAX_ENGINES);
}

/* Online CPUs (at least 1). */
static int cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 && n < 4096 ? (int)n : 1;
}

/* What a run takes beyond options (ingest/ingest_run.h): set by parse_options. */
static struct {
    int serial;          /* --serial: one document at a time */
    int sync_commit;     /* --sync-commit: a batch's payloads written before the next batch */
    long test_fail_pass; /* test builds (LZ_INGEST_TEST_HOOKS): --test-fail-pass K; -1: none */
    int busy;            /* the store is held by another writer: exit LZ_EXIT_BUSY */
    const char *id_field; /* --id-field: the records' id field (NULL: "id") */
    long test_pause_ms;  /* test builds: --test-pause-ms MS after each batch's flush (a slow run to kill) */
    long test_fail_engine; /* test builds: --test-fail-engine E, the pipeline --test-fail-pass counts in */
    int batch_given;     /* --batch-tokens given (else N pipelines take N x the default) */
    int engines;         /* --engines N (CPU pipelines); 0: not given */
} run_opts = { 0, 0, -1, 0, NULL, 0, 0, 0, 0 };

/* exit status when --check found problems (base/cli.h has the shared ones; 3 is LZ_EXIT_BUSY) */
enum { INGEST_EXIT_CHECK = 4 };

/* ---- model, store, prefix ---- */


/* The model and its key-importance model, checked before the store is opened:
 * a refused model (unreadable, no tokenizer, a --kv-learned file of another
 * model) leaves no new store behind. */
static int load_model(ingest *g, const char *model_path)
{
    if (lz_llama_load(model_path, &g->m, g->err, sizeof g->err)) return -1;
    if (!g->m->tok) {
        snprintf(g->err, sizeof g->err, "%s: the model has no tokenizer", model_path);
        return -1;
    }
    /* always: without it OpenBLAS ran its own pool inside every OpenMP thread (16 x 16 threads
     * on a 16-core machine; 1.5-1.7x slower on 2 cores, more on many) */
    lz_llama_set_threads(g->o.threads);
    if (lz_prompt_prefix_tokens(g->m->tok, &g->prefix, &g->n_prefix)) {
        snprintf(g->err, sizeof g->err, "out of memory");
        return -1;
    }
    if (g->o.learned) { /* the key-importance model: this model's, this shape */
        const lz_llama_config *c = &g->m->cfg;
        if (lz_kvlearn_load(g->o.learned, &g->scorer, g->err, sizeof g->err)) return -1;
        if (memcmp(g->scorer.fingerprint, g->m->fingerprint, 32) || g->scorer.L != c->n_layers ||
            g->scorer.KV != c->n_kv_heads || g->scorer.d != c->head_dim) {
            snprintf(g->err, sizeof g->err, "%s was fitted for another model (not %s)", g->o.learned, g->m->fingerprint_hex);
            return -1;
        }
        g->o.kv.scorer_hash = g->scorer.hash;
    }
    if (g->o.gpu) {
        /* documents in passes of up to LAZY_INGEST_GPU_PASS tokens (default 2,048; 0: one document a pass) */
        g->gpu_pass = lz_env_get()->ingest_gpu_pass;
        const int rows = g->gpu_pass > g->o.max_doc_tokens ? g->gpu_pass : g->o.max_doc_tokens;
        if (ingest_gpus_open(g, rows)) return -1; /* weights, on every listed device */
    }
    return 0;
}


/* N pipelines (--gpus with several entries: one a device context; --engines N: on the CPU),
 * once the encoder's settings are known. 0 or -1 (g->err). */
static int open_engines(ingest *g)
{
    if (g->o.gpu) {
        lz_encode_backend b[INGEST_MAX_ENGINES];
        for (int i = 0; i < g->n_gpus; i++) b[i] = ingest_gpu_backend(g, &g->gpus[i]);
        return g->n_gpus > 1 ? ingest_engines_open(g, g->n_gpus, b, g->o.devs) : 0;
    }
    return ingest_engines_open(g, g->o.n_engines, NULL, NULL);
}

/* Binds the loaded model to the opened store, sets up the encoder, computes
 * the prefix KV and stores its payload when absent. */
static int setup_model(ingest *g, const char *model_path)
{
    char abs[PATH_MAX];
    lz_store_model_desc desc;
    lz_ingest_model_desc(g->m, realpath(model_path, abs) ? abs : model_path, &desc);
    desc.kv_dtype = g->o.kv_dtype;
    uint8_t pkey[LZ_META_KEY_LEN];
    int prefix_changed; /* every key changes; the key comparison in ingest_do_record sees it */
    if (lz_store_bind_model(g->s, &desc, g->prefix, g->n_prefix, &g->model_id, pkey, &prefix_changed, g->err,
                            sizeof g->err))
        return -1;
    const lz_encode_backend *pb = NULL; /* --gpu: the prefix too on the GPU */
    if (g->o.gpu) {
        g->backend = ingest_gpu_backend(g, &g->gpus[0]); /* the first pipeline's device */
        pb = &g->backend;
    }
    if (lz_encoder_new_on(g->m, g->prefix, g->n_prefix, pb, &g->enc, g->err, sizeof g->err)) return -1;
    if (g->o.learn_out) {
        const lz_llama_config *c = &g->m->cfg;
        if (!(g->learn = lz_kvlearn_acc_new(c->n_layers, c->n_kv_heads, c->head_dim))) {
            snprintf(g->err, sizeof g->err, "out of memory");
            return -1;
        }
    }
    ingest_setup_encoder(g, g->enc);
    /* documents in parallel: CPU encoding of a small model (width <= 2,048) on several threads;
     * with --gpu the documents take turns on the GPU while the others' scoring and packing
     * run on the CPU's threads; not while calibrating (one accumulator) */
    g->sync_commit = run_opts.sync_commit; /* --sync-commit: payloads written before the next batch starts */
    g->par = !g->learn && omp_get_max_threads() > 1 && (g->o.gpu || g->m->cfg.dim <= 2048) && !run_opts.serial;
    if (g->o.n_engines > 1) g->par = 1; /* N pipelines: a batch's documents queued, then dealt */
    if (g->o.gpu) {
        if (ingest_gpus_setup(g)) return -1; /* the prefix on every device */
        lz_encoder_set_backend(g->enc, &g->backend);
    }
    /* LAZY_INGEST_REF_PASSES=N: --gpu's pipeline of multi-document passes on the CPU reference backend */
    const int ref = lz_env_get()->ingest_ref_passes;
    if (!g->o.gpu && ref > 0) {
        if (!(g->pass_ref = lz_pass_ref_new(g->m, lz_encoder_prefix_cache(g->enc)))) {
            snprintf(g->err, sizeof g->err, "out of memory");
            return -1;
        }
        g->backend = lz_pass_ref_backend(g->pass_ref, g->o.max_doc_tokens, ref);
        if (!lz_env_get()->ingest_planes) g->backend.fetch_planes = NULL;
#ifdef LZ_INGEST_TEST_HOOKS
        if (run_opts.test_fail_pass >= 0) lz_pass_ref_fail_at(g->pass_ref, run_opts.test_fail_pass); /* tests */
#endif
        lz_encoder_set_backend(g->enc, &g->backend);
    }
    /* the question cue, empty or --kv-probe-text (used by --kv-probe); kept for par's encoders */
    if (lz_prompt_question_tokens(g->m->tok, g->o.probe_text ? g->o.probe_text : "", &g->probe, &g->n_probe) ||
        lz_encoder_set_probe(g->enc, g->probe, g->n_probe)) {
        snprintf(g->err, sizeof g->err, "out of memory");
        return -1;
    }
    /* --gpus, --engines: N pipelines, their encoders set up as g->enc (probe included) */
    if (g->o.n_engines > 1 && open_engines(g)) return -1;
#ifdef LZ_INGEST_TEST_HOOKS
    if (g->n_eng > 1 && run_opts.test_fail_pass >= 0 && run_opts.test_fail_engine < g->n_eng &&
        g->eng[run_opts.test_fail_engine].ref) /* tests: pass K of pipeline E fails */
        lz_pass_ref_fail_at(g->eng[run_opts.test_fail_engine].ref, run_opts.test_fail_pass);
#endif
    int have = lz_store_has_payload(g->s, pkey, NULL, g->err, sizeof g->err);
    if (have < 0) return -1;
    if (!have) {
        lz_store_payload p;
        memcpy(p.key, pkey, LZ_META_KEY_LEN);
        if (lz_encoder_pack(g->enc, 0, g->codec, g->o.codec, g->o.level, &p.blob, &p.len, g->err,
                            sizeof g->err))
            return -1;
        int rc = lz_store_put_payloads(g->s, &p, 1, g->err, sizeof g->err);
        free(p.blob);
        if (rc) return -1;
    }
    return 0;
}

/* ---- the ingest pass ---- */

/* Returns the exit status. */
/* --kv-learn-out: the key-importance model fitted on this run's documents. */
static int write_scorer(ingest *g)
{
    lz_kvlearn m;
    if (!lz_kvlearn_acc_docs(g->learn)) {
        snprintf(g->err, sizeof g->err, "no document was encoded with --kv-reconstruct in this run (all unchanged or "
                 "stored whole?); fit on a new --store");
        return -1;
    }
    if (lz_kvlearn_fit(g->learn, 1e-4, &m)) {
        snprintf(g->err, sizeof g->err, "the fit failed (out of memory, or too few distinct keys)");
        return -1;
    }
    memcpy(m.fingerprint, g->m->fingerprint, 32);
    int rc = lz_kvlearn_save(&m, g->o.learn_out, g->err, sizeof g->err);
    if (!rc && !g->o.quiet)
        fprintf(stderr, "lazyingest: key-importance model fitted on %u documents -> %s (learned=%08x)\n", m.n_docs,
                g->o.learn_out, (unsigned)m.hash);
    lz_kvlearn_free(&m);
    return rc;
}

/* Whether record id is this run's: every record, or under --shard those of its shard. */
static int mine(const ingest *g, const char *id) { return !g->n_shards || lz_shards_of(id, g->n_shards) == g->shard; }

static int run_corpus(ingest *g, lz_corpus *cp)
{
    char err[2048];
    id_map seen = { 0 };
    lz_corpus_record r;
    int rc;
    /* pass 1: last occurrence of every id wins */
    while ((rc = lz_corpus_next(cp, &r, err, sizeof err)) != LZ_CORPUS_EOF) {
        if (rc == LZ_CORPUS_BAD) continue; /* reported in pass 2 */
        if (rc) {
            ingest_warnf(g, "lazyingest: %s", err);
            ingest_id_map_free(&seen);
            return EXIT_ERR;
        }
        if (r.warning && mine(g, r.id)) ingest_warnf(g, "%s", r.warning); /* pass 1 only: once per run */
        /* every id, also other shards' (a passage id must not collide with any record's id) */
        id_slot *s = ingest_id_map_get(&seen, r.id, 1);
        if (!s) {
            ingest_warnf(g, "lazyingest: out of memory");
            ingest_id_map_free(&seen);
            return EXIT_ERR;
        }
        if (!mine(g, r.id)) {
            /* another shard's record: counted and warned about by its run */
        } else if (s->ordinal >= 0) {
            ingest_warnf(g, "%s:%ld: warning: id '%s' appears again at line %ld; the last one wins", lz_corpus_name(cp),
                  s->line, r.id, r.line);
            g->n_dupes++;
        } else {
            g->n_records_total++;
        }
        s->ordinal = r.ordinal;
        s->line = r.line;
    }
    if (lz_corpus_rewind(cp, err, sizeof err)) {
        ingest_warnf(g, "lazyingest: %s", err);
        ingest_id_map_free(&seen);
        return EXIT_ERR;
    }
    /* pass 2 */
    int stopped = 0, fatal = 0;
    long n_anonymous = 0; /* bad records whose id could not be read */
    while (!fatal && (rc = lz_corpus_next(cp, &r, err, sizeof err)) != LZ_CORPUS_EOF) {
        if (rc == LZ_CORPUS_BAD) {
            if (r.id && !mine(g, r.id)) continue; /* another shard's: reported there */
            if (!r.id && g->n_shards && g->shard != 0) { /* no id, no shard: reported by shard 0, kept from --prune by all */
                n_anonymous++;
                continue;
            }
            ingest_warnf(g, "%s", err);
            g->c.n_skipped++;
            if (!r.id) n_anonymous++;
            else if (ingest_push_ptr(&g->keep_sources, &g->n_keep, &g->cap_keep, r.id)) fatal = 1;
            if (g->o.strict) {
                stopped = 1;
                break;
            }
            continue;
        }
        if (rc) {
            ingest_warnf(g, "lazyingest: %s", err);
            fatal = 1;
            break;
        }
        id_slot *s = ingest_id_map_get(&seen, r.id, 0);
        if (s && s->ordinal != r.ordinal) continue; /* a later record with this id wins */
        if (!mine(g, r.id)) continue;                 /* --shard: another shard's record */
        char where[1100];
        if (r.index >= 0) /* a JSON array's record: its index too */
            snprintf(where, sizeof where, "%.1000s:%ld: record [%ld]", lz_corpus_name(cp), r.line, r.index);
        else
            snprintf(where, sizeof where, "%.1000s:%ld", lz_corpus_name(cp), r.line);
        int st = ingest_do_record(g, &r, &seen, where);
        if (st < 0) {
            ingest_warnf(g, "lazyingest: %s: %s", where, g->err);
            fatal = 1;
            break;
        }
        if (st > 0) {
            ingest_warnf(g, "%s", g->err);
            g->c.n_skipped++;
            if (ingest_push_ptr(&g->keep_sources, &g->n_keep, &g->cap_keep, r.id)) fatal = 1;
            if (g->o.strict) {
                stopped = 1;
                break;
            }
        }
        g->n_records_done++;
        if (g->batch_tokens >= g->o.batch_tokens || g->n_docs >= 4096) {
            if (ingest_flush(g)) {
                ingest_warnf(g, "lazyingest: %s", g->err);
                fatal = 1;
            }
            if (run_opts.test_pause_ms > 0) usleep((useconds_t)run_opts.test_pause_ms * 1000); /* tests only */
        }
        ingest_progress(g, 0);
    }
    ingest_id_map_free(&seen);
    if (!fatal && ingest_flush(g)) {
        ingest_warnf(g, "lazyingest: %s", g->err);
        fatal = 1;
    }
    if (ingest_finish_commits(g) && !fatal) { /* a stop keeps what was committed before it */
        ingest_warnf(g, "lazyingest: %s", g->err);
        fatal = 1;
    }
    if (fatal) return EXIT_ERR;
    ingest_progress(g, 1);
    if (g->progress) fputs("\r\033[K", stderr);
    if (g->o.prune) {
        if (stopped) {
            ingest_warnf(g, "lazyingest: --prune skipped: the run stopped at a bad record (--strict)");
        } else if (n_anonymous) {
            /* their documents may be in the store: pruning would remove them */
            ingest_warnf(g, "lazyingest: --prune skipped: %ld bad records without a readable id", n_anonymous);
        } else {
            int64_t n = 0;
            int st = lz_store_begin(g->s, g->err, sizeof g->err);
            if (!st) st = lz_store_prune(g->s, g->run, &n, g->err, sizeof g->err);
            if (!st) st = lz_store_commit(g->s, g->err, sizeof g->err);
            if (st) {
                lz_store_rollback(g->s);
                ingest_warnf(g, "lazyingest: prune: %s", g->err);
                return EXIT_ERR;
            }
            g->c.n_removed += n;
        }
    }
    return stopped || g->c.n_skipped ? EXIT_SKIPPED : EXIT_OK;
}

static void join_args(int argc, char **argv, char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < argc && o < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? " " : "", argv[i]);
}

/* The options into o (and run_opts). Returns -1 to go on, else the exit
 * status (--help, --version: 0; a bad option or value: LZ_EXIT_USAGE). */
static int parse_options(int argc, char **argv, options *o, int *model_given)
{
    enum {
        O_JSON = 256, O_BATCH, O_MAX_DOC, O_LEVEL, O_DTYPE, O_POLICY, O_BUDGET, O_WINDOW, O_KERNEL, O_ALPHA, O_AGG,
        O_PROBE, O_PROBE_TEXT, O_RECON, O_SELF, O_VNORM, O_VPOWER, O_LEARNED, O_LEARN_OUT, O_SCOPE, O_FORMAT,
        O_PRUNE, O_STRICT, O_CHECK, O_REPAIR, O_GC, O_GPU, O_SERIAL, O_SYNC, O_FAIL_PASS, O_ID_FIELD, O_SHARDS,
        O_SHARD, O_PAUSE, O_GPUS, O_ENGINES, O_FAIL_ENGINE, O_CODEC
    };
    static const struct option longopts[] = {
        LZ_CLI_OPT_HELP, LZ_CLI_OPT_MODEL, LZ_CLI_OPT_STORE, LZ_CLI_OPT_THREADS, LZ_CLI_OPT_QUIET,
        LZ_OPT_FLAG("json", O_JSON), LZ_OPT_ARG("batch-tokens", O_BATCH),
        LZ_OPT_ARG("max-doc-tokens", O_MAX_DOC), LZ_OPT_ARG("level", O_LEVEL), LZ_OPT_ARG("codec", O_CODEC),
        LZ_OPT_ARG("kv-dtype", O_DTYPE), LZ_OPT_ARG("kv-policy", O_POLICY),
        LZ_OPT_ARG("kv-budget", O_BUDGET), LZ_OPT_ARG("kv-window", O_WINDOW),
        LZ_OPT_ARG("kv-kernel", O_KERNEL), LZ_OPT_ARG("kv-alpha", O_ALPHA), LZ_OPT_ARG("kv-agg", O_AGG),
        LZ_OPT_FLAG("kv-probe", O_PROBE), LZ_OPT_ARG("kv-probe-text", O_PROBE_TEXT),
        LZ_OPT_FLAG("kv-reconstruct", O_RECON), LZ_OPT_FLAG("kv-self", O_SELF),
        LZ_OPT_FLAG("kv-value-norm", O_VNORM), LZ_OPT_ARG("kv-value-power", O_VPOWER),
        LZ_OPT_ARG("kv-learned", O_LEARNED), LZ_OPT_ARG("kv-learn-out", O_LEARN_OUT),
        LZ_OPT_ARG("kv-scope", O_SCOPE), LZ_OPT_ARG("format", O_FORMAT), LZ_OPT_FLAG("prune", O_PRUNE),
        LZ_OPT_FLAG("strict", O_STRICT), LZ_OPT_FLAG("check", O_CHECK), LZ_OPT_FLAG("repair", O_REPAIR),
        LZ_OPT_FLAG("gc", O_GC), LZ_OPT_FLAG("gpu", O_GPU), LZ_OPT_FLAG("serial", O_SERIAL),
        LZ_OPT_FLAG("sync-commit", O_SYNC), LZ_OPT_ARG("id-field", O_ID_FIELD), LZ_OPT_ARG("shards", O_SHARDS),
        LZ_OPT_ARG("shard", O_SHARD), LZ_OPT_ARG("gpus", O_GPUS), LZ_OPT_ARG("engines", O_ENGINES),
#ifdef LZ_INGEST_TEST_HOOKS
        LZ_OPT_ARG("test-fail-pass", O_FAIL_PASS), LZ_OPT_ARG("test-pause-ms", O_PAUSE),
        LZ_OPT_ARG("test-fail-engine", O_FAIL_ENGINE),
#endif
        { NULL, 0, NULL, 0 }
    };
    static const char *const dtypes[] = { "bf16", "f32", "fp8", NULL }, *const scopes[] = { "layer", "model", NULL },
                             *const aggs[] = { "mean", "max", NULL }, *const formats[] = { "jsonl", "csv", NULL };
    /* getopt permutes its argv: a copy, so the run's recorded command line keeps the order given */
    char **av = malloc((size_t)(argc + 1) * sizeof *av);
    if (!av) return lz_cli_fail("out of memory");
    memcpy(av, argv, (size_t)argc * sizeof *av);
    av[argc] = NULL;
    int c, k, rc = -1;
    double x;
    while (rc < 0 && (c = lz_cli_getopt(argc, av, "hVm:s:t:q", longopts)) != -1) {
        switch (c) {
        case 'h': usage(stdout); rc = LZ_EXIT_OK; break;
        case 'V': lz_cli_version(); rc = LZ_EXIT_OK; break;
        case 'm': o->model = optarg; *model_given = 1; break;
        case 's': o->store = optarg; break;
        case 't': if (lz_cli_int("--threads", optarg, 1, 4096, &o->threads)) rc = LZ_EXIT_USAGE; break;
        case 'q': o->quiet = 1; break;
        case O_JSON: o->json = 1; break;
        case O_BATCH:
            if (lz_cli_int("--batch-tokens", optarg, 1, 1 << 30, &o->batch_tokens)) rc = LZ_EXIT_USAGE;
            run_opts.batch_given = 1;
            break;
        case O_MAX_DOC: if (lz_cli_int("--max-doc-tokens", optarg, 16, 1 << 24, &o->max_doc_tokens)) rc = LZ_EXIT_USAGE; break;
        case O_LEVEL: if (lz_cli_int("--level", optarg, 1, 19, &o->level)) rc = LZ_EXIT_USAGE; break;
        case O_CODEC: {
            static const char *const codecs[] = INGEST_CODEC_NAMES;
            if (lz_cli_choice("--codec", optarg, codecs, &o->codec)) rc = LZ_EXIT_USAGE;
            break;
        }
        case O_DTYPE:
            if (lz_cli_choice("--kv-dtype", optarg, dtypes, &k)) rc = LZ_EXIT_USAGE;
            else o->kv_dtype = k == 2 ? LZ_PAYLOAD_DTYPE_FP8 : k ? LZ_PAYLOAD_DTYPE_F32 : LZ_PAYLOAD_DTYPE_BF16;
            break;
        case O_POLICY:
            if ((k = lz_kvpolicy_parse_name(optarg)) < 0)
                rc = lz_cli_usage("--kv-policy: expected none, snapkv, ada-snapkv, pyramidkv or ada-pyramidkv, got '%s'",
                                  optarg);
            else o->kv.kind = k;
            break;
        case O_BUDGET:
            if (lz_kvpolicy_parse_budget(optarg, &o->kv))
                rc = lz_cli_usage("--kv-budget: expected a fraction in (0, 1] (0.2) or a token count (128t), got '%s'",
                                  optarg);
            o->kv_budget_arg = optarg;
            break;
        case O_WINDOW: if (lz_cli_int("--kv-window", optarg, 1, 1 << 20, &o->kv.window)) rc = LZ_EXIT_USAGE; break;
        case O_KERNEL:
            if (lz_cli_int("--kv-kernel", optarg, 1, 1023, &o->kv.kernel)) rc = LZ_EXIT_USAGE;
            else if (!(o->kv.kernel & 1)) rc = lz_cli_usage("--kv-kernel: expected an odd number, got %d", o->kv.kernel);
            break;
        case O_ALPHA:
            if (lz_cli_double("--kv-alpha", optarg, 0, 1, &x)) rc = LZ_EXIT_USAGE;
            else o->kv.alpha = (float)x;
            break;
        case O_AGG:
            if (lz_cli_choice("--kv-agg", optarg, aggs, &k)) rc = LZ_EXIT_USAGE;
            else o->kv.agg = k ? LZ_KVPOLICY_AGG_MAX : LZ_KVPOLICY_AGG_MEAN;
            break;
        case O_PROBE: o->kv.probe = LZ_KVPOLICY_PROBE_CUE; break;
        case O_PROBE_TEXT: {
            size_t len = strlen(optarg);
            if (len > 1024 || lz_utf8_valid_prefix((const unsigned char *)optarg, len) != len) {
                rc = lz_cli_usage("--kv-probe-text: %s", len > 1024 ? "longer than 1024 bytes" : "not valid UTF-8");
                break;
            }
            o->kv.probe = LZ_KVPOLICY_PROBE_CUE;
            o->probe_text = optarg;
            o->kv.probe_text = lz_kvpolicy_text_hash(optarg);
            break;
        }
        case O_RECON: o->kv.probe = LZ_KVPOLICY_PROBE_RECONSTRUCT; break;
        case O_SELF: o->kv.probe = LZ_KVPOLICY_PROBE_SELF; break;
        case O_LEARNED: o->kv.probe = LZ_KVPOLICY_PROBE_LEARNED; o->learned = optarg; break;
        case O_LEARN_OUT: o->learn_out = optarg; break;
        case O_VNORM: o->kv.value_norm = 1; break;
        case O_VPOWER:
            if (lz_kvpolicy_parse_power(optarg, &o->kv.value_power))
                rc = lz_cli_usage("--kv-value-power: expected a number in (0, 16], got '%s'", optarg);
            o->kv.value_norm = 1;
            break;
        case O_SCOPE:
            if (lz_cli_choice("--kv-scope", optarg, scopes, &k)) rc = LZ_EXIT_USAGE;
            else o->kv.scope_model = k;
            break;
        case O_FORMAT:
            if (lz_cli_choice("--format", optarg, formats, &k)) rc = LZ_EXIT_USAGE;
            else o->format = k ? LZ_CORPUS_CSV : LZ_CORPUS_JSONL;
            break;
        case O_ID_FIELD:
            if (!*optarg || strlen(optarg) > LZ_CORPUS_MAX_FIELD)
                rc = lz_cli_usage("--id-field: expected a field name of 1 to %d bytes, got '%.80s'", LZ_CORPUS_MAX_FIELD,
                                  optarg);
            run_opts.id_field = optarg;
            break;
        case O_SHARDS:
            if (lz_cli_int("--shards", optarg, 1, LZ_SHARDS_MAX, &k)) rc = LZ_EXIT_USAGE;
            else if (o->n_shards && o->n_shards != k) rc = lz_cli_usage("--shards %d and --shard .../%d disagree", k, o->n_shards);
            else o->n_shards = k;
            break;
        case O_SHARD: {
            int i, n, used = 0;
            if (sscanf(optarg, "%d/%d%n", &i, &n, &used) != 2 || optarg[used] || n < 1 || n > LZ_SHARDS_MAX || i < 0 ||
                i >= n)
                rc = lz_cli_usage("--shard: expected I/N with 0 <= I < N <= %d, got '%s'", LZ_SHARDS_MAX, optarg);
            else if (o->n_shards && o->n_shards != n) rc = lz_cli_usage("--shard %s and --shards %d disagree", optarg, o->n_shards);
            else o->shard = i, o->n_shards = n;
            break;
        }
        case O_PRUNE: o->prune = 1; break;
        case O_STRICT: o->strict = 1; break;
        case O_CHECK: o->check = 1; break;
        case O_REPAIR: o->repair = o->check = 1; break;
        case O_GC: o->gc = 1; break;
        case O_GPU:
            if (!lz_engine_gpu_built())
                rc = lz_cli_usage("--gpu: this build has no CUDA support ('make cuda' builds build/cuda/lazyingest)");
            o->gpu = 1;
            break;
        case O_GPUS: {
            if (!lz_engine_gpu_built()) {
                rc = lz_cli_usage("--gpus: this build has no CUDA support ('make cuda' builds build/cuda/lazyingest; "
                                  "--engines N runs N pipelines on the CPU)");
                break;
            }
            const int n = lz_cli_gpu_list("--gpus", optarg, lz_engine_gpu_count(), o->devs, INGEST_MAX_ENGINES);
            if (n < 0) rc = LZ_EXIT_USAGE;
            else o->n_devs = o->n_engines = n, o->gpu = 1; /* --gpus implies --gpu */
            break;
        }
        case O_ENGINES:
            if (lz_cli_int("--engines", optarg, 1, INGEST_MAX_ENGINES, &k)) rc = LZ_EXIT_USAGE;
            else run_opts.engines = k;
            break;
        case O_SERIAL: run_opts.serial = 1; break;
        case O_SYNC: run_opts.sync_commit = 1; break;
#ifdef LZ_INGEST_TEST_HOOKS
        case O_FAIL_PASS:
            if (lz_cli_long("--test-fail-pass", optarg, 0, 1L << 30, &run_opts.test_fail_pass)) rc = LZ_EXIT_USAGE;
            break;
        case O_PAUSE:
            if (lz_cli_long("--test-pause-ms", optarg, 0, 60000, &run_opts.test_pause_ms)) rc = LZ_EXIT_USAGE;
            break;
        case O_FAIL_ENGINE:
            if (lz_cli_long("--test-fail-engine", optarg, 0, INGEST_MAX_ENGINES - 1, &run_opts.test_fail_engine))
                rc = LZ_EXIT_USAGE;
            break;
#endif
        default: rc = LZ_EXIT_USAGE; break; /* '?': lz_cli_getopt named it */
        }
    }
    if (rc < 0 && optind < argc) o->corpus = av[optind];
    if (rc < 0 && optind + 1 < argc)
        rc = lz_cli_usage("one corpus at a time (got '%s' and '%s')", av[optind], av[optind + 1]);
    free(av);
    if (rc >= 0) return rc;
    if (!o->corpus && !o->check && !o->gc) return lz_cli_usage("no corpus given (a file, or '-' for standard input)");
    if (o->learn_out && (!o->corpus || o->kv.kind == LZ_KVPOLICY_NONE || o->kv.probe != LZ_KVPOLICY_PROBE_RECONSTRUCT))
        return lz_cli_usage("--kv-learn-out needs a corpus, --kv-policy, --kv-budget and --kv-reconstruct "
                            "(it learns the reconstruction scores)");
    if (o->kv.scope_model && o->kv.kind != LZ_KVPOLICY_ADA_SNAPKV)
        return lz_cli_usage("--kv-scope model needs --kv-policy ada-snapkv (got %s)", lz_kvpolicy_name(o->kv.kind));
    if (o->learn_out && (o->n_shards || lz_shards_is_root(o->store)))
        return lz_cli_usage("--kv-learn-out fits on one store's documents: use an unsharded calibration store");
    if (run_opts.engines && (o->gpu || o->n_devs))
        return lz_cli_usage("--engines runs pipelines on the CPU: with the GPU give --gpus (e.g. --gpus 0,0 for two "
                            "pipelines on GPU 0)");
    if (run_opts.engines) o->n_engines = run_opts.engines;
    if (o->n_engines > 1 && run_opts.serial)
        return lz_cli_usage("--serial encodes one document at a time: not with %d pipelines (--%s)", o->n_engines,
                            o->n_devs ? "gpus" : "engines");
    if (o->n_engines > 1 && o->learn_out)
        return lz_cli_usage("--kv-learn-out fits with one accumulator: not with %d pipelines (--%s)", o->n_engines,
                            o->n_devs ? "gpus" : "engines");
    /* N pipelines: a batch gives each about what one pipeline's batch holds */
    if (o->n_engines > 1 && !run_opts.batch_given) o->batch_tokens *= o->n_engines;
    if (o->kv.kind != LZ_KVPOLICY_NONE && !o->kv_budget_arg)
        return lz_cli_usage("--kv-policy %s needs --kv-budget (0.2 or 128t)", lz_kvpolicy_name(o->kv.kind));
    if ((rc = lz_cli_check_env())) return rc;
    return -1;
}

/* The payload database checked (tree pages) and, when damaged, rebuilt from its intact pages
 * under the store's recorded model. 0, or -1 with g->err. */
static int rebuild_if_damaged(ingest *g)
{
    char what[1024];
    int d = lz_store_payloads_damaged(g->s, 1, what, sizeof what, g->err, sizeof g->err);
    if (d <= 0) return d;
    ingest_warnf(g, "lazyingest: the payload database of store %s is damaged: %s; rebuilding it from its intact pages",
                 g->o.store, what);
    int rc = lz_store_bind_recorded(g->s, g->err, sizeof g->err);
    if (rc == LZ_ENOTFOUND) return 0; /* no model recorded: no row, nothing to keep (the run writes anew) */
    lz_store_rebuild_stats rs;
    if (rc || lz_store_rebuild_payloads(g->s, &rs, g->err, sizeof g->err)) return -1;
    g->rebuilt = 1;
    g->rebuild_dropped += rs.n_dropped;
    g->rebuild_bytes += rs.bytes_dropped;
    ingest_warnf(g, "lazyingest: rebuilt: %lld payloads kept, %lld dropped, about %lld lost (their documents are "
                 "encoded again by this run, or by --repair)", (long long)rs.n_kept, (long long)rs.n_dropped,
                 (long long)rs.n_lost);
    return 0;
}

/* One store's run (a plain store, or one shard of a sharded one: g->o.store names it): open and
 * lock, rebuild a damaged payload database, bind the model, the corpus pass, --check (do_check) and
 * --repair, gc, the run's record and its summary. Returns the exit status (run_opts.busy set when
 * another writer holds the store); what it opened is ingest_store_reset's to free. */
int ingest_run_store(ingest *g, lz_corpus *cp, int argc, char **argv, int need_model, int do_check)
{
    options *o = &g->o;
    int status = EXIT_OK;
    /* --check alone (no model to bind) writes nothing: it reads beside a running writer,
     * without the writer lock */
    const int read_only = !cp && !o->repair && !o->gc && !need_model;
    double t_setup = lz_now_s();
    int open_rc = lz_store_open(o->store, read_only ? LZ_STORE_RDONLY : LZ_STORE_WRITER, &g->s, g->err, sizeof g->err);
    if (open_rc) {
        fprintf(stderr, "lazyingest: %s\n", g->err);
        run_opts.busy |= open_rc == LZ_EBUSY;
        return EXIT_ERR;
    }
    /* a writer first checks LMDB's tree (cheap: branch and leaf pages, what every lookup below reads;
     * LMDB trusts its pages, and a damaged one can crash it or hide what is written): a damaged
     * database is rebuilt from its intact pages, and this run (or --repair) encodes what was lost */
    if (!read_only && rebuild_if_damaged(g)) {
        fprintf(stderr, "lazyingest: %s\n", g->err);
        return EXIT_ERR;
    }
    int setup_rc = need_model ? setup_model(g, o->model) : lz_store_bind_recorded(g->s, g->err, sizeof g->err);
    g->t_setup = g->t_load + lz_now_s() - t_setup; /* model load, GPU upload, store binding, the prefix's forward pass */
    if (setup_rc) {
        fprintf(stderr, "lazyingest: %s\n", g->err);
        return EXIT_ERR;
    }

    lz_store_check_stats cs = { 0 };
    lz_store_gc_stats gs = { 0 };
    int64_t fixed = 0, removed_by_repair = 0, n_total = 0;
    const char *run_status = "ok";
    if (cp) {
        char args[8192];
        join_args(argc, argv, args, sizeof args);
        int st = lz_store_begin(g->s, g->err, sizeof g->err);
        if (!st) st = lz_store_run_begin(g->s, args, g->model_id, &g->run, g->err, sizeof g->err);
        if (!st) st = lz_store_commit(g->s, g->err, sizeof g->err);
        if (st) {
            lz_store_rollback(g->s);
            fprintf(stderr, "lazyingest: %s\n", g->err);
            return EXIT_ERR;
        }
        status = run_corpus(g, cp);
        run_status = status == EXIT_ERR ? "failed" : status == EXIT_SKIPPED ? "partial" : "ok";
        if (status != EXIT_ERR && g->learn && write_scorer(g)) {
            fprintf(stderr, "lazyingest: --kv-learn-out: %s\n", g->err);
            status = EXIT_ERR;
        }
    }
    if (status != EXIT_ERR && do_check) {
        issue_list l = { g, NULL, 0, 0, 0 };
        if (lz_store_check(g->s, ingest_on_issue, &l, &cs, g->err, sizeof g->err)) {
            fprintf(stderr, "lazyingest: check: %s\n", g->err);
            status = EXIT_ERR;
        } else if (o->repair && l.n) {
            /* damaged LMDB pages first: the database rebuilt from its intact pages, then checked
             * again, so that what was lost with them is re-encoded into a sound tree (one pass) */
            int rebuild_rc = 0;
            if (cs.kv_damaged) {
                lz_store_rebuild_stats rs;
                ingest_issues_free(&l);
                if ((rebuild_rc = lz_store_rebuild_payloads(g->s, &rs, g->err, sizeof g->err))) {
                    fprintf(stderr, "lazyingest: repair: %s\n", g->err);
                    status = EXIT_ERR;
                } else {
                    g->rebuilt = 1;
                    g->rebuild_dropped += rs.n_dropped;
                    g->rebuild_bytes += rs.bytes_dropped;
                    ingest_warnf(g, "repair: rebuilt the payload database of %s from its intact pages: %lld payloads "
                                 "kept, %lld dropped (unreferenced or failing their checks), about %lld lost",
                                 o->store, (long long)rs.n_kept, (long long)rs.n_dropped, (long long)rs.n_lost);
                    lz_store_check_stats after;
                    l.silent = 1; /* the documents were named by the first check */
                    if ((rebuild_rc = lz_store_check(g->s, ingest_on_issue, &l, &after, g->err, sizeof g->err))) {
                        fprintf(stderr, "lazyingest: check after the rebuild: %s\n", g->err);
                        status = EXIT_ERR;
                    }
                    l.silent = 0;
                }
            }
            if (rebuild_rc) {
                /* said above */
            } else if (ingest_repair(g, &l, &fixed, &removed_by_repair)) {
                fprintf(stderr, "lazyingest: repair: %s\n", g->err);
                status = EXIT_ERR;
            } else {
                ingest_issues_free(&l);
                lz_store_check_stats again;
                if (lz_store_check(g->s, ingest_on_issue, &l, &again, g->err, sizeof g->err) == 0 && l.n) {
                    fprintf(stderr, "lazyingest: repair left %d problems\n", l.n);
                    status = EXIT_CHECK;
                }
            }
        } else if (l.n) {
            if (status == EXIT_OK) status = EXIT_CHECK;
        }
        ingest_issues_free(&l);
    }
    /* Garbage: payloads of removed or changed documents, and of batches an
     * interrupted run wrote without committing their rows. */
    if (status != EXIT_ERR && (cp || o->gc || o->repair)) {
        if (lz_store_gc(g->s, &gs, g->err, sizeof g->err)) {
            fprintf(stderr, "lazyingest: gc: %s\n", g->err);
            status = EXIT_ERR;
        }
        gs.n_removed += g->rebuild_dropped; /* what a rebuild left out was garbage too */
        gs.bytes_removed += g->rebuild_bytes;
        g->c.n_garbage = gs.n_removed;
    }
    if (cp && g->run) {
        if (status == EXIT_ERR) run_status = "failed";
        if (lz_store_run_end(g->s, g->run, &g->c, run_status, g->err, sizeof g->err))
            fprintf(stderr, "lazyingest: recording the run: %s\n", g->err);
    }
    lz_store_doc_count(g->s, &n_total, g->err, sizeof g->err);
    if (cp) g->corpus_format = lz_corpus_format_name(lz_corpus_get_format(cp));
    if (cp && !o->quiet && !o->json) /* which reader the input got (a JSON array, or JSONL lines) */
        printf("lazyingest: %s: read as %s\n", lz_corpus_name(cp), lz_corpus_format_name(lz_corpus_get_format(cp)));
    ingest_summary(g, status == EXIT_OK ? "ok" : status == EXIT_SKIPPED ? "partial" : status == EXIT_CHECK ? "problems"
                                                                                                    : "failed",
            n_total, (cp || o->gc || o->repair) ? &gs : NULL, &cs, fixed, removed_by_repair, cp != NULL, do_check);
    return status;
}

/* What one store's run opened (the store, the encoders, the batches) freed; the model, the
 * codec and the options stay for the next shard's run. */
void ingest_store_reset(ingest *g)
{
    ingest_batch_free(g);
    for (int i = 1; i < g->n_pool; i++) lz_encoder_free(g->pool[i]); /* pool[0] is enc */
    for (int i = 0; i < g->n_pool; i++) lz_payload_codec_free(g->pool_codec[i]);
    free(g->pool);
    free(g->pool_codec);
    free(g->probe);
    lz_encoder_free(g->enc);
    lz_pass_ref_free(g->pass_ref);
    ingest_engines_free(g); /* the pipelines' encoders (their device contexts stay, as the model) */
    lz_store_close(g->s);
    ingest keep = *g;
    memset(g, 0, sizeof *g);
    g->o = keep.o;
    g->m = keep.m;
    g->scorer = keep.scorer;
    g->learn = keep.learn;
    g->codec = keep.codec;
    g->prefix = keep.prefix;
    g->n_prefix = keep.n_prefix;
    g->gpus = keep.gpus;
    g->n_gpus = keep.n_gpus;
    g->gpu_pass = keep.gpu_pass;
    g->t_load = keep.t_load;
    g->progress = keep.progress;
    g->t0 = lz_now_s();
}

int main(int argc, char **argv)
{
    lz_runtime_init(argc, argv);
    lz_cli_init("lazyingest");
    ingest G;
    memset(&G, 0, sizeof G);
    ingest *g = &G;
    options *o = &g->o;
    o->store = "./lazystore";
    o->batch_tokens = 8192;
    o->max_doc_tokens = 1024;
    o->level = LZ_PAYLOAD_DEFAULT_LEVEL;
    o->codec = LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD;
    o->shard = -1;
    lz_kvpolicy_default(&o->kv);
    int model_given = 0;
    const int prc = parse_options(argc, argv, o, &model_given);
    if (prc >= 0) return prc;
    g->t0 = lz_now_s();
    g->progress = !o->quiet && !o->json && isatty(2);
    int need_model = o->corpus || o->repair || model_given;
    char model_path[PATH_MAX];
    if (need_model && !o->model) {
        if (lz_prompt_default_model(model_path, sizeof model_path, g->err, sizeof g->err)) {
            fprintf(stderr, "lazyingest: %s\n", g->err);
            return EXIT_ERR;
        }
        o->model = model_path;
    }
    int status = EXIT_OK;
    lz_corpus *cp = NULL;
    if (o->corpus && lz_corpus_open(o->corpus, (lz_corpus_format)o->format, &cp, g->err, sizeof g->err)) {
        fprintf(stderr, "lazyingest: %s\n", g->err);
        return EXIT_ERR;
    }
    if (cp && run_opts.id_field) lz_corpus_set_id_field(cp, run_opts.id_field); /* its length checked above */
    char shard_id[PATH_MAX + 16]; /* a shard folder takes its own records only: through its set's root */
    snprintf(shard_id, sizeof shard_id, "%s/%s", o->store, LZ_SHARDS_ID_FILE);
    if (cp && !o->n_shards && access(shard_id, F_OK) == 0) {
        lz_corpus_close(cp);
        return lz_cli_usage("store %s is one shard of a sharded store (%s): ingest through the set's folder with "
                            "--shard I/N, so that only that shard's documents go into it", o->store, shard_id);
    }
    if (!cp && !lz_store_exists(o->store)) /* maintenance only: never create an empty store */
        return lz_cli_usage("no store at %s (neither %s/meta.sqlite nor %s/%s found); give --store", o->store, o->store,
                            o->store, LZ_SHARDS_MANIFEST);
    double t_setup = lz_now_s();
    int load_rc = need_model ? load_model(g, o->model) : 0;
    g->t_load = lz_now_s() - t_setup;
    if (load_rc) { /* before the store: a refused model creates nothing */
        fprintf(stderr, "lazyingest: %s\n", g->err);
        status = EXIT_ERR;
        goto out;
    }
    g->codec = lz_payload_codec_new();
    if (!g->codec) {
        fprintf(stderr, "lazyingest: out of memory\n");
        status = EXIT_ERR;
        goto out;
    }
    /* payloads compressed on every thread (zstd workers; the bytes do not depend on the count) */
    if (lz_payload_codec_set_threads(g->codec, o->threads > 0 ? o->threads : cpu_count()))
        ingest_warnf(g, "lazyingest: out of memory for the compression threads: payloads are compressed in one thread");
    if (o->n_shards || lz_shards_is_root(o->store)) /* a sharded store: shard by shard, then the set (ingest_shards.c) */
        status = ingest_shards_run(g, cp, argc, argv, need_model);
    else
        status = ingest_run_store(g, cp, argc, argv, need_model, o->check);
out:
    ingest_store_reset(g);
    ingest_gpus_free(g);
    lz_kvlearn_free(&g->scorer);
    lz_kvlearn_acc_free(g->learn);
    lz_payload_codec_free(g->codec);
    lz_corpus_close(cp);
    free(g->prefix);
    lz_llama_free(g->m);
    /* the tool's exit codes (base/cli.h, --help): the run's status, a store held by another
     * writer, --check's problems */
    return run_opts.busy ? LZ_EXIT_BUSY : status == EXIT_CHECK ? INGEST_EXIT_CHECK : status;
}
