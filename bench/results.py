#!/usr/bin/env python3
"""results.py - regenerates the JSON-backed tables of bench/RESULTS.md.

RESULTS.md marks each generated block with a pair of comments:
    <!-- results:NAME -->  ...generated text...  <!-- /results:NAME -->
and this script rewrites what lies between them from the JSON files in
bench/results/. Everything outside the markers is left as it is.

Usage: python3 bench/results.py            rewrite RESULTS.md
       python3 bench/results.py --check    exit 1 if RESULTS.md differs from what it would write
       options: --md PATH (default bench/RESULTS.md), --dir DIR (default bench/results)

Blocks:
  kernels  kernels.json: what build/cuda/kernels_check perf writes (device, copy_tbs,
           results[] of kind decode / prefill / prefill_self0), with the top-level keys
           command, machine, date (and optionally source, note) added by hand;
           sdpa.json: the torch SDPA peer of the same call (results[] of kind decode or
           prefill with B/M, N, sdpa_us, variants_us);
           kernels-pool-*.json (optional): more kernels_check perf processes whose lazy / twin
           pairs (overhead_pairs_pct) are pooled with kernels.json's for the 95% interval.
Standard library only. Exit status: 0 done (or --check clean), 1 --check found a
difference, 2 an input is missing or malformed (the message names the file).
"""
import glob
import json
import math
import os
import re
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))


class InputError(Exception):
    pass


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InputError("%s: cannot read: %s" % (path, e.strerror or e))
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError("%s: invalid JSON at line %d, column %d: %s" % (path, e.lineno, e.colno, e.msg))


def need(obj, key, path, where, kind=(int, float)):
    """obj[key], which must exist and be of `kind`; else an error naming the file and the record"""
    if not isinstance(obj, dict) or key not in obj:
        raise InputError("%s: %s: missing field \"%s\"" % (path, where, key))
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, kind):
        raise InputError("%s: %s: field \"%s\" has the wrong type (%s)" % (path, where, key, type(v).__name__))
    return v


def results_of(doc, path):
    if not isinstance(doc, dict):
        raise InputError("%s: the top level must be an object" % path)
    res = doc.get("results")
    if not isinstance(res, list):
        raise InputError("%s: missing array \"results\"" % path)
    for i, r in enumerate(res):
        if not isinstance(r, dict):
            raise InputError("%s: results[%d] is not an object" % (path, i))
        need(r, "kind", path, "results[%d]" % i, str)
    return res


# --- the pooled lazy overhead: the same statistic as bench/kernels/overhead_ci.py ---

def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def ci95(v):
    """(lo, hi): the widest-inward order statistics x_(j), x_(n+1-j) whose coverage
    1 - 2 P(Bin(n, 1/2) <= j - 1) is still >= 95%; None below 6 pairs"""
    v = sorted(v)
    n = len(v)
    best = None
    cdf = 0.0
    for j in range(1, n // 2 + 1):
        cdf += math.comb(n, j - 1) / 2 ** n
        if 1 - 2 * cdf < 0.95:
            break
        best = (v[j - 1], v[n - j])
    return best


def shape_key(r):
    if r["kind"] == "decode":
        return ("decode", r.get("B"), r.get("N"))
    if r["kind"] == "prefill":
        return ("prefill", r.get("M"), r.get("N"))
    return (r["kind"], r.get("M"), 0)


# --- block: kernels ---

def fmt_pct(x):
    return "%+.2f%%" % x


def fmt_range(lo, hi):
    return "%+.2f..%+.2f%%" % (lo, hi)


def prose(text):
    """a paragraph of generated prose, wrapped so that no line runs long"""
    return textwrap.fill(text, width=100, break_long_words=False, break_on_hyphens=False)


def kernels_block(rdir):
    kpath = os.path.join(rdir, "kernels.json")
    spath = os.path.join(rdir, "sdpa.json")
    kdoc = load_json(kpath)
    kres = results_of(kdoc, kpath)
    copy = need(kdoc, "copy_tbs", kpath, "top level")
    meta = {k: need(kdoc, k, kpath, "top level", str) for k in ("command", "machine", "date")}
    sdpa = {}
    sdoc = None
    if os.path.exists(spath):
        sdoc = load_json(spath)
        for i, r in enumerate(results_of(sdoc, spath)):
            where = "results[%d]" % i
            if r["kind"] not in ("decode", "prefill"):
                raise InputError("%s: %s: kind must be decode or prefill" % (spath, where))
            need(r, "N", spath, where, int)
            need(r, "B" if r["kind"] == "decode" else "M", spath, where, int)
            need(r, "sdpa_us", spath, where)
            sdpa[shape_key(r)] = r
    # pairs of every process, pooled per shape
    pairs = {}
    pool_files = [kpath] + sorted(glob.glob(os.path.join(rdir, "kernels-pool-*.json")))
    for p in pool_files:
        doc = kdoc if p == kpath else load_json(p)
        for i, r in enumerate(results_of(doc, p)):
            v = r.get("overhead_pairs_pct")
            if v is None:
                continue
            if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
                raise InputError("%s: results[%d]: \"overhead_pairs_pct\" must be an array of numbers" % (p, i))
            pairs.setdefault(shape_key(r), []).extend(v)

    head = ("| shape | split | lazy us | twin us | SDPA us (variant) | lazy vs SDPA | lazy rate | lazy % of copy "
            "| lazy overhead, this run's pairs: median (range) | lazy overhead pooled: median, 95% CI (pairs) |")
    out = [head, "|" + "---|" * 10]
    for i, r in enumerate(kres):
        where = "results[%d]" % i
        kind = r["kind"]
        if kind not in ("decode", "prefill", "prefill_self0"):
            continue
        lazy = need(r, "lazy_us", kpath, where)
        twin = need(r, "twin_us", kpath, where)
        if lazy <= 0 or twin <= 0:
            raise InputError("%s: %s: lazy_us and twin_us must be positive" % (kpath, where))
        if kind == "decode":
            b, n = need(r, "B", kpath, where, int), need(r, "N", kpath, where, int)
            name = "decode %d x %d keys" % (b, n)
            rate_v = need(r, "bytes", kpath, where) / lazy / 1e6
            rate = "%.2f TB/s" % rate_v
            pcopy = "%.1f%%" % (100 * rate_v / copy)
        else:
            m = need(r, "M", kpath, where, int)
            n = r.get("N", 0) if kind == "prefill" else 0
            if kind == "prefill":
                need(r, "N", kpath, where, int)
            if n:
                name = "prefill %d rows x %d keys" % (m, n)
            else:
                name = "ingest causal %d, own keys at %s" % (m, "1000" if kind == "prefill" else "0")
            fl = r.get("flops")  # prefill_self0 records carry none: no rate
            rate = "%.0f TFLOP/s" % (fl / lazy / 1e6) if isinstance(fl, (int, float)) and fl > 0 else "-"
            pcopy = "-"
        split = str(r["split"]) if isinstance(r.get("split"), int) else "-"
        s = sdpa.get(shape_key(r)) if kind != "prefill_self0" else None
        if s:
            var = s.get("variants_us")
            best = ""
            if isinstance(var, dict) and var:
                best = " (%s)" % min(var.items(), key=lambda kv: kv[1])[0]
            sdpa_us = "%.1f%s" % (s["sdpa_us"], best)
            vs = "%.2fx" % (s["sdpa_us"] / lazy)
        else:
            sdpa_us, vs = "-", "-"
        if all(k in r for k in ("overhead_median_pct", "overhead_lo_pct", "overhead_hi_pct")):
            run = "%s (%s)" % (fmt_pct(r["overhead_median_pct"]), fmt_range(r["overhead_lo_pct"], r["overhead_hi_pct"]))
        else:
            run = "-"
        v = pairs.get(shape_key(r), [])
        c = ci95(v) if v else None
        pooled = r.get("pooled") if isinstance(r.get("pooled"), dict) else None
        if c:
            po = "%s, %s (%d)" % (fmt_pct(median(v)), fmt_range(c[0], c[1]), len(v))
        elif pooled:  # a transcription: the pooled figures without the pairs themselves
            for k in ("median_pct", "ci_lo_pct", "ci_hi_pct"):
                need(pooled, k, kpath, where + ".pooled")
            po = "%s, %s (%d)" % (fmt_pct(pooled["median_pct"]), fmt_range(pooled["ci_lo_pct"], pooled["ci_hi_pct"]),
                                  need(pooled, "pairs", kpath, where + ".pooled", int))
        else:
            po = "-"
        out.append("| %s | %s | %.1f | %.1f | %s | %s | %s | %s | %s | %s |" % (
            name, split, lazy, twin, sdpa_us, vs, rate, pcopy, run, po))
    out.append("")
    line = "Command / machine / date: `%s`; %s; %s." % (meta["command"], meta["machine"], meta["date"])
    if sdoc is not None and isinstance(sdoc.get("command"), str):
        line += " SDPA peer in the same call: `%s`" % sdoc["command"]
        if isinstance(sdoc.get("torch"), str):
            line += ", torch %s" % sdoc["torch"]
        line += "."
    line += " Copy bandwidth (1 GiB device to device, bytes read + written): %.2f TB/s (kernels_check)" % copy
    if sdoc is not None and isinstance(sdoc.get("copy_tbs"), (int, float)):
        line += ", %.2f TB/s (torch)" % sdoc["copy_tbs"]
    out.append(prose(line + "."))
    for d, p in ((kdoc, kpath), (sdoc, spath)):
        if d is None:
            continue
        src = d.get("source")
        note = d.get("note")
        rel = os.path.relpath(p, os.path.dirname(HERE))
        if isinstance(src, str) or isinstance(note, str):
            out.append("")
            txt = "`%s`" % rel
            if isinstance(src, str):
                txt += ": %s" % src
            if isinstance(note, str):
                txt += (". " if isinstance(src, str) else ": ") + note
            out.append(prose(txt.rstrip(".") + "."))
    return "\n".join(out)


BLOCKS = {"kernels": kernels_block}
MARK = re.compile(r"<!-- results:([a-z0-9_-]+) -->\n(.*?)<!-- /results:\1 -->", re.S)


def render(md_text, rdir, md_path):
    names = [m.group(1) for m in MARK.finditer(md_text)]
    for n in names:
        if n not in BLOCKS:
            raise InputError("%s: unknown block <!-- results:%s --> (known: %s)" % (md_path, n, ", ".join(sorted(BLOCKS))))
    for n in BLOCKS:
        if n not in names:
            raise InputError("%s: no <!-- results:%s --> ... <!-- /results:%s --> markers" % (md_path, n, n))
    gen = {n: BLOCKS[n](rdir) for n in BLOCKS}
    return MARK.sub(lambda m: "<!-- results:%s -->\n%s\n<!-- /results:%s -->" % (m.group(1), gen[m.group(1)], m.group(1)),
                    md_text)


def main(argv):
    check = False
    md = os.path.join(HERE, "RESULTS.md")
    rdir = os.path.join(HERE, "results")
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--check":
            check = True
        elif a == "--md" and args:
            md = args.pop(0)
        elif a == "--dir" and args:
            rdir = args.pop(0)
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            sys.stderr.write("results.py: unknown argument %s\n%s" % (a, __doc__))
            return 2
    try:
        with open(md, encoding="utf-8") as f:
            old = f.read()
    except OSError as e:
        sys.stderr.write("results.py: %s: cannot read: %s\n" % (md, e.strerror or e))
        return 2
    try:
        new = render(old, rdir, md)
    except InputError as e:
        sys.stderr.write("results.py: %s\n" % e)
        return 2
    if check:
        if new != old:
            import difflib
            sys.stderr.write("results.py: %s differs from what bench/results/ gives; run python3 bench/results.py\n" % md)
            sys.stderr.writelines(difflib.unified_diff(old.splitlines(True), new.splitlines(True), md, "generated", n=1))
            return 1
        return 0
    if new != old:
        with open(md, "w", encoding="utf-8") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
