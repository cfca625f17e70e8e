/* lazy-convert.c - converts a Hugging Face Llama/Mistral folder to GGUF with
 * the project's own writer, as llama.cpp's convert_hf_to_gguf.py does:
 *   - q/k rows permuted from Hugging Face's half-split rotary pairs (i, i+d/2)
 *     to GGUF's adjacent pairs (2i, 2i+1), per head;
 *   - llama3 rope scaling written as rope_freqs.weight (per-pair divisors),
 *     linear scaling as llama.rope.scaling.{type,factor};
 *   - tokenizer.json written as GGUF "gpt2" metadata (pre "llama-bpe"):
 *     tokens, token_type, merges, bos/eos, chat template.
 * It leaves out quantization (F32, F16, BF16 only) and other architectures.
 *
 * Legend: H = heads of the projection (query heads for q, KV heads for k),
 * d = head_dim, D = model width.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cli.h"
#include "base/env.h"
#include "model/chat.h"
#include "formats/gguf_write.h"
#include "model/llama.h"
#include "formats/safetensors.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5 };

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lazy-convert [options] HF_FOLDER OUT.gguf\n"
            "       lazy-convert [options] -o OUT.gguf HF_FOLDER\n"
            "\n"
            "Converts a Hugging Face Llama/Mistral folder (config.json, *.safetensors,\n"
            "tokenizer.json) to GGUF.\n"
            "Options take their value as '--opt value' or '--opt=value'; '--' ends the options.\n"
            "  -o, --output PATH      the GGUF file to write (or the second argument)\n"
            "      --type T           matrix type f32, f16 or bf16 (alias --outtype; default: the\n"
            "                         embedding's dtype)\n"
            "  -q, --quiet            no summary line on standard error (warnings still printed)\n"
            LZ_CLI_COMMON_HELP
            "\n" LZ_ENV_HELP "\n" LZ_CLI_EXIT_HELP);
}

/* out (H*d, D) = rows of w (H*d, D) reordered per head from half-split to
 * adjacent rotary pairs: out row 2i+j = in row j*d/2+i (llama.cpp's permute). */
static void permute_qk(float *out, lz_mat w, int H, int d, int D)
{
    for (int h = 0; h < H; h++)
        for (int i = 0; i < d / 2; i++)
            for (int j = 0; j < 2; j++)
                lz_mat_get_f32(w, ((size_t)h * d + (size_t)j * (d / 2) + i) * D, (size_t)D,
                               out + ((size_t)h * d + 2 * i + j) * D);
}

/* Writes matrix p, (outn, in), as tensor nm of type (widened first when 16-bit). 0 or -1. */
static int write_mat(lz_gguf_writer *w, const char *nm, uint32_t type, int64_t in, int64_t outn, lz_mat p)
{
    float *own;
    const float *f = lz_mat_f32(p, (size_t)(in * outn), &own);
    int64_t ne[2] = {in, outn};
    int rc = !f || lz_gguf_write_tensor(w, nm, type, 2, ne, f) ? -1 : 0;
    free(own);
    return rc;
}

static const char *token_text(json_t *v)
{
    if (json_is_string(v)) return json_string_value(v);
    json_t *c = json_object_get(v, "content");
    return json_is_string(c) ? json_string_value(c) : NULL;
}

/* Writes tokenizer.ggml.* from tokenizer.json (+ tokenizer_config.json).
 * V is the embedding's row count: ids without a token become [PAD<id>]. */
static int write_tokenizer(lz_gguf_writer *w, const char *dir, const lz_llama *m, char *err, size_t errlen)
{
    char path[1024];
    snprintf(path, sizeof path, "%.1000s/tokenizer.json", dir);
    if (access(path, R_OK) != 0) {
        fprintf(stderr, "lazy-convert: %s not found: the GGUF gets no tokenizer\n", path);
        return 0;
    }
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) { snprintf(err, errlen, "%s: %s (line %d)", path, je.text, je.line); return -1; }
    const int V = m->cfg.vocab;
    char **tok = calloc((size_t)V, sizeof *tok);
    int32_t *type = calloc((size_t)V, sizeof *type);
    char **merges = NULL;
    size_t n_merges = 0;
    int rc = -1;
    json_t *model = json_object_get(root, "model"), *vocab = json_object_get(model, "vocab");
    json_t *jm = json_object_get(model, "merges");
    json_t *mt = json_object_get(model, "type");
    if (!tok || !type) { snprintf(err, errlen, "out of memory"); goto done; }
    if (!json_is_string(mt) || strcmp(json_string_value(mt), "BPE") || !json_is_object(vocab) || !json_is_array(jm)) {
        snprintf(err, errlen, "%s: model.type must be \"BPE\" with a vocab object and a merges list", path);
        goto done;
    }
    if (json_is_true(json_object_get(model, "byte_fallback"))) {
        snprintf(err, errlen, "%s: a SentencePiece-style BPE (byte_fallback) cannot be written as GGUF \"gpt2\"; "
                 "only byte-level BPE (Llama 3) is supported by this converter", path);
        goto done;
    }
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        json_int_t id = json_integer_value(val);
        if (!json_is_integer(val) || id < 0 || id >= V) {
            snprintf(err, errlen, "%s: token '%s' has id %lld outside the embedding's %d rows", path, key, (long long)id, V);
            goto done;
        }
        free(tok[id]);
        if (!(tok[id] = strdup(key))) { snprintf(err, errlen, "out of memory"); goto done; }
        type[id] = TT_NORMAL;
    }
    size_t i;
    json_t *at = json_object_get(root, "added_tokens");
    json_array_foreach(at, i, val) {
        json_t *jid = json_object_get(val, "id");
        const char *content = token_text(val);
        json_int_t id = json_integer_value(jid);
        if (!json_is_integer(jid) || !content || id < 0 || id >= V) {
            snprintf(err, errlen, "%s: added_tokens[%zu] has no content or an id outside [0, %d)", path, i, V);
            goto done;
        }
        free(tok[id]);
        if (!(tok[id] = strdup(content))) { snprintf(err, errlen, "out of memory"); goto done; }
        type[id] = json_is_true(json_object_get(val, "special")) ? TT_CONTROL : TT_USER_DEFINED;
    }
    for (int id = 0; id < V; id++)
        if (!tok[id]) {
            char b[32];
            snprintf(b, sizeof b, "[PAD%d]", id);
            if (!(tok[id] = strdup(b))) { snprintf(err, errlen, "out of memory"); goto done; }
            type[id] = TT_UNUSED;
        }
    n_merges = json_array_size(jm);
    merges = calloc(n_merges ? n_merges : 1, sizeof *merges);
    if (!merges) { snprintf(err, errlen, "out of memory"); goto done; }
    json_array_foreach(jm, i, val) {
        if (json_is_string(val)) merges[i] = strdup(json_string_value(val));
        else if (json_is_array(val) && json_array_size(val) == 2 && json_is_string(json_array_get(val, 0)) &&
                 json_is_string(json_array_get(val, 1))) {
            const char *a = json_string_value(json_array_get(val, 0)), *b = json_string_value(json_array_get(val, 1));
            size_t la = strlen(a), lb = strlen(b);
            if ((merges[i] = malloc(la + lb + 2))) { memcpy(merges[i], a, la); merges[i][la] = ' '; memcpy(merges[i] + la + 1, b, lb + 1); }
        } else {
            snprintf(err, errlen, "%s: merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", path, i);
            goto done;
        }
        if (!merges[i]) { snprintf(err, errlen, "out of memory"); goto done; }
    }
    int bos = m->tok ? lz_tokenizer_bos(m->tok) : -1, eos = m->tok ? lz_tokenizer_eos(m->tok) : -1;
    if (bos < 0) bos = m->cfg.bos;
    if (eos < 0) eos = m->cfg.eos;
    int bad = lz_gguf_write_str(w, "tokenizer.ggml.model", "gpt2") ||
              lz_gguf_write_str(w, "tokenizer.ggml.pre", "llama-bpe") ||
              lz_gguf_write_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, (uint64_t)V) ||
              lz_gguf_write_arr(w, "tokenizer.ggml.token_type", LZ_GGUF_INT32, type, (uint64_t)V) ||
              lz_gguf_write_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges, n_merges);
    if (bos >= 0) bad |= lz_gguf_write_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
    if (eos >= 0) bad |= lz_gguf_write_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
    bad |= lz_gguf_write_bool(w, "tokenizer.ggml.add_bos_token", bos >= 0);
    char *tmpl = NULL, terr[256] = "";
    if (lz_chat_template_hf(dir, &tmpl, terr, sizeof terr)) fprintf(stderr, "lazy-convert: warning: %s\n", terr);
    if (tmpl) bad |= lz_gguf_write_str(w, "tokenizer.chat_template", tmpl);
    free(tmpl);
    if (bad) { snprintf(err, errlen, "out of memory"); goto done; }
    rc = 0;
done:
    if (tok) for (int k = 0; k < V; k++) free(tok[k]);
    if (merges) for (size_t k = 0; k < n_merges; k++) free(merges[k]);
    free(tok); free(type); free(merges);
    json_decref(root);
    return rc;
}

int main(int argc, char **argv)
{
    lz_cli_init("lazy-convert");
    const char *dir = NULL, *out = NULL;
    int outtype = -1, quiet = 0, opt;
    static const struct option longopts[] = {
        LZ_CLI_OPT_HELP, LZ_CLI_OPT_OUTPUT, LZ_CLI_OPT_QUIET,
        LZ_OPT_ARG("type", 'T'),
        {"outtype", required_argument, NULL, 'T'}, /* the earlier name (llama.cpp's convert script's) */
        {NULL, 0, NULL, 0}};
    static const char *const types[] = {"f32", "f16", "bf16", NULL};
    static const uint32_t type_ids[] = {LZ_GGML_F32, LZ_GGML_F16, LZ_GGML_BF16};
    while ((opt = lz_cli_getopt(argc, argv, "hVo:q", longopts)) != -1) {
        switch (opt) {
        case 'h': usage(stdout); return LZ_EXIT_OK;
        case 'V': lz_cli_version(); return LZ_EXIT_OK;
        case 'o': out = optarg; break;
        case 'q': quiet = 1; break;
        case 'T': if (lz_cli_choice("--type", optarg, types, &outtype)) return LZ_EXIT_USAGE; break;
        default: return LZ_EXIT_USAGE; /* '?': lz_cli_getopt named it */
        }
    }
    if (optind < argc) dir = argv[optind++];
    if (optind < argc && !out) out = argv[optind++];
    if (optind < argc) return lz_cli_usage("unexpected argument '%s'", argv[optind]);
    if (!dir || !out) return lz_cli_usage("need HF_FOLDER and OUT.gguf");
    int erc = lz_cli_check_env();
    if (erc) return erc;
    char err[2048] = "";
    lz_llama *m;
    if (lz_llama_load_hf(dir, &m, err, sizeof err)) return lz_cli_fail("%s", err);
    const lz_llama_config *c = &m->cfg;
    uint32_t type = LZ_GGML_F32;
    if (outtype >= 0) {
        type = type_ids[outtype];
    } else {
        const lz_st_tensor *e = lz_st_set_find(m->extra, "model.embed_tokens.weight");
        type = e && e->dtype == LZ_ST_F16 ? LZ_GGML_F16 : e && e->dtype == LZ_ST_BF16 ? LZ_GGML_BF16 : LZ_GGML_F32;
    }
    const char *slash = strrchr(dir, '/');
    const char *name = slash && slash[1] ? slash + 1 : dir;
    const int64_t D = c->dim, F = c->ffn_dim, V = c->vocab, d = c->head_dim, Hd = c->n_heads * d, KVd = c->n_kv_heads * d;
    lz_gguf_writer *w = lz_gguf_writer_new();
    float *perm = malloc((size_t)Hd * D * sizeof(float));
    int rc = 1;
    if (!w || !perm) { fprintf(stderr, "lazy-convert: out of memory\n"); goto done; }
    int bad = lz_gguf_write_str(w, "general.architecture", "llama") || lz_gguf_write_str(w, "general.name", name) ||
              lz_gguf_write_u32(w, "llama.vocab_size", (uint32_t)V) ||
              lz_gguf_write_u32(w, "llama.context_length", (uint32_t)c->ctx) ||
              lz_gguf_write_u32(w, "llama.embedding_length", (uint32_t)D) ||
              lz_gguf_write_u32(w, "llama.block_count", (uint32_t)c->n_layers) ||
              lz_gguf_write_u32(w, "llama.feed_forward_length", (uint32_t)F) ||
              lz_gguf_write_u32(w, "llama.attention.head_count", (uint32_t)c->n_heads) ||
              lz_gguf_write_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads) ||
              lz_gguf_write_u32(w, "llama.attention.key_length", (uint32_t)d) ||
              lz_gguf_write_u32(w, "llama.attention.value_length", (uint32_t)d) ||
              lz_gguf_write_u32(w, "llama.rope.dimension_count", (uint32_t)d) ||
              lz_gguf_write_f32(w, "llama.rope.freq_base", c->rope_theta) ||
              lz_gguf_write_f32(w, "llama.attention.layer_norm_rms_epsilon", c->norm_eps);
    /* rotary scaling: equal divisors are linear scaling, anything else rope_freqs.weight */
    int linear = c->has_rope_divisors;
    for (int i = 1; i < d / 2 && linear; i++) linear = c->rope_divisors[i] == c->rope_divisors[0];
    if (c->has_rope_divisors && linear) {
        bad |= lz_gguf_write_str(w, "llama.rope.scaling.type", "linear") ||
               lz_gguf_write_f32(w, "llama.rope.scaling.factor", c->rope_divisors[0]);
    } else if (c->has_rope_divisors) {
        int64_t ne[1] = {d / 2};
        bad |= lz_gguf_write_tensor(w, "rope_freqs.weight", LZ_GGML_F32, 1, ne, c->rope_divisors);
    }
    if (bad || write_tokenizer(w, dir, m, err, sizeof err)) {
        fprintf(stderr, "lazy-convert: %s\n", err[0] ? err : "out of memory");
        goto done;
    }
#define VEC(nm, p) do { int64_t ne_[1] = {D}; bad |= lz_gguf_write_tensor(w, nm, LZ_GGML_F32, 1, ne_, p); } while (0)
#define MAT(nm, p, in, outn) do { bad |= write_mat(w, nm, type, (in), (outn), (p)); } while (0)
    MAT("token_embd.weight", m->tok_embd, D, V);
    VEC("output_norm.weight", m->out_norm);
    if (!c->tied_output) MAT("output.weight", m->output, D, V);
    for (int l = 0; l < c->n_layers && !bad; l++) {
        const lz_llama_layer *y = &m->layers[l];
        char n[64];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s ".weight", l), n)
        VEC(NAME("attn_norm"), y->attn_norm);
        permute_qk(perm, y->wq, c->n_heads, (int)d, (int)D);
        MAT(NAME("attn_q"), ((lz_mat){perm, LZ_MAT_F32}), D, Hd);
        permute_qk(perm, y->wk, c->n_kv_heads, (int)d, (int)D);
        MAT(NAME("attn_k"), ((lz_mat){perm, LZ_MAT_F32}), D, KVd);
        MAT(NAME("attn_v"), y->wv, D, KVd);
        MAT(NAME("attn_output"), y->wo, Hd, D);
        VEC(NAME("ffn_norm"), y->ffn_norm);
        MAT(NAME("ffn_gate"), y->w_gate, D, F);
        MAT(NAME("ffn_up"), y->w_up, D, F);
        MAT(NAME("ffn_down"), y->w_down, F, D);
#undef NAME
    }
#undef VEC
#undef MAT
    if (bad) { fprintf(stderr, "lazy-convert: out of memory while converting tensors\n"); goto done; }
    if (lz_gguf_writer_save(w, out, err, sizeof err)) { fprintf(stderr, "lazy-convert: %s\n", err); goto done; }
    if (!quiet) fprintf(stderr, "lazy-convert: wrote %s (%s, %d layers, vocab %lld, rope %s)\n", out, lz_ggml_type_name(type),
            c->n_layers, (long long)V,
            !c->has_rope_divisors ? "unscaled" : linear ? "linear" : "rope_freqs.weight");
    rc = 0;
done:
    free(perm);
    lz_gguf_writer_free(w);
    lz_llama_free(m);
    return rc;
}
