/* sampler.c - greedy and temperature/top-p sampling (see sampler.h). */
#include "model/sampler.h"

#include <math.h>
#include <stdlib.h>

int lz_sampler_init(lz_sampler *s, int vocab, float temperature, float top_p, uint64_t seed)
{
    s->temperature = temperature < 0 ? 0 : temperature;
    s->top_p = top_p > 0 && top_p <= 1 ? top_p : 1.0f;
    s->rng = seed ? seed : 0x9e3779b97f4a7c15ull;
    s->vocab = vocab;
    s->idx = malloc((size_t)vocab * sizeof(int));
    s->prob = malloc((size_t)vocab * sizeof(float));
    if (!s->idx || !s->prob) { lz_sampler_free(s); return -1; }
    return 0;
}

void lz_sampler_free(lz_sampler *s)
{
    free(s->idx);
    free(s->prob);
    s->idx = NULL;
    s->prob = NULL;
}

int lz_sample_argmax(const float *logits, int n)
{
    /* the best value carried in a register: comparing with logits[best] made each step wait on
     * a load whose address the step before chose (about 4 ns a value; bench/bench_sampler.c) */
    int best = 0;
    float bv = logits[0];
    for (int i = 1; i < n; i++)
        if (logits[i] > bv) bv = logits[i], best = i;
    return best;
}

static float next_uniform(lz_sampler *s) /* [0, 1) */
{
    s->rng ^= s->rng >> 12;
    s->rng ^= s->rng << 25;
    s->rng ^= s->rng >> 27;
    return (float)((s->rng * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f;
}

static const float *sort_prob;
static int by_prob_desc(const void *a, const void *b)
{
    float x = sort_prob[*(const int *)a], y = sort_prob[*(const int *)b];
    return (x < y) - (x > y);
}

int lz_sample(lz_sampler *s, const float *logits)
{
    const int V = s->vocab;
    if (s->temperature == 0) return lz_sample_argmax(logits, V);
    float mx = logits[lz_sample_argmax(logits, V)], sum = 0;
    for (int i = 0; i < V; i++) { s->prob[i] = expf((logits[i] - mx) / s->temperature); sum += s->prob[i]; }
    for (int i = 0; i < V; i++) s->prob[i] /= sum;
    float r = next_uniform(s);
    if (s->top_p >= 1.0f) {
        float acc = 0;
        for (int i = 0; i < V; i++) { acc += s->prob[i]; if (r < acc) return i; }
        return V - 1;
    }
    /* nucleus: keep the most probable tokens whose mass reaches top_p */
    int n = 0;
    float cutoff = (1.0f - s->top_p) / (float)(V > 1 ? V - 1 : 1);
    for (int i = 0; i < V; i++)
        if (s->prob[i] >= cutoff) s->idx[n++] = i;
    sort_prob = s->prob;
    qsort(s->idx, (size_t)n, sizeof(int), by_prob_desc);
    float mass = 0;
    int last = n - 1;
    for (int i = 0; i < n; i++) {
        mass += s->prob[s->idx[i]];
        if (mass > s->top_p) { last = i; break; }
    }
    float acc = 0;
    r *= mass;
    for (int i = 0; i <= last; i++) { acc += s->prob[s->idx[i]]; if (r < acc) return s->idx[i]; }
    return s->idx[last];
}
