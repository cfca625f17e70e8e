/* report_header.c - model, store and dataset as report.json records them
 * (report_header.h). */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "eval/report_header.h"

json_t *lz_eval_model_json(const lz_llama *m, const char *path)
{
    struct stat sb;
    const lz_llama_config *c = &m->cfg;
    return json_pack("{s:s, s:I, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "path", path, "bytes",
                     (json_int_t)(stat(path, &sb) == 0 ? sb.st_size : -1), "arch", m->arch, "fingerprint",
                     m->fingerprint_hex, "layers", c->n_layers, "dim", c->dim, "heads", c->n_heads, "kv_heads",
                     c->n_kv_heads, "head_dim", c->head_dim, "ffn_dim", c->ffn_dim, "vocab", c->vocab, "context",
                     c->ctx);
}

json_t *lz_eval_store_json(lz_store *st, const char *dir, int writable)
{
    int64_t n = -1;
    char err[256];
    if (lz_store_doc_count(st, &n, err, sizeof err)) n = -1;
    return json_pack("{s:s, s:I, s:s}", "path", dir, "documents", (json_int_t)n, "opened",
                     writable ? "read-write (access counts recorded)" : "read-only");
}

json_t *lz_eval_dataset_json(const lz_eval_dataset *d, const char *const *files, int n_files)
{
    json_t *fl = json_array(), *types = json_object(), *warn = json_array();
    for (int i = 0; i < n_files; i++) json_array_append_new(fl, json_string(files[i]));
    int unscored = 0;
    for (int i = 0; i < d->n_q; i++) {
        const char *t = d->q[i].type[0] ? d->q[i].type : "(none)";
        json_t *v = json_object_get(types, t);
        json_object_set_new(types, t, json_integer(v ? json_integer_value(v) + 1 : 1));
        unscored += d->q[i].n_golds == 0;
    }
    for (int i = 0; i < d->n_warnings; i++) json_array_append_new(warn, json_string(d->warnings[i]));
    return json_pack("{s:o, s:s, s:i, s:i, s:o, s:i, s:i, s:i, s:i, s:o, s:i}", "files", fl, "format",
                     lz_eval_format_name(d->format), "questions", d->n_q, "without_answer", unscored, "types", types,
                     "passages", lz_eval_passages_count(d->passages), "renamed", d->n_renamed, "dropped_pairs",
                     d->n_dropped, "aliases", d->n_aliases, "warnings", warn, "warnings_total", d->n_warnings_total);
}

void lz_eval_utc_now(char *buf, size_t n)
{
    const time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}
