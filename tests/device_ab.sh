#!/usr/bin/env bash
# Runs ON the lent GPU machine (see README "Performance"): builds clchat,
# checks the persistent decode kernel against the CPU reference, then times
# kernel variants in one call so that A/B pairs share a machine.
#   bash .device/setup.sh && bash tests/device_ab.sh MODE [VARIANT...]
# MODE: tests (test_cl_persistent), gpucheck (also test_cl_forward without
# the SmolLM2 file's cases, test_fault_opencl, test_cl_object_counts; the
# small models in .device/shared/models), testvar, bench, trace, all
# (tests and bench).
# A variant is LABEL=ENV[,ENV...] with ENV a NAME=VALUE pair (commas cannot
# appear inside values), e.g. 'pwg256=CLCHAT_PERSIST_PWG=256'
# 'span128=CLCHAT_PERSIST_DEFINES=-DATT_SPLIT_SPAN=128'. bench takes each variant's tg128
# ROUNDS times (2), interleaved with the others (QUANT, DEPTH: q4_0, 0);
# results go to $OUT/ab.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/device_out}
mkdir -p "$out"
what=${1:-all}
shift || true
export XDG_STATE_HOME=/tmp/clchat-state
rm -rf "$XDG_STATE_HOME"
start=$SECONDS
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$out/cmake.log" 2>&1
targets=(clchat test_cl_persistent)
[ "$what" = gpucheck ] && targets+=(test_cl_forward test_fault_opencl test_cl_object_counts)
if ! cmake --build build -j"$(nproc)" --target "${targets[@]}" >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  exit 1
fi
echo "build: $((SECONDS - start)) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true

log() { echo "$*" | tee -a "$out/ab.txt"; }

# The summary lines of a gtest log.
gtest_summary() { grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$1" | tr '\n' ' '; }

if [ "$what" = tests ] || [ "$what" = all ]; then
  test_log=$out/test_persistent_${TEST_LABEL:-default}.log
  CLCHAT_TEST_DEVICE=gpu timeout 300 build/tests/test_cl_persistent >"$test_log" 2>&1
  log "test_cl_persistent (${TEST_LABEL:-default}): rc $? $(gtest_summary "$test_log")"
  grep -E "^\[  FAILED|Failure|error" "$test_log" | head -20
fi

if [ "$what" = gpucheck ]; then
  export CLCHAT_SHARED_DIR=$PWD/.device/shared
  for t in test_cl_persistent test_cl_forward test_fault_opencl test_cl_object_counts; do
    CLCHAT_TEST_DEVICE=gpu timeout 400 "build/tests/$t" \
      --gtest_filter='-ClForward.SmolLM2LogitsMatchCpu:ClForward.SmolLM2GreedyIdsMatchReference' \
      >"$out/$t.log" 2>&1
    log "$t: rc $? $(gtest_summary "$out/$t.log")"
  done
fi

# bench LABEL QUANT DEPTH ENV... : one tg128 -r 5 line.
bench() {
  local label=$1 quant=$2 depth=$3
  shift 3
  local line
  line=$(env "$@" build/clchat bench --synthetic smollm2-135m --quant "$quant" -p 0 -n 128 -d "$depth" \
    -r 5 --device gpu 2>&1 | grep -E "tg128" | awk -F'|' '{print $(NF-3) "launch" $(NF-1)}')
  log "$label $quant d$depth: $line"
}

variants=("$@")
[ ${#variants[@]} -eq 0 ] && variants=("default=")
# Splits variant $1 (LABEL=ENV[,ENV...]) into label and the array kv.
parse_variant() {
  label=${1%%=*}
  IFS=',' read -r -a kv <<<"${1#*=}"
}

# test_cl_persistent under each variant (GTEST_FILTER, GTEST_REPEAT).
if [ "$what" = testvar ]; then
  for v in "${variants[@]}"; do
    parse_variant "$v"
    env "${kv[@]}" CLCHAT_TEST_DEVICE=gpu timeout 300 build/tests/test_cl_persistent \
      --gtest_filter="${GTEST_FILTER:-*}" --gtest_repeat="${GTEST_REPEAT:-1}" >"$out/test_$label.log" 2>&1
    log "test $label: rc $? passed $(grep -c '^\[       OK' "$out/test_$label.log") failed $(grep -c '^\[  FAILED  \] .*ms)' "$out/test_$label.log") failures $(grep -c 'Failure' "$out/test_$label.log")"
  done
fi

# Per-stage trace (CLCHAT_PERSIST_TRACE=1, logged at exit) and the compiler's
# register count (-cl-nv-verbose) of each variant.
if [ "$what" = trace ]; then
  for v in "${variants[@]}"; do
    parse_variant "$v"
    defs=
    for e in "${kv[@]}"; do [[ $e == CLCHAT_PERSIST_DEFINES=* ]] && defs=${e#*=}; done
    env "${kv[@]}" CLCHAT_PERSIST_TRACE=1 CLCHAT_PERSIST_DEFINES="$defs -cl-nv-verbose" \
      build/clchat bench --synthetic smollm2-135m --quant q4_0 -p 0 -n 128 -r 2 --device gpu \
      >"$out/trace_$label.log" 2>&1
    log "$label trace: $(grep -o 'per token):.*' "$out/trace_$label.log" | head -1)"
    log "$label $(grep -o 'Used [0-9]* registers.*' "$out/trace_$label.log" | head -1)"
  done
fi

if [ "$what" = bench ] || [ "$what" = all ]; then
  for round in $(seq "${ROUNDS:-2}"); do
    for v in "${variants[@]}"; do
      parse_variant "$v"
      bench "$label" "${QUANT:-q4_0}" "${DEPTH:-0}" "${kv[@]}"
    done
  done
fi
echo "total: $((SECONDS - start)) s"
