"""hf_peer_8b.py - the peer of bench/gpu_8b.sh on the GPU machine: Hugging Face
transformers (what a user would otherwise run) with a random-weight model of
Llama-3.1-8B's shape (bf16, SDPA attention, llama3 rope scaling), a prompt as
long as lazyquery's (prefix + 10 documents + question, ~1,600 tokens)
recomputed in full for every question (no document reuse), then 32 greedy
tokens with the KV cache. Prints time to first token and decode tokens/s
(medians of 3), CUDA-synchronised wall clock.
Usage: python3 bench/hf_peer_8b.py [PROMPT_TOKENS]"""
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

n_prompt = int(sys.argv[1]) if len(sys.argv) > 1 else 1606
cfg = LlamaConfig(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                  num_key_value_heads=8, head_dim=128, vocab_size=128256, max_position_embeddings=65536,
                  rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                "original_max_position_embeddings": 8192},
                  torch_dtype=torch.bfloat16, attn_implementation="sdpa")
torch.manual_seed(0)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
print(f"model: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters on {torch.cuda.get_device_name()}")
ids = torch.randint(3, cfg.vocab_size, (1, n_prompt), device="cuda")


def sync_time():
    torch.cuda.synchronize()
    return time.perf_counter()


ttft, rates = [], []
with torch.inference_mode():
    for rep in range(4):
        t0 = sync_time()
        out = model(ids, use_cache=True)
        nxt = out.logits[:, -1:].argmax(-1)
        t1 = sync_time()
        past = out.past_key_values
        for _ in range(32):
            out = model(nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
        t2 = sync_time()
        if rep:  # the first is a warm-up
            ttft.append(t1 - t0)
            rates.append(32 / (t2 - t1))
ttft.sort()
rates.sort()
print(f"transformers {__import__('transformers').__version__}, torch {torch.__version__}: prompt {n_prompt} tokens "
      f"recomputed: time to first token {ttft[1] * 1e3:.1f} ms (range {ttft[0] * 1e3:.1f}-{ttft[-1] * 1e3:.1f}); "
      f"decode {rates[1]:.1f} tok/s (range {rates[0]:.1f}-{rates[-1]:.1f})")
