"""PyTorch on the same card and the same synthetic weights, for bin/test-gpu --bench.

Loads the checkpoint folder with transformers (bf16, attn_implementation="sdpa") and prints, like
GpuBench, `torch prefill <tokens> <ms>` (one forward over the prompt, best of 3 after a warm-up)
and `torch decode <batch> <ms per step>` (32 steps over a context, with the KV cache). With
--sdpa it also times one layer's attention alone at each prefill length, as transformers calls it
(K and V repeated to every query head, causal): `torch sdpa <backend> <tokens> <ms>` for PyTorch's
flash kernel (SDPBackend.FLASH_ATTENTION) and for the backend PyTorch picks by itself.
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AutoModelForCausalLM, DynamicCache


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


def sdpa(config, n, g):
    heads = config.num_attention_heads
    kv_heads = config.num_key_value_heads
    d = getattr(config, "head_dim", None) or config.hidden_size // heads
    q = torch.randn(1, heads, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(1, kv_heads, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(1, kv_heads, n, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = k.repeat_interleave(heads // kv_heads, dim=1)
    v = v.repeat_interleave(heads // kv_heads, dim=1)
    flops = 4 * n * n / 2 * d * heads
    for name, backends in (("flash", [SDPBackend.FLASH_ATTENTION]), ("default", None)):
        def run():
            if backends is None:
                F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                with sdpa_kernel(backends):
                    F.scaled_dot_product_attention(q, k, v, is_causal=True)
        ms = min(timed(run) for _ in range(6))
        print(f"torch sdpa {name} {n} {ms:.3f} ({flops / ms / 1e9:.0f} TFLOP/s, head size {d},"
              f" {heads} heads on {kv_heads} KV heads)", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("folder")
    p.add_argument("--prefill", default="2048,8192")
    p.add_argument("--batches", default="1,16,64")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--sdpa", action="store_true")
    a = p.parse_args()
    model = AutoModelForCausalLM.from_pretrained(
        a.folder, dtype=torch.bfloat16, attn_implementation="sdpa").to("cuda").eval()
    vocab = model.config.vocab_size
    g = torch.Generator(device="cuda").manual_seed(1)
    with torch.no_grad():
        for n in [int(x) for x in a.prefill.split(",") if x]:
            ids = torch.randint(0, vocab, (1, n), device="cuda", generator=g)
            times = [timed(lambda: model(ids, use_cache=False, logits_to_keep=1)) for _ in range(4)]
            print(f"torch prefill {n} {min(times[1:]):.2f}", flush=True)
            if a.sdpa:
                sdpa(model.config, n, g)
        steps = 32
        for b in [int(x) for x in a.batches.split(",") if x]:
            ctx = torch.randint(0, vocab, (b, a.context), device="cuda", generator=g)
            best = float("inf")
            for r in range(4):
                cache = DynamicCache()
                model(ctx, past_key_values=cache, use_cache=True, logits_to_keep=1)
                nxt = torch.randint(0, vocab, (b, 1), device="cuda", generator=g)

                def run():
                    for _ in range(steps):
                        model(nxt, past_key_values=cache, use_cache=True)

                ms = timed(run) / steps
                if r > 0:
                    best = min(best, ms)
            print(f"torch decode {b} {best:.3f}", flush=True)


if __name__ == "__main__":
    main()
