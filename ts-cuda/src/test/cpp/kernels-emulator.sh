#!/usr/bin/env bash
# Runs the kernels of the Gemma 3, Jamba and tensor-parallel paths of kernels.cu on the host:
# paged_attention (with its sliding window and soft-capped scores) and paged_attention_tiled (its
# bits against paged_attention's, windows and soft-caps included), qkv_rope_store (with and
# without RoPE, norms and bias), rmsnorm_add, silu_mul / gelu_tanh_mul and their bf16 forms,
# softcap_logits, to_bf16 and add_rows. Cuts those kernels and every helper they name (found by
# their signatures, wherever they sit in the file) out of kernels.cu, builds them with g++ (C++17)
# inside kernels_emulator.cpp beside this script, which runs every thread of a block as a fiber
# (shuffles, __syncwarp and __syncthreads as rendezvous), and compares them over seeded random
# cases with float64 references within stated bounds, with float32 ones bit for bit, and a token's
# attention alone with the same token in a batch. Needs g++ and python3, no GPU; a few seconds.
# Arguments: none (seeds 1 to 5), or seeds; KERNELS_CU names another kernels.cu (a changed copy).
# Exits non-zero on any failure.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
kernels="${KERNELS_CU:-$here/../../main/resources/io/tokenspeed/cuda/kernels.cu}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$kernels" "$work" <<'PY'
import re, sys

path, work = sys.argv[1], sys.argv[2]
src = open(path, encoding="utf-8").read()
roots = ["paged_attention", "paged_attention_tiled", "qkv_rope_store", "rmsnorm_add", "silu_mul", "gelu_tanh_mul",
         "silu_mul_bf16", "gelu_tanh_mul_bf16", "softcap_logits", "to_bf16", "add_rows"]

# The text with comments and the insides of literals blanked (same offsets), for finding code.
def blank(s):
    out, i, n = list(s), 0, len(s)
    def wipe(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "
    while i < n:
        if s.startswith("//", i):
            j = s.find("\n", i)
            j = n if j < 0 else j
            wipe(i, j)
            i = j
        elif s.startswith("/*", i):
            j = s.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(i, j)
            i = j
        elif s[i] in "\"'":
            q, j = s[i], i + 1
            while j < n and s[j] != q:
                j += 2 if s[j] == "\\" else 1
            wipe(i + 1, j)
            i = j + 1
        else:
            i += 1
    return "".join(out)

code = blank(src)

def close_brace(at):  # offset just past the brace matching the one at `at`
    depth = 0
    for k in range(at, len(code)):
        if code[k] == "{":
            depth += 1
        elif code[k] == "}":
            depth -= 1
            if depth == 0:
                return k + 1
    raise SystemExit("kernels.cu: unbalanced braces after offset %d" % at)

def line_start(k):
    return code.rfind("\n", 0, k) + 1

# Every top-level definition: functions (__device__ / __global__, with a template line above),
# structs, typedefs and #defines, by name -> [(start, end)].
defs = {}
def add(name, start, end):
    defs.setdefault(name, []).append((start, end))

fn = re.compile(r"^(?:template\s*<[^>\n]*>\s*\n)?(?=\S)[^\n#;{}]*\b(?:__global__|__device__)\b"
                r"(?:[^\n;{}()]|\([^()\n]*\))*?\b(?!__launch_bounds__\b|__align__\b)"
                r"([A-Za-z_]\w*)\s*\(", re.M)
for m in fn.finditer(code):
    k = m.end()
    depth = 1
    while depth:  # past the parameter list
        depth += {"(": 1, ")": -1}.get(code[k], 0)
        k += 1
    brace = code.find("{", k)
    semi = code.find(";", k)
    if brace < 0 or (0 <= semi < brace):
        continue  # a declaration only
    add(m.group(1), m.start(), close_brace(brace))
for m in re.finditer(r"^struct\s+(?:__align__\(\d+\)\s+)?([A-Za-z_]\w*)[^;{]*\{", code, re.M):
    end = close_brace(m.end() - 1)
    add(m.group(1), m.start(), code.index(";", end) + 1)
for m in re.finditer(r"^typedef\b[^;]*?\b([A-Za-z_]\w*)\s*;", code, re.M):
    add(m.group(1), m.start(), m.end())
for m in re.finditer(r"^#define\s+([A-Za-z_]\w*)(?:[^\n]*\\\n)*[^\n]*", code, re.M):
    add(m.group(1), m.start(), m.end())

# The roots and, transitively, every definition whose name their code mentions.
chosen, todo = {}, list(roots)
while todo:
    name = todo.pop()
    if name in chosen:
        continue
    if name not in defs:
        raise SystemExit("kernels.cu: no definition of " + name)
    if len(defs[name]) > 1:
        raise SystemExit("kernels.cu: %s is defined %d times" % (name, len(defs[name])))
    start, end = defs[name][0]
    chosen[name] = (start, end)
    for ident in set(re.findall(r"\b[A-Za-z_]\w*\b", code[start:end])):
        if ident in defs and ident not in chosen:
            todo.append(ident)

parts = []
for name, (start, end) in sorted(chosen.items(), key=lambda kv: kv[1][0]):
    # with the comment lines right above it
    first = start
    while first > 0:
        prev = src.rfind("\n", 0, first - 1) + 1
        if src[prev:first].lstrip().startswith("//"):
            first = prev
        else:
            break
    parts.append('#line %d "kernels.cu"\n%s\n' % (src.count("\n", 0, first) + 1, src[first:end]))
body = "\n".join(parts)
shared = sorted(set(re.findall(
    r"extern\s+__shared__\s+(?:__align__\(\d+\)\s+)?(\w+)\s+(\w+)\s*\[\s*\]", body)))
with open(work + "/kernels_body.inc", "w", encoding="utf-8") as f:
    f.write(body)
with open(work + "/kernels_shared.inc", "w", encoding="utf-8") as f:
    for t, n in shared:
        f.write("EMU_DYNAMIC_SHARED(%s, %s)\n" % (t, n))
with open(work + "/kernels_cut.txt", "w", encoding="utf-8") as f:
    f.write(" ".join(sorted(chosen)) + "\n")
PY
# no contraction into FMAs on the host: the float32 references round every operation as written
# (a GPU may contract; the float64 bounds allow for it)
g++ -std=c++17 -O2 -ffp-contract=off -fno-fast-math -fno-strict-aliasing -Wall \
  -Wno-unknown-pragmas -Wno-unused-function -I "$work" -o "$work/emulator" \
  "$here/kernels_emulator.cpp"
"$work/emulator" "$@"
