"""Compiles kernels.cu with NVRTC, without a GPU, and prints ptxas's report of every kernel.

For checking a kernel change on a machine without a GPU: NVRTC compiles for any target, and
`--ptxas-options=-v` makes ptxas report each kernel's registers, spills and barriers, and warn where
it serializes wgmma's. NVRTC comes from the CUDA toolkit or from the nvidia-cuda-nvrtc wheel
(`python3 -m venv /tmp/cu && /tmp/cu/bin/pip install nvidia-cuda-nvrtc`, then
`LD_LIBRARY_PATH=/tmp/cu/lib/python3.*/site-packages/nvidia/cu13/lib`).

    python3 ts-cuda/src/test/python/ptxas_info.py [--arch sm_90a] [--nvrtc PATH] [--grep TEXT]

Exits 1 when the source does not compile (the log says why).
"""

import argparse
import ctypes
import glob
import os
import sys


def find_nvrtc():
    dirs = os.environ.get("LD_LIBRARY_PATH", "").split(":") + [
        "/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu"]
    dirs += glob.glob("/usr/local/lib/python3*/dist-packages/nvidia/cu13/lib")
    for d in dirs:
        for path in sorted(glob.glob(os.path.join(d, "libnvrtc.so.13*"))):
            if "builtins" not in path and "alt" not in path:
                return path
    sys.exit("libnvrtc.so.13 not found: pass --nvrtc or set LD_LIBRARY_PATH (see the docstring)")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser()
    p.add_argument("--arch", default="sm_90a")
    p.add_argument("--nvrtc")
    p.add_argument("--grep", help="print only the report lines of kernels whose name contains it")
    p.add_argument("--source", default=os.path.join(
        here, "../../main/resources/io/tokenspeed/cuda/kernels.cu"))
    a = p.parse_args()
    nv = ctypes.CDLL(a.nvrtc or find_nvrtc())
    prog = ctypes.c_void_p()
    src = open(a.source, "rb").read()
    if nv.nvrtcCreateProgram(ctypes.byref(prog), src, b"kernels.cu", 0, None, None) != 0:
        sys.exit("nvrtcCreateProgram failed")
    # the options CudaDevice compiles with, and ptxas's report
    opts = [b"--gpu-architecture=" + a.arch.encode(), b"-std=c++17", b"--ptxas-options=-v"]
    rc = nv.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    nv.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nv.nvrtcGetProgramLog(prog, log)
    text = log.value.decode(errors="replace")
    if a.grep:
        keep, lines = False, []
        for line in text.splitlines():
            if "Compiling entry function" in line:
                keep = a.grep in line
            if keep or "warning" in line.lower() or "error" in line.lower():
                lines.append(line)
        text = "\n".join(lines)
    print(text)
    print(f"nvrtc: {'compiled' if rc == 0 else 'failed, code ' + str(rc)} for {a.arch}")
    sys.exit(0 if rc == 0 else 1)


if __name__ == "__main__":
    main()
