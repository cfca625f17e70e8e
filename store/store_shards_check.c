/* store_shards_check.c - lz_store_check of a sharded store (store.h): every
 * shard checked as a store (payloads present, valid checksums, the model),
 * its issues named by shard with global row ids, then the set itself:
 *  - every row in the shard its source id hashes to, and in no other shard
 *    (MISPLACED: a document present twice, or where no reader looks for it);
 *  - every shard's last ingest run finished (SHARD: a task killed or still
 *    running leaves its shard incomplete; the manifest, the shard.id files and
 *    every shard's model were checked when the store was opened and bound);
 *  - no folder beside the manifest's shards (SHARD: a stray shard-NNNN).
 * It writes nothing. */
#include "store/store.h"
#include "store/store_impl.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "base/error.h"

typedef struct {
    lz_store *s;
    int shard;
    int (*fn)(const lz_store_issue *is, void *ctx);
    void *ctx;
    lz_store_check_stats *st;
    int stopped;
    char *err;
    size_t errlen;
} set_ctx;

/* A shard's issue, renamed for the set: global row id, the shard in the message. */
static int shard_issue(const lz_store_issue *is, void *p)
{
    set_ctx *c = p;
    char msg[1024];
    snprintf(msg, sizeof msg, "shard %d of %d: %s", c->shard, c->s->n_shards, is->message);
    lz_store_issue g = *is;
    if (g.doc_id > 0) g.doc_id = g.doc_id * c->s->n_shards + c->shard;
    g.message = msg;
    if (c->fn && c->fn(&g, c->ctx)) c->stopped = 1;
    return c->stopped;
}

static int set_issue(set_ctx *c, lz_store_issue_kind kind, int64_t id, const char *ext_id, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st->n_issues++;
    lz_store_issue is = { kind, id, ext_id, NULL, 0, msg, "" };
    if (c->fn && c->fn(&is, c->ctx)) c->stopped = 1;
    return c->stopped;
}

/* One row of shard c->shard: where it belongs, and whether another shard holds its id too. */
static int place_row(int64_t id, const char *ext_id, const char *source_id, void *p)
{
    set_ctx *c = p;
    const int N = c->s->n_shards, i = c->shard, home = lz_shards_of(source_id, N);
    const int64_t g = id * N + i;
    if (home != i &&
        set_issue(c, LZ_STORE_ISSUE_MISPLACED, g, ext_id,
                  "shard %d of %d holds document '%s' of record '%s', which belongs in shard %d: no reader looks for it "
                  "here (lazyingest --shard %d/%d --prune CORPUS removes it, --shard %d/%d adds it where it belongs)",
                  i, N, ext_id, source_id, home, i, N, home, N))
        return 1;
    /* the shards where a lookup of ext_id looks (its own hash, its source's when it is a passage id) */
    int cand[2];
    const int nc = lz_shards_candidates(ext_id, N, cand);
    const int here_found = cand[0] == i || (nc > 1 && cand[1] == i);
    for (int k = 0; k < nc; k++) {
        const int j = cand[k];
        if (j == i) continue;
        if (here_found && j < i) continue; /* both rows are where lookups look: reported once, from the lower shard */
        lz_meta_doc d;
        char e2[512];
        int rc = lz_meta_doc_find(c->s->shard[j]->meta, ext_id, &d, NULL, 0, e2, sizeof e2);
        if (rc == LZ_OK) {
            if (set_issue(c, LZ_STORE_ISSUE_MISPLACED, g, ext_id, "document '%s' is in shard %d and in shard %d of %d: "
                          "a document must be in one shard", ext_id, i, j, N))
                return 1;
        } else if (rc != LZ_ENOTFOUND) {
            snprintf(c->err, c->errlen, "store %s: shard %d: %s", c->s->dir, j, e2);
            return -1;
        }
    }
    return 0;
}

/* 1 when another process holds dir's writer lock (an ingest is writing it now). */
static int writer_active(const char *dir)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/writer.lock", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    int held = flock(fd, LOCK_EX | LOCK_NB) != 0;
    close(fd); /* releases it when taken */
    return held;
}

/* Shard i's last ingest run: it must have finished (ok, or partial: some records bad). */
static int check_runs(set_ctx *c, int i)
{
    const int N = c->s->n_shards;
    char dir[4200], what[64];
    lz_shards_dir(c->s->dir, i, dir, sizeof dir);
    snprintf(what, sizeof what, "(shard %d of %d)", i, N);
    lz_meta_run_info r;
    char e2[512];
    int rc = lz_meta_run_last(c->s->shard[i]->meta, &r, e2, sizeof e2);
    if (rc == LZ_ENOTFOUND)
        return set_issue(c, LZ_STORE_ISSUE_SHARD, -1, what, "shard %d of %d (%s) was never ingested: run lazyingest "
                         "--shard %d/%d --store %s CORPUS", i, N, dir, i, N, c->s->dir);
    if (rc) {
        snprintf(c->err, c->errlen, "store %s: shard %d: %s", c->s->dir, i, e2);
        return -1;
    }
    if (!strcmp(r.status, "ok") || !strcmp(r.status, "partial")) return 0;
    if (!strcmp(r.status, "running") && writer_active(dir))
        return set_issue(c, LZ_STORE_ISSUE_SHARD, -1, what, "shard %d of %d (%s): an ingest is writing it now (run %lld, "
                         "started %s): check again once it is done", i, N, dir, (long long)r.id, r.started_at);
    return set_issue(c, LZ_STORE_ISSUE_SHARD, -1, what, "shard %d of %d (%s): its last ingest (run %lld, started %s) %s: "
                     "the shard may lack documents; run lazyingest --shard %d/%d --store %s CORPUS again (it resumes)",
                     i, N, dir, (long long)r.id, r.started_at,
                     !strcmp(r.status, "failed") ? "failed" : "was stopped before it finished", i, N, c->s->dir);
}

/* Folders named shard-* that are none of the manifest's shards. */
static int check_folders(set_ctx *c)
{
    DIR *d = opendir(c->s->dir);
    if (!d) return 0; /* the shards were opened through it: nothing to list is no finding */
    struct dirent *e;
    int stop = 0;
    while (!stop && (e = readdir(d))) {
        if (strncmp(e->d_name, "shard-", 6) != 0) continue;
        char *end;
        long k = strtol(e->d_name + 6, &end, 10);
        char want[32];
        snprintf(want, sizeof want, "shard-%04ld", k);
        if (!*end && k >= 0 && k < c->s->n_shards && !strcmp(want, e->d_name)) continue;
        stop = set_issue(c, LZ_STORE_ISSUE_SHARD, -1, e->d_name, "folder %s/%s is no shard of this set (the manifest "
                         "has %d shards: shard-0000 .. shard-%04d)", c->s->dir, e->d_name, c->s->n_shards,
                         c->s->n_shards - 1);
    }
    closedir(d);
    return stop;
}

int lz_store_sh_check(lz_store *s, int (*fn)(const lz_store_issue *is, void *ctx), void *ctx,
                      lz_store_check_stats *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    if (!s->bound) return lz_fail(err, errlen, LZ_EINVAL, "store %s: check before binding a model", s->dir);
    set_ctx c = { s, 0, fn, ctx, st, 0, err, errlen };
    for (int i = 0; i < s->n_shards && !c.stopped; i++) { /* each shard as a store */
        lz_store_check_stats one;
        c.shard = i;
        int rc = lz_store_check(s->shard[i], shard_issue, &c, &one, err, errlen);
        if (rc) {
            char inner[2048];
            snprintf(inner, sizeof inner, "%s", err);
            return lz_fail(err, errlen, rc, "store %s: shard %d of %d: %s", s->dir, i, s->n_shards, inner);
        }
        st->n_docs += one.n_docs;
        st->n_ok += one.n_ok;
        st->n_issues += one.n_issues;
        st->n_payloads += one.n_payloads;
        st->n_unreferenced += one.n_unreferenced;
        st->kv_damaged |= one.kv_damaged;
    }
    for (int i = 0; i < s->n_shards && !c.stopped; i++) { /* the set: placement, runs */
        c.shard = i;
        int rc = lz_meta_doc_ids_foreach(s->shard[i]->meta, place_row, &c, err, errlen);
        if (rc < 0) return LZ_EIO;
        if (rc > 0 && !c.stopped) return lz_store_from_meta(rc);
        if (!c.stopped && check_runs(&c, i) < 0) return LZ_EIO;
    }
    if (!c.stopped) check_folders(&c);
    return LZ_OK;
}
