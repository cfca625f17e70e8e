/* test_slurm.c - the Slurm job array of tools/slurm/submit.sh on a one-node
 * cluster this test starts itself (tests/slurm/cluster.sh: munged, slurmctld
 * and slurmd from Debian on 127.0.0.1, every file in a temporary folder, as
 * the current user): 3 tasks, one per shard of the demo corpus (shipped
 * model), each lazyingest --shard I/3; task 1, slowed by a pause after each
 * small batch (the test build's --test-pause-ms), is requeued (killed) once
 * it has committed some documents and leaves its shard incomplete; Slurm runs
 * it again and it resumes (what was committed is unchanged, the rest added);
 * the dependent check job then finds the whole set clean (exit 0, every
 * document once, 116), and the set answers a demo question. Prints SKIP and
 * passes where Slurm or munge is not installed or cannot start (no root for
 * munge, no free port, ...). */
#include <stdarg.h>
#include <sys/stat.h>
#include <time.h>

#include "store/store.h"
#include "tests/shards_test.h"

static char dir[256], cluster[600], bin[512], store[600], logs[600];
static const char *model = "models/default.gguf";
static int cluster_up;

/* A command's first output line into out (NUL-terminated, no newline); its exit status. */
static int line_of(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int line_of(char *out, size_t n, const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    out[0] = 0;
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    if (fgets(out, (int)n, p)) out[strcspn(out, "\n")] = 0;
    char rest[512];
    while (fgets(rest, sizeof rest, p)) {}
    int rc = pclose(p);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

/* A field of `scontrol show job ID` (JobState, Restarts, ExitCode, ...) into out; "" when absent. */
static void job_field(const char *id, const char *field, char *out, size_t n)
{
    line_of(out, n, "scontrol show job %s 2>/dev/null | tr ' ' '\\n' | sed -n 's/^%s=//p' | head -n 1", id, field);
}

static void stop_cluster(void)
{
    if (cluster_up) lz_test_sh("sh tests/slurm/cluster.sh stop %s", cluster);
    cluster_up = 0;
}

/* Waits (at most limit_s) until job id is in one of the states (a '|' list); its last state in out. */
static int wait_state(const char *id, const char *states, double limit_s, char *out, size_t n)
{
    const double t0 = lz_now_s();
    while (lz_now_s() - t0 < limit_s) {
        job_field(id, "JobState", out, n);
        char want[256];
        snprintf(want, sizeof want, "|%s|", states);
        char got[80];
        snprintf(got, sizeof got, "|%s|", out);
        if (out[0] && strstr(want, got)) return 1;
        lz_test_sleep_ms(100);
    }
    return 0;
}

int main(void)
{
    const char *b = getenv("LZ_BIN");
    if (!b) { printf("SKIP LZ_BIN not set (run through make test)\n"); return lz_test_done(); }
    if (access(model, R_OK) != 0) { printf("SKIP %s not found\n", model); return lz_test_done(); }
    char hooks[700], abs_hooks[4096];
    snprintf(hooks, sizeof hooks, "%s/../tests/lazyingest-hooks", b);
    if (!realpath(hooks, abs_hooks)) { printf("SKIP %s not built (make tests)\n", hooks); return lz_test_done(); }
    if (!lz_test_tmpdir(dir, sizeof dir)) return 1;
    chmod(dir, 0755); /* munged wants every folder above its socket searchable by all */
    snprintf(cluster, sizeof cluster, "%s/slurm", dir);
    const double t0 = lz_now_s();
    char out[4096];
    int rc = lz_test_sh("sh tests/slurm/cluster.sh start %s > %s/cluster.log 2>&1", cluster, dir);
    char env[700];
    snprintf(env, sizeof env, "%s/env", cluster);
    size_t len;
    char *conf = lz_test_read_file(env, &len);
    if (rc != 0 || !conf || strncmp(conf, "SLURM_CONF=", 11)) { /* cluster.sh said why on its SKIP line */
        line_of(out, sizeof out, "grep -m1 '^SKIP' %s/cluster.log", dir);
        printf("%s\n", out[0] ? out : "SKIP slurm: the test cluster did not start");
        lz_test_sh("sed 's/^/  /' %s/cluster.log | tail -n 8", dir);
        lz_test_sh("sh tests/slurm/cluster.sh stop %s; rm -rf %s", cluster, dir);
        free(conf);
        return lz_test_done();
    }
    cluster_up = 1;
    atexit(stop_cluster);
    conf[strcspn(conf, "\n")] = 0;
    setenv("SLURM_CONF", conf + 11, 1);
    free(conf);
    printf("cluster: up in %.2f s\n", lz_now_s() - t0);

    /* the tasks' lazyingest: the test build, slowed after each batch so that one can be killed mid-way */
    snprintf(bin, sizeof bin, "%s/bin", dir);
    snprintf(store, sizeof store, "%s/set", dir);
    snprintf(logs, sizeof logs, "%s/logs", dir);
    mkdir(bin, 0777);
    lz_test_sh("ln -s %s %s/lazyingest", abs_hooks, bin);
    const double t1 = lz_now_s();
    rc = line_of(out, sizeof out, "sh tools/slurm/submit.sh -n 3 -s %s -m %s --bin %s --logs %s --ingest-args "
                 "'--quiet -t 1 --batch-tokens 400 --test-pause-ms 100' datasets/demo/corpus.jsonl 2>&1", store, model,
                 bin, logs);
    char array[64] = "", check[64] = "";
    CHECK(rc == 0 && sscanf(out, "array %63s check %63s", array, check) == 2, "submit: exit %d: %s", rc, out);
    if (!array[0] || !check[0]) return lz_test_done();

    /* task 1 requeued once it has committed some documents: killed, its shard incomplete */
    char task1[96], shard1[700], state[80];
    snprintf(task1, sizeof task1, "%s_1", array);
    snprintf(shard1, sizeof shard1, "%s/shard-0001", store);
    int64_t rows = -1;
    while (lz_now_s() - t1 < 120 && (rows = lz_test_rows_of(shard1)) <= 0) lz_test_sleep_ms(20);
    CHECK(rows > 0, "task 1 committed nothing within 120 s");
    CHECK(line_of(out, sizeof out, "scontrol requeue %s 2>&1", task1) == 0, "requeue %s: %s", task1, out);
    CHECK(wait_state(task1, "PENDING", 60, state, sizeof state), "task 1 after the requeue: %s", state);
    /* the killed run: some of the shard's documents, its run left 'running' */
    lz_store *s;
    char err[1024];
    int64_t killed_rows = -1;
    lz_meta_run_info run = { 0 };
    if (lz_store_open(shard1, LZ_STORE_RDONLY, &s, err, sizeof err) == 0) {
        lz_store_doc_count(s, &killed_rows, err, sizeof err);
        lz_meta_run_last(test_store_meta(s), &run, err, sizeof err);
        lz_store_close(s);
    }
    CHECK(killed_rows > 0 && !strcmp(run.status, "running"), "after the kill: %lld rows, last run '%s'",
          (long long)killed_rows, run.status);
    /* resumed now rather than after Slurm's requeue delay */
    for (int i = 0; i < 20; i++) {
        if (line_of(out, sizeof out, "scontrol update jobid=%s StartTime=now 2>&1", task1) == 0) break;
        lz_test_sleep_ms(100);
    }

    /* the check job, after every task: clean */
    CHECK(wait_state(check, "COMPLETED|FAILED|CANCELLED|TIMEOUT", 180, state, sizeof state), "check job: %s", state);
    char code[32], restarts[32], t1state[32];
    job_field(check, "ExitCode", code, sizeof code);
    job_field(task1, "Restarts", restarts, sizeof restarts);
    job_field(task1, "JobState", t1state, sizeof t1state);
    CHECK(!strcmp(state, "COMPLETED") && !strcmp(code, "0:0"), "check job: %s, exit %s", state, code);
    CHECK(!strcmp(restarts, "1") && !strcmp(t1state, "COMPLETED"), "task 1: %s after %s restarts", t1state, restarts);
    char path[800];
    snprintf(path, sizeof path, "%s/check-%s.out", logs, check);
    char *log = lz_test_read_file(path, &len);
    CHECK(log && strstr(log, "116 documents, 116 ok, 0 problems"), "the check's log %s:\n%s", path, log ? log : "(none)");
    free(log);
    snprintf(path, sizeof path, "%s/ingest-%s_1.out", logs, array);
    log = lz_test_read_file(path, &len);
    int runs = 0;
    for (const char *p = log; p && (p = strstr(p, "lazyingest task: shard 1/3")); p++) runs++;
    CHECK(runs == 2, "task 1's log shows %d runs:\n%s", runs, log ? log : "(none)");
    free(log);
    /* the resumed run: the killed one marked aborted, the rows it had committed unchanged */
    if (lz_store_open(shard1, LZ_STORE_RDONLY, &s, err, sizeof err) == 0) {
        lz_meta_run_info last;
        lz_meta_run_last(test_store_meta(s), &last, err, sizeof err);
        CHECK(!strcmp(last.status, "ok") && last.id == run.id + 1, "shard 1's last run: %lld '%s'", (long long)last.id,
              last.status);
        lz_store_close(s);
    }
    /* the set as one store: every document, and an answer */
    rc = line_of(out, sizeof out, "%s/lazyingest --check -s %s 2>&1 | grep 'check:'", b, store);
    CHECK(strstr(out, "116 documents, 116 ok, 0 problems"), "check: %s", out);
    rc = line_of(out, sizeof out, "%s/lazyquery -m %s -s %s --top-k 3 -n 16 --json 'In which industry does Droex Foods "
                 "operate?' | sed -n 's/.*\"answer\":\"\\([^\"]*\\)\".*/\\1/p'", b, model, store);
    CHECK(!strcmp(out, "logistics"), "the set's answer: '%s'", out);
    printf("slurm: 3 tasks, task 1 killed with %lld documents committed and resumed, check clean: %.2f s (cluster "
           "included: %.2f s)\n", (long long)killed_rows, lz_now_s() - t1, lz_now_s() - t0);
    stop_cluster();
    lz_test_sh("rm -rf %s", dir);
    return lz_test_done();
}
