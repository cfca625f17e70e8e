/* run_tool.h - the tests' way to run a tool as a child process: prog with
 * args (argv[1..], NULL-terminated), standard input from a file (NULL: the
 * test's own), its files capped (a full disk: writes past the cap fail with
 * EFBIG instead of the signal ending it), killed with SIGKILL after a time
 * (a crash mid-way); its standard output and error captured through
 * dir/stdout.txt and dir/stderr.txt into buffers (either may be NULL).
 * Returns the exit status, or 128 + the signal. */
#ifndef LZ_TESTS_RUN_TOOL_H
#define LZ_TESTS_RUN_TOOL_H

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"

typedef struct {
    const char *in_path; /* standard input (NULL: inherited) */
    double kill_after_s; /* > 0: SIGKILL after that many seconds */
    long long file_cap;  /* > 0: files capped at this many bytes */
} lz_test_run_opts;

static inline void lz_test_slurp(const char *path, char *buf, size_t n)
{
    FILE *f;
    if (!buf || n == 0 || !(f = fopen(path, "rb"))) return;
    buf[fread(buf, 1, n - 1, f)] = 0;
    fclose(f);
}

static inline int lz_test_run(const char *dir, const char *prog, const char *const *args, const lz_test_run_opts *o,
                              char *out, size_t outn, char *errbuf, size_t errn)
{
    char op[400], ep[400];
    snprintf(op, sizeof op, "%s/stdout.txt", dir);
    snprintf(ep, sizeof ep, "%s/stderr.txt", dir);
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(op, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o && o->file_cap > 0) {
            struct rlimit rl = {(rlim_t)o->file_cap, (rlim_t)o->file_cap};
            signal(SIGXFSZ, SIG_IGN);
            setrlimit(RLIMIT_FSIZE, &rl);
        }
        dup2(fo, 1);
        dup2(fe, 2);
        if (o && o->in_path) {
            int fi = open(o->in_path, O_RDONLY);
            dup2(fi, 0);
        }
        const char *argv[64];
        int n = 0;
        argv[n++] = prog;
        for (int i = 0; args[i] && n < 63; i++) argv[n++] = args[i];
        argv[n] = NULL;
        execv(prog, (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    if (o && o->kill_after_s > 0) {
        const double t0 = lz_now_s();
        for (;;) {
            if (waitpid(pid, &status, WNOHANG) == pid) break;
            if (lz_now_s() - t0 >= o->kill_after_s) {
                kill(pid, SIGKILL);
                waitpid(pid, &status, 0);
                break;
            }
            usleep(500);
        }
    } else {
        waitpid(pid, &status, 0);
    }
    lz_test_slurp(op, out, outn);
    lz_test_slurp(ep, errbuf, errn);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

#endif /* LZ_TESTS_RUN_TOOL_H */
