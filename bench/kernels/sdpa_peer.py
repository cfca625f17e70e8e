"""sdpa_peer.py - times torch.nn.functional.scaled_dot_product_attention
(FlashAttention-2 backend forced, GQA through enable_gqa) on the shapes of
bench_kernels.cu, with CUDA events (median, rotating input sets), then merges
ours.json into a markdown table. Run on the GPU machine after bench_kernels.

Usage: python3 sdpa_peer.py ours.json table.md
Shapes: H = 32 query heads, KV = 8 kv heads, d = 128, bf16.
"""
import json
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

H, KV, D = 32, 8, 128
dev = "cuda"


def time_us(fn, n_sets, reps):
    for i in range(3):
        fn(i % n_sets)
    torch.cuda.synchronize()
    ts = []
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(reps):
        a.record()
        fn(i % n_sets)
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(ts)


def sdpa(q, k, v, **kw):
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw)


def copy_tbs():
    n = 1 << 30
    x = torch.ones(n, dtype=torch.uint8, device=dev)
    y = torch.empty_like(x)
    us = time_us(lambda i: y.copy_(x), 1, 20)
    return 2.0 * n / (us * 1e-6) / 1e12


def decode(B, N):
    nbytes = 2.0 * B * KV * N * D * 2
    n_sets = max(1, int(-(-1.2e9 // nbytes)))
    sets = [(torch.randn(B, H, 1, D, device=dev, dtype=torch.bfloat16),
             torch.randn(B, KV, N, D, device=dev, dtype=torch.bfloat16),
             torch.randn(B, KV, N, D, device=dev, dtype=torch.bfloat16)) for _ in range(n_sets)]
    return time_us(lambda i: sdpa(*sets[i]), n_sets, 200)


def prefill(M, N):
    n_sets = 8 if N else 2
    sets = [(torch.randn(1, H, M, D, device=dev, dtype=torch.bfloat16),
             torch.randn(1, KV, N + M, D, device=dev, dtype=torch.bfloat16),
             torch.randn(1, KV, N + M, D, device=dev, dtype=torch.bfloat16)) for _ in range(n_sets)]
    if N == 0:
        return time_us(lambda i: sdpa(*sets[i], is_causal=True), n_sets, 50), "is_causal"
    try:  # bottom-right causal: row m sees all N cached keys and own keys 0..m
        from torch.nn.attention.bias import causal_lower_right
        mask = causal_lower_right(M, N + M)
        sdpa(*sets[0], attn_mask=mask)
        return time_us(lambda i: sdpa(*sets[i], attn_mask=mask), n_sets, 200), "causal_lower_right"
    except Exception as e:  # noqa: BLE001
        print("causal_lower_right refused (%s); timing without mask" % e)
        return time_us(lambda i: sdpa(*sets[i]), n_sets, 200), "no mask"


def main():
    ours = json.load(open(sys.argv[1]))
    out = open(sys.argv[2], "w")
    print("torch", torch.__version__, torch.cuda.get_device_name(), file=out)
    cbw = copy_tbs()
    print("copy: ours %.2f TB/s, torch %.2f TB/s (bytes read + written)\n" % (ours["copy_tbs"], cbw), file=out)
    cbw = ours["copy_tbs"]
    print("| decode shape | split | ours lazy us | twin us | SDPA us | ours TB/s | SDPA TB/s | ours % copy | vs SDPA | lazy overhead |", file=out)
    print("|---|---|---|---|---|---|---|---|---|---|", file=out)
    rows_p = []
    for r in ours["results"]:
        if r["kind"] == "decode":
            s = decode(r["B"], r["N"])
            tb = r["bytes"] / r["lazy_us"] / 1e6
            ts = r["bytes"] / s / 1e6
            print("| B=%d x %d keys | %d | %.1f | %.1f | %.1f | %.2f | %.2f | %.0f%% | %.2fx | %+.2f%% |" % (
                r["B"], r["N"], r["split"], r["lazy_us"], r["twin_us"], s, tb, ts, 100 * tb / cbw,
                s / r["lazy_us"], 100 * (r["lazy_us"] / r["twin_us"] - 1)), file=out)
        else:
            rows_p.append(r)
    print("\n| prefill shape | split | ours lazy us | twin us | SDPA us | SDPA mask | ours TFLOP/s | SDPA TFLOP/s | vs SDPA | lazy overhead |", file=out)
    print("|---|---|---|---|---|---|---|---|---|---|", file=out)
    for r in rows_p:
        s, how = prefill(r["M"], r["N"])
        name = ("causal %d (ingest)" % r["M"]) if r["N"] == 0 else ("%d rows x %d keys" % (r["M"], r["N"]))
        print("| %s | %d | %.1f | %.1f | %.1f | %s | %.0f | %.0f | %.2fx | %+.2f%% |" % (
            name, r["split"], r["lazy_us"], r["twin_us"], s, how, r["flops"] / r["lazy_us"] / 1e6,
            r["flops"] / s / 1e6, s / r["lazy_us"], 100 * (r["lazy_us"] / r["twin_us"] - 1)), file=out)
    out.close()
    print(open(sys.argv[2]).read())


if __name__ == "__main__":
    main()
