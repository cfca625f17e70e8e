#!/usr/bin/env python3
"""evaluate.py - exact match and F1 of predicted answers against HotpotQA-format
questions, with the official normalisation (lower case, ASCII punctuation
dropped, the articles a/an/the removed, whitespace collapsed; F1 is 0 when
either side is yes/no/noanswer and they differ), per question type.

  evaluate.py --questions build/qa/test/questions.json --pred lazy=pred_lazy.jsonl [--pred full=pred_full.jsonl ...]
  evaluate.py --questions build/qa/test/questions.json --to-lazyquery build/qa/test/lazyquery.jsonl

A prediction file is {"answer": {_id: text}} (HotpotQA's format; "sp" is
ignored) or a plain {_id: text} object, or JSONL lines {"_id"|"id", "answer"}
(what `lazyquery --json --questions` prints). A question of a type only
counts when its questions file lists it; predictions without an id are ignored.
Prints a table and, with --json OUT, writes the numbers."""
import argparse
import collections
import json
import re
import string
import sys


def normalize_answer(s):
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def f1_score(pred, gold):
    p, g = normalize_answer(pred), normalize_answer(gold)
    if (p in ("yes", "no", "noanswer") or g in ("yes", "no", "noanswer")) and p != g:
        return 0.0
    pt, gt = p.split(), g.split()
    common = collections.Counter(pt) & collections.Counter(gt)
    same = sum(common.values())
    if same == 0:
        return 0.0
    prec, rec = same / len(pt), same / len(gt)
    return 2 * prec * rec / (prec + rec)


def exact_match(pred, gold):
    return float(normalize_answer(pred) == normalize_answer(gold))


def score(questions, preds):
    """{type: {"n", "em", "f1", "missing"}} plus "all"."""
    acc = collections.defaultdict(lambda: {"n": 0, "em": 0.0, "f1": 0.0, "missing": 0})
    for q in questions:
        for t in (q.get("type", "?"), "all"):
            a = acc[t]
            a["n"] += 1
            p = preds.get(q["_id"])
            if p is None:
                a["missing"] += 1
                continue
            golds = q["answer"] if isinstance(q["answer"], list) else [q["answer"]]
            a["em"] += max(exact_match(p, g) for g in golds)
            a["f1"] += max(f1_score(p, g) for g in golds)
    out = {}
    for t, a in acc.items():
        out[t] = {"n": a["n"], "em": 100 * a["em"] / max(1, a["n"]), "f1": 100 * a["f1"] / max(1, a["n"]),
                  "missing": a["missing"]}
    return out


def load_preds(path):
    txt = open(path, encoding="utf-8").read()
    try:
        d = json.loads(txt)
        if isinstance(d, dict) and isinstance(d.get("answer"), dict):
            return d["answer"]
        if isinstance(d, dict):
            return d
        if isinstance(d, list):
            return {x.get("_id", x.get("id")): x["answer"] for x in d}
    except json.JSONDecodeError:
        pass
    out = {}
    for ln in txt.splitlines():
        if ln.strip():
            x = json.loads(ln)
            out[x.get("_id", x.get("id"))] = x.get("answer", x.get("prediction", ""))
    return out


def table(results):
    """results: {name: score()} -> text table."""
    lines = ["%-12s %-11s %6s %7s %7s" % ("run", "type", "n", "EM", "F1")]
    for name, r in results.items():
        for t in ("single", "bridge", "comparison", "all"):
            if t in r:
                lines.append("%-12s %-11s %6d %7.1f %7.1f" % (name, t, r[t]["n"], r[t]["em"], r[t]["f1"]))
    return "\n".join(lines)


def write_lazyquery_input(qs, path, limit=0):
    """lazyquery --questions input: one {"id", "question", "docs"} a line, docs = the
    question's context passages (corpus ids) in context order."""
    with open(path, "w", encoding="utf-8") as f:
        for q in qs[:limit or None]:
            f.write(json.dumps({"id": q["_id"], "question": q["question"], "docs": q["context_ids"]},
                               ensure_ascii=False) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", required=True)
    ap.add_argument("--pred", action="append", help="NAME=FILE or FILE (repeatable)")
    ap.add_argument("--json")
    ap.add_argument("--to-lazyquery", metavar="OUT.jsonl", help="only write lazyquery's --questions input")
    ap.add_argument("--limit", type=int, default=0, help="with --to-lazyquery: the first N questions")
    a = ap.parse_args()
    qs = json.load(open(a.questions, encoding="utf-8"))
    if a.to_lazyquery:
        write_lazyquery_input(qs, a.to_lazyquery, a.limit)
        return
    if not a.pred:
        ap.error("--pred is required (or --to-lazyquery)")
    res = {}
    for p in a.pred:
        name, _, path = p.rpartition("=")
        res[name or path] = score(qs, load_preds(path))
    print(table(res))
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)
    if any(r["all"]["missing"] for r in res.values()):
        print("evaluate: some questions have no prediction (counted as wrong)", file=sys.stderr)


if __name__ == "__main__":
    main()
