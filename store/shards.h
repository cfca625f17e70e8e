/* shards.h - the layout of a sharded store: a root folder holding a manifest
 * (ROOT/shards.manifest) and N shard folders ROOT/shard-0000 .. shard-<N-1>,
 * each a whole store (store.h: its own LMDB environment, SQLite metadata and
 * writer lock) with a shard.id file naming its set and index. A corpus
 * record goes to shard lz_shards_of(record id, N), so a record's passages
 * stay in one shard and every ingest task (lazyingest --shard I/N, a task of
 * a Slurm job array) knows its documents without asking another.
 * lz_store_open opens a root as one store (store_shards.c). Formats:
 * schema/SHARDS.md.
 *
 * Metadata is per shard, not one shared SQLite database, because:
 *  - SQLite takes one writer at a time: a shared database would make the N
 *    writers wait on one lock, which is what sharding is for avoiding;
 *  - a job array's tasks run on several hosts over shared storage (NFS,
 *    Lustre), where SQLite's WAL (its -shm is shared memory of one host) and
 *    its POSIX locks are not safe; each shard is written by one task on one
 *    host, its readers come after;
 *  - the durability rule (a payload before the row that names it) stays inside
 *    one shard, so each shard is crash-safe and resumable as a store is;
 *  - BM25 needs only three statistics of the whole set (rows, tokens, rows
 *    matching each phrase), read from each shard's FTS5 index at query time
 *    (store/fts_bm25.h), so scores are global without a shared index.
 * The cost: a reader opens N databases (about 5 files each) and a search runs
 * three statements per shard.
 */
#ifndef LZ_SHARDS_H
#define LZ_SHARDS_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

#define LZ_SHARDS_MANIFEST "shards.manifest"
#define LZ_SHARDS_ID_FILE "shard.id"
#define LZ_SHARDS_MAX 4096

typedef struct {
    int n_shards;      /* 1..LZ_SHARDS_MAX */
    char set_id[33];   /* 32 hex digits, random at creation: every shard.id repeats it */
    char model[65];    /* the model's fingerprint (hex): every shard must hold this model */
    int kv_dtype;      /* LZ_PAYLOAD_DTYPE_* of every shard's payloads */
} lz_shards_manifest;

/* 1 when dir holds a store: a plain one (dir/meta.sqlite) or a sharded one
 * (dir/shards.manifest); 0 when not. */
int lz_store_exists(const char *dir);
/* 1 when dir holds a manifest (a sharded store's root), else 0. */
int lz_shards_is_root(const char *dir);

/* The shard of a corpus record: the first 8 bytes of sha256("lazyshard-v1",
 * id) as a little-endian integer, modulo n. */
int lz_shards_of(const char *source_id, int n);
/* The shards a lookup of document id ext_id looks in, in order, into
 * out[0..returned): the shard of ext_id itself (an unsplit document's
 * record id is its id), then, for a passage id "SRC#K" (K decimal), the
 * shard of SRC when that is another. Returns 1 or 2. */
int lz_shards_candidates(const char *ext_id, int n, int out[2]);
/* The shard folder ROOT/shard-%04d. */
void lz_shards_dir(const char *root, int i, char *buf, size_t len);

/* Reads root's manifest. Errors: ENOTFOUND (no manifest: not sharded),
 * ECORRUPT (a malformed manifest, its line named), EIO. */
int lz_shards_read(const char *root, lz_shards_manifest *m, char *err, size_t errlen);
/* Creates root (when absent) and its manifest for n shards of the model
 * fingerprint with payloads of kv_dtype (0: bf16), atomically (a task racing
 * another finds the other's manifest), or reads the one there: *out is the
 * manifest in force. Errors: EINVAL when root is an unsharded store, or its
 * manifest says another shard count, model or dtype (both named); EIO. */
int lz_shards_create(const char *root, int n, const uint8_t fingerprint[32], int kv_dtype, lz_shards_manifest *out,
                     char *err, size_t errlen);
/* Makes shard i's folder ready for its writer: creates it and its shard.id,
 * or checks the shard.id there (lz_shards_check_id). Errors: EINVAL, EIO. */
int lz_shards_claim(const char *root, const lz_shards_manifest *m, int i, char *err, size_t errlen);
/* Checks that shard folder i belongs to this set: its shard.id names the
 * manifest's set, index i and count. Errors: ENOTFOUND (no shard.id: a
 * folder of no set), EINVAL (another set, index or count; both named), ECORRUPT. */
int lz_shards_check_id(const char *root, const lz_shards_manifest *m, int i, char *err, size_t errlen);

#endif /* LZ_SHARDS_H */
