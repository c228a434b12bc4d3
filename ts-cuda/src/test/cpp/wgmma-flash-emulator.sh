#!/usr/bin/env bash
# Runs the Hopper flash kernel of kernels.cu on the host emulator (wgmma_flash_emulator.cpp beside
# this script): cuts the kernel's template out of kernels.cu, builds with g++ (C++17) and runs
# small problems at head sizes 128 and 64 against float64 and for batch invariance, with K and V
# copied by cp.async and, where the blocks suit it, by the TMA (which must give the same bits). Needs g++ and
# python3, no GPU. Arguments: none (the whole set, about 40 s), "quick" (the small cases), or
# "hazard" (1,000 tokens: eight key tiles, so that a stage is reused while others are in flight).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
kernels="$here/../../main/resources/io/tokenspeed/cuda/kernels.cu"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$kernels" "$work/kernel_body.inc" <<'PY'
import sys
s = open(sys.argv[1], encoding="utf-8").read()
sec = s.index("// ---------------------------------------------------------------------------------- tensor cores, Hopper")
defs = [l for l in s[sec:].split("\n") if l.startswith("#define FW_")]
start = s.index("// D = 64 or 128, STAGES the stages of K and V", sec)
end = s.index("#else", start)
open(sys.argv[2], "w", encoding="utf-8").write("\n".join(defs) + "\n\n" + s[start:end])
PY
g++ -std=c++17 -O2 -w -I "$work" -o "$work/emulator" "$here/wgmma_flash_emulator.cpp"
"$work/emulator" "$@"
