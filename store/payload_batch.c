/* payload_batch.c - many bf16 payloads decoded at once (lz_payload_decode_batch):
 * the zstd frames of every payload in the batch go to one pool of threads, each
 * frame's CRC32C is taken by the thread that decompresses it (its bytes are read
 * once) and the pieces are joined by lz_crc32c_combine, then the byte planes of
 * every payload are unshuffled into the callers' buffers on the same threads. A
 * question's misses, or a preload, then decode at the rate of all cores, where
 * one payload alone has too few frames to keep them busy. fp8 payloads go the
 * same way: their frames (zstd) or 1 MiB pieces (raw, checksummed in place), then
 * each (part, head) dequantised through a 256-entry table of its scale, or (a
 * job with k8) its bytes and scale kept as they are.
 *
 * Legend: half = sum(kept) * d, the bf16 elements of K (and of V) of a payload.
 */
#include "store/payload.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>

#include "base/error.h"
#include "base/fp8.h"
#include "base/half.h"
#include "store/payload_impl.h"

/* ---- CRC32C of joined pieces (the method of zlib's crc32_combine) ---- */

#define CRC32C_POLY 0x82f63b78u /* reflected */

/* a * b modulo the polynomial, bit-reflected */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

/* x^(2^k) modulo the polynomial, k = 0..31 */
static uint32_t x2n_table[32];
static int x2n_ready;

static void x2n_init(void)
{
    uint32_t p = 1u << 30; /* x^1 */
    x2n_table[0] = p;
    for (int n = 1; n < 32; n++) x2n_table[n] = p = multmodp(p, p);
    __atomic_store_n(&x2n_ready, 1, __ATOMIC_RELEASE);
}

/* x^(n * 2^k) modulo the polynomial */
static uint32_t x2nmodp(uint64_t n, unsigned k)
{
    if (!__atomic_load_n(&x2n_ready, __ATOMIC_ACQUIRE)) x2n_init();
    uint32_t p = 1u << 31; /* x^0 */
    for (; n; n >>= 1, k++)
        if (n & 1) p = multmodp(x2n_table[k & 31], p);
    return p;
}

/* The CRC of a piece followed by len2 more bytes, without those bytes' own CRC: the CRC of
 * the whole is the XOR of every piece's shifted CRC (the combine is linear). */
static uint32_t crc_shift(uint32_t crc1, uint64_t len2) { return multmodp(x2nmodp(len2, 3), crc1); }

uint32_t lz_crc32c_combine(uint32_t crc1, uint32_t crc2, uint64_t len2) { return crc_shift(crc1, len2) ^ crc2; }

/* ---- the batch ---- */

/* Planes of a wave of payloads held at once (the codec keeps the buffer): a batch larger
 * than this is decoded in waves, at least one payload a wave. */
#define WAVE_BYTES ((size_t)256 << 20)
/* a job's status while the batch runs: decoded already, by lz_payload_decode_bf16_packed */
#define DONE_ALONE (-1)
/* bf16 elements a thread unshuffles at a time */
#define UNSHUFFLE_CHUNK ((size_t)1 << 18)

typedef struct {
    int job;
    size_t src, n;   /* compressed bytes: blob + src, n of them (a frame, or the whole body) */
    size_t dst, m;   /* decompressed into the job's planes at dst, m bytes (0: a raw body's piece,
                        checksummed in place) */
    uint32_t crc;    /* the piece's CRC shifted to the blob's end */
    int bad;
} piece;

typedef struct {
    size_t planes;   /* offset of the job's planes in the wave's buffer */
    size_t body;     /* offset of the body in the blob */
    int first, count; /* its pieces */
    int in_place;    /* a raw body: read where it lies, no room in the wave */
    size_t *head_at; /* fp8: element offset of each (part, head), 2 * L * KV + 1 */
} job_plan;

int lz_payload_batch_format(const lz_payload_info *in)
{
    if (in->dtype == LZ_PAYLOAD_DTYPE_BF16)
        return in->codec == LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD || in->codec == LZ_PAYLOAD_CODEC_RAW;
    return in->dtype == LZ_PAYLOAD_DTYPE_FP8 && in->codec != LZ_PAYLOAD_CODEC_SHUFFLE_ZSTD;
}

static int job_fail(lz_payload_job *j, int status, const char *msg)
{
    j->status = status;
    snprintf(j->err, sizeof j->err, "%s", msg);
    return status;
}

/* Room in *ps for one more piece after n (doubling *cap); 0, or -1 out of memory. */
static int room_for_piece(piece **ps, int n, int *cap)
{
    if (n < *cap) return 0;
    const int nc = *cap ? 2 * *cap : 256;
    piece *p = realloc(*ps, (size_t)nc * sizeof *p);
    if (!p) return -1;
    *ps = p, *cap = nc;
    return 0;
}

/* The pieces of job j's body (frames when it was compressed as frames, else the whole
 * body as one piece) appended to *ps; 0, or -1 out of memory. */
static int plan_pieces(const lz_payload_job *j, int job, size_t body_off, piece **ps, int *n, int *cap)
{
    const uint8_t *src = (const uint8_t *)j->blob + body_off;
    const size_t len = (size_t)j->info.body_size, raw = (size_t)j->info.raw_size;
    const int n0 = *n;
    if (j->info.codec == LZ_PAYLOAD_CODEC_RAW) { /* checksummed in place, a megabyte a piece */
        for (size_t off = 0; off < len || off == 0; off += LZ_PAYLOAD_FRAME_BYTES) {
            if (room_for_piece(ps, *n, cap)) return -1;
            const size_t m = len - off < LZ_PAYLOAD_FRAME_BYTES ? len - off : LZ_PAYLOAD_FRAME_BYTES;
            (*ps)[(*n)++] = (piece){.job = job, .src = body_off + off, .n = m, .dst = 0, .m = 0};
            if (!len) break;
        }
        return 0;
    }
    size_t off = 0, out = 0;
    int frames = 1;
    while (off < len) {
        size_t fs = ZSTD_findFrameCompressedSize(src + off, len - off);
        unsigned long long cs = ZSTD_isError(fs) ? ZSTD_CONTENTSIZE_ERROR : ZSTD_getFrameContentSize(src + off, fs);
        if (cs == ZSTD_CONTENTSIZE_ERROR || cs == ZSTD_CONTENTSIZE_UNKNOWN || out + cs > raw) { frames = 0; break; }
        if (room_for_piece(ps, *n, cap)) return -1;
        (*ps)[(*n)++] = (piece){.job = job, .src = body_off + off, .n = fs, .dst = out, .m = (size_t)cs};
        off += fs, out += (size_t)cs;
    }
    if (frames && off == len && out == raw && *n > n0) return 0;
    *n = n0; /* one piece: zstd reads whatever the body holds, and says when it is wrong */
    if (room_for_piece(ps, *n, cap)) return -1;
    (*ps)[(*n)++] = (piece){.job = job, .src = body_off, .n = len, .dst = 0, .m = raw};
    return 0;
}

/* bf16 elements [a, b) of job j from its planes (2 * half elements: low bytes, then high) */
static void unshuffle_range(const lz_payload_job *j, const uint8_t *planes, size_t a, size_t b)
{
    const size_t half = (size_t)j->info.n_kept_sum * j->info.head_dim, n = 2 * half;
    const uint8_t *lo = planes, *hi = planes + n;
    uint16_t *dst = a < half ? j->k + a : j->v + (a - half);
    for (size_t i = a; i < b; i++) *dst++ = (uint16_t)(lo[i] | (hi[i] << 8));
}

/* e4m3 codes as fp32 (made once) */
static float e4m3_tab[256];
static int e4m3_ready;

static void e4m3_init(void)
{
    for (int b = 0; b < 256; b++) e4m3_tab[b] = lz_e4m3_to_f32((uint8_t)b);
    __atomic_store_n(&e4m3_ready, 1, __ATOMIC_RELEASE);
}

/* (part, head) h of an fp8 body (its scale table, then the bytes): its values as bf16 of
 * e4m3(b) * scale into K or V, through a table of the 256 codes at this head's scale. */
static void dequant_head(const lz_payload_job *j, const uint8_t *body, size_t nh2, const size_t *head_at, long long h,
                         size_t half)
{
    float sc;
    const uint32_t bits = lz_payload_get32(body + 4 * (size_t)h);
    memcpy(&sc, &bits, 4);
    uint16_t lut[256];
    for (int b = 0; b < 256; b++) lut[b] = lz_f32_to_bf16(e4m3_tab[b] * sc);
    const uint8_t *src = body + 4 * nh2 + head_at[h];
    const size_t n = head_at[h + 1] - head_at[h];
    uint16_t *dst = head_at[h] < half ? j->k + head_at[h] : j->v + (head_at[h] - half);
    for (size_t e = 0; e < n; e++) dst[e] = lut[src[e]];
}

/* (part, head) h of an fp8 body into a job that keeps fp8 (k8 set): its bytes as they are, and
 * its scale (the first nh2 / 2 heads are K's, the rest V's). */
static void copy_head(const lz_payload_job *j, const uint8_t *body, size_t nh2, const size_t *head_at, long long h,
                      size_t half)
{
    float sc;
    const uint32_t bits = lz_payload_get32(body + 4 * (size_t)h);
    memcpy(&sc, &bits, 4);
    if ((size_t)h < nh2 / 2) j->k_scales[h] = sc;
    else j->v_scales[(size_t)h - nh2 / 2] = sc;
    const size_t n = head_at[h + 1] - head_at[h];
    uint8_t *dst = head_at[h] < half ? j->k8 + head_at[h] : j->v8 + (head_at[h] - half);
    memcpy(dst, body + 4 * nh2 + head_at[h], n);
}

/* One wave: jobs [j0, j1), every one parsed, in the batch's formats, with planes room in c->planes. */
static void decode_wave(lz_payload_codec *c, lz_payload_job *jobs, job_plan *plan, int j0, int j1, piece *ps,
                        int n_ps, int T)
{
    uint8_t *buf = c->planes;
#pragma omp parallel for num_threads(T) schedule(dynamic, 1) if (T > 1 && n_ps > 1)
    for (int t = 0; t < n_ps; t++) {
        piece *p = &ps[t];
        const lz_payload_job *j = &jobs[p->job];
        const uint8_t *src = (const uint8_t *)j->blob + p->src;
        if (p->m) {
            ZSTD_DCtx *d = T > 1 ? c->wdctx[omp_get_thread_num()] : c->dctx;
            size_t r = ZSTD_decompressDCtx(d, buf + plan[p->job].planes + p->dst, p->m, src, p->n);
            p->bad = ZSTD_isError(r) || r != p->m;
        }
        p->crc = crc_shift(lz_crc32c(0, src, p->n), (uint64_t)(j->len - p->src - p->n));
    }
    /* the checksums: header and kept table, then the body's pieces (XOR of shifted CRCs) */
    for (int i = j0; i < j1; i++) {
        lz_payload_job *j = &jobs[i];
        if (j->status) continue;
        static const uint8_t zero[4];
        const uint8_t *b = j->blob;
        uint32_t h = lz_crc32c(0, b, OFF_CRC);
        h = lz_crc32c(h, zero, 4);
        h = lz_crc32c(h, b + OFF_CRC + 4, plan[i].body - OFF_CRC - 4);
        uint32_t crc = crc_shift(h, (uint64_t)(j->len - plan[i].body));
        int bad = 0;
        for (int t = plan[i].first; t < plan[i].first + plan[i].count; t++) crc ^= ps[t].crc, bad |= ps[t].bad;
        if (crc != j->info.checksum) {
            char m[160];
            snprintf(m, sizeof m, "payload: CRC32C mismatch (stored %08x, computed %08x)", j->info.checksum, crc);
            job_fail(j, LZ_ECHECKSUM, m);
        } else if (bad) {
            job_fail(j, LZ_ECODEC, "payload decode: zstd: a frame did not decompress");
        }
    }
    /* the planes (fp8: the bytes) into the callers' K and V, in chunks over every good job */
#pragma omp parallel num_threads(T) if (T > 1)
    for (int i = j0; i < j1; i++) {
        const lz_payload_job *j = &jobs[i];
        if (j->status) continue;
        const uint8_t *body = plan[i].in_place ? (const uint8_t *)j->blob + plan[i].body : buf + plan[i].planes;
        if (j->info.dtype == LZ_PAYLOAD_DTYPE_FP8) {
            const long long nh2 = 2LL * j->info.n_layers * j->info.n_kv_heads;
            const size_t half = (size_t)j->info.n_kept_sum * j->info.head_dim;
#pragma omp for schedule(dynamic, 8) nowait
            for (long long h = 0; h < nh2; h++)
                (j->k8 ? copy_head : dequant_head)(j, body, (size_t)nh2, plan[i].head_at, h, half);
            continue;
        }
        const size_t half = (size_t)j->info.n_kept_sum * j->info.head_dim;
        const long long nk = (long long)((half + UNSHUFFLE_CHUNK - 1) / UNSHUFFLE_CHUNK);
        const int raw = plan[i].in_place; /* bf16 stored raw: the elements as they are */
#pragma omp for schedule(dynamic, 1) nowait
        for (long long ch = 0; ch < 2 * nk; ch++) { /* K's chunks, then V's: none crosses K's end */
            const size_t base = ch < nk ? 0 : half, a = base + (size_t)(ch % nk) * UNSHUFFLE_CHUNK;
            const size_t b = a + UNSHUFFLE_CHUNK < base + half ? a + UNSHUFFLE_CHUNK : base + half;
            if (raw) memcpy(a < half ? j->k + a : j->v + (a - half), body + 2 * a, 2 * (b - a));
            else unshuffle_range(j, body, a, b);
        }
    }
}

/* The element offset of each (part, head) of an fp8 job, and the end (malloc'd; NULL: out of memory). */
static size_t *head_offsets(const lz_payload_job *j)
{
    const size_t nh = (size_t)j->info.n_layers * j->info.n_kv_heads, d = (size_t)j->info.head_dim;
    size_t *at = malloc((2 * nh + 1) * sizeof *at), o = 0;
    if (!at) return NULL;
    for (size_t h = 0; h < 2 * nh; h++) {
        at[h] = o;
        o += (size_t)lz_payload_get32((const uint8_t *)j->blob + LZ_PAYLOAD_HEADER_SIZE + 4 * (h % nh)) * d;
    }
    at[2 * nh] = o;
    return at;
}

int lz_payload_decode_batch(lz_payload_codec *c, lz_payload_job *jobs, int n)
{
    if (!__atomic_load_n(&e4m3_ready, __ATOMIC_ACQUIRE)) e4m3_init();
    const int T = omp_in_parallel() ? 1 : omp_get_max_threads();
    job_plan *plan = calloc((size_t)(n > 0 ? n : 1), sizeof *plan);
    piece *ps = NULL;
    int n_ps = 0, cap = 0, failed = 0;
    if (!plan || (T > 1 && lz_payload_thread_dctx(c, T))) {
        for (int i = 0; i < n; i++) job_fail(&jobs[i], LZ_ENOMEM, "payload decode: out of memory");
        free(plan);
        return n;
    }
    for (int i = 0; i < n; i++) { /* the batch's own format: the rest one at a time */
        lz_payload_job *j = &jobs[i];
        j->status = lz_payload_parse(j->blob, j->len, 0, &j->info, j->err, sizeof j->err);
        if (j->status) continue;
        if (j->n_kept) lz_payload_kept(j->blob, &j->info, j->n_kept);
        if (j->k8 && (j->info.dtype != LZ_PAYLOAD_DTYPE_FP8 || !lz_payload_batch_format(&j->info))) {
            job_fail(j, LZ_EUNSUPPORTED, "payload decode: fp8 bytes asked of a payload that is not fp8 (or not "
                                         "in a batch format)");
            continue;
        }
        if (!lz_payload_batch_format(&j->info)) {
            j->status = lz_payload_decode_bf16_packed(c, j->blob, j->len, j->k, j->v, NULL, &j->info, j->err,
                                                      sizeof j->err);
            if (!j->status) j->status = DONE_ALONE;
        }
    }
    for (int j0 = 0; j0 < n;) { /* waves of at most WAVE_BYTES of planes */
        size_t room = 0;
        int j1 = j0, any = 0;
        n_ps = 0;
        for (; j1 < n; j1++) {
            lz_payload_job *j = &jobs[j1];
            if (j->status) continue;
            const int in_place = j->info.codec == LZ_PAYLOAD_CODEC_RAW;
            const size_t need = in_place ? 0 : (size_t)j->info.raw_size;
            if (room && room + need > WAVE_BYTES) break;
            plan[j1].planes = room;
            plan[j1].in_place = in_place;
            plan[j1].body = LZ_PAYLOAD_HEADER_SIZE + 4 * (size_t)j->info.n_layers * j->info.n_kv_heads;
            plan[j1].first = n_ps;
            if (plan_pieces(j, j1, plan[j1].body, &ps, &n_ps, &cap) ||
                (j->info.dtype == LZ_PAYLOAD_DTYPE_FP8 && !(plan[j1].head_at = head_offsets(j)))) {
                job_fail(j, LZ_ENOMEM, "payload decode: out of memory");
                continue;
            }
            plan[j1].count = n_ps - plan[j1].first;
            room += need;
            any = 1;
        }
        if (room && lz_payload_reserve(&c->planes, &c->planes_cap, room)) {
            for (int i = j0; i < j1; i++)
                if (!jobs[i].status) job_fail(&jobs[i], LZ_ENOMEM, "payload decode: out of memory for the planes");
        } else if (any) {
            decode_wave(c, jobs, plan, j0, j1, ps, n_ps, T);
        }
        j0 = j1;
    }
    for (int i = 0; i < n; i++) {
        if (jobs[i].status == DONE_ALONE) jobs[i].status = LZ_OK;
        failed += jobs[i].status != LZ_OK;
    }
    for (int i = 0; i < n; i++) free(plan[i].head_at);
    free(ps);
    free(plan);
    return failed;
}
