#!/usr/bin/env python3
"""gguf_to_hf.py - a Llama GGUF written by tools/lazy-convert back into a Hugging Face
folder (config.json, model.safetensors, tokenizer files), so that training can
continue from a shipped model (train.py --init-hf DIR).

Pure Python (no numpy, no torch): tensors keep their stored bytes (BF16, F16 or
F32); only the q/k rows are permuted back from the engine's adjacent rotary pairs
to Hugging Face's half-split layout, the inverse of lazy-convert's permute_qk
(GGUF row h*d + 2i + j  <-  HF row h*d + j*d/2 + i). Checked by converting
models/default.gguf and comparing the engine's logits on both (datasets/README.md).

usage: python3 datasets/train/gguf_to_hf.py MODEL.gguf OUT_DIR [--tokenizer DIR]
"""
import argparse
import json
import os
import shutil
import struct
import sys

GGUF_TYPES = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
DTYPES = {0: ("F32", 4), 1: ("F16", 2), 30: ("BF16", 2)}
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Reader:
    def __init__(self, buf, path):
        self.b, self.o, self.path = buf, 0, path

    def take(self, fmt):
        n = struct.calcsize("<" + fmt)
        if self.o + n > len(self.b):
            sys.exit("gguf_to_hf: %s: truncated at offset %d" % (self.path, self.o))
        v = struct.unpack_from("<" + fmt, self.b, self.o)
        self.o += n
        return v[0] if len(v) == 1 else v

    def string(self):
        n = self.take("Q")
        if self.o + n > len(self.b):
            sys.exit("gguf_to_hf: %s: string past the end at offset %d" % (self.path, self.o))
        s = self.b[self.o:self.o + n].decode("utf-8", "replace")
        self.o += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("I"), self.take("Q")
            return [self.value(et) for _ in range(n)]
        if t not in GGUF_TYPES:
            sys.exit("gguf_to_hf: %s: unknown value type %d at offset %d" % (self.path, t, self.o))
        return self.take(GGUF_TYPES[t])


def read_gguf(path):
    with open(path, "rb") as f:
        buf = f.read()
    r = Reader(buf, path)
    if buf[:4] != b"GGUF":
        sys.exit("gguf_to_hf: %s: not a GGUF file" % path)
    r.o = 4
    version, n_tensors, n_kv = r.take("I"), r.take("Q"), r.take("Q")
    if version not in (2, 3):
        sys.exit("gguf_to_hf: %s: GGUF version %d" % (path, version))
    kv = {}
    for _ in range(n_kv):
        k = r.string()
        kv[k] = r.value(r.take("I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        nd = r.take("I")
        ne = [r.take("Q") for _ in range(nd)]
        t, off = r.take("I"), r.take("Q")
        infos.append((name, ne, t, off))
    align = kv.get("general.alignment", 32)
    base = (r.o + align - 1) // align * align
    tensors = {}
    for name, ne, t, off in infos:
        if t not in DTYPES:
            sys.exit("gguf_to_hf: %s: tensor %s has type %d (only F32, F16, BF16 convert back)" % (path, name, t))
        dt, es = DTYPES[t]
        n = 1
        for x in ne:
            n *= x
        a = base + off
        if a + n * es > len(buf):
            sys.exit("gguf_to_hf: %s: tensor %s runs past the end of the file" % (path, name))
        tensors[name] = (dt, list(reversed(ne)), buf[a:a + n * es])  # shape in row-major order
    return kv, tensors


def unpermute_qk(raw, n_heads, d, row_bytes):
    """GGUF adjacent-pair rows -> HF half-split rows (inverse of lazy-convert's permute_qk)."""
    out = bytearray(len(raw))
    for h in range(n_heads):
        for i in range(d // 2):
            for j in range(2):
                src = h * d + 2 * i + j
                dst = h * d + j * (d // 2) + i
                out[dst * row_bytes:(dst + 1) * row_bytes] = raw[src * row_bytes:(src + 1) * row_bytes]
    return bytes(out)


def write_safetensors(path, tensors):
    names = sorted(tensors)
    header, off = {}, 0
    for n in names:
        dt, shape, raw = tensors[n]
        header[n] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for n in names:
            f.write(tensors[n][2])
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--tokenizer", default=os.path.join(ROOT, "datasets", "tokenizer"),
                    help="folder with tokenizer.json (default datasets/tokenizer)")
    a = ap.parse_args()
    kv, T = read_gguf(a.model)
    if kv.get("general.architecture") != "llama":
        sys.exit("gguf_to_hf: %s: architecture %r, expected llama" % (a.model, kv.get("general.architecture")))
    if "rope_freqs.weight" in T or "llama.rope.scaling.type" in kv:
        sys.exit("gguf_to_hf: %s: rotary scaling is not converted back" % a.model)
    g = lambda k: kv["llama." + k]
    L, H, KV, D = g("block_count"), g("attention.head_count"), g("attention.head_count_kv"), g("embedding_length")
    d = kv.get("llama.attention.key_length", D // H)
    dt, shape, emb = T["token_embd.weight"]
    V = shape[0]
    tied = "output.weight" not in T
    hf = {}

    def put(hf_name, gguf_name, qk_heads=0):
        dt_, shape_, raw = T[gguf_name]
        if qk_heads:
            raw = unpermute_qk(raw, qk_heads, d, len(raw) // shape_[0])
        hf[hf_name] = (dt_, shape_, raw)

    put("model.embed_tokens.weight", "token_embd.weight")
    put("model.norm.weight", "output_norm.weight")
    if not tied:
        put("lm_head.weight", "output.weight")
    for l in range(L):
        p, q = "model.layers.%d." % l, "blk.%d." % l
        put(p + "input_layernorm.weight", q + "attn_norm.weight")
        put(p + "self_attn.q_proj.weight", q + "attn_q.weight", H)
        put(p + "self_attn.k_proj.weight", q + "attn_k.weight", KV)
        put(p + "self_attn.v_proj.weight", q + "attn_v.weight")
        put(p + "self_attn.o_proj.weight", q + "attn_output.weight")
        put(p + "post_attention_layernorm.weight", q + "ffn_norm.weight")
        put(p + "mlp.gate_proj.weight", q + "ffn_gate.weight")
        put(p + "mlp.up_proj.weight", q + "ffn_up.weight")
        put(p + "mlp.down_proj.weight", q + "ffn_down.weight")
    tok_ids = kv.get("tokenizer.ggml.bos_token_id"), kv.get("tokenizer.ggml.eos_token_id")
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D,
           "intermediate_size": g("feed_forward_length"), "num_hidden_layers": L, "num_attention_heads": H,
           "num_key_value_heads": KV, "head_dim": d, "hidden_act": "silu",
           "max_position_embeddings": g("context_length"), "rms_norm_eps": g("attention.layer_norm_rms_epsilon"),
           "rope_theta": kv.get("llama.rope.freq_base", 10000.0), "rope_scaling": None, "tie_word_embeddings": tied,
           "vocab_size": V, "bos_token_id": tok_ids[0], "eos_token_id": tok_ids[1], "attention_bias": False,
           "mlp_bias": False, "torch_dtype": {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}[dt]}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    write_safetensors(os.path.join(a.out, "model.safetensors"), hf)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(a.tokenizer, fn)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(a.out, fn))
    print("gguf_to_hf: %s -> %s (%d tensors, %s, %d layers, vocab %d%s)" % (
        a.model, a.out, len(hf), dt, L, V, ", tied" if tied else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
