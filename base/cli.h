/* cli.h - what every command-line tool shares: exit codes, --version, the
 * option parser's error messages (getopt_long: bundled short options,
 * --opt=value, --opt value, '--' ends the options), strict number parsing
 * that names the option, the exit-status paragraph every --help ends with,
 * and reading a whole file or '-' (standard input).
 *
 * A tool calls lz_cli_init("name") first; every message then starts with
 * "name: ". A usage error is one line naming the option or value, then
 * "try 'name --help'", and the tool exits LZ_EXIT_USAGE.
 */
#ifndef LZ_CLI_H
#define LZ_CLI_H

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exit codes of every tool. */
enum {
    LZ_EXIT_OK = 0,      /* success */
    LZ_EXIT_RUNTIME = 1, /* runtime error: a model or file that cannot be read, I/O, out of memory, ... */
    LZ_EXIT_USAGE = 2,   /* usage or bad input: unknown option, bad value, missing argument, not a store */
    LZ_EXIT_BUSY = 3     /* the store is held by another writer (LZ_EBUSY) */
};

/* The exit-status paragraph every --help ends with (a tool lists its own
 * extra meanings just before it). */
#define LZ_CLI_EXIT_HELP                                                                                  \
    "Exit status: 0 success; 1 runtime error (unreadable model or file, I/O, out of memory);\n"           \
    "2 usage or bad input (unknown option, bad value, missing argument, not a store);\n"                  \
    "3 the store is held by another writer.\n"

/* The options every tool takes, for --help. */
#define LZ_CLI_COMMON_HELP                                                                                \
    "  -h, --help             this text\n"                                                                \
    "  -V, --version          the version (git describe of the build) and exit\n"

/* Long options every tool shares, with the same letter and meaning in each
 * (--help/-h and --version/-V always; the others where a tool has them). */
/* Table entries for getopt_long: an option that takes a value, one that does not. */
#define LZ_OPT_ARG(name, val) { name, required_argument, NULL, val }
#define LZ_OPT_FLAG(name, val) { name, no_argument, NULL, val }
#define LZ_CLI_OPT_HELP LZ_OPT_FLAG("help", 'h'), LZ_OPT_FLAG("version", 'V')
#define LZ_CLI_OPT_MODEL LZ_OPT_ARG("model", 'm')
#define LZ_CLI_OPT_STORE LZ_OPT_ARG("store", 's')
#define LZ_CLI_OPT_THREADS LZ_OPT_ARG("threads", 't')
#define LZ_CLI_OPT_QUIET LZ_OPT_FLAG("quiet", 'q')
#define LZ_CLI_OPT_OUTPUT LZ_OPT_ARG("output", 'o')
#define LZ_CLI_OPT_MAX_TOKENS LZ_OPT_ARG("max-tokens", 'n')

/* Sets the program name used in messages. */
void lz_cli_init(const char *prog);
const char *lz_cli_prog(void);

/* The build's version: the Makefile's LZ_VERSION (git describe --always
 * --dirty), "unknown" when built without it. */
const char *lz_cli_version_string(void);
/* Prints "<prog> (lazy) <version>" on standard output. */
void lz_cli_version(void);

/* Prints "<prog>: <message>; try '<prog> --help'" on stderr and returns
 * LZ_EXIT_USAGE. */
int lz_cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints "<prog>: <message>" on stderr and returns LZ_EXIT_RUNTIME. */
int lz_cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* getopt_long with the errors reported here: returns the next option as
 * getopt_long does (-1 at the end; positional arguments are then
 * argv[optind..argc), permuted to the end), or '?' after printing a usage
 * line naming the unknown option, the missing value or the value given to
 * an option that takes none (the caller returns LZ_EXIT_USAGE). shortopts
 * without a leading ':' (added here). */
int lz_cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts);

/* Strict numbers: the whole string, in [lo, hi]. On error print "<prog>:
 * <opt>: expected an integer in [lo, hi], got 's'; try ..." and return -1. */
int lz_cli_long(const char *opt, const char *s, long lo, long hi, long *out);
int lz_cli_int(const char *opt, const char *s, int lo, int hi, int *out);
int lz_cli_double(const char *opt, const char *s, double lo, double hi, double *out);
/* A byte count: a number with an optional K, M or G (binary) and B: 512M, 2G, 1048576. */
int lz_cli_size(const char *opt, const char *s, size_t *out);
/* One of names (NULL-terminated): its index in *out; else "<opt>: expected
 * a, b or c, got 's'" and -1. */
int lz_cli_choice(const char *opt, const char *s, const char *const *names, int *out);

/* A list of GPU device indices (--gpus): "all" (0 .. n_visible-1) or
 * comma-separated indices and ranges ("0,2", "0-3", "1,1": an index may
 * repeat, which runs two engines on one device). At most max entries, each
 * in [0, n_visible) when n_visible > 0 (unchecked when n_visible is 0: no
 * CUDA runtime to ask). Returns the count (>= 1), or -1 after a usage
 * message naming opt. */
int lz_cli_gpu_list(const char *opt, const char *s, int n_visible, int *devs, int max);

/* The whole of file path, or of standard input when path is "-", NUL-
 * terminated (malloc'd; *len bytes, may be NULL). NULL with err set
 * ("<path>: <why>") when it cannot be read. */
char *lz_cli_read_file(const char *path, size_t *len, char *err, size_t errlen);

/* The environment switches (base/env.h): 0 when they are all well-formed;
 * else prints the first bad one and returns LZ_EXIT_USAGE. Warns (once)
 * about retired switches and what replaced them. */
int lz_cli_check_env(void);

#ifdef __cplusplus
}
#endif
#endif /* LZ_CLI_H */
