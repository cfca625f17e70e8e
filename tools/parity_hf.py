#!/usr/bin/env python3
"""parity_hf.py - transformers (independent oracle) against our CPU engine on
random Hugging Face Llama models. Runs on the GPU machine (torch, transformers,
safetensors there); our side is the static binaries lazy-logits / lazy-convert.

For each model: build a RANDOM LlamaForCausalLM with transformers, save it with
save_pretrained (safetensors, sharded where asked), run a 320-token random
prompt at position 0 and at a position crossing 8192 through transformers
(fp32, eager attention, TF32 off, position_ids given) and through
`lazy-logits` on the saved folder; compare last-position logits
(max |ours - ref| / max |ref| <= 1e-4) and 20 greedy tokens (identical).
Selected models are also converted with `lazy-convert` (q/k permuted to the
adjacent layout, rope_freqs.weight) and the GGUF's logits compared too.

Usage (see bench/parity_hf.md for the exact device command):
  python3 tools/parity_hf.py --bin build/parity --work /tmp/parity --out $OUT \
      [--tokenizer-dir build/parity] [--models a,b,c,b16,c16] [--threads 16]
Exits 1 on any mismatch, 0 when everything agrees.
"""
import argparse
import copy
import json
import os
import random
import shutil
import subprocess
import sys
import time
import traceback

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.set_float32_matmul_precision("highest")

LLAMA3 = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=8192)

# name -> (config kwargs, rope (type + theta + params), storage dtype, max_shard_size, positions, convert)
MODELS = {
    "a": dict(desc="Llama-3.1-8B shape, 2 layers, llama3 rope",
              cfg=dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=2, num_attention_heads=32,
                       num_key_value_heads=8, vocab_size=128256, max_position_embeddings=131072, rms_norm_eps=1e-5,
                       tie_word_embeddings=False, bos_token_id=128000, eos_token_id=128009),
              rope=dict(LLAMA3, rope_theta=500000.0), dtype="float32", shard="2GB", pos=[0, 8000],
              convert=True, tokenizer=True),
    "b": dict(desc="small GQA 8/2, tied embeddings, llama3 rope, sharded",
              cfg=dict(hidden_size=256, intermediate_size=688, num_hidden_layers=3, num_attention_heads=8,
                       num_key_value_heads=2, vocab_size=3000, max_position_embeddings=131072, rms_norm_eps=1e-5,
                       tie_word_embeddings=True),
              rope=dict(LLAMA3, rope_theta=500000.0), dtype="float32", shard="1MB", pos=[0, 8000], convert=True),
    "c": dict(desc="head_dim 64 != hidden 192 / 4 heads, GQA 4/2, linear rope x2",
              cfg=dict(hidden_size=192, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=64, vocab_size=1500, max_position_embeddings=4096,
                       rms_norm_eps=1e-6, tie_word_embeddings=False),
              rope=dict(rope_type="linear", factor=2.0, rope_theta=10000.0), dtype="float32", shard=None,
              pos=[0, 9000], convert=True),
    "b16": dict(desc="model b stored as BF16 (reference: the same BF16 values in fp32)", base="b", dtype="bfloat16",
                shard=None, pos=[8000], convert=False),
    "c16": dict(desc="model c stored as F16 (reference: the same F16 values in fp32)", base="c", dtype="float16",
                shard="1MB", pos=[9000], convert=False),
}

N_PROMPT, N_GEN, TOL = 320, 20, 1e-4


def log(*a):
    print(*a, flush=True)


def make_config(spec):
    kw = dict(spec["cfg"])
    rope = dict(spec["rope"])
    v5 = int(transformers.__version__.split(".")[0]) >= 5
    if v5:
        kw["rope_parameters"] = rope
    else:
        kw["rope_theta"] = rope.pop("rope_theta")
        kw["rope_scaling"] = rope if rope["rope_type"] != "default" else None
    kw.update(hidden_act="silu", attention_bias=False, mlp_bias=False)
    cfg = LlamaConfig(**kw)
    cfg._attn_implementation = "eager"
    return cfg


def build_model(name, spec, seed):
    torch.manual_seed(seed)
    cfg = make_config(spec)
    model = LlamaForCausalLM(cfg).float()
    try:
        model.set_attn_implementation("eager")
    except Exception:
        pass
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "norm" in pname:  # transformers initialises norms to 1: make them matter
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    model.eval()
    return model


def save(model, path, dtype, shard):
    if os.path.exists(path):
        shutil.rmtree(path)
    m = model if dtype == "float32" else copy.deepcopy(model).to(getattr(torch, dtype))
    kw = {"max_shard_size": shard} if shard else {}
    m.save_pretrained(path, **kw)
    files = sorted(f for f in os.listdir(path) if f.endswith(".safetensors") or f.endswith(".json"))
    return files


@torch.no_grad()
def reference(model, ids, pos0, n_gen, dev):
    """Last-position logits and greedy continuation (full recompute per step)."""
    seq = list(ids)
    first, gen = None, []
    for i in range(n_gen):
        x = torch.tensor([seq], device=dev)
        pos = torch.arange(pos0, pos0 + len(seq), device=dev)[None]
        lg = model(input_ids=x, position_ids=pos, use_cache=False).logits[0, -1].float()
        if first is None:
            first = lg.cpu()
        t = int(torch.argmax(lg))
        gen.append(t)
        seq.append(t)
    return first, gen


def ours(bin_dir, model_path, ids_file, pos0, n_gen, threads, out_dir, tag):
    cmd = [os.path.join(bin_dir, "lazy-logits"), "-m", model_path, "--ids-file", ids_file, "--pos0", str(pos0),
           "-n", str(n_gen), "--threads", str(threads)]
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    with open(os.path.join(out_dir, f"ours_{tag}.stderr"), "w") as f:
        f.write(r.stderr)
    j = json.loads(r.stdout)
    j["wall_s"] = time.time() - t
    return j


def compare(a, ref):
    ref = ref.double()
    a = torch.tensor(a, dtype=torch.float64)
    return float((a - ref).abs().max() / ref.abs().max()), float((a - ref).abs().max())


def run_model(name, args, dev, built, rows, record):
    failures = 0
    spec = MODELS[name]
    base = spec.get("base", name)
    bspec = MODELS[base]
    t0 = time.time()
    if base not in built:
        built[base] = build_model(base, bspec, seed=1234 + ord(base[0]))
    model = built[base]
    path = os.path.join(args.work, name)
    files = save(model, path, spec["dtype"], spec.get("shard"))
    if spec["dtype"] != "float32":
        ref_model = LlamaForCausalLM(make_config(bspec)).float()
        ref_model.load_state_dict({k: v.to(getattr(torch, spec["dtype"])).float()
                                   for k, v in model.state_dict().items()})
        try:
            ref_model.set_attn_implementation("eager")
        except Exception:
            pass
        ref_model.eval()
    else:
        ref_model = model
    if bspec.get("tokenizer") and args.tokenizer_dir:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(args.tokenizer_dir, f), os.path.join(path, f))
    with open(os.path.join(path, "config.json")) as f:
        saved_cfg = json.load(f)
    shutil.copy(os.path.join(path, "config.json"), os.path.join(args.out, f"config_{name}.json"))
    t_build = time.time() - t0
    ref_model.to(dev)
    try:
        inv_ref = ref_model.model.rotary_emb.inv_freq.detach().double().cpu()
    except AttributeError:
        inv_ref = None
    rec = {"desc": spec["desc"], "files": files, "build_s": round(t_build, 1), "runs": []}
    log(f"\n== {name}: {spec['desc']} | {spec['dtype']} | files {files} | build+save {t_build:.1f}s")
    V = bspec["cfg"]["vocab_size"]
    gguf = None
    if spec.get("convert"):
        gguf = os.path.join(args.work, name + ".gguf")
        t = time.time()
        r = subprocess.run([os.path.join(args.bin, "lazy-convert"), path, gguf, "--outtype", "f32"],
                           capture_output=True, text=True)
        log(f"lazy-convert: rc {r.returncode} {time.time() - t:.1f}s {r.stderr.strip()}")
        if r.returncode != 0:
            failures += 1
            gguf = None
    for pos0 in spec["pos"]:
        rng = random.Random(1000 * sum(map(ord, name)) + pos0)
        ids = [rng.randrange(V) for _ in range(N_PROMPT)]
        ids_file = os.path.join(args.work, f"ids_{name}_{pos0}.txt")
        with open(ids_file, "w") as f:
            f.write(" ".join(map(str, ids)))
        t = time.time()
        ref_logits, ref_gen = reference(ref_model, ids, pos0, N_GEN, dev)
        t_ref = time.time() - t
        o = ours(args.bin, path, ids_file, pos0, N_GEN, args.threads, args.out, f"{name}_{pos0}")
        inv_ours = torch.tensor(o["inv_freq"], dtype=torch.float64)
        inv_err = float(((inv_ours - inv_ref).abs() / inv_ref.abs()).max()) if inv_ref is not None else float("nan")
        rel, ab = compare(o["logits"], ref_logits)
        same = o["greedy"] == ref_gen
        ok = rel <= TOL and same
        run = {"pos0": pos0, "positions": [pos0, pos0 + N_PROMPT + N_GEN - 1], "rel_err": rel, "abs_err": ab,
               "max_abs_ref": float(ref_logits.abs().max()), "greedy_equal": same, "greedy_ours": o["greedy"],
               "greedy_ref": ref_gen, "inv_freq_rel_err": inv_err, "ours_wall_s": round(o["wall_s"], 2),
               "ref_s": round(t_ref, 2), "layout": o["rope_layout"]}
        rows.append((name, "hf", pos0, rel, same, inv_err))
        if not ok:
            failures += 1
        log(f"{name} pos0 {pos0}: HF-folder rel {rel:.2e} (abs {ab:.2e}) greedy {'equal' if same else 'DIFFER'} "
            f"inv_freq rel {inv_err:.1e} | ours {o['wall_s']:.1f}s ref {t_ref:.1f}s")
        if not same:
            log(f"  ours {o['greedy']}\n  ref  {ref_gen}")
        if gguf:
            g = ours(args.bin, gguf, ids_file, pos0, N_GEN, args.threads, args.out, f"{name}_{pos0}_gguf")
            grel, gab = compare(g["logits"], ref_logits)
            hrel, _ = compare(g["logits"], torch.tensor(o["logits"]))
            gsame = g["greedy"] == ref_gen
            run.update(gguf_rel_err=grel, gguf_vs_hf_rel_err=hrel, gguf_greedy_equal=gsame, gguf_layout=g["rope_layout"])
            rows.append((name, "gguf", pos0, grel, gsame, hrel))
            if not (grel <= TOL and gsame and hrel <= TOL):
                failures += 1
            log(f"{name} pos0 {pos0}: GGUF rel {grel:.2e} greedy {'equal' if gsame else 'DIFFER'} "
                f"GGUF-vs-HF(ours) rel {hrel:.2e}")
        rec["runs"].append(run)
    if bspec.get("tokenizer") and args.tokenizer_dir and spec.get("tokenizer"):
        try:
            rec["tokenizer"] = tokenizer_check(args, path, gguf)
        except Exception:
            rec["tokenizer"] = {"equal": False, "crash": traceback.format_exc()}
            log(f"tokenizer check crashed:\n{traceback.format_exc()}")
        if not rec["tokenizer"]["equal"]:
            failures += 1
    rec["saved_config_rope"] = {k: saved_cfg.get(k) for k in ("rope_theta", "rope_scaling", "rope_parameters", "head_dim")}
    record["models"][name] = rec
    if gguf and os.path.exists(gguf):
        os.remove(gguf)
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", default="/tmp/parity_hf")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--tokenizer-dir", default=None, help="folder with tokenizer.json + tokenizer_config.json for model a")
    ap.add_argument("--models", default="b,c,b16,c16,a")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    log(f"torch {torch.__version__} transformers {transformers.__version__} device {dev} "
        f"({torch.cuda.get_device_name(0) if dev == 'cuda' else 'cpu'}) threads {args.threads}")
    rows, failures, record = [], 0, {"versions": {"torch": torch.__version__, "transformers": transformers.__version__},
                                     "device": dev, "tolerance": TOL, "n_prompt": N_PROMPT, "n_gen": N_GEN,
                                     "models": {}}
    built = {}
    for name in args.models.split(","):
        try:
            failures += run_model(name, args, dev, built, rows, record)
        except Exception:
            failures += 1
            log(f"== {name}: CRASHED\n{traceback.format_exc()}")
            record["models"][name] = {"crash": traceback.format_exc()}
    log("\n| model | load | pos0 | max rel logit err | greedy 20 | note |")
    log("|---|---|---|---|---|---|")
    for name, kind, pos0, rel, same, extra in rows:
        note = f"inv_freq rel {extra:.1e}" if kind == "hf" else f"GGUF vs HF (ours) {extra:.1e}"
        log(f"| {name} | {kind} | {pos0} | {rel:.2e} | {'identical' if same else 'DIFFERENT'} | {note} |")
    record["failures"] = failures
    with open(os.path.join(args.out, "parity_hf.json"), "w") as f:
        json.dump(record, f, indent=1)
    log(f"\n{'PASS' if failures == 0 else 'FAIL'}: {failures} mismatches")
    return 1 if failures else 0


def tokenizer_check(args, path, gguf):
    """Our tokenizer (HF folder and converted GGUF) against the tokenizers library."""
    from tokenizers import Tokenizer
    text = ("Retrieval-augmented generation: the quick brown fox jumps over 13 lazy dogs!\n"
            "  Ünïcödé, 日本語, emoji 🎉 and tabs\tand   spaces; numbers 1234567 and 3.14159.")
    tf = os.path.join(args.work, "tok_text.txt")
    with open(tf, "w") as f:
        f.write(text)
    want = Tokenizer.from_file(os.path.join(path, "tokenizer.json")).encode(text, add_special_tokens=False).ids
    res = {"want": want}
    for kind, p in (("hf", path), ("gguf", gguf)):
        if not p:
            continue
        r = subprocess.run([os.path.join(args.bin, "lazy-logits"), "-m", p, "--tokenize-file", tf],
                           capture_output=True, text=True)
        res[kind] = json.loads(r.stdout)["ids"] if r.returncode == 0 else r.stderr.strip()
    res["equal"] = all(res[k] == want for k in ("hf", "gguf") if k in res)
    log(f"tokenizer: {len(want)} ids, ours equal to tokenizers: {res['equal']}")
    return res


if __name__ == "__main__":
    sys.exit(main())
