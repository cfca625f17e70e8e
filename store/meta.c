/* meta.c - SQLite metadata of a store: open in WAL mode, apply the embedded
 * migrations (store/schema_sql.c), then every statement prepared once
 * (SQLITE_PREPARE_PERSISTENT) and reused. Every sqlite3 return is checked.
 */
#include "store/meta.h"

#include <sys/statvfs.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "store/fts_bm25.h"

enum {
    ST_BEGIN, ST_COMMIT, ST_ROLLBACK,
    ST_MODEL_GET, ST_MODEL_INSERT, ST_MODEL_SET_PREFIX,
    ST_DOC_FIND, ST_DOC_INSERT, ST_DOC_UPDATE, ST_DOC_SET_PAYLOAD, ST_DOC_TOUCH, ST_SOURCE_TOUCH,
    ST_DOC_DELETE, ST_SOURCE_ROWS, ST_SOURCE_PRUNE, ST_PRUNE, ST_DOC_COUNT, ST_DOC_ALL, ST_KEY_DOC, ST_KEY_MODEL,
    ST_SEARCH, ST_HIT, ST_HITS_GET, ST_DOC_TOKENS, ST_DOC_TITLE, ST_TOP, ST_TOP_ALL,
    ST_RUN_ABORT_STALE, ST_RUN_BEGIN, ST_RUN_END,
    ST_FTS_TOTALS, ST_FTS_HITS, ST_SEARCH_IDF, ST_DOC_IDS, ST_RUN_LAST,
    ST_COUNT
};

#define NOW "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"

static const char *const SQL[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_MODEL_GET] = "SELECT id, fingerprint, architecture, n_layers, n_kv_heads, head_dim, rope_layout,"
                     " rope_theta, rope_scaling, prefix_tokens, prefix_key, source_path, kv_dtype"
                     " FROM models ORDER BY id LIMIT 1",
    [ST_MODEL_INSERT] = "INSERT INTO models (fingerprint, architecture, n_layers, n_kv_heads, head_dim,"
                        " rope_layout, rope_theta, rope_scaling, prefix_tokens, prefix_key, source_path,"
                        " kv_dtype) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    [ST_MODEL_SET_PREFIX] = "UPDATE models SET prefix_tokens = ?2, prefix_key = ?3, source_path = ?4"
                            " WHERE id = ?1",
    [ST_DOC_FIND] = "SELECT id, source_id, passage, content_hash, payload_key, n_tokens, model_id,"
                    " raw_bytes, stored_bytes, seen_run, source_hash, kv_policy, kv_budget, kv_window, kv_spec, kv_kept"
                    " FROM documents WHERE ext_id = ?1",
    [ST_DOC_INSERT] = "INSERT INTO documents (ext_id, source_id, passage, title, text, content_hash,"
                      " token_ids, n_tokens, model_id, payload_key, raw_bytes, stored_bytes, seen_run,"
                      " source_hash, kv_policy, kv_budget, kv_window, kv_spec, kv_kept)"
                      " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
    [ST_DOC_UPDATE] = "UPDATE documents SET ext_id = ?1, source_id = ?2, passage = ?3, title = ?4,"
                      " text = ?5, content_hash = ?6, token_ids = ?7, n_tokens = ?8, model_id = ?9,"
                      " payload_key = ?10, raw_bytes = ?11, stored_bytes = ?12, seen_run = ?13,"
                      " source_hash = ?14, kv_policy = ?15, kv_budget = ?16, kv_window = ?17, kv_spec = ?18, kv_kept = ?19,"
                      " updated_at = " NOW " WHERE id = ?20",
    [ST_DOC_SET_PAYLOAD] = "UPDATE documents SET payload_key = ?2, raw_bytes = ?3, stored_bytes = ?4,"
                           " updated_at = " NOW " WHERE id = ?1",
    [ST_DOC_TOUCH] = "UPDATE documents SET seen_run = ?2 WHERE id = ?1",
    [ST_SOURCE_TOUCH] = "UPDATE documents SET seen_run = ?2 WHERE source_id = ?1",
    [ST_DOC_DELETE] = "DELETE FROM documents WHERE id = ?1",
    [ST_SOURCE_ROWS] = "SELECT id, ext_id, passage, source_hash, payload_key, model_id, token_ids, n_tokens"
                       " FROM documents WHERE source_id = ?1 ORDER BY passage",
    [ST_SOURCE_PRUNE] = "DELETE FROM documents WHERE source_id = ?1 AND seen_run IS NOT ?2",
    [ST_PRUNE] = "DELETE FROM documents WHERE seen_run IS NOT ?1",
    [ST_DOC_COUNT] = "SELECT count(*) FROM documents",
    [ST_DOC_ALL] = "SELECT id, ext_id, source_id, passage, title, text, content_hash, token_ids,"
                   " n_tokens, model_id, payload_key, raw_bytes, stored_bytes, seen_run, kv_spec"
                   " FROM documents ORDER BY id",
    [ST_KEY_DOC] = "SELECT 1 FROM documents WHERE payload_key = ?1 LIMIT 1",
    [ST_KEY_MODEL] = "SELECT 1 FROM models WHERE prefix_key = ?1 LIMIT 1",
    [ST_SEARCH] = "SELECT d.id, d.ext_id, d.title, bm25(documents_fts) AS s FROM documents_fts"
                  " JOIN documents d ON d.id = documents_fts.rowid"
                  " WHERE documents_fts MATCH ?1 ORDER BY s, d.ext_id LIMIT ?2",
    [ST_HIT] = "INSERT INTO access_stats (doc_id, hits, last_hit) VALUES (?1, 1, " NOW ")"
               " ON CONFLICT(doc_id) DO UPDATE SET hits = hits + 1, last_hit = excluded.last_hit",
    [ST_HITS_GET] = "SELECT hits FROM access_stats WHERE doc_id = ?1",
    [ST_DOC_TITLE] = "SELECT title FROM documents WHERE id = ?1",
    [ST_DOC_TOKENS] = "SELECT token_ids, n_tokens FROM documents WHERE id = ?1",
    [ST_TOP] = "SELECT a.doc_id, a.hits, d.payload_key, d.n_tokens FROM access_stats a JOIN documents d ON d.id = a.doc_id"
               " ORDER BY a.hits DESC, a.doc_id LIMIT ?1",
    [ST_TOP_ALL] = "SELECT d.id, COALESCE(a.hits, 0) AS h, d.payload_key, d.n_tokens FROM documents d"
                   " LEFT JOIN access_stats a ON a.doc_id = d.id ORDER BY h DESC, d.id LIMIT ?1",
    [ST_RUN_ABORT_STALE] = "UPDATE ingest_runs SET status = 'aborted' WHERE status = 'running'",
    [ST_RUN_BEGIN] = "INSERT INTO ingest_runs (args, model_id) VALUES (?1, ?2)",
    [ST_RUN_END] = "UPDATE ingest_runs SET ended_at = " NOW ", status = ?2, n_added = ?3,"
                   " n_updated = ?4, n_unchanged = ?5, n_removed = ?6, n_skipped = ?7, n_tokens = ?8,"
                   " raw_bytes = ?9, stored_bytes = ?10, n_garbage = ?11 WHERE id = ?1",
    /* BM25 with statistics from outside (store/fts_bm25.h): a sharded store's global scoring */
    [ST_FTS_TOTALS] = "SELECT lz_fts_totals(documents_fts) FROM documents_fts LIMIT 1",
    [ST_FTS_HITS] = "SELECT lz_fts_hits(documents_fts) FROM documents_fts WHERE documents_fts MATCH ?1 LIMIT 1",
    [ST_SEARCH_IDF] = "SELECT d.id, d.ext_id, d.title, lz_bm25(documents_fts, ?3) AS s FROM documents_fts"
                      " JOIN documents d ON d.id = documents_fts.rowid"
                      " WHERE documents_fts MATCH ?1 ORDER BY s, d.ext_id LIMIT ?2",
    [ST_DOC_IDS] = "SELECT id, ext_id, source_id FROM documents ORDER BY id",
    [ST_RUN_LAST] = "SELECT id, status, started_at, COALESCE(ended_at, '') FROM ingest_runs ORDER BY id DESC LIMIT 1",
};

struct lz_meta {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
    char path[4096];
    int rdonly;
};

static int sql_status(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_NOMEM: return LZ_ENOMEM;
    case SQLITE_CONSTRAINT: return LZ_ECONSTRAINT;
    default: return LZ_EIO;
    }
}

static int sql_fail(lz_meta *m, char *err, size_t errlen, int which, int rc)
{
    /* a full file system: said in those words (SQLite's "database or disk is full", or an I/O
     * error from a short write), with what is free there */
    struct statvfs vs;
    if (((rc & 0xff) == SQLITE_FULL || (rc & 0xff) == SQLITE_IOERR) && statvfs(m->path, &vs) == 0 &&
        ((rc & 0xff) == SQLITE_FULL || (uint64_t)vs.f_bavail * vs.f_frsize < (1u << 20)))
        return lz_fail(err, errlen, sql_status(rc),
                       "SQLite %s: no space left on device (%.1f MB free on its file system; SQLite said: %s, in: "
                       "%.60s). Free some space and run again: what was committed is kept",
                       m->path, (double)vs.f_bavail * vs.f_frsize / 1e6,
                       m->db ? sqlite3_errmsg(m->db) : sqlite3_errstr(rc), which >= 0 ? SQL[which] : "open");
    return lz_fail(err, errlen, sql_status(rc), "SQLite %s: %s (in: %.80s)", m->path,
                m->db ? sqlite3_errmsg(m->db) : sqlite3_errstr(rc), which >= 0 ? SQL[which] : "open");
}

/* Resets and clears st, returning it ready to bind. */
static sqlite3_stmt *stmt(lz_meta *m, int which)
{
    sqlite3_stmt *s = m->st[which];
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return s;
}

/* Steps a statement that returns no rows; resets it. */
static int run_done(lz_meta *m, int which, char *err, size_t errlen)
{
    int rc = sqlite3_step(m->st[which]);
    if (rc != SQLITE_DONE) {
        int st = sql_fail(m, err, errlen, which, rc);
        sqlite3_reset(m->st[which]);
        return st;
    }
    sqlite3_reset(m->st[which]);
    return LZ_OK;
}

static int exec(lz_meta *m, const char *sql, char *err, size_t errlen)
{
    char *msg = NULL;
    int rc = sqlite3_exec(m->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        int st = lz_fail(err, errlen, sql_status(rc), "SQLite %s: %s (in: %.60s)", m->path,
                      msg ? msg : sqlite3_errstr(rc), sql);
        sqlite3_free(msg);
        return st;
    }
    return LZ_OK;
}

int lz_meta_user_version(lz_meta *m)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(m->db, "PRAGMA user_version", -1, &s, NULL) != SQLITE_OK) return -1;
    int v = sqlite3_step(s) == SQLITE_ROW ? sqlite3_column_int(s, 0) : -1;
    sqlite3_finalize(s);
    return v;
}

/* Applies the migrations above the database's version up to target. */
static int migrate(lz_meta *m, int target, char *err, size_t errlen)
{
    int latest = lz_meta_migrations[lz_meta_n_migrations - 1].version;
    int v = lz_meta_user_version(m);
    if (v < 0) return sql_fail(m, err, errlen, -1, sqlite3_errcode(m->db));
    if (v > latest)
        return lz_fail(err, errlen, LZ_ESCHEMA,
                    "%s: schema version %d is newer than this build knows (%d); use a newer lazyingest",
                    m->path, v, latest);
    if (v >= target) return LZ_OK;
    if (m->rdonly && v == 0) /* the migrations are transactions: a creation stopped (a full disk) left none */
        return lz_fail(err, errlen, LZ_ESCHEMA,
                    "%s: no metadata yet (the store's creation did not complete); a lazyingest run with a "
                    "corpus creates it", m->path);
    if (m->rdonly)
        return lz_fail(err, errlen, LZ_ESCHEMA,
                    "%s: schema version %d, this build needs %d; open it once read-write to migrate",
                    m->path, v, latest);
    for (int i = 0; i < lz_meta_n_migrations; i++) {
        const lz_meta_migration *mg = &lz_meta_migrations[i];
        if (mg->version <= v || mg->version > target) continue;
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", mg->version);
        int rc = exec(m, "BEGIN IMMEDIATE", err, errlen);
        if (rc) return rc;
        /* Another process may have migrated while we waited for the lock. */
        int now = lz_meta_user_version(m);
        if (now >= mg->version) {
            exec(m, "ROLLBACK", NULL, 0);
            continue;
        }
        rc = exec(m, mg->sql, err, errlen);
        if (!rc) rc = exec(m, pragma, err, errlen);
        if (!rc) rc = exec(m, "COMMIT", err, errlen);
        if (rc) {
            exec(m, "ROLLBACK", NULL, 0);
            size_t k = strlen(err);
            if (k < errlen) snprintf(err + k, errlen - k, " [migration %s]", mg->file);
            return LZ_ESCHEMA;
        }
    }
    return LZ_OK;
}

int lz_meta_open(const char *path, int flags, lz_meta **out, char *err, size_t errlen)
{
    *out = NULL;
    lz_meta *m = calloc(1, sizeof *m);
    if (!m) return lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    snprintf(m->path, sizeof m->path, "%s", path);
    m->rdonly = (flags & LZ_META_RDONLY) != 0;
    int oflags = m->rdonly ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    int rc = sqlite3_open_v2(path, &m->db, oflags | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        int st = lz_fail(err, errlen, sql_status(rc), "SQLite %s: cannot open: %s", path,
                      m->db ? sqlite3_errmsg(m->db) : sqlite3_errstr(rc));
        lz_meta_close(m);
        return st;
    }
    rc = sqlite3_busy_timeout(m->db, 10000);
    if (rc != SQLITE_OK) {
        int st = sql_fail(m, err, errlen, -1, rc);
        lz_meta_close(m);
        return st;
    }
    int st = LZ_OK;
    rc = lz_fts_bm25_register(m->db); /* before the statements that call its functions are prepared */
    if (rc != SQLITE_OK) st = lz_fail(err, errlen, LZ_EIO, "SQLite %s: cannot register the BM25 functions: %s", path,
                                      sqlite3_errstr(rc));
    if (!st && !m->rdonly) st = exec(m, "PRAGMA journal_mode = WAL", err, errlen);
    if (!st) st = exec(m, "PRAGMA synchronous = FULL", err, errlen);
    if (!st) st = migrate(m, lz_meta_migrations[lz_meta_n_migrations - 1].version, err, errlen);
    for (int i = 0; !st && i < ST_COUNT; i++) {
        rc = sqlite3_prepare_v3(m->db, SQL[i], -1, SQLITE_PREPARE_PERSISTENT, &m->st[i], NULL);
        if (rc != SQLITE_OK) st = sql_fail(m, err, errlen, i, rc);
    }
    if (st) {
        lz_meta_close(m);
        return st;
    }
    *out = m;
    return LZ_OK;
}

int lz_meta_create_at_version(const char *path, int version, char *err, size_t errlen)
{
    lz_meta m;
    memset(&m, 0, sizeof m);
    snprintf(m.path, sizeof m.path, "%s", path);
    int rc = sqlite3_open_v2(path, &m.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    int st = rc == SQLITE_OK ? exec(&m, "PRAGMA journal_mode = WAL", err, errlen)
                             : lz_fail(err, errlen, LZ_EIO, "SQLite %s: cannot open", path);
    if (!st) st = migrate(&m, version, err, errlen);
    sqlite3_close(m.db);
    return st;
}

void lz_meta_close(lz_meta *m)
{
    if (!m) return;
    for (int i = 0; i < ST_COUNT; i++) sqlite3_finalize(m->st[i]);
    sqlite3_close(m->db);
    free(m);
}

int lz_meta_begin(lz_meta *m, char *err, size_t errlen) { return run_done(m, ST_BEGIN, err, errlen); }
int lz_meta_commit(lz_meta *m, char *err, size_t errlen) { return run_done(m, ST_COMMIT, err, errlen); }
void lz_meta_rollback(lz_meta *m)
{
    if (sqlite3_get_autocommit(m->db)) return; /* no transaction open */
    run_done(m, ST_ROLLBACK, NULL, 0);
}

/* ---- helpers for blobs of int32 ---- */

static int bind_ids(sqlite3_stmt *s, int col, const int *ids, int n)
{
    /* int32 little-endian; x86-64 and aarch64 are little-endian hosts. */
    return sqlite3_bind_blob(s, col, n ? (const void *)ids : (const void *)"", (int)(n * sizeof(int)),
                             SQLITE_STATIC);
}

static void copy_text(char *dst, size_t cap, const unsigned char *src)
{
    snprintf(dst, cap, "%s", src ? (const char *)src : "");
}

static void copy_blob(uint8_t *dst, size_t n, sqlite3_stmt *s, int col)
{
    memset(dst, 0, n);
    int len = sqlite3_column_bytes(s, col);
    const void *p = sqlite3_column_blob(s, col);
    if (p) memcpy(dst, p, (size_t)len < n ? (size_t)len : n);
}

/* ---- models ---- */

int lz_meta_model_get(lz_meta *m, lz_meta_model *o, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    sqlite3_stmt *s = stmt(m, ST_MODEL_GET);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) {
        sqlite3_reset(s);
        return lz_fail(err, errlen, LZ_ENOTFOUND, "%s: no model recorded", m->path);
    }
    if (rc != SQLITE_ROW) {
        int st = sql_fail(m, err, errlen, ST_MODEL_GET, rc);
        sqlite3_reset(s);
        return st;
    }
    o->id = sqlite3_column_int64(s, 0);
    copy_text(o->fingerprint, sizeof o->fingerprint, sqlite3_column_text(s, 1));
    copy_text(o->arch, sizeof o->arch, sqlite3_column_text(s, 2));
    o->n_layers = sqlite3_column_int(s, 3);
    o->n_kv_heads = sqlite3_column_int(s, 4);
    o->head_dim = sqlite3_column_int(s, 5);
    copy_text(o->rope_layout, sizeof o->rope_layout, sqlite3_column_text(s, 6));
    o->rope_theta = sqlite3_column_double(s, 7);
    copy_text(o->rope_scaling, sizeof o->rope_scaling, sqlite3_column_text(s, 8));
    int nb = sqlite3_column_bytes(s, 9);
    const void *p = sqlite3_column_blob(s, 9);
    o->n_prefix = nb / (int)sizeof(int);
    o->prefix_tokens = malloc(nb ? (size_t)nb : 1);
    if (!o->prefix_tokens) {
        sqlite3_reset(s);
        return lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    }
    if (nb) memcpy(o->prefix_tokens, p, (size_t)nb);
    copy_blob(o->prefix_key, LZ_META_KEY_LEN, s, 10);
    copy_text(o->source_path, sizeof o->source_path, sqlite3_column_text(s, 11));
    o->kv_dtype = sqlite3_column_int(s, 12);
    sqlite3_reset(s);
    return LZ_OK;
}

int lz_meta_model_insert(lz_meta *m, lz_meta_model *o, char *err, size_t errlen)
{
    sqlite3_stmt *s = stmt(m, ST_MODEL_INSERT);
    sqlite3_bind_text(s, 1, o->fingerprint, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, o->arch, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 3, o->n_layers);
    sqlite3_bind_int(s, 4, o->n_kv_heads);
    sqlite3_bind_int(s, 5, o->head_dim);
    sqlite3_bind_text(s, 6, o->rope_layout, -1, SQLITE_STATIC);
    sqlite3_bind_double(s, 7, o->rope_theta);
    sqlite3_bind_text(s, 8, o->rope_scaling, -1, SQLITE_STATIC);
    bind_ids(s, 9, o->prefix_tokens, o->n_prefix);
    sqlite3_bind_blob(s, 10, o->prefix_key, LZ_META_KEY_LEN, SQLITE_STATIC);
    sqlite3_bind_text(s, 11, o->source_path, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 12, o->kv_dtype);
    int rc = run_done(m, ST_MODEL_INSERT, err, errlen);
    if (!rc) o->id = sqlite3_last_insert_rowid(m->db);
    return rc;
}

int lz_meta_model_set_prefix(lz_meta *m, int64_t id, const int *prefix, int n_prefix,
                             const uint8_t key[LZ_META_KEY_LEN], const char *source_path,
                             char *err, size_t errlen)
{
    sqlite3_stmt *s = stmt(m, ST_MODEL_SET_PREFIX);
    sqlite3_bind_int64(s, 1, id);
    bind_ids(s, 2, prefix, n_prefix);
    sqlite3_bind_blob(s, 3, key, LZ_META_KEY_LEN, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, source_path ? source_path : "", -1, SQLITE_STATIC);
    return run_done(m, ST_MODEL_SET_PREFIX, err, errlen);
}

/* ---- documents ---- */

int lz_meta_doc_find(lz_meta *m, const char *ext_id, lz_meta_doc *o, char *src, size_t srclen,
                     char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    sqlite3_stmt *s = stmt(m, ST_DOC_FIND);
    sqlite3_bind_text(s, 1, ext_id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) {
        sqlite3_reset(s);
        return LZ_ENOTFOUND;
    }
    if (rc != SQLITE_ROW) {
        int st = sql_fail(m, err, errlen, ST_DOC_FIND, rc);
        sqlite3_reset(s);
        return st;
    }
    o->id = sqlite3_column_int64(s, 0);
    if (src) copy_text(src, srclen, sqlite3_column_text(s, 1));
    o->passage = sqlite3_column_int(s, 2);
    copy_blob(o->content_hash, 32, s, 3);
    copy_blob(o->payload_key, LZ_META_KEY_LEN, s, 4);
    o->n_tokens = sqlite3_column_int(s, 5);
    o->model_id = sqlite3_column_int64(s, 6);
    o->raw_bytes = sqlite3_column_int64(s, 7);
    o->stored_bytes = sqlite3_column_int64(s, 8);
    o->seen_run = sqlite3_column_int64(s, 9);
    o->has_source_hash = sqlite3_column_bytes(s, 10) == 32;
    copy_blob(o->source_hash, 32, s, 10);
    copy_text(o->kv_policy, sizeof o->kv_policy, sqlite3_column_text(s, 11));
    copy_text(o->kv_budget, sizeof o->kv_budget, sqlite3_column_text(s, 12));
    o->kv_window = sqlite3_column_int(s, 13);
    copy_text(o->kv_spec, sizeof o->kv_spec, sqlite3_column_text(s, 14));
    o->kv_kept = sqlite3_column_int64(s, 15);
    sqlite3_reset(s);
    return LZ_OK;
}

static void bind_doc(sqlite3_stmt *s, const lz_meta_doc *d)
{
    sqlite3_bind_text(s, 1, d->ext_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, d->source_id, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 3, d->passage);
    if (d->title) sqlite3_bind_text(s, 4, d->title, -1, SQLITE_STATIC);
    else sqlite3_bind_null(s, 4);
    sqlite3_bind_text(s, 5, d->text, -1, SQLITE_STATIC);
    sqlite3_bind_blob(s, 6, d->content_hash, 32, SQLITE_STATIC);
    bind_ids(s, 7, d->token_ids, d->n_tokens);
    sqlite3_bind_int(s, 8, d->n_tokens);
    sqlite3_bind_int64(s, 9, d->model_id);
    sqlite3_bind_blob(s, 10, d->payload_key, LZ_META_KEY_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(s, 11, d->raw_bytes);
    sqlite3_bind_int64(s, 12, d->stored_bytes);
    sqlite3_bind_int64(s, 13, d->seen_run);
    if (d->has_source_hash) sqlite3_bind_blob(s, 14, d->source_hash, 32, SQLITE_STATIC);
    else sqlite3_bind_null(s, 14);
    int evicted = d->kv_spec[0] != 0;
    sqlite3_bind_text(s, 15, evicted && d->kv_policy[0] ? d->kv_policy : "none", -1, SQLITE_STATIC);
    if (evicted) {
        sqlite3_bind_text(s, 16, d->kv_budget, -1, SQLITE_STATIC);
        sqlite3_bind_int(s, 17, d->kv_window);
        sqlite3_bind_text(s, 18, d->kv_spec, -1, SQLITE_STATIC);
    } else {
        sqlite3_bind_null(s, 16);
        sqlite3_bind_null(s, 17);
        sqlite3_bind_null(s, 18);
    }
    if (d->kv_kept > 0) sqlite3_bind_int64(s, 19, d->kv_kept);
    else sqlite3_bind_null(s, 19);
}

int lz_meta_doc_insert(lz_meta *m, lz_meta_doc *d, char *err, size_t errlen)
{
    sqlite3_stmt *s = stmt(m, ST_DOC_INSERT);
    bind_doc(s, d);
    int rc = run_done(m, ST_DOC_INSERT, err, errlen);
    if (!rc) d->id = sqlite3_last_insert_rowid(m->db);
    return rc;
}

int lz_meta_doc_update(lz_meta *m, const lz_meta_doc *d, char *err, size_t errlen)
{
    sqlite3_stmt *s = stmt(m, ST_DOC_UPDATE);
    bind_doc(s, d);
    sqlite3_bind_int64(s, 20, d->id);
    return run_done(m, ST_DOC_UPDATE, err, errlen);
}

int lz_meta_doc_set_payload(lz_meta *m, int64_t id, const uint8_t key[LZ_META_KEY_LEN],
                            int64_t raw_bytes, int64_t stored_bytes, char *err, size_t errlen)
{
    sqlite3_stmt *s = stmt(m, ST_DOC_SET_PAYLOAD);
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_blob(s, 2, key, LZ_META_KEY_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, raw_bytes);
    sqlite3_bind_int64(s, 4, stored_bytes);
    return run_done(m, ST_DOC_SET_PAYLOAD, err, errlen);
}

int lz_meta_doc_touch(lz_meta *m, int64_t id, int64_t run, char *err, size_t errlen)
{
    sqlite3_stmt *s = stmt(m, ST_DOC_TOUCH);
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_int64(s, 2, run);
    return run_done(m, ST_DOC_TOUCH, err, errlen);
}

int lz_meta_source_touch(lz_meta *m, const char *source_id, int64_t run, char *err, size_t errlen)
{
    sqlite3_stmt *s = stmt(m, ST_SOURCE_TOUCH);
    sqlite3_bind_text(s, 1, source_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, run);
    return run_done(m, ST_SOURCE_TOUCH, err, errlen);
}

int lz_meta_source_rows(lz_meta *m, const char *source_id, int (*fn)(const lz_meta_doc *d, void *ctx),
                        void *ctx, char *err, size_t errlen)
{
    static const int no_tokens[1];
    sqlite3_stmt *s = stmt(m, ST_SOURCE_ROWS);
    sqlite3_bind_text(s, 1, source_id, -1, SQLITE_STATIC);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        lz_meta_doc d;
        memset(&d, 0, sizeof d);
        d.id = sqlite3_column_int64(s, 0);
        d.ext_id = (const char *)sqlite3_column_text(s, 1);
        d.source_id = source_id;
        d.passage = sqlite3_column_int(s, 2);
        d.has_source_hash = sqlite3_column_bytes(s, 3) == 32;
        copy_blob(d.source_hash, 32, s, 3);
        copy_blob(d.payload_key, LZ_META_KEY_LEN, s, 4);
        d.model_id = sqlite3_column_int64(s, 5);
        d.token_ids = sqlite3_column_blob(s, 6);
        int nb = sqlite3_column_bytes(s, 6);
        d.n_tokens = sqlite3_column_int(s, 7);
        if (nb != d.n_tokens * (int)sizeof(int)) d.token_ids = NULL;
        else if (nb == 0) d.token_ids = no_tokens;
        if (fn(&d, ctx)) {
            rc = SQLITE_DONE;
            break;
        }
    }
    int st = rc != SQLITE_DONE ? sql_fail(m, err, errlen, ST_SOURCE_ROWS, rc) : LZ_OK;
    sqlite3_reset(s);
    return st;
}

int lz_meta_doc_delete(lz_meta *m, int64_t id, char *err, size_t errlen)
{
    sqlite3_stmt *s = stmt(m, ST_DOC_DELETE);
    sqlite3_bind_int64(s, 1, id);
    return run_done(m, ST_DOC_DELETE, err, errlen);
}

int lz_meta_source_prune(lz_meta *m, const char *source_id, int64_t run, int64_t *n,
                         char *err, size_t errlen)
{
    sqlite3_stmt *s = stmt(m, ST_SOURCE_PRUNE);
    sqlite3_bind_text(s, 1, source_id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, run);
    int rc = run_done(m, ST_SOURCE_PRUNE, err, errlen);
    if (n) *n = rc ? 0 : sqlite3_changes(m->db);
    return rc;
}

int lz_meta_prune(lz_meta *m, int64_t run, int64_t *n, char *err, size_t errlen)
{
    sqlite3_stmt *s = stmt(m, ST_PRUNE);
    sqlite3_bind_int64(s, 1, run);
    int rc = run_done(m, ST_PRUNE, err, errlen);
    if (n) *n = rc ? 0 : sqlite3_changes(m->db);
    return rc;
}

int lz_meta_doc_count(lz_meta *m, int64_t *n, char *err, size_t errlen)
{
    sqlite3_stmt *s = stmt(m, ST_DOC_COUNT);
    int rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        int st = sql_fail(m, err, errlen, ST_DOC_COUNT, rc);
        sqlite3_reset(s);
        return st;
    }
    *n = sqlite3_column_int64(s, 0);
    sqlite3_reset(s);
    return LZ_OK;
}

int lz_meta_doc_foreach(lz_meta *m, int (*fn)(const lz_meta_doc *d, void *ctx), void *ctx,
                        char *err, size_t errlen)
{
    /* A private statement: callbacks may use the shared ones (find, ...). */
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(m->db, SQL[ST_DOC_ALL], -1, &s, NULL);
    if (rc != SQLITE_OK) return sql_fail(m, err, errlen, ST_DOC_ALL, rc);
    int ret = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        lz_meta_doc d;
        memset(&d, 0, sizeof d);
        d.id = sqlite3_column_int64(s, 0);
        d.ext_id = (const char *)sqlite3_column_text(s, 1);
        d.source_id = (const char *)sqlite3_column_text(s, 2);
        d.passage = sqlite3_column_int(s, 3);
        d.title = (const char *)sqlite3_column_text(s, 4);
        d.text = (const char *)sqlite3_column_text(s, 5);
        copy_blob(d.content_hash, 32, s, 6);
        d.token_ids = sqlite3_column_blob(s, 7);
        int nb = sqlite3_column_bytes(s, 7);
        d.n_tokens = sqlite3_column_int(s, 8);
        static const int no_tokens[1];
        if (nb != d.n_tokens * (int)sizeof(int)) d.token_ids = NULL; /* corrupt row: report, don't read */
        else if (nb == 0) d.token_ids = no_tokens;                    /* SQLite gives NULL for an empty blob */
        d.model_id = sqlite3_column_int64(s, 9);
        copy_blob(d.payload_key, LZ_META_KEY_LEN, s, 10);
        if (sqlite3_column_bytes(s, 10) != LZ_META_KEY_LEN) memset(d.payload_key, 0, LZ_META_KEY_LEN);
        d.raw_bytes = sqlite3_column_int64(s, 11);
        d.stored_bytes = sqlite3_column_int64(s, 12);
        d.seen_run = sqlite3_column_int64(s, 13);
        copy_text(d.kv_spec, sizeof d.kv_spec, sqlite3_column_text(s, 14));
        ret = fn(&d, ctx);
        if (ret) break;
    }
    int st = ret;
    if (!ret && rc != SQLITE_DONE) st = sql_fail(m, err, errlen, ST_DOC_ALL, rc);
    sqlite3_finalize(s);
    return st;
}

int lz_meta_key_referenced(lz_meta *m, const uint8_t *key, size_t key_len, char *err, size_t errlen)
{
    static const int which[2] = { ST_KEY_DOC, ST_KEY_MODEL };
    for (int i = 0; i < 2; i++) {
        sqlite3_stmt *s = stmt(m, which[i]);
        sqlite3_bind_blob(s, 1, key, (int)key_len, SQLITE_STATIC);
        int rc = sqlite3_step(s);
        sqlite3_reset(s);
        if (rc == SQLITE_ROW) return 1;
        if (rc != SQLITE_DONE) {
            sql_fail(m, err, errlen, which[i], rc);
            return -1;
        }
    }
    return 0;
}

/* ---- search and statistics ---- */

/* Steps s, search statement `which` bound by the caller, each row a hit to fn until it returns
 * non-zero (returned), then resets it. */
static int search_rows(lz_meta *m, sqlite3_stmt *s, int which, int (*fn)(const lz_meta_hit *h, void *ctx), void *ctx,
                       char *err, size_t errlen)
{
    int rc, ret = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        lz_meta_hit h = { sqlite3_column_int64(s, 0), (const char *)sqlite3_column_text(s, 1),
                          (const char *)sqlite3_column_text(s, 2), sqlite3_column_double(s, 3) };
        ret = fn(&h, ctx);
        if (ret) break;
    }
    int st = ret;
    if (!ret && rc != SQLITE_DONE) st = sql_fail(m, err, errlen, which, rc);
    sqlite3_reset(s);
    return st;
}

int lz_meta_search(lz_meta *m, const char *q, int k, int (*fn)(const lz_meta_hit *h, void *ctx),
                   void *ctx, char *err, size_t errlen)
{
    sqlite3_stmt *s = stmt(m, ST_SEARCH);
    sqlite3_bind_text(s, 1, q, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 2, k);
    return search_rows(m, s, ST_SEARCH, fn, ctx, err, errlen);
}

int lz_meta_fts_stats(lz_meta *m, const char *q, lz_meta_bm25_stats *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    sqlite3_stmt *s = stmt(m, ST_FTS_TOTALS);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW && sqlite3_column_bytes(s, 0) == 2 * (int)sizeof(int64_t)) {
        int64_t t[2];
        memcpy(t, sqlite3_column_blob(s, 0), sizeof t);
        out->n_docs = t[0];
        out->n_tokens = t[1];
    }
    sqlite3_reset(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return sql_fail(m, err, errlen, ST_FTS_TOTALS, rc);
    if (rc == SQLITE_DONE) return LZ_OK; /* no rows: no phrase can match */
    s = stmt(m, ST_FTS_HITS);
    sqlite3_bind_text(s, 1, q, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        const int nb = sqlite3_column_bytes(s, 0), P = nb / (int)sizeof(int64_t);
        out->phrase_docs = malloc(sizeof(int64_t) * (size_t)(P > 0 ? P : 1));
        if (!out->phrase_docs) {
            sqlite3_reset(s);
            return lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
        }
        if (P) memcpy(out->phrase_docs, sqlite3_column_blob(s, 0), sizeof(int64_t) * (size_t)P);
        out->n_phrases = P;
    }
    sqlite3_reset(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        free(out->phrase_docs);
        out->phrase_docs = NULL;
        return sql_fail(m, err, errlen, ST_FTS_HITS, rc);
    }
    return LZ_OK; /* SQLITE_DONE: no row matches any phrase here, n_phrases 0 */
}

int lz_meta_search_idf(lz_meta *m, const char *q, int k, double avgdl, const double *idf, int n_phrases,
                       int (*fn)(const lz_meta_hit *h, void *ctx), void *ctx, char *err, size_t errlen)
{
    double *stats = malloc(sizeof(double) * (size_t)(1 + n_phrases));
    if (!stats) return lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    stats[0] = avgdl;
    if (n_phrases) memcpy(stats + 1, idf, sizeof(double) * (size_t)n_phrases);
    sqlite3_stmt *s = stmt(m, ST_SEARCH_IDF);
    sqlite3_bind_text(s, 1, q, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 2, k);
    sqlite3_bind_blob(s, 3, stats, (int)(sizeof(double) * (size_t)(1 + n_phrases)), SQLITE_STATIC);
    const int st = search_rows(m, s, ST_SEARCH_IDF, fn, ctx, err, errlen);
    free(stats);
    return st;
}

int lz_meta_doc_ids_foreach(lz_meta *m, int (*fn)(int64_t id, const char *ext_id, const char *source_id, void *ctx),
                            void *ctx, char *err, size_t errlen)
{
    sqlite3_stmt *s; /* a private statement, as lz_meta_doc_foreach's */
    int rc = sqlite3_prepare_v2(m->db, SQL[ST_DOC_IDS], -1, &s, NULL);
    if (rc != SQLITE_OK) return sql_fail(m, err, errlen, ST_DOC_IDS, rc);
    int ret = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *e = (const char *)sqlite3_column_text(s, 1), *src = (const char *)sqlite3_column_text(s, 2);
        ret = fn(sqlite3_column_int64(s, 0), e ? e : "", src ? src : "", ctx);
        if (ret) break;
    }
    int st = ret;
    if (!ret && rc != SQLITE_DONE) st = sql_fail(m, err, errlen, ST_DOC_IDS, rc);
    sqlite3_finalize(s);
    return st;
}

int lz_meta_run_last(lz_meta *m, lz_meta_run_info *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    sqlite3_stmt *s = stmt(m, ST_RUN_LAST);
    int rc = sqlite3_step(s), st = LZ_OK;
    if (rc == SQLITE_ROW) {
        out->id = sqlite3_column_int64(s, 0);
        copy_text(out->status, sizeof out->status, sqlite3_column_text(s, 1));
        copy_text(out->started_at, sizeof out->started_at, sqlite3_column_text(s, 2));
        copy_text(out->ended_at, sizeof out->ended_at, sqlite3_column_text(s, 3));
    } else if (rc == SQLITE_DONE) {
        st = LZ_ENOTFOUND;
    } else {
        st = sql_fail(m, err, errlen, ST_RUN_LAST, rc);
    }
    sqlite3_reset(s);
    return st;
}

char *lz_meta_fts_quote(const char *text)
{
    size_t n = strlen(text);
    char *q = malloc(n * 6 + 8), *o = q; /* worst case: every byte a one-letter term */
    if (!q) return NULL;
    const unsigned char *p = (const unsigned char *)text;
    int terms = 0;
    while (*p) {
        /* a word: letters, digits, and any non-ASCII byte (UTF-8) */
        while (*p && !(*p >= 0x80 || (*p >= '0' && *p <= '9') || ((*p | 32) >= 'a' && (*p | 32) <= 'z'))) p++;
        if (!*p) break;
        if (terms++) o += sprintf(o, " OR ");
        *o++ = '"';
        while (*p >= 0x80 || (*p >= '0' && *p <= '9') || ((*p | 32) >= 'a' && (*p | 32) <= 'z')) *o++ = (char)*p++;
        *o++ = '"';
    }
    *o = 0;
    return q;
}

int lz_meta_stats_hit(lz_meta *m, int64_t doc_id, char *err, size_t errlen)
{
    sqlite3_stmt *s = stmt(m, ST_HIT);
    sqlite3_bind_int64(s, 1, doc_id);
    return run_done(m, ST_HIT, err, errlen);
}

int lz_meta_stats_get(lz_meta *m, int64_t doc_id, int64_t *hits, char *err, size_t errlen)
{
    sqlite3_stmt *s = stmt(m, ST_HITS_GET);
    sqlite3_bind_int64(s, 1, doc_id);
    int rc = sqlite3_step(s);
    *hits = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
    sqlite3_reset(s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return sql_fail(m, err, errlen, ST_HITS_GET, rc);
    return LZ_OK;
}

int lz_meta_doc_title(lz_meta *m, int64_t id, char *buf, size_t len, char *err, size_t errlen)
{
    sqlite3_stmt *s = stmt(m, ST_DOC_TITLE);
    sqlite3_bind_int64(s, 1, id);
    int rc = sqlite3_step(s), st = LZ_OK;
    if (rc == SQLITE_ROW) copy_text(buf, len, sqlite3_column_text(s, 0));
    else if (rc == SQLITE_DONE) st = LZ_ENOTFOUND;
    else st = sql_fail(m, err, errlen, ST_DOC_TITLE, rc);
    sqlite3_reset(s);
    return st;
}

int lz_meta_doc_tokens(lz_meta *m, int64_t id, int **ids, int *n, char *err, size_t errlen)
{
    *ids = NULL;
    *n = 0;
    sqlite3_stmt *s = stmt(m, ST_DOC_TOKENS);
    sqlite3_bind_int64(s, 1, id);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) {
        sqlite3_reset(s);
        return lz_fail(err, errlen, LZ_ENOTFOUND, "%s: no document with row id %lld", m->path, (long long)id);
    }
    if (rc != SQLITE_ROW) {
        int st = sql_fail(m, err, errlen, ST_DOC_TOKENS, rc);
        sqlite3_reset(s);
        return st;
    }
    int nb = sqlite3_column_bytes(s, 0), nt = sqlite3_column_int(s, 1);
    if (nt < 0 || nb != nt * (int)sizeof(int)) {
        sqlite3_reset(s);
        return lz_fail(err, errlen, LZ_EINVAL, "%s: document %lld: token_ids holds %d bytes for %d tokens",
                    m->path, (long long)id, nb, nt);
    }
    *ids = malloc(nb ? (size_t)nb : 1);
    if (!*ids) {
        sqlite3_reset(s);
        return lz_fail(err, errlen, LZ_ENOMEM, "out of memory");
    }
    if (nb) memcpy(*ids, sqlite3_column_blob(s, 0), (size_t)nb);
    *n = nt;
    sqlite3_reset(s);
    return LZ_OK;
}

int lz_meta_stats_top(lz_meta *m, int limit, int all, lz_meta_top_fn fn, void *ctx, char *err, size_t errlen)
{
    const int which = all ? ST_TOP_ALL : ST_TOP;
    sqlite3_stmt *s = stmt(m, which);
    sqlite3_bind_int(s, 1, limit);
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        uint8_t key[LZ_META_KEY_LEN];
        copy_blob(key, LZ_META_KEY_LEN, s, 2);
        if (fn(sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1), key, sqlite3_column_int(s, 3), ctx)) {
            rc = SQLITE_DONE;
            break;
        }
    }
    int st = rc != SQLITE_DONE ? sql_fail(m, err, errlen, which, rc) : LZ_OK;
    sqlite3_reset(s);
    return st;
}

/* ---- runs ---- */

int lz_meta_run_begin(lz_meta *m, const char *args, int64_t model_id, int64_t *run,
                      char *err, size_t errlen)
{
    int rc = run_done(m, ST_RUN_ABORT_STALE, err, errlen);
    if (rc) return rc;
    sqlite3_stmt *s = stmt(m, ST_RUN_BEGIN);
    sqlite3_bind_text(s, 1, args, -1, SQLITE_STATIC);
    if (model_id > 0) sqlite3_bind_int64(s, 2, model_id);
    else sqlite3_bind_null(s, 2);
    rc = run_done(m, ST_RUN_BEGIN, err, errlen);
    if (!rc) *run = sqlite3_last_insert_rowid(m->db);
    return rc;
}

int lz_meta_run_end(lz_meta *m, int64_t run, const lz_meta_run_counts *c, const char *status,
                    char *err, size_t errlen)
{
    sqlite3_stmt *s = stmt(m, ST_RUN_END);
    sqlite3_bind_int64(s, 1, run);
    sqlite3_bind_text(s, 2, status, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, c->n_added);
    sqlite3_bind_int64(s, 4, c->n_updated);
    sqlite3_bind_int64(s, 5, c->n_unchanged);
    sqlite3_bind_int64(s, 6, c->n_removed);
    sqlite3_bind_int64(s, 7, c->n_skipped);
    sqlite3_bind_int64(s, 8, c->n_tokens);
    sqlite3_bind_int64(s, 9, c->raw_bytes);
    sqlite3_bind_int64(s, 10, c->stored_bytes);
    sqlite3_bind_int64(s, 11, c->n_garbage);
    return run_done(m, ST_RUN_END, err, errlen);
}
