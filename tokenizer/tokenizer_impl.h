/* tokenizer_impl.h - internals shared by tokenizer*.c: the vocabulary (one
 * byte arena, a string -> id hash), the merge table, the pair heap that both
 * SentencePiece and byte-level BPE merge with, and the per-algorithm hooks.
 * Not a public header: only tokenizer/tokenizer*.c include it. */
#ifndef LZ_TOKENIZER_IMPL_H
#define LZ_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* Token types, as GGUF tokenizer.ggml.token_type numbers them. */
enum {
    LZ_TOKTYPE_UNDEFINED = 0, LZ_TOKTYPE_NORMAL = 1, LZ_TOKTYPE_UNKNOWN = 2,
    LZ_TOKTYPE_CONTROL = 3, LZ_TOKTYPE_USER = 4, LZ_TOKTYPE_UNUSED = 5, LZ_TOKTYPE_BYTE = 6
};

typedef struct {
    uint32_t text_off, text_len;   /* vocabulary form ("▁the", "Ġthe", "<0x0A>") in arena */
    uint32_t piece_off, piece_len; /* the bytes it stands for in text, in arena */
    float score;                   /* SPM merge priority (higher first) */
    uint8_t type;                  /* LZ_TOKTYPE_* */
} lz_tok_entry;

/* Open-addressing string -> id map over the arena (text or piece form). */
typedef struct {
    uint32_t *hash; /* (cap) full hash of the slot's string */
    int32_t *id;    /* (cap) token id, -1 = empty */
    uint32_t mask;  /* cap - 1, cap a power of two */
    int use_piece;  /* keys are pieces (1) or texts (0) */
} lz_strmap;

/* Merge (a, b) -> id of a+b with its rank; key = a << 32 | b, empty = UINT64_MAX. */
typedef struct {
    uint64_t key;
    int32_t rank;
    int32_t id;
} lz_merge;

struct lz_tokenizer {
    lz_tokenizer_kind kind;
    int n_vocab;
    lz_tok_entry *toks; /* (n_vocab) */
    char *arena;        /* texts and pieces */
    size_t arena_len, arena_cap;
    lz_strmap by_text;  /* vocabulary form -> id (last duplicate wins) */
    lz_strmap by_piece; /* BPE only: piece bytes of NORMAL tokens -> id */

    int bos, eos, unk;  /* -1 if none */
    int add_bos;        /* metadata's default for adding BOS */
    int add_space_prefix;
    int eog[8], n_eog;  /* end-of-generation ids */

    /* Special/user-defined tokens to split the input at: ids sorted by first
     * byte, then longest first; special_first[b]..special_first[b+1]. */
    int *special;
    int n_special;
    int special_first[257];

    int spm_split;     /* SPM: no token has U+2581 after another character, so
                        * merges never cross the start of a space run */
    int byte_tok[256]; /* SPM: <0xNN> token (-1 if absent); BPE: token of byte b */

    /* BPE */
    lz_merge *merges; /* (merge_mask + 1) */
    uint32_t merge_mask;
    int n_merges;
    int ignore_merges;  /* a pre-token that is itself a token is not merged */
    pcre2_code *re;     /* pre-tokenizer split pattern */
};

/* A growable id vector (encode output). */
typedef struct {
    int *v;
    int n, cap;
} lz_idvec;

int lz_idvec_push(lz_idvec *v, int id);

/* ---- vocabulary (tokenizer.c) ---- */
uint32_t lz_tok_hash(const char *s, size_t n);
/* Allocates an empty tokenizer with n_vocab zeroed entries, bos/eos/unk = -1. */
int lz_tok_alloc(lz_tokenizer **out, lz_tokenizer_kind kind, int n_vocab);
/* Appends n bytes to the arena; returns the offset in *off. */
int lz_tok_arena_add(lz_tokenizer *t, const void *s, size_t n, uint32_t *off);
/* Builds the text -> id index once texts are filled (before *_prepare). */
int lz_tok_index_text(lz_tokenizer *t);
/* Builds by_piece (BPE), the special-token list and the eog set once texts,
 * pieces, types and bos/eos are final. */
int lz_tok_finish(lz_tokenizer *t);
int lz_strmap_find(const lz_tokenizer *t, const lz_strmap *m, const char *s, size_t n);
static inline const char *lz_tok_text(const lz_tokenizer *t, int id) { return t->arena + t->toks[id].text_off; }
static inline const char *lz_tok_piece(const lz_tokenizer *t, int id) { return t->arena + t->toks[id].piece_off; }
/* Writes "<ctx>: <msg>" into err. */
void lz_tok_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- merge heap (tokenizer.c): larger prio first, then smaller left ---- */
typedef struct {
    float prio;
    int left, right; /* symbol indices */
    int size;        /* bytes of left + right when pushed (staleness check) */
    int id;          /* token the merge produces */
} lz_pair;

typedef struct {
    lz_pair *a;
    int n, cap;
} lz_heap;

int lz_heap_push(lz_heap *h, lz_pair p);
lz_pair lz_heap_pop(lz_heap *h);

/* A symbol of a word being merged: a byte range and its list links. */
typedef struct {
    int start, len; /* len 0 = merged away */
    int prev, next; /* -1 at the ends */
    int id;         /* BPE: its token id */
} lz_sym;

/* Applies the merge p popped from the heap: joins its right symbol into its
 * left one. Returns 0 when p is stale (a neighbour already merged away or
 * grown), 1 when merged; then the caller pushes the new pairs around p.left. */
static inline int lz_sym_merge(lz_sym *sym, const lz_pair *p)
{
    lz_sym *L = &sym[p->left], *R = &sym[p->right];
    if (L->len == 0 || R->len == 0 || L->next != p->right || L->len + R->len != p->size) return 0;
    L->len += R->len;
    L->next = R->next;
    L->id = p->id;
    if (R->next >= 0) sym[R->next].prev = p->left;
    R->len = 0;
    return 1;
}

/* Per-call scratch space, so encoding a const tokenizer is thread-safe. */
typedef struct {
    lz_sym *sym;
    int sym_cap;
    lz_heap heap;
    char *buf; /* SPM: the escaped text */
    size_t buf_cap;
    pcre2_match_data *md;
} lz_tok_scratch;

int lz_scratch_syms(lz_tok_scratch *s, size_t n);
void lz_scratch_free(lz_tok_scratch *s);

/* ---- SentencePiece (tokenizer_spm.c) ---- */
/* Fills pieces and byte_tok of an SPM vocabulary whose texts, types and scores are set. */
int lz_spm_prepare(lz_tokenizer *t, char *err, size_t errlen);
/* Encodes one raw-text fragment; prefix_space: prepend U+2581 first. */
int lz_spm_encode(const lz_tokenizer *t, const char *text, size_t len, int prefix_space,
                  lz_tok_scratch *s, lz_idvec *out);

/* ---- byte-level BPE (tokenizer_bpe.c) ---- */
/* Llama-3's pre-tokenizer pattern, and GPT-2's. */
extern const char lz_bpe_re_llama3[];
extern const char lz_bpe_re_gpt2[];
/* Fills pieces (inverse byte map) and byte_tok of a vocabulary whose texts and types are set. */
int lz_bpe_prepare(lz_tokenizer *t, char *err, size_t errlen);
/* Compiles (and JITs) the split pattern; literal: match the string as is. */
int lz_bpe_set_regex(lz_tokenizer *t, const char *pattern, size_t len, int literal, char *err,
                     size_t errlen);
/* Sizes the merge table for n merges (call before lz_bpe_add_merge). */
int lz_bpe_alloc_merges(lz_tokenizer *t, size_t n);
/* Adds merge "a b" (vocabulary forms) with the given rank; merges whose parts
 * or result are not tokens are ignored (returns 0). */
int lz_bpe_add_merge(lz_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen,
                     int rank);
int lz_bpe_encode(const lz_tokenizer *t, const char *text, size_t len, lz_tok_scratch *s,
                  lz_idvec *out);

#endif /* LZ_TOKENIZER_IMPL_H */
