/* lmdb_write_rate.c - how fast LMDB takes large values durably, by the way
 * they are written: mdb_put's own copy (dirty pages malloc'd, pwritten at
 * the commit), MDB_WRITEMAP with mdb_put (the copy lands in the shared map),
 * and MDB_WRITEMAP with MDB_RESERVE and the value pwritten into the file at
 * its reserved place by N threads, optionally with sync_file_range starting
 * the writeback as each value lands. Every transaction is committed durably
 * (fdatasync / msync) unless --nosync. Outside the product (not built by make):
 *
 *   cc -O2 -o build/lmdb_write_rate dev/store/lmdb_write_rate.c -llmdb -lpthread
 *   build/lmdb_write_rate DIR [--mode put|wmap|wmap-pwrite] [--value-mb 14]
 *       [--total-gb 4] [--txn-mb 512] [--threads 1] [--sfr] [--nosync]
 *
 * DIR must not exist (it is made, filled and removed). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CHECK(x)                                                                   \
    do {                                                                           \
        int rc_ = (x);                                                             \
        if (rc_) {                                                                 \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, mdb_strerror(rc_)); \
            exit(1);                                                               \
        }                                                                          \
    } while (0)

typedef struct {
    int fd, sfr;
    const uint8_t *src;
    size_t len;
    off_t *off;
    int n, t, T;
} pw_job;

/* The shared map's base address: the mapping of fd's file (by device and inode) in /proc/self/maps. */
static uint8_t *map_base(int fd)
{
    struct stat st;
    if (fstat(fd, &st)) return NULL;
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    uint8_t *base = NULL;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi, offset, ino;
        unsigned maj, min;
        if (sscanf(line, "%lx-%lx %*s %lx %x:%x %lu", &lo, &hi, &offset, &maj, &min, &ino) == 6 &&
            ino == st.st_ino && offset == 0 && (!base || (hi - lo) > 0))
            base = (uint8_t *)lo;
    }
    if (f) fclose(f);
    return base;
}

static void *pwrite_part(void *a)
{
    pw_job *j = a;
    for (int i = j->t; i < j->n; i += j->T) {
        size_t done = 0;
        while (done < j->len) {
            ssize_t w = pwrite(j->fd, j->src + done, j->len - done, j->off[i] + (off_t)done);
            if (w <= 0) {
                perror("pwrite");
                exit(1);
            }
            done += (size_t)w;
        }
        if (j->sfr) sync_file_range(j->fd, j->off[i], (off_t)j->len, SYNC_FILE_RANGE_WRITE);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [--mode put|wmap|wmap-pwrite] [--value-mb M] [--total-gb G] [--txn-mb T] "
                        "[--threads N] [--sfr] [--nosync]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1], *mode = "put";
    double value_mb = 14, total_gb = 4, txn_mb = 512;
    int threads = 1, sfr = 0, nosync = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--mode") && i + 1 < argc) mode = argv[++i];
        else if (!strcmp(argv[i], "--value-mb") && i + 1 < argc) value_mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--total-gb") && i + 1 < argc) total_gb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--txn-mb") && i + 1 < argc) txn_mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sfr")) sfr = 1;
        else if (!strcmp(argv[i], "--nosync")) nosync = 1;
        else {
            fprintf(stderr, "unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    const int wmap = strncmp(mode, "wmap", 4) == 0, pw = strcmp(mode, "wmap-pwrite") == 0;
    if (mkdir(dir, 0777)) {
        perror(dir);
        return 1;
    }
    const size_t vlen = (size_t)(value_mb * 1e6);
    const int per_txn = txn_mb * 1e6 / vlen < 1 ? 1 : (int)(txn_mb * 1e6 / vlen);
    const int n_vals = (int)(total_gb * 1e9 / vlen);
    uint8_t *src = malloc(vlen);
    for (size_t i = 0; i < vlen; i++) src[i] = (uint8_t)(i * 2654435761u >> 13);
    MDB_env *env;
    CHECK(mdb_env_create(&env));
    CHECK(mdb_env_set_mapsize(env, (size_t)(total_gb * 1.3e9) + (1u << 30)));
    CHECK(mdb_env_open(env, dir, MDB_NOTLS | (wmap ? MDB_WRITEMAP : 0) | (nosync ? MDB_NOSYNC : 0), 0666));
    int fd = -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/data.mdb", dir);
    if (pw && (fd = open(path, O_RDWR)) < 0) {
        perror(path);
        return 1;
    }
    uint8_t *base = pw ? map_base(fd) : NULL;
    if (pw && !base) {
        fprintf(stderr, "no map of %s\n", path);
        return 1;
    }
    off_t *off = malloc(sizeof *off * (size_t)per_txn);
    double t_put = 0, t_commit = 0;
    const double t0 = now_s();
    for (int v = 0; v < n_vals;) {
        MDB_txn *txn;
        MDB_dbi dbi;
        CHECK(mdb_txn_begin(env, NULL, 0, &txn));
        CHECK(mdb_dbi_open(txn, NULL, 0, &dbi));
        const double a = now_s();
        int n = 0;
        for (; n < per_txn && v < n_vals; n++, v++) {
            uint64_t k = (uint64_t)v * 0x9E3779B97F4A7C15ull;
            MDB_val key = {sizeof k, &k}, val = {vlen, pw ? NULL : src};
            CHECK(mdb_put(txn, dbi, &key, &val, pw ? MDB_RESERVE : 0));
            if (pw) off[n] = (off_t)((uint8_t *)val.mv_data - base);
        }
        if (pw) {
            pthread_t th[64];
            pw_job jobs[64];
            const int T = threads < 1 ? 1 : threads > 64 ? 64 : threads;
            for (int t = 0; t < T; t++) {
                jobs[t] = (pw_job){fd, sfr, src, vlen, off, n, t, T};
                pthread_create(&th[t], NULL, pwrite_part, &jobs[t]);
            }
            for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
        }
        const double b = now_s();
        CHECK(mdb_txn_commit(txn));
        t_put += b - a;
        t_commit += now_s() - b;
    }
    const double wall = now_s() - t0, gb = (double)n_vals * vlen / 1e9;
    printf("%s%s threads %d%s: %d values of %.1f MB, %d a transaction: %.2f GB in %.2f s = %.2f GB/s "
           "(puts %.2f s, commits %.2f s)\n",
           mode, sfr ? "+sfr" : "", threads, nosync ? " nosync" : "", n_vals, vlen / 1e6, per_txn, gb, wall,
           gb / wall, t_put, t_commit);
    if (fd >= 0) close(fd);
    mdb_env_close(env);
    snprintf(path, sizeof path, "rm -rf '%s'", dir);
    return system(path) == 0 ? 0 : 1;
}
