/* test_eval.c - lazyeval and its library (eval/): the answer metrics against
 * hand-computed values (normalisation, HotpotQA's yes/no rule, several gold
 * answers), passage naming as lazyingest names context pairs, the dataset
 * readers, the Zipf / Poisson streams (the same as bench_workload's), the
 * summaries; then lazyeval end to end ($LZ_BIN) on small official-format
 * files it generates (2Wiki questions, duplicate titles, split passages, ids
 * with commas, a question whose documents are missing), on the 100-question
 * HotpotQA sample with the shipped model, and on the synthetic test split
 * in HotpotQA's format, where its EM must equal datasets/train/eval_c.sh's. */
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "eval/dataset.h"
#include "eval/metrics.h"
#include "eval/normalize.h"
#include "eval/passages.h"
#include "eval/summary.h"
#include "eval/workload.h"
#include "eval/zipf.h"
#include "store/store.h"
#include "test.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1 /* the end-to-end runs shrink: the sanitised model is several times slower */
#else
#define UNDER_ASAN 0
#endif

static char dir[512], bin[PATH_MAX], model[PATH_MAX];

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---------------------------------------------------------------- metrics */

static void check_norm(const char *in, const char *want)
{
    char *got = lz_eval_normalize(in);
    CHECK(got && !strcmp(got, want), "normalize('%s') = '%s', want '%s'", in, got ? got : "(null)", want);
    free(got);
}

static void test_normalize(void)
{
    check_norm("The  Quick, brown FOX!", "quick brown fox");
    check_norm("a", "");
    check_norm("An apple a day", "apple day");
    check_norm("theatre and anthem", "theatre and anthem"); /* articles only as whole words */
    check_norm("the-end", "theend");                         /* punctuation goes first: no word 'the' left */
    check_norm("U.S.A.", "usa");
    check_norm("1,234,000", "1234000");
    check_norm("  spaced\t\nout  ", "spaced out");
    check_norm("\xc3\x89" "COLE Polytechnique", "\xc3\xa9" "cole polytechnique"); /* Unicode lower case */
    check_norm("Hello\xc2\xa0world", "hello world");                          /* NBSP is whitespace, as in Python */
    check_norm("Ma\xc5\x82gorzata Braunek", "ma\xc5\x82gorzata braunek");
    /* curly quotes are no ASCII punctuation: they stay, and 'The' between them is a word (a space) */
    check_norm("\xe2\x80\x9cThe\xe2\x80\x9d end", "\xe2\x80\x9c \xe2\x80\x9d end");
    check_norm("caf\xc3\xa9 the", "caf\xc3\xa9");
    check_norm("bad \xff byte", "bad \xff byte"); /* invalid UTF-8 travels through */
    check_norm("", "");
}

static void check_score(const char *pred, const char *const *golds, int n, double em, double f1)
{
    lz_eval_score s;
    const int rc = lz_eval_score_answer(pred, golds, n, &s);
    CHECK(rc == 0 && s.em == em && fabs(s.f1 - f1) < 1e-12, "'%s' vs '%s'%s: em %g f1 %.6f, want %g %.6f", pred,
          golds[0], n > 1 ? " (and more)" : "", s.em, s.f1, em, f1);
}

static void test_metrics(void)
{
    const char *g1[] = {"Paris"};
    check_score("paris", g1, 1, 1, 1);
    check_score("Paris, France", g1, 1, 0, 2.0 * 0.5 * 1 / 1.5); /* P 1/2, R 1: F1 2/3 */
    const char *g2[] = {"red dog"};
    check_score("the big red dog", g2, 1, 0, 0.8); /* "big red dog": P 2/3, R 1 */
    const char *g3[] = {"x y y"};
    check_score("x x y", g3, 1, 0, 2.0 / 3); /* multiset: common x1 + y1 = 2 of 3 each */
    /* HotpotQA's rule: yes / no / noanswer on either side score F1 0 unless equal */
    const char *yes[] = {"yes"}, *no[] = {"no"}, *noans[] = {"no answer"}, *noway[] = {"no way"};
    check_score("Yes.", yes, 1, 1, 1);
    check_score("yes", no, 1, 0, 0);
    check_score("yes it is", yes, 1, 0, 0); /* gold 'yes', prediction not: 0 though 'yes' is common */
    check_score("no", noway, 1, 0, 0);      /* prediction 'no', gold not: 0 though 'no' is common */
    check_score("noanswer", noans, 1, 0, 0);
    check_score("no way", noway, 1, 1, 1);
    const char *maybe[] = {"maybe yes"};
    check_score("yes maybe", maybe, 1, 0, 1); /* neither side is exactly yes/no: plain F1 */
    /* several gold answers (2Wiki aliases): the best EM and the best F1, each apart */
    const char *nyc[] = {"New York City", "NYC"};
    check_score("nyc", nyc, 2, 1, 1);
    const char *ny[] = {"New York City", "York"};
    check_score("new york", ny, 2, 0, 0.8); /* 0.8 against the first, 2/3 against the second */
    lz_eval_score s;
    CHECK(lz_eval_score_answer("new york", ny, 2, &s) == 0 && s.precision == 1 && s.recall == 1,
          "precision and recall are maxima apart: %g %g", s.precision, s.recall);
    CHECK(lz_eval_score_answer("x", ny, 0, &s) == -1, "no gold answer is an error");
    const char *empty[] = {""};
    check_score("", empty, 1, 1, 0); /* as the scripts: equal empties match, no tokens give F1 0 */
}

/* ---------------------------------------------------------------- passages, datasets */

static void test_passages(void)
{
    lz_eval_passages *t = lz_eval_passages_new();
    int r1, r2, r3, r4;
    const int a = lz_eval_passages_add(t, "Bob", "Bob is a director.", 0, &r1);
    const int b = lz_eval_passages_add(t, "Bob", "Bob is a painter.", 1, &r2);
    const int c = lz_eval_passages_add(t, "Bob", "Bob is a director.", 2, &r3);
    const int d = lz_eval_passages_add(t, "Bob", "Bob is a pilot.", 3, &r4);
    CHECK(a == 0 && b == 1 && c == 0 && d == 2 && !r1 && r2 && !r3 && r4, "indices %d %d %d %d, renamed %d %d %d %d",
          a, b, c, d, r1, r2, r3, r4);
    CHECK(!strcmp(lz_eval_passages_get(t, 0)->id, "Bob") && !strcmp(lz_eval_passages_get(t, 1)->id, "Bob (2)") &&
              !strcmp(lz_eval_passages_get(t, 2)->id, "Bob (3)"),
          "ids as lazyingest names them");
    CHECK(!strcmp(lz_eval_passages_get(t, 1)->title, "Bob") && lz_eval_passages_get(t, 1)->owner == 1,
          "the title stays, the owner is the first asker");
    for (int i = 0; i < 600; i++) { /* the table grows */
        char title[32];
        snprintf(title, sizeof title, "T%d", i);
        lz_eval_passages_add(t, title, "x", i, &r1);
    }
    CHECK(lz_eval_passages_count(t) == 603 && lz_eval_passages_add(t, "T5", "x", 0, &r1) == 8, "600 more, found again");
    lz_eval_passages_free(t);
    const char *s1[] = {"One.", "Two."}, *s2[] = {" One.", " Two."}, *s3[] = {"One. ", "", "Two."};
    char *j1 = lz_eval_join_sentences(s1, 2), *j2 = lz_eval_join_sentences(s2, 2), *j3 = lz_eval_join_sentences(s3, 3);
    CHECK(!strcmp(j1, "One. Two.") && !strcmp(j2, " One. Two.") && !strcmp(j3, "One. Two."), "joined '%s' '%s' '%s'",
          j1, j2, j3);
    free(j1);
    free(j2);
    free(j3);
}

/* A 2WikiMultihopQA dev file: duplicate titles with other text, a title with commas, an empty
 * passage, aliases by answer_id, a long passage (split at ingest when --max-doc-tokens is small). */
static const char *wiki_json =
    "[{\"_id\": \"w1\", \"type\": \"compositional\", \"question\": \"Who directed Film, A?\", \"answer\": \"Bob\",\n"
    "  \"answer_id\": \"Q1\", \"evidences\": [[\"Film, A\", \"director\", \"Bob\"]],\n"
    "  \"supporting_facts\": [[\"Film, A\", 0], [\"Bob\", 0]],\n"
    "  \"context\": [[\"Film, A\", [\"Film, A is a film from 1999.\", \"It was directed by Bob.\"]],\n"
    "               [\"Bob\", [\"Bob is a director born in Lyon.\"]], [\"Empty\", []],\n"
    "               [\"Long story\", [\"The long story begins in a small town by the river.\", \"The town had a mill, a "
    "school and a market square where people met each week.\", \"Later the mill closed and the people moved to the city "
    "to find work in the new factories.\", \"The story ends many years later when a child comes back to the town.\"]]]},\n"
    " {\"_id\": \"w2\", \"type\": \"comparison\", \"question\": \"Is Bob older than Ann?\", \"answer\": \"yes\",\n"
    "  \"evidences\": [[\"Bob\", \"date of birth\", \"1950\"], [\"Ann\", \"date of birth\", \"1960\"]],\n"
    "  \"context\": [[\"Bob\", [\"Bob is a painter born in 1950.\"]], [\"Ann\", [\"Ann is a painter born in 1960.\"]]]},\n"
    " {\"_id\": \"w3\", \"type\": \"inference\", \"question\": \"Where was the director of Film, A born?\",\n"
    "  \"answer\": \"Lyon\", \"answer_id\": \"Q2\", \"evidences\": [[\"Film, A\", \"director\", \"Bob\"]],\n"
    "  \"context\": [[\"Bob\", [\"Bob is a director born in Lyon.\"]], [\"Film, A\", [\"Film, A is a film from 1999.\", "
    "\"It was directed by Bob.\"]], [\"Long story\", [\"The long story begins in a small town by the river.\", \"The "
    "town had a mill, a school and a market square where people met each week.\", \"Later the mill closed and the "
    "people moved to the city to find work in the new factories.\", \"The story ends many years later when a child "
    "comes back to the town.\"]]]},\n"
    " {\"_id\": \"w4\", \"type\": \"bridge_comparison\", \"question\": \"Which film came out first, Film, A or Zed?\",\n"
    "  \"answer\": \"Film, A\", \"evidences\": [[\"Zed\", \"publication date\", \"2001\"]],\n"
    "  \"context\": [[\"Zed\", [\"Zed is a film from 2001.\"]], [\"Film, A\", [\"Film, A is a film from 1999.\", "
    "\"It was directed by Bob.\"]]]}]\n";
static const char *wiki_aliases = "{\"Q_id\": \"Q1\", \"aliases\": [\"Robert\", \"Bobby\"], \"demonyms\": []}\n"
                                  "{\"Q_id\": \"Q9\", \"aliases\": [\"Nobody\"], \"demonyms\": []}\n"
                                  "{\"Q_id\": \"Q2\", \"aliases\": [], \"demonyms\": [\"Lyonnais\"]}\n";

static void test_dataset(void)
{
    const char *wf = lz_test_write_file(dir, "wiki.json", wiki_json);
    const char *af = lz_test_write_file(dir, "id_aliases.json", wiki_aliases);
    lz_eval_dataset d;
    char err[1024] = "";
    CHECK(lz_eval_dataset_init(&d) == 0, "init");
    int rc = lz_eval_dataset_read(&d, wf, LZ_EVAL_FORMAT_AUTO, 0, err, sizeof err);
    CHECK(rc == 0, "read the 2Wiki file: %s", err);
    rc = lz_eval_dataset_read_aliases(&d, af, err, sizeof err);
    CHECK(rc == 0, "read the aliases: %s", err);
    CHECK(d.format == LZ_EVAL_FORMAT_2WIKI && d.n_q == 4, "2wiki detected (%d), %d questions", d.format, d.n_q);
    if (d.n_q == 4) {
        const lz_eval_question *q = &d.q[0];
        CHECK(q->n_golds == 3 && !strcmp(q->golds[1], "Robert") && !strcmp(q->golds[2], "Bobby"), "w1 golds %d",
              q->n_golds);
        CHECK(d.q[2].n_golds == 2 && !strcmp(d.q[2].golds[1], "Lyonnais"), "demonyms count as aliases");
        CHECK(d.q[1].n_golds == 1 && d.n_aliases == 3, "others untouched (%d aliases)", d.n_aliases);
        CHECK(q->n_passages == 3 && q->n_dropped == 1 && d.n_dropped == 1, "the empty pair dropped: %d passages",
              q->n_passages);
        CHECK(q->n_gold_titles == 2 && !strcmp(q->gold_titles[0], "Film, A") && !strcmp(q->gold_titles[1], "Bob"),
              "supporting_facts titles");
        CHECK(d.q[1].n_gold_titles == 2 && !strcmp(d.q[1].gold_titles[1], "Ann"), "evidences' subjects without them");
        const lz_eval_passage *p = lz_eval_passages_get(d.passages, d.q[1].passages[0]);
        CHECK(!strcmp(p->id, "Bob (2)") && d.n_renamed == 1, "Bob the painter is 'Bob (2)': '%s'", p->id);
        CHECK(d.q[2].passages[0] == d.q[0].passages[1], "the same Bob passage is one passage");
        CHECK(!strcmp(d.q[3].type, "bridge_comparison") && !strcmp(d.q[3].golds[0], "Film, A"), "w4 type and answer");
    }
    lz_eval_dataset_free(&d);
    /* HotpotQA's format, a record without answer (a test file), a limit, errors naming the record */
    const char *hf = lz_test_write_file(dir, "hotpot.json",
        "[{\"_id\": \"h1\", \"question\": \"Q?\", \"answer\": \"A\", \"type\": \"bridge\", \"level\": \"hard\","
        " \"supporting_facts\": [[\"T\", 0]], \"context\": [[\"T\", [\" One.\", \" Two.\"]]]},"
        " {\"_id\": \"h2\", \"question\": \"R?\", \"context\": [[\"U\", [\"x\"]]]},"
        " {\"_id\": \"h3\", \"question\": \"S?\", \"context\": [[\"V\", [\"y\"]]]}]");
    lz_eval_dataset_init(&d);
    rc = lz_eval_dataset_read(&d, hf, LZ_EVAL_FORMAT_AUTO, 2, err, sizeof err);
    CHECK(rc == 0 && d.format == LZ_EVAL_FORMAT_HOTPOTQA && d.n_q == 2, "hotpotqa, limit 2: %d (%s)", d.n_q, err);
    CHECK(d.n_q == 2 && !strcmp(d.q[0].level, "hard") && d.q[1].n_golds == 0, "level; no answer: unscored");
    CHECK(!strcmp(lz_eval_passages_get(d.passages, 0)->text, " One. Two."), "HotpotQA's leading spaces kept");
    lz_eval_dataset_free(&d);
    const char *bad = lz_test_write_file(dir, "bad.json", "[{\"question\": \"q\", \"context\": [[\"T\", \"not a list\"]]}]");
    lz_eval_dataset_init(&d);
    rc = lz_eval_dataset_read(&d, bad, LZ_EVAL_FORMAT_AUTO, 0, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "record [0]") && strstr(err, "context"), "a malformed context names it: %s", err);
    lz_eval_dataset_free(&d);
    const char *obj = lz_test_write_file(dir, "obj.json", "{\"T\": [\"s\"]}");
    lz_eval_dataset_init(&d);
    rc = lz_eval_dataset_read(&d, obj, LZ_EVAL_FORMAT_AUTO, 0, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "JSON array"), "a corpus object is not a question file: %s", err);
    lz_eval_dataset_free(&d);
}

/* ---------------------------------------------------------------- streams */

/* bench_workload's generator as it was before it moved to eval/zipf.c, the reference */
static uint64_t ref_s;
static uint64_t ref_rnd(void)
{
    uint64_t z = (ref_s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double ref_u01(void) { return (double)(ref_rnd() >> 11) / 9007199254740992.0; }
static int *ref_stream(int n, int Q, int K, double alpha, uint64_t seed, uint64_t draw_seed)
{
    ref_s = seed * 0x2545F4914F6CDD1Dull + 7;
    int *perm = malloc((size_t)n * sizeof(int)), *s = malloc((size_t)Q * K * sizeof(int));
    double *cdf = malloc((size_t)n * sizeof(double)), z = 0;
    for (int i = 0; i < n; i++) perm[i] = i;
    for (int i = n - 1; i > 0; i--) { int j = (int)(ref_rnd() % (uint64_t)(i + 1)), t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
    for (int i = 0; i < n; i++) { z += pow(i + 1, -alpha); cdf[i] = z; }
    ref_s = draw_seed * 0x2545F4914F6CDD1Dull + 11;
    for (int q = 0; q < Q; q++)
        for (int j = 0; j < K; j++) {
            int pick, dup;
            do {
                const double u = ref_u01() * z;
                int lo = 0, hi = n - 1;
                while (lo < hi) { int mid = (lo + hi) / 2; if (cdf[mid] < u) lo = mid + 1; else hi = mid; }
                pick = perm[lo];
                dup = 0;
                for (int t = 0; t < j; t++) dup |= s[q * K + t] == pick;
            } while (dup);
            s[q * K + j] = pick;
        }
    free(perm);
    free(cdf);
    return s;
}

static void test_streams(void)
{
    static const struct { int n, Q, K; double alpha; uint64_t seed, draw; } cases[] = {
        {100, 500, 5, 2.1, 1, 1}, {994, 300, 10, 0.8, 7, 7}, {50, 200, 1, 0, 3, 1000006}, {10, 40, 10, 1.2, 2, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int *a = lz_eval_zipf_stream(cases[c].n, cases[c].Q, cases[c].K, cases[c].alpha, cases[c].seed, cases[c].draw);
        int *b = ref_stream(cases[c].n, cases[c].Q, cases[c].K, cases[c].alpha, cases[c].seed, cases[c].draw);
        CHECK(a && !memcmp(a, b, sizeof(int) * (size_t)cases[c].Q * cases[c].K), "case %zu: the stream bench_workload "
              "replayed before the move", c);
        free(a);
        free(b);
    }
    CHECK(lz_eval_zipf_stream(5, 3, 6, 1, 1, 1) == NULL, "K > n refused");
    /* popularity: under alpha 1.2 the most drawn item takes far more than a uniform share */
    int *s = lz_eval_zipf_stream(100, 5000, 1, 1.2, 4, 4), cnt[100] = {0}, top = 0;
    for (int i = 0; i < 5000; i++) cnt[s[i]]++;
    for (int i = 0; i < 100; i++) top = cnt[i] > top ? cnt[i] : top;
    CHECK(top > 1000, "Zipf(1.2) over 100: the top item drawn %d of 5000 times", top);
    free(s);
    double t[4000];
    lz_eval_poisson_arrivals(t, 4000, 50, 9);
    int inc = 1;
    for (int i = 1; i < 4000; i++) inc &= t[i] >= t[i - 1];
    CHECK(inc && fabs(t[3999] / 4000 - 1.0 / 50) < 0.1 / 50, "Poisson(50/s): increasing, mean gap %.5f s",
          t[3999] / 4000);
    lz_eval_poisson_arrivals(t, 10, 0, 9);
    CHECK(t[0] == 0 && t[9] == 0, "rate 0: back to back");
    lz_eval_workload w = {.popularity = LZ_EVAL_POP_DOCUMENTS, .n_requests = 20, .alpha = 1, .docs = 3, .seed = 5};
    const int owner[6] = {0, 0, 1, 1, 2, 2};
    lz_eval_stream st;
    char err[256];
    CHECK(lz_eval_stream_make(&w, 3, 6, owner, &st, err, sizeof err) == 0 && st.n == 20 && st.K == 3, "documents stream");
    int ok = 1;
    for (int i = 0; i < st.n; i++) ok &= st.question[i] == owner[st.docs[i * 3]];
    CHECK(ok && st.back_to_back, "each request asks its first passage's question");
    lz_eval_stream_free(&st);
    w.docs = 7;
    CHECK(lz_eval_stream_make(&w, 3, 6, owner, &st, err, sizeof err) == -1 && strstr(err, "--workload-docs"),
          "more passages than there are: %s", err);
    w = (lz_eval_workload){.popularity = LZ_EVAL_POP_NONE};
    CHECK(lz_eval_stream_make(&w, 3, 6, owner, &st, err, sizeof err) == 0 && st.n == 3 && st.question[2] == 2 &&
              !st.docs,
          "each question once, in order");
    lz_eval_stream_free(&st);
}

/* ---------------------------------------------------------------- summaries */

static void test_summary(void)
{
    double v[5] = {5, 1, 4, 2, 3};
    lz_eval_dist d;
    lz_eval_dist_of(v, 5, &d);
    CHECK(d.mean == 3 && d.p50 == 3 && fabs(d.p95 - 4.8) < 1e-12 && fabs(d.p99 - 4.96) < 1e-12 && d.min == 1 &&
              d.max == 5,
          "numpy's linear percentiles of 1..5: %g %g %g %g", d.mean, d.p50, d.p95, d.p99);
    /* a run of 4 questions: the warm-up, two scored (one right), one failed */
    lz_eval_dataset ds;
    lz_eval_dataset_init(&ds);
    ds.q = calloc(4, sizeof *ds.q);
    ds.n_q = ds.cap_q = 4;
    static char *golds[1] = {"x"};
    const char *types[4] = {"bridge", "comparison", "bridge", "bridge"};
    for (int i = 0; i < 4; i++) {
        ds.q[i].type = strdup(types[i]);
        ds.q[i].n_golds = 1;
        ds.q[i].golds = malloc(sizeof(char *));
        ds.q[i].golds[0] = strdup(golds[0]);
    }
    lz_eval_row rows[4] = {0};
    for (int i = 0; i < 4; i++) {
        rows[i].question = i;
        rows[i].ok = i != 3;
        rows[i].scorable = 1;
        rows[i].scored = rows[i].ok;
        rows[i].recall = -1;
        rows[i].t_ttft = 0.1 * (i + 1);
        rows[i].n_answer = 5;
        rows[i].t_decode = 0.5;
    }
    rows[0].warmup = 1;
    rows[0].score.em = rows[0].score.f1 = 1;
    rows[1].score.f1 = 0.5;
    lz_eval_run_result res = {.rows = rows, .n_rows = 4, .wall_s = 2};
    res.after_warmup.host.hits = 2;
    res.after_warmup.host.misses = 8;
    res.at_end.host.hits = 11;
    res.at_end.host.misses = 11;
    lz_eval_summary s;
    CHECK(lz_eval_summarize(&ds, &res, &s) == 0, "summarize");
    CHECK(s.answered == 3 && s.failed == 1 && s.scored == 3, "answered %d failed %d scored %d", s.answered, s.failed,
          s.scored);
    CHECK(fabs(s.em - 100.0 / 3) < 1e-9 && fabs(s.f1 - 50) < 1e-9, "EM %g F1 %g over the scored", s.em, s.f1);
    CHECK(fabs(s.em_all - 25) < 1e-9 && fabs(s.f1_all - 37.5) < 1e-9, "with the failure as 0: %g %g", s.em_all, s.f1_all);
    CHECK(s.n_types == 2 && !strcmp(s.types[0].type, "bridge") && s.types[0].n == 2 && s.types[0].failed == 1 &&
              s.types[0].em == 50,
          "per type: bridge n %d failed %d em %g", s.types[0].n, s.types[0].failed, s.types[0].em);
    CHECK(s.ttft.n == 2 && fabs(s.ttft.mean - 0.25) < 1e-12 && s.has_warmup && s.warmup.t_ttft == 0.1,
          "TTFT over the two after the warm-up: n %d mean %g", s.ttft.n, s.ttft.mean);
    CHECK(fabs(s.decode_tok_s - 8) < 1e-12, "decode: 8 tokens in 1 s: %g", s.decode_tok_s);
    CHECK(s.host_hits == 9 && s.host_misses == 3 && fabs(s.host_hit_rate - 0.75) < 1e-12,
          "host tier after the warm-up: %lld / %lld", (long long)s.host_hits, (long long)s.host_misses);
    lz_eval_summary_free(&s);
    lz_eval_dataset_free(&ds);
}

/* ---------------------------------------------------------------- lazyeval end to end */

static json_t *load_report(const char *out)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/report.json", out);
    json_error_t je;
    json_t *r = json_load_file(p, 0, &je);
    CHECK(r != NULL, "%s: %s", p, je.text);
    return r;
}

static json_t *run_of(json_t *report, int i) { return json_array_get(json_object_get(report, "runs"), (size_t)i); }
static json_int_t iget(json_t *o, const char *k) { return json_integer_value(json_object_get(o, k)); }
static double rget(json_t *o, const char *k) { return json_number_value(json_object_get(o, k)); }

/* the row of question id in a run's "questions" */
static json_t *row_of(json_t *run, const char *id)
{
    json_t *rows = json_object_get(run, "questions"), *r;
    size_t i;
    json_array_foreach(rows, i, r) if (!strcmp(json_string_value(json_object_get(r, "id")), id)) return r;
    return NULL;
}

static int file_has(const char *path, const char *needle)
{
    size_t n;
    char *s = lz_test_read_file(path, &n);
    const int ok = s && strstr(s, needle);
    free(s);
    return ok;
}

static int count_lines_starting(const char *path, const char *prefix)
{
    size_t n;
    char *s = lz_test_read_file(path, &n);
    int k = 0;
    for (char *p = s; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p))
        k += !strncmp(p, prefix, strlen(prefix));
    free(s);
    return k;
}

static void test_cli(void)
{
    char out[1024];
    snprintf(out, sizeof out, "%s/help.txt", dir);
    int rc = lz_test_sh("%s/lazyeval --help > %s", bin, out);
    CHECK(rc == 0 && file_has(out, "recall_at_k") && file_has(out, "normalize_answer") && file_has(out, "noanswer") &&
              file_has(out, "--workload zipf") && file_has(out, "Exit status"),
          "--help answers (rc %d)", rc);
    CHECK(lz_test_sh("%s/lazyeval --bogus x.json 2>/dev/null", bin) == 2, "unknown option: 2");
    CHECK(lz_test_sh("%s/lazyeval 2>/dev/null", bin) == 2, "no dataset: 2");
    CHECK(lz_test_sh("%s/lazyeval --mode lazy,nope x.json 2>/dev/null", bin) == 2, "bad mode: 2");
    CHECK(lz_test_sh("%s/lazyeval -o %s/o-missing %s/no-such.json 2>/dev/null", bin, dir, dir) == 1,
          "a file that is not there: 1");
    CHECK(lz_test_sh("%s/lazyeval -o %s/o-bad %s/bad.json 2>/dev/null", bin, dir, dir) == 2, "a malformed file: 2");
    CHECK(lz_test_sh("%s/lazyeval --gpu x.json 2>/dev/null", bin) == 2, "--gpu without CUDA: 2"); /* the CPU build's */
}

/* lazyingest's own naming of the official file gives the documents lazyeval's corpus names */
static void check_same_ids(const char *corpus, const char *store_dir)
{
    lz_store *st = NULL;
    char err[512];
    if (lz_store_open(store_dir, LZ_STORE_RDONLY, &st, err, sizeof err)) { CHECK(0, "%s", err); return; }
    FILE *f = fopen(corpus, "r");
    char line[8192];
    int n = 0, found = 0;
    while (f && fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        const char *id = json_string_value(json_object_get(o, "id"));
        lz_meta_doc doc;
        char src[600];
        memset(&doc, 0, sizeof doc);
        n++;
        if (id && lz_store_doc_find(st, id, &doc, src, sizeof src, err, sizeof err) == 0) found++;
        else if (id) { /* a split passage: its source id names passages id#0, ... */
            char p0[600];
            snprintf(p0, sizeof p0, "%s#0", id);
            found += lz_store_doc_find(st, p0, &doc, src, sizeof src, err, sizeof err) == 0;
        }
        json_decref(o);
    }
    if (f) fclose(f);
    CHECK(n > 0 && found == n, "lazyingest on the official file stores every id lazyeval names: %d of %d", found, n);
    lz_store_close(st);
}

static void test_small_files(void)
{
    char out1[700], out2[700], out3[700], out4[700], out5[700], log[700], p[800];
    snprintf(out1, sizeof out1, "%s/e1", dir);
    snprintf(log, sizeof log, "%s/e1.log", dir);
    const double t0 = now_s();
    /* 2 modes x 2 host budgets (the hit-rate plot), passages over 48 tokens split */
    int rc = lz_test_sh("%s/lazyeval -q -t 2 -m %s -o %s --aliases %s/id_aliases.json --mode lazy,block "
                        "--host-cache-bytes 64K,64M --ingest-arg --max-doc-tokens --ingest-arg 48 %s/wiki.json > %s 2>&1",
                        bin, model, out1, dir, dir, log);
    CHECK(rc == 0, "lazyeval on the 2Wiki file: exit %d (%s)", rc, log);
    json_t *r = load_report(out1);
    if (r) {
        json_t *ds = json_object_get(r, "dataset");
        CHECK(!strcmp(json_string_value(json_object_get(ds, "format")), "2wiki") && iget(ds, "questions") == 4 &&
                  iget(ds, "renamed") == 1 && iget(ds, "dropped_pairs") == 1 && iget(ds, "aliases") == 3,
              "dataset: 2wiki, 4 questions, 1 renamed, 1 dropped, 3 aliases");
        CHECK(json_array_size(json_object_get(r, "runs")) == 4, "4 runs");
        json_t *run = run_of(r, 0);
        CHECK(iget(run, "answered") == 4 && iget(run, "failed") == 0, "all answered");
        json_t *w1 = row_of(run, "w1");
        char *src = w1 ? json_dumps(json_object_get(w1, "sources"), JSON_COMPACT) : NULL;
        CHECK(src && strstr(src, "\"Film, A\"") && strstr(src, "\"Long story#0\"") && strstr(src, "\"Long story#1\""),
              "a title with commas is one id; the long passage came as its passages: %s", src ? src : "");
        free(src);
        json_t *w2 = row_of(run, "w2");
        src = w2 ? json_dumps(json_object_get(w2, "sources"), JSON_COMPACT) : NULL;
        CHECK(src && strstr(src, "\"Bob (2)\""), "the other Bob: %s", src ? src : "");
        free(src);
        json_t *gold = w1 ? json_object_get(w1, "gold") : NULL;
        CHECK(json_array_size(gold) == 3, "w1 has its aliases as gold answers");
        json_t *types = json_object_get(json_object_get(run, "quality"), "by_type");
        CHECK(json_object_size(types) == 4 && json_object_get(types, "bridge_comparison"), "2Wiki's four types");
        json_t *warm = json_object_get(run, "warmup");
        CHECK(warm && !strcmp(json_string_value(json_object_get(warm, "id")), "w1") &&
                  iget(json_object_get(json_object_get(run, "speed"), "ttft_s"), "n") == 3,
              "the warm-up apart, 3 timed");
        CHECK(json_is_null(json_object_get(run, "preload")) &&
                  !strcmp(json_string_value(json_object_get(json_object_get(r, "store"), "opened")), "read-only"),
              "clean measurement: no preload, a read-only store");
        json_t *m = json_object_get(r, "machine");
        CHECK(json_string_length(json_object_get(m, "hostname")) && json_string_length(json_object_get(m, "cpu")) &&
                  json_string_length(json_object_get(r, "version")) &&
                  json_string_length(json_object_get(json_object_get(r, "model"), "fingerprint")) == 64,
              "machine, version and model recorded");
        /* lazy and block give the same answers */
        json_t *b = run_of(r, 2);
        CHECK(b && !strcmp(json_string_value(json_object_get(b, "mode")), "block") &&
                  rget(json_object_get(b, "quality"), "f1") == rget(json_object_get(run, "quality"), "f1"),
              "block's F1 equals lazy's");
        /* a budget below one document hits nothing; 64M holds them all */
        const double h0 = rget(json_object_get(json_object_get(run, "cache"), "host"), "hit_rate");
        const double h1 = rget(json_object_get(json_object_get(run_of(r, 1), "cache"), "host"), "hit_rate");
        CHECK(h1 > h0, "more budget, more hits: %g > %g", h1, h0);
        json_decref(r);
    }
    snprintf(p, sizeof p, "%s/corpus.jsonl", out1);
    CHECK(file_has(p, "\"id\": \"Bob (2)\"") || file_has(p, "\"id\":\"Bob (2)\""), "the corpus names 'Bob (2)'");
    /* lazyingest's own reading of the official file names the same documents */
    char store2[700];
    snprintf(store2, sizeof store2, "%s/direct-store", dir);
    rc = lz_test_sh("%s/lazyingest --quiet -t 2 -m %s -s %s --max-doc-tokens 48 %s/wiki.json 2>/dev/null", bin, model,
                    store2, dir);
    CHECK(rc == 0 || rc == 2, "lazyingest on the official file: %d (2: the empty pair skipped)", rc);
    if (rc == 0 || rc == 2) check_same_ids(p, store2);
    snprintf(p, sizeof p, "%s/questions.csv", out1);
    CHECK(count_lines_starting(p, "lazy") == 8 && count_lines_starting(p, "block") == 8, "CSV: a row per question and run");
    CHECK(file_has(p, "\"[\"\"Film, A\"\"") , "CSV quotes an id with a comma");
    snprintf(p, sizeof p, "%s/plots/plots.gp", out1);
    CHECK(file_has(p, "hit_rate.png") && file_has(p, "ttft.png") && file_has(p, "quality.png"), "the three plots' script");
    char gp[PATH_MAX];
    if (lz_test_sh("command -v gnuplot >/dev/null 2>&1") == 0) {
        snprintf(gp, sizeof gp, "%s/plots/hit_rate.png", out1);
        struct stat sb;
        CHECK(stat(gp, &sb) == 0 && sb.st_size > 1000, "hit_rate.png drawn");
        snprintf(gp, sizeof gp, "%s/plots/ttft.png", out1);
        CHECK(stat(gp, &sb) == 0 && sb.st_size > 1000, "ttft.png drawn");
    } else {
        printf("SKIP gnuplot not installed: the PNGs are not checked ('make deps' installs gnuplot-nox)\n");
    }
    /* a question whose documents are missing: an error row, counted, never an empty answer */
    const char *f2 = lz_test_write_file(dir, "wiki2.json",
        "[{\"_id\": \"m1\", \"type\": \"comparison\", \"question\": \"Is Bob older than Ann?\", \"answer\": \"yes\","
        " \"context\": [[\"Bob\", [\"Bob is a painter born in 1950.\"]], [\"Ann\", [\"Ann is a painter born in 1960.\"]]]},"
        " {\"_id\": \"m2\", \"type\": \"comparison\", \"question\": \"Who is Carl?\", \"answer\": \"no\","
        " \"context\": [[\"Carl, Jr.\", [\"Carl, Jr. is not in the store.\"]], [\"Zed\", [\"Zed is a film from 2001.\"]]]},"
        " {\"_id\": \"m3\", \"type\": \"inference\", \"question\": \"Where was Bob born?\", \"answer\": \"Lyon\","
        " \"context\": [[\"Bob\", [\"Bob is a director born in Lyon.\"]]]},"
        " {\"_id\": \"m4\", \"type\": \"compositional\", \"question\": \"When did Zed come out?\", \"answer\": \"2001\","
        " \"context\": [[\"Zed\", [\"Zed is a song from 1970.\"]]]}]");
    snprintf(out2, sizeof out2, "%s/e2", dir);
    rc = lz_test_sh("%s/lazyeval -q -t 2 -m %s -o %s -s %s/store --no-ingest --no-plots %s > %s/e2.log 2>&1", bin,
                    model, out2, out1, f2, dir);
    CHECK(rc == 0, "missing documents are rows, the run succeeds: %d", rc);
    r = load_report(out2);
    if (r) {
        json_t *run = run_of(r, 0), *m2 = row_of(run, "m2"), *m4 = row_of(run, "m4");
        CHECK(iget(run, "failed") == 2 && iget(run, "answered") == 2 &&
                  iget(json_object_get(run, "quality"), "scored") == 2,
              "2 failed, 2 answered and scored");
        /* m1 names the painter 'Bob' (first in this file), m3 the director 'Bob (2)': the store's documents
         * are found by their text, the other way round */
        json_t *m1 = row_of(run, "m1"), *m3 = row_of(run, "m3");
        char *s1 = m1 ? json_dumps(json_object_get(m1, "sources"), JSON_COMPACT) : NULL;
        char *s3 = m3 ? json_dumps(json_object_get(m3, "sources"), JSON_COMPACT) : NULL;
        CHECK(s1 && s3 && !strcmp(s1, "[\"Bob (2)\",\"Ann\"]") && !strcmp(s3, "[\"Bob\"]"),
              "passages found by content: %s %s", s1 ? s1 : "", s3 ? s3 : "");
        free(s1);
        free(s3);
        const char *e = m2 ? json_string_value(json_object_get(m2, "error")) : NULL;
        CHECK(e && strstr(e, "Carl, Jr.") && strstr(e, "not in the store") && !json_object_get(m2, "prediction") &&
                  !json_object_get(m2, "em"),
              "the error row names the document, has no prediction and no score: %s", e ? e : "");
        e = m4 ? json_string_value(json_object_get(m4, "error")) : NULL;
        CHECK(e && strstr(e, "'Zed'") && strstr(e, "other text"), "another text under a stored title fails: %s",
              e ? e : "");
        json_t *fl = json_object_get(run, "failures");
        CHECK(json_array_size(fl) == 2 && !strcmp(json_string_value(json_object_get(json_array_get(fl, 0), "id")), "m2"),
              "the summary lists them");
        json_t *ct = json_object_get(json_object_get(json_object_get(run, "quality"), "by_type"), "comparison");
        CHECK(iget(ct, "failed") == 1 && iget(ct, "n") == 1, "its type counts it apart");
        json_t *sj = json_object_get(r, "store");
        CHECK(iget(sj, "passages_missing") == 1 && iget(sj, "passages_with_other_text") == 1, "the store's counts");
        json_decref(r);
    }
    snprintf(p, sizeof p, "%s/questions.csv", out2);
    CHECK(file_has(p, ",m2,comparison,,error,"), "the CSV row says error");
    CHECK(lz_test_sh("%s/lazyeval -q -t 2 -m %s -o %s -s %s/store --no-ingest --no-plots --strict %s > /dev/null 2>&1",
                     bin, model, out2, out1, f2) == 2,
          "--strict: exit 2 when a question failed");
    /* the open setting: BM25 over the whole store, recall@k of the gold passages */
    snprintf(out3, sizeof out3, "%s/e3", dir);
    rc = lz_test_sh("%s/lazyeval -q -t 2 -m %s -o %s -s %s/store --no-ingest --setting open -k 3 --plotter "
                    "/nonexistent/gnuplot %s/wiki.json > %s/e3.log 2>&1",
                    bin, model, out3, out1, dir, dir);
    CHECK(rc == 0, "open setting: %d", rc);
    r = load_report(out3);
    if (r) {
        json_t *ret = json_object_get(run_of(r, 0), "retrieval");
        CHECK(ret && iget(ret, "k") == 3 && iget(ret, "questions") == 4 && rget(ret, "recall_at_k") > 0 &&
                  rget(ret, "recall_at_k") <= 100,
              "recall@3 over 4 questions: %g", rget(ret, "recall_at_k"));
        json_t *w1 = row_of(run_of(r, 0), "w1");
        CHECK(w1 && json_is_number(json_object_get(w1, "recall")), "each row has its recall");
        json_t *notes = json_object_get(r, "notes");
        char *ns = json_dumps(notes, 0);
        CHECK(ns && strstr(ns, "gnuplot was not found"), "no plotter: said so, plots skipped: %s", ns ? ns : "");
        free(ns);
        json_decref(r);
    }
    snprintf(p, sizeof p, "%s/e3.log", dir);
    CHECK(file_has(p, "not found: no PNG plots"), "the note on standard error");
    snprintf(p, sizeof p, "%s/plots/plots.gp", out3);
    CHECK(file_has(p, "ttft.png"), "the script is written all the same");
    /* the workload mode: Zipf popularity, Poisson arrivals */
    snprintf(out4, sizeof out4, "%s/e4", dir);
    rc = lz_test_sh("%s/lazyeval -q -t 2 -m %s -o %s -s %s/store --no-ingest --no-plots --workload zipf --requests 12 "
                    "--alpha 1.2 --rate 500 %s/wiki.json > %s/e4.log 2>&1",
                    bin, model, out4, out1, dir, dir);
    CHECK(rc == 0, "workload: %d", rc);
    r = load_report(out4);
    if (r) {
        json_t *run = run_of(r, 0), *rows = json_object_get(run, "questions");
        CHECK(iget(run, "requests") == 12 && json_array_size(rows) == 12 &&
                  !strcmp(json_string_value(json_object_get(run, "arrivals")), "poisson"),
              "12 Poisson requests");
        double last = -1;
        int inc = 1, scored = 0;
        for (size_t i = 0; i < json_array_size(rows); i++) {
            json_t *t = json_object_get(json_array_get(rows, i), "timings");
            inc &= rget(t, "arrival_s") >= last && rget(t, "latency_s") >= rget(t, "ttft_s");
            last = rget(t, "arrival_s");
            scored += json_object_get(json_array_get(rows, i), "em") != NULL;
        }
        CHECK(inc && last > 0 && scored == 12, "arrivals increase, latency >= TTFT, popular questions scored");
        json_decref(r);
    }
    snprintf(out5, sizeof out5, "%s/e5", dir);
    rc = lz_test_sh("%s/lazyeval -q -t 2 -m %s -o %s -s %s/store --no-ingest --no-plots --workload zipf --popularity "
                    "documents --workload-docs 2 --requests 8 %s/wiki.json > %s/e5.log 2>&1",
                    bin, model, out5, out1, dir, dir);
    r = rc == 0 ? load_report(out5) : NULL;
    CHECK(r && iget(run_of(r, 0), "unscored") == 8 && iget(run_of(r, 0), "failed") == 0,
          "documents popularity: 8 requests of 2 passages, speed only (rc %d)", rc);
    json_decref(r);
    /* access counts only when asked: --stats records them, --preload hot then loads those documents */
    rc = lz_test_sh("%s/lazyeval -q -t 2 -m %s -o %s/e6 -s %s/store --no-ingest --no-plots --stats %s/wiki.json "
                    "> /dev/null 2>&1 && %s/lazyeval -q -t 2 -m %s -o %s/e7 -s %s/store --no-ingest --no-plots --preload hot "
                    "%s/wiki.json > /dev/null 2>&1",
                    bin, model, dir, out1, dir, bin, model, dir, out1, dir);
    snprintf(p, sizeof p, "%s/e7", dir);
    r = rc == 0 ? load_report(p) : NULL;
    json_t *pre = r ? json_object_get(run_of(r, 0), "preload") : NULL;
    CHECK(pre && iget(pre, "host") > 0, "--stats, then --preload hot: %lld documents preloaded (rc %d)",
          pre ? (long long)iget(pre, "host") : -1LL, rc);
    json_decref(r);
    printf("small official-format files: %.1f s\n", now_s() - t0);
}

/* The 100 HotpotQA questions end to end on the CPU with the shipped model. */
static void test_hotpot_sample(void)
{
    char fx[1024];
    if (!lz_test_fixture("qa/hotpotqa_sample100.json", fx, sizeof fx)) return;
    char out[700];
    snprintf(out, sizeof out, "%s/hotpot", dir);
    const int limit = UNDER_ASAN ? 10 : 100;
    const double t0 = now_s();
    int rc = lz_test_sh("%s/lazyeval -q -t 2 -m %s -o %s --limit %d %s > %s/hotpot.log 2>&1", bin, model, out, limit,
                        fx, dir);
    const double secs = now_s() - t0;
    CHECK(rc == 0, "lazyeval on the HotpotQA sample: exit %d (%s/hotpot.log)", rc, dir);
    json_t *r = load_report(out);
    if (!r) return;
    json_t *run = run_of(r, 0), *ds = json_object_get(r, "dataset");
    CHECK(iget(ds, "questions") == limit && !strcmp(json_string_value(json_object_get(ds, "format")), "hotpotqa"),
          "%d HotpotQA questions", limit);
    const int answered = (int)iget(run, "answered"), failed = (int)iget(run, "failed");
    CHECK(answered + failed == limit && (int)json_array_size(json_object_get(run, "failures")) == failed,
          "answered %d + failed %d = %d, each failure listed", answered, failed, limit);
    int bad = 0;
    json_t *rows = json_object_get(run, "questions"), *row;
    size_t i;
    json_array_foreach(rows, i, row) {
        const int ok = json_is_true(json_object_get(row, "ok"));
        bad += ok ? !json_object_get(row, "prediction") : !json_string_length(json_object_get(row, "error"));
    }
    CHECK(bad == 0, "every row has a prediction or an error (%d without)", bad);
    char *ns = json_dumps(json_object_get(r, "notes"), 0);
    CHECK(ns && strstr(ns, "near 0") && strstr(ns, "synthetic"), "the report says why EM is near 0");
    free(ns);
    json_t *q = json_object_get(run, "quality");
    printf("HotpotQA sample: %d questions, %d answered, %d failed, EM %.1f F1 %.1f, TTFT p50 %.1f ms: %.1f s\n", limit,
           answered, failed, rget(q, "em"), rget(q, "f1"),
           1e3 * rget(json_object_get(json_object_get(run, "speed"), "ttft_s"), "p50"), secs);
    json_decref(r);
}

/* The synthetic test split in HotpotQA's format: lazyeval's EM equals eval_c.sh's, answer by answer. */
static void test_synthetic_split(void)
{
    if (lz_test_sh("python3 -c 'import json' 2>/dev/null") != 0) {
        printf("SKIP python3 not found: the synthetic split is not compared with eval_c.sh\n");
        return;
    }
    char cwd[PATH_MAX], root[800], split[900];
    if (!getcwd(cwd, sizeof cwd)) return;
    const int worlds = UNDER_ASAN ? 2 : 3, per_type = UNDER_ASAN ? 3 : 8;
    const char *modes = UNDER_ASAN ? "lazy" : "lazy full";
    snprintf(root, sizeof root, "%s/ec", dir);
    snprintf(split, sizeof split, "%s/build/qa/test-ci", root);
    const double t0 = now_s();
    /* eval_c.sh finds its split at build/qa/test-PER_TYPE under the folder it runs in: a small one made here */
    int rc = lz_test_sh("mkdir -p %s && ln -s %s/datasets %s/datasets && python3 datasets/worldgen.py split --split test "
                        "--seed 3 --worlds %d --per-type %d --out %s 2>/dev/null && python3 datasets/train/evaluate.py "
                        "--questions %s/questions.json --to-lazyquery %s/lazyquery.jsonl && python3 "
                        "datasets/tools/worldgen_to_hotpot.py --questions %s/questions.json --corpus %s/corpus.jsonl "
                        "--out %s/hotpot.json 2>/dev/null",
                        split, cwd, root, worlds, per_type, split, split, split, split, split, root);
    CHECK(rc == 0, "the split and its HotpotQA form: %d", rc);
    if (rc) return;
    rc = lz_test_sh("cd %s && BIN=%s MODES='%s' THREADS=2 sh %s/datasets/train/eval_c.sh %s %s/c ci > %s/c.log 2>&1",
                    root, bin, modes, cwd, model, root, root);
    CHECK(rc == 0, "eval_c.sh: %d (%s/c.log)", rc, root);
    rc = lz_test_sh("%s/lazyeval -q -t 2 -m %s -o %s/e --mode %s --no-plots %s/hotpot.json > %s/e.log 2>&1", bin,
                    model, root, UNDER_ASAN ? "lazy" : "lazy,full", root, root);
    CHECK(rc == 0, "lazyeval: %d (%s/e.log)", rc, root);
    char p[1000];
    snprintf(p, sizeof p, "%s/c/metrics.json", root);
    json_t *metrics = json_load_file(p, 0, NULL);
    char eout[1000];
    snprintf(eout, sizeof eout, "%s/e", root);
    json_t *r = load_report(eout);
    CHECK(metrics != NULL, "eval_c.sh's metrics.json");
    for (int k = 0; metrics && r && k < (UNDER_ASAN ? 1 : 2); k++) {
        const char *mode = k ? "full" : "lazy";
        json_t *run = run_of(r, k), *mm = json_object_get(metrics, mode);
        const double em_c = rget(json_object_get(mm, "all"), "em"), em_e = rget(json_object_get(run, "quality"), "em");
        CHECK(run && !strcmp(json_string_value(json_object_get(run, "mode")), mode) && fabs(em_c - em_e) < 1e-9 &&
                  iget(run, "failed") == 0,
              "%s: lazyeval's EM %.4f equals eval_c.sh's %.4f", mode, em_e, em_c);
        static const char *const types[] = {"single", "bridge", "comparison"};
        for (int t = 0; t < 3; t++) {
            json_t *bt = json_object_get(json_object_get(json_object_get(run, "quality"), "by_type"), types[t]);
            CHECK(fabs(rget(bt, "em") - rget(json_object_get(mm, types[t]), "em")) < 1e-9 &&
                      fabs(rget(bt, "f1") - rget(json_object_get(mm, types[t]), "f1")) < 1e-9,
                  "%s %s: EM / F1 equal", mode, types[t]);
        }
        /* answer by answer */
        snprintf(p, sizeof p, "%s/c/pred_%s.jsonl", root, mode);
        FILE *f = fopen(p, "r");
        char line[1 << 16];
        int n = 0, same = 0;
        while (f && fgets(line, sizeof line, f)) {
            json_t *o = json_loads(line, 0, NULL);
            json_t *row = row_of(run, json_string_value(json_object_get(o, "id")));
            n++;
            same += row && !strcmp(json_string_value(json_object_get(row, "prediction")),
                                   json_string_value(json_object_get(o, "answer")));
            json_decref(o);
        }
        if (f) fclose(f);
        CHECK(n == 3 * per_type && same == n, "%s: %d of %d answers the same", mode, same, n);
        if (k == 0) printf("synthetic split (%d questions, %s): EM %.1f both ways\n", n, modes, em_e);
    }
    json_decref(metrics);
    json_decref(r);
    printf("synthetic split against eval_c.sh: %.1f s\n", now_s() - t0);
}

int main(void)
{
    test_normalize();
    test_metrics();
    test_passages();
    if (!lz_test_tmpdir(dir, sizeof dir)) return 1;
    test_dataset();
    test_streams();
    test_summary();
    const char *b = getenv("LZ_BIN");
    if (!b) {
        printf("SKIP LZ_BIN not set (run through make test): lazyeval end to end\n");
        lz_test_sh("rm -rf %s", dir);
        return lz_test_done();
    }
    if (!realpath(b, bin) || !realpath("models/default.gguf", model)) {
        printf("SKIP %s or models/default.gguf not found\n", b);
        lz_test_sh("rm -rf %s", dir);
        return lz_test_done();
    }
    test_cli();
    test_small_files();
    test_hotpot_sample();
    test_synthetic_split();
    lz_test_sh("rm -rf %s", dir);
    return lz_test_done();
}
