#!/usr/bin/env python3
"""synthetic_corpus.py - the paper's synthetic setup as a corpus lazyingest reads: N documents
(ids d00000, d00001, ... as bench_workload --emit-corpus names them) of at most T tokens each
under a given vocabulary, as close to T as whole words allow (the word count found by bisection
with lazy-tokenize), random words with numbers, so no two documents share their KV.
Usage: python3 bench/synthetic_corpus.py VOCAB.gguf N T OUT.jsonl [SEED]
  (lazy-tokenize from build/bin; VOCAB: the model's GGUF, or lazy-mkmodel's with the same
  --vocab, whose tokenizer depends only on the vocabulary size)"""
import json
import random
import subprocess
import sys

WORDS = ["river", "castle", "stone", "north", "king", "bridge", "market", "winter", "garden", "tower",
         "harbor", "forest", "silver", "letter", "council", "battle", "valley", "queen", "mill", "road"]


def n_tokens(vocab, text):
    out = subprocess.run(["build/bin/lazy-tokenize", "-m", vocab, "-"], input=text.encode(),
                         capture_output=True, check=True).stdout
    return len(out.split())


def main(argv):
    if len(argv) not in (5, 6):
        sys.exit(__doc__)
    vocab, n, t, path = argv[1], int(argv[2]), int(argv[3]), argv[4]
    rnd = random.Random(int(argv[5]) if len(argv) == 6 else 7)
    with open(path, "w") as out:
        for i in range(n):
            words = [rnd.choice(WORDS) + str(rnd.randint(0, 999)) for _ in range(t)]
            lo, hi = 1, len(words)
            while lo < hi:  # the most words within t tokens
                mid = (lo + hi + 1) // 2
                if n_tokens(vocab, " ".join(words[:mid])) <= t:
                    lo = mid
                else:
                    hi = mid - 1
            out.write(json.dumps({"id": "d%05d" % i, "text": " ".join(words[:lo])}) + "\n")


if __name__ == "__main__":
    main(sys.argv)
