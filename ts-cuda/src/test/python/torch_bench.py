"""PyTorch on the same card and the same synthetic weights, for bin/test-gpu --bench.

Loads the checkpoint folder with transformers (bf16, attn_implementation="sdpa") and prints, like
GpuBench, `torch prefill <tokens> <ms>` (one forward over the prompt, best of 3 after a warm-up)
and `torch decode <batch> <ms per step>` (32 steps over a context, with the KV cache).
"""

import argparse
import time

import torch
from transformers import AutoModelForCausalLM, DynamicCache


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) * 1e3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("folder")
    p.add_argument("--prefill", default="2048,8192")
    p.add_argument("--batches", default="1,16,64")
    p.add_argument("--context", type=int, default=512)
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
