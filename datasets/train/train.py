#!/usr/bin/env python3
"""train.py - trains the small retrieval-QA Llama on worlds from
datasets/worldgen.py and writes a Hugging Face folder that lazy-convert turns
into the engine's GGUF.

A training example is one context of k shuffled passages (gold among
distractors) followed by up to n_qa question/answer pairs, each attending to
the prefix, the passages and itself, all at the same positions (right after
the passages), as if asked alone. The loss is on the answer tokens (+ <|eot_id|>);
optionally a language-model loss on the passages (lm_weight). Each example
uses the "block" mask with probability p_block, else "full" (model.py).
Batches are made by worker processes, one batch per task seeded by its step,
so a resumed run sees the same data.

Commands (see datasets/README.md):
  train.py --config datasets/train/config.json --out build/qa/run --minutes 9 --resume
  train.py --config ... --out ... --export-only [--dtype bf16]
  train.py --config ... --out ... --eval-only QUESTIONS.json [--mode full|block]
  train.py --config datasets/train/config_tiny.json --out build/qa/tiny --check-c build/bin
Files in --out: ckpt.pt (model, optimiser, step, curve), curve.jsonl, log.txt,
hf/ (config.json, model.safetensors, tokenizer.json, tokenizer_config.json),
metrics.json, dev set and predictions.
"""
import argparse
import copy
import json
import math
import os
import random
import struct
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import bpe_train  # noqa: E402
import evaluate  # noqa: E402
import gguf_to_hf  # noqa: E402
import prompt  # noqa: E402
import worldgen  # noqa: E402
from model import KIND_DOC, KIND_PAD, KIND_PREFIX, KIND_QA, Llama, build_mask, hf_state_dict, rerotate  # noqa: E402

# ---------------------------------------------------------------- data (worker processes)

_W = {}


def _worker_init(tok_path):
    tok = bpe_train.BPE(tok_path)
    _W["tok"], _W["prompt"] = tok, prompt.Prompt(tok)


def encode_example(P, docs, qas, block, evict=None):
    """docs [(title, text)], qas [(question, answer or None)] -> per-token lists and the
    documents' start positions. A QA with answer None ends at its question (generation).
    evict = (keep, window, rng): hide each document token before the document's last
    `window` from the questions with probability 1 - keep (a compressed store as the
    question sees it: the window always kept, as lazyingest --kv-policy keeps it)."""
    tok, kind, seg, pos, lab, lm, starts, hide = [], [], [], [], [], [], [], []
    s = len(P.prefix)
    tok += P.prefix
    kind += [KIND_PREFIX] * s
    seg += [0] * s
    pos += list(range(s))
    lab += [-100] * s
    lm += [-100] * s
    hide += [False] * s
    p = s
    for j, (title, text) in enumerate(docs):
        ids = P.doc(title, text)
        n = len(ids)
        starts.append(p)
        tok += ids
        kind += [KIND_DOC] * n
        seg += [1 + j] * n
        pos += range(p, p + n)
        lab += [-100] * n
        lm += ids[1:] + [-100]
        if evict is None:
            hide += [False] * n
        else:
            keep, window, rng = evict
            hide += [i < n - window and rng.random() >= keep for i in range(n)]
        p += n
    for i, (q, a) in enumerate(qas):
        qi = P.question(q)
        ai = P.answer(a) if a is not None else []
        ids = qi + ai
        n = len(ids)
        tok += ids
        kind += [KIND_QA] * n
        seg += [10000 + i] * n
        pos += range(p, p + n)  # every QA right after the documents, as if asked alone
        lab += [-100] * (len(qi) - 1) + ai + [-100] if ai else [-100] * len(qi)
        lm += [-100] * n
        hide += [False] * n
    return {"tok": tok, "kind": kind, "seg": seg, "pos": pos, "lab": lab, "lm": lm, "starts": starts,
            "hide": hide, "n_prefix": s}


def collate(exs, blocks, pad_to=64):
    """Examples -> numpy arrays (B, T) padded to a multiple of pad_to, plus the extra
    prefix copies: xpos/xseg (B, D*s) for D = the most documents of an example."""
    T = max(len(e["tok"]) for e in exs)
    T = (T + pad_to - 1) // pad_to * pad_to
    B = len(exs)
    s = exs[0]["n_prefix"]
    D = max(len(e["starts"]) for e in exs)
    while (D * s) % 16:  # keys T + D*s a multiple of 16 (aligned bias rows for SDPA's kernels)
        D += 1
    out = {"tok": np.zeros((B, T), np.int64), "kind": np.full((B, T), KIND_PAD, np.int64),
           "seg": np.full((B, T), -1, np.int64), "pos": np.zeros((B, T), np.int64),
           "xpos": np.zeros((B, D * s), np.int64), "xseg": np.full((B, D * s), -2, np.int64),
           "lab": np.full((B, T), -100, np.int64), "lm": np.full((B, T), -100, np.int64),
           "hide": np.zeros((B, T), bool),  # None below when nothing is hidden
           "block": np.array(blocks, bool), "len": np.array([len(e["tok"]) for e in exs], np.int64),
           "n_prefix": s}
    jj = np.arange(s)
    for b, e in enumerate(exs):
        n = len(e["tok"])
        out["tok"][b, :n] = e["tok"]
        out["kind"][b, :n] = e["kind"]
        out["seg"][b, :n] = e["seg"]
        out["pos"][b, :n] = e["pos"]
        out["pos"][b, n:] = e["pos"][-1]
        out["lab"][b, :n] = e["lab"]
        out["lm"][b, :n] = e["lm"]
        out["hide"][b, :n] = e["hide"]
        for d, p in enumerate(e["starts"]):  # prefix key j seen from document d at distance s + i - j
            out["xpos"][b, d * s:(d + 1) * s] = jj + p - s
            out["xseg"][b, d * s:(d + 1) * s] = 1 + d
    if not out["hide"].any():
        out["hide"] = None
    return out


def make_batch(task):
    """Worker: the batch of step `step` (deterministic in seed and step)."""
    seed, step, d, B = task
    r = random.Random((seed << 32) ^ step)
    k_hi = d["k_max"]
    cur = d.get("curriculum_steps", 0)
    if cur and step < cur:  # fewer passages first: the retrieval circuit forms sooner
        k_hi = min(d["k_max"], 3 + (d["k_max"] - 3) * step // cur)
    k_lo = min(d["k_min"], k_hi)
    k = r.randint(k_lo, k_hi)  # one passage count per batch: similar lengths, little padding
    exs, blocks = [], []
    for _ in range(B):
        ctx = worldgen.make_context(r.getrandbits(62), "train", n_qa=d["n_qa"], k_range=(k, k),
                                    mix=tuple(d["mix"]), n_aux=d.get("aux_compare", 0),
                                    cmp_pairs=d.get("cmp_pairs", False), cmp_cot=d.get("cmp_cot", False))
        block = r.random() < d["p_block"]
        evict = None  # a compressed store (block contexts only: what lazyingest stores)
        if block and d.get("p_evict", 0) > 0 and r.random() < d["p_evict"]:
            evict = (r.uniform(*d["evict_keep"]), d["evict_window"], random.Random(r.getrandbits(62)))
        qas = [(q, prompt.answer_text(a, *why)) for _, q, a, *why in ctx["qa"]]
        exs.append(encode_example(_W["prompt"], ctx["docs"], qas, block, evict))
        blocks.append(block)
    return collate(exs, blocks)


class Batches:
    """Bounded prefetch over a process pool; batch i is task (seed, i)."""

    def __init__(self, cfg, start, workers):
        import multiprocessing as mp
        self.cfg, self.next_step = cfg, start
        self.B = cfg["train"]["batch"]
        self.workers = workers
        if workers > 0:
            ctx = mp.get_context("fork")
            self.pool = ctx.Pool(workers, initializer=_worker_init, initargs=(cfg["data"]["tokenizer_path"],))
        else:
            _worker_init(cfg["data"]["tokenizer_path"])
            self.pool = None
        self.queue = []
        self.depth = max(2, 3 * workers)

    def _task(self, i):
        return (self.cfg["train"]["seed"], i, self.cfg["data"], self.B)

    def get(self):
        if self.pool is None:
            b = make_batch(self._task(self.next_step))
            self.next_step += 1
            return b
        while len(self.queue) < self.depth:
            self.queue.append(self.pool.apply_async(make_batch, (self._task(self.next_step + len(self.queue)),)))
        b = self.queue.pop(0).get()
        self.next_step += 1
        return b

    def close(self):
        if self.pool is not None:
            self.pool.terminate()


def to_device(b, dev):
    return {k: torch.from_numpy(v).to(dev, non_blocking=True) if isinstance(v, np.ndarray) else v
            for k, v in b.items()}


def run_hidden(model, b):
    """Hidden states of a device batch (masks built here, on the device)."""
    mask = build_mask(b["kind"], b["seg"], b["block"], b["xseg"], b.get("hide"))
    return model.hidden(b["tok"], b["pos"], mask, b["xpos"], b["n_prefix"])


# ---------------------------------------------------------------- loss and generation

def forward_loss(model, b, lm_weight):
    """b: a batch on the device with "sel" / "sel_lm" (flat indices of supervised tokens,
    computed on the host so nothing waits for the GPU)."""
    h = run_hidden(model, b)
    sel = b["sel"]
    hf = h.view(-1, h.shape[-1])
    loss = F.cross_entropy(model.logits(hf[sel]).float(), b["lab"].view(-1)[sel])
    out = {"ans": loss.detach()}
    if lm_weight > 0:
        sel2 = b["sel_lm"]
        lml = F.cross_entropy(model.logits(hf[sel2]).float(), b["lm"].view(-1)[sel2])
        out["lm"] = lml.detach()
        loss = loss + lm_weight * lml
    return loss, out


@torch.no_grad()
def generate(model, P, items, block, dev, max_new=48, batch=64, amp=None, evict_keep=None, evict_window=8):
    """items [(docs, question)] -> answers (greedy, stops at <|eot_id|>). Each step reruns
    the whole prompt (no KV cache: answers are a few tokens) with the new token appended
    in place after each example's last token. evict_keep: the question sees each document
    token before the last evict_window with this probability (seeded by the item's index)."""
    model.eval()
    answers = []
    for i0 in range(0, len(items), batch):
        chunk = items[i0:i0 + batch]
        exs = [encode_example(P, docs, [(q, None)], block,
                              None if evict_keep is None else (evict_keep, evict_window, random.Random(i0 + j)))
               for j, (docs, q) in enumerate(chunk)]
        n0 = np.array([len(e["tok"]) for e in exs])
        T = (int(n0.max()) + max_new + 15) // 16 * 16
        b = collate(exs, [block] * len(exs), pad_to=T)
        b = to_device(b, dev)
        B = len(exs)
        rows = torch.arange(B, device=dev)
        ln = torch.from_numpy(n0).to(dev)
        gen = torch.full((B, max_new), -1, dtype=torch.long, device=dev)
        done = torch.zeros(B, dtype=torch.bool, device=dev)
        for step in range(max_new):
            with amp():
                h = run_hidden(model, b)
            nxt = model.logits(h[rows, ln - 1].float()).argmax(-1)
            done = done | (nxt == P.eot)
            gen[:, step] = torch.where(done, torch.full_like(nxt, -1), nxt)
            if bool(done.all()):
                break
            pos = b["pos"][rows, ln - 1] + 1
            b["tok"][rows, ln] = torch.where(done, b["tok"][rows, ln], nxt)
            b["kind"][rows, ln] = KIND_QA
            b["seg"][rows, ln] = 10000
            b["pos"][rows, ln] = pos
            ln = ln + 1
        for g in gen.tolist():
            answers.append(P.tok.decode([t for t in g if t >= 0]).strip())
    model.train()
    return answers


def eval_questions(model, P, qs, dev, amp, modes=("full", "block"), batch=64):
    """EM/F1 per type and mode of HotpotQA-format questions (PyTorch, greedy). Modes: full,
    block, evictK (block with each document token before the last 8 seen with K% chance)."""
    items = [([(t, " ".join(s)) for t, s in q["context"]], q["question"]) for q in qs]
    res, preds = {}, {}
    for mode in modes:
        keep = int(mode[5:]) / 100 if mode.startswith("evict") else None
        ans = generate(model, P, items, mode != "full", dev, batch=batch, amp=amp, evict_keep=keep)
        preds[mode] = {q["_id"]: prompt.final_answer(a) for q, a in zip(qs, ans)}
        preds[mode + "_generated"] = {q["_id"]: a for q, a in zip(qs, ans)}
        res[mode] = evaluate.score(qs, preds[mode])
    return res, preds


# ---------------------------------------------------------------- export

def write_safetensors(path, tensors, dtype):
    """tensors {name: torch tensor} -> safetensors file (gguf_to_hf.write_safetensors's format)."""
    tdt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[dtype]
    raw = {}
    for n, t in tensors.items():
        t = t.detach().to("cpu", tdt).contiguous()
        raw[n] = (dtype, list(t.shape), t.view(torch.int16).numpy().tobytes() if dtype != "F32" else t.numpy().tobytes())
    gguf_to_hf.write_safetensors(path, raw)


def export_hf(model, cfg, tok, out_dir, dtype):
    os.makedirs(out_dir, exist_ok=True)
    c = cfg["model"]
    hf = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": c["dim"],
          "intermediate_size": c["ffn_dim"], "num_hidden_layers": c["n_layers"],
          "num_attention_heads": c["n_heads"], "num_key_value_heads": c["n_kv_heads"], "head_dim": c["head_dim"],
          "hidden_act": "silu", "max_position_embeddings": c["max_pos"], "rms_norm_eps": c["norm_eps"],
          "rope_theta": c["rope_theta"], "rope_scaling": None, "tie_word_embeddings": c["tied"],
          "vocab_size": c["vocab"], "bos_token_id": tok.bos, "eos_token_id": tok.eot,
          "attention_bias": False, "mlp_bias": False, "initializer_range": 0.02,
          "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype]}
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(hf, f, indent=1)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": tok.bos, "eos_token_id": tok.eot, "do_sample": False}, f, indent=1)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), hf_state_dict(model), dtype)
    src = os.path.dirname(cfg["data"]["tokenizer_path"])
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(src, fn), "rb") as fi, open(os.path.join(out_dir, fn), "wb") as fo:
            fo.write(fi.read())


# ---------------------------------------------------------------- checks against the C engine

def check_prompt(P, bindir, cfg, n=20):
    """Token ids of prompt.py vs model/prompt.c (datasets/tools/prompt_check) on generated docs/questions."""
    exe = os.path.join(bindir, "prompt_check")
    lines, want = ["P"], [P.prefix]
    for i in range(n):
        ctx = worldgen.make_context(777 + i)
        for t, x in ctx["docs"][:3]:
            lines.append("D\t%s\t%s" % (t, x))
            want.append(P.doc(t, x))
        for _, q, _ in ctx["qa"][:3]:
            lines.append("Q\t" + q)
            want.append(P.question(q))
    path = os.path.join(bindir, "prompt_lines.txt")
    with open(path, "w") as f:
        f.write("\n".join(x.replace("\\", "\\\\").replace("\n", "\\n") for x in lines) + "\n")
    got = subprocess.run([exe, cfg["data"]["tokenizer_path"], path], capture_output=True, text=True, check=True)
    got = [[int(v) for v in ln.split()] for ln in got.stdout.strip().split("\n")]
    bad = sum(g != w for g, w in zip(got, want)) + abs(len(got) - len(want))
    print("check-prompt: %d prompt pieces, %d differ between prompt.py and model/prompt.c" % (len(want), bad))
    return bad == 0


def c_logits(exe, model_path, ids, n_gen=8):
    path = model_path.rstrip("/") + ".ids.txt"
    with open(path, "w") as f:
        f.write(" ".join(map(str, ids)))
    r = subprocess.run([exe, "-m", model_path, "--ids-file", path, "-n", str(n_gen), "--threads", "2"],
                       capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("%s failed: %s" % (exe, r.stderr.strip()))
    return json.loads(r.stdout)


@torch.no_grad()
def torch_full_logits(model, ids, n_gen, dev):
    """Greedy continuation and first logits of a plain causal run at positions 0.. (fp32)."""
    ids = list(ids)
    first, gen = None, []
    for i in range(n_gen):
        T = len(ids)
        tok = torch.tensor([ids], device=dev)
        pos = torch.arange(T, device=dev)[None]
        mask = torch.ones(T, T, dtype=torch.bool, device=dev).tril()
        lg = model.logits(model.hidden(tok, pos, mask[None, None]))[0, -1].float()
        if first is None:
            first = lg.cpu()
        gen.append(int(lg.argmax()))
        ids.append(gen[-1])
    return first, gen


def check_c(model, cfg, P, out, bindir, dev, dtype="F32"):
    """Exports the weights in dtype and compares the engine's logits (lazy-logits, fp32 compute)
    with PyTorch's (fp32 compute on the same dtype-rounded weights) on a few prompts; also
    through lazy-convert's GGUF when the tool exists. Returns the worst max |diff|."""
    model = copy.deepcopy(model).float().eval()
    if dtype != "F32":
        tdt = {"F16": torch.float16, "BF16": torch.bfloat16}[dtype]
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(tdt).float())
    tag = dtype.lower()
    hf_dir = os.path.join(out, "hf_check_" + tag)
    export_hf(model, cfg, P.tok, hf_dir, dtype)
    targets = [("hf-" + tag, hf_dir)]
    conv = os.path.join(bindir, "lazy-convert")
    if os.path.exists(conv):
        g = os.path.join(out, "model_check_%s.gguf" % tag)
        r = subprocess.run([conv, hf_dir, g, "--outtype", tag], capture_output=True, text=True)
        if r.returncode == 0:
            targets.append(("gguf-" + tag, g))
        else:
            print("check-c: lazy-convert failed: %s" % r.stderr.strip())
    worst, report = 0.0, []
    for i in range(3):
        ctx = worldgen.make_context(4242 + i, "dev")
        ids = list(P.prefix)
        for t, x in ctx["docs"]:
            ids += P.doc(t, x)
        ids += P.question(ctx["qa"][0][1])
        ref, ref_gen = torch_full_logits(model, ids, 6, dev)
        if dev.type == "cuda":  # the bf16 autocast model as trained, for the bf16-tolerance criterion
            with torch.autocast("cuda", dtype=torch.bfloat16):
                ref16, _ = torch_full_logits(model, ids, 1, dev)
            bf = float((ref16 - ref).abs().max())
        else:
            bf = None
        for name, path in targets:
            j = c_logits(os.path.join(bindir, "lazy-logits"), path, ids, 6)
            cl = torch.tensor(j["logits"])
            d = float((cl - ref).abs().max())
            rel = d / float(ref.abs().max())
            worst = max(worst, d)
            line = ("check-c: prompt %d (%d tokens) %-8s max|dlogit| %.3g (rel %.2g), argmax %s, greedy %s%s" % (
                i, len(ids), name, d, rel, "same" if int(cl.argmax()) == int(ref.argmax()) else "DIFFERENT",
                "same" if j["greedy"] == ref_gen else "DIFFERENT %s vs %s" % (j["greedy"], ref_gen),
                "" if bf is None else "; torch bf16-autocast vs fp32 %.3g, engine vs bf16-autocast %.3g" % (
                    bf, float((cl - ref16).abs().max()))))
            print(line)
            report.append(line)
    return worst, report


@torch.no_grad()
def check_block(model, P, dev):
    """The block mask (with its two key copies) against explicit standalone encoding:
    prefix KV once, each document encoded after the prefix at s.., its keys re-rotated by
    p - s, then the question over all of them. Returns max |diff| of the question logits."""
    model = model.float().eval()
    ctx = worldgen.make_context(99, "dev", k_range=(4, 5))
    docs, q = ctx["docs"], ctx["qa"][0][1]
    e = encode_example(P, docs, [(q, None)], True)
    b = to_device(collate([e], [True], pad_to=1), dev)
    ref = model.logits(run_hidden(model, b))[0]
    s = len(P.prefix)
    t = lambda ids: torch.tensor([ids], device=dev)  # noqa: E731
    _, kv_p = model.forward_kv(t(P.prefix), torch.arange(s, device=dev)[None])
    past = [(k, v) for k, v in kv_p]
    p = s
    for title, text in docs:
        ids = P.doc(title, text)
        _, kv = model.forward_kv(t(ids), torch.arange(s, s + len(ids), device=dev)[None], kv_p)
        past = [(torch.cat([pk, rerotate(k, p - s, model.inv_freq)], 2), torch.cat([pv, v], 2))
                for (pk, pv), (k, v) in zip(past, kv)]
        p += len(ids)
    qi = P.question(q)
    lg, _ = model.forward_kv(t(qi), torch.arange(p, p + len(qi), device=dev)[None], past)
    d = float((lg[0] - ref[-len(qi):]).abs().max())
    # and the eviction mask equals a store that dropped the hidden keys (window kept)
    e3 = encode_example(P, docs, [(q, None)], True, (0.3, 8, random.Random(7)))
    ref3 = model.logits(run_hidden(model, to_device(collate([e3], [True], pad_to=1), dev)))[0]
    kept = torch.tensor([not h for h in e3["hide"][s:p]], device=dev)
    assert 0 < int(kept.sum()) < p - s, "the eviction check hid nothing or everything"
    past3 = [(torch.cat([k[:, :, :s], k[:, :, s:][:, :, kept]], 2), torch.cat([v[:, :, :s], v[:, :, s:][:, :, kept]], 2))
             for k, v in past]
    lg3, _ = model.forward_kv(t(qi), torch.arange(p, p + len(qi), device=dev)[None], past3)
    d = max(d, float((lg3[0] - ref3[-len(qi):]).abs().max()))
    # and the full mask equals a plain causal run
    e2 = encode_example(P, docs, [(q, None)], False)
    b2 = to_device(collate([e2], [False], pad_to=1), dev)
    full = model.logits(run_hidden(model, b2))[0]
    plain, _ = model.forward_kv(b2["tok"], b2["pos"])
    d2 = float((full - plain[0]).abs().max())
    # and a padded batch of mixed masks and sizes equals its examples run one by one
    exs, bl = [], []
    for i, (k, blk) in enumerate([(5, True), (3, False), (2, True), (4, False)]):
        c = worldgen.make_context(50 + i, "dev", k_range=(k, k))
        exs.append(encode_example(P, c["docs"], [(q, a) for _, q, a in c["qa"]], blk))
        bl.append(blk)
    hb = run_hidden(model, to_device(collate(exs, bl), dev))
    d3 = 0.0
    for i, (e, blk) in enumerate(zip(exs, bl)):
        h1 = run_hidden(model, to_device(collate([e], [blk], pad_to=1), dev))[0]
        d3 = max(d3, float((hb[i, :len(e["tok"])] - h1).abs().max()))
    print("check-block: block mask (also with evicted keys) vs standalone+re-rotation max|d| %.3g; full mask vs plain causal %.3g; "
          "batched vs one by one %.3g" % (d, d2, d3))
    return max(d, d2, d3)


# ---------------------------------------------------------------- small checkpoints
# The device machine is given back 30 s after a call, and at most 8 files of 16 MiB come
# back from it, so a run split over calls carries this instead of ckpt.pt: bf16 weights
# in shards under 15 MiB and the run state; the optimiser restarts (Adam with betas
# (0.9, 0.95) forgets within ~50 steps) under a short learning-rate re-warm-up.

SMALL_STATE = "resume_state.json"


def save_small(model, state, d, shard_bytes=15 << 20):
    os.makedirs(d, exist_ok=True)
    shards, cur, size = [], {}, 0
    for n, p in model.state_dict().items():
        t = p.detach().to("cpu", torch.bfloat16).clone()
        nb = t.numel() * 2
        if cur and size + nb > shard_bytes:
            shards.append(cur)
            cur, size = {}, 0
        cur[n] = t
        size += nb
    shards.append(cur)
    names = []
    for i, sh in enumerate(shards):
        fn = "resume_w%d.pt" % i
        torch.save(sh, os.path.join(d, fn))
        names.append(fn)
    st = {k: v for k, v in state.items() if k != "reset_at"}
    with open(os.path.join(d, SMALL_STATE), "w") as f:
        json.dump({"state": st, "shards": names}, f)


def load_hf_weights(model, d):
    """Weights of a Hugging Face folder (export_hf's, or gguf_to_hf.py's from a shipped GGUF)
    into the model: every parameter must be there with its shape."""
    path = os.path.join(d, "model.safetensors")
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    own = model.state_dict()
    seen = set()
    with torch.no_grad():
        for name, m in header.items():
            if name == "__metadata__":
                continue
            key = name[len("model."):] if name.startswith("model.") else name
            if key not in own:
                sys.exit("train: %s: tensor %s is not a parameter of this model" % (path, name))
            a0, a1 = m["data_offsets"]
            raw = bytearray(data[a0:a1])
            if m["dtype"] == "F32":
                t = torch.frombuffer(raw, dtype=torch.float32)
            elif m["dtype"] in ("BF16", "F16"):
                t = torch.frombuffer(raw, dtype=torch.int16).view(
                    torch.bfloat16 if m["dtype"] == "BF16" else torch.float16)
            else:
                sys.exit("train: %s: tensor %s has dtype %s" % (path, name, m["dtype"]))
            t = t.reshape(m["shape"]).float()
            if tuple(t.shape) != tuple(own[key].shape):
                sys.exit("train: %s: %s has shape %s, the model %s" % (path, name, list(t.shape), list(own[key].shape)))
            own[key].copy_(t)
            seen.add(key)
    missing = [k for k in own if k not in seen]
    if missing:
        sys.exit("train: %s lacks %s" % (path, ", ".join(missing[:5])))


def load_small(model, d, dev):
    meta = json.load(open(os.path.join(d, SMALL_STATE)))
    sd = {}
    for fn in meta["shards"]:
        sd.update(torch.load(os.path.join(d, fn), map_location="cpu"))
    model.load_state_dict({k: v.float() for k, v in sd.items()})
    model.to(dev)
    return meta["state"]


# ---------------------------------------------------------------- main

def load_config(path, overrides):
    cfg = json.load(open(path))
    for o in overrides:
        k, v = o.split("=", 1)
        sec, key = k.split(".")
        cfg[sec][key] = json.loads(v)
    tp = cfg["data"]["tokenizer"]
    cfg["data"]["tokenizer_path"] = tp if os.path.isabs(tp) else os.path.join(ROOT, tp)
    return cfg


def lr_at(cfg, frac, step):
    """Linear warm-up, then cosine over the training-time budget (or max_steps, whichever is nearer)."""
    t = cfg["train"]
    if step < t["warmup"]:
        return t["lr"] * (step + 1) / t["warmup"]
    if t.get("max_steps"):
        frac = max(frac, step / t["max_steps"])
    frac = min(1.0, max(0.0, frac))
    return t["min_lr"] + 0.5 * (t["lr"] - t["min_lr"]) * (1 + math.cos(math.pi * frac))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--set", action="append", default=[], help="override, e.g. train.batch=32")
    ap.add_argument("--minutes", type=float, default=9.0, help="wall-clock budget of THIS call")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/ckpt.pt when it exists")
    ap.add_argument("--resume-from", metavar="DIR", help="else continue from a small checkpoint in DIR")
    ap.add_argument("--init-hf", metavar="DIR",
                    help="start (step 0, no checkpoint) from the weights of a Hugging Face folder, e.g. "
                         "gguf_to_hf.py's conversion of models/default.gguf (fine-tuning)")
    ap.add_argument("--small-ckpt", metavar="DIR",
                    help="also write a small checkpoint (bf16 weights in files < 16 MiB, state) to DIR")
    ap.add_argument("--workers", type=int, default=-1, help="data processes (default: cores - 1)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--export-only", action="store_true")
    ap.add_argument("--dtype", default="BF16", choices=["F32", "F16", "BF16"], help="exported weights")
    ap.add_argument("--eval-only", help="HotpotQA-format questions to answer (PyTorch, greedy)")
    ap.add_argument("--mode", default="full,block")
    ap.add_argument("--check-c", metavar="BINDIR", help="compare logits with the engine (lazy-logits in BINDIR)")
    ap.add_argument("--check-prompt", metavar="BINDIR", help="compare prompt ids with prompt_check in BINDIR")
    a = ap.parse_args()
    a.dtype_given = "--dtype" in sys.argv

    cfg = load_config(a.config, a.set)
    os.makedirs(a.out, exist_ok=True)
    dev = torch.device(a.device)
    seed = cfg["train"]["seed"]
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    tok = bpe_train.BPE(cfg["data"]["tokenizer_path"])
    P = prompt.Prompt(tok)
    cfg["model"]["vocab"] = tok.vocab_size
    logf = open(os.path.join(a.out, "log.txt"), "a")

    def log(s):
        print(s, flush=True)
        logf.write(s + "\n")
        logf.flush()

    training = not (a.check_c or a.check_prompt or a.eval_only or a.export_only)
    workers = a.workers if a.workers >= 0 else max(1, (os.cpu_count() or 2) - 1)
    data = Batches(cfg, 0, workers) if training else None  # fork the workers before CUDA starts
    model = Llama(cfg["model"]).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    use_amp = dev.type == "cuda" and cfg["train"].get("amp", "bf16") == "bf16"

    def amp():
        return torch.autocast("cuda", dtype=torch.bfloat16) if use_amp else torch.autocast("cpu", enabled=False)

    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["train"]["wd"]},
                             {"params": other, "weight_decay": 0.0}], lr=cfg["train"]["lr"], betas=(0.9, 0.95),
                            eps=1e-8, **({"fused": True} if dev.type == "cuda" else {}))
    ck = os.path.join(a.out, "ckpt.pt")
    state = {"step": 0, "train_s": 0.0, "curve": [], "evals": []}
    if (a.resume or a.export_only or a.eval_only) and os.path.exists(ck):
        try:
            st = torch.load(ck, map_location=dev, weights_only=False)
        except TypeError:  # torch < 1.13
            st = torch.load(ck, map_location=dev)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        state = st["state"]
        log("resumed from %s at step %d (%.1f min trained)" % (ck, state["step"], state["train_s"] / 60))
    elif a.export_only or a.eval_only:
        log("warning: no checkpoint in %s, using the untrained model" % a.out)

    def save():
        tmp = ck + ".tmp"
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state, "cfg": cfg}, tmp)
        os.replace(tmp, ck)

    if state["step"] == 0 and a.resume_from and os.path.exists(os.path.join(a.resume_from, SMALL_STATE)):
        state = load_small(model, a.resume_from, dev)
        state["reset_at"] = state["step"]  # fresh optimiser moments: re-warm the learning rate
        log("resumed weights (optimiser reset) from %s at step %d (%.1f min trained)" % (
            a.resume_from, state["step"], state["train_s"] / 60))

    if state["step"] == 0 and a.init_hf:
        load_hf_weights(model, a.init_hf)
        state["init_hf"] = a.init_hf
        log("initial weights from %s (fine-tuning; fresh optimiser and schedule)" % a.init_hf)

    if a.check_prompt:
        ok = check_prompt(P, a.check_prompt, cfg)
        sys.exit(0 if ok else 1)
    if a.check_c:
        worst_b = check_block(model, P, dev)
        worst, report = check_c(model, cfg, P, a.out, a.check_c, dev, a.dtype if a.dtype_given else "F32")
        json.dump({"block_vs_standalone": worst_b, "c_vs_torch_max_abs": worst, "report": report},
                  open(os.path.join(a.out, "check_c.json"), "w"), indent=1)
        sys.exit(0 if worst < cfg["train"].get("check_tol", 1e-3) and worst_b < 1e-3 else 1)
    if a.eval_only:
        qs = json.load(open(a.eval_only))
        res, preds = eval_questions(model, P, qs, dev, amp, modes=a.mode.split(","))
        for m, p in preds.items():
            json.dump({"answer": p}, open(os.path.join(a.out, "pred_torch_%s.json" % m), "w"), indent=0)
        json.dump({"questions": a.eval_only, "step": state["step"], "torch": res},
                  open(os.path.join(a.out, "eval_torch.json"), "w"), indent=1)
        log(evaluate.table({"torch-" + m: r for m, r in res.items()}))
        return
    if a.export_only:
        export_hf(model, cfg, tok, os.path.join(a.out, "hf"), a.dtype)
        log("exported %s weights to %s/hf" % (a.dtype, a.out))
        return

    # dev set: unseen (dev-split) entities, gold among distractors
    dv = cfg["data"]["dev"]
    dev_path = os.path.join(a.out, "dev")
    if not os.path.exists(os.path.join(dev_path, "questions.json")):
        worldgen.cmd_split(argparse.Namespace(split="dev", seed=dv["seed"], worlds=dv["worlds"],
                                              per_type=dv["per_type"], distractors=dv.get("distractors", 9), out=dev_path))
    dev_qs = json.load(open(os.path.join(dev_path, "questions.json")))

    t_cfg = cfg["train"]
    eval_modes = t_cfg.get("eval_modes", ["full", "block"])  # e.g. "evict20" as well (eval_questions)
    budget_s = t_cfg["budget_minutes"] * 60
    log("model %.2fM parameters (%s), vocab %d, device %s, amp %s, %d data workers, batch %d" % (
        n_params / 1e6, json.dumps(cfg["model"]), tok.vocab_size, dev, use_amp, workers, t_cfg["batch"]))
    data.next_step = state["step"]
    t_call = time.time()
    reserve = t_cfg.get("reserve_s", 45)
    cf = open(os.path.join(a.out, "curve.jsonl"), "a")
    acc = {"ans": 0.0, "lm": 0.0, "n": 0, "tok": 0}
    t_last = time.time()
    finished = False
    try:
        while True:
            if state["train_s"] >= budget_s or state["step"] >= t_cfg.get("max_steps", 1 << 40):
                finished = True
                break
            if time.time() - t_call > a.minutes * 60 - reserve:
                break
            t0 = time.time()
            bnp = data.get()
            bnp["sel"] = np.flatnonzero(bnp["lab"].reshape(-1) != -100)
            bnp["sel_lm"] = np.flatnonzero(bnp["lm"].reshape(-1) != -100)
            b = to_device(bnp, dev)
            lr = lr_at(cfg, state["train_s"] / budget_s, state["step"])
            if "reset_at" in state:  # after a weights-only resume
                lr *= min(1.0, (state["step"] - state["reset_at"] + 1) / t_cfg.get("resume_warmup", 100))
            for g in opt.param_groups:
                g["lr"] = lr
            with amp():
                loss, parts = forward_loss(model, b, t_cfg["lm_weight"])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gn = torch.nn.utils.clip_grad_norm_(model.parameters(), t_cfg["clip"])
            opt.step()
            state["step"] += 1
            acc["ans"] += parts["ans"]  # stays on the device: no sync per step
            acc["lm"] += parts.get("lm", 0.0)
            acc["n"] += 1
            acc["tok"] += int(bnp["len"].sum())
            state["train_s"] += time.time() - t0
            if state["step"] % t_cfg["log_every"] == 0:
                dt = time.time() - t_last
                t_last = time.time()
                rec = {"step": state["step"], "train_min": round(state["train_s"] / 60, 3),
                       "loss_answer": round(float(acc["ans"]) / acc["n"], 4), "lr": lr, "grad_norm": round(float(gn), 3),
                       "steps_per_s": round(acc["n"] / dt, 2), "tok_per_s": int(acc["tok"] / dt)}
                if t_cfg["lm_weight"] > 0:
                    rec["loss_lm"] = round(float(acc["lm"]) / acc["n"], 4)
                state["curve"].append(rec)
                cf.write(json.dumps(rec) + "\n")
                cf.flush()
                log(json.dumps(rec))
                acc = {"ans": 0.0, "lm": 0.0, "n": 0, "tok": 0}
            if state["step"] % t_cfg["eval_every"] == 0:
                n_e = t_cfg.get("eval_n", 100)
                sub = sum(([q for q in dev_qs if q["type"] == t][:n_e] for t in ("single", "bridge", "comparison")), [])
                res, _ = eval_questions(model, P, sub, dev, amp, modes=eval_modes)
                e = {"step": state["step"], **{"%s_%s_em" % (m, t): round(r[t]["em"], 1) for m, r in res.items()
                                               for t in ("single", "bridge", "comparison")}}
                state["evals"].append(e)
                log("dev " + json.dumps(e))
                t_last = time.time()
            if state["step"] % t_cfg["ckpt_every"] == 0:
                save()
    finally:
        data.close()
    save()
    if a.small_ckpt:
        save_small(model, state, a.small_ckpt)
        log("small checkpoint (bf16 weights, no optimiser) in %s" % a.small_ckpt)
    log("stopped at step %d, %.2f of %.2f training minutes%s" % (
        state["step"], state["train_s"] / 60, budget_s / 60, " (finished)" if finished else " (resume to continue)"))
    if finished:
        export_hf(model, cfg, tok, os.path.join(a.out, "hf"), a.dtype)
        res, preds = eval_questions(model, P, dev_qs, dev, amp, modes=eval_modes)
        for m, p in preds.items():
            json.dump({"answer": p}, open(os.path.join(a.out, "pred_dev_torch_%s.json" % m), "w"), indent=0)
        log(evaluate.table({"dev-torch-" + m: r for m, r in res.items()}))
        json.dump({"params": n_params, "steps": state["step"], "train_minutes": state["train_s"] / 60,
                   "config": cfg, "dev_torch": res, "evals": state["evals"], "curve": state["curve"]},
                  open(os.path.join(a.out, "metrics.json"), "w"), indent=1)
        log("exported %s weights to %s/hf; metrics in %s/metrics.json" % (a.dtype, a.out, a.out))


if __name__ == "__main__":
    main()
