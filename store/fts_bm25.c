/* fts_bm25.c - the FTS5 auxiliary functions of fts_bm25.h: statistics of
 * one shard's index, and BM25 with statistics given from outside. The
 * scoring loop is SQLite's fts5Bm25Function (ext/fts5/fts5_aux.c) with its
 * per-table statistics replaced by the caller's. */
#include "store/fts_bm25.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

double lz_fts_bm25_idf(long long n_rows, long long n_hit)
{
    /* as fts5Bm25GetData: negative when a phrase is in more than half the rows, then floored */
    double idf = log((n_rows - n_hit + 0.5) / (n_hit + 0.5));
    return idf <= 0.0 ? 1e-6 : idf;
}

/* lz_fts_totals(fts): rows and tokens of the whole table (does not depend on the row). */
static void fts_totals(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx, int n_val,
                       sqlite3_value **val)
{
    (void)n_val, (void)val;
    sqlite3_int64 rows = 0, tokens = 0;
    int rc = api->xRowCount(fts, &rows);
    if (rc == SQLITE_OK) rc = api->xColumnTotalSize(fts, -1, &tokens);
    if (rc != SQLITE_OK) {
        sqlite3_result_error_code(ctx, rc);
        return;
    }
    int64_t out[2] = { rows, tokens };
    sqlite3_result_blob(ctx, out, sizeof out, SQLITE_TRANSIENT);
}

static int count_row(const Fts5ExtensionApi *api, Fts5Context *fts, void *p)
{
    (void)api, (void)fts;
    (*(sqlite3_int64 *)p)++;
    return SQLITE_OK;
}

/* lz_fts_hits(fts): rows of the table matching each phrase of the query (as bm25 counts them). */
static void fts_hits(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx, int n_val,
                     sqlite3_value **val)
{
    (void)n_val, (void)val;
    const int P = api->xPhraseCount(fts);
    int64_t *hits = calloc((size_t)(P > 0 ? P : 1), sizeof *hits);
    if (!hits) {
        sqlite3_result_error_nomem(ctx);
        return;
    }
    int rc = SQLITE_OK;
    for (int i = 0; rc == SQLITE_OK && i < P; i++) {
        sqlite3_int64 n = 0;
        rc = api->xQueryPhrase(fts, i, &n, count_row);
        hits[i] = n;
    }
    if (rc != SQLITE_OK) sqlite3_result_error_code(ctx, rc);
    else sqlite3_result_blob(ctx, hits, (int)(sizeof *hits * (size_t)P), SQLITE_TRANSIENT);
    free(hits);
}

/* lz_bm25(fts, stats): fts5Bm25Function's score of this row under the given average length and idfs. */
static void fts_bm25(const Fts5ExtensionApi *api, Fts5Context *fts, sqlite3_context *ctx, int n_val,
                     sqlite3_value **val)
{
    const double k1 = 1.2, b = 0.75;
    const int P = api->xPhraseCount(fts);
    if (n_val != 1 || sqlite3_value_bytes(val[0]) != (int)(sizeof(double) * (size_t)(1 + P))) {
        sqlite3_result_error(ctx, "lz_bm25: expected a blob of 1 + phrases doubles", -1);
        return;
    }
    double *stats = malloc(sizeof(double) * (size_t)(1 + P)), *freq = calloc((size_t)(P > 0 ? P : 1), sizeof(double));
    if (!stats || !freq) {
        free(stats);
        free(freq);
        sqlite3_result_error_nomem(ctx);
        return;
    }
    memcpy(stats, sqlite3_value_blob(val[0]), sizeof(double) * (size_t)(1 + P)); /* the blob may be unaligned */
    const double avgdl = stats[0], *idf = stats + 1;
    int n_inst = 0, rc = api->xInstCount(fts, &n_inst);
    for (int i = 0; rc == SQLITE_OK && i < n_inst; i++) {
        int ip, ic, io;
        rc = api->xInst(fts, i, &ip, &ic, &io);
        if (rc == SQLITE_OK) freq[ip] += 1.0; /* every column weighted 1, as bm25() without weights */
    }
    double D = 0.0, score = 0.0;
    if (rc == SQLITE_OK) {
        int n_tok;
        rc = api->xColumnSize(fts, -1, &n_tok);
        D = (double)n_tok;
    }
    for (int i = 0; rc == SQLITE_OK && i < P; i++)
        score += idf[i] * ((freq[i] * (k1 + 1.0)) / (freq[i] + k1 * (1 - b + b * D / avgdl)));
    if (rc != SQLITE_OK) sqlite3_result_error_code(ctx, rc);
    else sqlite3_result_double(ctx, -1.0 * score);
    free(stats);
    free(freq);
}

int lz_fts_bm25_register(sqlite3 *db)
{
    fts5_api *api = NULL;
    sqlite3_stmt *s;
    int rc = sqlite3_prepare_v2(db, "SELECT fts5(?1)", -1, &s, NULL);
    if (rc != SQLITE_OK) return rc;
    sqlite3_bind_pointer(s, 1, (void *)&api, "fts5_api_ptr", NULL);
    sqlite3_step(s);
    rc = sqlite3_finalize(s);
    if (rc != SQLITE_OK) return rc;
    if (!api || api->iVersion < 2) return SQLITE_ERROR;
    rc = api->xCreateFunction(api, "lz_fts_totals", NULL, fts_totals, NULL);
    if (rc == SQLITE_OK) rc = api->xCreateFunction(api, "lz_fts_hits", NULL, fts_hits, NULL);
    if (rc == SQLITE_OK) rc = api->xCreateFunction(api, "lz_bm25", NULL, fts_bm25, NULL);
    return rc;
}
