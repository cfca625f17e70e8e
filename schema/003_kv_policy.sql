-- 003_kv_policy.sql - schema version 3. KV eviction at ingest (lazyingest
-- --kv-policy, ingest/kvpolicy.h): a compressed document stores only the kept
-- keys and values of every (layer, kv head) (schema/PAYLOAD.md kept table).
-- The row records what was applied; kv_spec (every parameter, canonical text)
-- enters the payload key, so a policy change makes the document "changed".
-- A document too short to compress is stored whole and recorded as 'none'.

ALTER TABLE documents ADD COLUMN kv_policy TEXT NOT NULL DEFAULT 'none'
    CHECK (kv_policy IN ('none', 'snapkv', 'ada-snapkv', 'pyramidkv', 'ada-pyramidkv'));
-- '0.2' (fraction of the document's tokens) or '128t' (tokens per kv head on average); NULL for none
ALTER TABLE documents ADD COLUMN kv_budget TEXT;
-- observation window (the document's last tokens, always kept); NULL for none
ALTER TABLE documents ADD COLUMN kv_window INTEGER;
-- e.g. 'ada-snapkv b=0.2 w=32 k=7 a=0.2 mean'; NULL for none
ALTER TABLE documents ADD COLUMN kv_spec TEXT;
-- keys (= values) stored over all layers and kv heads: sum of the payload's kept table
ALTER TABLE documents ADD COLUMN kv_kept INTEGER;
