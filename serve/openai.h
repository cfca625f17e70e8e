/* openai.h - the OpenAI-compatible wire format of lazyserve: request bodies
 * of POST /v1/completions and /v1/chat/completions parsed into a scheduler
 * request (max_tokens, temperature, top_p, seed, stop, stream; unknown
 * fields ignored), with the RAG extension (`documents`: ids to place;
 * `retrieve`: {"k": N} for BM25, false for none), and the JSON written back:
 * whole responses, server-sent-event chunks, usage, errors. A response
 * carries `sources` (id, title, score, tokens) and `timings`.
 *
 * A chat's question is its last user message (earlier turns and system
 * messages are not part of the RAG prompt, whose layout is model/prompt.h's).
 */
#ifndef LZ_SERVE_OPENAI_H
#define LZ_SERVE_OPENAI_H

#include <jansson.h>
#include <stddef.h>

#include "serve/sched.h"

typedef enum { LZ_OAI_COMPLETIONS = 0, LZ_OAI_CHAT = 1 } lz_oai_kind;

/* What a request leaves out. */
typedef struct {
    int max_tokens;    /* the server's -n */
    float temperature, top_p;
    uint64_t seed;
    int top_k;         /* BM25 documents when a request names neither documents nor retrieve */
    const char *model; /* the name /v1/models lists and responses echo */
} lz_oai_defaults;

typedef struct {
    lz_oai_kind kind;
    json_t *root;          /* the parsed body: the strings below point into it */
    lz_serve_req req;
    const char **ids;      /* (req.n_doc_ids) */
    const char *stops[LZ_SERVE_MAX_STOP];
    int stream;            /* server-sent events */
    int include_usage;     /* stream_options.include_usage: a last chunk with usage */
    char *question;        /* malloc'd (a chat's last user message, its text parts joined) */
} lz_oai_request;

/* Parses a request body (len bytes, not NUL-terminated). 0, or 400 with a message (and the
 * offending field in *param, static, or NULL). */
int lz_oai_parse(lz_oai_kind kind, const char *body, size_t len, const lz_oai_defaults *d, lz_oai_request *out,
                 char *err, size_t errlen, const char **param);
void lz_oai_request_free(lz_oai_request *r);

/* The bodies written back, malloc'd JSON text (NULL when out of memory). */
/* {"error": {"message", "type", "param", "code"}}: the type from the status. */
char *lz_oai_error(int status, const char *message, const char *param);
/* A whole response: the answer text[0..len), how it ended, its documents. */
char *lz_oai_response(const lz_oai_request *r, const char *id, long created, const char *model, const char *text,
                      size_t len, const lz_serve_update *u, const lz_query_doc *docs, int n_docs);
/* One server-sent-event chunk, "data: {...}\n\n": a piece of text (first: with the chat's
 * role and the sources), or the last one with finish set (and usage when u is given and the
 * client asked for it). */
char *lz_oai_chunk(const lz_oai_request *r, const char *id, long created, const char *model, const char *piece,
                   size_t len, int first, const char *finish, const lz_query_doc *docs, int n_docs);
/* The usage chunk (stream_options.include_usage): "data: {..., "choices": [], "usage"}\n\n". */
char *lz_oai_usage_chunk(const lz_oai_request *r, const char *id, long created, const char *model,
                         const lz_serve_update *u);

/* A JSON string of bytes that may hold invalid UTF-8 (replaced by U+FFFD). */
json_t *lz_oai_text(const char *s, size_t n);

#endif /* LZ_SERVE_OPENAI_H */
