/* fuzz_common.h - what the libFuzzer targets of fuzz/ share: a scratch folder
 * of their own (in /dev/shm when it exists: the parsers that read paths get
 * their input as files), writing an input there, splitting one input into
 * the parts of a multi-file format, and the invariant check that stops the
 * fuzzer (abort: libFuzzer saves the input as a crash). */
#ifndef LZ_FUZZ_COMMON_H
#define LZ_FUZZ_COMMON_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* An invariant beside the sanitizers: a failure prints what and aborts. */
#define FUZZ_CHECK(cond, ...)                                                       \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "FUZZ INVARIANT %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                           \
            fputc('\n', stderr);                                                    \
            abort();                                                                \
        }                                                                           \
    } while (0)

static char fuzz_dir_path[256];

/* Removes the scratch folder and its files (at exit). */
static inline void fuzz_dir_remove(void)
{
    DIR *d = opendir(fuzz_dir_path);
    if (!d) return;
    struct dirent *e;
    char p[600];
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", fuzz_dir_path, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(fuzz_dir_path);
}

/* The process's scratch folder, created on first use and removed at exit
 * (one per process, so fuzzers running side by side never share files):
 * $FUZZ_SCRATCH/lzfuzz.PID, else /dev/shm, $TMPDIR or /tmp. */
static inline const char *fuzz_dir(void)
{
    if (!fuzz_dir_path[0]) {
        struct stat st;
        const char *base = getenv("FUZZ_SCRATCH");
        if (!base) base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm"
                          : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(fuzz_dir_path, sizeof fuzz_dir_path, "%s/lzfuzz.%ld", base, (long)getpid());
        if (mkdir(fuzz_dir_path, 0700) != 0 && stat(fuzz_dir_path, &st) != 0) { perror(fuzz_dir_path); abort(); }
        atexit(fuzz_dir_remove);
    }
    return fuzz_dir_path;
}

/* Writes data[size] to fuzz_dir()/name; returns the path (a static buffer
 * per call site is the caller's business: this one is rotated over 4). */
static inline const char *fuzz_write(const char *name, const void *data, size_t size)
{
    static char paths[4][512];
    static int k;
    char *p = paths[k++ % 4];
    snprintf(p, sizeof paths[0], "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(p, "wb");
    if (!f) { perror(p); abort(); }
    if (size && fwrite(data, 1, size, f) != size) { perror(p); abort(); }
    fclose(f);
    return p;
}

/* The separator between the parts of one input (tokenizer.json and its
 * config; a shard index and its shards): a line of its own. */
#define FUZZ_PART_SEP "\n--lz-part--\n"

/* Splits data into at most max parts at FUZZ_PART_SEP; returns the count.
 * Parts point into data. */
static inline int fuzz_split(const uint8_t *data, size_t size, const uint8_t **part, size_t *len, int max)
{
    const size_t sl = sizeof FUZZ_PART_SEP - 1;
    int n = 0;
    size_t start = 0;
    for (size_t i = 0; n < max - 1 && i + sl <= size; i++) {
        if (memcmp(data + i, FUZZ_PART_SEP, sl) == 0) {
            part[n] = data + start;
            len[n++] = i - start;
            start = i + sl;
            i = start - 1;
        }
    }
    part[n] = data + start;
    len[n++] = size - start;
    return n;
}

/* A NUL-terminated copy of data[size] (malloc'd). */
static inline char *fuzz_strndup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

#endif /* LZ_FUZZ_COMMON_H */
