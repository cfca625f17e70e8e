/* tokenizer_hf.c - loads a byte-level BPE tokenizer from a Hugging Face
 * tokenizer.json (model BPE with vocab, merges as "a b" or ["a", "b"],
 * added_tokens, a Split-regex + ByteLevel pre-tokenizer) and bos/eos from an
 * optional tokenizer_config.json. Normalizers and other models are refused. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_impl.h"

#define HF_MAX_VOCAB (1 << 24)

static const char *jstr(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* A token named by a config entry: "<s>" or {"content": "<s>", ...}. */
static const char *token_name(const json_t *v)
{
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return jstr(v, "content");
    return NULL;
}

/* pre_tokenizer -> the split pattern (NULL: no split), or an error. */
static int hf_pre_tokenizer(const char *path, const json_t *pre, lz_tokenizer *t, char *err, size_t errlen)
{
    if (!json_is_object(pre)) {
        lz_tok_err(err, errlen, "%s: pre_tokenizer is missing; only byte-level BPE (ByteLevel) is supported", path);
        return LZ_EUNSUPPORTED;
    }
    const json_t *list = pre;
    size_t n = 1;
    const char *type = jstr(pre, "type");
    if (type && strcmp(type, "Sequence") == 0) {
        list = json_object_get(pre, "pretokenizers");
        if (!json_is_array(list)) {
            lz_tok_err(err, errlen, "%s: pre_tokenizer Sequence has no pretokenizers array", path);
            return LZ_ECORRUPT;
        }
        n = json_array_size(list);
    }
    const char *pattern = NULL;
    size_t pattern_len = 0;
    int literal = 0, byte_level = 0;
    for (size_t i = 0; i < n; i++) {
        const json_t *p = list == pre ? pre : json_array_get(list, i);
        const char *pt = json_is_object(p) ? jstr(p, "type") : NULL;
        if (!pt) {
            lz_tok_err(err, errlen, "%s: pre_tokenizer entry %zu has no type", path, i);
            return LZ_ECORRUPT;
        }
        if (strcmp(pt, "Split") == 0) {
            const json_t *pat = json_object_get(p, "pattern");
            const json_t *re = json_object_get(pat, "Regex"), *lit = json_object_get(pat, "String");
            const char *behavior = jstr(p, "behavior");
            if (pattern || (!json_is_string(re) && !json_is_string(lit))) {
                lz_tok_err(err, errlen, "%s: pre_tokenizer Split %zu: %s", path, i,
                           pattern ? "only one Split is supported" : "pattern has no Regex or String");
                return pattern ? LZ_EUNSUPPORTED : LZ_ECORRUPT;
            }
            if ((behavior && strcmp(behavior, "Isolated") != 0) || json_is_true(json_object_get(p, "invert"))) {
                lz_tok_err(err, errlen, "%s: pre_tokenizer Split behavior '%s'%s is not supported (Isolated only)",
                           path, behavior ? behavior : "?",
                           json_is_true(json_object_get(p, "invert")) ? " with invert" : "");
                return LZ_EUNSUPPORTED;
            }
            const json_t *s = json_is_string(re) ? re : lit;
            pattern = json_string_value(s);
            pattern_len = json_string_length(s);
            literal = !json_is_string(re);
        } else if (strcmp(pt, "ByteLevel") == 0) {
            if (json_is_true(json_object_get(p, "add_prefix_space"))) {
                lz_tok_err(err, errlen, "%s: ByteLevel add_prefix_space = true is not supported", path);
                return LZ_EUNSUPPORTED;
            }
            const json_t *ur = json_object_get(p, "use_regex");
            if ((!ur || json_is_true(ur))) {
                if (pattern) {
                    lz_tok_err(err, errlen, "%s: a Split followed by ByteLevel use_regex = true is not supported", path);
                    return LZ_EUNSUPPORTED;
                }
                pattern = lz_bpe_re_gpt2;
                pattern_len = strlen(pattern);
            }
            byte_level = 1;
        } else {
            lz_tok_err(err, errlen, "%s: pre_tokenizer type '%s' is not supported (Split, ByteLevel)", path, pt);
            return LZ_EUNSUPPORTED;
        }
    }
    if (!byte_level) {
        lz_tok_err(err, errlen, "%s: pre_tokenizer has no ByteLevel step: only byte-level BPE is supported", path);
        return LZ_EUNSUPPORTED;
    }
    return pattern ? lz_bpe_set_regex(t, pattern, pattern_len, literal, err, errlen) : 0;
}

/* The first SpecialToken of post_processor's "single" template, if it leads. */
static const char *hf_template_bos(const json_t *pp)
{
    if (!json_is_object(pp)) return NULL;
    const char *type = jstr(pp, "type");
    if (type && strcmp(type, "Sequence") == 0) {
        const json_t *procs = json_object_get(pp, "processors");
        for (size_t i = 0; i < json_array_size(procs); i++) {
            const char *b = hf_template_bos(json_array_get(procs, i));
            if (b) return b;
        }
        return NULL;
    }
    if (!type || strcmp(type, "TemplateProcessing") != 0) return NULL;
    const json_t *first = json_array_get(json_object_get(pp, "single"), 0);
    const json_t *st = json_object_get(first, "SpecialToken");
    return st ? jstr(st, "id") : NULL;
}

static int set_token(lz_tokenizer *t, int id, const char *s, size_t n, int type)
{
    lz_tok_entry *e = &t->toks[id];
    int rc = lz_tok_arena_add(t, s, n, &e->text_off);
    if (rc) return rc;
    e->text_len = (uint32_t)n;
    e->type = (uint8_t)type;
    return 0;
}

static int hf_build(const char *path, const json_t *root, const json_t *cfg, lz_tokenizer **out,
                    char *err, size_t errlen)
{
    const json_t *model = json_object_get(root, "model");
    const char *mtype = jstr(model, "type");
    const json_t *vocab = json_object_get(model, "vocab");
    const json_t *merges = json_object_get(model, "merges");
    if (!json_is_object(model) || (mtype && strcmp(mtype, "BPE") != 0) || !json_is_object(vocab) ||
        !json_is_array(merges)) {
        lz_tok_err(err, errlen, "%s: model is %s%s: only BPE with a vocab object and a merges array is supported",
                   path, mtype ? "type " : "", mtype ? mtype : "not a BPE model");
        return mtype && strcmp(mtype, "BPE") != 0 ? LZ_EUNSUPPORTED : LZ_ECORRUPT;
    }
    const char *cp = jstr(model, "continuing_subword_prefix"), *ew = jstr(model, "end_of_word_suffix");
    if ((cp && *cp) || (ew && *ew) || json_is_true(json_object_get(model, "byte_fallback"))) {
        lz_tok_err(err, errlen, "%s: BPE with %s is not supported (byte-level BPE only)", path,
                   (cp && *cp) ? "continuing_subword_prefix" : (ew && *ew) ? "end_of_word_suffix" : "byte_fallback");
        return LZ_EUNSUPPORTED;
    }
    const json_t *norm = json_object_get(root, "normalizer");
    if (norm && !json_is_null(norm)) {
        const char *nt = jstr(norm, "type");
        lz_tok_err(err, errlen, "%s: normalizer '%s' is not supported", path, nt ? nt : "?");
        return LZ_EUNSUPPORTED;
    }

    /* vocabulary size: the largest id of vocab and added_tokens, plus one */
    const json_t *added = json_object_get(root, "added_tokens");
    json_int_t max_id = -1;
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)vocab, key, val) {
        json_int_t id = json_is_integer(val) ? json_integer_value(val) : -1;
        if (id < 0 || id >= HF_MAX_VOCAB) {
            lz_tok_err(err, errlen, "%s: model.vocab entry '%.64s' has a bad id", path, key);
            return LZ_ECORRUPT;
        }
        if (id > max_id) max_id = id;
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        const json_t *jid = json_object_get(a, "id");
        json_int_t id = json_is_integer(jid) ? json_integer_value(jid) : -1;
        if (id < 0 || id >= HF_MAX_VOCAB || !jstr(a, "content")) {
            lz_tok_err(err, errlen, "%s: added_tokens[%zu] has no valid id or content", path, i);
            return LZ_ECORRUPT;
        }
        if (id > max_id) max_id = id;
    }
    if (max_id < 0) {
        lz_tok_err(err, errlen, "%s: model.vocab is empty", path);
        return LZ_ECORRUPT;
    }

    lz_tokenizer *t;
    int rc = lz_tok_alloc(&t, LZ_TOKENIZER_BPE, (int)max_id + 1);
    if (rc) return rc;
    for (int id = 0; id <= max_id; id++) t->toks[id].type = LZ_TOKTYPE_UNUSED;
    json_object_foreach((json_t *)vocab, key, val) {
        int id = (int)json_integer_value(val);
        if (t->toks[id].type != LZ_TOKTYPE_UNUSED) {
            lz_tok_err(err, errlen, "%s: model.vocab gives id %d to two tokens", path, id);
            rc = LZ_ECORRUPT;
            break;
        }
        if ((rc = set_token(t, id, key, strlen(key), LZ_TOKTYPE_NORMAL))) break;
    }
    for (size_t i = 0; !rc && i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        int id = (int)json_integer_value(json_object_get(a, "id"));
        const json_t *c = json_object_get(a, "content");
        int type = json_is_true(json_object_get(a, "special")) ? LZ_TOKTYPE_CONTROL : LZ_TOKTYPE_USER;
        rc = set_token(t, id, json_string_value(c), json_string_length(c), type);
    }
    t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    if (!rc) rc = hf_pre_tokenizer(path, json_object_get(root, "pre_tokenizer"), t, err, errlen);
    if (!rc) rc = lz_tok_index_text(t);
    if (!rc) rc = lz_bpe_prepare(t, err, errlen);

    /* merges */
    size_t nm = json_array_size(merges);
    if (!rc) rc = lz_bpe_alloc_merges(t, nm);
    for (size_t i = 0; !rc && i < nm; i++) {
        const json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t alen, blen;
        if (json_is_string(m)) {
            const char *s = json_string_value(m);
            size_t n = json_string_length(m);
            const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
            if (!sp) {
                lz_tok_err(err, errlen, "%s: model.merges[%zu] = '%.64s' has no space", path, i, s);
                rc = LZ_ECORRUPT;
                break;
            }
            a = s;
            alen = (size_t)(sp - s);
            b = sp + 1;
            blen = n - alen - 1;
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            alen = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            blen = json_string_length(json_array_get(m, 1));
        } else {
            lz_tok_err(err, errlen, "%s: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]", path, i);
            rc = LZ_ECORRUPT;
            break;
        }
        rc = lz_bpe_add_merge(t, a, alen, b, blen, (int)i);
    }

    /* bos / eos: tokenizer_config.json first, then the post-processor template */
    const char *bos = cfg ? token_name(json_object_get(cfg, "bos_token")) : NULL;
    const char *eos = cfg ? token_name(json_object_get(cfg, "eos_token")) : NULL;
    const char *tmpl_bos = hf_template_bos(json_object_get(root, "post_processor"));
    if (!bos) bos = tmpl_bos;
    if (!rc && bos) t->bos = lz_tokenizer_find(t, bos);
    if (!rc && eos) t->eos = lz_tokenizer_find(t, eos);
    const json_t *ab = cfg ? json_object_get(cfg, "add_bos_token") : NULL;
    t->add_bos = json_is_boolean(ab) ? json_is_true(ab) : (tmpl_bos != NULL && t->bos >= 0);
    t->add_space_prefix = 0;
    if (!rc) rc = lz_tok_finish(t);
    if (rc) {
        if (rc == LZ_ENOMEM && err && !err[0]) lz_tok_err(err, errlen, "%s: out of memory", path);
        lz_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* Reads and parses a whole JSON file (json_loadb is much faster than
 * json_load_file, which reads a byte at a time). */
static int load_json(const char *path, size_t flags, json_t **out, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        lz_tok_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return LZ_EIO;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *p = realloc(buf, cap);
            if (!p) { free(buf); fclose(f); return LZ_ENOMEM; }
            buf = p;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        lz_tok_err(err, errlen, "%s: read error", path);
        return LZ_EIO;
    }
    json_error_t je;
    *out = json_loadb(buf, len, flags, &je);
    free(buf);
    if (!*out) {
        lz_tok_err(err, errlen, "%s:%d:%d: %s", path, je.line, je.column, je.text);
        return LZ_ECORRUPT;
    }
    return 0;
}

int lz_tokenizer_from_hf(const char *tokenizer_json, const char *config_json, lz_tokenizer **out,
                         char *err, size_t errlen)
{
    if (err && errlen) err[0] = '\0';
    if (!tokenizer_json || !out) return LZ_EINVAL;
    *out = NULL;
    json_t *root = NULL, *cfg = NULL;
    int rc = load_json(tokenizer_json, 0, &root, err, errlen);
    if (rc) return rc;
    /* model_max_length is often 1e30 written as an integer: read numbers as reals */
    if (config_json && (rc = load_json(config_json, JSON_DECODE_INT_AS_REAL, &cfg, err, errlen))) {
        json_decref(root);
        return rc;
    }
    rc = json_is_object(root) ? hf_build(tokenizer_json, root, cfg, out, err, errlen) : LZ_ECORRUPT;
    if (rc == LZ_ECORRUPT && err && !err[0]) lz_tok_err(err, errlen, "%s: not a JSON object", tokenizer_json);
    if (rc && err && err[0] && !strstr(err, tokenizer_json) && (!config_json || !strstr(err, config_json))) {
        /* a message from a part that does not know the file (tokenizer_bpe.c: byte tokens, the
         * pre-tokenizer regex): named here (fuzz/fuzz_tokenizer_json.c checks every refusal) */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", err);
        lz_tok_err(err, errlen, "%s: %s", tokenizer_json, msg);
    }
    json_decref(cfg);
    json_decref(root);
    return rc;
}
