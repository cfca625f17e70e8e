/* test_slots.c - a backend of slots (lz_query_backend.n_slots: several
 * sequences at once, the GPU engine's shape) behind the query session and the
 * scheduler, with the CPU engine standing in for the GPU: each slot a local
 * KV cache over the segments its begin was handed, prefill_many and
 * decode_many one lz_llama_forward_batch over the slots. Checks: batched
 * greedy answers through the scheduler equal each one answered alone (the
 * backend of one sequence, answer by answer); requests join and leave the
 * running batch and the passes run several slots at once (prefill and decode
 * calls of more than one row); no more live than the backend's slots; a
 * slot is reused after release and every slot is released at the end
 * (cancelled and failed requests too); the backend's fits holds admission
 * back (one runs at a time when nothing more fits) without failing anyone; a
 * request past seq_tokens fails with its message; the slots' bookkeeping
 * across a fake backend failing a decode pass; a begin that fails for memory
 * once fits said yes goes back to the queue's head while another request
 * runs and is begun again when that one ends (no request overtakes it), and
 * fails with a clear message when nothing else runs; that decision is by the
 * status (LZ_QUERY_ENOMEM, whatever the message says; -1 fails even when the
 * message says "out of memory"), which the run API passes on unchanged. And
 * decode_next (greedy tokens chosen where the logits are, lz_argmax_ref here):
 * answers greedy, greedy with ignore_eos and sampled, batched and of the one
 * sequence, equal those of the same backend without the hook, the greedy rows
 * asking for no logits and the sampled ones for theirs. */
#include <time.h>

#include "kernels/lz_argmax.h"
#include "query/answer_run.h"
#include "query/retrieve.h"
#include "query/session.h"
#include "serve/sched.h"
#include "tests/serve_test.h"
#include "tests/test.h"

#define NQ 12
#define SLOTS 5
static char dir[256];
static char *questions[NQ];
static char *ctx_ids[NQ][10];
static int n_ctx[NQ];
static lz_llama *model;
static lz_store *store;

/* The stand-in: SLOTS sequences on the CPU engine. */
typedef struct {
    lz_llama *m;
    lz_llama_scratch *sc;
    struct {
        int live;
        lz_kv_segment segs[16]; /* the begin's (pointers into the run's memory, alive until release) */
        int n_segs;
        lz_kv_cache cache;
        int64_t doc_tokens; /* its documents' (the prefix aside) */
    } slot[SLOTS];
    int n_slots, seq_tokens;
    int live, peak_live, begins, releases, bad;
    int prefill_calls, prefill_multi, decode_calls, decode_multi, decode_rows, single_calls;
    int64_t fits_cap, live_tokens; /* documents' tokens the live sequences may pin (0: any), and pin */
    int fail_at;                   /* the decode_many call of that number fails (0: none) */
    int begin_calls;               /* begin_in calls, failed ones too */
    int fail_begin, fail_from;     /* the begin_in call of that number fails, or every one from it (0: none), */
    int fail_rc;                   /* returning this (LZ_QUERY_ENOMEM: for memory, as the GPU engine's) */
    const char *fail_msg;          /* with this message */
    int fail_prefill;              /* the prefill_many call of that number fails with fail_rc (0: none) */
    int64_t begun_tokens[64];      /* the documents' tokens of each begin that succeeded, in order */
    int next_calls, next_greedy_rows, next_logit_rows; /* decode_next: passes, rows without and with logits */
    int n_begun;
} slots_backend;

static int sb_idle(void *ctx)
{
    slots_backend *f = ctx;
    for (int i = 0; i < f->n_slots; i++)
        if (!f->slot[i].live) return i;
    return -1;
}

static int sb_begin_in(void *ctx, int slot, int block, const lz_kv_segment *segs, const uint8_t *const *keys,
                       int n_segs, int64_t pos0, char *err, size_t errlen)
{
    (void)keys;
    slots_backend *f = ctx;
    if (slot < 0 || slot >= f->n_slots || f->slot[slot].live || block || n_segs > 16) {
        f->bad++;
        snprintf(err, errlen, "fake: bad begin (slot %d)", slot);
        return -1;
    }
    for (int i = 0; i < n_segs; i++)
        if (!segs[i].k && !segs[i].k16) f->bad++; /* no resident hook: every segment comes with its data */
    const int call = ++f->begin_calls;
    if (call == f->fail_begin || (f->fail_from && call >= f->fail_from)) {
        snprintf(err, errlen, "%s", f->fail_msg);
        return f->fail_rc;
    }
    memcpy(f->slot[slot].segs, segs, (size_t)n_segs * sizeof *segs);
    f->slot[slot].n_segs = n_segs;
    f->slot[slot].doc_tokens = 0;
    for (int i = 1; i < n_segs; i++) f->slot[slot].doc_tokens += segs[i].n; /* segment 0: the prompt prefix */
    f->live_tokens += f->slot[slot].doc_tokens;
    lz_kv_cache_reset(&f->slot[slot].cache, pos0);
    f->slot[slot].live = 1;
    f->begins++;
    if (f->n_begun < 64) f->begun_tokens[f->n_begun++] = f->slot[slot].doc_tokens;
    if (++f->live > f->peak_live) f->peak_live = f->live;
    return 0;
}

static int sb_step_in(void *ctx, int slot, const int *ids, int n, float *logits, char *err, size_t errlen)
{
    slots_backend *f = ctx;
    if (slot < 0 || slot >= f->n_slots || !f->slot[slot].live) { f->bad++; snprintf(err, errlen, "fake: slot"); return -1; }
    f->single_calls++;
    if (lz_llama_forward(f->m, f->sc, &f->slot[slot].cache, f->slot[slot].segs, f->slot[slot].n_segs, ids, n, logits,
                         logits ? LZ_LOGITS_LAST : LZ_LOGITS_NONE)) {
        snprintf(err, errlen, "fake: forward pass failed");
        return -1;
    }
    return 0;
}

static void sb_release(void *ctx, int slot)
{
    slots_backend *f = ctx;
    if (slot < 0 || slot >= f->n_slots || !f->slot[slot].live) return;
    f->slot[slot].live = 0;
    f->live_tokens -= f->slot[slot].doc_tokens;
    f->live--;
    f->releases++;
}

/* n sequences of ns[i] rows in one lz_llama_forward_batch. */
static int sb_batch(slots_backend *f, const int *slots, const int *const *ids, const int *ns, int n,
                    float *const *logits, char *err, size_t errlen)
{
    lz_llama_seq seqs[SLOTS];
    if (n < 1 || n > f->n_slots) { f->bad++; snprintf(err, errlen, "fake: %d sequences", n); return -1; }
    for (int i = 0; i < n; i++) {
        if (slots[i] < 0 || slots[i] >= f->n_slots || !f->slot[slots[i]].live) { f->bad++; return -1; }
        seqs[i] = (lz_llama_seq){.cache = &f->slot[slots[i]].cache, .segs = f->slot[slots[i]].segs,
                                 .n_segs = f->slot[slots[i]].n_segs, .tokens = ids[i], .n = ns[i], .logits = logits[i]};
    }
    if (lz_llama_forward_batch(f->m, f->sc, seqs, n)) { snprintf(err, errlen, "fake: forward pass failed"); return -1; }
    return 0;
}

static int sb_prefill_many(void *ctx, const int *slots, const int *const *ids, const int *n, int n_seqs,
                           float *const *logits, char *err, size_t errlen)
{
    slots_backend *f = ctx;
    if (++f->prefill_calls == f->fail_prefill) {
        snprintf(err, errlen, "%s", f->fail_msg);
        return f->fail_rc;
    }
    f->prefill_multi += n_seqs > 1;
    return sb_batch(f, slots, ids, n, n_seqs, logits, err, errlen);
}

static int sb_decode_many(void *ctx, const int *slots, const int *ids, int n, float *const *logits, char *err,
                          size_t errlen)
{
    slots_backend *f = ctx;
    const int *rows[SLOTS];
    int ones[SLOTS];
    for (int i = 0; i < n && i < SLOTS; i++) rows[i] = &ids[i], ones[i] = 1;
    if (++f->decode_calls == f->fail_at) {
        snprintf(err, errlen, "fake: the device fell over");
        return -1;
    }
    f->decode_multi += n > 1;
    f->decode_rows += n;
    return sb_batch(f, slots, rows, ones, n, logits, err, errlen);
}

/* decode_next: the pass on the CPU, every row's logits (its own buffer when not wanted), then
 * each row's greedy tokens by lz_argmax_ref; slots NULL: the one sequence (slot 0). */
static int sb_decode_next(void *ctx, const int *slots, const int *ids, int n, float *const *logits, int *next,
                          const int *ban, int n_ban, char *err, size_t errlen)
{
    slots_backend *f = ctx;
    const int zero = 0, V = f->m->cfg.vocab;
    int list[1 + LZ_ARGMAX_MAX_BAN];
    if (n < 1 || n > SLOTS || n_ban < 0 || n_ban > LZ_ARGMAX_MAX_BAN || (!slots && n != 1)) {
        f->bad++;
        snprintf(err, errlen, "fake: decode_next of %d rows, %d banned", n, n_ban);
        return -1;
    }
    list[0] = n_ban;
    if (n_ban) memcpy(list + 1, ban, (size_t)n_ban * sizeof *ban);
    float *own = malloc((size_t)n * V * sizeof *own), *rows[SLOTS];
    if (!own) { snprintf(err, errlen, "out of memory"); return LZ_QUERY_ENOMEM; }
    f->next_calls++;
    for (int i = 0; i < n; i++) {
        rows[i] = logits[i] ? logits[i] : own + (size_t)i * V;
        f->next_greedy_rows += !logits[i];
        f->next_logit_rows += logits[i] != NULL;
    }
    int rc;
    if (slots) rc = sb_decode_many(ctx, slots, ids, n, rows, err, errlen);
    else rc = sb_step_in(ctx, zero, ids, 1, rows[0], err, errlen);
    for (int i = 0; !rc && i < n; i++) lz_argmax_ref(next + 2 * i, rows[i], 1, V, (size_t)V, list, NULL);
    free(own);
    return rc;
}

static int sb_fits(void *ctx, int64_t doc_tokens)
{
    slots_backend *f = ctx;
    return !f->fits_cap || f->live_tokens + doc_tokens <= f->fits_cap;
}

/* The one-sequence hooks (a backend of one slot: slot 0), for the serial answers. */
static int sb_begin(void *ctx, const lz_kv_segment *segs, const uint8_t *const *keys, int n_segs, int64_t pos0,
                    char *err, size_t errlen)
{
    slots_backend *f = ctx;
    sb_release(f, 0);
    return sb_begin_in(f, 0, 0, segs, keys, n_segs, pos0, err, errlen);
}

static int sb_step(void *ctx, const int *ids, int n, float *logits, char *err, size_t errlen)
{
    return sb_step_in(ctx, 0, ids, n, logits, err, errlen);
}

static int sb_init(slots_backend *f, int seq_tokens)
{
    memset(f, 0, sizeof *f);
    f->m = model;
    f->n_slots = SLOTS;
    f->seq_tokens = seq_tokens;
    f->fail_rc = LZ_QUERY_ENOMEM; /* and the GPU engine's message */
    f->fail_msg = "GPU: no device memory for 12.6 MB more of document KV (the pool holds 80.0 MB): out of memory";
    if (!(f->sc = lz_llama_scratch_new(model, 64))) return -1;
    for (int i = 0; i < SLOTS; i++)
        if (lz_kv_cache_init(&f->slot[i].cache, &model->cfg, seq_tokens)) return -1;
    return 0;
}

static void sb_free(slots_backend *f)
{
    for (int i = 0; i < SLOTS; i++) lz_kv_cache_free(&f->slot[i].cache);
    lz_llama_scratch_free(f->sc);
}

static lz_query_backend sb_backend(slots_backend *f, int slotted)
{
    lz_query_backend b = {.ctx = f, .begin = sb_begin, .step = sb_step};
    if (slotted == 2) /* the one sequence, with decode_next */
        b.decode_next = sb_decode_next;
    else if (slotted)
        b = (lz_query_backend){.ctx = f, .begin = sb_begin, .step = sb_step, .n_slots = f->n_slots,
                               .seq_tokens = f->seq_tokens, .idle_slot = sb_idle, .begin_in = sb_begin_in,
                               .step_in = sb_step_in, .release = sb_release, .prefill_many = sb_prefill_many,
                               .decode_many = sb_decode_many, .fits = sb_fits};
    if (slotted == 3) b.decode_next = sb_decode_next; /* slots, with decode_next */
    return b;
}

/* Two fakes (sb_init, 1,024 tokens a slot) behind sessions of their own, fa as sb_backend kind
 * ka says and fb as kb says (ba, bb: the tables the sessions point at, alive as long): 0, or -1
 * with the failure checked and nothing left open. */
static int sb_pair_open(slots_backend *fa, int ka, lz_query_backend *ba, lz_query_session **qa, slots_backend *fb,
                        int kb, lz_query_backend *bb, lz_query_session **qb)
{
    *qa = *qb = NULL;
    if (sb_init(fa, 1024)) { CHECK(0, "backend"); return -1; }
    if (sb_init(fb, 1024)) { CHECK(0, "backend"); sb_free(fa); return -1; }
    *ba = sb_backend(fa, ka), *bb = sb_backend(fb, kb);
    *qa = lz_test_open_session(model, store, 48, ba), *qb = lz_test_open_session(model, store, 48, bb);
    if (*qa && *qb) return 0;
    lz_query_session_free(*qa);
    lz_query_session_free(*qb);
    sb_free(fa);
    sb_free(fb);
    return -1;
}

static void sb_pair_close(slots_backend *fa, lz_query_session *qa, slots_backend *fb, lz_query_session *qb)
{
    lz_query_session_free(qa);
    lz_query_session_free(qb);
    sb_free(fa);
    sb_free(fb);
}

/* Question i's greedy answer of max_new tokens alone, on the backend of one sequence. */
static char *serial_answer(lz_query_session *q, int i, int max_new)
{
    lz_query_doc *docs;
    int n;
    char err[512];
    if (lz_retrieve_resolve_ids(store, (const char *const *)ctx_ids[i], n_ctx[i], &docs, &n, err, sizeof err)) {
        CHECK(0, "ids %d: %s", i, err);
        return strdup("");
    }
    lz_query_run_opts ro = {.max_new_tokens = max_new, .top_p = 1.0f, .seed = 7};
    lz_query_run *r;
    char *a = NULL;
    if (lz_query_run_start(q, questions[i], docs, n, &ro, &r, err, sizeof err)) {
        CHECK(0, "serial %d: %s", i, err);
    } else {
        for (;;) {
            const char *p;
            int pl;
            lz_query_run_next(r, &p, &pl);
            if (lz_query_run_done(r)) break;
            if (lz_query_run_step(q, &r, 1, err, sizeof err)) { CHECK(0, "serial step: %s", err); break; }
        }
        lz_query_result res;
        lz_query_run_finish(r, &res);
        a = strdup(res.answer ? res.answer : "");
        lz_query_result_free(&res);
    }
    free(docs);
    return a ? a : strdup("");
}

/* Requests of mixed lengths in two waves through the scheduler on the backend of slots: each
 * equals its answer alone; the passes ran several slots; at most SLOTS live; all released. */
static void test_batched_equals_serial(void)
{
    enum { N = 16 };
    const int lens[4] = {2, 7, 19, 40};
    slots_backend f1, fs;
    lz_query_backend b1, bs;
    lz_query_session *q1, *qs;
    if (sb_pair_open(&f1, 0, &b1, &q1, &fs, 1, &bs, &qs)) return;
    CHECK(lz_query_run_parallel(q1) == 1 && lz_query_run_parallel(qs) == SLOTS, "parallel: %d, %d",
          lz_query_run_parallel(q1), lz_query_run_parallel(qs));
    char *want[N];
    for (int i = 0; i < N; i++) want[i] = serial_answer(q1, i % NQ, lens[i % 4]);
    CHECK(f1.bad == 0 && f1.peak_live == 1, "one sequence at a time (%d bad calls)", f1.bad);
    lz_serve_sched_opts so;
    lz_serve_sched_opts_default(&so);
    so.max_prefill = 3;
    lz_serve_sched *s;
    char err[512];
    if (lz_serve_sched_new(qs, store, &so, &s, err, sizeof err)) { CHECK(0, "sched: %s", err); return; }
    lz_serve_ticket *t[N] = {0};
    for (int i = 0; i < N; i++) {
        if (i == N / 2) lz_test_sleep_ms(40); /* the second wave joins a running batch */
        lz_serve_req rq = lz_test_greedy_req(questions[i % NQ], ctx_ids[i % NQ], n_ctx[i % NQ], lens[i % 4]);
        CHECK(lz_serve_submit(s, &rq, &t[i], err, sizeof err) == LZ_SERVE_OK, "submit %d: %s", i, err);
    }
    int same = 0;
    for (int i = 0; i < N; i++) {
        if (!t[i]) continue;
        lz_serve_update u;
        char *got = lz_test_drain(t[i], &u);
        CHECK(u.state == LZ_SERVE_DONE, "request %d: state %d (%s)", i, u.state, u.error);
        const int eq = !strcmp(got, want[i]);
        same += eq;
        CHECK(eq, "request %d (max %d): batched '%s' vs alone '%s'", i, lens[i % 4], got, want[i]);
        free(got);
        lz_serve_release(t[i]);
    }
    lz_serve_stats st;
    lz_test_settle(s, &st);
    printf("slots: %d of %d batched greedy answers equal their answers alone; %d prefill passes (%d of several), %d "
           "decode passes (%d of several, mean %.1f rows), peak %d live of %d slots\n", same, N, fs.prefill_calls,
           fs.prefill_multi, fs.decode_calls, fs.decode_multi, fs.decode_calls ? (double)fs.decode_rows / fs.decode_calls : 0,
           fs.peak_live, SLOTS);
    CHECK(fs.decode_multi > 0 && fs.prefill_multi > 0, "passes of several slots (%d decode, %d prefill)", fs.decode_multi,
          fs.prefill_multi);
    CHECK(fs.peak_live > 1 && fs.peak_live <= SLOTS && st.peak_running <= SLOTS, "live %d, running %d, at most %d",
          fs.peak_live, st.peak_running, SLOTS);
    CHECK(fs.live == 0 && fs.begins == N && fs.releases == N && fs.bad == 0,
          "every slot released (%d live, %d begins, %d releases, %d bad calls)", fs.live, fs.begins, fs.releases, fs.bad);
    CHECK(fs.begins > SLOTS, "slots reused after release");
    CHECK(fs.single_calls == 0, "no one-by-one step on a backend of slots (%d)", fs.single_calls);
    lz_serve_sched_free(s);
    for (int i = 0; i < N; i++) free(want[i]);
    sb_pair_close(&f1, q1, &fs, qs);
}

/* Admission by the backend's memory: with room for one request's documents at a time, requests
 * run one after another, none fails; seq_tokens: a request past it fails with the bound in its
 * message; a cancelled request and a failed decode pass release their slots. */
static void test_admission_and_release(void)
{
    slots_backend fs;
    if (sb_init(&fs, 96)) { CHECK(0, "backend"); return; }
    const lz_query_backend bs = sb_backend(&fs, 1);
    lz_query_session *q = lz_test_open_session(model, store, 48, &bs);
    if (!q) return;
    lz_serve_sched_opts so;
    lz_serve_sched_opts_default(&so);
    lz_serve_sched *s;
    char err[512];
    /* fits: room for the documents of one request at a time (six of the same question) */
    lz_query_doc *docs;
    int nd;
    if (lz_retrieve_resolve_ids(store, (const char *const *)ctx_ids[0], n_ctx[0], &docs, &nd, err, sizeof err)) {
        CHECK(0, "ids: %s", err);
        return;
    }
    for (int k = 0; k < nd; k++) fs.fits_cap += docs[k].n_tokens;
    free(docs);
    if (lz_serve_sched_new(q, store, &so, &s, err, sizeof err)) { CHECK(0, "sched: %s", err); return; }
    lz_serve_ticket *t[6] = {0};
    for (int i = 0; i < 6; i++) {
        lz_serve_req rq = lz_test_greedy_req(questions[0], ctx_ids[0], n_ctx[0], 6);
        CHECK(lz_serve_submit(s, &rq, &t[i], err, sizeof err) == LZ_SERVE_OK, "submit %d: %s", i, err);
    }
    int done = 0;
    for (int i = 0; i < 6; i++) {
        lz_serve_update u;
        free(lz_test_drain(t[i], &u));
        done += u.state == LZ_SERVE_DONE;
        lz_serve_release(t[i]);
    }
    lz_serve_stats st;
    lz_test_settle(s, &st);
    CHECK(done == 6 && fs.peak_live == 1 && st.peak_running == 1,
          "fits held admission back: %d done, peak %d live, %d running", done, fs.peak_live, st.peak_running);
    fs.fits_cap = 0;
    /* past seq_tokens (96 own tokens: the question and 90 answer tokens do not fit) */
    lz_serve_ticket *big;
    lz_serve_req rq = lz_test_greedy_req(questions[0], ctx_ids[0], n_ctx[0], 90);
    CHECK(lz_serve_submit(s, &rq, &big, err, sizeof err) == LZ_SERVE_OK, "submit: %s", err);
    lz_serve_update u;
    free(lz_test_drain(big, &u));
    CHECK(u.state == LZ_SERVE_FAILED && strstr(u.error, "holds 96"), "past seq_tokens: state %d (%s)", u.state, u.error);
    lz_serve_release(big);
    /* a failed decode pass: every running request fails, their slots released */
    fs.fail_at = fs.decode_calls + 3;
    lz_serve_ticket *two[2];
    for (int i = 0; i < 2; i++) {
        lz_serve_req r2 = lz_test_greedy_req(questions[i], ctx_ids[i], n_ctx[i], 40);
        r2.ignore_eos = 1;
        CHECK(lz_serve_submit(s, &r2, &two[i], err, sizeof err) == LZ_SERVE_OK, "submit: %s", err);
    }
    int failed = 0;
    for (int i = 0; i < 2; i++) {
        free(lz_test_drain(two[i], &u));
        failed += u.state == LZ_SERVE_FAILED && strstr(u.error, "fell over") != NULL;
        lz_serve_release(two[i]);
    }
    lz_test_settle(s, &st);
    CHECK(failed >= 1, "a failed pass fails its requests (%d)", failed);
    /* a cancelled running request frees its slot */
    lz_serve_ticket *c;
    lz_serve_req r3 = lz_test_greedy_req(questions[3], ctx_ids[3], n_ctx[3], 40);
    r3.ignore_eos = 1;
    CHECK(lz_serve_submit(s, &r3, &c, err, sizeof err) == LZ_SERVE_OK, "submit: %s", err);
    for (int i = 0; i < 200 && fs.live == 0; i++) lz_test_sleep_ms(2);
    lz_serve_release(c);
    lz_test_settle(s, &st);
    for (int i = 0; i < 200 && fs.live; i++) lz_test_sleep_ms(2);
    CHECK(fs.live == 0 && fs.begins == fs.releases && fs.bad == 0,
          "every slot released after failures and a cancellation (%d live, %d begins, %d releases, %d bad)", fs.live,
          fs.begins, fs.releases, fs.bad);
    printf("slots: admission by the backend's memory (one at a time when one fits), seq_tokens, a failed pass and a "
           "cancellation: %d begins, %d releases\n", fs.begins, fs.releases);
    lz_serve_sched_free(s);
    lz_query_session_free(q);
    sb_free(&fs);
}

/* The documents' tokens of question i (as a begin's segments count them). */
static int64_t doc_tokens_of(int i)
{
    lz_query_doc *docs;
    int n;
    char err[512];
    if (lz_retrieve_resolve_ids(store, (const char *const *)ctx_ids[i], n_ctx[i], &docs, &n, err, sizeof err)) return -1;
    int64_t t = 0;
    for (int k = 0; k < n; k++) t += docs[k].n_tokens;
    free(docs);
    return t;
}

/* Waits until the fake holds `live` sequences (at most 2 s). */
static void wait_live(slots_backend *f, int live)
{
    for (int i = 0; i < 1000 && f->live != live; i++) lz_test_sleep_ms(2);
}

/* A begin that fails for memory after admission (fits said yes): while another request runs it
 * goes back to the queue's head, the request admitted after it stays behind it, and both are
 * begun once the running one has ended, answering what they answer alone; with nothing else
 * running the request fails with a message saying so, and so does one whose begin fails again
 * when alone (retried once, not in a loop). */
static void test_memory_retry(void)
{
    slots_backend f1, fs;
    lz_query_backend b1, bs;
    lz_query_session *q1, *q;
    if (sb_pair_open(&f1, 0, &b1, &q1, &fs, 1, &bs, &q)) return;
    const int A = 0, B = 1, D = 2;
    const int64_t tb = doc_tokens_of(B), td = doc_tokens_of(D);
    CHECK(tb > 0 && td > 0 && tb != td, "questions %d and %d place different documents (%lld, %lld tokens)", B, D,
          (long long)tb, (long long)td);
    char *want_b = serial_answer(q1, B, 6), *want_d = serial_answer(q1, D, 6);
    lz_serve_sched_opts so;
    lz_serve_sched_opts_default(&so);
    lz_serve_sched *s;
    char err[512];
    if (lz_serve_sched_new(q, store, &so, &s, err, sizeof err)) { CHECK(0, "sched: %s", err); return; }
    /* A runs; B's first begin (the second call) finds no memory; D arrives with B */
    fs.fail_begin = 2;
    lz_serve_req ra = lz_test_greedy_req(questions[A], ctx_ids[A], n_ctx[A], 40), rb = lz_test_greedy_req(questions[B], ctx_ids[B], n_ctx[B], 6), rd = lz_test_greedy_req(questions[D], ctx_ids[D], n_ctx[D], 6);
    ra.ignore_eos = 1;
    lz_serve_ticket *ta, *tb_, *td_;
    CHECK(lz_serve_submit(s, &ra, &ta, err, sizeof err) == LZ_SERVE_OK, "submit A: %s", err);
    wait_live(&fs, 1);
    CHECK(lz_serve_submit(s, &rb, &tb_, err, sizeof err) == LZ_SERVE_OK, "submit B: %s", err);
    CHECK(lz_serve_submit(s, &rd, &td_, err, sizeof err) == LZ_SERVE_OK, "submit D: %s", err);
    lz_serve_update ub, ud, ua;
    char *got_b = lz_test_drain(tb_, &ub), *got_d = lz_test_drain(td_, &ud);
    free(lz_test_drain(ta, &ua));
    CHECK(ua.state == LZ_SERVE_DONE && ua.timing.n_completion == 40, "A answered whole (state %d, %d tokens: %s)",
          ua.state, ua.timing.n_completion, ua.error);
    CHECK(ub.state == LZ_SERVE_DONE && !strcmp(got_b, want_b), "B retried and answered: state %d (%s) '%s' vs alone "
          "'%s'", ub.state, ub.error, got_b, want_b);
    CHECK(ud.state == LZ_SERVE_DONE && !strcmp(got_d, want_d), "D answered: state %d (%s) '%s' vs alone '%s'", ud.state,
          ud.error, got_d, want_d);
    lz_serve_stats st;
    lz_test_settle(s, &st);
    CHECK(st.mem_retries == 1 && fs.begin_calls == 4, "one retry: %lld retries, %d begin calls (A, B failed, B, D)",
          (long long)st.mem_retries, fs.begin_calls);
    CHECK(fs.n_begun == 3 && fs.begun_tokens[1] == tb && fs.begun_tokens[2] == td,
          "B begun before D (its place at the head kept): %d begun, tokens %lld then %lld (B %lld, D %lld)",
          fs.n_begun, (long long)fs.begun_tokens[1], (long long)fs.begun_tokens[2], (long long)tb, (long long)td);
    CHECK(ub.timing.queue_s > 0 && ub.timing.ttft_s >= ub.timing.queue_s, "B's timings: queued %.4f s (the wait "
          "counted), first token at %.4f s", ub.timing.queue_s, ub.timing.ttft_s);
    lz_serve_release(ta);
    lz_serve_release(tb_);
    lz_serve_release(td_);
    free(got_b);
    free(got_d);
    /* nothing else running: the request fails at once, saying why */
    fs.fail_begin = fs.begin_calls + 1;
    lz_serve_ticket *tc;
    CHECK(lz_serve_submit(s, &rb, &tc, err, sizeof err) == LZ_SERVE_OK, "submit C: %s", err);
    lz_serve_update uc;
    free(lz_test_drain(tc, &uc));
    CHECK(uc.state == LZ_SERVE_FAILED && uc.status == 500 && strstr(uc.error, "no other request running") &&
          strstr(uc.error, "no device memory"), "alone: state %d, status %d (%s)", uc.state, uc.status, uc.error);
    lz_serve_release(tc);
    lz_test_settle(s, &st);
    CHECK(st.mem_retries == 1, "no retry with nothing running (%lld)", (long long)st.mem_retries);
    /* a begin failing every time: retried once after the running one ends, then failed alone */
    lz_serve_ticket *ta2, *tb2;
    CHECK(lz_serve_submit(s, &ra, &ta2, err, sizeof err) == LZ_SERVE_OK, "submit A2: %s", err);
    wait_live(&fs, 1);
    fs.fail_from = fs.begin_calls + 1;
    const int calls0 = fs.begin_calls;
    CHECK(lz_serve_submit(s, &rb, &tb2, err, sizeof err) == LZ_SERVE_OK, "submit B2: %s", err);
    lz_serve_update ub2, ua2;
    free(lz_test_drain(tb2, &ub2));
    free(lz_test_drain(ta2, &ua2));
    lz_test_settle(s, &st);
    CHECK(ua2.state == LZ_SERVE_DONE, "A2 answered (%s)", ua2.error);
    CHECK(ub2.state == LZ_SERVE_FAILED && strstr(ub2.error, "no other request running") && fs.begin_calls == calls0 + 2 &&
          st.mem_retries == 2, "failing again alone: state %d (%s), %d begins tried, %lld retries", ub2.state, ub2.error,
          fs.begin_calls - calls0, (long long)st.mem_retries);
    lz_serve_release(ta2);
    lz_serve_release(tb2);
    fs.fail_from = 0;
    /* and it serves on */
    lz_serve_ticket *te;
    CHECK(lz_serve_submit(s, &rd, &te, err, sizeof err) == LZ_SERVE_OK, "submit E: %s", err);
    lz_serve_update ue;
    char *got_e = lz_test_drain(te, &ue);
    CHECK(ue.state == LZ_SERVE_DONE && !strcmp(got_e, want_d), "served after (%s)", ue.error);
    free(got_e);
    lz_serve_release(te);
    lz_test_settle(s, &st);
    CHECK(fs.live == 0 && fs.begins == fs.releases && fs.bad == 0 && st.reserved_bytes == 0 && st.host.n_held == 0,
          "nothing left held (%d live, %d begins, %d releases, %d bad, %lld bytes, %lld held)", fs.live, fs.begins,
          fs.releases, fs.bad, (long long)st.reserved_bytes, (long long)st.host.n_held);
    printf("slots: a begin out of memory after admission: retried at the queue's head once a running request ended "
           "(%lld retries), failed with a message when alone\n", (long long)st.mem_retries);
    lz_serve_sched_free(s);
    free(want_b);
    free(want_d);
    sb_pair_close(&f1, q1, &fs, q);
}

/* The run API passes a hook's LZ_QUERY_ENOMEM on unchanged, and -1 as -1: a one-sequence begin
 * through lz_query_run_start (and lz_query_answer), a slot's begin through lz_query_run_begin, a
 * batched prefill through lz_query_run_prefill. */
static void test_status_passed_on(void)
{
    slots_backend f1, fs;
    lz_query_backend b1, bs;
    lz_query_session *q1, *q;
    if (sb_pair_open(&f1, 0, &b1, &q1, &fs, 1, &bs, &q)) return;
    lz_query_doc *docs = NULL;
    int n = 0;
    char err[512];
    if (lz_retrieve_resolve_ids(store, (const char *const *)ctx_ids[0], n_ctx[0], &docs, &n, err, sizeof err)) {
        CHECK(0, "setup: %s", err);
        sb_pair_close(&f1, q1, &fs, q);
        return;
    }
    const lz_query_run_opts ro = {.max_new_tokens = 4, .top_p = 1.0f, .seed = 7};
    lz_query_run *r = NULL, *r2 = NULL;
    f1.fail_msg = "fake: the pool is exhausted";
    f1.fail_begin = f1.begin_calls + 1;
    int rc = lz_query_run_start(q1, questions[0], docs, n, &ro, &r, err, sizeof err);
    CHECK(rc == LZ_QUERY_ENOMEM && !r && strstr(err, "exhausted"), "run_start: begin's LZ_QUERY_ENOMEM unchanged (%d: %s)",
          rc, err);
    f1.fail_begin = f1.begin_calls + 1;
    lz_query_result res;
    rc = lz_query_answer(q1, questions[0], docs, n, &res, err, sizeof err);
    CHECK(rc == LZ_QUERY_ENOMEM, "lz_query_answer: LZ_QUERY_ENOMEM unchanged (%d: %s)", rc, err);
    f1.fail_rc = -1;
    f1.fail_msg = "out of memory";
    f1.fail_begin = f1.begin_calls + 1;
    rc = lz_query_run_start(q1, questions[0], docs, n, &ro, &r, err, sizeof err);
    CHECK(rc == -1 && !r, "run_start: begin's -1 stays -1 whatever its message says (%d: %s)", rc, err);
    fs.fail_msg = "fake: the pool is exhausted";
    fs.fail_begin = fs.begin_calls + 1;
    rc = lz_query_run_begin(q, questions[0], docs, n, &ro, &r, err, sizeof err);
    CHECK(rc == LZ_QUERY_ENOMEM && !r, "run_begin: begin_in's LZ_QUERY_ENOMEM unchanged (%d: %s)", rc, err);
    /* two begun, their batched prefill out of memory: both failed, the status unchanged */
    rc = lz_query_run_begin(q, questions[0], docs, n, &ro, &r, err, sizeof err);
    const int rc2 = lz_query_run_begin(q, questions[1], docs, n, &ro, &r2, err, sizeof err);
    CHECK(rc == 0 && rc2 == 0, "two begun (%d, %d: %s)", rc, rc2, err);
    if (!rc && !rc2) {
        lz_query_run *both[2] = {r, r2};
        fs.fail_prefill = fs.prefill_calls + 1;
        rc = lz_query_run_prefill(q, both, 2, err, sizeof err);
        CHECK(rc == LZ_QUERY_ENOMEM && lz_query_run_done(r) && lz_query_run_done(r2),
              "run_prefill: prefill_many's LZ_QUERY_ENOMEM unchanged, both failed (%d: %s)", rc, err);
    }
    lz_query_run_free(r);
    lz_query_run_free(r2);
    CHECK(fs.live == 0 && f1.bad == 0 && fs.bad == 0, "nothing left live (%d live, %d + %d bad)", fs.live, f1.bad, fs.bad);
    free(docs);
    sb_pair_close(&f1, q1, &fs, q);
}

/* The scheduler waits by the status, not the message: a begin failing with LZ_QUERY_ENOMEM and
 * a message that never says "memory" while another request runs goes back to the queue and is
 * answered once that one ends; a begin failing with -1 and the message "out of memory" fails its
 * request at once, never retried. */
static void test_retry_by_status(void)
{
    slots_backend f1, fs;
    lz_query_backend b1, bs;
    lz_query_session *q1, *q;
    if (sb_pair_open(&f1, 0, &b1, &q1, &fs, 1, &bs, &q)) return;
    const int A = 3, B = 4;
    char *want_b = serial_answer(q1, B, 6);
    lz_serve_sched_opts so;
    lz_serve_sched_opts_default(&so);
    lz_serve_sched *s;
    char err[512];
    if (lz_serve_sched_new(q, store, &so, &s, err, sizeof err)) { CHECK(0, "sched: %s", err); return; }
    lz_serve_req ra = lz_test_greedy_req(questions[A], ctx_ids[A], n_ctx[A], 40);
    lz_serve_req rb = lz_test_greedy_req(questions[B], ctx_ids[B], n_ctx[B], 6);
    ra.ignore_eos = 1;
    /* LZ_QUERY_ENOMEM, a message without the word: B waits for A, then is answered */
    fs.fail_msg = "fake: every block of the pool is held by live sequences";
    CHECK(!strstr(fs.fail_msg, "memory"), "the message does not say memory");
    fs.fail_begin = fs.begin_calls + 2; /* A's begin, then B's */
    lz_serve_ticket *ta, *tb;
    CHECK(lz_serve_submit(s, &ra, &ta, err, sizeof err) == LZ_SERVE_OK, "submit A: %s", err);
    wait_live(&fs, 1);
    CHECK(lz_serve_submit(s, &rb, &tb, err, sizeof err) == LZ_SERVE_OK, "submit B: %s", err);
    lz_serve_update ua, ub;
    char *got_b = lz_test_drain(tb, &ub);
    free(lz_test_drain(ta, &ua));
    lz_serve_stats st;
    lz_test_settle(s, &st);
    CHECK(ua.state == LZ_SERVE_DONE && ua.timing.n_completion == 40, "A answered whole (state %d: %s)", ua.state,
          ua.error);
    CHECK(ub.state == LZ_SERVE_DONE && !strcmp(got_b, want_b), "B requeued by its status and answered after A: state "
          "%d (%s) '%s' vs alone '%s'", ub.state, ub.error, got_b, want_b);
    CHECK(st.mem_retries == 1 && fs.begin_calls == 3, "one retry: %lld retries, %d begin calls (A, B failed, B)",
          (long long)st.mem_retries, fs.begin_calls);
    lz_serve_release(ta);
    lz_serve_release(tb);
    free(got_b);
    /* -1 with the message "out of memory": B fails at once while A runs */
    fs.fail_rc = -1;
    fs.fail_msg = "out of memory";
    fs.fail_begin = fs.begin_calls + 2;
    const int calls0 = fs.begin_calls;
    CHECK(lz_serve_submit(s, &ra, &ta, err, sizeof err) == LZ_SERVE_OK, "submit A2: %s", err);
    wait_live(&fs, 1);
    CHECK(lz_serve_submit(s, &rb, &tb, err, sizeof err) == LZ_SERVE_OK, "submit B2: %s", err);
    free(lz_test_drain(tb, &ub));
    free(lz_test_drain(ta, &ua));
    lz_test_settle(s, &st);
    CHECK(ub.state == LZ_SERVE_FAILED && ub.status == 500 && !strcmp(ub.error, "out of memory"),
          "-1 says \"out of memory\": B failed as it is, not requeued (state %d, status %d: %s)", ub.state, ub.status,
          ub.error);
    CHECK(st.mem_retries == 1 && fs.begin_calls == calls0 + 2, "no retry: %lld retries, %d begin calls (A, B)",
          (long long)st.mem_retries, fs.begin_calls - calls0);
    CHECK(ua.state == LZ_SERVE_DONE, "A2 answered (%s)", ua.error);
    lz_serve_release(ta);
    lz_serve_release(tb);
    CHECK(fs.live == 0 && fs.begins == fs.releases && fs.bad == 0 && st.reserved_bytes == 0,
          "nothing left held (%d live, %d begins, %d releases, %d bad)", fs.live, fs.begins, fs.releases, fs.bad);
    printf("slots: a begin's LZ_QUERY_ENOMEM requeues whatever its message; -1 saying \"out of memory\" fails\n");
    lz_serve_sched_free(s);
    free(want_b);
    sb_pair_close(&f1, q1, &fs, q);
}

/* Questions i0..i1-1 started on q with settings ro[i % n_ro] and stepped together (one pass a
 * step) to the end: their answers in out[i], each malloc'd. */
static void answers_run(lz_query_session *q, int i0, int i1, const lz_query_run_opts *ro, int n_ro, char **out)
{
    lz_query_run *r[NQ] = {0}, *live[NQ];
    char err[512];
    for (int i = i0; i < i1; i++) {
        lz_query_doc *docs;
        int nd;
        out[i] = NULL;
        if (lz_retrieve_resolve_ids(store, (const char *const *)ctx_ids[i], n_ctx[i], &docs, &nd, err, sizeof err) ||
            lz_query_run_start(q, questions[i], docs, nd, &ro[i % n_ro], &r[i], err, sizeof err))
            CHECK(0, "question %d: %s", i, err);
        free(docs);
    }
    for (;;) {
        int m = 0;
        for (int i = i0; i < i1; i++) {
            if (!r[i] || lz_query_run_done(r[i])) continue;
            const char *p;
            int pl;
            lz_query_run_next(r[i], &p, &pl);
            if (!lz_query_run_done(r[i])) live[m++] = r[i];
        }
        if (!m) break;
        if (lz_query_run_step(q, live, m, err, sizeof err)) {
            CHECK(0, "step: %s", err);
            return;
        }
    }
    for (int i = i0; i < i1; i++) {
        if (!r[i]) { out[i] = strdup(""); continue; }
        lz_query_result res;
        lz_query_run_finish(r[i], &res);
        out[i] = strdup(res.answer ? res.answer : "");
        lz_query_result_free(&res);
    }
}

/* Questions 0..n-1 as answers_run says, all at once (a backend of slots) or one after another
 * (one_by_one: the backend of one sequence) */
static void answers_of(lz_query_session *q, int n, const lz_query_run_opts *ro, int n_ro, int one_by_one, char **out)
{
    if (!one_by_one) answers_run(q, 0, n, ro, n_ro, out);
    for (int i = 0; one_by_one && i < n; i++) answers_run(q, i, i + 1, ro, n_ro, out);
}

/* decode_next: the same answers as without it, batched on slots and on the one sequence, for
 * greedy, greedy with ignore_eos (the ban list) and sampled settings; greedy rows move no logits,
 * sampled rows get theirs. */
static void test_greedy_on_backend(void)
{
    enum { N = SLOTS };
    const lz_query_run_opts ro[4] = {{.max_new_tokens = 12, .top_p = 1.0f, .seed = 7},
                                     {.max_new_tokens = 20, .top_p = 1.0f, .seed = 7, .ignore_eos = 1},
                                     {.max_new_tokens = 12, .temperature = 0.8f, .top_p = 1.0f, .seed = 3},
                                     {.max_new_tokens = 12, .temperature = 0.7f, .top_p = 0.9f, .seed = 5, .ignore_eos = 1}};
    for (int one = 0; one < 2; one++) {
        slots_backend fa, fb;
        lz_query_backend ba, bb;
        lz_query_session *qa, *qb;
        if (sb_pair_open(&fa, one ? 0 : 1, &ba, &qa, &fb, one ? 2 : 3, &bb, &qb)) return;
        char *want[N], *got[N];
        answers_of(qa, N, ro, 4, one, want);
        answers_of(qb, N, ro, 4, one, got);
        int same = 0;
        for (int i = 0; i < N; i++) {
            same += !strcmp(want[i], got[i]);
            CHECK(!strcmp(want[i], got[i]), "%s, question %d (settings %d): with decode_next '%s', without '%s'",
                  one ? "one sequence" : "slots", i, i % 4, got[i], want[i]);
            free(want[i]), free(got[i]);
        }
        printf("decode_next (%s): %d of %d answers equal those without it; %d passes, %d greedy rows (no logits), %d "
               "sampled rows\n", one ? "one sequence" : "slots", same, N, fb.next_calls, fb.next_greedy_rows,
               fb.next_logit_rows);
        CHECK(fa.next_calls == 0 && fb.next_calls > 0 && fb.decode_calls == (one ? 0 : fb.next_calls),
              "the hook ran every decode pass (%d, %d of %d)", fa.next_calls, fb.next_calls, fb.decode_calls);
        CHECK(fb.next_greedy_rows > 0 && fb.next_logit_rows > 0, "greedy rows without logits (%d), sampled with (%d)",
              fb.next_greedy_rows, fb.next_logit_rows);
        CHECK(fb.bad == 0 && fa.bad == 0, "no bad calls (%d, %d)", fa.bad, fb.bad);
        sb_pair_close(&fa, qa, &fb, qb);
    }
}

int main(void)
{
    if (!lz_test_demo_setup(dir, NQ, questions, ctx_ids, n_ctx, &model, &store)) return lz_test_done();
    test_batched_equals_serial();
    test_admission_and_release();
    test_memory_retry();
    test_status_passed_on();
    test_retry_by_status();
    test_greedy_on_backend();
    lz_test_demo_teardown(dir, NQ, questions, ctx_ids, n_ctx, model, store);
    return lz_test_done();
}
