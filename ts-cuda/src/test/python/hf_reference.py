"""Reference logits and greedy ids from Hugging Face transformers on the GPU, for the GPU suite.

For each fixture folder named on the command line (config.json, model.safetensors and the
reference.safetensors whose prompts it reuses), writes OUT/NAME.safetensors with, per prompt i:
  logits_i  float32 [n, vocab]  one forward over the whole prompt, float32, TF32 off
  greedy_i  int32   [16]        greedy continuation (the whole sequence recomputed per step)
  steps_i   float32 [16, vocab] the logits that chose each of those ids
  bf16_logits_i float32 [n, vocab]  the same forward with the weights and activations in bfloat16
                                    (the weights rounded to nearest even, as the project's bf16
                                    checkpoints are)
"""

import argparse
import os

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

# cuda on the GPU machine; HF_REFERENCE_DEVICE=cpu runs the same steps on a CPU (a check of this
# script: the GPU suite reads references made on its own GPU)
DEVICE = os.environ.get("HF_REFERENCE_DEVICE", "cuda")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fixtures", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("names", nargs="+")
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(a.out, exist_ok=True)
    for name in a.names:
        folder = os.path.join(a.fixtures, name)
        ref = load_file(os.path.join(folder, "reference.safetensors"))
        model = AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, attn_implementation="eager"
        ).to(DEVICE).eval()
        out = {}
        i = 0
        while f"ids_{i}" in ref:
            ids = ref[f"ids_{i}"].to(torch.long).unsqueeze(0).to(DEVICE)
            with torch.no_grad():
                out[f"logits_{i}"] = model(ids).logits[0].float().cpu().contiguous()
                # greedy by recomputing the whole sequence at each step (no cache: nothing
                # between the model's forward and the ids), beside generate() with its KV cache
                seq = ids
                steps = []
                for _ in range(16):
                    row = model(seq).logits[0, -1].float()
                    steps.append(row.unsqueeze(0))
                    seq = torch.cat([seq, row.argmax().view(1, 1)], dim=1)
                gen = model.generate(
                    ids, do_sample=False, max_new_tokens=16, min_new_tokens=16,
                    pad_token_id=0, eos_token_id=None, return_dict_in_generate=True,
                    output_logits=True)
            greedy = seq[0, ids.shape[1]:]
            cached = gen.sequences[0, ids.shape[1]:]
            cpu_steps = ref[f"steps_{i}"].to(DEVICE)
            steps = torch.cat(steps)
            print(f"{name} prompt {i}: recomputed greedy {greedy.tolist()}, generate() "
                  f"{'the same' if torch.equal(greedy, cached) else cached.tolist()}, CPU "
                  f"reference {'the same' if torch.equal(greedy.cpu().int(), ref[f'greedy_{i}']) else ref[f'greedy_{i}'].tolist()}; "
                  f"max |step logits - CPU reference's| {(steps - cpu_steps).abs().max().item():.2e}",
                  flush=True)
            out[f"greedy_{i}"] = greedy.to(torch.int32).cpu().contiguous()
            out[f"steps_{i}"] = steps.cpu().contiguous()
            i += 1
        half = AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.bfloat16, attn_implementation="eager"
        ).to(DEVICE).eval()
        for j in range(i):
            ids = ref[f"ids_{j}"].to(torch.long).unsqueeze(0).to(DEVICE)
            with torch.no_grad():
                logits = half(ids).logits[0].float()
            out[f"bf16_logits_{j}"] = logits.cpu().contiguous()
            fp32 = out[f"logits_{j}"]
            print(f"{name} prompt {j}: bf16 prefill logits vs float32 "
                  f"{((logits.cpu() - fp32).abs().max() / fp32.abs().max()).item():.2e} relative",
                  flush=True)
        save_file(out, os.path.join(a.out, name + ".safetensors"))
        where = torch.cuda.get_device_name(0) if DEVICE == "cuda" else DEVICE
        print(f"{name}: {i} prompts on {where}", flush=True)


if __name__ == "__main__":
    main()
