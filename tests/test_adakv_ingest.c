/* test_adakv_ingest.c - KV eviction end to end on a generated model:
 * lazyingest --kv-policy ada-snapkv --kv-budget 0.5 stores about half the
 * bytes, records policy, budget and window per document (a short document
 * is stored whole as 'none'), passes --check; lazyquery answers from it;
 * lazy and block agree on the unequal per-head lengths and the document
 * cache accounts the smaller bytes; a rerun with the same policy encodes
 * nothing, another policy or budget re-encodes the compressed documents;
 * --repair restores a lost compressed payload under the row's policy;
 * --kv-probe (the question cue as the window) gives a valid store. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/llama.h"
#include "query/retrieve.h"
#include "query/session.h"
#include "tests/store_inner.h"
#include "tests/test.h"

static char dir[256], bin[512], model[600], corpus[600];


/* Runs lazyingest --json with extra args on store; returns the summary (NULL on failure). */
static json_t *ingest(const char *store, const char *args)
{
    char cmd[4096], out[700];
    snprintf(out, sizeof out, "%s/ingest.json", dir);
    snprintf(cmd, sizeof cmd, "%s/lazyingest --json --kv-dtype f32 --threads 2 --model %s --store %s %s %s > %s", bin,
             model, store, args, corpus, out);
    if (lz_test_sh("%s", cmd) != 0) { CHECK(0, "lazyingest failed: %s", cmd); return NULL; }
    json_error_t e;
    json_t *j = json_load_file(out, 0, &e);
    CHECK(j != NULL, "summary JSON: %s", e.text);
    return j;
}

static long long jint(json_t *j, const char *k) { return j ? (long long)json_integer_value(json_object_get(j, k)) : -1; }

static unsigned long long rng = 0x9e3779b97f4a7c15ull;

enum { N_LONG = 10 };

static void write_corpus(void)
{
    FILE *f = fopen(corpus, "w");
    lz_test_write_word_docs(f, N_LONG, 60, 80, &rng);
    fprintf(f, "{\"id\": \"short\", \"text\": \"a small castle.\"}\n");
    fclose(f);
}

/* lazy vs block over the compressed store, and bytes loaded per query */
static void test_sessions(const char *whole, const char *ada)
{
    char err[1024];
    lz_llama *m;
    lz_store *sw, *sa;
    if (lz_llama_load(model, &m, err, sizeof err)) { CHECK(0, "load: %s", err); return; }
    if (lz_store_open(whole, LZ_STORE_RDONLY, &sw, err, sizeof err)) { CHECK(0, "%s", err); lz_llama_free(m); return; }
    if (lz_store_open(ada, LZ_STORE_RDONLY, &sa, err, sizeof err)) { CHECK(0, "%s", err); lz_store_close(sw); lz_llama_free(m); return; }
    lz_query_opts o;
    lz_query_opts_default(&o);
    o.max_new_tokens = 4;
    o.keep_logits = 1;
    lz_query_session *lazy = NULL, *block = NULL, *lw = NULL;
    o.mode = LZ_MODE_LAZY;
    CHECK(lz_query_session_new(m, sa, &o, &lazy, err, sizeof err) == 0, "session: %s", err);
    CHECK(lz_query_session_new(m, sw, &o, &lw, err, sizeof err) == 0, "session: %s", err);
    o.mode = LZ_MODE_BLOCK;
    CHECK(lz_query_session_new(m, sa, &o, &block, err, sizeof err) == 0, "session: %s", err);
    if (lazy && block && lw) {
        const char *pick[3] = {"doc2", "doc5", "doc7"};
        lz_query_doc *da, *dw;
        if (!lz_retrieve_ids(sa, pick, 3, &da, err, sizeof err) && !lz_retrieve_ids(sw, pick, 3, &dw, err, sizeof err)) {
            lz_query_result rl, rb, rw;
            int ok = !lz_query_answer(lazy, "Where is the castle?", da, 3, &rl, err, sizeof err) &&
                     !lz_query_answer(block, "Where is the castle?", da, 3, &rb, err, sizeof err) &&
                     !lz_query_answer(lw, "Where is the castle?", dw, 3, &rw, err, sizeof err);
            CHECK(ok, "answers: %s", err);
            if (ok) {
                double d = lz_test_rel_diff(rl.logits, rb.logits, m->cfg.vocab);
                CHECK(d <= 1e-5, "compressed store: lazy vs block rel diff %g", d);
                CHECK(rl.n_prompt == rw.n_prompt, "a compressed document occupies its full positions (%d vs %d)",
                      rl.n_prompt, rw.n_prompt);
                double ratio = (double)rl.bytes_loaded / (double)rw.bytes_loaded;
                CHECK(ratio > 0.45 && ratio < 0.55, "cache bytes of compressed documents: %.3f of whole", ratio);
                lz_doc_cache_stats st;
                lz_query_cache_stats(lazy, &st);
                CHECK(st.bytes_used == rl.bytes_loaded, "cache accounts %lld bytes, loaded %lld",
                      (long long)st.bytes_used, (long long)rl.bytes_loaded);
                printf("cache bytes per query: whole %lld, ada-snapkv 0.5 %lld (%.3f)\n", (long long)rw.bytes_loaded,
                       (long long)rl.bytes_loaded, ratio);
                lz_query_result_free(&rl); lz_query_result_free(&rb); lz_query_result_free(&rw);
            }
            free(da);
            free(dw);
        } else {
            CHECK(0, "retrieve: %s", err);
        }
    }
    lz_query_session_free(lazy); lz_query_session_free(block); lz_query_session_free(lw);
    lz_store_close(sw);
    lz_store_close(sa);
    lz_llama_free(m);
}

static void test_rows(const char *store)
{
    char err[512], src[256];
    lz_store *s;
    if (lz_store_open(store, LZ_STORE_RDONLY, &s, err, sizeof err)) { CHECK(0, "%s", err); return; }
    lz_meta_doc d;
    CHECK(lz_meta_doc_find(test_store_meta(s), "doc3", &d, src, sizeof src, err, sizeof err) == 0, "find doc3");
    CHECK(!strcmp(d.kv_policy, "ada-snapkv") && !strcmp(d.kv_budget, "0.5") && d.kv_window == 32 &&
              !strcmp(d.kv_spec, "ada-snapkv b=0.5 w=32 k=7 a=0.2 mean"),
          "doc3 row records policy '%s', budget '%s', window %d, spec '%s'", d.kv_policy, d.kv_budget, d.kv_window,
          d.kv_spec);
    CHECK(d.kv_kept > 0 && d.raw_bytes == d.kv_kept * 2 * 4 * 16, "kv_kept %lld, raw bytes %lld",
          (long long)d.kv_kept, (long long)d.raw_bytes);
    CHECK(lz_meta_doc_find(test_store_meta(s), "short", &d, src, sizeof src, err, sizeof err) == 0, "find short");
    CHECK(!strcmp(d.kv_policy, "none") && d.kv_spec[0] == 0, "a short document is stored whole ('%s')", d.kv_policy);
    lz_store_close(s);
}

/* Re-ingests the compressed store with probe option `flag`: every document
 * re-encoded, doc5's spec ends in `suffix` and keeps half its tokens per
 * head, --check is clean and lazyquery answers from it. */
/* Deletes the payload of document ext_id (its row stays): a lost payload for
 * --check and --repair. *d gets the row. Returns 1 on success. */
static int delete_payload(const char *store, const char *ext_id, lz_meta_doc *d)
{
    char err[512], src[256];
    lz_store *s;
    int ok = !lz_store_open(store, LZ_STORE_WRITER, &s, err, sizeof err);
    CHECK(ok, "open: %s", err);
    if (!ok) return 0;
    lz_meta_doc_find(test_store_meta(s), ext_id, d, src, sizeof src, err, sizeof err);
    lz_kvdb_item it = {.key = d->payload_key, .key_len = LZ_META_KEY_LEN};
    int nd = 0;
    ok = lz_kvdb_del_batch(test_store_kvdb(s), &it, 1, &nd, err, sizeof err) == 0 && nd == 1;
    CHECK(ok, "delete the payload of %s", ext_id);
    lz_store_close(s);
    return ok;
}

static void test_probe_run(const char *ada, const char *out, const char *flag, const char *suffix)
{
    char args[2048], err[512], src[256];
    snprintf(args, sizeof args, "--kv-policy ada-snapkv --kv-budget 0.5 %s", flag);
    json_t *j = ingest(ada, args);
    CHECK(jint(j, "updated") == N_LONG + 1, "%s re-encodes (%lld updated)", flag, jint(j, "updated"));
    json_decref(j);
    lz_store *s;
    lz_meta_doc d;
    if (!lz_store_open(ada, LZ_STORE_RDONLY, &s, err, sizeof err)) {
        lz_meta_doc_find(test_store_meta(s), "doc5", &d, src, sizeof src, err, sizeof err);
        CHECK(strstr(d.kv_spec, suffix) != NULL && d.kv_kept == 2L * 2 * (d.n_tokens / 2 + d.n_tokens % 2),
              "%s: spec '%s', kept %lld of %d tokens", flag, d.kv_spec, (long long)d.kv_kept, d.n_tokens);
        lz_store_close(s);
    }
    CHECK(lz_test_sh("%s/lazyingest --check --quiet --store %s > %s 2>&1", bin, ada, out) == 0, "--check after %s", flag);
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 3 --docs doc5,doc6 'castle?' > %s 2>&1", bin, model, ada, out) == 0,
          "lazyquery answers from a store compressed with %s", flag);
}

int main(void)
{
    const char *b = getenv("LZ_BIN");
    if (!b) { printf("SKIP LZ_BIN not set (run through make test)\n"); return lz_test_done(); }
    snprintf(bin, sizeof bin, "%s", b);
    if (!lz_test_tmpdir(dir, sizeof dir)) return 1;
    snprintf(model, sizeof model, "%s/m.gguf", dir);
    snprintf(corpus, sizeof corpus, "%s/corpus.jsonl", dir);
    write_corpus();
    lz_llama_set_threads(2);
    if (lz_test_sh("%s/lazy-mkmodel --dim 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 -o %s", bin, model)) {
        CHECK(0, "lazy-mkmodel");
        return lz_test_done();
    }
    char whole[700], ada[700], out[700];
    snprintf(whole, sizeof whole, "%s/whole", dir);
    snprintf(ada, sizeof ada, "%s/ada", dir);
    snprintf(out, sizeof out, "%s/out.txt", dir);
    json_t *jw = ingest(whole, "");
    json_t *ja = ingest(ada, "--kv-policy ada-snapkv --kv-budget 0.5");
    long long bw = jint(jw, "stored_bytes"), ba = jint(ja, "stored_bytes");
    long long rw = jint(jw, "raw_bytes"), ra = jint(ja, "raw_bytes");
    CHECK(jint(ja, "added") == N_LONG + 1, "all documents added");
    CHECK(ba > 0 && ba < bw * 6 / 10, "stored bytes shrink: %lld -> %lld", bw, ba);
    CHECK(ra > 0 && ra < rw * 6 / 10 && ra > rw * 4 / 10, "raw bytes about half: %lld -> %lld", rw, ra);
    double frac = ja ? json_real_value(json_object_get(ja, "kv_kept_fraction")) : 0;
    CHECK(frac > 0.45 && frac < 0.55, "kept fraction %.3f", frac);
    printf("stored bytes: whole %lld, ada-snapkv 0.5 %lld (%.3f); raw %lld -> %lld\n", bw, ba, (double)ba / bw, rw, ra);
    json_decref(jw);
    json_decref(ja);
    test_rows(ada);
    CHECK(lz_test_sh("%s/lazyingest --check --quiet --store %s > %s 2>&1", bin, ada, out) == 0, "--check passes on a compressed store");
    CHECK(lz_test_sh("%s/lazyquery --model %s --store %s -n 4 'Where is the castle?' > %s 2>&1", bin, model, ada, out) == 0 &&
              lz_test_sh("grep -q '^Sources:' %s", out) == 0,
          "lazyquery answers from the compressed store");
    test_sessions(whole, ada);

    /* reruns: same policy encodes nothing; a changed policy or budget re-encodes the compressed ones */
    json_t *j = ingest(ada, "--kv-policy ada-snapkv --kv-budget 0.5");
    CHECK(jint(j, "unchanged") == N_LONG + 1 && jint(j, "tokens_encoded") == 0, "same policy: unchanged (%lld)",
          jint(j, "unchanged"));
    json_decref(j);
    j = ingest(ada, "--kv-policy snapkv --kv-budget 0.5");
    CHECK(jint(j, "updated") == N_LONG && jint(j, "unchanged") == 1, "snapkv: %lld updated, %lld unchanged",
          jint(j, "updated"), jint(j, "unchanged"));
    json_decref(j);
    j = ingest(ada, "--kv-policy snapkv --kv-budget 0.3");
    CHECK(jint(j, "updated") == N_LONG && jint(j, "payloads_collected") == N_LONG, "budget 0.3: %lld updated",
          jint(j, "updated"));
    json_decref(j);
    j = ingest(ada, "");
    CHECK(jint(j, "updated") == N_LONG && jint(j, "raw_bytes") > rw * 9 / 10,
          "policy none: re-encoded whole (%lld updated)", jint(j, "updated"));
    json_decref(j);
    j = ingest(ada, "--kv-policy pyramidkv --kv-budget 0.5");
    json_decref(j);
    CHECK(lz_test_sh("%s/lazyingest --check --quiet --store %s > %s 2>&1", bin, ada, out) == 0, "--check after pyramidkv");
    /* a lost compressed payload: --repair re-encodes it under the row's own policy, same key */
    {
        char err[512], src[256];
        lz_store *s;
        lz_meta_doc d0, d1;
        int ok = delete_payload(ada, "doc4", &d0);
        CHECK(lz_test_sh("%s/lazyingest --check --quiet --store %s > %s 2>&1", bin, ada, out) == 4, "--check finds the loss (exit 4)");
        CHECK(lz_test_sh("%s/lazyingest --repair --quiet --model %s --store %s > %s 2>&1", bin, model, ada, out) == 0,
              "--repair re-encodes it");
        CHECK(lz_test_sh("%s/lazyingest --check --quiet --store %s > %s 2>&1", bin, ada, out) == 0, "clean after repair");
        if (ok && !lz_store_open(ada, LZ_STORE_RDONLY, &s, err, sizeof err)) {
            lz_meta_doc_find(test_store_meta(s), "doc4", &d1, src, sizeof src, err, sizeof err);
            CHECK(!memcmp(d0.payload_key, d1.payload_key, LZ_META_KEY_LEN) && !strcmp(d1.kv_policy, "pyramidkv") &&
                      d1.raw_bytes == d0.raw_bytes,
                  "repair keeps the key and the policy ('%s')", d1.kv_policy);
            lz_store_close(s);
        }
    }
    /* the question-cue probe, then the reconstruction probe (the document run again) as the
     * observation window: each a different spec, every document re-encoded (no window to keep:
     * the short document is compressed too), a valid store */
    test_probe_run(ada, out, "--kv-probe", " probe");
    test_probe_run(ada, out, "--kv-reconstruct", " recon");
    /* value-aware scores: another spec (" vnorm" last), every document re-encoded again */
    test_probe_run(ada, out, "--kv-reconstruct --kv-value-norm", " recon vnorm");
    /* model scope: one joint selection over every head of every layer; the same total kept */
    test_probe_run(ada, out, "--kv-reconstruct --kv-value-norm --kv-scope model", " recon vnorm model");
    /* a value power: another spec (" vnorm=2"), re-encoded; the self window (no probe run) */
    test_probe_run(ada, out, "--kv-reconstruct --kv-value-power 2 --kv-scope model", " recon vnorm=2 model");
    test_probe_run(ada, out, "--kv-self --kv-value-power 2", " self vnorm=2");
    /* a key-importance model fitted on this corpus's reconstruction scores (a fresh store:
     * every document encoded), then used as the score; refusals */
    char lm[760], fit[760], cmd[2400];
    snprintf(lm, sizeof lm, "%s/m.kvlearn", dir);
    snprintf(fit, sizeof fit, "%s/fit", dir);
    snprintf(cmd, sizeof cmd, "--kv-policy ada-snapkv --kv-budget 0.5 --kv-reconstruct --kv-learn-out %s", lm);
    json_t *jf = ingest(fit, cmd);
    CHECK(jint(jf, "added") == N_LONG + 1 && access(lm, R_OK) == 0, "--kv-learn-out writes the model");
    json_decref(jf);
    snprintf(cmd, sizeof cmd, "--kv-learned %s --kv-value-power 2 --kv-scope model", lm);
    test_probe_run(ada, out, cmd, " learned=");
    CHECK(lz_test_sh("%s/lazyingest --model %s --store %s --kv-policy snapkv --kv-budget 0.5 --kv-learn-out %s %s > %s "
                     "2>&1", bin, model, fit, lm, corpus, out) == 2 &&
              lz_test_sh("grep -q 'needs a corpus, --kv-policy, --kv-budget and --kv-reconstruct' %s", out) == 0,
          "--kv-learn-out without --kv-reconstruct refused (a usage error: exit 2)");
    CHECK(lz_test_sh("%s/lazyingest --model %s --store %s --kv-policy ada-snapkv --kv-budget 0.5 --kv-reconstruct "
                     "--kv-learn-out %s.2 %s > %s 2>&1", bin, model, fit, lm, corpus, out) == 1 &&
              lz_test_sh("grep -q 'no document was encoded' %s", out) == 0,
          "--kv-learn-out on a store where nothing changes: exit 1, says why");
    { /* a model file of another model (same shape, other weights) is refused, naming it */
        char m2[700], st2[700];
        snprintf(m2, sizeof m2, "%s/m2.gguf", dir);
        snprintf(st2, sizeof st2, "%s/other", dir);
        CHECK(lz_test_sh("%s/lazy-mkmodel --dim 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 --seed 2 -o %s", bin,
                         m2) == 0 &&
                  lz_test_sh("%s/lazyingest --model %s --store %s --kv-policy snapkv --kv-budget 0.5 --kv-learned %s %s "
                             "> %s 2>&1", bin, m2, st2, lm, corpus, out) == 1 &&
                  lz_test_sh("grep -q 'was fitted for another model' %s", out) == 0,
              "a key-importance model of another model: exit 1, says so");
        CHECK(access(st2, F_OK) != 0, "the refused run created no store at %s", st2);
        /* an unreadable model file: refused before the store is opened too */
        CHECK(lz_test_sh("head -c 1000 %s > %s.cut", model, m2) == 0 &&
                  lz_test_sh("%s/lazyingest --model %s.cut --store %s %s > %s 2>&1", bin, m2, st2, corpus, out) == 1 &&
                  access(st2, F_OK) != 0,
              "a truncated model file: exit 1, no store created");
    }
    CHECK(lz_test_sh("printf 'X' | dd of=%s bs=1 seek=100 conv=notrunc 2>/dev/null", lm) == 0 &&
              lz_test_sh("%s/lazyingest --model %s --store %s --kv-policy snapkv --kv-budget 0.5 --kv-learned %s %s > %s "
                         "2>&1", bin, model, ada, lm, corpus, out) == 1 &&
              lz_test_sh("grep -q 'checksum mismatch' %s && grep -q '%s' %s", out, lm, out) == 0,
          "a corrupted model file: exit 1, the error names the file");
    CHECK(lz_test_sh("%s/lazyingest --check --quiet --store %s > %s 2>&1", bin, ada, out) == 0,
          "the store is untouched by the refused run");
    CHECK(lz_test_sh("%s/lazyingest --model %s --store %s --kv-policy snapkv --kv-budget 0.5 --kv-value-power 0 %s > %s "
                     "2>&1", bin, model, ada, corpus, out) == 2, "--kv-value-power 0: exit 2");
    CHECK(lz_test_sh("%s/lazyingest --model %s --store %s --kv-policy snapkv --kv-budget 0.5 --kv-scope model %s > %s 2>&1",
                     bin, model, ada, corpus, out) == 2, "--kv-scope model with snapkv: exit 2");
    {
        size_t len;
        char *msg = lz_test_read_file(out, &len);
        CHECK(msg && strstr(msg, "--kv-scope model needs --kv-policy ada-snapkv"), "error names the option: %s", msg ? msg : "");
        free(msg);
    }
    /* a probe question: its hash in the spec, every document re-encoded; bad text refused */
    test_probe_run(ada, out, "--kv-probe-text 'Where is the castle?'", " probe=");
    CHECK(lz_test_sh("%s/lazyingest --model %s --store %s --kv-policy snapkv --kv-budget 0.5 --kv-probe-text "
                     "\"$(printf '\\377')\" %s > %s 2>&1",
                     bin, model, ada, corpus, out) == 2, "--kv-probe-text with invalid UTF-8: exit 2");
    {
        size_t len;
        char *msg = lz_test_read_file(out, &len);
        CHECK(msg && strstr(msg, "--kv-probe-text: not valid UTF-8"), "error names the option: %s", msg ? msg : "");
        free(msg);
    }
    /* --repair of a document compressed with a probe question needs the same question */
    {
        lz_meta_doc d;
        if (delete_payload(ada, "doc5", &d)) {
            CHECK(lz_test_sh("%s/lazyingest --repair --model %s --store %s > %s 2>&1", bin, model, ada, out) == 4,
                  "--repair without the question leaves it (exit 4)");
            size_t len;
            char *msg = lz_test_read_file(out, &len);
            CHECK(msg && strstr(msg, "doc5") && strstr(msg, "same --kv-probe-text"), "and says why: %s", msg ? msg : "");
            free(msg);
            CHECK(lz_test_sh("%s/lazyingest --repair --quiet --model %s --store %s --kv-probe-text 'Where is the castle?' "
                             "> %s 2>&1", bin, model, ada, out) == 0, "--repair with the question re-encodes it");
            CHECK(lz_test_sh("%s/lazyingest --check --quiet --store %s > %s 2>&1", bin, ada, out) == 0,
                  "clean after that repair");
        }
    }
    CHECK(lz_test_sh("%s/lazyingest --kv-policy snapkv --store %s %s > %s 2>&1", bin, ada, corpus, out) == 2 &&
              lz_test_sh("grep -q 'needs --kv-budget' %s", out) == 0,
          "--kv-policy without --kv-budget refused (exit 2)");
    CHECK(lz_test_sh("%s/lazyingest --kv-policy x --kv-budget 0.2 --store %s %s > %s 2>&1", bin, ada, corpus, out) == 2 &&
              lz_test_sh("%s/lazyingest --kv-policy snapkv --kv-budget 1.5 --store %s %s > %s 2>&1", bin, ada, corpus, out) == 2,
          "bad policy or budget refused (exit 2)");
    lz_test_sh("rm -rf %s", dir);
    return lz_test_done();
}
