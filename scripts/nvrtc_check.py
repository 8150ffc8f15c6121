#!/usr/bin/env python3
"""Compiles Aleph's run-time CUDA kernels with NVRTC, as a GPU load does, on a machine without a GPU.

    scripts/nvrtc_check.py LIBNVRTC [--arch compute_80,compute_90]

NVRTC needs no driver or device, so a kernel that would not compile on the GPU (a typo, an intrinsic the
architecture lacks) fails here, in CI, instead of at a model's load on a lent GPU. Each kernel source under
crates/models/src/backend/kernels/ is compiled for each architecture with the options backend/varlen.rs passes,
and each entry point must be in the PTX. Standard library only (ctypes).
"""
import argparse
import ctypes
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "crates/models/src/backend/kernels"


def compile_ptx(nvrtc, source: str, name: str, arch: str) -> str:
    prog = ctypes.c_void_p()
    check(nvrtc, nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None), name)
    opts = [f"--gpu-architecture={arch}".encode()]
    argv = (ctypes.c_char_p * len(opts))(*opts)
    status = nvrtc.nvrtcCompileProgram(prog, len(opts), argv)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    if status != 0:
        raise SystemExit(f"nvrtc-check: {name} for {arch} does not compile:\n{log.value.decode(errors='replace')}")
    nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    check(nvrtc, nvrtc.nvrtcGetPTX(prog, ptx), name)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    return ptx.value.decode()


def check(nvrtc, status, what):
    if status != 0:
        nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
        raise SystemExit(f"nvrtc-check: {what}: {nvrtc.nvrtcGetErrorString(status).decode()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("libnvrtc")
    ap.add_argument("--arch", default="compute_80,compute_90")
    args = ap.parse_args()
    # NVRTC opens its builtins library by name: loaded first from beside it, it is found.
    for builtins in sorted(Path(args.libnvrtc).resolve().parent.glob("libnvrtc-builtins.so*")):
        if ".alt." not in builtins.name:
            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
    nvrtc = ctypes.CDLL(args.libnvrtc)
    sources = sorted(KERNELS.glob("*.cu"))
    if not sources:
        raise SystemExit(f"nvrtc-check: no kernels under {KERNELS}")
    for path in sources:
        source = path.read_text()
        entries = re.findall(r"^ENTRY\((\w+),", source, re.M) + re.findall(r'extern "C" __global__ void (\w+)\(', source)
        entries = [e for e in entries if e != "name"]
        if not entries:
            raise SystemExit(f"nvrtc-check: {path.name} has no entry point")
        for arch in args.arch.split(","):
            ptx = compile_ptx(nvrtc, source, path.name, arch)
            missing = [e for e in entries if f".entry {e}(" not in ptx]
            if missing:
                raise SystemExit(f"nvrtc-check: {path.name} for {arch}: no {', '.join(missing)} in the PTX")
            print(f"nvrtc-check: {path.name} for {arch}: {', '.join(entries)} ({ptx.count(chr(10))} PTX lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
