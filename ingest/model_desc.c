/* model_desc.c - see model_desc.h. */
#include "ingest/model_desc.h"

#include <string.h>

void lz_ingest_model_desc(const lz_llama *m, const char *source_path, lz_store_model_desc *d)
{
    memset(d, 0, sizeof *d);
    memcpy(d->fingerprint, m->fingerprint, 32);
    d->arch = m->arch;
    d->n_layers = m->cfg.n_layers;
    d->n_kv_heads = m->cfg.n_kv_heads;
    d->head_dim = m->cfg.head_dim;
    d->rope_layout = m->cfg.rope_layout;
    d->rope_theta = m->cfg.rope_theta;
    d->rope_divisors = m->cfg.has_rope_divisors ? m->cfg.rope_divisors : NULL;
    d->source_path = source_path;
}
