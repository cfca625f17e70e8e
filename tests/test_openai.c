/* test_openai.c - serve/openai.c's request parsing: sampling fields within their ranges or
 * refused with the field named (400), a positive top_p too small for a float kept positive
 * (it once became 0, which the sampler takes as "no nucleus": found by fuzz/fuzz_openai.c),
 * defaults where the body says nothing, malformed JSON refused. */
#include <string.h>

#include "serve/openai.h"
#include "tests/test.h"

static const lz_oai_defaults defs = {.max_tokens = 16, .temperature = 0.0f, .top_p = 1.0f, .seed = 1, .top_k = 5,
                                     .model = "m"};

/* Parses body; 0 or the status, *r filled on 0 (the caller frees it). */
static int parse(const char *body, lz_oai_request *r, char *err, const char **param)
{
    *param = NULL;
    return lz_oai_parse(LZ_OAI_COMPLETIONS, body, strlen(body), &defs, r, err, 512, param);
}

int main(void)
{
    char err[512];
    const char *param;
    lz_oai_request r;
    CHECK(parse("{\"prompt\": \"q\"}", &r, err, &param) == 0, "a bare prompt: %s", err);
    CHECK(r.req.max_tokens == 16 && r.req.top_p == 1.0f && r.req.temperature == 0.0f, "the defaults");
    lz_oai_request_free(&r);
    CHECK(parse("{\"prompt\": \"q\", \"top_p\": 1e-60, \"temperature\": 0.7}", &r, err, &param) == 0, "tiny top_p: %s",
          err);
    CHECK(r.req.top_p > 0 && r.req.top_p < 1e-30f, "a positive top_p stays positive: %g", r.req.top_p);
    lz_oai_request_free(&r);
    CHECK(parse("{\"prompt\": \"q\", \"top_p\": 0.5}", &r, err, &param) == 0 && r.req.top_p == 0.5f, "top_p 0.5");
    lz_oai_request_free(&r);
    static const char *const bad[][2] = {{"{\"prompt\": \"q\", \"top_p\": 0}", "top_p"},
                                         {"{\"prompt\": \"q\", \"top_p\": -0.1}", "top_p"},
                                         {"{\"prompt\": \"q\", \"top_p\": 1.5}", "top_p"},
                                         {"{\"prompt\": \"q\", \"top_p\": \"x\"}", "top_p"},
                                         {"{\"prompt\": \"q\", \"temperature\": 2.5}", "temperature"},
                                         {"{\"prompt\": \"q\", \"max_tokens\": 0}", "max_tokens"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECK(parse(bad[i][0], &r, err, &param) == 400 && param && !strcmp(param, bad[i][1]) && strstr(err, bad[i][1]),
              "%s refused naming %s: %s", bad[i][0], bad[i][1], err);
    }
    CHECK(parse("{\"prompt\": ", &r, err, &param) == 400 && err[0], "malformed JSON refused: %s", err);
    return lz_test_done();
}
