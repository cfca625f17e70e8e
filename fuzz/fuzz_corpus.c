/* fuzz_corpus.c - libFuzzer target: the corpus reader (ingest/corpus.c,
 * corpus_json.c): JSONL, a JSON array, CSV, HotpotQA context records. The
 * input's first byte picks the file name the reader sees (its extension
 * steers AUTO) and the format asked for, and whether --id-field title is
 * set; the rest is the file. Every record is read, then the reader is
 * rewound and read again, as lazyingest's two passes do.
 * Invariants beside the sanitizers: a valid record has an id and a
 * non-empty text of text_len bytes; a bad one says where (the file name and
 * a line); the second pass gives the same records in the same order (ids,
 * titles, texts, statuses) as the first. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ingest/corpus.h"
#include "fuzz/fuzz_common.h"

enum { MAX_RECORDS = 4096 };

/* A digest of one record, to compare the passes. */
typedef struct {
    int status;
    uint64_t hash;
} rec_sum;

static uint64_t mix(uint64_t h, const char *s, size_t n)
{
    h ^= 0x9E3779B97F4A7C15ull + n;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001B3ull;
    return h;
}

/* Reads every record into sums (at most MAX_RECORDS); returns the count. */
static int read_all(lz_corpus *c, rec_sum *sums, const char *name)
{
    int n = 0;
    char err[1024];
    for (;;) {
        lz_corpus_record r;
        memset(&r, 0, sizeof r);
        err[0] = 0;
        int st = lz_corpus_next(c, &r, err, sizeof err);
        if (st == LZ_CORPUS_EOF) break;
        if (st == LZ_CORPUS_OK) {
            FUZZ_CHECK(r.id && r.text && r.text_len > 0, "a valid record without id or text");
            FUZZ_CHECK(strlen(r.text) <= r.text_len, "text_len %zu shorter than the text", r.text_len);
            FUZZ_CHECK(strlen(r.id) < LZ_CORPUS_MAX_ID, "id of %zu bytes", strlen(r.id));
            uint64_t h = mix(0, r.id, strlen(r.id));
            h = mix(h, r.title ? r.title : "", r.title ? strlen(r.title) : 0);
            h = mix(h, r.text, r.text_len);
            sums[n] = (rec_sum){ st, h };
        } else if (st == LZ_CORPUS_BAD) {
            FUZZ_CHECK(strstr(err, name) != NULL, "a bad record's message does not name the file: '%s'", err);
            sums[n] = (rec_sum){ st, mix((uint64_t)r.line, r.id ? r.id : "", r.id ? strlen(r.id) : 0) };
        } else {
            FUZZ_CHECK(st == LZ_CORPUS_EIO || st == LZ_CORPUS_ENOMEM || st == LZ_CORPUS_EFORMAT, "status %d", st);
            FUZZ_CHECK(st == LZ_CORPUS_ENOMEM || strstr(err, name) != NULL, "the reader's error does not name the file: '%s'",
                       err);
            sums[n] = (rec_sum){ st, 0 };
            return n + 1;
        }
        if (++n == MAX_RECORDS) break;
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    static const char *const names[4] = { "corpus.jsonl", "corpus.csv", "corpus.json", "corpus" };
    const char *name = names[data[0] & 3];
    const lz_corpus_format fmt = (lz_corpus_format)((data[0] >> 2) & 3);
    const char *path = fuzz_write(name, data + 1, size - 1);
    lz_corpus *c = NULL;
    char err[1024] = "";
    if (lz_corpus_open(path, fmt, &c, err, sizeof err) != 0) {
        FUZZ_CHECK(c == NULL && strstr(err, name), "a refusal names the file: '%s'", err);
        return 0;
    }
    if (data[0] & 16) FUZZ_CHECK(lz_corpus_set_id_field(c, "title") == 0, "--id-field title");
    static rec_sum a[MAX_RECORDS], b[MAX_RECORDS];
    const int na = read_all(c, a, name);
    FUZZ_CHECK(lz_corpus_rewind(c, err, sizeof err) == 0, "rewind: %s", err);
    const int nb = read_all(c, b, name);
    FUZZ_CHECK(na == nb, "the second pass read %d records, the first %d", nb, na);
    for (int i = 0; i < na; i++)
        FUZZ_CHECK(a[i].status == b[i].status && a[i].hash == b[i].hash, "record %d differs between the passes", i);
    lz_corpus_close(c);
    return 0;
}
