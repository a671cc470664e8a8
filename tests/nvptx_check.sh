#!/usr/bin/env bash
# Compiles kernels/decode_persistent.cl for NVIDIA without a GPU: clang's
# OpenCL front end to PTX (libclc for the builtins), then ptxas for sm_90.
# Catches compile errors in the NVIDIA-only kernel (inline PTX: PoCL cannot
# build it) before spending device time. Register counts differ from
# NVIDIA's own OpenCL compiler (it spends fewer; add -cl-nv-verbose to
# CLCHAT_PERSIST_DEFINES on the GPU for the real figures).
#   tests/nvptx_check.sh ["EXTRA -D OPTIONS"] ["WEIGHT TYPE -D OPTIONS"]
# (PWG: 512 unless the extra options set it.)
# Needs clang-14, libclc-14 (Debian) and ptxas (CUDA toolkit); not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat kernels/persistent_layout.cl kernels/decode_persistent.cl >"$tmp/k.cl"
types=${2:-"-DWT_QKV=2 -DWT_WO=2 -DWT_FFN=2 -DWT_DOWN=2 -DWT_HEAD=8 -DWT_EMBD=8"}
# SmolLM2-135M's shapes.
shape="-DN_EMBD=576 -DN_FF=1536 -DN_HEAD=9 -DN_HEAD_KV=3 -DHEAD_DIM=64 -DN_ROT=64 -DN_LAYER=30
  -DN_VOCAB=49152 -DN_CTX=2048 -DRMS_EPS=1e-5f -DATT_SPLIT_MAX=16"
[[ ${1:-} == *-DPWG=* ]] || shape+=" -DPWG=512"
inc=$(clang-14 -print-resource-dir)/include/opencl-c.h
# shellcheck disable=SC2086
clang-14 -x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -O2 -S -Wall -Werror \
  -Wno-linker-warnings -Xclang -finclude-default-header -include "$inc" \
  -Xclang -mlink-builtin-bitcode -Xclang /usr/lib/clc/nvptx64--nvidiacl.bc -Dasm=__asm__ \
  $shape $types ${1:-} "$tmp/k.cl" -o "$tmp/k.ptx"
sed -i 's/^\.target sm_[0-9]*.*/.target sm_90/; s/^\.version [0-9.]*/.version 8.0/' "$tmp/k.ptx"
ptxas -arch=sm_90 -v "$tmp/k.ptx" -o "$tmp/k.cubin" 2>&1 | grep -E "error|fatal|registers|spill"
