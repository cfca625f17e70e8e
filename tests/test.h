/* test.h - a tiny test harness: CHECK macros that count passes and failures,
 * a closing 'N passed, N failed' line, and helpers for fixtures and temporary
 * directories. A test program exits non-zero when anything failed. */
#ifndef LZ_TEST_H
#define LZ_TEST_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int lz_test_passed, lz_test_failed;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (cond) {                                                            \
            lz_test_passed++;                                                  \
        } else {                                                               \
            lz_test_failed++;                                                  \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);    \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

/* |got - want| <= atol + rtol * |want| */
#define CHECK_CLOSE(got, want, atol, rtol)                                     \
    CHECK(fabs((double)(got) - (double)(want)) <=                              \
              (atol) + (rtol) * fabs((double)(want)),                          \
          "got %.9g want %.9g", (double)(got), (double)(want))

/* Sleeps ms milliseconds (polling loops of the tests). */
static inline void lz_test_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static inline int lz_test_done(void)
{
    printf("%d passed, %d failed\n", lz_test_passed, lz_test_failed);
    return lz_test_failed ? 1 : 0;
}

/* Path of a shared fixture (../shared/fixtures/<rel>) or NULL, after printing
 * a SKIP line, when it is absent. LZ_FIXTURES overrides the folder. */
static inline const char *lz_test_fixture(const char *rel, char *buf, size_t n)
{
    const char *dir = getenv("LZ_FIXTURES");
    snprintf(buf, n, "%s/%s", dir ? dir : "../shared/fixtures", rel);
    if (access(buf, R_OK) != 0) {
        printf("SKIP fixture %s not found\n", buf);
        return NULL;
    }
    return buf;
}

/* Creates a fresh temporary directory (mkdtemp) and returns its path in buf. */
static inline const char *lz_test_tmpdir(char *buf, size_t n)
{
    const char *t = getenv("TMPDIR");
    snprintf(buf, n, "%s/lztest.XXXXXX", t ? t : "/tmp");
    return mkdtemp(buf);
}

/* Writes text to dir/name and returns that path (one of 8 rotating static
 * buffers, so a few can be held at once); a file that cannot be written is a
 * failed check. */
static inline const char *lz_test_write_file(const char *dir, const char *name, const char *text)
{
    static char paths[8][600];
    static int k;
    char *p = paths[k++ % 8];
    snprintf(p, sizeof paths[0], "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL, "cannot write %s", p);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return p;
}

/* max |a - b| / max |b| over n values (relative difference of two outputs). */
static inline double lz_test_rel_diff(const float *a, const float *b, int n)
{
    double d = 0, r = 0;
    for (int i = 0; i < n; i++) { d = fmax(d, fabs(a[i] - b[i])); r = fmax(r, fabs(b[i])); }
    return d / fmax(r, 1e-30);
}

/* Whole file, NUL-terminated (malloc'd), *len bytes; NULL when unreadable. */
static inline char *lz_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? (char *)malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) { free(s); s = NULL; }
    fclose(f);
    if (s) { s[n] = '\0'; *len = (size_t)n; }
    return s;
}

/* The tests' repeatable random data: one xorshift64 step of *state (a
 * per-file seed), returning the new state. */
static inline uint64_t lz_test_xorshift(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return *state = x;
}
/* A draw in [0, 1) with 53 random bits. */
static inline double lz_test_u01(uint64_t *state) { return (double)(lz_test_xorshift(state) >> 11) / 9007199254740992.0; }
/* A draw in [0, n). */
static inline int lz_test_irand(unsigned long long *state, int n)
{
    uint64_t x = *state;
    const int r = (int)(lz_test_xorshift(&x) % (uint64_t)n);
    *state = x;
    return r;
}

/* Writes n JSONL records {"id": "doc<i>", "title": "Title <i> <word>", "text": ...} of
 * min_words + [0, spread) words from a 16-word list, drawn from *state. */
static inline void lz_test_write_word_docs(FILE *f, int n, int min_words, int spread, unsigned long long *state)
{
    static const char *words[] = {"river", "castle", "apple", "north", "engine", "violet", "market", "signal",
                                  "harbor", "garden", "copper", "winter", "lantern", "meadow", "falcon", "quartz"};
    for (int i = 0; i < n; i++) {
        fprintf(f, "{\"id\": \"doc%d\", \"title\": \"Title %d %s\", \"text\": \"", i, i, words[i % 16]);
        int len = min_words + lz_test_irand(state, spread);
        for (int w = 0; w < len; w++) fprintf(f, "%s%s", w ? " " : "", words[lz_test_irand(state, 16)]);
        fprintf(f, ".\"}\n");
    }
}

/* Runs a shell command built like printf; returns its exit status (128 when
 * it did not exit normally). */
static inline int lz_test_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int lz_test_sh(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

#endif /* LZ_TEST_H */
