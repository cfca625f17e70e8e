-- 002_source_hash.sql - schema version 2. The passages of a split record carry
-- a hash of the whole record and the split budget, so a re-run recognises an
-- unchanged long document without tokenizing and splitting it again.

-- sha256("lazysplit-v1", u32 max_doc_tokens, title, 0x00, text) of the record a
-- passage was split from; NULL for documents that were not split.
ALTER TABLE documents ADD COLUMN source_hash BLOB;

-- Element type of the store's KV payloads (schema/PAYLOAD.md dtype): 1 = bf16,
-- 2 = fp32. One per store, chosen when it is created (lazyingest --kv-dtype).
ALTER TABLE models ADD COLUMN kv_dtype INTEGER NOT NULL DEFAULT 1;
