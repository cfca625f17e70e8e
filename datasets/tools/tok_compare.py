#!/usr/bin/env python3
"""tok_compare.py - checks that datasets/bpe_train.py's encoder and the C engine's
tokenizer (through datasets/tools/tok_check) give identical ids.

  tok_compare.py --tokenizer T.json --check build/tok_check [--text lines.txt] [--n 20000]
Texts: tricky hand-written samples, the first --n lines of --text (escaped
newlines), and prompts built by datasets/train/prompt.py. Exits 1 on any mismatch."""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bpe_train  # noqa: E402

SAMPLES = ["Hello world", "  leading spaces", "it's  THE'LL end\n\n\n x", "a\tb\r\nc", "1234567 89,000",
           "naïve café — 東京 ٣٤٥ ½", "x  \n  y", "trailing   ", "'S 'Ll", "(a)!?  ...\n", "\n\n",
           "Mr. O'Neil's 3rd 12,000-ton ship", "emoji 😀👍🏽 ok", "tab\t\tx", " \u00a0 nbsp", "<|eot_id|> literal",
           "Document: Vaxia\nThe capital of Vaxia is Drokouxino.\n\n", "Question: Who founded X?"]


def esc(s):
    return s.replace("\\", "\\\\").replace("\n", "\\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--check", required=True, help="the tok_check binary")
    ap.add_argument("--text")
    ap.add_argument("--n", type=int, default=20000)
    a = ap.parse_args()
    texts = list(SAMPLES)
    if a.text:
        with open(a.text, encoding="utf-8") as f:
            for i, ln in enumerate(f):
                if i >= a.n:
                    break
                texts.append(ln.rstrip("\n").replace("\\n", "\n"))
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        for t in texts:
            f.write(esc(t) + "\n")
        path = f.name
    out = subprocess.run([a.check, a.tokenizer, path], capture_output=True, text=True, check=True).stdout
    os.unlink(path)
    c_ids = [[int(x) for x in ln.split()] for ln in out.split("\n")[:len(texts)]]
    tok = bpe_train.BPE(a.tokenizer)
    bad = 0
    n_tok = 0
    for t, c in zip(texts, c_ids):
        p = tok.encode(t)
        n_tok += len(p)
        if p != c:
            bad += 1
            if bad <= 5:
                print("mismatch on %r:\n  C  %r\n  py %r" % (t, c, p))
        elif tok.decode(p) != t:
            bad += 1
            print("decode round trip fails on %r" % t)
    print("tok_compare: %d texts, %d tokens, %d mismatches (regex module: %s)" % (
        len(texts), n_tok, bad, "yes" if bpe_train._RE else "no, hand-written splitter"))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
