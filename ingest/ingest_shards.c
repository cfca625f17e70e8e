/* ingest_shards.c - lazyingest on a sharded store (store/shards.h,
 * ingest/ingest_run.h): the manifest created (by the first run, or whichever
 * task of a job array comes first) or read and checked against this run's
 * model, shard count and KV dtype; then each chosen shard's folder claimed
 * and run as a store of its own over its records only (ingest_run_store with
 * g->shard set), one shard after the other with the model loaded once; then,
 * for --check without --shard, the whole set checked as one store. Each
 * shard's run is the crash-safe incremental run of a plain store, so a task
 * killed mid-way is completed by running it again. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/cli.h"
#include "ingest/ingest_run.h"

/* The worse of two exit statuses: a runtime error, then problems found, then skipped records. */
static int worse(int a, int b)
{
    static const int rank[] = { [EXIT_OK] = 0, [EXIT_SKIPPED] = 1, [EXIT_CHECK] = 2, [EXIT_ERR] = 3 };
    const int ra = a >= 0 && a <= EXIT_CHECK ? rank[a] : 3, rb = b >= 0 && b <= EXIT_CHECK ? rank[b] : 3;
    return ra >= rb ? a : b;
}

/* The set as one store, read-only beside any writer: each shard's check and the set's own. */
static int set_check(ingest *g)
{
    int st = lz_store_open(g->o.store, LZ_STORE_RDONLY, &g->s, g->err, sizeof g->err);
    if (!st) st = lz_store_bind_recorded(g->s, g->err, sizeof g->err);
    if (st) {
        fprintf(stderr, "lazyingest: check: %s\n", g->err);
        return EXIT_ERR;
    }
    lz_store_check_stats cs;
    issue_list l = { g, NULL, 0, 0, 0 };
    int status = EXIT_OK;
    if (lz_store_check(g->s, ingest_on_issue, &l, &cs, g->err, sizeof g->err)) {
        fprintf(stderr, "lazyingest: check: %s\n", g->err);
        status = EXIT_ERR;
    } else if (l.n) {
        status = EXIT_CHECK;
    }
    ingest_issues_free(&l);
    int64_t n_total = 0;
    lz_store_doc_count(g->s, &n_total, g->err, sizeof g->err);
    ingest_summary(g, status == EXIT_OK ? "ok" : status == EXIT_CHECK ? "problems" : "failed", n_total, NULL, &cs, 0, 0,
                   0, 1);
    return status;
}

int ingest_shards_run(ingest *g, lz_corpus *cp, int argc, char **argv, int need_model)
{
    options *o = &g->o;
    const char *root = o->store;
    lz_shards_manifest man;
    int rc;
    if (cp) { /* an ingest: the manifest made by the first run, or the one there (same count, model, dtype) */
        int n = o->n_shards;
        if (!n && (rc = lz_shards_read(root, &man, g->err, sizeof g->err))) {
            fprintf(stderr, "lazyingest: %s\n", g->err);
            return EXIT_ERR;
        }
        rc = lz_shards_create(root, n ? n : man.n_shards, g->m->fingerprint, o->kv_dtype, &man, g->err, sizeof g->err);
    } else if ((rc = lz_shards_read(root, &man, g->err, sizeof g->err)) == LZ_ENOTFOUND) {
        snprintf(g->err, sizeof g->err, "store %s is not sharded (no %s): leave out --shards and --shard", root,
                 LZ_SHARDS_MANIFEST);
    } else if (!rc && o->n_shards && o->n_shards != man.n_shards) {
        snprintf(g->err, sizeof g->err, "store %s has %d shards, not %d", root, man.n_shards, o->n_shards);
        rc = LZ_EINVAL;
    } else if (!rc && need_model && strcmp(g->m->fingerprint_hex, man.model)) {
        snprintf(g->err, sizeof g->err, "store %s was built with model %.16s; refusing model %.16s (%s)", root,
                 man.model, g->m->fingerprint_hex, o->model);
        rc = LZ_EMODEL;
    }
    if (rc) {
        fprintf(stderr, "lazyingest: %s\n", g->err);
        return rc == LZ_EIO || rc == LZ_ENOMEM ? EXIT_ERR : LZ_EXIT_USAGE;
    }
    if (!o->kv_dtype) o->kv_dtype = man.kv_dtype; /* a new shard gets the set's */
    int status = EXIT_OK;
    const int per_shard = cp || o->repair || o->gc || (o->check && o->shard >= 0);
    const int first = o->shard >= 0 ? o->shard : 0, last = o->shard >= 0 ? o->shard : man.n_shards - 1;
    for (int i = first; per_shard && i <= last; i++) {
        char dir[4200], meta[4300];
        lz_shards_dir(root, i, dir, sizeof dir);
        snprintf(meta, sizeof meta, "%s/meta.sqlite", dir);
        if (cp) rc = lz_shards_claim(root, &man, i, g->err, sizeof g->err);
        else if (access(meta, F_OK) != 0)
            rc = LZ_ENOTFOUND, snprintf(g->err, sizeof g->err, "store %s: shard %d of %d is missing (%s not found): its "
                                        "ingest has not run yet", root, i, man.n_shards, meta);
        else rc = lz_shards_check_id(root, &man, i, g->err, sizeof g->err);
        if (!rc && cp && i > first && lz_corpus_rewind(cp, g->err, sizeof g->err)) rc = LZ_EIO;
        if (rc) {
            fprintf(stderr, "lazyingest: %s\n", g->err);
            status = worse(status, EXIT_ERR);
            if (rc == LZ_EIO && cp) break; /* the corpus itself failed */
            continue;
        }
        o->store = dir;
        g->shard = i;
        g->n_shards = man.n_shards;
        /* under --shard the shard's own check; else --repair's (the set's check follows) */
        status = worse(status, ingest_run_store(g, cp, argc, argv, need_model, o->check && (o->shard >= 0 || o->repair)));
        ingest_store_reset(g);
        o->store = root;
    }
    if (o->check && o->shard < 0) status = worse(status, set_check(g));
    return status;
}
