/* build_store.c - the store of a dataset (build_store.h): the corpus file
 * written with jansson, lazyingest started with fork / execv (no shell: ids
 * and paths travel as they are), its summary captured from its standard
 * output. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "eval/build_store.h"

int lz_eval_write_corpus(const lz_eval_passages *t, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "w");
    if (!f) return lz_fail(err, errlen, -1, "%s: %s", path, strerror(errno));
    int rc = 0;
    for (int i = 0; i < lz_eval_passages_count(t) && !rc; i++) {
        const lz_eval_passage *p = lz_eval_passages_get(t, i);
        json_t *o = json_pack("{s:s, s:s, s:s}", "id", p->id, "title", p->title, "text", p->text);
        char *line = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        if (!line || fprintf(f, "%s\n", line) < 0) rc = lz_fail(err, errlen, -1, "%s: cannot write", path);
        free(line);
        json_decref(o);
    }
    if (fclose(f) && !rc) rc = lz_fail(err, errlen, -1, "%s: %s", path, strerror(errno));
    return rc;
}

void lz_eval_find_lazyingest(char *buf, size_t n)
{
    const char *bin = getenv("LZ_BIN");
    if (bin && *bin) { snprintf(buf, n, "%s/lazyingest", bin); return; }
    char self[4096];
    const ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k > 0) {
        self[k] = 0;
        char *slash = strrchr(self, '/');
        if (slash) {
            *slash = 0;
            snprintf(buf, n, "%s/lazyingest", self);
            if (access(buf, X_OK) == 0) return;
        }
    }
    snprintf(buf, n, "lazyingest");
}

/* appends arg to the command text, quoted for a POSIX shell when it needs it */
static void quote_into(char *cmd, size_t n, const char *arg)
{
    size_t len = strlen(cmd);
    if (len && len + 1 < n) { cmd[len++] = ' '; cmd[len] = 0; }
    if (arg[0] && strspn(arg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_./=:,+") == strlen(arg)) {
        snprintf(cmd + len, n - len, "%s", arg);
        return;
    }
    size_t o = len;
    if (o + 1 < n) cmd[o++] = '\'';
    for (const char *p = arg; *p && o + 5 < n; p++) {
        if (*p == '\'') { memcpy(cmd + o, "'\\''", 4); o += 4; }
        else cmd[o++] = *p;
    }
    if (o + 1 < n) cmd[o++] = '\'';
    cmd[o < n ? o : n - 1] = 0;
}

int lz_eval_run_ingest(const lz_eval_ingest_opts *o, lz_eval_ingest_result *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    const char *argv[64 + 16];
    char threads[32];
    int n = 0;
    argv[n++] = o->program;
    argv[n++] = "--json";
    argv[n++] = "--model";
    argv[n++] = o->model;
    argv[n++] = "--store";
    argv[n++] = o->store;
    if (o->threads > 0) {
        snprintf(threads, sizeof threads, "%d", o->threads);
        argv[n++] = "--threads";
        argv[n++] = threads;
    }
    if (o->gpu) argv[n++] = "--gpu";
    for (int i = 0; i < o->n_extra && i < 64; i++) argv[n++] = o->extra[i];
    argv[n++] = "--";
    argv[n++] = o->corpus;
    argv[n] = NULL;
    for (int i = 0; i < n; i++) quote_into(r->command, sizeof r->command, argv[i]);
    fflush(NULL);
    const double t0 = lz_now_s();
    const pid_t pid = fork();
    if (pid < 0) return lz_fail(err, errlen, -1, "cannot start %s: %s", o->program, strerror(errno));
    if (pid == 0) {
        if (o->summary_path) {
            const int fd = open(o->summary_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd >= 0) { dup2(fd, 1); close(fd); }
        }
        execvp(o->program, (char *const *)argv);
        fprintf(stderr, "lazyeval: cannot run %s: %s (build it with 'make', or set LZ_BIN to its folder)\n",
                o->program, strerror(errno));
        _exit(127);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return lz_fail(err, errlen, -1, "waiting for %s: %s", o->program, strerror(errno));
    r->seconds = lz_now_s() - t0;
    if (!WIFEXITED(status))
        return lz_fail(err, errlen, -1, "%s was killed by signal %d", o->program, WTERMSIG(status));
    r->exit_status = WEXITSTATUS(status);
    if (r->exit_status == 0 || r->exit_status == 2) return 0;
    static const char *const why[] = {"", "a runtime error", "bad input", "the store is held by another writer"};
    return lz_fail(err, errlen, -1, "%s exited %d (%s): the store was not built", o->program, r->exit_status,
                   r->exit_status == 127 ? "could not be run" : r->exit_status < 4 ? why[r->exit_status] : "failed");
}
