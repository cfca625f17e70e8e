/* bench_adakv.c - Ada-KV at ingest, measured: (1) the L1 distance between
 * each layer's attention output with the full and with the compressed
 * document cache, for held-out tokens placed right after the document (the
 * continuation of the same text), averaged over layers, query rows, heads and
 * texts, per policy and budget (10/20/50%); also the KL divergence of the
 * next-token distributions when the whole model runs over the compressed
 * cache; (2) ingest cost: encoding time with and without compression (the
 * scoring's share), payload bytes on disk per token (bf16, shuffle+zstd).
 *
 * Per layer l the queries and the continuation's own keys are those of the
 * full run, so only the document's cache differs (the quantity of the Ada-KV
 * bound):  L1_l = mean_{row, head} || o_full - o_comp ||_1.
 *
 * usage: bench_adakv [--model PATH] [--texts N] [--doc-tokens N] [--cont N]
 *                    [--threads N] [--window N] [--timing-model]
 * Model: stories260K (../shared/fixtures/models/stories260K.gguf; SKIP when
 * absent) or --model (the trained QA model, models/default.gguf). Texts:
 * TinyStories-like stories written for this benchmark, then the longest
 * 2WikiMQA passages (../shared/fixtures/qa/2wikimqa_corpus.json).
 * --timing-model adds the ingest timing on a generated 24M-parameter model.
 *
 * Legend: L = layers, H/KV = heads, d = head_dim, s = prefix, n = document
 * tokens, Q = continuation (held-out) tokens.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "ingest/encode.h"
#include "ingest/kvpolicy.h"
#include "model/attention.h"
#include "model/llama.h"
#include "model/mkmodel.h"
#include "model/prompt.h"

static const char *STORIES[] = {
    "Once upon a time, there was a little girl named Lily. She loved to play in the garden with her dog, Max. "
    "One sunny day, Lily found a big red ball under the old tree. She was very happy and ran to show her mom. "
    "\"Mom, look what I found!\" she said. Her mom smiled and said, \"That is a very nice ball, Lily. You can play "
    "with it, but be careful near the pond.\" Lily nodded and ran back outside. She threw the ball to Max, and Max "
    "ran fast to get it. They played all morning. Then the ball rolled into the pond. Lily was sad. She did not "
    "know how to get it back. Max looked at the ball and then at Lily. He jumped into the water and swam to the "
    "ball. He pushed it with his nose until it came back to the grass. Lily hugged Max and said, \"Thank you, Max! "
    "You are the best dog in the world.\" Max wagged his tail. After that, Lily and Max sat under the tree and ate "
    "apples. The sun was warm and the birds were singing. Lily learned that friends help each other when things go "
    "wrong. When the sky turned orange, her mom called them inside for dinner. Lily told her mom about the pond and "
    "how brave Max was. Her mom gave Max a big bone. That night, Lily went to bed with a smile on her face, and Max "
    "slept at the end of her bed, dreaming about red balls and blue ponds.",
    "Tom was a small boy who lived in a house near the forest. Every day he looked at the tall trees and wondered "
    "what was inside. One day, his grandpa said, \"Tom, would you like to go for a walk in the forest with me?\" "
    "Tom jumped up and down. \"Yes, yes!\" he said. They put on their boots and took a basket. In the forest, they "
    "saw many things. They saw a brown rabbit, a green frog and a bird with a yellow beak. Grandpa showed Tom how to "
    "find berries. \"Only pick the red ones,\" he said. Tom picked many berries and put them in the basket. Then "
    "they heard a funny sound. It was a little fox stuck in a bush. The fox was scared and could not move. Tom "
    "wanted to help. Grandpa helped Tom move the branches very slowly. The fox was free! It looked at Tom for a "
    "moment and then ran away into the trees. Tom felt proud. \"We helped the fox,\" he said. Grandpa smiled and "
    "said, \"Yes, we did. Being kind is always good.\" They walked home with the basket full of berries. Grandma "
    "made a big berry pie. Tom ate two pieces and told her about the fox. That night, he dreamed about the forest, "
    "the rabbit, the frog and the little fox that ran away, happy and free.",
    "There was a big blue boat named Bob. Bob lived in a little town by the sea. Every morning, a fisherman named "
    "Sam took Bob out on the water to catch fish. Bob liked the waves and the wind. One day, the sky became dark "
    "and the wind was very strong. The waves were big and Bob was scared. Sam held the wheel tight and said, "
    "\"Don't worry, Bob. We will go home soon.\" But the rain came down hard and they could not see the town. Then "
    "Sam saw a light. It was the lighthouse! The light was bright and showed them the way. Bob followed the light "
    "and soon they were safe in the harbor. The people in the town cheered. A little girl named Mia gave Sam a "
    "warm blanket. Sam patted Bob and said, \"You were very brave today.\" The next day, the sun came out and the "
    "sea was calm again. Sam and Bob went to thank the man who lived in the lighthouse. He was an old man with a "
    "long white beard. He gave them tea and cookies and told them stories about the sea. Bob was happy. He knew "
    "that even on a dark day, there is always a light to show the way home.",
    "Anna had a pretty doll with a pink dress. She took the doll everywhere. One day, Anna went to the park with "
    "her friend Ben. They played on the swings and the slide. When it was time to go home, Anna could not find her "
    "doll. She looked under the bench and behind the tree, but the doll was gone. Anna started to cry. Ben said, "
    "\"Don't cry, Anna. I will help you look.\" They looked everywhere. They asked the lady with the ice cream cart. "
    "She said, \"I saw a little dog with a pink thing in its mouth. It ran to the sandbox.\" Anna and Ben ran to the "
    "sandbox. There was the little dog, playing with the doll! Anna laughed. The dog's owner, a tall man, said he "
    "was sorry. He gave the doll back to Anna. The doll was a little dirty, but Anna did not mind. She hugged Ben "
    "and said, \"Thank you for helping me.\" Ben smiled. On the way home, they bought ice cream. Anna washed the "
    "doll in the sink and put it on the window to dry. The next day, the doll was clean and pink again. Anna and "
    "Ben played with it together in the garden, and they promised to always help each other.",
};

typedef struct { int *ids; int n; } text_ids;

/* Up to max texts with at least need tokens: the stories, then the longest passages. */
static int load_texts(const lz_tokenizer *tok, int need, int max, text_ids *out)
{
    int k = 0;
    for (size_t i = 0; i < sizeof STORIES / sizeof STORIES[0] && k < max; i++) {
        int *ids, n;
        if (lz_prompt_doc_tokens(tok, NULL, STORIES[i], strlen(STORIES[i]), &ids, &n)) return k;
        if (n >= need) out[k++] = (text_ids){ids, n};
        else free(ids);
    }
    const char *dir = getenv("LZ_FIXTURES");
    char fx[512];
    snprintf(fx, sizeof fx, "%s/qa/2wikimqa_corpus.json", dir ? dir : "../shared/fixtures");
    json_error_t e;
    json_t *j = json_load_file(fx, 0, &e);
    for (size_t i = 0; j && json_is_array(j) && i < json_array_size(j) && k < max; i++) {
        json_t *o = json_array_get(j, i);
        const char *t = json_string_value(json_object_get(o, "text")), *ti = json_string_value(json_object_get(o, "title"));
        if (!t || strlen(t) < 1500) continue;
        int *ids, n;
        if (lz_prompt_doc_tokens(tok, ti, t, strlen(t), &ids, &n)) break;
        if (n >= need) out[k++] = (text_ids){ids, n};
        else free(ids);
    }
    json_decref(j);
    return k;
}

/* the policies compared; the last is Ada-SnapKV with --kv-scope model */
static const int KINDS[] = {LZ_KVPOLICY_SNAPKV, LZ_KVPOLICY_ADA_SNAPKV, LZ_KVPOLICY_PYRAMIDKV, LZ_KVPOLICY_ADA_PYRAMIDKV,
                            LZ_KVPOLICY_ADA_SNAPKV};
static const char *BUDGETS[] = {"0.1", "0.2", "0.5"};
enum { NK = 5, NB = 3, K_MODEL = 4 };
static const char *kind_label(int k) { return k == K_MODEL ? "ada-snapkv, model scope" : lz_kvpolicy_name(KINDS[k]); }

/* Attention output of every layer for the Q held-out rows over [prefix][doc] + their own cache. */
static int layer_outputs(const lz_llama *m, const float *qcap, const lz_kv_segment *segs, const lz_kv_cache *own,
                         int Q, float *out)
{
    const lz_llama_config *c = &m->cfg;
    const size_t Hd = (size_t)c->n_heads * c->head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        lz_attn_params ap = {.q = qcap + (size_t)l * Q * Hd, .out = out + (size_t)l * Q * Hd, .n = Q,
                             .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim,
                             .layer = l, .segs = segs, .n_segs = 2,
                             .k = own->k + (size_t)l * c->n_kv_heads * own->cap * c->head_dim,
                             .v = own->v + (size_t)l * c->n_kv_heads * own->cap * c->head_dim,
                             .cache_stride = own->cap, .n_past = 0, .inv_freq = m->inv_freq,
                             .rope_layout = c->rope_layout};
        if (lz_attention_cpu(&ap)) return -1;
    }
    return 0;
}

static void log_softmax(float *x, int V)
{
    float mx = x[0];
    for (int i = 1; i < V; i++) mx = x[i] > mx ? x[i] : mx;
    double s = 0;
    for (int i = 0; i < V; i++) s += exp(x[i] - mx);
    float ls = mx + (float)log(s);
    for (int i = 0; i < V; i++) x[i] -= ls;
}

static int g_window = LZ_KVPOLICY_DEFAULT_WINDOW;

static int run_quality(const char *path, int max_texts, int n_doc, int Q)
{
    char err[512];
    lz_llama *m;
    if (lz_llama_load(path, &m, err, sizeof err)) { fprintf(stderr, "bench_adakv: %s\n", err); return 1; }
    const lz_llama_config *c = &m->cfg;
    const int L = c->n_layers, H = c->n_heads, KV = c->n_kv_heads, d = c->head_dim, V = c->vocab;
    int *prefix, s;
    lz_prompt_prefix_tokens(m->tok, &prefix, &s);
    text_ids texts[64];
    int nt = load_texts(m->tok, n_doc + Q, max_texts < 64 ? max_texts : 64, texts);
    printf("model %s: L=%d H=%d KV=%d d=%d; prefix %d tokens; %d texts of %d document + %d held-out tokens\n", path, L,
           H, KV, d, s, nt, n_doc, Q);
    if (!nt) { printf("SKIP no text long enough\n"); lz_llama_free(m); free(prefix); return 0; }
    lz_encoder *e;
    if (lz_encoder_new(m, prefix, s, &e, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    const size_t Hd = (size_t)H * d, qn = (size_t)L * Q * Hd;
    float *qcap = malloc(qn * sizeof(float)), *of = malloc(qn * sizeof(float)), *oc = malloc(qn * sizeof(float));
    float *lf = malloc((size_t)Q * V * sizeof(float)), *lc = malloc((size_t)Q * V * sizeof(float));
    size_t dn = (size_t)L * KV * n_doc * d;
    float *kf = malloc(dn * sizeof(float)), *vf = malloc(dn * sizeof(float));
    double l1[NK][NB] = {{0}}, kl[NK][NB] = {{0}}, kept[NK][NB] = {{0}}, l1_layer[NK][NB][64] = {{{0}}};
    double ref_norm = 0;
    lz_llama_scratch *sc = lz_llama_scratch_new(m, 256);
    lz_kv_cache own, tmp;
    lz_kv_cache_init(&own, c, Q);
    lz_kv_cache_init(&tmp, c, Q);
    const lz_kv_cache *pc = lz_encoder_prefix_cache(e);
    lz_kv_segment sp = {.k = pc->k, .v = pc->v, .n = s, .stride = pc->cap};
    for (int t = 0; t < nt; t++) {
        const int *doc = texts[t].ids, *cont = texts[t].ids + n_doc;
        /* full cache: copy it out packed (stride n) */
        lz_encoder_set_kvpolicy(e, NULL);
        if (lz_encoder_run(e, doc, n_doc, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        const lz_kv_cache *dc = lz_encoder_doc_cache(e);
        for (int lh = 0; lh < L * KV; lh++) {
            memcpy(kf + (size_t)lh * n_doc * d, dc->k + (size_t)lh * dc->cap * d, (size_t)n_doc * d * sizeof(float));
            memcpy(vf + (size_t)lh * n_doc * d, dc->v + (size_t)lh * dc->cap * d, (size_t)n_doc * d * sizeof(float));
        }
        lz_kv_segment sfull = {.k = kf, .v = vf, .n = n_doc, .stride = n_doc};
        lz_kv_segment segs[2] = {sp, sfull};
        /* the held-out rows over the full cache: their queries, own keys, logits */
        lz_kv_cache_reset(&own, s + n_doc);
        lz_llama_scratch_capture(sc, qcap, s + n_doc, Q);
        lz_llama_forward(m, sc, &own, segs, 2, cont, Q, lf, LZ_LOGITS_ALL);
        lz_llama_scratch_capture(sc, NULL, 0, 0);
        layer_outputs(m, qcap, segs, &own, Q, of);
        for (size_t i = 0; i < qn; i++) ref_norm += fabs(of[i]) / (double)(qn / d) / nt;
        for (int i = 0; i < Q; i++) log_softmax(lf + (size_t)i * V, V);
        for (int k = 0; k < NK; k++)
            for (int b = 0; b < NB; b++) {
                lz_kvpolicy p;
                lz_kvpolicy_default(&p);
                p.kind = KINDS[k];
                p.scope_model = k == K_MODEL;
                p.window = g_window;
                lz_kvpolicy_parse_budget(BUDGETS[b], &p);
                lz_encoder_set_kvpolicy(e, &p);
                if (lz_encoder_run(e, doc, n_doc, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
                const int *nk = lz_encoder_kept(e);
                dc = lz_encoder_doc_cache(e);
                long ks = 0;
                for (int lh = 0; nk && lh < L * KV; lh++) ks += nk[lh];
                kept[k][b] += (double)ks / ((double)L * KV * n_doc) / nt;
                lz_kv_segment scomp = {.k = dc->k, .v = dc->v, .n_kept = nk, .n = n_doc, .stride = dc->cap};
                lz_kv_segment cs[2] = {sp, scomp};
                layer_outputs(m, qcap, cs, &own, Q, oc);
                for (int l = 0; l < L; l++) {
                    double acc = 0;
                    for (size_t i = 0; i < (size_t)Q * Hd; i++) acc += fabs(of[(size_t)l * Q * Hd + i] - oc[(size_t)l * Q * Hd + i]);
                    acc /= (double)Q * H; /* per (row, head): L1 of a d-vector */
                    l1[k][b] += acc / L / nt;
                    if (l < 64) l1_layer[k][b][l] += acc / nt;
                }
                /* end to end: the model over the compressed cache */
                lz_kv_cache_reset(&tmp, s + n_doc);
                lz_llama_forward(m, sc, &tmp, cs, 2, cont, Q, lc, LZ_LOGITS_ALL);
                double kls = 0;
                for (int i = 0; i < Q; i++) {
                    float *a = lf + (size_t)i * V, *bb = lc + (size_t)i * V;
                    log_softmax(bb, V);
                    for (int v = 0; v < V; v++) kls += exp(a[v]) * (a[v] - bb[v]);
                }
                kl[k][b] += kls / Q / nt;
            }
    }
    printf("\nwindow %d; mean ||o||_1 per (row, head) with the full cache: %.4f\n", g_window, ref_norm / L);
    printf("\nL1 distance of the attention output, full vs compressed document cache (mean over layers, rows,\n"
           "heads, %d texts); KL(full || compressed) of next-token distributions, model run end to end\n\n", nt);
    printf("| policy | budget | kept | L1 (attention output) | KL (nats) |\n|---|---:|---:|---:|---:|\n");
    for (int b = 0; b < NB; b++)
        for (int k = 0; k < NK; k++)
            printf("| %s | %s | %.3f | %.5f | %.5f |\n", kind_label(k), BUDGETS[b], kept[k][b], l1[k][b],
                   kl[k][b]);
    printf("\nper layer L1 (SnapKV / Ada-SnapKV / Ada-SnapKV, model scope):\n");
    for (int b = 0; b < NB; b++) {
        printf("  budget %s:", BUDGETS[b]);
        for (int l = 0; l < L && l < 64; l++)
            printf(" [%d] %.4f/%.4f/%.4f", l, l1_layer[0][b][l], l1_layer[1][b][l], l1_layer[K_MODEL][b][l]);
        printf("\n");
    }
    int ok = 1;
    for (int b = 0; b < NB; b++) ok &= l1[1][b] < l1[0][b];
    printf("\nAda-SnapKV below SnapKV at every budget: %s\n", ok ? "yes" : "NO");
    int okm = 1;
    for (int b = 0; b < NB; b++) okm &= l1[K_MODEL][b] < l1[0][b];
    printf("Ada-SnapKV with the model scope below SnapKV at every budget: %s\n", okm ? "yes" : "NO");
    lz_kv_cache_free(&own);
    lz_kv_cache_free(&tmp);
    lz_llama_scratch_free(sc);
    for (int t = 0; t < nt; t++) free(texts[t].ids);
    free(qcap); free(of); free(oc); free(lf); free(lc); free(kf); free(vf); free(prefix);
    lz_encoder_free(e);
    lz_llama_free(m);
    return 0;
}

/* Encoding time with and without compression, scoring share, bytes per token on disk. */
static int run_timing(const char *path, const char *label, int max_texts, int n_doc)
{
    char err[512];
    lz_llama *m;
    if (lz_llama_load(path, &m, err, sizeof err)) { fprintf(stderr, "bench_adakv: %s\n", err); return 1; }
    int *prefix, s;
    lz_prompt_prefix_tokens(m->tok, &prefix, &s);
    text_ids texts[64];
    int nt = load_texts(m->tok, n_doc, max_texts < 64 ? max_texts : 64, texts);
    lz_encoder *e;
    lz_payload_codec *codec = lz_payload_codec_new();
    if (!nt || lz_encoder_new(m, prefix, s, &e, err, sizeof err)) { fprintf(stderr, "no texts / %s\n", err); return 1; }
    printf("\n%s (L=%d H=%d KV=%d d=%d D=%d): %d documents of %d tokens, bf16 shuffle+zstd level 3\n\n", label,
           m->cfg.n_layers, m->cfg.n_heads, m->cfg.n_kv_heads, m->cfg.head_dim, m->cfg.dim, nt, n_doc);
    printf("| policy | budget | encode s | of which scoring s | scoring / encoding | bytes on disk per token |\n"
           "|---|---:|---:|---:|---:|---:|\n");
    const char *pols[][2] = {{"none", ""}, {"snapkv", "0.2"}, {"ada-snapkv", "0.2"}, {"ada-pyramidkv", "0.2"},
                             {"ada-snapkv", "0.5"}, {"ada-snapkv", "0.1"}};
    for (int r = 0; r < 2; r++) /* warm up once, report the second pass */
        for (size_t pi = r ? 0 : 5; pi < sizeof pols / sizeof pols[0]; pi++) {
            lz_kvpolicy p;
            lz_kvpolicy_default(&p);
            p.kind = lz_kvpolicy_parse_name(pols[pi][0]);
            if (p.kind) lz_kvpolicy_parse_budget(pols[pi][1], &p);
            lz_encoder_set_kvpolicy(e, &p);
            double t_enc = 0, tp0 = lz_encoder_policy_seconds(e);
            size_t bytes = 0;
            for (int t = 0; t < nt; t++) {
                double t0 = lz_now_s();
                lz_encoder_run(e, texts[t].ids, n_doc, err, sizeof err);
                t_enc += lz_now_s() - t0;
                void *blob;
                size_t len;
                lz_encoder_pack(e, 1, codec, LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD, 3, &blob, &len, err, sizeof err);
                bytes += len;
                free(blob);
            }
            double tp = lz_encoder_policy_seconds(e) - tp0;
            if (r)
                printf("| %s | %s | %.3f | %.4f | %.2f%% | %.0f |\n", pols[pi][0], pols[pi][1][0] ? pols[pi][1] : "-",
                       t_enc, tp, 100.0 * tp / (t_enc - tp), (double)bytes / ((double)nt * n_doc));
        }
    for (int t = 0; t < nt; t++) free(texts[t].ids);
    free(prefix);
    lz_payload_codec_free(codec);
    lz_encoder_free(e);
    lz_llama_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    const char *model = NULL;
    int texts = 16, n_doc = 384, Q = 32, threads = 0, timing_model = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--texts") && i + 1 < argc) texts = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--doc-tokens") && i + 1 < argc) n_doc = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cont") && i + 1 < argc) Q = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--timing-model")) timing_model = 1;
        else if (!strcmp(argv[i], "--window") && i + 1 < argc) g_window = atoi(argv[++i]);
        else { fprintf(stderr, "usage: bench_adakv [--model PATH] [--texts N] [--doc-tokens N] [--cont N] [--threads N] [--window N] [--timing-model]\n"); return 2; }
    }
    lz_llama_set_threads(threads);
    char fx[512];
    if (!model) {
        const char *dir = getenv("LZ_FIXTURES");
        snprintf(fx, sizeof fx, "%s/models/stories260K.gguf", dir ? dir : "../shared/fixtures");
        if (access(fx, R_OK)) { printf("SKIP %s not found\n", fx); return 0; }
        model = fx;
    }
    if (n_doc < 64 || Q < 1 || texts < 1 || g_window < 1 || g_window >= n_doc / 2) { fprintf(stderr, "bench_adakv: bad sizes\n"); return 2; }
    if (run_quality(model, texts, n_doc, Q)) return 1;
    if (run_timing(model, model, texts, n_doc)) return 1;
    if (timing_model) {
        char path[] = "/tmp/bench_adakv.XXXXXX.gguf", err[256];
        int fd = mkstemps(path, 5);
        if (fd < 0) return 1;
        close(fd);
        lz_mkmodel_opts o;
        lz_mkmodel_defaults(&o);
        o.dim = 512; o.n_layers = 8; o.n_heads = 8; o.n_kv_heads = 2; o.head_dim = 64; o.ffn_dim = 1536;
        o.vocab = 512; o.ctx = 2048;
        if (lz_mkmodel_write(&o, path, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        int rc = run_timing(path, "generated 24M-parameter model", texts < 8 ? texts : 8, n_doc);
        unlink(path);
        if (rc) return 1;
    }
    return 0;
}
