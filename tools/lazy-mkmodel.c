/* lazy-mkmodel.c - writes a GGUF Llama model with random weights of any shape
 * and a small SentencePiece vocabulary, for tests and benchmarks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cli.h"
#include "formats/gguf.h"
#include "model/mkmodel.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lazy-mkmodel -o OUT.gguf [options]\n"
            "Writes a Llama model with random weights (for tests and benchmarks).\n"
            "Options take their value as '--opt value' or '--opt=value'.\n"
            "  -o, --output PATH  the GGUF file to write\n"
            "  --dim N            model width (default 64)\n"
            "  --layers N         layers (default 2)\n"
            "  --heads N          query heads (default 4)\n"
            "  --kv-heads N       key/value heads, divides --heads (default 2)\n"
            "  --head-dim N       head dimension, even (default 16)\n"
            "  --ffn N            feed-forward width (default 172)\n"
            "  --vocab N          vocabulary size, >= 355 (default 512)\n"
            "  --ctx N            context length recorded in the file (default 2048)\n"
            "  --theta X          rope frequency base (default 10000)\n"
            "  --type T           matrix type: f32 f16 bf16 q8_0 (default f32; alias --outtype)\n"
            "  --tied             no output.weight (output tied to token_embd)\n"
            "  --llama3-freqs     write rope_freqs.weight with Llama-3.1 scaling divisors\n"
            "  --seed N           random seed (default 1)\n"
            "  --preset NAME      tiny (default) or 100m (dim 768, 12 layers, 12/4 heads, head_dim 64,\n"
            "                     ffn 2048, vocab 32000)\n"
            LZ_CLI_COMMON_HELP
            "\n" LZ_CLI_EXIT_HELP);
}

int main(int argc, char **argv)
{
    lz_cli_init("lazy-mkmodel");
    lz_mkmodel_opts o;
    lz_mkmodel_defaults(&o);
    const char *out = NULL;
    enum { O_DIM = 256, O_LAYERS, O_HEADS, O_KV_HEADS, O_HEAD_DIM, O_FFN, O_VOCAB, O_CTX, O_SEED, O_THETA, O_TYPE,
           O_TIED, O_LLAMA3, O_PRESET };
    static const struct option longopts[] = {
        LZ_CLI_OPT_HELP, LZ_CLI_OPT_OUTPUT,
        LZ_OPT_ARG("dim", O_DIM), LZ_OPT_ARG("layers", O_LAYERS), LZ_OPT_ARG("heads", O_HEADS),
        LZ_OPT_ARG("kv-heads", O_KV_HEADS), LZ_OPT_ARG("head-dim", O_HEAD_DIM), LZ_OPT_ARG("ffn", O_FFN),
        LZ_OPT_ARG("vocab", O_VOCAB), LZ_OPT_ARG("ctx", O_CTX), LZ_OPT_ARG("seed", O_SEED),
        LZ_OPT_ARG("theta", O_THETA), LZ_OPT_ARG("type", O_TYPE),
        {"outtype", required_argument, NULL, O_TYPE}, /* lazy-convert's name for it */
        LZ_OPT_FLAG("tied", O_TIED), LZ_OPT_FLAG("llama3-freqs", O_LLAMA3), LZ_OPT_ARG("preset", O_PRESET),
        {NULL, 0, NULL, 0}};
    static const char *const types[] = {"f32", "f16", "bf16", "q8_0", NULL}, *const presets[] = {"tiny", "100m", NULL};
    static const uint32_t type_ids[] = {LZ_GGML_F32, LZ_GGML_F16, LZ_GGML_BF16, LZ_GGML_Q8_0};
    int c, k;
    long x;
    double d;
    while ((c = lz_cli_getopt(argc, argv, "hVo:", longopts)) != -1) {
        /* the shape: name, destination, most (ctx: Llama-3.1 has 131,072) */
        int *dst = NULL;
        const char *nm = NULL;
        long most = 1L << 16;
        switch (c) {
        case 'h': usage(stdout); return LZ_EXIT_OK;
        case 'V': lz_cli_version(); return LZ_EXIT_OK;
        case 'o': out = optarg; break;
        case O_DIM: dst = &o.dim, nm = "--dim"; break;
        case O_LAYERS: dst = &o.n_layers, nm = "--layers"; break;
        case O_HEADS: dst = &o.n_heads, nm = "--heads"; break;
        case O_KV_HEADS: dst = &o.n_kv_heads, nm = "--kv-heads"; break;
        case O_HEAD_DIM: dst = &o.head_dim, nm = "--head-dim"; break;
        case O_FFN: dst = &o.ffn_dim, nm = "--ffn"; break;
        case O_VOCAB: dst = &o.vocab, nm = "--vocab", most = 1L << 20; break;
        case O_CTX: dst = &o.ctx, nm = "--ctx", most = 1L << 24; break;
        case O_SEED:
            if (lz_cli_long("--seed", optarg, 1, 0x7fffffffL, &x)) return LZ_EXIT_USAGE;
            o.seed = (uint64_t)x;
            break;
        case O_THETA:
            if (lz_cli_double("--theta", optarg, 1, 1e12, &d)) return LZ_EXIT_USAGE;
            if (!(d > 1)) return lz_cli_usage("--theta: expected a number > 1, got '%s'", optarg);
            o.rope_theta = (float)d;
            break;
        case O_TYPE:
            if (lz_cli_choice("--type", optarg, types, &k)) return LZ_EXIT_USAGE;
            o.tensor_type = type_ids[k];
            break;
        case O_TIED: o.tied = 1; break;
        case O_LLAMA3: o.llama3_freqs = 1; break;
        case O_PRESET:
            if (lz_cli_choice("--preset", optarg, presets, &k)) return LZ_EXIT_USAGE;
            if (k == 1) {
                o.dim = 768; o.n_layers = 12; o.n_heads = 12; o.n_kv_heads = 4; o.head_dim = 64;
                o.ffn_dim = 2048; o.vocab = 32000;
            }
            break;
        default: return LZ_EXIT_USAGE; /* '?': lz_cli_getopt named it */
        }
        if (dst && lz_cli_int(nm, optarg, 1, (int)most, dst)) return LZ_EXIT_USAGE;
    }
    if (optind < argc) return lz_cli_usage("unexpected argument '%s' (the output goes after -o)", argv[optind]);
    if (!out) return lz_cli_usage("no output path (-o OUT.gguf)");
    char err[256];
    if (lz_mkmodel_write(&o, out, err, sizeof err)) return lz_cli_fail("%s", err);
    return LZ_EXIT_OK;
}
