"""overhead_ci.py - the lazy overhead of every shape pooled over the lazy / twin
pairs of one or more `kernels_check perf` JSON files (overhead_pairs_pct): the pooled
median with its distribution-free 95% confidence interval (order statistics of
the binomial(n, 1/2) law, no assumption on the noise's shape), the range, and
whether the interval's upper end is within a limit (1%: the kernels issue's).

Usage: python3 bench/kernels/overhead_ci.py [--limit 1.0] OURS.json [OURS.json ...]
       python3 bench/kernels/overhead_ci.py --selftest   (ranks against the binomial table,
       coverage on simulated skewed noise; prints N passed, N failed)
"""
import json
import math
import sys


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def ci95(v):
    """(lo, hi, coverage): the widest-inward order statistics x_(j), x_(n+1-j)
    whose coverage 1 - 2 P(Bin(n, 1/2) < j) is still >= 95%; None below 6 pairs"""
    v = sorted(v)
    n = len(v)
    best = None
    cdf = 0.0
    for j in range(1, n // 2 + 1):
        cdf += math.comb(n, j - 1) / 2 ** n  # P(Bin <= j - 1): the median below x_(j)
        cov = 1 - 2 * cdf
        if cov < 0.95:
            break
        best = (v[j - 1], v[n - j], cov)
    return best


def key(r):
    if r["kind"] == "decode":
        return "decode %dx%d" % (r["B"], r["N"])
    if r["kind"] == "prefill":
        return "prefill %dx%d" % (r["M"], r["N"])
    return "prefill %dx0, own keys at 0" % r["M"]


def selftest():
    import random
    ok = bad = 0

    def check(cond, what):
        nonlocal ok, bad
        if cond:
            ok += 1
        else:
            bad += 1
            print("FAIL", what)

    # the widest-inward ranks j (x_(j), x_(n+1-j)) of the usual sign-test table, 95% level
    table = {6: 1, 8: 1, 9: 2, 12: 3, 15: 4, 20: 6, 27: 8, 45: 16, 54: 20}
    for n, j in table.items():
        c = ci95(list(range(1, n + 1)))
        check(c is not None and c[0] == j and c[1] == n + 1 - j and c[2] >= 0.95, "n=%d ranks %s, want %d" % (n, c, j))
    check(ci95([1.0] * 5) is None, "5 pairs give no interval")
    # coverage: skewed noise (lognormal) around a known median, 2,000 samples of 27
    rng = random.Random(7)
    true_med = math.exp(0.0)
    hit = 0
    for _ in range(2000):
        lo, hi, _cov = ci95([rng.lognormvariate(0.0, 0.8) for _ in range(27)])
        hit += lo <= true_med <= hi
    check(0.95 <= hit / 2000 <= 0.995, "coverage %.3f, want 0.95..0.995" % (hit / 2000))
    check(median([3, 1, 2]) == 2 and median([4, 1, 3, 2]) == 2.5, "median")
    print("%d passed, %d failed" % (ok, bad))
    sys.exit(1 if bad else 0)


def main():
    args = sys.argv[1:]
    if args[:1] == ["--selftest"]:
        selftest()
    limit = 1.0
    if args[:1] == ["--limit"]:
        limit, args = float(args[1]), args[2:]
    if not args:
        sys.exit(__doc__)
    pooled = {}
    for f in args:
        d = json.load(open(f))
        for r in d["results"] if isinstance(d, dict) else d:
            if "overhead_pairs_pct" in r:
                pooled.setdefault(key(r), []).extend(r["overhead_pairs_pct"])
    print("| shape | pairs | median | 95%% CI of the median | range | CI within %+.1f%% |" % limit)
    print("|---|---|---|---|---|---|")
    for k, v in pooled.items():
        c = ci95(v)
        ci = "%+.2f..%+.2f%% (%.1f%%)" % (c[0], c[1], 100 * c[2]) if c else "-"
        ok = ("yes" if c[1] <= limit else "no") if c else "-"
        print("| %s | %d | %+.2f%% | %s | %+.2f..%+.2f%% | %s |" % (k, len(v), median(v), ci, min(v), max(v), ok))


main()
