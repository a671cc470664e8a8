#!/usr/bin/env bash
# Compiles kernels/decode_persistent.cl for NVIDIA without a GPU, in every
# configuration the host (engine/cl/persistent_decode.cpp) can build, and
# kernels/matmul_mma_deq.cl for every weight type it takes and attention_mma.cl: clang's
# OpenCL front end to PTX (libclc for the builtins), then ptxas for sm_90.
# Catches compile errors in the NVIDIA-only kernel (inline PTX: PoCL cannot
# build it) before spending device time, and shows what a change does to
# registers and spills.
#
# Configurations: work-groups of 512 and 256 (PWG) with each head size the
# host accepts (32, 64, 128, 256); every layer weight type (F32, F16, Q4_0,
# Q4_1, Q8_0 for Q/K/V, Wo, gate/up and down) with every embedding / lm_head
# type, and the other types with a Q8_0 head, in both work-group sizes; two
# K-quant mixes and two others with a different type per matrix; layers that
# differ in types (a second, ALT type per role: SmolLM2-135M's Q4_K_M with V
# Q5_0 / Q8_0 and down Q4_K / Q6_K by layer, a 1B-like Q4_K_M, every role
# with an ALT type) and Q, K, V of three types; a Q6_K lm_head with rows of
# at most two blocks a lane; rows of three blocks a lane on float inputs
# (held scale words, Q6_K records read at the dot); the tunable a test or a
# run may set (ATT_SPLIT_POS), a partial rotary dimension and the 1B shape with
# no L2 prefetch (L2_PREFETCH=0).
#
# Also kernels/sample.cl alone with the persistent build's fast-math flags:
# it fails if clang's PTX holds a fused or approximate double operation or
# an approximate division there (the sampling chain's exactness; the
# version before d_add etc. covered the penalties and exp gave 13 fma.rn.f64
# and 2 rcp.approx.f32).
#
# Each line: the configuration, then ptxas's registers and spill bytes
# (stores/loads) twice: "free" as clang's PTX leaves it (no thread count:
# ptxas may use up to 255 registers), and "cap" with `.reqntid PWG` added,
# what reqd_work_group_size tells NVIDIA's compiler (at 512 work-items at
# most 128 registers). NVIDIA's own OpenCL compiler spends fewer registers
# than clang + ptxas (at most 128 at 512, no spills, for the SmolLM2 shape):
# `tests/device_ab.sh trace` on the GPU shows its figures (clchat bench
# --tune persist_defines=-cl-nv-verbose).
#
#   tests/nvptx_check.sh ["EXTRA -D OPTIONS"]
#   KERNELS=DIR   compile DIR/persistent_layout.cl + DIR/decode_persistent.cl
#                 (e.g. an older tree's kernels/, for before/after figures;
#                 kernels older than decode_persistent.cl's INLINE fail the
#                 h128/h256 shapes here: clang keeps a call to a C99 `inline`
#                 function that it did not inline, which ptxas cannot resolve)
#   PTX_OUT=DIR   keep each configuration's PTX there (diff two versions)
#   ONLY=REGEX    only the configurations whose label matches (bash =~), e.g.
#                 ONLY=1b for the 1B shape's two (seconds instead of minutes)
# Exit status 1 if a configuration does not compile. Spills are reported,
# not failed: clang's PTX is only a proxy for NVIDIA's compiler (which built
# every SmolLM2 configuration with at most 128 registers and no spills), so
# compare two versions (KERNELS=) rather than read one alone.
# Needs clang-14, libclc-14 (Debian: apt-get install -y libclc-14) and ptxas
# (CUDA toolkit); not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.." || exit 1
kernels=${KERNELS:-kernels}
extra=${1:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat "$kernels/quant_blocks.cl" "$kernels/persistent_layout.cl" "$kernels/sample.cl" \
  "$kernels/decode_persistent.cl" >"$tmp/k.cl"
[ -n "${PTX_OUT:-}" ] && mkdir -p "$PTX_OUT"
inc=$(clang-14 -print-resource-dir)/include/opencl-c.h

common="-DN_LAYER=30 -DN_VOCAB=49152 -DN_CTX=2048 -DID_RING=4 -DRMS_EPS=1e-5f -DATT_SPLIT_MAX=16
  -DK_MAX=256 -DSAMPLE_FUNCTIONS_ONLY=1 -DSAMPLE_PTX_MATH=1"
# Shapes by head size: h64 is SmolLM2-135M's.
declare -A shapes=(
  [h32]="-DN_EMBD=576 -DN_FF=1536 -DN_HEAD=18 -DN_HEAD_KV=6 -DHEAD_DIM=32 -DN_ROT=32"
  [h64]="-DN_EMBD=576 -DN_FF=1536 -DN_HEAD=9 -DN_HEAD_KV=3 -DHEAD_DIM=64 -DN_ROT=64"
  [h128]="-DN_EMBD=1024 -DN_FF=2816 -DN_HEAD=8 -DN_HEAD_KV=2 -DHEAD_DIM=128 -DN_ROT=128"
  [h256]="-DN_EMBD=1024 -DN_FF=2816 -DN_HEAD=4 -DN_HEAD_KV=1 -DHEAD_DIM=256 -DN_ROT=256"
)
# WT_* as the host passes them: GGML type ids 0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0,
# 6 Q5_0, 7 Q5_1, 10-14 Q2_K-Q6_K, 20 IQ4_NL, 23 IQ4_XS, 30 BF16.
types() { echo "-DWT_QKV=$1 -DWT_WO=$2 -DWT_FFN=$3 -DWT_DOWN=$4 -DWT_HEAD=$5 -DWT_EMBD=$6"; }
# Per role TYPE or TYPE/ALT (the layers whose LO_ALT word says so use ALT):
# Q K V WO FFN DOWN, then HEAD EMBD.
roles() {
  local out="" r t
  for r in Q K V WO FFN DOWN; do
    t=$1
    shift
    out+=" -DWT_$r=${t%/*}"
    [ "${t#*/}" != "$t" ] && out+=" -DWT_${r}_ALT=${t#*/}"
  done
  echo "$out -DWT_HEAD=$1 -DWT_EMBD=$2"
}
bench_types=$(types 2 2 2 2 8 8)  # clchat bench --synthetic smollm2-135m --quant q4_0

failed=0
# build LABEL PWG OPTIONS...: one configuration, one line.
build() {
  local label=$1 pwg=$2
  shift 2
  [[ -n "${ONLY:-}" && ! "$label" =~ $ONLY ]] && return
  local ptx=$tmp/k.ptx
  # shellcheck disable=SC2086,SC2046
  if ! clang-14 -x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -O2 -S -Wall -Werror \
    -Wno-linker-warnings -Xclang -finclude-default-header -include "$inc" \
    -Xclang -mlink-builtin-bitcode -Xclang /usr/lib/clc/nvptx64--nvidiacl.bc -Dasm=__asm__ \
    $common -DPWG="$pwg" -DSAMPLE_WG="$pwg" "$@" $extra "${SRC:-$tmp/k.cl}" -o "$ptx" 2>"$tmp/clang.log"; then
    echo "$label: clang failed"
    cat "$tmp/clang.log"
    failed=1
    return
  fi
  sed -i 's/^\.target sm_[0-9]*.*/.target sm_90/; s/^\.version [0-9.]*/.version 8.0/' "$ptx"
  [ -n "${PTX_OUT:-}" ] && cp "$ptx" "$PTX_OUT/$label.ptx"
  # The cap: .reqntid after the entry's parameter list.
  awk -v n="$pwg" '/^\.entry/ {e = 1} e && /^\)$/ {print; print ".reqntid " n ", 1, 1"; e = 0; next} {print}' \
    "$ptx" >"$tmp/cap.ptx"
  local line=$label
  for f in "$ptx" "$tmp/cap.ptx"; do
    local out regs spill
    if ! out=$(ptxas -arch=sm_90 -v "$f" -o "$tmp/k.cubin" 2>&1); then
      echo "$label: ptxas failed"
      echo "$out" | grep -E "error|fatal"
      failed=1
      return
    fi
    # the file's largest kernel (matmul_mma_deq.cl also holds pack_x_f16)
    regs=$(echo "$out" | grep -o 'Used [0-9]* registers' | grep -o '[0-9]*' | sort -n | tail -1)
    spill=$(echo "$out" | sed -n 's/.* \([0-9]*\) bytes spill stores, \([0-9]*\) bytes spill loads.*/\1\/\2/p' |
      sort -t/ -n | tail -1)
    if [ "$f" = "$ptx" ]; then
      line+="  free $regs regs, spill $spill"
    else
      line+="  | cap $regs regs, spill $spill"
    fi
  done
  echo "$line"
}

for pwg in 512 256; do
  for h in h32 h64 h128 h256; do
    # shellcheck disable=SC2086,SC2046
    build "pwg$pwg-$h-q4_0" "$pwg" ${shapes[$h]} $bench_types
  done
done
for pwg in 512 256; do
  for l in 0 1 2 3 8; do
    for e in 0 1 2 3 8; do
      # shellcheck disable=SC2086,SC2046
      build "pwg$pwg-h64-layers$l-head$e" "$pwg" ${shapes[h64]} $(types $l $l $l $l $e $e)
    done
  done
  for l in 6 7 10 11 12 13 14 20 23 30; do
    # shellcheck disable=SC2086,SC2046
    build "pwg$pwg-h64-layers$l-head8" "$pwg" ${shapes[h64]} $(types $l $l $l $l 8 $l)
  done
  # Q4_K_M-like mixes: SmolLM2's (rows of 576: Q5_0, down Q6_K) and a 1B-like one.
  # shellcheck disable=SC2086,SC2046
  build "pwg$pwg-h64-kmix" "$pwg" ${shapes[h64]} $(types 6 6 6 14 8 8)
  # shellcheck disable=SC2086,SC2046
  build "pwg$pwg-h128-kmix" "$pwg" ${shapes[h128]} $(types 12 12 12 14 14 14)
  # shellcheck disable=SC2086,SC2046
  build "pwg$pwg-h64-mix1" "$pwg" ${shapes[h64]} $(types 8 3 1 2 0 1)
  # shellcheck disable=SC2086,SC2046
  build "pwg$pwg-h64-mix2" "$pwg" ${shapes[h64]} $(types 0 2 8 3 2 3)
  # Layers of different types: SmolLM2-135M's Q4_K_M as it is (V and down
  # with an ALT type), a 1B-like Q4_K_M, every role with an ALT type, and
  # Q, K, V of three types.
  # shellcheck disable=SC2086,SC2046
  build "pwg$pwg-h64-kmix-alt" "$pwg" ${shapes[h64]} $(roles 6 6 6/8 6 6 12/14 8 8)
  # shellcheck disable=SC2086,SC2046
  build "pwg$pwg-h128-kmix-alt" "$pwg" ${shapes[h128]} $(roles 12 12 12/14 12 12 12/14 14 14)
  # shellcheck disable=SC2086,SC2046
  build "pwg$pwg-h64-alt-all" "$pwg" ${shapes[h64]} $(roles 2/8 2/8 8/2 2/1 2/8 2/3 8 8)
  # shellcheck disable=SC2086,SC2046
  build "pwg$pwg-h64-qkv3" "$pwg" ${shapes[h64]} $(roles 2 8 1 3 2 2 8 8)
  # A Q6_K lm_head (loaded a step ahead: HEAD_PIPE) where rows have at most
  # two blocks a lane, so held Q6_K rows keep their scales and top-bit words
  # (Q6_LATE_H 0); the h128 mixes above read those records late.
  # shellcheck disable=SC2086,SC2046
  build "pwg$pwg-e512-q6head" "$pwg" -DN_EMBD=512 -DN_FF=1536 -DN_HEAD=8 -DN_HEAD_KV=2 \
    -DHEAD_DIM=64 -DN_ROT=64 $(roles 3 3 3/14 3 3 3/14 14 14)
  # Rows of three blocks a lane on float inputs (an F16 ALT in Q/K/V and
  # down): Q4_0, Q4_1 and Q8_0 rows held as scale words, Q6_K records read
  # at the dot (test_cl_persistent's LongRowsOnFloatInputsMatchCpu).
  # shellcheck disable=SC2086,SC2046
  build "pwg$pwg-e512-ff3072-float" "$pwg" -DN_EMBD=512 -DN_FF=3072 -DN_HEAD=8 -DN_HEAD_KV=2 \
    -DHEAD_DIM=64 -DN_ROT=64 $(roles 2 3 14/1 8 2 8/1 8 8)
done
# The tunable: test_cl_persistent's ATT_SPLIT_POS=8 (the att_split_pos tuning
# field); a partial rotary dimension.
# shellcheck disable=SC2086,SC2046
build "pwg512-h64-split8" 512 ${shapes[h64]} $bench_types -DATT_SPLIT_POS=8
# shellcheck disable=SC2086,SC2046
build "pwg256-h64-rot32" 256 ${shapes[h64]/-DN_ROT=64/-DN_ROT=32} $bench_types
# No L2 prefetch, as the host picks where a layer exceeds 16 MiB
# (L2_PREFETCH=0), at the Llama 3.2 1B shape, Q4_0 and its Q4_K_M types.
l1b="-DN_EMBD=2048 -DN_FF=8192 -DN_HEAD=32 -DN_HEAD_KV=8 -DHEAD_DIM=64 -DN_ROT=64 -DL2_PREFETCH=0"
# shellcheck disable=SC2086,SC2046
build "pwg512-1b-no-prefetch" 512 $l1b $bench_types
# shellcheck disable=SC2086,SC2046
build "pwg512-1b-kmix-no-prefetch" 512 $l1b $(roles 12 12 12/14 12 12 12/14 14 8)
# Other architectures' graphs (decode_persistent.cl's options), by their
# shapes: Gemma 3 270M (q wider than the embedding, head norms, post-norms,
# GELU, a window with its ring of K/V rows; its Q4_K_M types), Qwen 2.5 0.5B (biases, NeoX) and a
# Qwen 3-like one (head norms with NeoX at head 128, no window).
gemma="-DN_EMBD=640 -DN_FF=2048 -DN_HEAD=4 -DN_HEAD_KV=1 -DHEAD_DIM=256 -DN_ROT=256 -DN_EMBD_Q=1024"
gemma+=" -DNEOX=1 -DQK_NORM=1 -DPOST_NORMS=1 -DFFN_GELU=1 -DWINDOW=512 -DKV_RING=1024"
gemma+=" -DEMBED_SCALE=25.3f"
qwen2="-DN_EMBD=896 -DN_FF=4864 -DN_HEAD=14 -DN_HEAD_KV=2 -DHEAD_DIM=64 -DN_ROT=64 -DN_EMBD_Q=896"
qwen2+=" -DNEOX=1 -DQKV_BIAS=1"
qwen3="-DN_EMBD=1024 -DN_FF=3072 -DN_HEAD=16 -DN_HEAD_KV=8 -DHEAD_DIM=128 -DN_ROT=128 -DN_EMBD_Q=2048"
qwen3+=" -DNEOX=1 -DQK_NORM=1 -DQ_MUL=0.9f"
for pwg in 512 256; do
  # shellcheck disable=SC2086,SC2046
  build "pwg$pwg-gemma3" "$pwg" $gemma $(roles 6 6 6/8 12 6 12/14 8 8)
  # shellcheck disable=SC2086,SC2046
  build "pwg$pwg-qwen2" "$pwg" $qwen2 $bench_types
  # shellcheck disable=SC2086,SC2046
  build "pwg$pwg-qwen3" "$pwg" $qwen3 $(roles 6 6 8 12 12 14 8 8)
done
# kernels/matmul_mma_deq.cl (weights dequantized to fp16): every type, the
# default tile's shape (128 work-items), widened, the odd 3 x 2-warp one, and
# widened with split-K over 2 (with mma_split_sum).
# ptxas here refuses more than 48 KB of static local memory, which NVIDIA's
# OpenCL accepts (the default 4-block stages in a 3-buffer ring take 60-84 KB,
# widened 90-114 KB), so these take 2-block stages in a 2-buffer ring.
cat "$kernels/mma_f16.cl" "$kernels/matmul_mma_deq.cl" >"$tmp/deq.cl"
cat "$kernels/mma_f16.cl" "$kernels/attention_mma.cl" >"$tmp/att.cl"
for t in 2 3 6 7 8 12 13 14; do
  SRC=$tmp/deq.cl build "mma-deq-type$t" 128 -DWTYPE=$t -DMMA_KB=2 -DMMA_STAGES=2
  SRC=$tmp/deq.cl build "mma-deq-type$t-widened" 128 -DWTYPE=$t -DMMA_NJ=8 \
    -DMMA_KB=2 -DMMA_STAGES=2
  SRC=$tmp/deq.cl build "mma-deq-type$t-odd" 192 -DWTYPE=$t -DMMA_MI=1 -DMMA_NJ=2 \
    -DMMA_WR=3 -DMMA_WN=2 -DMMA_KB=3
  SRC=$tmp/deq.cl build "mma-deq-type$t-split" 128 -DWTYPE=$t -DMMA_NJ=8 \
    -DMMA_KB=2 -DMMA_STAGES=2 -DMMA_SPLIT=2
done
# kernels/attention_mma.cl (tensor-core prefill attention): heads of 64 and 128.
for hd in 64 128; do
  SRC=$tmp/att.cl build "attention-mma-h$hd" 128 -DHEAD_DIM=$hd
done
# kernels/sample.cl as decode_persistent.cl's build compiles it (fast-math
# flags, SAMPLE_PTX_MATH): its double steps must stay one rounding each, so
# its PTX may hold no fused or approximate double operation and no
# approximate division (the chain must draw the CPU sampler's ids).
if clang-14 -x cl -cl-std=CL1.2 -target nvptx64-nvidia-nvcl -O2 -S -Wno-linker-warnings \
  -Xclang -finclude-default-header -include "$inc" -Xclang -mlink-builtin-bitcode \
  -Xclang /usr/lib/clc/nvptx64--nvidiacl.bc -Dasm=__asm__ -cl-mad-enable -cl-fast-relaxed-math \
  -DSAMPLE_WG=256 -DK_MAX=256 -DSAMPLE_PTX_MATH=1 "$kernels/sample.cl" -o "$tmp/sample.ptx" \
  2>"$tmp/clang.log"; then
  inexact=$(grep -cE 'fma\.rn\.f64|mad\.rn\.f64|rcp\.approx|div\.(approx|full)|ex2\.approx' "$tmp/sample.ptx" || true)
  echo "sample.cl (fast-math build): $inexact inexact double or approximate instructions"
  [ "$inexact" = 0 ] || failed=1
else
  echo "sample.cl: clang failed"
  cat "$tmp/clang.log"
  failed=1
fi
exit $failed
