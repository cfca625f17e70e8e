/* bench_workload.c - document cache hit rates on replayed question streams:
 * the product's cache (cache/doc_cache.c) under its frequency policy (lfu)
 * and LRU, in one tier (HBM) or two (HBM, then a host tier below it), against
 * the clairvoyant bound on the same stream and budget (cache/belady.c).
 *
 * A question retrieves K distinct documents drawn by Zipf(alpha) popularity
 * over a random permutation of the corpus (alpha 0: uniform), placed in the
 * prompt in the order drawn (eval/zipf.h: the generator lazyeval's workload
 * mode replays too). A document's cached size is its tokens x the KV
 * bytes a token (default Llama-3.1-8B bf16: 131,072). Keys: lazy mode, the
 * document (one copy whatever its position); block mode, (document, offset)
 * with the offset = tokens of the documents before it in the prompt.
 *
 * Two tiers: a document evicted from HBM, or loaded from the store and not
 * admitted there, is offered to the host tier (its own cache, same policy);
 * an HBM miss looks in the host tier before the store, and a host hit is
 * promoted to HBM (the host keeps its copy). Hits are counted per tier; the
 * bound for HBM is Belady on the HBM budget, for the two tiers together
 * Belady on the sum of the budgets (no hierarchy of those two sizes holds
 * more). "bound" is the better of the two Belady ranks (cache/belady.h).
 *
 * The values are dummies: only keys, sizes and the policy's decisions count.
 * usage: see --help. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/cli.h"
#include "eval/zipf.h"
#include "cache/belady.h"
#include "cache/doc_cache.h"
#include "formats/gguf.h"
#include "model/prompt.h"
#include "tokenizer/tokenizer.h"

#define MAXL 16

static void usage(FILE *f)
{
    fprintf(f,
            "usage: bench_workload [--setup a|b-2wiki|b-hotpot] [options]\n"
            "\n"
            "Replays question streams through the document cache (lfu and lru) and the clairvoyant\n"
            "bound (Belady's MIN, a question's own documents pinned); prints a markdown table of hit\n"
            "rates per tier, the bound and the policy / bound ratio.\n"
            "\n"
            "  --setup NAME           a: synthetic 100 x 2048 tokens, 5 a question, alpha 2.1 and 0,\n"
            "                         budgets 1G,4G,16G, modes lazy and block (the paper's setup);\n"
            "                         b-2wiki / b-hotpot: the fixture corpus (../shared/fixtures/qa, or\n"
            "                         $LZ_FIXTURES/qa) tokenized by llama3-vocab.gguf, 10 a question,\n"
            "                         alpha 0.8,1.0,1.2, budgets 1G,4G, host tier none and the corpus;\n"
            "                         exits 2 when the fixtures are absent. Options after it override.\n"
            "  --corpus SPEC          synthetic:N:T (N documents of T tokens) or a JSON file: an array\n"
            "                         of {\"title\",\"text\"} (2WikiMQA) or an object title -> sentences\n"
            "                         (HotpotQA)\n"
            "  --vocab PATH           the tokenizer (a GGUF, vocabulary-only is enough) for a file corpus\n"
            "  --max-docs N           the first N documents of a file corpus (default all)\n"
            "  --bytes-per-token B    KV bytes a token (default 131072)\n"
            "  --questions LIST       questions a stream (default 2000), e.g. 200,2000\n"
            "  --docs K               distinct documents a question\n"
            "  --alpha LIST           Zipf exponents (0: uniform), e.g. 0.8,1.0,1.2\n"
            "  --seed S               the permutation and the stream (default 1)\n"
            "  --budget LIST          HBM budgets, e.g. 1G,4G,16G\n"
            "  --host-budget LIST     host tier budgets: 0 (none), a size, or 'corpus' (the whole corpus)\n"
            "  --mode lazy|block|both\n"
            "  --policy lfu|lru|both  (default both)\n"
            "  --question-tokens N, --answer-tokens N\n"
            "                         recorded with the setup (their KV is not cached across questions,\n"
            "                         so they do not change the hit rates)\n"
            "  --oracle               also the best static set for the popularity (known from 50,000 other\n"
            "                         questions): what an online policy can expect to reach at most\n"
            "  --json FILE            the rows as JSON too\n"
            "  --emit-corpus FILE     the corpus as lazyingest JSONL (ids d00000, d00001, ... in corpus order)\n"
            "  --emit-questions FILE  the first stream (first --alpha, first --questions) as lazyquery\n"
            "                         --questions JSONL, each question naming its documents (\"docs\"), so the\n"
            "                         product replays exactly the stream simulated here\n"
            "  -h, --help\n");
}

/* ---- lists ---- */
static int split_list(const char *s, char out[MAXL][64])
{
    int n = 0;
    while (*s && n < MAXL) {
        size_t l = strcspn(s, ",");
        snprintf(out[n++], 64, "%.*s", (int)(l < 63 ? l : 63), s);
        s += l;
        if (*s == ',') s++;
    }
    return n;
}

/* ---- corpus ---- */
typedef struct {
    int n;
    int *tokens;
    char name[512];
    char **title, **text; /* kept for --emit-corpus (NULL otherwise) */
} corpus;

static int keep_texts; /* --emit-corpus: load_corpus keeps every document's title and text */

static int add_doc(corpus *c, const lz_tokenizer *tok, const char *title, const char *text, int *cap)
{
    int *ids = NULL, n = 0;
    if (lz_prompt_doc_tokens(tok, title, text, strlen(text), &ids, &n)) return -1;
    free(ids);
    if (c->n == *cap) {
        *cap = *cap ? *cap * 2 : 1024;
        c->tokens = realloc(c->tokens, (size_t)*cap * sizeof(int));
        if (!c->tokens) return -1;
    }
    if (keep_texts) {
        c->title = realloc(c->title, (size_t)*cap * sizeof(char *));
        c->text = realloc(c->text, (size_t)*cap * sizeof(char *));
        if (!c->title || !c->text) return -1;
        c->title[c->n] = strdup(title ? title : "");
        c->text[c->n] = strdup(text);
    }
    c->tokens[c->n++] = n;
    return 0;
}

static int load_corpus(const char *spec, const char *vocab, int max_docs, corpus *c)
{
    memset(c, 0, sizeof *c);
    int n, t;
    if (sscanf(spec, "synthetic:%d:%d", &n, &t) == 2) {
        if (n <= 0 || t <= 0) return lz_cli_usage("--corpus: bad synthetic:N:T '%s'", spec);
        c->n = n;
        c->tokens = malloc((size_t)n * sizeof(int));
        for (int i = 0; i < n; i++) c->tokens[i] = t;
        snprintf(c->name, sizeof c->name, "synthetic %d x %d tokens", n, t);
        return 0;
    }
    if (!vocab) return lz_cli_usage("--corpus %s: a file corpus needs --vocab", spec);
    char err[512];
    lz_gguf *g = NULL;
    lz_tokenizer *tok = NULL;
    if (lz_gguf_open(vocab, &g, err, sizeof err) || lz_tokenizer_from_gguf(g, &tok, err, sizeof err)) {
        lz_gguf_close(g);
        return lz_cli_fail("%s", err);
    }
    lz_gguf_close(g);
    json_error_t je;
    json_t *j = json_load_file(spec, 0, &je);
    if (!j) { lz_tokenizer_free(tok); return lz_cli_fail("%s: %s (line %d)", spec, je.text, je.line); }
    int cap = 0, rc = 0;
    if (json_is_array(j)) { /* 2WikiMQA: [{"title", "text"}] */
        for (size_t i = 0; i < json_array_size(j) && !rc && (max_docs <= 0 || c->n < max_docs); i++) {
            json_t *o = json_array_get(j, i);
            const char *ti = json_string_value(json_object_get(o, "title"));
            const char *tx = json_string_value(json_object_get(o, "text"));
            if (tx && *tx) rc = add_doc(c, tok, ti, tx, &cap);
        }
    } else if (json_is_object(j)) { /* HotpotQA: title -> [sentences] */
        const char *ti;
        json_t *v;
        json_object_foreach(j, ti, v) {
            if (rc || (max_docs > 0 && c->n >= max_docs)) break;
            size_t len = 0;
            for (size_t i = 0; i < json_array_size(v); i++) {
                const char *s = json_string_value(json_array_get(v, i));
                len += s ? strlen(s) : 0;
            }
            char *tx = malloc(len + 1), *o = tx;
            if (!tx) { rc = -1; break; }
            for (size_t i = 0; i < json_array_size(v); i++) {
                const char *s = json_string_value(json_array_get(v, i));
                if (s) { memcpy(o, s, strlen(s)); o += strlen(s); }
            }
            *o = 0;
            if (*tx) rc = add_doc(c, tok, ti, tx, &cap);
            free(tx);
        }
    } else {
        rc = lz_cli_fail("%s: neither an array of {title, text} nor an object title -> sentences", spec);
    }
    json_decref(j);
    lz_tokenizer_free(tok);
    if (rc) return rc > 0 ? rc : lz_cli_fail("%s: out of memory", spec);
    if (c->n == 0) return lz_cli_fail("%s: no documents", spec);
    const char *base = strrchr(spec, '/');
    snprintf(c->name, sizeof c->name, "%.400s (%d documents)", base ? base + 1 : spec, c->n);
    return 0;
}

/* ---- streams ---- */
/* Q x K distinct documents a question, drawn by Zipf(alpha) over a random permutation of the corpus
 * (the permutation from seed, the draws from draw_seed): the shared generator, eval/zipf.h. */
static int *make_stream(int n_docs, int Q, int K, double alpha, uint64_t seed, uint64_t draw_seed)
{
    return lz_eval_zipf_stream(n_docs, Q, K, alpha, seed, draw_seed);
}

/* The keys of one mode: dense ids, their sizes, the request stream over them. */
typedef struct {
    int32_t n_keys;
    uint64_t *size;
    int64_t *off;
    int32_t *keys;
    int32_t n_req;
} keyed;

static void make_keys(const corpus *c, const int *stream, int Q, int K, int block, uint64_t bpt, keyed *k)
{
    k->n_req = Q;
    k->off = malloc((size_t)(Q + 1) * sizeof(int64_t));
    k->keys = malloc((size_t)Q * K * sizeof(int32_t));
    size_t cap = 1;
    while (cap < (size_t)Q * K * 2 + 16) cap <<= 1;
    uint64_t *hk = malloc(cap * sizeof(uint64_t)); /* (doc << 32 | offset) + 1, 0 empty */
    int32_t *hv = malloc(cap * sizeof(int32_t));
    memset(hk, 0, cap * sizeof(uint64_t));
    k->size = malloc((size_t)Q * K * sizeof(uint64_t));
    k->n_keys = 0;
    for (int q = 0; q < Q; q++) {
        k->off[q] = (int64_t)q * K;
        uint64_t pos = 0;
        for (int j = 0; j < K; j++) {
            const int d = stream[(size_t)q * K + j];
            const uint64_t key = (((uint64_t)d << 32) | (block ? pos : 0)) + 1;
            size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & (cap - 1);
            while (hk[i] && hk[i] != key) i = (i + 1) & (cap - 1);
            if (!hk[i]) { hk[i] = key; hv[i] = k->n_keys; k->size[k->n_keys++] = (uint64_t)c->tokens[d] * bpt; }
            k->keys[(size_t)q * K + j] = hv[i];
            pos += (uint64_t)c->tokens[d];
        }
    }
    k->off[Q] = (int64_t)Q * K;
    free(hk);
    free(hv);
}

static void free_keys(keyed *k) { free(k->size); free(k->off); free(k->keys); }

/* ---- the product's cache, one or two tiers ---- */
typedef struct {
    int64_t hit1, hit2, miss, bytes_hit1, bytes_hit2, bytes_miss, evicted1, rejected1;
} sim_out;

typedef struct {
    lz_doc_cache *host;
    const keyed *k;
    int closing;
} tier_ctx;

static void offer_host(tier_ctx *t, int32_t id)
{
    if (!t->host || lz_doc_cache_contains(t->host, &id, sizeof id)) return;
    lz_doc_cache_put(t->host, &id, sizeof id, (void *)(intptr_t)(id + 1), t->k->size[id]);
}

/* HBM evicted a value: the value is its key id + 1; it goes down to the host tier */
static void hbm_evicted(void *value, void *ctx)
{
    tier_ctx *t = ctx;
    if (!t->closing) offer_host(t, (int32_t)((intptr_t)value - 1));
}

static void sim(const keyed *k, int policy, uint64_t budget, uint64_t host_budget, sim_out *o)
{
    memset(o, 0, sizeof *o);
    tier_ctx t = { NULL, k, 0 };
    lz_doc_cache *c = lz_doc_cache_new(budget, hbm_evicted, &t);
    lz_doc_cache_set_policy(c, (lz_cache_policy)policy);
    if (host_budget) {
        t.host = lz_doc_cache_new(host_budget, NULL, NULL);
        lz_doc_cache_set_policy(t.host, (lz_cache_policy)policy);
    }
    int32_t *miss = malloc(64 * sizeof(int32_t));
    size_t miss_cap = 64;
    for (int32_t r = 0; r < k->n_req; r++) {
        lz_doc_cache_begin(c);
        if (t.host) lz_doc_cache_begin(t.host);
        size_t nm = 0;
        /* lookups first: a hit is a document resident at the question's start */
        for (int64_t i = k->off[r]; i < k->off[r + 1]; i++) {
            int32_t id = k->keys[i];
            const uint64_t sz = k->size[id];
            if (lz_doc_cache_get(c, &id, sizeof id)) { o->hit1++; o->bytes_hit1 += (int64_t)sz; continue; }
            if (t.host && lz_doc_cache_get(t.host, &id, sizeof id)) { o->hit2++; o->bytes_hit2 += (int64_t)sz; }
            else { o->miss++; o->bytes_miss += (int64_t)sz; }
            if (nm == miss_cap) miss = realloc(miss, (miss_cap *= 2) * sizeof(int32_t));
            miss[nm++] = id;
        }
        /* then the loaded documents are offered to HBM; what it refuses to the host tier */
        for (size_t j = 0; j < nm; j++) {
            int32_t id = miss[j];
            if (!lz_doc_cache_put(c, &id, sizeof id, (void *)(intptr_t)(id + 1), k->size[id])) {
                o->rejected1++;
                offer_host(&t, id);
            }
        }
    }
    lz_doc_cache_stats st;
    lz_doc_cache_get_stats(c, &st);
    o->evicted1 = st.evicted;
    t.closing = 1;
    lz_doc_cache_free(c);
    lz_doc_cache_free(t.host);
    free(miss);
}

/* --oracle: the best static set for the popularity, the knapsack greedy by hits per byte over the
 * counts of an independent stream (the same popularity, other draws: requests n_req .. n_all of k),
 * evaluated on the stream, each key's first access a miss. Under independent draws no online
 * policy is expected to keep more hits than this set: a reference for what is reachable. */
static const int64_t *g_cnt;
static const uint64_t *g_size;
static int cmp_density(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const double dx = (double)g_cnt[x] / (double)g_size[x], dy = (double)g_cnt[y] / (double)g_size[y];
    return dx > dy ? -1 : dx < dy ? 1 : x - y;
}

static int64_t static_oracle(const keyed *k, int32_t n_all, uint64_t budget)
{
    int64_t *pop = calloc((size_t)k->n_keys, sizeof *pop), *cnt = calloc((size_t)k->n_keys, sizeof *cnt);
    int32_t *ord = malloc((size_t)k->n_keys * sizeof *ord);
    for (int64_t i = k->off[k->n_req]; i < k->off[n_all]; i++) pop[k->keys[i]]++;
    for (int64_t i = 0; i < k->off[k->n_req]; i++) cnt[k->keys[i]]++;
    int32_t n = 0;
    for (int32_t i = 0; i < k->n_keys; i++)
        if (cnt[i]) ord[n++] = i; /* keys of the stream itself */
    g_cnt = pop;
    g_size = k->size;
    qsort(ord, (size_t)n, sizeof *ord, cmp_density);
    uint64_t room = budget;
    int64_t hits = 0;
    for (int32_t i = 0; i < n; i++) {
        const int32_t x = ord[i];
        if (pop[x] && k->size[x] <= room) { room -= k->size[x]; hits += cnt[x] - 1; }
    }
    free(pop);
    free(cnt);
    free(ord);
    return hits;
}

static void belady(const keyed *k, uint64_t budget, lz_belady_stats *min, lz_belady_stats *best, lz_belady_method *m)
{
    lz_belady_opts o = { .method = LZ_BELADY_NEXT_USE };
    if ((min && lz_belady_run(k->n_keys, k->size, k->n_req, k->off, k->keys, budget, &o, min)) ||
        lz_belady_best(k->n_keys, k->size, k->n_req, k->off, k->keys, budget, best, m)) {
        fprintf(stderr, "bench_workload: out of memory\n");
        exit(1);
    }
}

/* ---- output ---- */
static void fmt_size(uint64_t b, char *buf, size_t n)
{
    if (b == 0) snprintf(buf, n, "-");
    else if (b % (1ull << 30) == 0) snprintf(buf, n, "%lluG", (unsigned long long)(b >> 30));
    else snprintf(buf, n, "%.1fG", (double)b / (double)(1ull << 30));
}

static double pct(int64_t a, int64_t n) { return n ? 100.0 * (double)a / (double)n : 0; }

/* The corpus as lazyingest JSONL: {"id": "d00000", "title", "text"} a line. */
static int emit_corpus(const corpus *c, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) { lz_cli_fail("%s: cannot write", path); return -1; }
    for (int i = 0; i < c->n; i++) {
        char id[16];
        snprintf(id, sizeof id, "d%05d", i);
        json_t *o = c->text ? json_pack("{s:s, s:s, s:s}", "id", id, "title", c->title[i], "text", c->text[i])
                            : json_pack("{s:s, s:s}", "id", id, "text", "synthetic"); /* synthetic: no texts */
        char *line = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        if (line) fprintf(f, "%s\n", line);
        free(line);
        json_decref(o);
    }
    return fclose(f) ? -1 : 0;
}

/* A stream as lazyquery --questions JSONL: {"id": "q0", "question", "docs": ["d00012", ...]}. */
static int emit_questions(const int *st, int Q, int K, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) { lz_cli_fail("%s: cannot write", path); return -1; }
    for (int q = 0; q < Q; q++) {
        fprintf(f, "{\"id\": \"q%d\", \"question\": \"Question %d: what do these passages say about the earliest "
                   "date they mention, and who is named there?\", \"docs\": [", q, q);
        for (int j = 0; j < K; j++) fprintf(f, "%s\"d%05d\"", j ? ", " : "", st[(size_t)q * K + j]);
        fprintf(f, "]}\n");
    }
    return fclose(f) ? -1 : 0;
}

int main(int argc, char **argv)
{
    lz_cli_init("bench_workload");
    const char *setup = NULL, *corpus_spec = NULL, *vocab = NULL, *json_path = NULL, *emit_c = NULL, *emit_q = NULL;
    const char *alpha_s = NULL, *budget_s = NULL, *host_s = NULL, *questions_s = "2000";
    int K = 0, mode = -1, policy = 2, max_docs = 0, qtok = 32, atok = 16, oracle = 0;
    long seed = 1;
    size_t bpt = 131072;
    static const char *const modes[] = { "lazy", "block", "both", NULL };
    static const char *const pols[] = { "lfu", "lru", "both", NULL };
    static const struct option lo[] = {
        LZ_OPT_ARG("setup", 1), LZ_OPT_ARG("corpus", 2), LZ_OPT_ARG("vocab", 3), LZ_OPT_ARG("bytes-per-token", 4),
        LZ_OPT_ARG("questions", 5), LZ_OPT_ARG("docs", 6), LZ_OPT_ARG("alpha", 7), LZ_OPT_ARG("seed", 8),
        LZ_OPT_ARG("budget", 9), LZ_OPT_ARG("host-budget", 10), LZ_OPT_ARG("mode", 11), LZ_OPT_ARG("json", 12),
        LZ_OPT_ARG("policy", 13), LZ_OPT_ARG("max-docs", 14), LZ_OPT_ARG("question-tokens", 15),
        LZ_OPT_ARG("answer-tokens", 16), LZ_OPT_FLAG("oracle", 17), LZ_OPT_ARG("emit-corpus", 18),
        LZ_OPT_ARG("emit-questions", 19), LZ_OPT_FLAG("help", 'h'), { 0, 0, 0, 0 }
    };
    /* the setup first: its defaults, then the other options over them */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--setup") && i + 1 < argc) setup = argv[i + 1];
        else if (!strncmp(argv[i], "--setup=", 8)) setup = argv[i] + 8;
    }
    static char fx_corpus[1024], fx_vocab[1024];
    if (setup) {
        const char *fx = getenv("LZ_FIXTURES");
        fx = fx ? fx : "../shared/fixtures";
        if (!strcmp(setup, "a")) {
            corpus_spec = "synthetic:100:2048"; K = 5; alpha_s = "2.1,0"; budget_s = "1G,4G,16G"; host_s = "0"; mode = 2;
        } else if (!strcmp(setup, "b-2wiki") || !strcmp(setup, "b-hotpot")) {
            snprintf(fx_corpus, sizeof fx_corpus, "%s/qa/%s", fx,
                     setup[2] == '2' ? "2wikimqa_corpus.json" : "hotpotqa_sample100_corpus.json");
            snprintf(fx_vocab, sizeof fx_vocab, "%s/tokenizers/llama3-vocab.gguf", fx);
            if (access(fx_corpus, R_OK) || access(fx_vocab, R_OK)) {
                fprintf(stderr, "bench_workload: --setup %s needs the fixtures %s and %s: not found\n", setup,
                        fx_corpus, fx_vocab);
                return LZ_EXIT_USAGE;
            }
            corpus_spec = fx_corpus; vocab = fx_vocab; K = 10; alpha_s = "0.8,1.0,1.2"; budget_s = "1G,4G";
            host_s = "0,corpus"; mode = 0;
        } else {
            return lz_cli_usage("--setup: expected a, b-2wiki or b-hotpot, got '%s'", setup);
        }
    }
    int c;
    while ((c = lz_cli_getopt(argc, argv, "h", lo)) != -1) {
        switch (c) {
        case 1: break;
        case 2: corpus_spec = optarg; break;
        case 3: vocab = optarg; break;
        case 4: if (lz_cli_size("--bytes-per-token", optarg, &bpt)) return LZ_EXIT_USAGE; break;
        case 5: questions_s = optarg; break;
        case 6: if (lz_cli_int("--docs", optarg, 1, 1000, &K)) return LZ_EXIT_USAGE; break;
        case 7: alpha_s = optarg; break;
        case 8: if (lz_cli_long("--seed", optarg, 0, 1L << 40, &seed)) return LZ_EXIT_USAGE; break;
        case 9: budget_s = optarg; break;
        case 10: host_s = optarg; break;
        case 11: if (lz_cli_choice("--mode", optarg, modes, &mode)) return LZ_EXIT_USAGE; break;
        case 12: json_path = optarg; break;
        case 13: if (lz_cli_choice("--policy", optarg, pols, &policy)) return LZ_EXIT_USAGE; break;
        case 14: if (lz_cli_int("--max-docs", optarg, 1, 1 << 30, &max_docs)) return LZ_EXIT_USAGE; break;
        case 15: if (lz_cli_int("--question-tokens", optarg, 0, 1 << 20, &qtok)) return LZ_EXIT_USAGE; break;
        case 16: if (lz_cli_int("--answer-tokens", optarg, 0, 1 << 20, &atok)) return LZ_EXIT_USAGE; break;
        case 17: oracle = 1; break;
        case 18: emit_c = optarg; keep_texts = 1; break;
        case 19: emit_q = optarg; break;
        case 'h': usage(stdout); return 0;
        default: return LZ_EXIT_USAGE;
        }
    }
    if (!corpus_spec) return lz_cli_usage("give --setup or --corpus");
    if (!K) K = 5;
    if (!alpha_s) alpha_s = "1.0";
    if (!budget_s) budget_s = "1G";
    if (!host_s) host_s = "0";
    if (mode < 0) mode = 0;
    corpus cp;
    int rc = load_corpus(corpus_spec, vocab, max_docs, &cp);
    if (rc) return rc;
    if (K > cp.n) return lz_cli_usage("--docs %d: the corpus has %d documents", K, cp.n);
    uint64_t corpus_bytes = 0, tok_sum = 0;
    int tmin = 1 << 30, tmax = 0;
    for (int i = 0; i < cp.n; i++) {
        corpus_bytes += (uint64_t)cp.tokens[i] * bpt;
        tok_sum += (uint64_t)cp.tokens[i];
        tmin = cp.tokens[i] < tmin ? cp.tokens[i] : tmin;
        tmax = cp.tokens[i] > tmax ? cp.tokens[i] : tmax;
    }
    char al[MAXL][64], bl[MAXL][64], hl[MAXL][64], ql[MAXL][64];
    int na = split_list(alpha_s, al), nb = split_list(budget_s, bl), nh = split_list(host_s, hl), nq = split_list(questions_s, ql);
    double alphas[MAXL];
    if (emit_c || emit_q) { /* the corpus and the first stream for the product (bench/gpu_workload.sh) */
        double a0;
        int q0;
        if (lz_cli_double("--alpha", al[0], 0, 20, &a0) || lz_cli_int("--questions", ql[0], 1, 10000000, &q0))
            return LZ_EXIT_USAGE;
        if (emit_c && emit_corpus(&cp, emit_c)) return LZ_EXIT_RUNTIME;
        if (emit_q) {
            int *st = make_stream(cp.n, q0, K, a0, (uint64_t)seed, (uint64_t)seed);
            if (!st || emit_questions(st, q0, K, emit_q)) return LZ_EXIT_RUNTIME;
            free(st);
        }
    }
    size_t budgets[MAXL], hosts[MAXL];
    int qs[MAXL];
    for (int i = 0; i < na; i++) if (lz_cli_double("--alpha", al[i], 0, 20, &alphas[i])) return LZ_EXIT_USAGE;
    for (int i = 0; i < nb; i++) if (lz_cli_size("--budget", bl[i], &budgets[i])) return LZ_EXIT_USAGE;
    for (int i = 0; i < nq; i++) if (lz_cli_int("--questions", ql[i], 1, 10000000, &qs[i])) return LZ_EXIT_USAGE;
    for (int i = 0; i < nh; i++) {
        if (!strcmp(hl[i], "corpus")) hosts[i] = corpus_bytes;
        else if (lz_cli_size("--host-budget", hl[i], &hosts[i])) return LZ_EXIT_USAGE;
    }
    const char *sname = setup ? setup : "custom";
    printf("setup %s: %s, %.1f tokens a document (%d-%d), %d a question, a %d-token question, %d answer tokens,\n"
           "%zu KV bytes a token (corpus %.2f GiB), seed %ld. Hit rates of lookups. MIN: Belady's MIN (farthest next\n"
           "use first, a question's documents pinned); bound: the best of MIN and the other clairvoyant schedules\n"
           "(cache/belady.h, the one in brackets); total: both tiers, against the bound on the summed budgets.\n\n",
           sname, cp.name, (double)tok_sum / cp.n, tmin, tmax, K, qtok, atok, bpt,
           (double)corpus_bytes / (double)(1ull << 30), seed);
    printf("| setup | questions | alpha | HBM | host | mode | policy | HBM hit | host hit | miss | MIN | bound | HBM / bound "
           "| HBM / MIN | total hit | total bound | total / bound |%s\n", oracle ? " static |" : "");
    printf("|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|%s\n", oracle ? "---:|" : "");
    json_t *jrows = json_array(), *jratios = json_array();
    const int LQ = 50000; /* --oracle: the popularity from this many other questions */
    for (int qi = 0; qi < nq; qi++)
        for (int ai = 0; ai < na; ai++) {
            const int Q = qs[qi], QA = Q + (oracle ? LQ : 0);
            int *stream = make_stream(cp.n, Q, K, alphas[ai], (uint64_t)seed, (uint64_t)seed);
            if (oracle) {
                int *more = make_stream(cp.n, LQ, K, alphas[ai], (uint64_t)seed, (uint64_t)seed + 1000003);
                stream = realloc(stream, (size_t)QA * K * sizeof(int));
                memcpy(stream + (size_t)Q * K, more, (size_t)LQ * K * sizeof(int));
                free(more);
            }
            keyed ks[2];
            for (int m = 0; m < 2; m++)
                if (mode == 2 || mode == m) {
                    make_keys(&cp, stream, QA, K, m, bpt, &ks[m]); /* the stream's keys first: ids below its count */
                    ks[m].n_req = Q;
                }
            for (int bi = 0; bi < nb; bi++)
                for (int hi = 0; hi < nh; hi++) {
                    double lazy_rate[2] = { -1, -1 }, block_rate[2] = { -1, -1 };
                    for (int m = 0; m < 2; m++) {
                        if (!(mode == 2 || mode == m)) continue;
                        const keyed *k = &ks[m];
                        const int64_t n_acc = k->off[k->n_req];
                        lz_belady_stats b0, b1, bt = { 0 };
                        lz_belady_method m1, mt = LZ_BELADY_NEXT_USE;
                        belady(k, budgets[bi], &b0, &b1, &m1);
                        if (hosts[hi]) belady(k, budgets[bi] + hosts[hi], NULL, &bt, &mt);
                        const int64_t st_hits = oracle ? static_oracle(k, QA, budgets[bi]) : 0;
                        for (int p = 0; p < 2; p++) {
                            if (!(policy == 2 || policy == p)) continue;
                            sim_out o;
                            sim(k, p, budgets[bi], hosts[hi], &o);
                            char bs[32], hs[32], h2s[32] = "-", tot[32] = "-", tb[32] = "-", tr[32] = "-", sts[32] = "";
                            fmt_size(budgets[bi], bs, sizeof bs);
                            fmt_size(hosts[hi], hs, sizeof hs);
                            if (hosts[hi] && hosts[hi] == corpus_bytes) snprintf(hs, sizeof hs, "corpus");
                            const double h1 = pct(o.hit1, n_acc), h2 = pct(o.hit2, n_acc);
                            const double bd0 = pct(b0.hits, n_acc), bd1 = pct(b1.hits, n_acc);
                            const double r0 = bd0 > 0 ? h1 / bd0 : 1.0, r1 = bd1 > 0 ? h1 / bd1 : 1.0; /* MIN, the bound */
                            double rt = 0;
                            if (hosts[hi]) {
                                const double bdt = pct(bt.hits, n_acc);
                                rt = bdt > 0 ? (h1 + h2) / bdt : 1.0;
                                snprintf(h2s, sizeof h2s, "%.1f%%", h2);
                                snprintf(tot, sizeof tot, "%.1f%%", h1 + h2);
                                snprintf(tb, sizeof tb, "%.1f%%", bdt);
                                snprintf(tr, sizeof tr, "%.3f", rt);
                            }
                            if (oracle) snprintf(sts, sizeof sts, " %.1f%% |", pct(st_hits, n_acc));
                            printf("| %s | %d | %.2g | %s | %s | %s | %s | %.1f%% | %s | %.1f%% | %.1f%% | %.1f%% (%s) | **%.3f** "
                                   "| %.3f | %s | %s | %s |%s\n",
                                   sname, Q, alphas[ai], bs, hs, m ? "block" : "lazy", p ? "lru" : "lfu", h1, h2s,
                                   pct(o.miss, n_acc), bd0, bd1, lz_belady_method_name(m1), r1, r0, tot, tb, tr, sts);
                            if (m == 0) lazy_rate[p] = h1; else block_rate[p] = h1;
                            json_t *row = json_pack("{s:s, s:s, s:i, s:i, s:f, s:I, s:I, s:s, s:s, s:I, s:I, s:I, s:I,"
                                                    " s:I, s:I, s:I, s:I, s:I, s:f, s:I, s:f}",
                                                    "setup", sname, "corpus", cp.name, "questions", Q, "docs", K,
                                                    "alpha", alphas[ai], "hbm_budget", (json_int_t)budgets[bi],
                                                    "host_budget", (json_int_t)hosts[hi], "mode", m ? "block" : "lazy",
                                                    "policy", p ? "lru" : "lfu", "lookups", (json_int_t)n_acc,
                                                    "hbm_hits", (json_int_t)o.hit1, "host_hits", (json_int_t)o.hit2,
                                                    "misses", (json_int_t)o.miss, "bytes_hbm_hit", (json_int_t)o.bytes_hit1,
                                                    "bytes_host_hit", (json_int_t)o.bytes_hit2,
                                                    "bytes_missed", (json_int_t)o.bytes_miss,
                                                    "min_hbm_hits", (json_int_t)b0.hits,
                                                    "min_hbm_bytes_hit", (json_int_t)b0.bytes_hit, "hbm_over_min", r0,
                                                    "bound_hbm_hits", (json_int_t)b1.hits,
                                                    "hbm_over_bound", r1);
                            json_object_set_new(row, "bound_hbm_method", json_string(lz_belady_method_name(m1)));
                            if (hosts[hi]) {
                                json_object_set_new(row, "bound_total_hits", json_integer(bt.hits));
                                json_object_set_new(row, "bound_total_method", json_string(lz_belady_method_name(mt)));
                                json_object_set_new(row, "total_over_bound", json_real(rt));
                            }
                            if (oracle) json_object_set_new(row, "static_hits", json_integer(st_hits));
                            json_array_append_new(jrows, row);
                        }
                    }
                    for (int p = 0; p < 2; p++)
                        if (lazy_rate[p] >= 0 && block_rate[p] >= 0)
                            json_array_append_new(jratios, json_pack("{s:i, s:f, s:I, s:I, s:s, s:f, s:f, s:f}", "questions", Q,
                                                                     "alpha", alphas[ai], "hbm_budget", (json_int_t)budgets[bi],
                                                                     "host_budget", (json_int_t)hosts[hi], "policy",
                                                                     p ? "lru" : "lfu", "lazy", lazy_rate[p], "block",
                                                                     block_rate[p], "lazy_over_block",
                                                                     block_rate[p] > 0 ? lazy_rate[p] / block_rate[p] : -1.0));
                }
            for (int m = 0; m < 2; m++)
                if (mode == 2 || mode == m) free_keys(&ks[m]);
            free(stream);
        }
    if (json_array_size(jratios)) {
        printf("\n| questions | alpha | HBM | host | policy | lazy HBM hit | block HBM hit | lazy / block |\n"
               "|---:|---:|---:|---:|---|---:|---:|---:|\n");
        size_t i;
        json_t *r;
        json_array_foreach(jratios, i, r) {
            char bs[32], hs[32];
            fmt_size((uint64_t)json_integer_value(json_object_get(r, "hbm_budget")), bs, sizeof bs);
            fmt_size((uint64_t)json_integer_value(json_object_get(r, "host_budget")), hs, sizeof hs);
            printf("| %d | %.2g | %s | %s | %s | %.1f%% | %.1f%% | %.2fx |\n", (int)json_integer_value(json_object_get(r, "questions")),
                   json_real_value(json_object_get(r, "alpha")), bs, hs, json_string_value(json_object_get(r, "policy")),
                   json_real_value(json_object_get(r, "lazy")), json_real_value(json_object_get(r, "block")),
                   json_real_value(json_object_get(r, "lazy_over_block")));
        }
    }
    if (json_path) {
        json_t *top = json_pack("{s:s, s:s, s:I, s:I, s:i, s:i, s:i, s:I, s:o, s:o}", "setup", sname, "corpus", cp.name,
                                "bytes_per_token", (json_int_t)bpt, "seed", (json_int_t)seed, "docs_per_question", K,
                                "question_tokens", qtok, "answer_tokens", atok, "corpus_bytes", (json_int_t)corpus_bytes,
                                "rows", jrows, "lazy_over_block", jratios);
        if (!top || json_dump_file(top, json_path, JSON_INDENT(1))) {
            json_decref(top);
            return lz_cli_fail("%s: cannot write", json_path);
        }
        json_decref(top);
    } else {
        json_decref(jrows);
        json_decref(jratios);
    }
    free(cp.tokens);
    return 0;
}
