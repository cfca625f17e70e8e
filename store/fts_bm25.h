/* fts_bm25.h - BM25 over several stores' FTS5 indexes scored as one index:
 * SQLite's bm25() takes its statistics (rows, average length, rows matching
 * each phrase) from the one table it runs on, so each shard of a sharded
 * store would score with its own idf. These FTS5 auxiliary functions let a
 * caller gather the statistics from every shard and score each shard's rows
 * with the sums: the same formula and constants as SQLite's bm25() (fts5_aux.c:
 * k1 = 1.2, b = 0.75, idf = log((N - n + 0.5) / (n + 0.5)) floored at 1e-6, every
 * column weighted 1, a row's length over all its columns), so one store's
 * scores are bm25()'s to the bit. Registered on a connection by meta.c:
 *   lz_fts_totals(fts)       -> blob int64[2]: rows, tokens of all rows (any row of a scan)
 *   lz_fts_hits(fts)         -> blob int64[P]: rows matching each of the query's P phrases
 *   lz_bm25(fts, stats)      -> the row's score (lower is better, bm25()'s sign), stats a
 *                               blob double[1 + P]: average row length, idf of each phrase
 * Only store/ uses it (sqlite3.h). */
#ifndef LZ_FTS_BM25_H
#define LZ_FTS_BM25_H

#include <sqlite3.h>

/* Registers the three functions on db. SQLITE_OK, or SQLite's error code
 * (SQLITE_ERROR when the library has no FTS5). */
int lz_fts_bm25_register(sqlite3 *db);

/* The idf SQLite's bm25() gives a phrase found in n_hit of n_rows rows. */
double lz_fts_bm25_idf(long long n_rows, long long n_hit);

#endif /* LZ_FTS_BM25_H */
