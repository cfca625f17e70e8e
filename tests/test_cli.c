/* test_cli.c - the command line every tool shares (base/cli.h, base/env.h),
 * driving the built tools in $LZ_BIN on a generated model and store:
 * --version and --help (exit-status and environment paragraphs, no measured
 * figures) in every tool; getopt's forms (--opt=value, bundled short
 * options, '--' before a question that starts with '-'); the same flags for
 * the same meaning (-m -s -n -t -q, old names kept as aliases); an unknown
 * option, a missing or unwanted value and a bad number each exit 2 with one
 * line naming it and "try --help"; 'lazyquery -' reads questions from
 * standard input; lazyquery refuses a store that is not there (exit 2) and
 * creates nothing; a store held by another writer exits 3; the tokenizer
 * command (lazy-tokenize, lazygen --tokenize) on vocabulary-only GGUFs and a
 * tokenizer.json (../shared/fixtures/tokenizers: SKIP when absent) and on a
 * model without fixtures; the LAZY_* switches parsed once (lz_env_parse),
 * a malformed one refused by the tools, retired ones warned about, the
 * fault injection absent from the shipped lazyingest, and issue #31's
 * options (--id-field, --doc, --strict). */
#include <fcntl.h>
#include <limits.h>
#include <jansson.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "base/cli.h"
#include "base/env.h"
#include "store/store.h"
#include "tests/test.h"

static char dir[256], bin[512], model[600], store[600], corpus[600];
static char out[1 << 16], errs[1 << 14];
static unsigned long long rng = 0x5eed;

static const char *const tools[] = {"lazyingest", "lazyquery", "lazygen", "lazy-logits", "lazy-convert",
                                    "lazy-mkmodel", "lazy-tokenize", NULL};

/* Runs $LZ_BIN/args[0] with args[1..] (NULL-terminated), standard input from in_path (NULL:
 * /dev/null), env ("NAME=VALUE", may be NULL) added to the environment; stdout into out,
 * stderr into errs. Returns the exit status, or 128 + signal. */
static int run_env(const char *env, const char *in_path, const char *const *args)
{
    char op[300], ep[300], path[700];
    snprintf(op, sizeof op, "%s/stdout.txt", dir);
    snprintf(ep, sizeof ep, "%s/stderr.txt", dir);
    snprintf(path, sizeof path, "%s/%s", bin, args[0]);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(op, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fi = open(in_path ? in_path : "/dev/null", O_RDONLY);
        dup2(fo, 1);
        dup2(fe, 2);
        dup2(fi, 0);
        if (env) putenv((char *)env);
        execv(path, (char *const *)args);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    size_t len;
    char *s = lz_test_read_file(op, &len);
    snprintf(out, sizeof out, "%s", s ? s : "");
    free(s);
    s = lz_test_read_file(ep, &len);
    snprintf(errs, sizeof errs, "%s", s ? s : "");
    free(s);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int run(const char *in_path, const char *const *args) { return run_env(NULL, in_path, args); }

static int count_char(const char *s, char c)
{
    int n = 0;
    for (; *s; s++) n += *s == c;
    return n;
}

/* ---- in-process: the env struct, the number helpers ---- */

typedef struct {
    const char *const *kv; /* name, value, name, value, ..., NULL */
} fake_env;

static const char *fake_get(const char *name, void *ctx)
{
    const fake_env *f = ctx;
    for (int i = 0; f->kv[i]; i += 2)
        if (!strcmp(f->kv[i], name)) return f->kv[i + 1];
    return NULL;
}

static int parse_with(lz_env *e, const char *const *kv)
{
    fake_env f = {kv};
    return lz_env_parse(e, fake_get, &f);
}

static void test_env_parse(void)
{
    lz_env e;
    const char *none[] = {NULL};
    CHECK(parse_with(&e, none) == 0 && !e.error[0] && !e.retired[0], "empty environment: %s", e.error);
    CHECK(e.ingest_gpu_pass == 2048 && e.ingest_gpu_mass == 1 && e.ingest_ref_passes == 0 && !e.f32_weights &&
              !e.gpu_decode_prefill && e.gpu_decode_split == 0 && e.gpu_gemv_bps == 0 && e.gpu_gemv_silu_bps == 0 &&
              e.gpu_decode_group == 2 && !e.model[0],
          "defaults");
    const char *good[] = {"LAZY_MODEL", "/m/x.gguf", "LAZY_F32_WEIGHTS", "1", "LAZY_GPU_DECODE", "8", "LAZY_GPU_GEMV",
                          "3,1", "LAZY_INGEST_GPU_PASS", "0", "LAZY_INGEST_GPU_MASS", "0", "LAZY_INGEST_REF_PASSES", "250",
                          NULL};
    CHECK(parse_with(&e, good) == 0 && !e.error[0], "well-formed switches: %s", e.error);
    CHECK(!strcmp(e.model, "/m/x.gguf") && e.f32_weights && !e.gpu_decode_prefill && e.gpu_decode_split == 8 &&
              e.gpu_gemv_bps == 3 && e.gpu_gemv_silu_bps == 1 && e.ingest_gpu_pass == 0 && e.ingest_gpu_mass == 0 &&
              e.ingest_ref_passes == 250,
          "their values");
    const char *grp0[] = {"LAZY_GPU_DECODE_GROUP", "0", NULL}, *grp1[] = {"LAZY_GPU_DECODE_GROUP", "auto", NULL};
    CHECK(parse_with(&e, grp0) == 0 && e.gpu_decode_group == 0, "LAZY_GPU_DECODE_GROUP=0");
    CHECK(parse_with(&e, grp1) == 0 && e.gpu_decode_group == 2, "LAZY_GPU_DECODE_GROUP=auto");
    const char *grpbad[] = {"LAZY_GPU_DECODE_GROUP", "yes", NULL};
    CHECK(parse_with(&e, grpbad) == -1 && strstr(e.error, "LAZY_GPU_DECODE_GROUP"), "LAZY_GPU_DECODE_GROUP=yes refused: %s",
          e.error);
    const char *pf[] = {"LAZY_GPU_DECODE", "prefill", "LAZY_F32_WEIGHTS", "0", "LAZY_MODEL", "", NULL};
    CHECK(parse_with(&e, pf) == 0 && e.gpu_decode_prefill && !e.f32_weights && !e.model[0],
          "LAZY_GPU_DECODE=prefill; LAZY_F32_WEIGHTS=0 and an empty LAZY_MODEL are off");
    const char *f32e[] = {"LAZY_F32_WEIGHTS", "", NULL};
    CHECK(parse_with(&e, f32e) == 0 && !e.f32_weights, "LAZY_F32_WEIGHTS= (empty) is off");
    static const struct {
        const char *name, *value;
    } bad[] = {{"LAZY_GPU_GEMV", "4"},        {"LAZY_GPU_GEMV", "a,b"},         {"LAZY_GPU_GEMV", "4,2,1"},
               {"LAZY_GPU_GEMV", "-1,2"},     {"LAZY_GPU_DECODE", "fast"},      {"LAZY_GPU_DECODE", "-1"},
               {"LAZY_GPU_DECODE", "300"},    {"LAZY_INGEST_GPU_PASS", "2k"},   {"LAZY_INGEST_GPU_PASS", "-5"},
               {"LAZY_INGEST_GPU_MASS", "2"}, {"LAZY_INGEST_REF_PASSES", "x"},  {"LAZY_INGEST_REF_PASSES", "9999999"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *kv[] = {bad[i].name, bad[i].value, NULL};
        char want[128];
        snprintf(want, sizeof want, "%s='%s': expected", bad[i].name, bad[i].value);
        CHECK(parse_with(&e, kv) == -1 && strstr(e.error, want), "%s=%s refused, named: %s", bad[i].name, bad[i].value,
              e.error);
    }
    const char *dflt[] = {"LAZY_INGEST_GPU_PASS", "x", NULL};
    parse_with(&e, dflt);
    CHECK(e.ingest_gpu_pass == 2048, "a malformed value leaves the default (%d)", e.ingest_gpu_pass);
    const char *ret[] = {"LAZY_INGEST_SERIAL", "1", NULL};
    CHECK(parse_with(&e, ret) == 0 && strstr(e.retired, "LAZY_INGEST_SERIAL") && strstr(e.retired, "--serial"),
          "retired switch: %s", e.retired);
    const char *ret2[] = {"LAZY_INGEST_REF_FAIL_PASS", "3", NULL};
    CHECK(parse_with(&e, ret2) == 0 && strstr(e.retired, "LAZY_INGEST_REF_FAIL_PASS") && strstr(e.retired, "test"),
          "the fault injection is retired from the environment: %s", e.retired);
    /* the process environment: read once, again only through the test API */
    setenv("LAZY_INGEST_GPU_PASS", "77", 1);
    lz_env_reload();
    const lz_env *g = lz_env_get();
    const int first = g->ingest_gpu_pass;
    setenv("LAZY_INGEST_GPU_PASS", "99", 1);
    CHECK(first == 77 && lz_env_get()->ingest_gpu_pass == 77, "read once: %d then %d", first,
          lz_env_get()->ingest_gpu_pass);
    lz_env_reload();
    CHECK(lz_env_get()->ingest_gpu_pass == 99, "lz_env_reload reads it again (%d)", lz_env_get()->ingest_gpu_pass);
    unsetenv("LAZY_INGEST_GPU_PASS");
    lz_env_reload();
    CHECK(lz_env_get()->ingest_gpu_pass == 2048, "unset: the default again");
}

static void test_numbers(void)
{
    lz_cli_init("test_cli");
    long l;
    int i;
    double d;
    size_t z;
    int k;
    /* each refusal prints one usage line on stderr */
    fprintf(stderr, "(the usage lines below are expected)\n");
    CHECK(lz_cli_long("--top-k", "12", 1, 100, &l) == 0 && l == 12, "12");
    CHECK(lz_cli_long("--top-k", "12x", 1, 100, &l) == -1 && lz_cli_long("--top-k", "", 1, 100, &l) == -1 &&
              lz_cli_long("--top-k", "0", 1, 100, &l) == -1 && lz_cli_long("--top-k", "101", 1, 100, &l) == -1 &&
              lz_cli_long("--top-k", "99999999999999999999", 1, 100, &l) == -1 &&
              lz_cli_long("--top-k", " 5", 1, 100, &l) == 0,
          "strict integers: trailing text, empty, out of range, overflow refused");
    CHECK(lz_cli_int("--n", "-3", -5, 5, &i) == 0 && i == -3, "negative in range");
    CHECK(lz_cli_double("--temp", "0.5", 0, 1, &d) == 0 && d == 0.5 && lz_cli_double("--temp", "nan", 0, 1, &d) == -1 &&
              lz_cli_double("--temp", "1e", 0, 1, &d) == -1 && lz_cli_double("--temp", "2", 0, 1, &d) == -1,
          "numbers");
    CHECK(lz_cli_size("--cache-bytes", "512M", &z) == 0 && z == 512ull << 20 && lz_cli_size("--c", "2G", &z) == 0 &&
              z == 2ull << 30 && lz_cli_size("--c", "1024", &z) == 0 && z == 1024 && lz_cli_size("--c", "8kB", &z) == 0 &&
              z == 8192 && lz_cli_size("--c", "12Q", &z) == -1 && lz_cli_size("--c", "-1M", &z) == -1,
          "sizes");
    int devs[8];
    CHECK(lz_cli_gpu_list("--gpus", "all", 3, devs, 8) == 3 && devs[0] == 0 && devs[2] == 2, "--gpus all");
    CHECK(lz_cli_gpu_list("--gpus", "2,0-1,1", 4, devs, 8) == 4 && devs[0] == 2 && devs[1] == 0 && devs[2] == 1 &&
              devs[3] == 1,
          "--gpus indices, a range, a repeat");
    CHECK(lz_cli_gpu_list("--gpus", "5", 0, devs, 8) == 1 && devs[0] == 5, "--gpus unchecked without a runtime");
    CHECK(lz_cli_gpu_list("--gpus", "", 2, devs, 8) == -1 && lz_cli_gpu_list("--gpus", "2", 2, devs, 8) == -1 &&
              lz_cli_gpu_list("--gpus", "1-0", 2, devs, 8) == -1 && lz_cli_gpu_list("--gpus", "0,", 2, devs, 8) == -1 &&
              lz_cli_gpu_list("--gpus", "-1", 2, devs, 8) == -1 && lz_cli_gpu_list("--gpus", "0 1", 2, devs, 8) == -1 &&
              lz_cli_gpu_list("--gpus", "0-9", 16, devs, 8) == -1 && lz_cli_gpu_list("--gpus", "all", 0, devs, 8) == -1 &&
              lz_cli_gpu_list("--gpus", "0,+1", 2, devs, 8) == -1,
          "--gpus refusals: empty, missing device, reversed range, trailing comma, sign, space, too many");
    static const char *const names[] = {"lazy", "block", "full", NULL};
    CHECK(lz_cli_choice("--mode", "full", names, &k) == 0 && k == 2 && lz_cli_choice("--mode", "ful", names, &k) == -1,
          "choices");
    CHECK(!strcmp(lz_cli_version_string(), "unknown") || strlen(lz_cli_version_string()) >= 4, "version '%s'",
          lz_cli_version_string());
    /* reading a file and standard input ('-') */
    char err[256];
    size_t len = 0;
    const char *p = lz_test_write_file(dir, "read.txt", "one\ntwo\n");
    char *s = lz_cli_read_file(p, &len, err, sizeof err);
    CHECK(s && len == 8 && !strcmp(s, "one\ntwo\n"), "a whole file");
    free(s);
    char missing[400];
    snprintf(missing, sizeof missing, "%s/none.txt", dir);
    CHECK(!lz_cli_read_file(missing, &len, err, sizeof err) && strstr(err, "none.txt"), "a missing file named: %s", err);
}

/* ---- every tool ---- */

static void test_version_help(void)
{
    char first[256] = "";
    for (int t = 0; tools[t]; t++) {
        const char *a1[] = {tools[t], "--version", NULL}, *a2[] = {tools[t], "-V", NULL};
        int rc = run(NULL, a1);
        char want[64];
        snprintf(want, sizeof want, "%s (lazy) ", tools[t]);
        CHECK(rc == 0 && !strncmp(out, want, strlen(want)) && count_char(out, '\n') == 1, "%s --version: %d '%s'",
              tools[t], rc, out);
        const char *ver = out + strlen(want);
        if (!first[0]) snprintf(first, sizeof first, "%s", ver);
        CHECK(!strcmp(ver, first), "%s: the same version as the others ('%s' vs '%s')", tools[t], ver, first);
        CHECK(run(NULL, a2) == 0 && !strncmp(out, want, strlen(want)), "%s -V", tools[t]);
        const char *h[] = {tools[t], "--help", NULL};
        rc = run(NULL, h);
        CHECK(rc == 0 && strstr(out, "Exit status: 0 success; 1 runtime error") &&
                  strstr(out, "2 usage or bad input") && strstr(out, "3 the store is held by another writer"),
              "%s --help: exit %d, ends with the exit codes", tools[t], rc);
        CHECK(strstr(out, "-h, --help") && strstr(out, "-V, --version"), "%s --help lists -h and -V", tools[t]);
        CHECK(!strstr(out, "tok/s") && !strstr(out, "faster") && !strstr(out, "slower") && !strstr(out, "RESULTS") &&
                  !strstr(out, "H200") && !strstr(out, "best on") && !strstr(out, "%"),
              "%s --help: no measured figures", tools[t]);
        /* the environment paragraph where the switches matter (every tool that loads a model) */
        if (strcmp(tools[t], "lazy-mkmodel"))
            CHECK(strstr(out, "LAZY_F32_WEIGHTS") && strstr(out, "LAZY_MODEL") && strstr(out, "LAZY_GPU_DECODE") &&
                      strstr(out, "LAZY_INGEST_GPU_PASS"),
                  "%s --help lists the environment switches", tools[t]);
        CHECK(!strstr(out, "LAZY_INGEST_SERIAL") && !strstr(out, "LAZY_INGEST_SYNC_COMMIT") &&
                  !strstr(out, "LAZY_INGEST_REF_FAIL_PASS"),
              "%s --help: no retired switch", tools[t]);
        CHECK(run(NULL, (const char *[]){tools[t], "-h", NULL}) == 0 && strstr(out, "usage:"), "%s -h", tools[t]);
        /* an unknown option: one line naming it, then try --help; exit 2 */
        const char *u[] = {tools[t], "--frobnicate", NULL};
        rc = run(NULL, u);
        CHECK(rc == 2 && strstr(errs, "unknown option '--frobnicate'") && strstr(errs, "--help") &&
                  count_char(errs, '\n') == 1 && !out[0],
              "%s --frobnicate: exit %d: %s", tools[t], rc, errs);
        const char *u2[] = {tools[t], "--frobnicate=3", NULL};
        CHECK(run(NULL, u2) == 2 && strstr(errs, "unknown option '--frobnicate'"), "%s --frobnicate=3: %s", tools[t],
              errs);
        const char *u3[] = {tools[t], "-Z", NULL};
        CHECK(run(NULL, u3) == 2 && strstr(errs, "unknown option '-Z'") && count_char(errs, '\n') == 1, "%s -Z: %s",
              tools[t], errs);
        const char *u4[] = {tools[t], "--help=yes", NULL};
        CHECK(run(NULL, u4) == 2 && strstr(errs, "option '--help' takes no value"), "%s --help=yes: %s", tools[t], errs);
    }
    /* the tool-specific exit codes */
    CHECK(run(NULL, (const char *[]){"lazyingest", "--help", NULL}) == 0 &&
              strstr(out, "exits 2 when some records were skipped") && strstr(out, "4\nwhen --check found problems"),
          "lazyingest --help: its exit codes 2 (records skipped) and 4 (--check)");
    CHECK(run(NULL, (const char *[]){"lazyquery", "--help", NULL}) == 0 && strstr(out, "question could not be answered"),
          "lazyquery --help: exit 2 for a question without an answer");
}

static void test_options(void)
{
    /* a missing value, a bad value, bundled unknown options: named, exit 2 */
    const char *a1[] = {"lazyquery", "-s", store, "-m", model, "--top-k", NULL};
    CHECK(run(NULL, a1) == 2 && strstr(errs, "option '--top-k' needs a value") && count_char(errs, '\n') == 1,
          "--top-k at the end: %s", errs);
    const char *a2[] = {"lazyquery", "-s", store, "-m", model, "-k", NULL};
    CHECK(run(NULL, a2) == 2 && strstr(errs, "option '-k' needs a value"), "-k at the end: %s", errs);
    const char *a3[] = {"lazyquery", "-s", store, "-m", model, "--top-k", "x", "q?", NULL};
    CHECK(run(NULL, a3) == 2 && strstr(errs, "--top-k: expected an integer in [1, 1000], got 'x'") &&
              strstr(errs, "try 'lazyquery --help'") && count_char(errs, '\n') == 1,
          "--top-k x: %s", errs);
    const char *a3b[] = {"lazyquery", "-s", store, "-m", model, "--top-k=0", "q?", NULL};
    CHECK(run(NULL, a3b) == 2 && strstr(errs, "--top-k: expected an integer in [1, 1000], got '0'"), "--top-k=0: %s",
          errs);
    const char *a4[] = {"lazyquery", "-s", store, "-qZ", "q?", NULL};
    CHECK(run(NULL, a4) == 2 && strstr(errs, "unknown option '-Z'"), "-qZ names -Z: %s", errs);
    const char *a5[] = {"lazyquery", "-s", store, "--json=1", "q?", NULL};
    CHECK(run(NULL, a5) == 2 && strstr(errs, "option '--json' takes no value"), "--json=1: %s", errs);
    const char *a6[] = {"lazyquery", "-s", store, "--mode", "fast", "q?", NULL};
    CHECK(run(NULL, a6) == 2 && strstr(errs, "--mode: expected lazy, block, prefix or full, got 'fast'"), "--mode: %s", errs);
    const char *a7[] = {"lazyquery", "-s", store, "--cache-bytes=lots", "q?", NULL};
    CHECK(run(NULL, a7) == 2 && strstr(errs, "--cache-bytes: expected a size"), "--cache-bytes: %s", errs);
    const char *a7b[] = {"lazyquery", "-s", store, "--host-cache-bytes", "-3", "q?", NULL};
    CHECK(run(NULL, a7b) == 2 && strstr(errs, "--host-cache-bytes: expected a size"), "--host-cache-bytes: %s", errs);
    const char *a7c[] = {"lazyquery", "-s", store, "--cache-policy", "fifo", "q?", NULL};
    CHECK(run(NULL, a7c) == 2 && strstr(errs, "--cache-policy: expected lfu or lru, got 'fifo'"), "--cache-policy: %s",
          errs);
    const char *a7d[] = {"lazyquery", "-s", store, "-m", model, "--cache-policy=lru", "--host-cache-bytes=8M", "--json",
                         "-n", "2", "river?", NULL};
    CHECK(run(NULL, a7d) == 0 && strstr(out, "\"tiers\"") && strstr(out, "\"policy\":\"lru\"") &&
              strstr(out, "\"bytes_budget\":8388608"),
          "--cache-policy=lru --host-cache-bytes=8M: the host tier in --json: %s %s", out, errs);
    const char *a7e[] = {"lazyquery", "-s", store, "-m", model, "--host-cache-bytes=1000000G", "--json", "-n", "1",
                         "river?", NULL};
    CHECK(run(NULL, a7e) == 0 && strstr(errs, "note: --host-cache-bytes") && strstr(errs, "using"),
          "a host budget past the machine's memory is clamped with a note: %s", errs);
    const char *a8[] = {"lazygen", "-m", model, "-n", "abc", NULL};
    CHECK(run(NULL, a8) == 2 && strstr(errs, "--max-tokens: expected an integer") && strstr(errs, "'abc'"),
          "lazygen -n abc: %s", errs);
    const char *a9[] = {"lazyingest", "-s", store, "--level=20", corpus, NULL};
    CHECK(run(NULL, a9) == 2 && strstr(errs, "--level: expected an integer in [1, 19], got '20'"), "--level=20: %s", errs);
    const char *a10[] = {"lazyingest", "-s", store, "--kv-dtype", "f64", corpus, NULL};
    CHECK(run(NULL, a10) == 2 && strstr(errs, "--kv-dtype: expected bf16, f32 or fp8, got 'f64'"), "--kv-dtype f64: %s", errs);
    const char *a11[] = {"lazy-mkmodel", "-o", "/dev/null", "--type", "q4", NULL};
    CHECK(run(NULL, a11) == 2 && strstr(errs, "--type: expected f32, f16, bf16 or q8_0, got 'q4'"), "--type q4: %s", errs);
    const char *a12[] = {"lazy-logits", "-m", model, "--pos0", "-1", "--ids", "1", NULL};
    CHECK(run(NULL, a12) == 2 && strstr(errs, "--pos0: expected an integer"), "--pos0 -1: %s", errs);
    const char *a13[] = {"lazyingest", "-s", store, NULL};
    CHECK(run(NULL, a13) == 2 && strstr(errs, "no corpus given") && strstr(errs, "--help"), "no corpus: %s", errs);
    const char *a14[] = {"lazygen", NULL};
    CHECK(run(NULL, a14) == 2 && strstr(errs, "no model given"), "lazygen without -m: %s", errs);
    const char *a15[] = {"lazy-convert", "only-one", NULL};
    CHECK(run(NULL, a15) == 2 && strstr(errs, "need HF_FOLDER and OUT.gguf"), "lazy-convert with one argument: %s", errs);
    const char *a16[] = {"lazyquery", "-s", store, "-m", model, "one", "two", NULL};
    CHECK(run(NULL, a16) == 2 && strstr(errs, "one question per call"), "two questions: %s", errs);

    /* --opt=value and bundled short options: -qn2 is -q -n 2 */
    const char *b1[] = {"lazyquery", "-qn2", "-s", store, "-m", model, "river?", NULL};
    int rc = run(NULL, b1);
    CHECK(rc == 0 && !strstr(out, "Sources:") && count_char(out, '\n') == 1, "-qn2: exit %d: %s %s", rc, out, errs);
    const char *b2[] = {"lazyquery", "--store=", NULL};
    CHECK(run(NULL, b2) == 2, "--store= (empty) refused");
    char sarg[700], marg[700];
    snprintf(sarg, sizeof sarg, "--store=%s", store);
    snprintf(marg, sizeof marg, "--model=%s", model);
    const char *b4[] = {"lazyquery", sarg, marg, "--max-tokens=3", "--top-k=2", "--json", "river?", NULL};
    rc = run(NULL, b4);
    json_error_t je;
    json_t *j = json_loads(out, JSON_DISABLE_EOF_CHECK, &je);
    json_t *tok = json_object_get(j, "tokens");
    CHECK(rc == 0 && j && json_integer_value(json_object_get(tok, "answer")) <= 3 &&
              json_array_size(json_object_get(j, "sources")) <= 2,
          "--store=, --model=, --max-tokens=3, --top-k=2: exit %d: %s %s", rc, out, errs);
    json_decref(j);
    /* the old long names stay: --max-new-tokens (lazyquery), --n-predict (lazygen) */
    const char *b5[] = {"lazyquery", sarg, marg, "--max-new-tokens", "2", "--json", "river?", NULL};
    rc = run(NULL, b5);
    j = json_loads(out, JSON_DISABLE_EOF_CHECK, &je);
    CHECK(rc == 0 && json_integer_value(json_object_get(json_object_get(j, "tokens"), "answer")) <= 2,
          "--max-new-tokens 2: exit %d: %s", rc, errs);
    json_decref(j);
    char ids_a[256], ids_b[256], ids_c[256];
    const char *g1[] = {"lazygen", "-m", model, "-p", "river castle", "--n-predict", "5", "--ids", "-t", "1", NULL};
    rc = run(NULL, g1);
    snprintf(ids_a, sizeof ids_a, "%.250s", out);
    const char *g2[] = {"lazygen", marg, "--prompt=river castle", "-n5", "--ids", "--threads=1", NULL};
    CHECK(run(NULL, g2) == 0, "lazygen with --model=, --prompt=, -n5: %s", errs);
    snprintf(ids_b, sizeof ids_b, "%.250s", out);
    const char *g3[] = {"lazygen", "-m", model, "-p", "-", "--max-tokens", "5", "--ids", "-t1", NULL};
    CHECK(run(lz_test_write_file(dir, "prompt.txt", "river castle"), g3) == 0, "lazygen -p - (standard input): %s", errs);
    snprintf(ids_c, sizeof ids_c, "%.250s", out);
    CHECK(rc == 0 && strstr(ids_a, "prompt:") && strstr(ids_a, "output:") && !strcmp(ids_a, ids_b) &&
              !strcmp(ids_a, ids_c),
          "-n, --n-predict and --max-tokens, -p and -p -, the same ids: '%s' '%s' '%s'", ids_a, ids_b, ids_c);
    /* lazyingest: bundled -qt2, --json; the same store unchanged */
    const char *i1[] = {"lazyingest", "-qt2", "-m", model, "-s", store, "--json", "--batch-tokens=500", corpus, NULL};
    rc = run(NULL, i1);
    CHECK(rc == 0 && strstr(out, "\"unchanged\":12") && !errs[0], "lazyingest -qt2 --json: exit %d: %s %s", rc, out, errs);
    /* lazy-logits: -n, --ids-file - */
    const char *l1[] = {"lazy-logits", "-m", model, "--ids", "1 5 9", "-n", "3", "--no-logits", NULL};
    rc = run(NULL, l1);
    char greedy[256] = "";
    const char *gp = strstr(out, "\"greedy\"");
    if (gp) snprintf(greedy, sizeof greedy, "%.*s", (int)strcspn(gp, "]"), gp);
    const char *l2[] = {"lazy-logits", "-m", model, "--ids-file", "-", "--max-tokens=3", "--no-logits", NULL};
    int rc2 = run(lz_test_write_file(dir, "ids.txt", "1, 5, 9\n"), l2);
    gp = strstr(out, "\"greedy\"");
    CHECK(rc == 0 && rc2 == 0 && greedy[0] && gp && !strncmp(gp, greedy, strlen(greedy)),
          "lazy-logits --ids-file - reads standard input: %s", errs);
    /* lazy-mkmodel: --output= and the --outtype alias */
    char m2[700], oarg[720];
    snprintf(m2, sizeof m2, "%s/m2.gguf", dir);
    snprintf(oarg, sizeof oarg, "--output=%s", m2);
    const char *k1[] = {"lazy-mkmodel", oarg, "--outtype", "bf16", "--dim=32", "--heads=2", "--kv-heads=1", NULL};
    CHECK(run(NULL, k1) == 0 && access(m2, R_OK) == 0, "lazy-mkmodel --output= --outtype: %s", errs);
}

static void test_question_args(void)
{
    /* '--' before a question that starts with '-' */
    const char *a1[] = {"lazyquery", "-s", store, "-m", model, "-n", "2", "--json", "--", "-river?", NULL};
    int rc = run(NULL, a1);
    CHECK(rc == 0 && strstr(out, "\"question\":\"-river?\""), "-- then '-river?': exit %d: %s %s", rc, out, errs);
    const char *a2[] = {"lazyquery", "-s", store, "-m", model, "-n", "2", "--json", "-river?", NULL};
    CHECK(run(NULL, a2) == 2 && strstr(errs, "unknown option '-r'"), "without --, '-river?' is options: %s", errs);
    /* options after the question (permuted) */
    const char *a3[] = {"lazyquery", "castle?", "-s", store, "-m", model, "-n", "2", "--json", NULL};
    rc = run(NULL, a3);
    CHECK(rc == 0 && strstr(out, "\"question\":\"castle?\""), "options after the question: exit %d: %s", rc, errs);
    /* '-': the questions from standard input, one a line */
    const char *qin = lz_test_write_file(dir, "questions.txt", "river?\n\ncastle?\n-apple?\n");
    const char *a4[] = {"lazyquery", "-s", store, "-m", model, "-n", "2", "--json", "-", NULL};
    rc = run(qin, a4);
    CHECK(rc == 0 && count_char(out, '\n') == 3 && strstr(out, "\"question\":\"river?\"") &&
              strstr(out, "\"question\":\"castle?\"") && strstr(out, "\"question\":\"-apple?\""),
          "lazyquery - reads three questions (a blank line skipped): exit %d: %s %s", rc, out, errs);
    const char *a5[] = {"lazyquery", "-s", store, "-m", model, "-n", "2", "-q", "-", NULL};
    rc = run(qin, a5);
    CHECK(rc == 0 && count_char(out, '\n') == 3, "lazyquery -q -: one answer line a question: %d: %s", rc, out);
    /* --questions - reads JSONL from standard input; a question beside it is refused */
    const char *jq = lz_test_write_file(dir, "q.jsonl", "{\"id\": \"a\", \"question\": \"river?\"}\n");
    const char *a6[] = {"lazyquery", "-s", store, "-m", model, "-n", "2", "--questions", "-", NULL};
    rc = run(jq, a6);
    CHECK(rc == 0 && strstr(out, "\"id\":\"a\""), "--questions -: exit %d: %s %s", rc, out, errs);
    const char *a7[] = {"lazyquery", "-s", store, "--questions", "-", "river?", NULL};
    CHECK(run(jq, a7) == 2 && strstr(errs, "give one of them"), "a question and --questions: %s", errs);
    /* a question that gets no answer: exit 2, the others answered */
    const char *qe = lz_test_write_file(dir, "qe.jsonl", "{\"question\": \"river?\"}\n{\"question\": \"\"}\n");
    const char *a8[] = {"lazyquery", "-s", store, "-m", model, "-n", "2", "--questions", qe, NULL};
    rc = run(NULL, a8);
    CHECK(rc == 2 && strstr(out, "\"answer\"") && strstr(errs, "empty"), "an empty question in the file: exit %d: %s",
          rc, errs);
    /* no question at all: a usage error */
    const char *a9[] = {"lazyquery", "-s", store, "-m", model, NULL};
    CHECK(run(lz_test_write_file(dir, "empty.txt", ""), a9) == 2 && strstr(errs, "no question given"), "no question: %s", errs);
}

static void test_missing_store(void)
{
    char none[400], empty[400], inner[500];
    snprintf(none, sizeof none, "%s/no-such-store", dir);
    snprintf(empty, sizeof empty, "%s/not-a-store", dir);
    mkdir(empty, 0777);
    const char *a1[] = {"lazyquery", "--store", none, "-m", model, "river?", NULL};
    int rc = run(NULL, a1);
    CHECK(rc == 2 && strstr(errs, none) && strstr(errs, "no store at") && count_char(errs, '\n') == 1,
          "a store path that does not exist: exit %d: %s", rc, errs);
    struct stat sb;
    CHECK(stat(none, &sb) != 0, "and nothing was created at %s", none);
    const char *a2[] = {"lazyquery", "-s", none, "--no-stats", "-m", model, "river?", NULL};
    CHECK(run(NULL, a2) == 2 && stat(none, &sb) != 0, "--no-stats too: %s", errs);
    const char *a3[] = {"lazyquery", "-s", empty, "-m", model, "river?", NULL};
    rc = run(NULL, a3);
    snprintf(inner, sizeof inner, "%s/meta.sqlite", empty);
    CHECK(rc == 2 && strstr(errs, empty) && access(inner, F_OK) != 0, "a folder that is not a store: exit %d, %s", rc,
          errs);
    char lk[500], kv[500];
    snprintf(lk, sizeof lk, "%s/writer.lock", empty);
    snprintf(kv, sizeof kv, "%s/kv", empty);
    CHECK(access(lk, F_OK) != 0 && access(kv, F_OK) != 0, "and nothing was created inside it");
    /* the default store (./lazystore) when there is none: the same refusal */
    const char *a4[] = {"lazyquery", "-m", model, "river?", NULL};
    char cwd[1024];
    if (getcwd(cwd, sizeof cwd) && chdir(empty) == 0) {
        char rel[sizeof bin];
        memcpy(rel, bin, sizeof bin);
        if (bin[0] != '/') snprintf(bin, sizeof bin, "%.300s/%.200s", cwd, rel);
        rc = run(NULL, a4);
        CHECK(rc == 2 && strstr(errs, "lazystore") && access("lazystore", F_OK) != 0,
              "no ./lazystore: exit %d, nothing created: %s", rc, errs);
        if (chdir(cwd) != 0) CHECK(0, "chdir back");
        memcpy(bin, rel, sizeof bin);
    }
}

static void test_busy_store(void)
{
    char err[512];
    lz_store *w = NULL;
    int held = lz_store_open(store, LZ_STORE_WRITER, &w, err, sizeof err) == 0;
    CHECK(held, "hold the writer lock: %s", err);
    const char *a1[] = {"lazyingest", "-q", "-m", model, "-s", store, corpus, NULL};
    int rc = run(NULL, a1);
    CHECK(rc == 3 && strstr(errs, "another process is writing"), "a run while another writer holds the store: exit %d: %s",
          rc, errs);
    const char *a2[] = {"lazyquery", "-s", store, "-m", model, "-n", "2", "-q", "river?", NULL};
    CHECK(run(NULL, a2) == 0, "lazyquery reads beside the writer: %s", errs);
    if (held) lz_store_close(w);
    CHECK(run(NULL, a1) == 0, "the lock released, the run goes through: %s", errs);
}

static void test_env_tools(void)
{
    /* a malformed switch: refused by name, exit 2, before anything is done */
    char st2[400];
    snprintf(st2, sizeof st2, "%s/envstore", dir);
    const char *a1[] = {"lazyingest", "-q", "-m", model, "-s", st2, corpus, NULL};
    int rc = run_env("LAZY_INGEST_GPU_PASS=2k", NULL, a1);
    CHECK(rc == 2 && strstr(errs, "LAZY_INGEST_GPU_PASS='2k'") && access(st2, F_OK) != 0,
          "LAZY_INGEST_GPU_PASS=2k: exit %d, no store: %s", rc, errs);
    const char *a2[] = {"lazyquery", "-s", store, "-m", model, "river?", NULL};
    CHECK(run_env("LAZY_GPU_GEMV=fast", NULL, a2) == 2 && strstr(errs, "LAZY_GPU_GEMV='fast'"), "LAZY_GPU_GEMV=fast: %s",
          errs);
    const char *a3[] = {"lazygen", "-m", model, "-n", "1", NULL};
    CHECK(run_env("LAZY_GPU_DECODE=soon", NULL, a3) == 2 && strstr(errs, "LAZY_GPU_DECODE='soon'"), "lazygen: %s", errs);
    /* --help still works with a malformed switch */
    const char *a4[] = {"lazyquery", "--help", NULL};
    CHECK(run_env("LAZY_GPU_GEMV=fast", NULL, a4) == 0, "--help with a malformed switch");
    /* retired switches: a warning naming the option that replaced them; the run goes on */
    rc = run_env("LAZY_INGEST_SERIAL=1", NULL, a1);
    CHECK(rc == 0 && strstr(errs, "LAZY_INGEST_SERIAL is no longer read; use lazyingest --serial"),
          "LAZY_INGEST_SERIAL: exit %d: %s", rc, errs);
    /* LAZY_MODEL: the default model of lazyquery and lazy-tokenize */
    char envm[700];
    snprintf(envm, sizeof envm, "LAZY_MODEL=%s", model);
    const char *a5[] = {"lazyquery", "-s", store, "-n", "2", "--json", "river?", NULL};
    CHECK(run_env(envm, NULL, a5) == 0 && strstr(out, "\"answer\""), "LAZY_MODEL as the default model: %s", errs);
    const char *a6[] = {"lazy-tokenize", "river castle", NULL};
    CHECK(run_env(envm, NULL, a6) == 0 && out[0] >= '0' && out[0] <= '9', "lazy-tokenize with LAZY_MODEL: %s", errs);
    CHECK(run_env("LAZY_MODEL=/nonexistent/m.gguf", NULL, a6) == 1 && strstr(errs, "/nonexistent/m.gguf"),
          "LAZY_MODEL to a missing file: %s", errs);
    /* LAZY_F32_WEIGHTS: the same ids either way */
    const char *a7[] = {"lazygen", "-m", model, "-p", "river", "-n", "4", "--ids", "-t", "1", NULL};
    run(NULL, a7);
    char ids[256];
    snprintf(ids, sizeof ids, "%.250s", out);
    CHECK(run_env("LAZY_F32_WEIGHTS=1", NULL, a7) == 0 && !strcmp(out, ids), "LAZY_F32_WEIGHTS=1: the same ids");
    /* the fault injection is not in the shipped lazyingest: no option, and the old variable does nothing */
    char st3[400];
    snprintf(st3, sizeof st3, "%s/refstore", dir);
    const char *f1[] = {"lazyingest", "-q", "-m", model, "-s", st3, "--test-fail-pass", "0", corpus, NULL};
    CHECK(run(NULL, f1) == 2 && strstr(errs, "unknown option '--test-fail-pass'") && access(st3, F_OK) != 0,
          "shipped lazyingest has no --test-fail-pass: %s", errs);
    const char *f2[] = {"lazyingest", "-m", model, "-s", st3, "--json", "-t", "2", corpus, NULL};
    setenv("LAZY_INGEST_REF_PASSES", "200", 1);
    rc = run_env("LAZY_INGEST_REF_FAIL_PASS=0", NULL, f2);
    unsetenv("LAZY_INGEST_REF_PASSES");
    CHECK(rc == 0 && strstr(out, "\"added\":12") && !strstr(errs, "injected") && strstr(errs, "no longer read"),
          "LAZY_INGEST_REF_FAIL_PASS is ignored by the shipped lazyingest (passes on the CPU backend): exit %d: %s %s", rc,
          out, errs);
}

/* ---- the tokenizer command ---- */

/* expected ids of the ggml vocabulary test file opath (" 1 2 3" a line), lines without their lead space */
static char *expected_ids(const char *opath)
{
    size_t len;
    char *s = lz_test_read_file(opath, &len);
    if (!s) return NULL;
    char *o = malloc(len + 1), *w = o;
    for (char *p = s; o && *p; p++) {
        if (*p == ' ' && (p == s || p[-1] == '\n')) continue;
        *w++ = *p;
    }
    if (o) *w = 0;
    free(s);
    return o;
}

static void test_tokenizer_model(void)
{
    /* no fixture needed: the model's own vocabulary, lazy-tokenize = lazygen --tokenize */
    const char *t1[] = {"lazy-tokenize", "-m", model, "river castle apple", NULL};
    int rc = run(NULL, t1);
    char ids[512];
    snprintf(ids, sizeof ids, "%.500s", out);
    const char *t2[] = {"lazygen", "-m", model, "--tokenize", "river castle apple", NULL};
    CHECK(rc == 0 && run(NULL, t2) == 0 && !strcmp(out, ids) && ids[0], "lazy-tokenize = lazygen --tokenize: '%s' '%s'",
          ids, out);
    const char *t3[] = {"lazy-tokenize", "-m", model, "--bos", "river castle apple", NULL};
    CHECK(run(NULL, t3) == 0 && strlen(out) > strlen(ids) && !strcmp(strchr(out, ' ') + 1, ids), "--bos prepends one id: %s",
          out);
    /* decode: the text back */
    ids[strcspn(ids, "\n")] = 0;
    const char *t4[] = {"lazy-tokenize", "-m", model, "--decode", ids, NULL};
    CHECK(run(NULL, t4) == 0 && !strcmp(out, "river castle apple"), "--decode: '%s'", out);
    const char *t5[] = {"lazy-tokenize", "-m", model, "-d", "999999", NULL};
    CHECK(run(NULL, t5) == 2 && strstr(errs, "999999"), "an id outside the vocabulary: %s", errs);
    /* pieces: --lines, --separator, --json; '-' reads standard input */
    const char *in = lz_test_write_file(dir, "lines.txt", "river\ncastle apple\n\nnorth\n");
    const char *t6[] = {"lazy-tokenize", "-m", model, "--lines", "-", NULL};
    CHECK(run(in, t6) == 0 && count_char(out, '\n') == 4, "--lines: one line of ids a line: %s", out);
    char lines[1024];
    snprintf(lines, sizeof lines, "%s", out);
    const char *in2 = lz_test_write_file(dir, "sep.txt", "river@@castle apple@@@@north@@");
    const char *t7[] = {"lazy-tokenize", "-m", model, "--separator=@@", "-", NULL};
    CHECK(run(in2, t7) == 0 && !strcmp(out, lines), "--separator gives the same pieces: %s", out);
    const char *t8[] = {"lazy-tokenize", "-m", model, "--json", "--lines", "-", NULL};
    CHECK(run(in, t8) == 0 && count_char(out, '\n') == 4 && strstr(out, "{\"ids\":[]}"), "--json --lines: %s", out);
    const char *t9[] = {"lazy-tokenize", "-m", model, "--info", NULL};
    CHECK(run(NULL, t9) == 0 && strstr(out, "kind spm, vocab 512"), "--info: %s", out);
    const char *t10[] = {"lazy-tokenize", "-m", model, NULL};
    CHECK(run(NULL, t10) == 2 && strstr(errs, "no text given"), "no text: %s", errs);
    const char *t11[] = {"lazy-tokenize", "-m", corpus, "x", NULL};
    CHECK(run(NULL, t11) == 1 && strstr(errs, "corpus"), "not a vocabulary: exit 1, named: %s", errs);
}

static void test_tokenizer_fixtures(void)
{
    char spm[512], spm_in[512], spm_out[512], l3[512], bpe_in[512], bpe_out[512], hf[512], hfc[512];
    if (!lz_test_fixture("tokenizers/ggml-vocab-llama-spm.gguf", spm, sizeof spm) ||
        !lz_test_fixture("tokenizers/ggml-vocab-llama-spm.gguf.inp", spm_in, sizeof spm_in) ||
        !lz_test_fixture("tokenizers/ggml-vocab-llama-spm.gguf.out", spm_out, sizeof spm_out) ||
        !lz_test_fixture("tokenizers/llama3-vocab.gguf", l3, sizeof l3) ||
        !lz_test_fixture("tokenizers/ggml-vocab-llama-bpe.gguf.inp", bpe_in, sizeof bpe_in) ||
        !lz_test_fixture("tokenizers/ggml-vocab-llama-bpe.gguf.out", bpe_out, sizeof bpe_out) ||
        !lz_test_fixture("tokenizers/llama3.1-tokenizer.json", hf, sizeof hf) ||
        !lz_test_fixture("tokenizers/llama3.1-tokenizer_config.json", hfc, sizeof hfc)) {
        printf("SKIP the tokenizer command on the vocabulary fixtures\n");
        return;
    }
    /* every case of llama.cpp's test files, one run a vocabulary: vocabulary-only GGUFs (SPM and
     * byte-level BPE) and the tokenizer.json */
    const char *sep = "--separator=\\n__ggml_vocab_test__\\n";
    struct {
        const char *vocab, *in, *out, *what;
    } v[] = {{spm, spm_in, spm_out, "Llama-2 SPM, vocabulary-only GGUF"},
             {l3, bpe_in, bpe_out, "Llama-3 BPE, vocabulary-only GGUF"},
             {hf, bpe_in, bpe_out, "Llama-3 BPE, tokenizer.json"}};
    for (int i = 0; i < 3; i++) {
        char *want = expected_ids(v[i].out);
        const char *a[] = {"lazy-tokenize", "-m", v[i].vocab, sep, "-", NULL};
        int rc = run(v[i].in, a);
        CHECK(rc == 0 && want && count_char(out, '\n') == 46 && !strcmp(out, want), "%s: the 46 cases (exit %d): %s",
              v[i].what, rc, errs);
        free(want);
    }
    /* lazygen --tokenize on a vocabulary-only GGUF (it used to need the weights) */
    const char *g1[] = {"lazygen", "-m", l3, "--tokenize", "Hello world", NULL};
    CHECK(run(NULL, g1) == 0 && !strcmp(out, "9906 1917\n"), "lazygen --tokenize, Llama-3 vocabulary: '%s' %s", out, errs);
    const char *g2[] = {"lazygen", "-m", spm, "--tokenize", "Hello world", NULL};
    CHECK(run(NULL, g2) == 0 && !strcmp(out, "15043 3186\n"), "lazygen --tokenize, SPM vocabulary: '%s' %s", out, errs);
    const char *g3[] = {"lazygen", "-m", hf, "--tokenize", "-", NULL};
    CHECK(run(lz_test_write_file(dir, "hello.txt", "Hello world"), g3) == 0 && !strcmp(out, "9906 1917\n"),
          "lazygen --tokenize - with a tokenizer.json: '%s' %s", out, errs);
    /* the tokenizer_config.json beside the tokenizer.json is read (its eos is 128009) */
    const char *i1[] = {"lazy-tokenize", "-m", hf, "--info", "--json", NULL};
    CHECK(run(NULL, i1) == 0 && strstr(out, "\"eos\":128009") && strstr(out, "\"bos\":128000"), "tokenizer.json --info: %s",
          out);
    /* a Hugging Face folder: tokenizer.json (and tokenizer_config.json) inside */
    char folder[400], link1[500], link2[500];
    snprintf(folder, sizeof folder, "%s/hf", dir);
    snprintf(link1, sizeof link1, "%s/tokenizer.json", folder);
    snprintf(link2, sizeof link2, "%s/tokenizer_config.json", folder);
    char abs1[PATH_MAX], abs2[PATH_MAX];
    if (mkdir(folder, 0777) == 0 && realpath(hf, abs1) && realpath(hfc, abs2) && symlink(abs1, link1) == 0 &&
        symlink(abs2, link2) == 0) {
        const char *f1[] = {"lazy-tokenize", "-m", folder, "--special", "<|eot_id|>Hello world", NULL};
        CHECK(run(NULL, f1) == 0 && !strcmp(out, "128009 9906 1917\n"), "a folder, --special: '%s' %s", out, errs);
        const char *f2[] = {"lazy-tokenize", "-m", folder, "<|eot_id|>", NULL};
        CHECK(run(NULL, f2) == 0 && strcmp(out, "128009\n") != 0, "without --special the marker is text: '%s'", out);
    } else {
        CHECK(0, "could not make the folder %s", folder);
    }
    /* round trip through --decode */
    const char *d1[] = {"lazy-tokenize", "-m", l3, "--decode", "9906, 1917", NULL};
    CHECK(run(NULL, d1) == 0 && !strcmp(out, "Hello world"), "--decode: '%s'", out);
}

/* The options of issue #31 on the shared command line: --id-field (lazyingest), --doc and
 * --strict (lazyquery) in --help, a missing or empty value refused (exit 2, one line naming
 * the option), --doc= and --id-field= forms. */
static void test_issue31_options(void)
{
    CHECK(run(NULL, (const char *[]){"lazyingest", "--help", NULL}) == 0 && strstr(out, "--id-field NAME") &&
              strstr(out, "JSON\narray") && strstr(out, "\"context\""),
          "lazyingest --help: --id-field, JSON arrays, context records");
    CHECK(run(NULL, (const char *[]){"lazyquery", "--help", NULL}) == 0 && strstr(out, "--doc ID") &&
              strstr(out, "--strict") && strstr(out, "\"no documents\""),
          "lazyquery --help: --doc, --strict, the no-documents warning");
    const char *a1[] = {"lazyingest", "-s", store, corpus, "--id-field", NULL};
    CHECK(run(NULL, a1) == 2 && strstr(errs, "option '--id-field' needs a value") && count_char(errs, '\n') == 1,
          "--id-field at the end: %s", errs);
    const char *a2[] = {"lazyingest", "-s", store, "--id-field=", corpus, NULL};
    CHECK(run(NULL, a2) == 2 && strstr(errs, "--id-field: expected a field name") && count_char(errs, '\n') == 1,
          "--id-field= (empty): %s", errs);
    const char *a3[] = {"lazyquery", "-s", store, "-m", model, "--doc", NULL};
    CHECK(run(NULL, a3) == 2 && strstr(errs, "option '--doc' needs a value"), "--doc at the end: %s", errs);
    const char *a4[] = {"lazyquery", "-s", store, "-m", model, "--doc=", "q?", NULL};
    CHECK(run(NULL, a4) == 2 && strstr(errs, "--doc: expected a document id") && count_char(errs, '\n') == 1,
          "--doc= (empty): %s", errs);
    const char *a5[] = {"lazyquery", "-s", store, "-m", model, "--strict=1", "q?", NULL};
    CHECK(run(NULL, a5) == 2 && strstr(errs, "option '--strict' takes no value"), "--strict=1: %s", errs);
    const char *a6[] = {"lazyquery", "-s", store, "-m", model, "-n", "2", "--json", "--doc=doc1", "--doc", "doc2",
                        "river?", NULL};
    CHECK(run(NULL, a6) == 0 && strstr(out, "\"id\":\"doc1\"") && strstr(out, "\"id\":\"doc2\"") &&
              strstr(out, "\"id\":\"doc1\"") < strstr(out, "\"id\":\"doc2\""),
          "--doc=ID and --doc ID, in order: %s %s", out, errs);
}

int main(void)
{
    const char *b = getenv("LZ_BIN");
    if (!b) {
        printf("SKIP LZ_BIN not set (run through make test)\n");
        return lz_test_done();
    }
    snprintf(bin, sizeof bin, "%s", b);
    if (!lz_test_tmpdir(dir, sizeof dir)) return 1;
    test_env_parse();
    test_numbers();
    snprintf(model, sizeof model, "%s/m.gguf", dir);
    snprintf(store, sizeof store, "%s/store", dir);
    snprintf(corpus, sizeof corpus, "%s/corpus.jsonl", dir);
    FILE *f = fopen(corpus, "w");
    lz_test_write_word_docs(f, 12, 3, 20, &rng);
    fclose(f);
    if (lz_test_sh("%s/lazy-mkmodel --dim 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 -o %s", bin, model) ||
        lz_test_sh("%s/lazyingest --quiet --model %s --store %s %s", bin, model, store, corpus)) {
        CHECK(0, "could not build the test model and store");
        return lz_test_done();
    }
    test_version_help();
    test_options();
    test_issue31_options();
    test_question_args();
    test_missing_store();
    test_busy_store();
    test_env_tools();
    test_tokenizer_model();
    test_tokenizer_fixtures();
    lz_test_sh("rm -rf %s", dir);
    return lz_test_done();
}
