/* load_hf.c - Hugging Face folder loader (config.json + safetensors).
 * Placeholder until the safetensors loader lands: refuses clearly. */
#include <stdio.h>

#include "model/llama.h"

int lz_llama_load_hf(const char *dir, lz_llama **out, char *err, size_t errlen)
{
    *out = NULL;
    snprintf(err, errlen, "%s: Hugging Face folders are not supported yet; convert to GGUF", dir);
    return LZ_MODEL_EUNSUPPORTED;
}
