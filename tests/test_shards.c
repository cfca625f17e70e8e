/* test_shards.c - sharded stores (store/shards.h) on the shipped model and the
 * demo corpus (models/default.gguf, datasets/demo/corpus.jsonl, 116 passages):
 *  - equal: the corpus ingested into one store and into a set of 3 shards
 *    (lazyingest --shards 3) holds the same documents (ids, titles, token ids,
 *    payload keys) with the same payload bytes; BM25 gives the same hits in the
 *    same order with the same scores, to the bit (global statistics, not per
 *    shard), for the demo's questions and odd queries, at k = 3, 10 and all;
 *    the query session gives the same answers and logits; lazyquery --json
 *    and lazyserve give the same answers and sources; the most accessed
 *    documents merge the shards' counts;
 *  - a job array's tasks: --shard I/3 run at once, one SIGKILLed after its
 *    first commit: the set's --check names that shard (exit 4); the task run
 *    again completes it, and the set equals the unsharded store;
 *  - the checker: a payload deleted in one shard, a row copied into a shard it
 *    does not hash to, a stray shard folder: exit 4, each named; --repair, a
 *    --prune run of the shard and removing the folder make it clean again;
 *  - bad input: a shard missing, of another set, of another model; a manifest
 *    of another count, edited or garbage; --shard of another count, model or
 *    KV dtype; a corpus into a shard folder; writes through the root: a clear
 *    error naming the shard, and the set unchanged (still checks clean).
 * Runs $LZ_BIN's tools (make test); SKIP when they or the model are absent. */
#include <jansson.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>

#include "model/llama.h"
#include "query/retrieve.h"
#include "query/session.h"
#include "tests/shards_test.h"

static char dir[256], bin[512], one[600], set[600], corpus[700];
static const char *model = "models/default.gguf";

/* Runs a command; its stderr (and stdout) into out (NUL-terminated). Returns the exit status. */
static int run_out(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int run_out(char *out, size_t n, const char *fmt, ...)
{
    char cmd[4096], file[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(file, sizeof file, "%s/out.txt", dir);
    int rc = lz_test_sh("%s > %s 2>&1", cmd, file);
    size_t len;
    char *s = lz_test_read_file(file, &len);
    snprintf(out, n, "%s", s ? s : "");
    free(s);
    return rc;
}

static int open_store(const char *path, lz_store **s)
{
    char err[1024];
    int rc = lz_store_open(path, LZ_STORE_RDONLY, s, err, sizeof err);
    CHECK(rc == 0, "open %s: %s", path, err);
    return rc == 0;
}

/* ---- equal: documents, payloads, retrieval, answers ---- */

static const char *const odd_queries[] = { "Works", "the of and is a", "Droex Droex Droex foods",
                                           "zzzz-not-a-word", "1950 1980 2018", "!!! ??? \"", "born in the city",
                                           "Droex \xe2\x80\x94 Foods", "\xce\xa9 Works" };

/* The same hits, order and scores (==) in both stores for query at k. */
static int same_search(lz_store *a, lz_store *b, const char *q, int k)
{
    char err[1024];
    lz_query_doc *da = NULL, *db = NULL;
    int na = 0, nb = 0;
    int ra = lz_retrieve_search(a, q, k, &da, &na, err, sizeof err);
    CHECK(ra == 0, "search one '%s': %s", q, err);
    int rb = lz_retrieve_search(b, q, k, &db, &nb, err, sizeof err);
    CHECK(rb == 0, "search set '%s': %s", q, err);
    int same = !ra && !rb && na == nb;
    for (int i = 0; same && i < na; i++)
        same = !strcmp(da[i].ext_id, db[i].ext_id) && da[i].score == db[i].score &&
               !memcmp(da[i].payload_key, db[i].payload_key, LZ_META_KEY_LEN) && da[i].n_tokens == db[i].n_tokens;
    if (!same) {
        CHECK(0, "'%s' k=%d: %d hits against %d", q, k, na, nb);
        for (int i = 0; i < na || i < nb; i++)
            fprintf(stderr, "  %d: %s %.17g | %s %.17g\n", i, i < na ? da[i].ext_id : "-", i < na ? da[i].score : 0,
                    i < nb ? db[i].ext_id : "-", i < nb ? db[i].score : 0);
    }
    free(da);
    free(db);
    return same;
}

static int load_questions(char **qs, int max)
{
    json_error_t je;
    json_t *a = json_load_file("datasets/demo/questions.json", 0, &je);
    int n = 0;
    for (size_t i = 0; a && i < json_array_size(a) && n < max; i++)
        qs[n++] = strdup(json_string_value(json_object_get(json_array_get(a, i), "question")));
    json_decref(a);
    return n;
}

static lz_query_session *session(lz_llama *m, lz_store *s)
{
    lz_query_opts o;
    lz_query_opts_default(&o);
    o.max_new_tokens = 16;
    o.keep_logits = 1;
    o.max_positions = m->cfg.ctx;
    lz_query_session *q = NULL;
    char err[512];
    if (lz_query_session_new(m, s, &o, &q, err, sizeof err)) CHECK(0, "session: %s", err);
    return q;
}

/* Each question answered from its top 3 in both stores: the same answer tokens and logits. */
static void same_answers(lz_llama *m, lz_store *a, lz_store *b, char **qs, int nq)
{
    lz_query_session *qa = session(m, a), *qb = session(m, b);
    int same = 0;
    char err[1024];
    for (int i = 0; qa && qb && i < nq; i++) {
        lz_query_doc *da, *db;
        int na, nb;
        if (lz_retrieve_search(a, qs[i], 3, &da, &na, err, sizeof err)) { CHECK(0, "%s", err); continue; }
        if (lz_retrieve_search(b, qs[i], 3, &db, &nb, err, sizeof err)) { CHECK(0, "%s", err); free(da); continue; }
        lz_query_result ra, rb;
        int oka = !lz_query_answer(qa, qs[i], da, na, &ra, err, sizeof err);
        CHECK(oka, "answer one: %s", err);
        int okb = !lz_query_answer(qb, qs[i], db, nb, &rb, err, sizeof err);
        CHECK(okb, "answer set: %s", err);
        if (oka && okb) {
            int eq = ra.n_answer == rb.n_answer && !memcmp(ra.answer_ids, rb.answer_ids, sizeof(int) * (size_t)ra.n_answer) &&
                     !memcmp(ra.logits, rb.logits, sizeof(float) * (size_t)m->cfg.vocab) && !strcmp(ra.answer, rb.answer);
            CHECK(eq, "'%s': answer '%s' against '%s'", qs[i], ra.answer, rb.answer);
            same += eq;
        }
        if (oka) lz_query_result_free(&ra);
        if (okb) lz_query_result_free(&rb);
        free(da);
        free(db);
    }
    printf("answers: %d of %d questions the same (tokens and logits)\n", same, nq);
    lz_query_session_free(qa);
    lz_query_session_free(qb);
}

typedef struct {
    int64_t hits[64];
    uint8_t keys[64][LZ_META_KEY_LEN];
    int n;
} top_list;

static int top_take(int64_t doc_id, int64_t hits, const uint8_t *key, int n_tokens, void *p)
{
    top_list *t = p;
    (void)doc_id, (void)n_tokens;
    if (t->n == 64) return 1;
    t->hits[t->n] = hits;
    memcpy(t->keys[t->n++], key, LZ_META_KEY_LEN);
    return 0;
}

/* Hits counted through a set go to the shards; its most accessed list is the plain store's. */
static void same_top(void)
{
    char err[1024];
    char c1[700], c2[700];
    snprintf(c1, sizeof c1, "%s/one-hits", dir);
    snprintf(c2, sizeof c2, "%s/set-hits", dir);
    lz_test_sh("cp -a %s %s && cp -a %s %s", one, c1, set, c2);
    lz_store *a, *b;
    if (lz_store_open(c1, 0, &a, err, sizeof err)) { CHECK(0, "%s", err); return; }
    if (lz_store_open(c2, 0, &b, err, sizeof err)) { CHECK(0, "%s", err); lz_store_close(a); return; }
    static const char *ids[] = { "te2024-org5", "te2024-person16", "te2024-org13", "te2024-work12" };
    int ok = 1;
    for (int i = 0; i < 4; i++)
        for (int r = 0; r <= i * 2; r++) { /* 1, 3, 5, 7 hits */
            lz_meta_doc d;
            ok &= !lz_store_doc_find(a, ids[i], &d, NULL, 0, err, sizeof err) && !lz_store_hit(a, d.id, err, sizeof err);
            ok &= !lz_store_doc_find(b, ids[i], &d, NULL, 0, err, sizeof err) && !lz_store_hit(b, d.id, err, sizeof err);
        }
    CHECK(ok, "hits: %s", err);
    top_list ta = { .n = 0 }, tb = { .n = 0 };
    CHECK(!lz_store_top_accessed(a, 10, 0, top_take, &ta, err, sizeof err), "%s", err);
    CHECK(!lz_store_top_accessed(b, 10, 0, top_take, &tb, err, sizeof err), "%s", err);
    int same = ta.n == 4 && tb.n == 4;
    for (int i = 0; same && i < 4; i++) same = ta.hits[i] == tb.hits[i] && !memcmp(ta.keys[i], tb.keys[i], LZ_META_KEY_LEN);
    CHECK(same, "most accessed: %d and %d entries differ", ta.n, tb.n);
    top_list all = { .n = 0 };
    CHECK(!lz_store_top_accessed(b, 64, 1, top_take, &all, err, sizeof err), "%s", err);
    CHECK(all.n == 64 && all.hits[0] == 7 && all.hits[3] == 1 && all.hits[4] == 0, "all: %d entries", all.n);
    lz_store_close(a);
    lz_store_close(b);
}

/* lazyquery --json over both: the same answer and sources (ids, scores) per question. */
static void same_cli(void)
{
    char qfile[700], oa[700], ob[700];
    snprintf(qfile, sizeof qfile, "%s/q.txt", dir);
    snprintf(oa, sizeof oa, "%s/qa.jsonl", dir);
    snprintf(ob, sizeof ob, "%s/qb.jsonl", dir);
    lz_test_write_file(dir, "q.txt", "In which industry does Droex Foods operate?\nWhat is the birthplace of Cima Elosani?\n"
                                     "Which organisation is older, Raio Works or Rairreil Works?\n");
    int ra = lz_test_sh("%s/lazyquery -q --store %s -m %s --top-k 3 -n 16 --json - < %s > %s", bin, one, model, qfile, oa);
    int rb = lz_test_sh("%s/lazyquery -q --store %s -m %s --top-k 3 -n 16 --json - < %s > %s", bin, set, model, qfile, ob);
    CHECK(ra == 0 && rb == 0, "lazyquery: exit %d and %d", ra, rb);
    FILE *fa = fopen(oa, "r"), *fb = fopen(ob, "r");
    char la[1 << 14], lb[1 << 14];
    int lines = 0, same = 0;
    while (fa && fb && fgets(la, sizeof la, fa) && fgets(lb, sizeof lb, fb)) {
        json_t *ja = json_loads(la, 0, NULL), *jb = json_loads(lb, 0, NULL);
        lines++;
        int eq = ja && jb && json_equal(json_object_get(ja, "answer"), json_object_get(jb, "answer")) &&
                 json_equal(json_object_get(ja, "sources"), json_object_get(jb, "sources"));
        CHECK(eq, "lazyquery line %d differs:\n%s%s", lines, la, lb);
        same += eq;
        json_decref(ja);
        json_decref(jb);
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    CHECK(lines == 3 && same == 3, "lazyquery: %d of %d lines the same", same, lines);
}

/* lazyserve over each store: one completion retrieving 3 documents, the same text and sources. */
static int serve_once(const char *store, char *out, size_t n)
{
    char port_file[700], log[700], body[700], cmd[4096];
    static int k;
    snprintf(port_file, sizeof port_file, "%s/port%d", dir, k);
    snprintf(log, sizeof log, "%s/serve%d.log", dir, k++);
    snprintf(cmd, sizeof cmd, "exec %s/lazyserve -q --store %s -m %s --port 0 --port-file %s 2>>%s", bin, store, model,
             port_file, log);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int port = 0;
    for (int i = 0; i < 1200 && !port; i++) {
        FILE *f = fopen(port_file, "r");
        if (f) {
            if (fscanf(f, "%d", &port) != 1) port = 0;
            fclose(f);
        }
        if (!port) lz_test_sleep_ms(50);
    }
    int rc = -1;
    if (port) {
        const char *b = lz_test_write_file(dir, "body.json", "{\"prompt\": \"In which industry does Droex Foods operate?\", "
                                                            "\"max_tokens\": 16, \"retrieve\": {\"k\": 3}}");
        snprintf(body, sizeof body, "%s", b);
        rc = run_out(out, n, "curl -s -H 'Content-Type: application/json' --data-binary @%s http://127.0.0.1:%d/v1/completions",
                     body, port);
    }
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    return rc;
}

static void same_serve(void)
{
    if (lz_test_sh("command -v curl >/dev/null 2>&1")) { printf("SKIP lazyserve: no curl\n"); return; }
    char a[8192], b[8192];
    int ra = serve_once(one, a, sizeof a), rb = serve_once(set, b, sizeof b);
    CHECK(ra == 0 && rb == 0, "lazyserve: curl exit %d and %d", ra, rb);
    json_t *ja = json_loads(a, 0, NULL), *jb = json_loads(b, 0, NULL);
    json_t *ca = ja ? json_object_get(json_array_get(json_object_get(ja, "choices"), 0), "text") : NULL;
    json_t *cb = jb ? json_object_get(json_array_get(json_object_get(jb, "choices"), 0), "text") : NULL;
    CHECK(ca && cb && json_equal(ca, cb) && json_equal(json_object_get(ja, "sources"), json_object_get(jb, "sources")),
          "lazyserve answers differ:\n%s\n%s", a, b);
    json_decref(ja);
    json_decref(jb);
}

static void test_equal(void)
{
    lz_store *a, *b;
    if (!open_store(one, &a)) return;
    if (!open_store(set, &b)) { lz_store_close(a); return; }
    CHECK(lz_store_n_shards(b) == 3 && lz_store_n_shards(a) == 0, "shards: %d", lz_store_n_shards(b));
    lz_test_same_docs(a, b, "one store against 3 shards");
    for (int i = 0; i < 3; i++) { /* each shard holds its documents, and those only */
        int64_t n = -1;
        char e[512];
        lz_store_doc_count(lz_store_shard(b, i), &n, e, sizeof e);
        CHECK(n == lz_test_shard_docs(a, i, 3) && n > 20, "shard %d holds %lld documents", i, (long long)n);
    }
    char *qs[16];
    const int nq = load_questions(qs, 16);
    CHECK(nq >= 10, "%d demo questions", nq);
    int searches = 0, same = 0;
    static const int ks[] = { 3, 10, 200 };
    for (int i = 0; i < nq + (int)(sizeof odd_queries / sizeof *odd_queries); i++)
        for (int j = 0; j < 3; j++, searches++) same += same_search(a, b, i < nq ? qs[i] : odd_queries[i - nq], ks[j]);
    printf("retrieval: %d of %d searches give the same hits, order and scores\n", same, searches);
    lz_llama *m;
    char err[1024];
    if (lz_llama_load(model, &m, err, sizeof err)) CHECK(0, "load: %s", err);
    else {
        same_answers(m, a, b, qs, nq);
        /* the model checked against every shard, the root bound as shard 0 */
        const int *pa, *pb;
        int npa, npb;
        uint8_t ka[LZ_META_KEY_LEN], kb[LZ_META_KEY_LEN];
        lz_store_prefix(a, &pa, &npa, ka);
        lz_store_prefix(b, &pb, &npb, kb);
        CHECK(npa == npb && !memcmp(ka, kb, sizeof ka) && lz_store_kv_dtype(b) == lz_store_kv_dtype(a), "prefix");
        lz_llama_free(m);
    }
    for (int i = 0; i < nq; i++) free(qs[i]);
    lz_store_close(a);
    lz_store_close(b);
    same_top();
    same_cli();
    same_serve();
}

/* ---- a job array's tasks at once, one killed mid-way and run again ---- */

static void test_tasks(void)
{
    char arr[700], s1[800], out[8192];
    snprintf(arr, sizeof arr, "%s/array", dir);
    snprintf(s1, sizeof s1, "%s/shard-0001", arr);
    lz_store *a;
    if (!open_store(one, &a)) return;
    const int64_t want1 = lz_test_shard_docs(a, 1, 3);
    /* task 1 slow (a pause after each small batch), killed after its first commit */
    pid_t pid = fork();
    if (pid == 0) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "exec %s/../tests/lazyingest-hooks --quiet --shard 1/3 --batch-tokens 200 "
                 "--test-pause-ms 150 -m %s -s %s %s", bin, model, arr, corpus);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    const double t0 = lz_now_s();
    pid_t others = fork(); /* tasks 0 and 2 beside it */
    if (others == 0) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "%s/lazyingest --quiet --shard 0/3 -m %s -s %s %s & %s/lazyingest --quiet --shard 2/3 "
                 "-m %s -s %s %s & wait %%1 && wait %%2", bin, model, arr, corpus, bin, model, arr, corpus);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int64_t rows = -1;
    int st = 0, exited = 0;
    while (lz_now_s() - t0 < 60 && !exited) {
        rows = lz_test_rows_of(s1);
        if (rows > 0) break;
        exited = waitpid(pid, &st, WNOHANG) == pid;
        lz_test_sleep_ms(20);
    }
    if (!exited) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    int ost = 0;
    waitpid(others, &ost, 0);
    CHECK(WIFEXITED(ost) && WEXITSTATUS(ost) == 0, "tasks 0 and 2: status %d", ost);
    rows = lz_test_rows_of(s1);
    CHECK(WIFSIGNALED(st) && rows > 0 && rows < want1, "task 1 killed mid-way: %lld of its %lld documents in", (long long)rows,
          (long long)want1);
    /* the set's check names the incomplete shard */
    int rc = run_out(out, sizeof out, "%s/lazyingest --check -s %s", bin, arr);
    CHECK(rc == 4 && strstr(out, "shard 1 of 3") && strstr(out, "stopped before it finished"),
          "check of the killed set: exit %d\n%s", rc, out);
    /* the task run again: resumes (what was committed stays), then the set is the unsharded store */
    rc = run_out(out, sizeof out, "%s/lazyingest --json --shard 1/3 -m %s -s %s %s 2>/dev/null", bin, model, arr, corpus);
    json_t *j = json_loads(out, JSON_DISABLE_EOF_CHECK, NULL);
    CHECK(rc == 0 && j && json_integer_value(json_object_get(j, "unchanged")) >= rows &&
              json_integer_value(json_object_get(j, "added")) == want1 - rows,
          "the task run again: exit %d, %s", rc, out);
    json_decref(j);
    rc = run_out(out, sizeof out, "%s/lazyingest --check -s %s", bin, arr);
    CHECK(rc == 0 && strstr(out, "0 problems"), "check after the resume: exit %d\n%s", rc, out);
    lz_store *b;
    if (open_store(arr, &b)) {
        lz_test_same_docs(a, b, "the array's set");
        lz_store_close(b);
    }
    lz_store_close(a);
    printf("tasks: 3 shards at once, task 1 killed with %lld of %lld documents committed, resumed: %.2f s\n",
           (long long)rows, (long long)want1, lz_now_s() - t0);
}

/* ---- the checker over a damaged copy ---- */

static int first_row(const lz_meta_doc *d, void *p)
{
    lz_meta_doc *o = p;
    *o = *d;
    o->ext_id = strdup(d->ext_id);
    o->source_id = strdup(d->source_id);
    o->title = d->title ? strdup(d->title) : NULL;
    o->text = strdup(d->text);
    int *ids = malloc(sizeof(int) * (size_t)(d->n_tokens ? d->n_tokens : 1));
    if (ids && d->n_tokens) memcpy(ids, d->token_ids, sizeof(int) * (size_t)d->n_tokens);
    o->token_ids = ids;
    return 1;
}

static void free_row(lz_meta_doc *d)
{
    free((void *)d->ext_id);
    free((void *)d->source_id);
    free((void *)d->title);
    free((void *)d->text);
    free((void *)d->token_ids);
}

static void test_checker(void)
{
    char dmg[700], sh[800], out[16384], err[1024];
    snprintf(dmg, sizeof dmg, "%s/damaged", dir);
    lz_test_sh("cp -a %s %s", set, dmg);
    /* a payload deleted in shard 2 */
    lz_store *s;
    lz_meta_doc d = { 0 };
    snprintf(sh, sizeof sh, "%s/shard-0002", dmg);
    if (lz_store_open(sh, LZ_STORE_WRITER, &s, err, sizeof err)) { CHECK(0, "%s", err); return; }
    lz_meta_doc_foreach(test_store_meta(s), first_row, &d, err, sizeof err);
    lz_kvdb_item it = { d.payload_key, LZ_META_KEY_LEN, NULL, 0 };
    int deleted = 0;
    CHECK(!lz_kvdb_del_batch(test_store_kvdb(s), &it, 1, &deleted, err, sizeof err) && deleted == 1, "delete: %s", err);
    char lost[300];
    snprintf(lost, sizeof lost, "document '%s'", d.ext_id);
    free_row(&d);
    lz_store_close(s);
    /* a row of shard 1 copied into shard 0, with its payload (as a hand copy or an old hash would) */
    lz_store *s1, *s0;
    snprintf(sh, sizeof sh, "%s/shard-0001", dmg);
    if (lz_store_open(sh, LZ_STORE_RDONLY, &s1, err, sizeof err)) { CHECK(0, "%s", err); return; }
    snprintf(sh, sizeof sh, "%s/shard-0000", dmg);
    if (lz_store_open(sh, LZ_STORE_WRITER, &s0, err, sizeof err)) { CHECK(0, "%s", err); lz_store_close(s1); return; }
    memset(&d, 0, sizeof d);
    lz_meta_doc_foreach(test_store_meta(s1), first_row, &d, err, sizeof err);
    lz_store_payload p;
    memcpy(p.key, d.payload_key, LZ_META_KEY_LEN);
    int ok = !lz_store_get_payload(s1, d.payload_key, &p.blob, &p.len, err, sizeof err) &&
             !lz_store_put_payloads(s0, &p, 1, err, sizeof err) && !lz_store_begin(s0, err, sizeof err);
    free(p.blob);
    lz_meta_model mm;
    if (ok && !lz_meta_model_get(test_store_meta(s0), &mm, err, sizeof err)) d.model_id = mm.id, free(mm.prefix_tokens);
    d.id = 0;
    ok = ok && !lz_store_doc_insert(s0, &d, err, sizeof err) && !lz_store_commit(s0, err, sizeof err);
    CHECK(ok, "the misplaced row: %s", err);
    char twice[300];
    snprintf(twice, sizeof twice, "document '%s' is in shard 0 and in shard 1", d.ext_id);
    free_row(&d);
    lz_store_close(s0);
    lz_store_close(s1);
    /* a stray folder */
    snprintf(sh, sizeof sh, "%s/shard-0009", dmg);
    mkdir(sh, 0777);
    int rc = run_out(out, sizeof out, "%s/lazyingest --check -s %s", bin, dmg);
    CHECK(rc == 4 && strstr(out, "shard 2 of 3") && strstr(out, lost) && strstr(out, "missing payload"),
          "check: the deleted payload: exit %d\n%s", rc, out);
    CHECK(strstr(out, "misplaced document") && strstr(out, twice) && strstr(out, "which belongs in shard 1"),
          "check: the misplaced row\n%s", out);
    CHECK(strstr(out, "shard-0009") && strstr(out, "no shard of this set"), "check: the stray folder\n%s", out);
    /* --repair re-encodes the payload (one shard after the other); the misplaced row and the folder stay */
    rc = run_out(out, sizeof out, "%s/lazyingest --repair -m %s -s %s", bin, model, dmg);
    CHECK(rc == 4 && strstr(out, "repair: re-encoded") && strstr(out, "misplaced document"), "repair: exit %d\n%s", rc, out);
    /* a --prune run of shard 0 removes what is not its own; the folder removed: clean */
    rc = run_out(out, sizeof out, "%s/lazyingest --quiet --prune --shard 0/3 -m %s -s %s %s", bin, model, dmg, corpus);
    CHECK(rc == 0, "prune shard 0: exit %d\n%s", rc, out);
    rmdir(sh);
    rc = run_out(out, sizeof out, "%s/lazyingest --check -s %s", bin, dmg);
    CHECK(rc == 0 && strstr(out, "116 documents, 116 ok, 0 problems"), "check after the fixes: exit %d\n%s", rc, out);
}

/* ---- bad input ---- */

static void test_bad_input(void)
{
    char out[16384], err[1024], a[800], b[900], tiny[700], small[700], other[700], tinyset[700], manifest[700];
    snprintf(manifest, sizeof manifest, "%s/%s", set, LZ_SHARDS_MANIFEST);
    size_t mlen;
    char *before = lz_test_read_file(manifest, &mlen);
    /* a shard missing: readers refuse, naming it, and create nothing */
    snprintf(a, sizeof a, "%s/shard-0002", set);
    snprintf(b, sizeof b, "%s/moved", dir);
    CHECK(rename(a, b) == 0, "rename");
    int rc = run_out(out, sizeof out, "%s/lazyquery -m %s --store %s 'Who founded Jouproa Press?'", bin, model, set);
    CHECK(rc == 2 && strstr(out, "shard 2 of 3 is missing"), "lazyquery, a shard missing: exit %d\n%s", rc, out);
    CHECK(access(a, F_OK) != 0, "a reader created the missing shard");
    rc = run_out(out, sizeof out, "%s/lazyingest --check -s %s", bin, set);
    CHECK(rc == 1 && strstr(out, "shard 2 of 3 is missing"), "check, a shard missing: exit %d\n%s", rc, out);
    CHECK(rename(b, a) == 0, "rename back");
    /* a shard of another set (same model, another corpus) */
    snprintf(small, sizeof small, "%s/small.jsonl", dir);
    snprintf(other, sizeof other, "%s/other", dir);
    lz_test_sh("head -n 6 %s > %s", corpus, small);
    CHECK(lz_test_sh("%s/lazyingest --quiet --shards 3 -m %s -s %s %s", bin, model, other, small) == 0, "other set");
    snprintf(a, sizeof a, "%s/bad-set", dir);
    lz_test_sh("cp -a %s %s && rm -rf %s/shard-0001 && cp -a %s/shard-0001 %s/", set, a, a, other, a);
    rc = run_out(out, sizeof out, "%s/lazyquery -m %s --store %s 'Who founded Jouproa Press?'", bin, model, a);
    CHECK(rc != 0 && strstr(out, "shard-0001") && strstr(out, "belongs to another sharded store"),
          "a shard of another set: exit %d\n%s", rc, out);
    /* a shard of another model (its shard.id made to match) */
    snprintf(tiny, sizeof tiny, "%s/tiny.gguf", dir);
    snprintf(tinyset, sizeof tinyset, "%s/tinyset", dir);
    CHECK(lz_test_sh("%s/lazy-mkmodel --dim 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 -o %s >/dev/null", bin, tiny) == 0 &&
              lz_test_sh("%s/lazyingest --quiet --shards 3 -m %s -s %s %s", bin, tiny, tinyset, small) == 0,
          "the tiny model's set");
    snprintf(b, sizeof b, "%s/bad-model", dir);
    lz_test_sh("cp -a %s %s && rm -rf %s/shard-0001 && cp -a %s/shard-0001 %s/ && cp %s/shard-0001/shard.id %s/shard-0001/",
               set, b, b, tinyset, b, set, b);
    rc = run_out(out, sizeof out, "%s/lazyquery -m %s --store %s 'Who founded Jouproa Press?'", bin, model, b);
    CHECK(rc != 0 && strstr(out, "shard 1 of 3") && strstr(out, "refusing model"), "lazyquery, a shard of another "
          "model: exit %d\n%s", rc, out);
    rc = run_out(out, sizeof out, "%s/lazyingest --check -s %s", bin, b);
    CHECK(rc == 1 && strstr(out, "shard 1 of 3") && strstr(out, "holds KV of model"),
          "check, a shard of another model: exit %d\n%s", rc, out);
    /* --shard and --shards that disagree with the manifest: refused before anything is written */
    rc = run_out(out, sizeof out, "%s/lazyingest --shard 0/4 -m %s -s %s %s", bin, model, set, corpus);
    CHECK(rc == 2 && strstr(out, "has 3 shards"), "--shard 0/4 of a 3-shard set: exit %d\n%s", rc, out);
    rc = run_out(out, sizeof out, "%s/lazyingest --shard 1/3 -m %s -s %s %s", bin, tiny, set, corpus);
    CHECK(rc == 2 && strstr(out, "refusing model"), "another model: exit %d\n%s", rc, out);
    rc = run_out(out, sizeof out, "%s/lazyingest --shard 1/3 --kv-dtype f32 -m %s -s %s %s", bin, model, set, corpus);
    CHECK(rc == 2 && strstr(out, "refusing --kv-dtype f32"), "another dtype: exit %d\n%s", rc, out);
    rc = run_out(out, sizeof out, "%s/lazyingest --shards 2 -m %s -s %s %s", bin, model, one, corpus);
    CHECK(rc == 2 && strstr(out, "unsharded store"), "--shards over a plain store: exit %d\n%s", rc, out);
    snprintf(a, sizeof a, "%s/shard-0000", set);
    rc = run_out(out, sizeof out, "%s/lazyingest -m %s -s %s %s", bin, model, a, corpus);
    CHECK(rc == 2 && strstr(out, "one shard of a sharded store"), "a corpus into a shard folder: exit %d\n%s", rc, out);
    /* a manifest edited to another count, or garbage */
    snprintf(a, sizeof a, "%s/bad-manifest", dir);
    lz_test_sh("cp -a %s %s && sed -i 's/^shards 3$/shards 4/' %s/%s", set, a, a, LZ_SHARDS_MANIFEST);
    rc = run_out(out, sizeof out, "%s/lazyquery -m %s --store %s 'Who founded Jouproa Press?'", bin, model, a);
    CHECK(rc != 0 && strstr(out, "shard-0000") && strstr(out, "wants shard 0 of 4"), "an edited manifest: exit %d\n%s", rc, out);
    rc = run_out(out, sizeof out, "%s/lazyingest --shard 3/4 -m %s -s %s %s", bin, model, a, corpus);
    snprintf(b, sizeof b, "%s/shard-0003", a);
    CHECK(rc != 0 && strstr(out, "wants shard 0 of 4") && access(b, F_OK) != 0,
          "a new shard under an edited manifest: exit %d\n%s", rc, out);
    lz_test_sh("printf 'garbage\\n' > %s/%s", a, LZ_SHARDS_MANIFEST);
    rc = run_out(out, sizeof out, "%s/lazyingest --check -s %s", bin, a);
    CHECK(rc == 2 && strstr(out, "not a shard manifest"), "a garbage manifest: exit %d\n%s", rc, out);
    /* writes through the root: refused */
    lz_store *s;
    CHECK(lz_store_open(set, LZ_STORE_WRITER, &s, err, sizeof err) == LZ_EINVAL && strstr(err, "one shard at a time"),
          "open a root as writer: %s", err);
    if (open_store(set, &s)) {
        lz_store_payload p = { { 0 }, "x", 1 };
        CHECK(lz_store_begin(s, err, sizeof err) == LZ_EINVAL, "begin through the root");
        CHECK(lz_store_put_payloads(s, &p, 1, err, sizeof err) == LZ_EINVAL, "a payload through the root");
        lz_store_gc_stats gs;
        CHECK(lz_store_gc(s, &gs, err, sizeof err) == LZ_EINVAL, "gc through the root");
        lz_store_close(s);
    }
    /* and the set is as it was */
    char *after = lz_test_read_file(manifest, &mlen);
    CHECK(before && after && !strcmp(before, after), "the manifest changed");
    free(before);
    free(after);
    rc = run_out(out, sizeof out, "%s/lazyingest --check -s %s", bin, set);
    CHECK(rc == 0 && strstr(out, "116 documents, 116 ok, 0 problems"), "the set after the refusals: exit %d\n%s", rc, out);
}

int main(void)
{
    const char *b = getenv("LZ_BIN");
    if (!b) { printf("SKIP LZ_BIN not set (run through make test)\n"); return lz_test_done(); }
    if (access(model, R_OK) != 0) { printf("SKIP %s not found\n", model); return lz_test_done(); }
    snprintf(bin, sizeof bin, "%s", b);
    if (!lz_test_tmpdir(dir, sizeof dir)) return 1;
    snprintf(one, sizeof one, "%s/one", dir);
    snprintf(set, sizeof set, "%s/set", dir);
    snprintf(corpus, sizeof corpus, "datasets/demo/corpus.jsonl");
    lz_llama_set_threads(2);
    double t0 = lz_now_s();
    if (lz_test_sh("%s/lazyingest --quiet -m %s -s %s %s", bin, model, one, corpus) ||
        lz_test_sh("%s/lazyingest --quiet --shards 3 -m %s -s %s %s", bin, model, set, corpus)) {
        CHECK(0, "could not build the stores");
        return lz_test_done();
    }
    printf("stores: one and 3 shards built in %.2f s\n", lz_now_s() - t0);
    double t = lz_now_s();
    test_equal();
    printf("equal: %.2f s\n", lz_now_s() - t);
    t = lz_now_s();
    test_tasks();
    t = lz_now_s();
    test_checker();
    printf("checker: %.2f s\n", lz_now_s() - t);
    t = lz_now_s();
    test_bad_input();
    printf("bad input: %.2f s\n", lz_now_s() - t);
    lz_test_sh("rm -rf %s", dir);
    printf("test_shards: %.2f s\n", lz_now_s() - t0);
    return lz_test_done();
}
