/* model_desc.h - what the store records about a loaded model
 * (lz_store_model_desc), filled from the engine's lz_llama: the one place
 * that knows both model/ and store/, used by ingest and query alike. */
#ifndef LZ_INGEST_MODEL_DESC_H
#define LZ_INGEST_MODEL_DESC_H

#include "model/llama.h"
#include "store/store.h"

/* Fills d from m; source_path (informational, may be NULL) is kept by pointer. */
void lz_ingest_model_desc(const lz_llama *m, const char *source_path, lz_store_model_desc *d);

#endif /* LZ_INGEST_MODEL_DESC_H */
