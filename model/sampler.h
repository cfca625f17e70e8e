/* sampler.h - next-token choice from logits: greedy (temperature 0), or
 * temperature with nucleus (top-p) sampling from a seeded generator, so a
 * run is reproducible. */
#ifndef LZ_SAMPLER_H
#define LZ_SAMPLER_H

#include <stdint.h>

typedef struct {
    float temperature; /* 0 = greedy */
    float top_p;       /* (0, 1]; 1 = no nucleus cut */
    uint64_t rng;      /* xorshift64* state, never 0 */
    int vocab;
    int *idx;          /* (V) scratch for top-p sorting */
    float *prob;       /* (V) scratch */
} lz_sampler;

int lz_sampler_init(lz_sampler *s, int vocab, float temperature, float top_p, uint64_t seed);
void lz_sampler_free(lz_sampler *s);
/* Index of the largest logit (first on ties). */
int lz_sample_argmax(const float *logits, int n);
/* Picks the next token. logits are not modified. */
int lz_sample(lz_sampler *s, const float *logits);

#endif /* LZ_SAMPLER_H */
