/* test_ingest_engines.c - lazyingest with N encoder pipelines (--engines N on
 * the CPU; --gpus LIST on a CUDA build is the same code over GPU backends):
 * 2 and 3 pipelines, plain CPU engines and each on its own CPU reference of
 * the GPU's pass pipeline, store exactly the 1-pipeline store (document ids,
 * every metadata column, payload bytes); the deal is longest first to the
 * least loaded (the per-pipeline token counts of the JSON report equal an
 * independent LPT deal, and beat a round robin on this corpus); a rerun
 * encodes nothing; SIGKILL mid-run then a resume loses no committed
 * document; a pass failing in one pipeline stops the run naming the
 * pipeline and the documents, keeps the batches before it, and the next run
 * completes the store; --gpus without CUDA, and conflicting options, are
 * usage errors (exit 2) that say why. ingest_deal itself on known inputs.
 * Runs $LZ_BIN/lazyingest (default build/bin) and the test build beside
 * this program (lazyingest-hooks: --test-fail-pass, --test-pause-ms). */
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/sha256.h"
#include "ingest/ingest_run.h"
#include "model/mkmodel.h"
#include "store/store.h"
#include "tests/run_tool.h"
#include "tests/store_inner.h"
#include "tests/test.h"

static char dir[256], bin[512], hooks[512], model[300];
static char out[1 << 17], errs[1 << 16];

/* Runs prog with args (NULL-terminated), stdout and stderr into out and errs. kill_after_s > 0:
 * SIGKILL then. The exit status, or 128 + signal. */
static int run_prog(const char *prog, const char *const *args, double kill_after_s)
{
    const lz_test_run_opts o = {NULL, kill_after_s, 0};
    out[0] = errs[0] = 0;
    return lz_test_run(dir, prog, args, &o, out, sizeof out, errs, sizeof errs);
}

static int run_tool(const char *const *args) { return run_prog(bin, args, 0); }

/* An integer of the JSON summary in out (-999: not JSON, -998: no such key). */
static long jget(const char *key)
{
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    if (!j) return -999;
    json_t *v = json_object_get(j, key);
    long r = v ? (long)json_integer_value(v) : -998;
    json_decref(j);
    return r;
}

/* The summary's pipelines: their count, and each one's tokens and documents (at most 8). */
typedef struct {
    int n;
    long tokens[8], docs[8];
    double forward[8];
    char device[8][16];
} pipes;

static pipes jpipes(void)
{
    pipes p = { 0 };
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    json_t *dv = j ? json_object_get(j, "pipeline_devices") : NULL, *tk = j ? json_object_get(j, "pipeline_tokens") : NULL,
           *dc = j ? json_object_get(j, "pipeline_documents") : NULL,
           *fw = j ? json_object_get(j, "pipeline_forward_s") : NULL;
    const size_t n = json_array_size(dv);
    if (j && (long)n == (long)json_integer_value(json_object_get(j, "pipelines")) && json_array_size(tk) == n &&
        json_array_size(dc) == n && json_array_size(fw) == n)
        for (size_t i = 0; i < n && i < 8; i++) {
            p.tokens[i] = (long)json_integer_value(json_array_get(tk, i));
            p.docs[i] = (long)json_integer_value(json_array_get(dc, i));
            p.forward[i] = json_real_value(json_array_get(fw, i));
            snprintf(p.device[i], sizeof p.device[i], "%s", json_string_value(json_array_get(dv, i)) ?: "");
            p.n++;
        }
    json_decref(j);
    return p;
}

/* A corpus of n records alternating long (60..100 words) and short (4..9 words) texts, a few
 * texts repeated under other ids (one payload for both), and one record long enough to be
 * split into passages (--max-doc-tokens). */
static char *make_corpus(int n, int version)
{
    static const char *w[] = { "the", "cat", "sat", "on", "a", "mat", "and", "then", "it", "ran", "to", "big",
                               "red", "house", "where", "people", "lived", "near", "old", "river" };
    size_t cap = (size_t)n * 1200 + 8000, o = 0;
    char *s = malloc(cap);
    unsigned seed = 11;
    for (int i = 0; i < n; i++) {
        char text[1100];
        size_t t = 0;
        seed = seed * 1103515245u + 12345u;
        const int words = i % 2 == 0 ? 60 + (int)((seed >> 16) % 41) : 4 + (int)((seed >> 16) % 6);
        for (int k = 0; k < words; k++) {
            seed = seed * 1103515245u + 12345u;
            t += (size_t)snprintf(text + t, sizeof text - t, "%s%s", k ? " " : "", w[(seed >> 16) % 20]);
        }
        if (i % 9 == 4) snprintf(text, sizeof text, "Same words for a shared payload."); /* repeated content */
        o += (size_t)snprintf(s + o, cap - o, "{\"id\": \"d%d\", \"title\": \"T%d\", \"text\": \"%s%s\"}\n", i, i % 5, text,
                              version && i % 3 == 0 ? " Changed." : ".");
    }
    o += (size_t)snprintf(s + o, cap - o, "{\"id\": \"long\", \"title\": \"Long\", \"text\": \"");
    for (int k = 0; k < 40; k++)
        o += (size_t)snprintf(s + o, cap - o, "Sentence %d of the long record where people lived near the river. ", k);
    o += (size_t)snprintf(s + o, cap - o, "\"}\n");
    return s;
}

/* ---- a store's rows, every column, and its payloads ---- */

typedef struct {
    char ext[48];
    char fields[1400]; /* every other column but the row id, timestamps and run numbers, as text */
    uint8_t key[LZ_META_KEY_LEN];
    int n_tokens;
} row;

typedef struct {
    int n;
    row v[512];
} rows;

static void hex(const uint8_t *p, int n, char *o)
{
    for (int i = 0; i < n; i++) sprintf(o + 2 * i, "%02x", p[i]);
}

static int take_row(const lz_meta_doc *d, void *p)
{
    rows *r = p;
    if (r->n >= 512) return 1;
    row *x = &r->v[r->n++];
    uint8_t th[32];
    char ch[65], tk[65], sh[65], key[129];
    lz_sha256(d->token_ids, sizeof(int) * (size_t)d->n_tokens, th);
    hex(d->content_hash, 32, ch);
    hex(th, 32, tk);
    hex(d->source_hash, 32, sh);
    hex(d->payload_key, LZ_META_KEY_LEN, key);
    snprintf(x->ext, sizeof x->ext, "%s", d->ext_id);
    snprintf(x->fields, sizeof x->fields,
             "source=%s passage=%d title=%.60s text=%.200s content=%s tokens=%d:%s key=%s raw=%lld stored=%lld "
             "srch=%d:%s kv=%s|%s|%s|%d|%lld",
             d->source_id ? d->source_id : "", d->passage, d->title ? d->title : "(null)", d->text, ch, d->n_tokens, tk,
             key, (long long)d->raw_bytes, (long long)d->stored_bytes, d->has_source_hash,
             d->has_source_hash ? sh : "", d->kv_spec, d->kv_policy, d->kv_budget, d->kv_window, (long long)d->kv_kept);
    memcpy(x->key, d->payload_key, LZ_META_KEY_LEN);
    x->n_tokens = d->n_tokens;
    return 0;
}

static int read_rows(const char *store, rows *r)
{
    memset(r, 0, sizeof *r);
    lz_store *s;
    char err[1024];
    if (lz_store_open(store, LZ_STORE_RDONLY, &s, err, sizeof err)) return -1;
    const int rc = lz_meta_doc_foreach(test_store_meta(s), take_row, r, err, sizeof err);
    lz_store_close(s);
    return rc;
}

static const row *find_row(const rows *r, const char *ext)
{
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->v[i].ext, ext)) return &r->v[i];
    return NULL;
}

/* Store b holds exactly store a's rows (every column) and, for each, the same payload bytes;
 * 1 if so, else 0 after printing the first difference. */
static int same_store(const char *sa, const char *sb)
{
    static rows ra, rb;
    if (read_rows(sa, &ra) || read_rows(sb, &rb)) return printf("cannot read %s or %s\n", sa, sb), 0;
    if (ra.n != rb.n || ra.n == 0) return printf("%d rows and %d rows\n", ra.n, rb.n), 0;
    char err[512];
    lz_store *a, *b;
    if (lz_store_open(sa, LZ_STORE_RDONLY, &a, err, sizeof err)) return printf("open: %s\n", err), 0;
    if (lz_store_open(sb, LZ_STORE_RDONLY, &b, err, sizeof err)) {
        lz_store_close(a);
        return printf("open: %s\n", err), 0;
    }
    int same = 1;
    for (int i = 0; same && i < ra.n; i++) {
        const row *x = &ra.v[i], *y = find_row(&rb, x->ext);
        if (!y || strcmp(x->fields, y->fields)) {
            printf("row %s differs:\n  %s\n  %s\n", x->ext, x->fields, y ? y->fields : "(absent)");
            same = 0;
            break;
        }
        void *p = NULL, *q = NULL;
        size_t lp = 0, lq = 0;
        same = !lz_store_get_payload(a, x->key, &p, &lp, err, sizeof err) &&
               !lz_store_get_payload(b, y->key, &q, &lq, err, sizeof err) && lp == lq && lp > 0 && !memcmp(p, q, lp);
        if (!same) printf("payload of %s differs (%zu and %zu bytes)\n", x->ext, lp, lq);
        free(p);
        free(q);
    }
    lz_store_close(a);
    lz_store_close(b);
    return same;
}

/* --check finds nothing wrong with store. */
static int check_clean(const char *store)
{
    const char *a[] = { "-s", store, "--check", "--json", NULL };
    return run_tool(a) == 0 && jget("check_issues") == 0;
}

/* ---- the deal ---- */

/* An independent LPT deal: the loads of n_eng pipelines after sizes (any order) are dealt
 * longest first, each to the least loaded (ties: the lower index). */
static void lpt_loads(const int *sizes, int n, int n_eng, long *load)
{
    int *v = malloc(sizeof *v * (size_t)n);
    memcpy(v, sizes, sizeof *v * (size_t)n);
    for (int i = 0; i < n; i++) /* selection sort, descending */
        for (int j = i + 1; j < n; j++)
            if (v[j] > v[i]) {
                int t = v[i];
                v[i] = v[j];
                v[j] = t;
            }
    for (int e = 0; e < n_eng; e++) load[e] = 0;
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int e = 1; e < n_eng; e++)
            if (load[e] < load[best]) best = e;
        load[best] += v[i];
    }
    free(v);
}

static void test_deal_unit(void)
{
    const int tok[] = { 3, 9, 3, 8, 1, 7, 2, 2 };
    int of[8];
    ingest_deal(tok, 8, 2, of);
    /* longest first, to the least loaded (ties: pipeline 0): 9 -> 0, 8 -> 1, 7 -> 1, 3 (job 0) -> 0,
     * 3 (job 2) -> 0, 2 (job 6) -> 0 (15 = 15), 2 (job 7) -> 1, 1 -> 0 (17 = 17) */
    const int want[8] = { 0, 0, 0, 1, 0, 1, 0, 1 };
    long load[2] = { 0, 0 };
    for (int j = 0; j < 8; j++) load[of[j]] += tok[j];
    CHECK(!memcmp(of, want, sizeof want), "the deal: %d %d %d %d %d %d %d %d", of[0], of[1], of[2], of[3], of[4], of[5],
          of[6], of[7]);
    CHECK(load[0] == 18 && load[1] == 17, "balanced: %ld and %ld", load[0], load[1]);
    int again[8];
    ingest_deal(tok, 8, 2, again);
    CHECK(!memcmp(of, again, sizeof of), "the same deal twice");
    const int same[] = { 5, 5, 5, 5, 5, 5 };
    ingest_deal(same, 6, 3, of);
    CHECK(of[0] == 0 && of[1] == 1 && of[2] == 2 && of[3] == 0 && of[4] == 1 && of[5] == 2,
          "equal sizes: in job order, round the pipelines: %d %d %d %d %d %d", of[0], of[1], of[2], of[3], of[4], of[5]);
    ingest_deal(tok, 3, 8, of); /* more pipelines than jobs: one each */
    CHECK(of[0] != of[1] && of[1] != of[2] && of[0] != of[2], "one job a pipeline: %d %d %d", of[0], of[1], of[2]);
    ingest_deal(tok, 0, 2, of); /* nothing to deal */
    CHECK(1, "an empty deal");
}

/* ---- the stores ---- */

static const char *corpus;
static char ref[300];
static int n_rows;

/* The 1-pipeline store every other is compared with. */
static void test_reference(void)
{
    snprintf(ref, sizeof ref, "%s/ref", dir);
    const char *a[] = { "-m", model, "-s", ref, "--json", "--threads", "2", "--batch-tokens", "1500", "--max-doc-tokens",
                        "256", corpus, NULL };
    const int rc = run_tool(a);
    const pipes p = jpipes();
    CHECK(rc == 0 && jget("added") > 40, "the 1-pipeline store: exit %d: %s", rc, errs);
    CHECK(p.n == 1 && p.tokens[0] == jget("tokens_encoded") && p.docs[0] == jget("documents_encoded"),
          "one pipeline reported, with the run's figures: %d, %ld tokens of %ld", p.n, p.tokens[0], jget("tokens_encoded"));
    rows r;
    read_rows(ref, &r);
    n_rows = r.n;
    CHECK(find_row(&r, "long#0") && find_row(&r, "long#1"), "the long record split into passages");
}

/* N pipelines, small batches (several commits), store equal to the reference. */
static void test_equal(int n, int ref_passes)
{
    char st[300], ns[8];
    snprintf(st, sizeof st, "%s/eng%d%s", dir, n, ref_passes ? "p" : "");
    snprintf(ns, sizeof ns, "%d", n);
    const char *a[] = { "-m", model, "-s", st, "--json", "--threads", "2", "--engines", ns, "--batch-tokens", "1500",
                        "--max-doc-tokens", "256", corpus, NULL };
    if (ref_passes) setenv("LAZY_INGEST_REF_PASSES", "300", 1); /* each pipeline its own pass pipeline */
    const int rc = run_tool(a);
    unsetenv("LAZY_INGEST_REF_PASSES");
    const pipes p = jpipes();
    long sum = 0, docs = 0;
    for (int i = 0; i < p.n; i++) sum += p.tokens[i], docs += p.docs[i];
    CHECK(rc == 0 && jget("added") == n_rows, "%d pipelines%s: exit %d, %ld added of %d: %s", n,
          ref_passes ? " in passes" : "", rc, jget("added"), n_rows, errs);
    CHECK(p.n == n && sum == jget("tokens_encoded") && docs == jget("documents_encoded"),
          "%d pipelines reported (%d), their tokens %ld of %ld, documents %ld of %ld", n, p.n, sum, jget("tokens_encoded"),
          docs, jget("documents_encoded"));
    for (int i = 0; i < p.n; i++)
        CHECK(p.docs[i] > 0 && p.tokens[i] > 0 && p.forward[i] > 0 && !strcmp(p.device[i], "CPU"),
              "pipeline %d worked: %ld documents, %ld tokens, %.3f s forward, device '%s'", i, p.docs[i], p.tokens[i],
              p.forward[i], p.device[i]);
    if (ref_passes)
        CHECK(jget("passes") > n && jget("pass_docs") == jget("backend_docs") && jget("pass_docs") > 0,
              "in passes: %ld passes, %ld of their documents, %ld on the backends", jget("passes"), jget("pass_docs"),
              jget("backend_docs"));
    CHECK(same_store(ref, st), "%d pipelines%s: the 1-pipeline store, every row and payload byte", n,
          ref_passes ? " in passes" : "");
    CHECK(check_clean(st), "%d pipelines: --check clean", n);
    /* a rerun encodes nothing: what was committed is skipped */
    const int rc2 = run_tool(a);
    CHECK(rc2 == 0 && jget("tokens_encoded") == 0 && jget("added") == 0 && jget("unchanged") == n_rows,
          "rerun with %d pipelines: exit %d, %ld tokens encoded, %ld unchanged of %d", n, rc2, jget("tokens_encoded"),
          jget("unchanged"), n_rows);
    /* the changed corpus with N pipelines: the same store as the reference updated by one */
    if (n == 3 && !ref_passes) {
        char *c1 = make_corpus(60, 1);
        const char *p1 = lz_test_write_file(dir, "corpus1.jsonl", c1);
        char r1[300];
        snprintf(r1, sizeof r1, "%s/ref1", dir);
        char cmd[700];
        snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", ref, r1);
        CHECK(system(cmd) == 0, "copy of the reference");
        const char *a1[] = { "-m", model, "-s", r1, "--json", "--threads", "2", "--batch-tokens", "1500",
                             "--max-doc-tokens", "256", "--prune", p1, NULL };
        const char *an[] = { "-m", model, "-s", st, "--json", "--threads", "2", "--engines", ns, "--batch-tokens", "1500",
                             "--max-doc-tokens", "256", "--prune", p1, NULL };
        int rc1 = run_tool(a1);
        const long upd = jget("updated");
        int rcn = run_tool(an);
        CHECK(rc1 == 0 && rcn == 0 && upd > 5 && jget("updated") == upd, "the changed corpus: exit %d and %d, %ld and %ld "
              "updated: %s", rc1, rcn, upd, jget("updated"), errs);
        CHECK(same_store(r1, st), "updated by 3 pipelines: the store one pipeline updates");
        free(c1);
    }
}

/* One batch (every document dealt at once): each pipeline's tokens are an LPT deal's. */
static void test_balance(int n)
{
    char st[300], ns[8];
    snprintf(st, sizeof st, "%s/bal%d", dir, n);
    snprintf(ns, sizeof ns, "%d", n);
    const char *a[] = { "-m", model, "-s", st, "--json", "--threads", "2", "--engines", ns, "--batch-tokens",
                        "1000000", "--max-doc-tokens", "256", corpus, NULL };
    const int rc = run_tool(a);
    const pipes p = jpipes();
    /* the jobs of the one batch: one a distinct payload key */
    static rows r;
    read_rows(ref, &r);
    int sizes[512], m = 0, longest = 0;
    for (int i = 0; i < r.n; i++) {
        int dup = 0;
        for (int j = 0; j < i && !dup; j++) dup = !memcmp(r.v[i].key, r.v[j].key, LZ_META_KEY_LEN);
        if (dup) continue;
        sizes[m++] = r.v[i].n_tokens;
        if (r.v[i].n_tokens > longest) longest = r.v[i].n_tokens;
    }
    long want[8], rr[8] = { 0 };
    lpt_loads(sizes, m, n, want);
    for (int i = 0; i < m; i++) rr[i % n] += sizes[i]; /* a round robin in batch order */
    long lo = want[0], hi = want[0], rlo = rr[0], rhi = rr[0], glo = p.tokens[0], ghi = p.tokens[0];
    for (int e = 1; e < n; e++) {
        lo = want[e] < lo ? want[e] : lo, hi = want[e] > hi ? want[e] : hi;
        rlo = rr[e] < rlo ? rr[e] : rlo, rhi = rr[e] > rhi ? rr[e] : rhi;
        glo = p.tokens[e] < glo ? p.tokens[e] : glo, ghi = p.tokens[e] > ghi ? p.tokens[e] : ghi;
    }
    CHECK(rc == 0 && p.n == n && jget("documents_encoded") == m, "%d pipelines, one batch: exit %d, %d reported, "
          "%ld documents encoded of %d distinct: %s", n, rc, p.n, jget("documents_encoded"), m, errs);
    int same = p.n == n;
    for (int e = 0; same && e < n; e++) same = p.tokens[e] == want[e];
    CHECK(same, "%d pipelines: tokens %ld %ld %ld, an LPT deal's %ld %ld %ld", n, p.tokens[0], p.tokens[1],
          n > 2 ? p.tokens[2] : 0L, want[0], want[1], n > 2 ? want[2] : 0L);
    CHECK(ghi - glo <= longest, "%d pipelines within the longest document (%d tokens): %ld..%ld", n, longest, glo, ghi);
    CHECK(hi - lo < rhi - rlo, "this corpus tells a balanced deal from a round robin (%ld against %ld)", hi - lo, rhi - rlo);
    CHECK(same_store(ref, st), "%d pipelines in one batch: the 1-pipeline store", n);
}

/* SIGKILL mid-run (batches committed one by one, slowed by --test-pause-ms), then a resume:
 * consistent after the kill, no committed row lost or changed, the final store the reference. */
static void test_kill_resume(void)
{
    if (access(hooks, X_OK) != 0) {
        printf("SKIP kill/resume: %s not built\n", hooks);
        return;
    }
    int killed = 0, lost = 0, bad = 0;
    for (int t = 0; t < 4; t++) {
        char st[300];
        snprintf(st, sizeof st, "%s/kill%d", dir, t);
        const char *a[] = { "-m", model, "-s", st, "--json", "--threads", "2", "--engines", "2", "--batch-tokens", "300",
                            "--max-doc-tokens", "256", "--test-pause-ms", "120", corpus, NULL };
        const int rc = run_prog(hooks, a, 0.5 + 0.35 * t);
        killed += rc == 128 + SIGKILL;
        static rows mid, fin;
        read_rows(st, &mid);
        if (!check_clean(st)) bad++;
        const char *b[] = { "-m", model, "-s", st, "--json", "--threads", "2", "--engines", "2", "--batch-tokens", "300",
                            "--max-doc-tokens", "256", corpus, NULL };
        const int rc2 = run_tool(b);
        CHECK(rc2 == 0 && jget("unchanged") == mid.n, "resume %d: exit %d, %ld unchanged, %d committed before the kill: %s",
              t, rc2, jget("unchanged"), mid.n, errs);
        read_rows(st, &fin);
        for (int i = 0; i < mid.n; i++) {
            const row *y = find_row(&fin, mid.v[i].ext);
            if (!y || strcmp(y->fields, mid.v[i].fields)) lost++;
        }
        CHECK(same_store(ref, st), "kill %d then resume: the 1-pipeline store", t);
        if (t == 0) printf("kill/resume: %d rows committed before the first kill\n", mid.n);
    }
    CHECK(killed >= 2, "runs killed mid-run: %d of 4", killed);
    CHECK(bad == 0, "%d stores inconsistent right after the kill", bad);
    CHECK(lost == 0, "%d committed rows lost or changed by the resume", lost);
}

/* A pass failing in pipeline 1 (as a device error would): exit 1 naming the pipeline and the
 * documents, the batches before it committed, the next run completing the store. */
static void test_failure(void)
{
    if (access(hooks, X_OK) != 0) {
        printf("SKIP failing pipeline: %s not built\n", hooks);
        return;
    }
    char st[300];
    snprintf(st, sizeof st, "%s/fail", dir);
    const char *a[] = { "-m", model, "-s", st, "--json", "--threads", "2", "--engines", "2", "--batch-tokens", "300",
                        "--max-doc-tokens", "256", "--test-fail-engine", "1", "--test-fail-pass", "4", corpus, NULL };
    setenv("LAZY_INGEST_REF_PASSES", "300", 1);
    const int rc = run_prog(hooks, a, 0);
    static rows got;
    read_rows(st, &got);
    CHECK(rc == 1 && strstr(errs, "pipeline 1 (CPU)") && strstr(errs, "a pass of documents '") &&
              strstr(errs, "failed (injected)"),
          "a failing pipeline: exit %d, named with its documents: %s", rc, errs);
    CHECK(got.n > 0 && got.n < n_rows, "the batches before it committed: %d rows of %d", got.n, n_rows);
    static rows want;
    read_rows(ref, &want);
    int differ = 0;
    for (int i = 0; i < got.n; i++) { /* what it committed is the reference's */
        const row *y = find_row(&want, got.v[i].ext);
        differ += !y || strcmp(y->fields, got.v[i].fields);
    }
    CHECK(differ == 0, "%d committed rows differ from the reference's", differ);
    CHECK(check_clean(st), "the store after the failure passes --check");
    const char *b[] = { "-m", model, "-s", st, "--json", "--threads", "2", "--engines", "2", "--batch-tokens", "300",
                        "--max-doc-tokens", "256", corpus, NULL };
    const int rc2 = run_tool(b);
    unsetenv("LAZY_INGEST_REF_PASSES");
    CHECK(rc2 == 0 && jget("unchanged") == got.n && jget("added") == n_rows - got.n,
          "the next run: exit %d, %ld unchanged (%d), %ld added: %s", rc2, jget("unchanged"), got.n, jget("added"), errs);
    CHECK(same_store(ref, st), "after the failure and the next run: the 1-pipeline store");
}

/* Usage errors: --gpus without CUDA (the reason given), conflicting options. */
static void test_usage(void)
{
    char st[300];
    snprintf(st, sizeof st, "%s/usage", dir);
    const char *g[] = { "-m", model, "-s", st, "--gpus", "0,0", corpus, NULL };
    int rc = run_tool(g);
    CHECK(rc == 2 && strstr(errs, "--gpus") && strstr(errs, "no CUDA"), "--gpus in a CPU build: exit %d: %s", rc, errs);
    const char *g2[] = { "-m", model, "-s", st, "--gpus", "all", corpus, NULL };
    rc = run_tool(g2);
    CHECK(rc == 2 && strstr(errs, "no CUDA"), "--gpus all in a CPU build: exit %d: %s", rc, errs);
    const char *e0[] = { "-m", model, "-s", st, "--engines", "0", corpus, NULL };
    rc = run_tool(e0);
    CHECK(rc == 2 && strstr(errs, "--engines"), "--engines 0: exit %d: %s", rc, errs);
    const char *es[] = { "-m", model, "-s", st, "--engines", "2", "--serial", corpus, NULL };
    rc = run_tool(es);
    CHECK(rc == 2 && strstr(errs, "--serial"), "--engines 2 --serial: exit %d: %s", rc, errs);
    struct stat sb;
    CHECK(stat(st, &sb) != 0, "no store made by refused runs");
    const char *h[] = { "--help", NULL };
    rc = run_tool(h);
    CHECK(rc == 0 && strstr(out, "--gpus LIST") && strstr(out, "--engines N"), "--help names --gpus and --engines");
    /* --engines 1 is the one pipeline */
    snprintf(st, sizeof st, "%s/one", dir);
    const char *e1[] = { "-m", model, "-s", st, "--json", "--threads", "2", "--engines", "1", "--batch-tokens", "1500",
                         "--max-doc-tokens", "256", corpus, NULL };
    rc = run_tool(e1);
    CHECK(rc == 0 && jpipes().n == 1 && same_store(ref, st), "--engines 1: exit %d, the one pipeline's store: %s", rc, errs);
}

int main(void)
{
    if (!lz_test_tmpdir(dir, sizeof dir)) return 1;
    const char *b = getenv("LZ_BIN");
    snprintf(bin, sizeof bin, "%s/lazyingest", b ? b : "build/bin");
    char self[400];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    self[k > 0 ? k : 0] = 0;
    char *slash = strrchr(self, '/');
    if (slash) *slash = 0;
    snprintf(hooks, sizeof hooks, "%s/lazyingest-hooks", self);
    test_deal_unit();
    if (access(bin, X_OK) != 0) {
        printf("SKIP %s not built\n", bin);
        return lz_test_done();
    }
    char err[512];
    lz_mkmodel_opts mo;
    lz_mkmodel_defaults(&mo);
    snprintf(model, sizeof model, "%s/m.gguf", dir);
    CHECK(lz_mkmodel_write(&mo, model, err, sizeof err) == 0, "model: %s", err);
    unsetenv("LAZY_MODEL");
    unsetenv("LAZY_INGEST_REF_PASSES");
    char *c = make_corpus(60, 0);
    corpus = lz_test_write_file(dir, "corpus.jsonl", c);
    const double t0 = lz_now_s();
    test_reference();
    test_usage();
    test_equal(2, 0);
    test_equal(3, 0);
    test_equal(2, 1);
    test_equal(3, 1);
    test_balance(2);
    test_balance(3);
    test_failure();
    test_kill_resume();
    printf("engines: %.1f s\n", lz_now_s() - t0);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cleanup failed\n");
    free(c);
    return lz_test_done();
}
