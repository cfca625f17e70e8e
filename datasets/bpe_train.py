#!/usr/bin/env python3
"""bpe_train.py - learns a byte-level BPE vocabulary (GPT-2 byte-to-unicode
table, Llama-3 pre-tokenizer regex) and writes a Hugging Face tokenizer.json
that tokenizer/tokenizer.hf.c (lz_tokenizer_from_hf) and tools/lazy-convert load.
Also the encoder the trainer uses (class BPE), identical to the C one.

Vocabulary layout: ids 0..255 are the 256 byte symbols (in byte order), then
one token per merge in merge order (no merges of digits unless --merge-digits:
every digit is its own token), then the special tokens at the end
(<|begin_of_text|>, <|end_of_text|>, <|start_header_id|>, <|end_header_id|>,
<|eot_id|>, reserved ones) so the total is --vocab-size.

The pre-tokenizer regex is Llama 3's. Python's `re` has no \\p{L}, so this
file uses the `regex` module when installed (Debian: python3-regex) and
otherwise an equivalent hand-written splitter (str.isalpha = \\p{L},
unicodedata category N* = \\p{N}, str.isspace = \\s); both are checked
against each other by `bpe_train.py selftest`.

Commands:
  bpe_train.py train --text build/qa/bpe_text.txt --vocab-size 4096 --out build/qa/tokenizer
  bpe_train.py encode --tokenizer build/qa/tokenizer/tokenizer.json "some text"
  bpe_train.py selftest [--llama3 ../shared/fixtures/tokenizers]
"""
import argparse
import heapq
import json
import os
import sys
import unicodedata

try:
    import regex as _regex
    if os.environ.get("BPE_NO_REGEX"):  # force the hand-written splitter (tests)
        _regex = None
except ImportError:  # the hand-written splitter below is used instead
    _regex = None

LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
            "<|reserved_special_token_0|>", "<|reserved_special_token_1|>", "<|reserved_special_token_2|>"]
BOS, EOS = "<|begin_of_text|>", "<|eot_id|>"


def bytes_to_unicode():
    """GPT-2's table: byte -> printable code point."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


BYTE2U = bytes_to_unicode()
U2BYTE = {v: k for k, v in BYTE2U.items()}

# ---------------------------------------------------------------- pre-tokenizer


def _is_l(c):
    return c.isalpha()


def _is_n(c):
    return unicodedata.category(c)[0] == "N"


def _is_s(c):
    return c.isspace()


_CONTRACTIONS = ("s", "t", "re", "ve", "m", "ll", "d")


def pretokenize_py(s):
    """The Llama-3 regex, by hand (alternatives tried in order, as the regex does)."""
    out = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        j = 0
        # 1: (?i:'s|'t|'re|'ve|'m|'ll|'d)
        if c == "'":
            for w in _CONTRACTIONS:
                if s[i + 1:i + 1 + len(w)].lower() == w:
                    j = i + 1 + len(w)
                    break
        # 2: [^\r\n\p{L}\p{N}]?\p{L}+
        if not j:
            k = i
            if c not in "\r\n" and not _is_l(c) and not _is_n(c) and i + 1 < n and _is_l(s[i + 1]):
                k = i + 1
            if _is_l(s[k]):
                k += 1
                while k < n and _is_l(s[k]):
                    k += 1
                j = k
        # 3: \p{N}{1,3}
        if not j and _is_n(c):
            k = i + 1
            while k < n and k < i + 3 and _is_n(s[k]):
                k += 1
            j = k
        # 4:  ?[^\s\p{L}\p{N}]+[\r\n]*
        if not j:
            k = i + 1 if c == " " else i

            def other(ch):
                return not _is_s(ch) and not _is_l(ch) and not _is_n(ch)
            if k < n and other(s[k]):
                k += 1
                while k < n and other(s[k]):
                    k += 1
                while k < n and s[k] in "\r\n":
                    k += 1
                j = k
        if not j and _is_s(c):
            e = i
            while e < n and _is_s(s[e]):
                e += 1
            # 5: \s*[\r\n]+  (ends at the last newline of the whitespace run)
            last = -1
            for k in range(e - 1, i - 1, -1):
                if s[k] in "\r\n":
                    last = k
                    break
            if last >= 0:
                j = last + 1
            # 6: \s+(?!\S)
            elif e == n:
                j = e
            elif e - i >= 2:
                j = e - 1
            # 7: \s+
            else:
                j = e
        if not j:  # cannot happen: every character matches some alternative
            j = i + 1
        out.append(s[i:j])
        i = j
    return out


_RE = _regex.compile(LLAMA3_RE) if _regex else None


def pretokenize(s):
    return _RE.findall(s) if _RE else pretokenize_py(s)


# ---------------------------------------------------------------- encoder


class BPE:
    """Byte-level BPE encoder/decoder over a tokenizer.json (merges by rank,
    GPT-2 style), with a per-pre-token cache."""

    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            tj = json.load(f)
        m = tj["model"]
        self.vocab = dict(m["vocab"])
        merges = [tuple(x.split(" ", 1)) if isinstance(x, str) else tuple(x) for x in m["merges"]]
        self.ranks = {p: i for i, p in enumerate(merges)}
        self.special = {a["content"]: a["id"] for a in tj.get("added_tokens", [])}
        self.id2tok = {i: t for t, i in self.vocab.items()}
        for t, i in self.special.items():
            self.id2tok[i] = t
        self.vocab_size = max(self.id2tok) + 1
        self.ignore_merges = bool(m.get("ignore_merges"))
        self.cache = {}
        self.bos = self.special.get(BOS)
        self.eot = self.special.get(EOS)

    def _bpe(self, word):
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        syms = list(word)
        while len(syms) > 1:
            best, bi = None, -1
            for k in range(len(syms) - 1):
                r = self.ranks.get((syms[k], syms[k + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, k
            if best is None:
                break
            a, b = syms[bi], syms[bi + 1]
            out, k = [], 0
            while k < len(syms):
                if k < len(syms) - 1 and syms[k] == a and syms[k + 1] == b:
                    out.append(a + b)
                    k += 2
                else:
                    out.append(syms[k])
                    k += 1
            syms = out
        return [self.vocab[s] for s in syms]

    def encode(self, text):
        """Ids of text; special-token strings in text are NOT parsed (as the C prompt builder)."""
        ids = []
        cache = self.cache
        for w in pretokenize(text):
            r = cache.get(w)
            if r is None:
                r = self._bpe("".join(BYTE2U[b] for b in w.encode("utf-8")))
                if len(cache) < 1 << 20:
                    cache[w] = r
            ids.extend(r)
        return ids

    def decode(self, ids):
        bs = bytearray()
        for i in ids:
            t = self.id2tok.get(i)
            if t is None or t in self.special:
                continue
            bs.extend(U2BYTE[c] for c in t)
        return bs.decode("utf-8", errors="replace")


# ---------------------------------------------------------------- learner


def learn(word_freq, n_merges, min_freq=2, log=None):
    """Standard BPE on a {word (byte symbols joined): frequency} table.
    Ties between equally frequent pairs go to the smallest pair (deterministic)."""
    words = [list(w) for w in word_freq]
    freqs = list(word_freq.values())
    counts = {}
    where = {}
    for wi, w in enumerate(words):
        f = freqs[wi]
        for k in range(len(w) - 1):
            p = (w[k], w[k + 1])
            counts[p] = counts.get(p, 0) + f
            where.setdefault(p, set()).add(wi)
    heap = [(-c, p) for p, c in counts.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        c, p = heapq.heappop(heap)
        c = -c
        if counts.get(p, 0) != c:
            continue  # stale entry
        if c < min_freq:
            break
        merges.append(p)
        a, b = p
        ab = a + b
        changed = {}
        for wi in where.pop(p, ()):
            w = words[wi]
            f = freqs[wi]
            if len(w) < 2:
                continue
            k, out, hit = 0, [], False
            while k < len(w):
                if k < len(w) - 1 and w[k] == a and w[k + 1] == b:
                    out.append(ab)
                    k += 2
                    hit = True
                else:
                    out.append(w[k])
                    k += 1
            if not hit:
                continue
            for k in range(len(w) - 1):
                q = (w[k], w[k + 1])
                counts[q] -= f
                changed[q] = counts[q]
            for k in range(len(out) - 1):
                q = (out[k], out[k + 1])
                counts[q] = counts.get(q, 0) + f
                changed[q] = counts[q]
                where.setdefault(q, set()).add(wi)
            words[wi] = out
        counts.pop(p, None)
        for q, cq in changed.items():
            if q != p and cq > 0:
                heapq.heappush(heap, (-cq, q))
        if log and len(merges) % 500 == 0:
            log("bpe: %d merges, last %r (%d)" % (len(merges), ab, c))
    return merges


def build_tokenizer_json(merges, vocab_size):
    vocab = {BYTE2U[b]: b for b in range(256)}
    for a, b in merges:
        t = a + b
        if t not in vocab:
            vocab[t] = len(vocab)
    assert len(vocab) + len(SPECIALS) <= vocab_size, "too many merges for the vocabulary size"
    first_special = vocab_size - len(SPECIALS)
    added = [{"id": first_special + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(SPECIALS)]
    bos_id = first_special + SPECIALS.index(BOS)
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_RE}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            {"type": "TemplateProcessing",
             "single": [{"SpecialToken": {"id": BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
             "pair": [{"SpecialToken": {"id": BOS, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                      {"SpecialToken": {"id": BOS, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
             "special_tokens": {BOS: {"id": BOS, "ids": [bos_id], "tokens": [BOS]}}}]},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": ["%s %s" % m for m in merges]},
    }


def write_tokenizer(out_dir, merges, vocab_size):
    os.makedirs(out_dir, exist_ok=True)
    tj = build_tokenizer_json(merges, vocab_size)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, indent=1)
    cfg = {"bos_token": BOS, "eos_token": EOS, "add_bos_token": True, "model_max_length": 4096,
           "tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)
    return tj


def count_words(lines, split_digits=True):
    """{pre-token as byte symbols: count}. With split_digits, digit pre-tokens are left
    out, so no merge joins digits and every digit stays its own token (numbers are then
    compared and copied digit by digit)."""
    wf = {}
    for ln in lines:
        for w in pretokenize(ln):
            if split_digits and w.isdigit():
                continue
            wf[w] = wf.get(w, 0) + 1
    out = {}
    for w, c in wf.items():
        u = "".join(BYTE2U[b] for b in w.encode("utf-8"))
        out[u] = out.get(u, 0) + c
    return out


def cmd_train(a):
    lines = []
    with open(a.text, encoding="utf-8") as f:
        for ln in f:
            lines.append(ln.rstrip("\n").replace("\\n", "\n"))
            if a.max_lines and len(lines) >= a.max_lines:
                break
    wf = count_words(lines, not a.merge_digits)
    n_merges = a.vocab_size - 256 - len(SPECIALS)
    log = (lambda s: print(s, file=sys.stderr))
    log("bpe: %d lines, %d distinct pre-tokens, learning %d merges" % (len(lines), len(wf), n_merges))
    merges = learn(wf, n_merges, log=log)
    # pad: if the text ran out of pairs, the vocabulary is smaller; keep ids dense
    tj = write_tokenizer(a.out, merges, 256 + len(merges) + len(SPECIALS))
    print("bpe: vocabulary %d (%d merges) -> %s/tokenizer.json" % (
        len(tj["model"]["vocab"]) + len(SPECIALS), len(merges), a.out), file=sys.stderr)


def cmd_encode(a):
    t = BPE(a.tokenizer)
    for s in a.texts:
        print(" ".join(map(str, t.encode(s))))


def cmd_selftest(a):
    samples = ["Hello world", "  leading spaces", "it's  THE'LL end\n\n\n x", "a\tb\r\nc", "1234567 89,000",
               "naïve café — 東京 ٣٤٥ ½", "x  \n  y", "trailing   ", "'S 'Ll", "(a)!?  ...\n", "\n\n", "",
               "Mr. O'Neil's 3rd 12,000-ton ship", "emoji 😀👍🏽 ok", "tab\t\tx", " \u00a0 nbsp"]
    bad = 0
    if _RE:
        for s in samples:
            r1, r2 = _RE.findall(s), pretokenize_py(s)
            if r1 != r2:
                bad += 1
                print("selftest: pre-tokenizer mismatch on %r:\n  regex %r\n  py    %r" % (s, r1, r2))
    else:
        print("selftest: SKIP regex-vs-python comparison (module regex not installed)")
    if a.llama3:
        tj = os.path.join(a.llama3, "llama3.1-tokenizer.json")
        vec = os.path.join(a.llama3, "llama3_vectors.json")
        if os.path.exists(tj) and os.path.exists(vec):
            t = BPE(tj)
            cases = json.load(open(vec, encoding="utf-8"))
            cases = cases if isinstance(cases, list) else cases.get("cases", cases)
            inp = open(os.path.join(a.llama3, "ggml-vocab-llama-bpe.gguf.inp"), encoding="utf-8").read()
            outs = open(os.path.join(a.llama3, "ggml-vocab-llama-bpe.gguf.out"), encoding="utf-8").read()
            texts = inp.split("\n__ggml_vocab_test__\n")[:-1]
            ids = outs.split("\n")
            pairs = [(c["text"], c["ids"]) for c in cases] + \
                [(x, [int(v) for v in y.split()]) for x, y in zip(texts, ids)]
            pairs = [(x, y) for x, y in pairs if "<|" not in x]  # special-token parsing: not ours
            for text, want in pairs:
                got = t.encode(text)
                if got != want:
                    bad += 1
                    print("selftest: llama3 mismatch on %r:\n  want %r\n  got  %r" % (text, want, got))
            print("selftest: %d llama3 cases checked" % len(pairs))
        else:
            print("selftest: SKIP llama3 fixtures not found in %s" % a.llama3)
    print("selftest: %s" % ("FAIL" if bad else "ok"))
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--text", required=True, help="one item a line, newlines escaped as \\n")
    t.add_argument("--vocab-size", type=int, default=4096)
    t.add_argument("--max-lines", type=int, default=0)
    t.add_argument("--merge-digits", action="store_true", help="also learn merges of digits (default: one token a digit)")
    t.add_argument("--out", required=True)
    e = sub.add_parser("encode")
    e.add_argument("--tokenizer", required=True)
    e.add_argument("texts", nargs="+")
    s = sub.add_parser("selftest")
    s.add_argument("--llama3", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "../../shared/fixtures/tokenizers"))
    a = ap.parse_args()
    if a.cmd == "train":
        cmd_train(a)
    elif a.cmd == "encode":
        cmd_encode(a)
    else:
        sys.exit(cmd_selftest(a))


if __name__ == "__main__":
    main()
