/* test.h - a tiny test harness: CHECK macros that count passes and failures,
 * a closing 'N passed, N failed' line, and helpers for fixtures and temporary
 * directories. A test program exits non-zero when anything failed. */
#ifndef LZ_TEST_H
#define LZ_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

#endif /* LZ_TEST_H */
