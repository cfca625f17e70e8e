"""model.py - the Llama decoder exactly as the C engine runs it (model/forward.c):
RMSNorm (x * rsqrt(mean(x^2) + eps) * w, in fp32), RoPE in the Hugging Face
half-split layout (pairs (i, i + d/2), angles pos * theta^(-2i/d) in fp32),
GQA (query head h reads kv head h // (H/KV)), SwiGLU (down(silu(gate x) * up x)),
no biases, tied or untied output.

Two attention masks for training (see build_mask): "full" (causal over the
whole prompt) and "block" (each document sees only the prefix and itself, as
when documents are encoded standalone after the prefix and placed later with
a rotation; the question sees everything). "block" is exact: a document at
placement p, encoded standalone after the s prefix tokens, saw the prefix at
distance s + i - j from its token i; everything here runs at global positions
(p + i), so each document gets its own copy of the s prefix keys rotated at
j + p - s, and the mask sends its queries there instead of to the prefix.

Legend: B = batch, T = tokens, D = width, H/KV = heads, d = head_dim,
F = FFN width, V = vocabulary.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

KIND_PREFIX, KIND_DOC, KIND_QA, KIND_PAD = 0, 1, 2, 3


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.weight.float()).to(x.dtype)


def rope_cos_sin(pos, inv_freq):
    """pos (B, T) int -> cos, sin (B, 1, T, d/2) fp32."""
    ang = pos.float()[..., None] * inv_freq[None, None, :]
    return torch.cos(ang)[:, None], torch.sin(ang)[:, None]


def rope(x, cos, sin):
    """x (B, h, T, d), half-split pairs (i, i + d/2)."""
    d2 = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :d2], xf[..., d2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).to(x.dtype)


def build_mask(kind, seg, block, xseg, hide=None):
    """kind, seg (B, T), block (B) bool, xseg (B, X) -> (B, 1, T, T + X) bool, True = may attend.
    Keys [0, T) are the tokens themselves (rotated at their global positions); key T + x is
    extra prefix copy x, visible to the block document whose seg equals xseg[x].
    hide (B, T) bool or None: document keys the question tokens do not see (evicted from a
    compressed store; the documents themselves were encoded whole)."""
    T = kind.shape[1]
    idx = torch.arange(T, device=kind.device)
    causal = (idx[None, :] <= idx[:, None])[None]                      # (1, T, T)
    kq, kk = kind[:, :, None], kind[:, None, :]
    same = seg[:, :, None] == seg[:, None, :]
    blockdoc = block[:, None, None] & (kq == KIND_DOC)                # (B, T, 1)
    vis = torch.where(blockdoc, (kk == KIND_DOC) & same,
                      (kk == KIND_PREFIX) | ((kk == KIND_DOC) & ((kq == KIND_DOC) | (kq == KIND_QA))) | same)
    if hide is not None:
        vis = vis & ~((kq == KIND_QA) & hide[:, None, :])
    main = causal & vis
    if xseg is None or xseg.shape[1] == 0:
        return main[:, None]
    extra = blockdoc & (seg[:, :, None] == xseg[:, None, :])         # (B, T, X)
    return torch.cat([main, extra], -1)[:, None]


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        D, H, KV, d = c["dim"], c["n_heads"], c["n_kv_heads"], c["head_dim"]
        self.H, self.KV, self.d = H, KV, d
        self.q_proj = nn.Linear(D, H * d, bias=False)
        self.k_proj = nn.Linear(D, KV * d, bias=False)
        self.v_proj = nn.Linear(D, KV * d, bias=False)
        self.o_proj = nn.Linear(H * d, D, bias=False)

    def qkv(self, x):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.H, self.d).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.KV, self.d).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.KV, self.d).transpose(1, 2)
        return q, k, v

    def attend(self, q, k, v, mask):
        """q (B, H, T, d), k/v (B, KV, S, d), mask (B, 1, T, S) bool or None = all visible."""
        rep = self.H // self.KV
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(self.d)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return (torch.softmax(s, -1) @ v.float()).to(q.dtype)

    def forward(self, x, cs, csx, s, mask):
        """cs: rotation at the tokens' positions; csx: of the extra prefix copies (or None),
        which repeat the first s tokens' keys and values."""
        B, T, _ = x.shape
        q, k, v = self.qkv(x)
        q = rope(q, *cs)
        kr = rope(k, *cs)
        if csx is not None:
            D = csx[0].shape[2] // s
            kr = torch.cat([kr, rope(k[:, :, :s].repeat(1, 1, D, 1), *csx)], 2)
            v = torch.cat([v, v[:, :, :s].repeat(1, 1, D, 1)], 2)
        o = self.attend(q, kr, v, mask)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, self.H * self.d))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c["dim"], c["ffn_dim"], bias=False)
        self.up_proj = nn.Linear(c["dim"], c["ffn_dim"], bias=False)
        self.down_proj = nn.Linear(c["ffn_dim"], c["dim"], bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c["dim"], c["norm_eps"])
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c["dim"], c["norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, cs, csx, s, mask):
        x = x + self.self_attn(self.input_layernorm(x), cs, csx, s, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab"], c["dim"])
        self.layers = nn.ModuleList([Block(c) for _ in range(c["n_layers"])])
        self.norm = RMSNorm(c["dim"], c["norm_eps"])
        self.lm_head = None if c["tied"] else nn.Linear(c["dim"], c["vocab"], bias=False)
        d = c["head_dim"]
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        self.register_buffer("inv_freq", inv, persistent=False)
        self.reset_parameters()

    def reset_parameters(self):
        std = 0.02
        for n, p in self.named_parameters():
            if p.dim() == 2:
                s = std / math.sqrt(2 * self.c["n_layers"]) if n.endswith(("o_proj.weight", "down_proj.weight")) else std
                nn.init.normal_(p, 0.0, s)

    def output_weight(self):
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def hidden(self, tok, pos, mask, xpos=None, s=0):
        """Final normed hidden states (B, T, D). tok, pos (B, T); mask from build_mask;
        xpos (B, D*s): positions of the extra prefix copies (one per document slot)."""
        cs = rope_cos_sin(pos, self.inv_freq)
        csx = rope_cos_sin(xpos, self.inv_freq) if xpos is not None and xpos.shape[1] else None
        x = self.embed_tokens(tok)
        for layer in self.layers:
            x = layer(x, cs, csx, s, mask)
        return self.norm(x)

    def logits(self, h):
        return F.linear(h, self.output_weight())

    # -- explicit KV path (for checking the masks against standalone encoding) --
    def forward_kv(self, tok, pos, past=None):
        """tok, pos (1, n); past: per layer (k rotated, v) of earlier keys (1, KV, S, d), all visible.
        Returns logits (1, n, V) and this call's per-layer (k rotated at pos, v)."""
        cs = rope_cos_sin(pos, self.inv_freq)
        n = tok.shape[1]
        x = self.embed_tokens(tok)
        new = []
        for li, layer in enumerate(self.layers):
            at = layer.self_attn
            h = layer.input_layernorm(x)
            q, k, v = at.qkv(h)
            q, k = rope(q, *cs), rope(k, *cs)
            new.append((k, v))
            causal = torch.ones(n, n, dtype=torch.bool, device=tok.device).tril()
            if past is not None:
                pk, pv = past[li]
                k = torch.cat([pk, k], 2)
                v = torch.cat([pv, v], 2)
                causal = torch.cat([torch.ones(n, pk.shape[2], dtype=torch.bool, device=tok.device), causal], 1)
            o = at.attend(q, k, v, causal[None, None])
            x = x + at.o_proj(o.transpose(1, 2).reshape(1, n, at.H * at.d))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.logits(self.norm(x)), new


def rerotate(k, delta, inv_freq):
    """Keys rotated at p -> rotated at p + delta (R(a) R(b) = R(a + b))."""
    pos = torch.full((1, k.shape[2]), int(delta), dtype=torch.long, device=k.device)
    return rope(k, *rope_cos_sin(pos, inv_freq))


def hf_state_dict(model):
    """Tensors under Hugging Face LlamaForCausalLM names."""
    out = {}
    for n, p in model.state_dict().items():
        if n == "inv_freq":
            continue
        out[n if n.startswith("lm_head") else "model." + n] = p
    return out
