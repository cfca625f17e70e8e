#!/usr/bin/env python3
"""worldgen_to_hotpot.py - the synthetic split (datasets/worldgen.py split) written in the
official HotpotQA format, so that lazyeval reads it as it reads HotpotQA's own files.

  worldgen_to_hotpot.py --questions build/qa/test/questions.json --out build/qa/test/hotpot.json
      [--corpus build/qa/test/corpus.jsonl] [--limit N]

Each record keeps HotpotQA's fields only: _id, question, answer, type, level,
supporting_facts ([[title, sentence index]]) and context ([[title, [sentences]]], gold
passages among the distractors, in the split's order); worldgen's own context_ids and
gold_ids are dropped (lazyeval names documents by title). With --corpus, every context
passage is checked against the corpus record it came from (same title, and " ".join of
its sentences equal to the record's text), so a store lazyeval builds holds the very
documents datasets/train/eval_c.sh ingests and both answer from the same KV. Standard
library only."""
import argparse
import json
import sys

FIELDS = ("_id", "question", "answer", "type", "level", "supporting_facts", "context")


def convert(questions, limit=0):
    """The records in HotpotQA's format (the first limit, 0: all)."""
    out = []
    for q in questions[:limit or None]:
        missing = [f for f in FIELDS if f not in q]
        if missing:
            raise ValueError("question %s lacks %s" % (q.get("_id", "?"), ", ".join(missing)))
        out.append({f: q[f] for f in FIELDS})
    return out


def check_corpus(questions, corpus_path):
    """Every context passage of questions equals its corpus record (by context_ids). The number
    of passages checked; raises ValueError naming the first that differs."""
    records = {}
    with open(corpus_path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                records[r["id"]] = r
    n = 0
    for q in questions:
        for (title, sentences), cid in zip(q["context"], q.get("context_ids", [])):
            r = records.get(cid)
            if r is None:
                raise ValueError("question %s: context id %s is not in %s" % (q["_id"], cid, corpus_path))
            if r.get("title") != title or r["text"] != " ".join(sentences):
                raise ValueError("question %s: passage '%s' differs from corpus record %s" % (q["_id"], title, cid))
            n += 1
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", required=True, help="worldgen's questions.json")
    ap.add_argument("--out", required=True, help="the HotpotQA-format JSON array to write")
    ap.add_argument("--corpus", help="worldgen's corpus.jsonl: check the passages against it")
    ap.add_argument("--limit", type=int, default=0, help="the first N questions")
    a = ap.parse_args()
    qs = json.load(open(a.questions, encoding="utf-8"))
    try:
        out = convert(qs, a.limit)
        checked = check_corpus(qs[:a.limit or None], a.corpus) if a.corpus else 0
    except ValueError as e:
        print("worldgen_to_hotpot: %s" % e, file=sys.stderr)
        sys.exit(2)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=0)
    print("worldgen_to_hotpot: %d questions -> %s%s" % (
        len(out), a.out, " (%d passages equal to the corpus)" % checked if a.corpus else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
