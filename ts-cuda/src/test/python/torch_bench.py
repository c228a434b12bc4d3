"""PyTorch on the same card and the same synthetic weights, for bin/test-gpu --bench.

Loads the checkpoint folder with transformers (bf16, attn_implementation="sdpa") and prints, like
GpuBench, `torch prefill <tokens> <ms>` (one forward over the prompt, best of 3 after a warm-up)
and `torch decode <batch> <ms per step>` (32 steps over a context, with the model's own cache: KV,
sliding windows, Mamba's state). With
--sdpa it also times one layer's attention alone at each prefill length, as transformers calls it
(K and V repeated to every query head, causal): `torch sdpa <backend> <tokens> <ms>` for PyTorch's
flash kernel (SDPBackend.FLASH_ATTENTION) and for the backend PyTorch picks by itself.

Started by torchrun (`python3 -m torch.distributed.run --nproc_per_node T`, WORLD_SIZE > 1) it runs
the model tensor-parallel over T GPUs instead (transformers' tp_plan="auto" over NCCL; gloo on a
CPU), every rank on the same ids, and rank 0 prints `torch tp T prefill ...` and `torch tp T
decode ...`; with --allreduce ROWS,... also `torch tp T allreduce <rows> x <hidden> <us>`: one
torch.distributed.all_reduce of that many float32 values, best of five runs of 20 calls.
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AutoModelForCausalLM

# cuda on the GPU machine; TORCH_BENCH_DEVICE=cpu runs the same steps on a CPU (a check of this
# script, not a figure)
DEVICE = os.environ.get("TORCH_BENCH_DEVICE", "cuda")
# set by torchrun: ranks of a tensor-parallel run
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
RANK = int(os.environ.get("RANK", "0"))
PREFIX = f"torch tp {WORLD}" if WORLD > 1 else "torch"


def say(line):
    if RANK == 0:
        print(line, flush=True)


def sync():
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def timed(fn):
    sync()
    t = time.perf_counter()
    fn()
    sync()
    return (time.perf_counter() - t) * 1e3


def sdpa(config, n, g):
    heads = config.num_attention_heads
    kv_heads = config.num_key_value_heads
    d = getattr(config, "head_dim", None) or config.hidden_size // heads
    q = torch.randn(1, heads, n, d, device=DEVICE, dtype=torch.bfloat16, generator=g)
    k = torch.randn(1, kv_heads, n, d, device=DEVICE, dtype=torch.bfloat16, generator=g)
    v = torch.randn(1, kv_heads, n, d, device=DEVICE, dtype=torch.bfloat16, generator=g)
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


def allreduce(rows, hidden):
    calls = 20
    for r in rows:
        x = torch.zeros(r * hidden, dtype=torch.float32, device=DEVICE)
        best = float("inf")
        for run in range(6):
            def many():
                for _ in range(calls):
                    dist.all_reduce(x)
            us = timed(many) * 1e3 / calls
            if run > 0:
                best = min(best, us)
        bus = 2 * (WORLD - 1) / WORLD * 4 * r * hidden / (best * 1e-6) / 1e9
        say(f"{PREFIX} allreduce {r} x {hidden} {best:.1f} us (bus {bus:.1f} GB/s)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("folder")
    p.add_argument("--prefill", default="2048,8192")
    p.add_argument("--batches", default="1,16,64")
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--sdpa", action="store_true")
    p.add_argument("--allreduce", default="")
    a = p.parse_args()
    global DEVICE
    if WORLD > 1:
        if DEVICE == "cuda":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
            DEVICE = f"cuda:{int(os.environ['LOCAL_RANK'])}"
        dist.init_process_group("nccl" if DEVICE.startswith("cuda") else "gloo")
        model = AutoModelForCausalLM.from_pretrained(
            a.folder, dtype=torch.bfloat16, attn_implementation="sdpa", tp_plan="auto").eval()
        allreduce([int(x) for x in a.allreduce.split(",") if x], model.config.hidden_size)
    else:
        try:
            model = AutoModelForCausalLM.from_pretrained(
                a.folder, dtype=torch.bfloat16, attn_implementation="sdpa").to(DEVICE).eval()
        except ValueError:
            # a model without attention layers (Mamba) has no sdpa implementation to pick
            model = AutoModelForCausalLM.from_pretrained(
                a.folder, dtype=torch.bfloat16, attn_implementation="eager").to(DEVICE).eval()
    vocab = model.config.vocab_size
    g = torch.Generator(device=DEVICE).manual_seed(1)
    with torch.no_grad():
        for n in [int(x) for x in a.prefill.split(",") if x]:
            ids = torch.randint(0, vocab, (1, n), device=DEVICE, generator=g)
            times = [timed(lambda: model(ids, use_cache=False, logits_to_keep=1)) for _ in range(4)]
            say(f"{PREFIX} prefill {n} {min(times[1:]):.2f}")
            if a.sdpa and WORLD == 1:
                sdpa(model.config, n, g)
        steps = 32
        for b in [int(x) for x in a.batches.split(",") if x]:
            ctx = torch.randint(0, vocab, (b, a.context), device=DEVICE, generator=g)
            best = float("inf")
            for r in range(4):
                out = model(ctx, use_cache=True, logits_to_keep=1)
                # the cache the model made for itself: KV (past_key_values) or Mamba's state
                # (cache_params), given back under its own name
                key = "past_key_values" if out.get("past_key_values") is not None else "cache_params"
                cache = out[key]
                nxt = torch.randint(0, vocab, (b, 1), device=DEVICE, generator=g)

                def run():
                    for s in range(steps):
                        position = torch.tensor([a.context + s], device=DEVICE)
                        model(nxt, use_cache=True, cache_position=position, **{key: cache})

                ms = timed(run) / steps
                if r > 0:
                    best = min(best, ms)
            say(f"{PREFIX} decode {b} {best:.3f}")


if __name__ == "__main__":
    main()
    if WORLD > 1:
        dist.destroy_process_group()
