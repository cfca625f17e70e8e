/* cli.c - see cli.h. */
#include "base/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/env.h"

#ifndef LZ_VERSION
#define LZ_VERSION "unknown"
#endif

static const char *prog_name = "lazy";

void lz_cli_init(const char *prog) { prog_name = prog && *prog ? prog : "lazy"; }
const char *lz_cli_prog(void) { return prog_name; }

const char *lz_cli_version_string(void) { return LZ_VERSION[0] ? LZ_VERSION : "unknown"; }

void lz_cli_version(void) { printf("%s (lazy) %s\n", prog_name, lz_cli_version_string()); }

int lz_cli_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog_name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "; try '%s --help'\n", prog_name);
    va_end(ap);
    return LZ_EXIT_USAGE;
}

int lz_cli_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog_name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return LZ_EXIT_RUNTIME;
}

int lz_cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts)
{
    char opts[256];
    snprintf(opts, sizeof opts, "%s%s", shortopts[0] == ':' ? "" : ":", shortopts);
    opterr = 0;
    const int c = getopt_long(argc, argv, opts, longopts, NULL);
    if (c != '?' && c != ':') return c;
    /* what getopt stopped at: a long option is the argument before optind (getopt moved past it),
     * named up to its '='; a short one is optopt (it may sit inside a bundle such as -qx, where
     * optind has not moved). optopt is 0 for an unknown long option, the option's value for a
     * long option given a value it does not take, the character for an unknown short option. */
    const char *tok = optind > 0 && optind <= argc ? argv[optind - 1] : "";
    const int tok_long = tok && !strncmp(tok, "--", 2) && tok[2];
    const int known = optopt >= 256 || (optopt > 0 && optopt != ':' && strchr(shortopts, optopt));
    int is_long = c == ':' ? tok_long : optopt == 0 || known;
    char name[128];
    if (is_long && tok_long) {
        size_t n = strcspn(tok, "=");
        snprintf(name, sizeof name, "%.*s", (int)(n < 120 ? n : 120), tok);
    } else {
        snprintf(name, sizeof name, "-%c", optopt > 32 && optopt < 127 ? optopt : '?');
    }
    if (c == ':') lz_cli_usage("option '%s' needs a value", name);
    else if (optopt && known) lz_cli_usage("option '%s' takes no value", name);
    else if (is_long && tok_long) { /* an abbreviation of more than one option? */
        char cand[256] = "";
        size_t k = 0, len = strlen(name + 2);
        int hits = 0;
        for (const struct option *lo = longopts; lo && lo->name; lo++)
            if (!strncmp(lo->name, name + 2, len) && k < sizeof cand)
                k += (size_t)snprintf(cand + k, sizeof cand - k, "%s--%s", hits++ ? ", " : "", lo->name);
        if (hits > 1) lz_cli_usage("ambiguous option '%s' (%s)", name, cand);
        else lz_cli_usage("unknown option '%s'", name);
    } else lz_cli_usage("unknown option '%s'", name);
    return '?';
}

int lz_cli_long(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s ? s : "", &end, 10);
    if (!s || errno || end == s || *end || v < lo || v > hi) {
        lz_cli_usage("%s: expected an integer in [%ld, %ld], got '%s'", opt, lo, hi, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

int lz_cli_int(const char *opt, const char *s, int lo, int hi, int *out)
{
    long v;
    if (lz_cli_long(opt, s, lo, hi, &v)) return -1;
    *out = (int)v;
    return 0;
}

/* after lz_cli_usage's message: the -1 of this file's parsers */
static int gpu_list_bad(int usage_rc)
{
    (void)usage_rc;
    return -1;
}

int lz_cli_gpu_list(const char *opt, const char *s, int n_visible, int *devs, int max)
{
    if (!s || !*s) return gpu_list_bad(lz_cli_usage("%s: expected 'all' or GPU indices like 0,1 or 0-3, got ''", opt));
    if (!strcmp(s, "all")) {
        if (n_visible <= 0) return gpu_list_bad(lz_cli_usage("%s all: no CUDA device is visible", opt));
        if (n_visible > max) return gpu_list_bad(lz_cli_usage("%s all: %d devices, at most %d engines", opt, n_visible, max));
        for (int i = 0; i < n_visible; i++) devs[i] = i;
        return n_visible;
    }
    int n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        long a = strtol(p, &end, 10), b;
        if (end == p || errno || a < 0 || a > 4095 || (*p < '0' || *p > '9'))
            return gpu_list_bad(lz_cli_usage("%s: expected 'all' or GPU indices like 0,1 or 0-3, got '%s'", opt, s));
        b = a;
        p = end;
        if (*p == '-') {
            const char *q = p + 1;
            b = strtol(q, &end, 10);
            if (end == q || errno || *q < '0' || *q > '9' || b < a || b > 4095)
                return gpu_list_bad(lz_cli_usage("%s: bad range in '%s' (expected A-B with A <= B)", opt, s));
            p = end;
        }
        for (long d = a; d <= b; d++) {
            if (n_visible > 0 && d >= n_visible)
                return gpu_list_bad(lz_cli_usage("%s: GPU %ld does not exist (%d visible: 0..%d)", opt, d, n_visible, n_visible - 1));
            if (n >= max) return gpu_list_bad(lz_cli_usage("%s: more than %d engines in '%s'", opt, max, s));
            devs[n++] = (int)d;
        }
        if (!*p) return n;
        if (*p != ',') return gpu_list_bad(lz_cli_usage("%s: expected 'all' or GPU indices like 0,1 or 0-3, got '%s'", opt, s));
        p++;
    }
}

int lz_cli_double(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s ? s : "", &end);
    if (!s || errno || end == s || *end || !(v >= lo && v <= hi)) {
        lz_cli_usage("%s: expected a number in [%g, %g], got '%s'", opt, lo, hi, s ? s : "");
        return -1;
    }
    *out = v;
    return 0;
}

int lz_cli_size(const char *opt, const char *s, size_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s ? s : "", &end);
    int ok = s && !errno && end != s && v >= 0;
    double mul = 1;
    if (ok) {
        if (*end == 'k' || *end == 'K') mul = 1024, end++;
        else if (*end == 'm' || *end == 'M') mul = 1024.0 * 1024, end++;
        else if (*end == 'g' || *end == 'G') mul = 1024.0 * 1024 * 1024, end++;
        if (*end == 'B' || *end == 'b') end++;
        ok = !*end && v * mul < 1.8e19;
    }
    if (!ok) {
        lz_cli_usage("%s: expected a size such as 512M or 2G, got '%s'", opt, s ? s : "");
        return -1;
    }
    *out = (size_t)(v * mul);
    return 0;
}

int lz_cli_choice(const char *opt, const char *s, const char *const *names, int *out)
{
    int n = 0;
    for (; names[n]; n++)
        if (s && !strcmp(s, names[n])) {
            *out = n;
            return 0;
        }
    char list[512];
    size_t k = 0;
    list[0] = 0;
    for (int i = 0; i < n && k < sizeof list; i++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
    lz_cli_usage("%s: expected %s, got '%s'", opt, list, s ? s : "");
    return -1;
}

char *lz_cli_read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    const int in = !strcmp(path, "-");
    FILE *f = in ? stdin : fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (cap - n < 2) {
            char *p = cap < ((size_t)1 << 40) ? realloc(buf, cap * 2) : NULL;
            if (!p) { free(buf); buf = NULL; break; }
            buf = p, cap *= 2;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int rerr = ferror(f);
    if (!in) fclose(f);
    if (!buf || rerr) {
        snprintf(err, errlen, "%s: %s", in ? "standard input" : path, buf ? "read error" : "out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int lz_cli_check_env(void)
{
    const lz_env *e = lz_env_get();
    static int warned;
    if (e->retired[0] && !warned) {
        warned = 1;
        fprintf(stderr, "%s: warning: %s\n", prog_name, e->retired);
    }
    if (e->error[0]) {
        fprintf(stderr, "%s: %s (see --help)\n", prog_name, e->error);
        return LZ_EXIT_USAGE;
    }
    return 0;
}
