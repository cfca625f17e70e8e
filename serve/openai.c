/* openai.c - OpenAI-compatible request parsing and response JSON (openai.h). */
#include "serve/openai.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/unicode.h"

json_t *lz_oai_text(const char *s, size_t n)
{
    char *out = malloc(3 * n + 1);
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int len = lz_utf8_seq_len((const unsigned char *)s + i, n - i);
        if (len > 0 && !(len == 1 && s[i] == 0)) { memcpy(out + o, s + i, (size_t)len); o += (size_t)len; i += (size_t)len; }
        else { memcpy(out + o, "\xef\xbf\xbd", 3); o += 3; i++; }
    }
    json_t *j = json_stringn(out, o);
    free(out);
    return j;
}

/* A chat message's content as text: a string, or the "text" of its parts. NULL: neither. */
static char *content_text(json_t *c)
{
    if (json_is_string(c)) return strdup(json_string_value(c));
    if (!json_is_array(c)) return NULL;
    size_t n = 0, i;
    json_t *part;
    json_array_foreach(c, i, part) {
        const char *t = json_string_value(json_object_get(part, "text"));
        if (t) n += strlen(t) + 1;
    }
    char *s = calloc(1, n + 1);
    if (!s) return NULL;
    json_array_foreach(c, i, part) {
        const char *t = json_string_value(json_object_get(part, "text"));
        if (!t) continue;
        if (*s) strcat(s, "\n");
        strcat(s, t);
    }
    return s;
}

#define FAIL(p, ...) do { snprintf(err, errlen, __VA_ARGS__); *param = (p); goto bad; } while (0)

int lz_oai_parse(lz_oai_kind kind, const char *body, size_t len, const lz_oai_defaults *d, lz_oai_request *out,
                 char *err, size_t errlen, const char **param)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
    *param = NULL;
    json_error_t je;
    out->root = json_loadb(body, len, 0, &je);
    if (!out->root) {
        snprintf(err, errlen, "the body is not valid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        return 400;
    }
    json_t *root = out->root, *v;
    if (!json_is_object(root)) FAIL(NULL, "the body must be a JSON object");
    lz_serve_req *q = &out->req;
    q->max_tokens = d->max_tokens;
    q->temperature = d->temperature;
    q->top_p = d->top_p;
    q->seed = d->seed;
    if (kind == LZ_OAI_COMPLETIONS) {
        v = json_object_get(root, "prompt");
        if (json_is_array(v) && json_array_size(v) == 1) v = json_array_get(v, 0);
        else if (json_is_array(v)) FAIL("prompt", "'prompt' must be one string (one prompt a request)");
        if (!json_is_string(v) || !*json_string_value(v)) FAIL("prompt", "'prompt' must be a non-empty string");
        out->question = strdup(json_string_value(v));
    } else {
        json_t *msgs = json_object_get(root, "messages"), *m;
        if (!json_is_array(msgs) || !json_array_size(msgs)) FAIL("messages", "'messages' must be a non-empty array");
        size_t i;
        json_array_foreach(msgs, i, m) {
            const char *role = json_string_value(json_object_get(m, "role"));
            if (!json_is_object(m) || !role) FAIL("messages", "each message must be an object with a 'role'");
            if (strcmp(role, "user")) continue;
            char *t = content_text(json_object_get(m, "content"));
            if (!t) FAIL("messages", "message %zu: 'content' must be a string or an array of text parts", i);
            free(out->question);
            out->question = t;
        }
        if (!out->question || !*out->question) FAIL("messages", "no user message with text: nothing to answer");
    }
    if (!out->question) FAIL(NULL, "out of memory");
    q->question = out->question;
    v = json_object_get(root, kind == LZ_OAI_CHAT && json_object_get(root, "max_completion_tokens")
                                  ? "max_completion_tokens" : "max_tokens");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 65536)
            FAIL("max_tokens", "'max_tokens' must be an integer in [1, 65536]");
        q->max_tokens = (int)json_integer_value(v);
    }
    v = json_object_get(root, "temperature");
    if (v && !json_is_null(v)) {
        if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 2)
            FAIL("temperature", "'temperature' must be a number in [0, 2]");
        q->temperature = (float)json_number_value(v);
    }
    v = json_object_get(root, "top_p");
    if (v && !json_is_null(v)) {
        if (!json_is_number(v) || !(json_number_value(v) > 0) || json_number_value(v) > 1)
            FAIL("top_p", "'top_p' must be a number in (0, 1]");
        q->top_p = (float)json_number_value(v);
        if (!(q->top_p > 0)) q->top_p = FLT_MIN; /* a positive value below float's range: the most likely token */
    }
    v = json_object_get(root, "seed");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v)) FAIL("seed", "'seed' must be an integer");
        q->seed = (uint64_t)json_integer_value(v);
    }
    v = json_object_get(root, "n");
    if (v && !json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) != 1))
        FAIL("n", "only 'n': 1 is supported");
    v = json_object_get(root, "stop");
    if (json_is_string(v)) {
        out->stops[q->n_stop++] = json_string_value(v);
    } else if (json_is_array(v)) {
        if (json_array_size(v) > LZ_SERVE_MAX_STOP) FAIL("stop", "at most %d stop strings", LZ_SERVE_MAX_STOP);
        for (size_t i = 0; i < json_array_size(v); i++) {
            const char *s = json_string_value(json_array_get(v, i));
            if (!s) FAIL("stop", "'stop' must be a string or an array of strings");
            out->stops[q->n_stop++] = s;
        }
    } else if (v && !json_is_null(v)) {
        FAIL("stop", "'stop' must be a string or an array of strings");
    }
    for (int i = 0; i < q->n_stop; i++)
        if (!*out->stops[i] || strlen(out->stops[i]) > LZ_SERVE_MAX_STOP_LEN)
            FAIL("stop", "stop strings must be non-empty and at most %d bytes", LZ_SERVE_MAX_STOP_LEN);
    q->stop = out->stops;
    v = json_object_get(root, "stream");
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v)) FAIL("stream", "'stream' must be true or false");
        out->stream = json_is_true(v);
    }
    v = json_object_get(root, "ignore_eos"); /* vLLM's extension: fixed output lengths */
    if (v && !json_is_null(v)) {
        if (!json_is_boolean(v)) FAIL("ignore_eos", "'ignore_eos' must be true or false");
        q->ignore_eos = json_is_true(v);
    }
        out->include_usage = json_is_true(json_object_get(json_object_get(root, "stream_options"), "include_usage"));
    /* the RAG extension */
    json_t *docs = json_object_get(root, "documents"), *ret = json_object_get(root, "retrieve");
    if (docs && !json_is_null(docs)) {
        if (!json_is_array(docs)) FAIL("documents", "'documents' must be an array of document ids");
        const size_t n = json_array_size(docs);
        if (n > 4096) FAIL("documents", "at most 4096 documents a request");
        out->ids = calloc(n ? n : 1, sizeof *out->ids);
        if (!out->ids) FAIL(NULL, "out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *e = json_array_get(docs, i);
            /* an id, or an object naming one ({"id": ...}) */
            const char *id = json_is_string(e) ? json_string_value(e) : json_string_value(json_object_get(e, "id"));
            if (!id || !*id) FAIL("documents", "'documents' entry %zu is not a document id (a non-empty string)", i);
            out->ids[i] = id;
        }
        q->doc_ids = out->ids;
        q->n_doc_ids = (int)n;
        if (!n) q->retrieve_k = 0; /* an empty list: no documents */
    } else if (ret && !json_is_null(ret)) {
        if (json_is_false(ret)) q->retrieve_k = 0;
        else if (json_is_true(ret)) q->retrieve_k = d->top_k;
        else if (json_is_object(ret)) {
            json_t *k = json_object_get(ret, "k");
            if (k && (!json_is_integer(k) || json_integer_value(k) < 0 || json_integer_value(k) > 1000))
                FAIL("retrieve", "'retrieve.k' must be an integer in [0, 1000]");
            q->retrieve_k = k ? (int)json_integer_value(k) : d->top_k;
        } else FAIL("retrieve", "'retrieve' must be an object {\"k\": N}, true or false");
    } else {
        q->retrieve_k = d->top_k; /* a plain OpenAI request: BM25 over the store */
    }
    return 0;
bad:
    lz_oai_request_free(out);
    return 400;
}

void lz_oai_request_free(lz_oai_request *r)
{
    json_decref(r->root);
    free(r->ids);
    free(r->question);
    memset(r, 0, sizeof *r);
}

char *lz_oai_error(int status, const char *message, const char *param)
{
    const char *type = status == 429 ? "rate_limit_error" : status == 503 ? "server_overloaded"
                       : status >= 500 ? "server_error" : status == 404 ? "not_found_error"
                       : status == 413 ? "request_too_large" : "invalid_request_error";
    json_t *e = json_object();
    json_object_set_new(e, "message", lz_oai_text(message, strlen(message)));
    json_object_set_new(e, "type", json_string(type));
    json_object_set_new(e, "param", param ? json_string(param) : json_null());
    json_object_set_new(e, "code", json_null());
    json_t *o = json_pack("{s:o}", "error", e);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static json_t *sources_json(const lz_query_doc *docs, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        json_t *d = json_object();
        json_object_set_new(d, "id", lz_oai_text(docs[i].ext_id, strlen(docs[i].ext_id)));
        json_object_set_new(d, "title", lz_oai_text(docs[i].title, strlen(docs[i].title)));
        json_object_set_new(d, "score", json_real(docs[i].score));
        json_object_set_new(d, "tokens", json_integer(docs[i].n_tokens));
        json_array_append_new(a, d);
    }
    return a;
}

static json_t *usage_json(const lz_serve_update *u)
{
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", u->timing.n_prompt, "completion_tokens",
                     u->timing.n_completion, "total_tokens", u->timing.n_prompt + u->timing.n_completion);
}

static json_t *timings_json(const lz_serve_update *u)
{
    return json_pack("{s:f, s:f, s:f, s:f, s:I, s:I}", "queue_s", u->timing.queue_s, "ttft_s", u->timing.ttft_s,
                     "tpot_s", u->timing.tpot_s, "total_s", u->timing.total_s, "cache_hits",
                     (json_int_t)u->timing.hits, "cache_misses", (json_int_t)u->timing.misses);
}

static json_t *envelope(const lz_oai_request *r, const char *id, long created, const char *model, int chunk)
{
    const char *object = r->kind == LZ_OAI_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                : "text_completion";
    return json_pack("{s:s, s:s, s:I, s:s}", "id", id, "object", object, "created", (json_int_t)created, "model",
                     model);
}

static char *dump(json_t *o, int sse)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s || !sse) return s;
    const size_t n = strlen(s);
    char *e = malloc(n + 9);
    if (e) memcpy(e, "data: ", 6), memcpy(e + 6, s, n), memcpy(e + 6 + n, "\n\n", 3);
    free(s);
    return e;
}

char *lz_oai_response(const lz_oai_request *r, const char *id, long created, const char *model, const char *text,
                      size_t len, const lz_serve_update *u, const lz_query_doc *docs, int n_docs)
{
    json_t *o = envelope(r, id, created, model, 0), *c = json_object();
    json_object_set_new(c, "index", json_integer(0));
    if (r->kind == LZ_OAI_CHAT)
        json_object_set_new(c, "message", json_pack("{s:s, s:o}", "role", "assistant", "content", lz_oai_text(text, len)));
    else json_object_set_new(c, "text", lz_oai_text(text, len));
    json_object_set_new(c, "logprobs", json_null());
    json_object_set_new(c, "finish_reason", json_string(u->finish ? u->finish : "stop"));
    json_object_set_new(o, "choices", json_pack("[o]", c));
    json_object_set_new(o, "usage", usage_json(u));
    json_object_set_new(o, "sources", sources_json(docs, n_docs));
    json_object_set_new(o, "timings", timings_json(u));
    return dump(o, 0);
}

char *lz_oai_chunk(const lz_oai_request *r, const char *id, long created, const char *model, const char *piece,
                   size_t len, int first, const char *finish, const lz_query_doc *docs, int n_docs)
{
    json_t *o = envelope(r, id, created, model, 1), *c = json_object();
    json_object_set_new(c, "index", json_integer(0));
    if (r->kind == LZ_OAI_CHAT) {
        json_t *delta = json_object();
        if (first) json_object_set_new(delta, "role", json_string("assistant"));
        if (len || !finish) json_object_set_new(delta, "content", lz_oai_text(piece, len));
        json_object_set_new(c, "delta", delta);
    } else {
        json_object_set_new(c, "text", lz_oai_text(piece, len));
    }
    json_object_set_new(c, "logprobs", json_null());
    json_object_set_new(c, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(o, "choices", json_pack("[o]", c));
    if (first) json_object_set_new(o, "sources", sources_json(docs, n_docs));
    return dump(o, 1);
}

char *lz_oai_usage_chunk(const lz_oai_request *r, const char *id, long created, const char *model,
                         const lz_serve_update *u)
{
    json_t *o = envelope(r, id, created, model, 1);
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", usage_json(u));
    json_object_set_new(o, "timings", timings_json(u));
    return dump(o, 1);
}
