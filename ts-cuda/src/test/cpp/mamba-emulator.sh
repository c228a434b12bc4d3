#!/usr/bin/env bash
# Runs the Mamba kernels of kernels.cu (mamba_conv, mamba_scan, mamba_scan_n16, softplus_bias,
# mamba_split_proj) on the host: cuts their section out of kernels.cu, builds it with g++ (C++17)
# inside mamba_emulator.cpp beside this script, and compares them bit for bit with a port of the
# CPU path's SelectiveScan over seeded random batches, and chunked prefills with whole ones. Needs
# g++ and python3, no GPU; a few seconds. Arguments: none, or a seed. Exits non-zero on a mismatch.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
kernels="$here/../../main/resources/io/tokenspeed/cuda/kernels.cu"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$kernels" "$work/mamba_body.inc" <<'PY'
import sys
s = open(sys.argv[1], encoding="utf-8").read()
marker = "// " + "-" * 82 + " Mamba\n"
start = s.index(marker)
end = s.find("\n// ------", start + len(marker))
open(sys.argv[2], "w", encoding="utf-8").write(s[start:] if end < 0 else s[start:end + 1])
PY
# no contraction into FMAs: the kernels' __fmul_rn and __fadd_rn round each operation, as Java does
g++ -std=c++17 -O2 -ffp-contract=off -fno-fast-math -fno-strict-aliasing -Wall \
  -Wno-unknown-pragmas -I "$work" -o "$work/emulator" "$here/mamba_emulator.cpp"
"$work/emulator" "$@"
