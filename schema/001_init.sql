-- 001_init.sql - lazystore metadata, schema version 1 (PRAGMA user_version).
-- SQLite is the source of truth: a document exists iff it has a row here.
-- Its KV payload lives in LMDB under payload_key (format: schema/PAYLOAD.md);
-- a payload no row references is garbage, a row without a payload an error.
-- Timestamps are UTC ISO-8601 text. Token ids are int32 little-endian blobs.

-- The model a store was built with (one per store; a different one is refused).
CREATE TABLE models (
    id            INTEGER PRIMARY KEY,
    fingerprint   TEXT NOT NULL UNIQUE,  -- sha256 hex: config, vocabulary, sampled weights
    architecture  TEXT NOT NULL,         -- "llama", "mistral", ...
    n_layers      INTEGER NOT NULL,
    n_kv_heads    INTEGER NOT NULL,
    head_dim      INTEGER NOT NULL,
    rope_layout   TEXT NOT NULL CHECK (rope_layout IN ('adjacent', 'half')),
    rope_theta    REAL NOT NULL,
    rope_scaling  TEXT NOT NULL,         -- 'none' or 'divisors:<sha256 hex of the fp32 divisors>'
    prefix_tokens BLOB NOT NULL,         -- the prompt prefix (model/prompt.h) as token ids
    prefix_key    BLOB NOT NULL,         -- LMDB key of the prefix's KV payload
    source_path   TEXT,                  -- where it was loaded from (informational)
    created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- One row per retrievable document or passage.
CREATE TABLE documents (
    id            INTEGER PRIMARY KEY,
    ext_id        TEXT NOT NULL UNIQUE,  -- external id; passage k of a split record: "<id>#<k>"
    source_id     TEXT NOT NULL,         -- the corpus record's id
    passage       INTEGER NOT NULL DEFAULT -1, -- k for a passage of a split record, else -1
    title         TEXT,
    text          TEXT NOT NULL,
    content_hash  BLOB NOT NULL,         -- sha256(title, 0x00, text): detects changed documents
    token_ids     BLOB NOT NULL,         -- the document's tokens (after the prefix, without it)
    n_tokens      INTEGER NOT NULL,
    model_id      INTEGER NOT NULL REFERENCES models(id),
    payload_key   BLOB NOT NULL,         -- model fingerprint (32) || sha256 of prefix+document ids (32)
    raw_bytes     INTEGER NOT NULL,      -- bf16 K+V bytes before compression
    stored_bytes  INTEGER NOT NULL,      -- bytes of the payload in LMDB
    created_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    updated_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    seen_run      INTEGER                -- last ingest run whose corpus held it
);
CREATE INDEX documents_source ON documents(source_id);
CREATE INDEX documents_payload ON documents(payload_key);
CREATE INDEX documents_seen ON documents(seen_run);

-- Full-text index over title + text (BM25 via bm25()), kept in sync by triggers.
CREATE VIRTUAL TABLE documents_fts USING fts5(
    title, text, content = 'documents', content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);

-- Access statistics; the query side counts hits (Zipf popularity for the HBM cache).
CREATE TABLE access_stats (
    doc_id   INTEGER PRIMARY KEY,        -- documents.id
    hits     INTEGER NOT NULL DEFAULT 0,
    last_hit TEXT
);

CREATE TRIGGER documents_ai AFTER INSERT ON documents BEGIN
    INSERT INTO documents_fts(rowid, title, text) VALUES (new.id, new.title, new.text);
END;
CREATE TRIGGER documents_ad AFTER DELETE ON documents BEGIN
    INSERT INTO documents_fts(documents_fts, rowid, title, text)
        VALUES ('delete', old.id, old.title, old.text);
    DELETE FROM access_stats WHERE doc_id = old.id;
END;
CREATE TRIGGER documents_au AFTER UPDATE OF title, text ON documents BEGIN
    INSERT INTO documents_fts(documents_fts, rowid, title, text)
        VALUES ('delete', old.id, old.title, old.text);
    INSERT INTO documents_fts(rowid, title, text) VALUES (new.id, new.title, new.text);
END;

-- One row per lazyingest invocation that wrote to the store.
CREATE TABLE ingest_runs (
    id           INTEGER PRIMARY KEY,
    args         TEXT NOT NULL,          -- the command line, space separated
    model_id     INTEGER REFERENCES models(id),
    started_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    ended_at     TEXT,
    status       TEXT NOT NULL DEFAULT 'running'
                 CHECK (status IN ('running', 'ok', 'partial', 'failed', 'aborted')),
    n_added      INTEGER NOT NULL DEFAULT 0,
    n_updated    INTEGER NOT NULL DEFAULT 0,
    n_unchanged  INTEGER NOT NULL DEFAULT 0,
    n_removed    INTEGER NOT NULL DEFAULT 0,
    n_skipped    INTEGER NOT NULL DEFAULT 0,
    n_tokens     INTEGER NOT NULL DEFAULT 0, -- tokens encoded by this run
    raw_bytes    INTEGER NOT NULL DEFAULT 0, -- of the payloads this run wrote
    stored_bytes INTEGER NOT NULL DEFAULT 0,
    n_garbage    INTEGER NOT NULL DEFAULT 0  -- unreferenced payloads collected
);
