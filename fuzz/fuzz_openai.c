/* fuzz_openai.c - libFuzzer target: lazyserve's request parsing, the bodies of
 * POST /v1/completions and /v1/chat/completions (lz_oai_parse, serve/openai.c),
 * and the JSON it writes back for what it accepted. Byte 0 bit 0 picks the
 * endpoint (0: completions, 1: chat); the rest is the body, as bytes from the
 * network (not NUL-terminated). Invariants beside the sanitizers:
 *   - the answer is 0 or 400, and a 400 carries a message;
 *   - an accepted request is within the scheduler's bounds: a non-empty
 *     question, max_tokens >= 0, temperature >= 0, top_p in (0, 1], at most
 *     LZ_SERVE_MAX_STOP stop strings of at most LZ_SERVE_MAX_STOP_LEN bytes,
 *     every document id a string;
 *   - the whole response, a first and a last stream chunk, and an error body
 *     built for it are valid JSON (the chunks after their "data: " prefix). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/openai.h"
#include "fuzz/fuzz_common.h"

/* text is JSON (a stream chunk: "data: {...}\n\n") */
static void check_json(const char *text, int chunk)
{
    FUZZ_CHECK(text != NULL, "no body written");
    const char *p = text;
    if (chunk) {
        FUZZ_CHECK(!strncmp(p, "data: ", 6), "a chunk without 'data: ': %.40s", p);
        p += 6;
    }
    json_error_t je;
    json_t *j = json_loads(p, JSON_DISABLE_EOF_CHECK, &je);
    FUZZ_CHECK(j != NULL, "not JSON (%s): %.80s", je.text, p);
    json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    const lz_oai_kind kind = data[0] & 1 ? LZ_OAI_CHAT : LZ_OAI_COMPLETIONS;
    const lz_oai_defaults d = {.max_tokens = 16, .temperature = 0, .top_p = 1, .seed = 42, .top_k = 5, .model = "lazy"};
    lz_oai_request r;
    char err[512] = "";
    const char *param = NULL;
    const int rc = lz_oai_parse(kind, (const char *)data + 1, size - 1, &d, &r, err, sizeof err, &param);
    FUZZ_CHECK(rc == 0 || rc == 400, "status %d", rc);
    if (rc) {
        FUZZ_CHECK(err[0] != 0, "a refusal without a message");
        char *e = lz_oai_error(rc, err, param);
        check_json(e, 0);
        free(e);
        return 0;
    }
    const lz_serve_req *q = &r.req;
    FUZZ_CHECK(q->question && q->question[0], "an accepted request without a question");
    FUZZ_CHECK(q->max_tokens >= 0, "max_tokens %d", q->max_tokens);
    FUZZ_CHECK(q->temperature >= 0, "temperature %g", q->temperature);
    FUZZ_CHECK(q->top_p > 0 && q->top_p <= 1, "top_p %g", q->top_p);
    FUZZ_CHECK(q->n_stop >= 0 && q->n_stop <= LZ_SERVE_MAX_STOP, "%d stop strings", q->n_stop);
    for (int i = 0; i < q->n_stop; i++)
        FUZZ_CHECK(q->stop[i] && strlen(q->stop[i]) <= LZ_SERVE_MAX_STOP_LEN, "stop string %d", i);
    for (int i = 0; i < q->n_doc_ids; i++) FUZZ_CHECK(q->doc_ids && q->doc_ids[i], "document id %d", i);
    /* what is written back for it: the question's bytes echoed as an answer, no documents */
    lz_serve_update u;
    memset(&u, 0, sizeof u);
    const size_t n = strlen(q->question);
    char *whole = lz_oai_response(&r, "cmpl-fuzz", 1, "lazy", q->question, n, &u, NULL, 0);
    check_json(whole, 0);
    free(whole);
    char *first = lz_oai_chunk(&r, "cmpl-fuzz", 1, "lazy", q->question, n, 1, NULL, NULL, 0);
    check_json(first, 1);
    free(first);
    char *last = lz_oai_chunk(&r, "cmpl-fuzz", 1, "lazy", "", 0, 0, "stop", NULL, 0);
    check_json(last, 1);
    free(last);
    lz_oai_request_free(&r);
    return 0;
}
