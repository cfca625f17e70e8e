/* lazy-mkmodel.c - writes a GGUF Llama model with random weights of any shape
 * and a small SentencePiece vocabulary, for tests and benchmarks. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "model/mkmodel.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lazy-mkmodel -o OUT.gguf [options]\n"
            "Writes a Llama model with random weights (for tests and benchmarks).\n"
            "  --dim N        model width (default 64)\n"
            "  --layers N     layers (default 2)\n"
            "  --heads N      query heads (default 4)\n"
            "  --kv-heads N   key/value heads, divides --heads (default 2)\n"
            "  --head-dim N   head dimension, even (default 16)\n"
            "  --ffn N        feed-forward width (default 172)\n"
            "  --vocab N      vocabulary size, >= 355 (default 512)\n"
            "  --ctx N        context length recorded in the file (default 2048)\n"
            "  --theta X      rope frequency base (default 10000)\n"
            "  --type T       matrix type: f32 f16 bf16 q8_0 (default f32)\n"
            "  --tied         no output.weight (output tied to token_embd)\n"
            "  --llama3-freqs write rope_freqs.weight with Llama-3.1 scaling divisors\n"
            "  --seed N       random seed (default 1)\n"
            "  --preset NAME  tiny (default) or 100m (~100M parameters: dim 768, 12 layers,\n"
            "                 12/4 heads, ffn 2048, vocab 32000)\n");
}

static int num(const char *s, const char *opt, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s ? s : "", &end, 10);
    if (!s || errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "lazy-mkmodel: %s expects an integer in [%ld, %ld]\n", opt, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    lz_mkmodel_opts o;
    lz_mkmodel_defaults(&o);
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "-o")) { if (!v) { fprintf(stderr, "lazy-mkmodel: -o needs a path\n"); return 1; } out = v; i++; }
        else if (!strcmp(a, "--tied")) o.tied = 1;
        else if (!strcmp(a, "--llama3-freqs")) o.llama3_freqs = 1;
        else if (!strcmp(a, "--preset")) {
            i++;
            if (v && !strcmp(v, "100m")) {
                o.dim = 768; o.n_layers = 12; o.n_heads = 12; o.n_kv_heads = 4; o.head_dim = 64;
                o.ffn_dim = 2048; o.vocab = 32000;
            } else if (!v || strcmp(v, "tiny")) { fprintf(stderr, "lazy-mkmodel: --preset is tiny or 100m\n"); return 1; }
        } else if (!strcmp(a, "--type")) {
            i++;
            if (!v) { fprintf(stderr, "lazy-mkmodel: --type needs a value\n"); return 1; }
            if (!strcmp(v, "f32")) o.tensor_type = LZ_GGML_F32;
            else if (!strcmp(v, "f16")) o.tensor_type = LZ_GGML_F16;
            else if (!strcmp(v, "bf16")) o.tensor_type = LZ_GGML_BF16;
            else if (!strcmp(v, "q8_0")) o.tensor_type = LZ_GGML_Q8_0;
            else { fprintf(stderr, "lazy-mkmodel: unknown --type '%s'\n", v); return 1; }
        } else if (!strcmp(a, "--theta")) {
            i++;
            char *end;
            o.rope_theta = v ? strtof(v, &end) : 0;
            if (!v || *end || !(o.rope_theta > 1)) { fprintf(stderr, "lazy-mkmodel: --theta expects a number > 1\n"); return 1; }
        } else {
            static const char *opts[] = {"--dim", "--layers", "--heads", "--kv-heads", "--head-dim", "--ffn", "--vocab", "--ctx", "--seed"};
            int *dst[] = {&o.dim, &o.n_layers, &o.n_heads, &o.n_kv_heads, &o.head_dim, &o.ffn_dim, &o.vocab, &o.ctx, NULL};
            int k = -1;
            for (int j = 0; j < 9; j++) if (!strcmp(a, opts[j])) k = j;
            if (k < 0) { fprintf(stderr, "lazy-mkmodel: unknown option '%s' (try --help)\n", a); return 1; }
            const long most = k == 8 ? 0x7fffffffL : k == 7 ? 1L << 24 : k == 6 ? 1L << 20 : 1L << 16; /* ctx: Llama-3.1 has 131,072 */
            if (num(v, a, 1, most, &x)) return 1;
            if (k == 8) o.seed = (uint64_t)x; else *dst[k] = (int)x;
            i++;
        }
    }
    if (!out) { fprintf(stderr, "lazy-mkmodel: no output path (-o OUT.gguf); try --help\n"); return 1; }
    char err[256];
    if (lz_mkmodel_write(&o, out, err, sizeof err)) { fprintf(stderr, "lazy-mkmodel: %s\n", err); return 1; }
    return 0;
}
