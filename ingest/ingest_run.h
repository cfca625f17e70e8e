/* ingest_run.h - the lazyingest tool's own pieces, shared by its files (not
 * a library interface): its options, the run's state (ingest: the batch being
 * built, the one being committed, counts and timings) and what each file
 * offers the others:
 *   ingest/lazyingest.c     options, the model and store, the pass over the corpus, main
 *   ingest/ingest_record.c  pass 1's ids; one corpus record into the batch
 *   ingest/ingest_batch.c   a batch's documents encoded (or queued) and committed
 *   ingest/ingest_jobs.c    the queued documents encoded in parallel (the GPU's pass pipeline)
 *   ingest/ingest_engines.c N encoder pipelines (--gpus, --engines): a batch's documents dealt by size
 *   ingest/ingest_report.c  --check / --repair, the run's summary
 *   ingest/ingest_shards.c  a sharded store: its manifest, its shards' runs one by one, the set's check
 */
#ifndef INGEST_RUN_H
#define INGEST_RUN_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "base/clock.h"
#include "engine/engine.h"
#include "ingest/corpus.h"
#include "ingest/encode.h"
#include "ingest/pass_ref.h"
#include "ingest/kvlearn.h"
#include "ingest/kvpolicy.h"
#include "ingest/model_desc.h"
#include "model/llama.h"
#include "store/store.h"

enum { EXIT_OK = 0, EXIT_ERR = 1, EXIT_SKIPPED = 2, EXIT_CHECK = 3 };

#define INGEST_MAX_ENGINES 64 /* pipelines of one run (--gpus, --engines) */
/* --codec's names, in lz_payload_codec_id's order (store/payload.h) */
#define INGEST_CODEC_NAMES {"raw", "zstd", "shuffle-zstd", NULL}

typedef struct {
    const char *corpus, *model, *store;
    int batch_tokens, threads, max_doc_tokens, level, format, kv_dtype;
    int codec;              /* --codec: lz_payload_codec_id of the payloads this run writes */
    int prune, strict, check, repair, gc, quiet, json, gpu;
    lz_kvpolicy kv;       /* KV eviction at ingest (--kv-policy, --kv-budget, ...) */
    const char *kv_budget_arg;
    const char *probe_text; /* --kv-probe-text: the question in the probe cue (NULL = "") */
    const char *learned;    /* --kv-learned: key-importance model file */
    const char *learn_out;  /* --kv-learn-out: fit one from this run's reconstruction scores */
    int n_shards;           /* --shards N (or the N of --shard I/N); 0: not given */
    int shard;              /* --shard I; -1: every shard */
    int n_engines;          /* encoder pipelines (--engines N, or the entries of --gpus); 0 or 1: one */
    int n_devs;             /* --gpus: entries of devs (0: --gpu alone, the current device) */
    int devs[INGEST_MAX_ENGINES]; /* --gpus: pipeline i's CUDA device */
} options;

/* ---- pass 1: ids, their last occurrence, duplicates ---- */

typedef struct {
    char *id;
    long ordinal, line;
} id_slot;

typedef struct {
    id_slot *v;
    size_t cap, n;
} id_map;

/* ---- the run's state ---- */

typedef struct {
    char *ext_id, *source_id, *title, *text;
    int *ids;
    int n_tokens, passage;
    int64_t row_id;   /* existing row to update; 0 = insert */
    int kind;         /* K_ADDED, K_UPDATED, K_UNCHANGED, K_REHASH */
    int has_source_hash;
    uint8_t source_hash[32];
    uint8_t content_hash[32], key[LZ_META_KEY_LEN];
    int64_t raw_bytes, stored_bytes;
    char kv_spec[LZ_KVPOLICY_SPEC_MAX]; /* effective KV eviction ("" = stored whole) */
    int64_t kv_kept;                    /* keys stored over all (layer, kv head) */
} pend_doc;

/* A document to encode at the next commit, when documents are encoded in
 * parallel (ingest.par): doc indexes the batch; alias >= 0 names an earlier
 * job with the same payload key (its blob serves both). */
typedef struct {
    int doc, alias;
    int engine;             /* the pipeline it was dealt to (ingest_engines.c; -1: the single one) */
    int pass, slot, c0, cw; /* on the backend: document slot of pass (-1: encoded on its own) and its window */
    void *blob;
    size_t len;
    char err[512];
} enc_job;

/* A batch's arrays: the ingest holds the batch being built; while its
 * payloads are written on a thread, the batch committed before it waits in
 * held (swapped with the ingest's fields, arrays kept for reuse). */
typedef struct {
    pend_doc *docs;
    int n_docs, cap_docs;
    lz_store_payload *pay;
    int n_pay, cap_pay;
    char **sources;
    int n_src, cap_src;
    char **keep_sources;
    int n_keep, cap_keep;
} batch_arrays;

/* A committed batch's payloads, written by a thread (lz_store_put_payloads_fixed). */
typedef struct {
    lz_store *s;
    const lz_store_payload *pay;
    int n, fixed, rc;
    char err[1024];
} pay_writer;

/* One pipeline's share of a batch's jobs and what it encodes them with
 * (ingest_jobs.c): the single pipeline's (every job, the run's pool and
 * backend) or one engine's (ingest_engines.c). */
typedef struct {
    const pend_doc *docs;     /* the batch's documents (read only) */
    int level;                /* zstd level of the payloads */
    int codec_id;             /* their codec (lz_payload_codec_id) */
    enc_job *jobs;            /* n_jobs: each gets its blob, or its err */
    int n_jobs;
    lz_encoder **pool;        /* threads encoders and codecs: one a thread */
    lz_payload_codec **codec;
    int threads;
    const lz_encode_backend *backend; /* passes when it has start / finish / fetch; NULL: none */
    long n_passes, n_pass_docs;       /* added to */
    double fwd, pack;                 /* thread-seconds of forward passes and of packing, added to */
    /* the thread driving the device's passes, seconds added to: waiting in finish (the pass
     * computing, then read back) and waiting for the pass before to be fetched (the device idle) */
    double dev_finish, dev_wait;
    char *err;                        /* a device failure (a pass that failed), errlen bytes */
    size_t errlen;
} job_pipe;

/* A GPU pipeline's device context (--gpu, --gpus): its engine, made on device
 * dev (-1: --gpu alone, the default device), whose document hooks make it
 * current on every call (engine/engine.h). */
typedef struct {
    lz_engine *engine;
    int dev;
} ingest_gpu;

/* One of N encoder pipelines (ingest_engines.c): its backend (a GPU, the CPU
 * reference of passes, or none: the CPU engine), its encoders and codecs
 * (one a host thread), the jobs dealt to it at a commit, its figures. */
typedef struct {
    int id, dev;                /* its index; --gpus: its device (-1: the CPU) */
    lz_encode_backend backend;  /* encode NULL: none (each encoder's own CPU table); the encoders point here */
    lz_pass_ref *ref;           /* the CPU reference of passes it owns (LAZY_INGEST_REF_PASSES), or NULL */
    lz_encoder **pool;          /* threads of them, the prefix's KV copied from the run's encoder */
    lz_payload_codec **codec;
    int threads;
    enc_job *jobs;              /* this commit's share (copies; .doc indexes the batch) */
    int *job_of;                /* the batch's job index of each */
    int n_jobs, cap_jobs;
    int rc;                     /* its last run: 0, or -1 with err */
    long n_passes, n_pass_docs;
    int64_t n_docs, n_tokens;   /* documents and tokens it encoded in this run */
    double t_forward, t_pack;   /* its wall at the commits, split as its threads spent it */
    double t_busy;              /* its wall at the commits (the batch's is its slowest pipeline's) */
    char err[2048];
} ingest_engine;

/* K_REHASH: same content and payload, only the row's source_hash is set
 * (rows from before schema version 2, or after a budget change): counted
 * as unchanged. */
enum { K_ADDED = 0, K_UPDATED = 1, K_UNCHANGED = 2, K_REHASH = 3 };

typedef struct {
    options o;
    lz_llama *m;
    lz_store *s;
    lz_encoder *enc;
    lz_kvlearn scorer;      /* --kv-learned (w NULL when not given) */
    lz_kvlearn_acc *learn;  /* --kv-learn-out */
    lz_payload_codec *codec;
    int *prefix;
    int n_prefix;
    int64_t model_id, run;
    /* the batch being built */
    pend_doc *docs;
    int n_docs, cap_docs;
    lz_store_payload *pay;
    int n_pay, cap_pay;
    char **sources;       /* records finished in this batch: prune their stale passages */
    int n_src, cap_src;
    char **keep_sources;  /* bad records with a known id: keep their old rows */
    int n_keep, cap_keep;
    int64_t batch_tokens;
    /* the batch before: its payloads written on wthread (writing) while this one is encoded, its
     * rows committed at the next commit (held_pending); --sync-commit: at once */
    batch_arrays held;
    int held_pending, writing, sync_commit;
    pthread_t wthread;
    pay_writer wjob;
    /* par: documents encoded in parallel at each commit, one encoder (and codec) a thread: a
     * small model's forward pass scales poorly inside one document (1.24x on 2 cores) */
    int par;
    enc_job *jobs;
    int n_jobs, cap_jobs;
    lz_encoder **pool;        /* pool[0] is enc; the others are made at the first commit */
    lz_payload_codec **pool_codec;
    int n_pool;
    int *probe, n_probe;      /* the encoders' probe cue */
    /* committed counts */
    lz_meta_run_counts c;
    int64_t n_dupes, n_records_done, n_records_total, n_corpus_tokens;
    double t0, t_encode, last_progress;
    double t_load, t_setup, t_forward, t_pack, t_commit; /* model load (and GPU upload), + store and prefix,
                                                            forward passes, payload packing, commits */
    double t_dev_finish, t_dev_wait; /* the passes' driver: in finish, waiting for fetches (job_pipe's) */
    int64_t kv_kept, kv_full;  /* keys stored / keys before eviction, of the documents this run encoded */
    int64_t n_restored;        /* unchanged documents whose payload was missing, encoded again */
    int rebuilt;               /* the payload database was damaged and rebuilt before the run */
    int64_t rebuild_dropped, rebuild_bytes; /* the entries the rebuild left out (unreferenced or failing) */
    int progress;
    lz_encode_backend backend;
    int gpu_pass;               /* --gpu: tokens of a multi-document pass (0: one document a pass) */
    lz_pass_ref *pass_ref;      /* LAZY_INGEST_REF_PASSES: the passes on the CPU reference backend */
    long n_passes, n_pass_docs; /* multi-document passes run, and their documents */
    const char *corpus_format;  /* the reader the corpus got (lz_corpus_format_name), or NULL */
    int shard, n_shards;        /* one shard's run: only the records of shard `shard` of n_shards (n_shards 0: all) */
    int64_t n_encoded;          /* documents encoded (payloads queued) */
    ingest_gpu *gpus;           /* --gpu: 1, --gpus: n_gpus device contexts; kept across shards */
    int n_gpus;
    ingest_engine *eng;         /* n_eng > 1: the pipelines a batch's documents are dealt to (else none) */
    int n_eng;
    double t_engines;           /* the batches' encoding wall with N pipelines (each its slowest's) */
    char err[8192];
} ingest;

/* ---- check and repair ---- */

typedef struct {
    int64_t doc_id;
    char *ext_id;
    int *ids;
    int n, kind;
    char kv_spec[LZ_KVPOLICY_SPEC_MAX]; /* the row's KV eviction: re-encoded the same way */
} issue_copy;

typedef struct {
    ingest *g;
    issue_copy *v;
    int n, cap;
    int silent; /* copy the issues without printing them */
} issue_list;

/* lazyingest.c */
/* One store's run: g->o.store (a plain store or a shard folder); the exit status. */
int ingest_run_store(ingest *g, lz_corpus *cp, int argc, char **argv, int need_model, int do_check);
/* Frees what a store's run opened, keeping the model, the codec and the options for the next. */
void ingest_store_reset(ingest *g);

/* ingest_shards.c */
/* A sharded store g->o.store: its manifest created or read, the chosen shards' runs one after
 * the other (ingest_run_store on each shard folder), then the set's check when --check was given
 * without --shard. Returns the worst exit status. */
int ingest_shards_run(ingest *g, lz_corpus *cp, int argc, char **argv, int need_model);

/* ingest_record.c */
/* The slot of id (inserted with ordinal -1 when absent and insert), NULL when absent or out of memory. */
id_slot *ingest_id_map_get(id_map *m, const char *id, int insert);
void ingest_id_map_free(id_map *m);
/* One corpus record (where: file and line, for messages) into the batch; 0 or -1 (g->err). */
int ingest_do_record(ingest *g, const lz_corpus_record *r, const id_map *ids_seen, const char *where);

/* ingest_batch.c */
void ingest_warnf(const ingest *g, const char *fmt, ...); /* a warning line on stderr (unless --quiet) */
int ingest_push_ptr(char ***v, int *n, int *cap, const char *s); /* appends a copy of s */
void ingest_batch_free(ingest *g);
void ingest_pend_doc_free(pend_doc *d); /* its strings and token ids */
/* The KV eviction of an n-token document under this run's policy: its spec ("" when whole), keys stored. */
int64_t ingest_doc_kv(const ingest *g, int n, char spec[LZ_KVPOLICY_SPEC_MAX]);
/* The batch's documents encoded, its payloads handed to the writer, the batch before committed. 0 or -1. */
int ingest_flush(ingest *g);
int ingest_finish_commits(ingest *g); /* the last batch's rows (after the last flush, or when a run stops) */
void ingest_progress(ingest *g, int force); /* the progress line, at most 4 times a second (force: now) */
int64_t ingest_raw_bytes(const ingest *g, int n); /* an n-token document's KV before compression */
int ingest_encode_doc(ingest *g, int di); /* document di of the batch: encoded now, or queued for flush */
void ingest_setup_encoder(ingest *g, lz_encoder *e); /* the store's KV dtype, this run's KV policy and scorers on e */
/* Queues batch document d's new payload (the batch owns blob from then on). 0 or -1. */
int ingest_queue_payload(ingest *g, pend_doc *d, void *blob, size_t len);

/* ingest_jobs.c */
int ingest_run_jobs(ingest *g); /* par: the batch's queued jobs encoded and their payloads queued; 0 or -1 */
/* p's jobs encoded on its threads (its backend's passes first, then the rest); each job gets its
 * blob or its err. 0, or -1 with p->err when the device failed (its jobs not run keep no blob). */
int ingest_pipe_run(job_pipe *p);
/* The batch's jobs' payloads queued in batch order (as one at a time would), each job's blob
 * handed to the batch; a job without one fails the batch, naming its document (and pipeline). */
int ingest_queue_jobs(ingest *g);

/* ingest_engines.c */
/* The deal of n jobs of tokens[j] tokens to n_eng pipelines: longest first (ties: the earlier
 * job), each to the pipeline with the fewest tokens so far (ties: the lower index), into
 * engine_of[j]. No pipeline ends with more than the longest job above another. */
void ingest_deal(const int *tokens, int n, int n_eng, int *engine_of);
/* n pipelines: pipeline i over backend b[i] (each its own context, on device devs[i]), or with
 * b NULL on the CPU (each its own CPU reference of passes when LAZY_INGEST_REF_PASSES is set);
 * their encoders copied from g->enc, the host threads shared among them. 0 or -1 (g->err). */
int ingest_engines_open(ingest *g, int n, const lz_encode_backend *b, const int *devs);
void ingest_engines_free(ingest *g);
/* The batch's jobs dealt (ingest_deal), run by the pipelines side by side (a host thread
 * each), then queued in batch order for the one writer (ingest_queue_jobs). 0 or -1 (g->err,
 * naming the pipeline and the document). */
int ingest_engines_run(ingest *g);
/* Pipeline i's name ("GPU 2", "CPU") into buf. */
const char *ingest_engine_name(const ingest *g, int i, char *buf, size_t n);

/* ingest_gpus.c: --gpu, --gpus */
/* One GPU engine a listed device (--gpus; --gpu: one on the current device), their weights
 * uploaded side by side, each for passes or documents of up to rows tokens. 0, or -1 with
 * g->err naming the device. */
int ingest_gpus_open(ingest *g, int rows);
void ingest_gpus_free(ingest *g);
/* Every device context: the prefix's KV, and fp8 quantisation on the device when the store is
 * fp8 and the planes are taken (g->backend.fetch_planes). 0 or -1 (g->err). */
int ingest_gpus_setup(ingest *g);
/* The encode backend of device context c (this run's pass size and switches). */
lz_encode_backend ingest_gpu_backend(const ingest *g, ingest_gpu *c);

/* ingest_report.c */
void ingest_issues_free(issue_list *l);
int ingest_repair(ingest *g, issue_list *l, int64_t *n_fixed, int64_t *n_removed);
void ingest_summary(ingest *g, const char *status, int64_t n_docs_total, const lz_store_gc_stats *gc,
                    const lz_store_check_stats *cs, int64_t fixed, int64_t removed_by_repair, int did_ingest,
                    int did_check);
/* lz_store_check's callback: each issue printed (unless quiet) and copied into the issue_list ctx. */
int ingest_on_issue(const lz_store_issue *is, void *ctx);

#endif /* INGEST_RUN_H */
