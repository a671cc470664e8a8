#!/usr/bin/env bash
# Runs ON the lent GPU machine (see README "Performance"): builds clchat,
# checks the persistent decode kernel against the CPU reference, then times
# kernel variants, or this tree against another one, in one call so that
# A/B pairs share a machine.
#   bash .device/setup.sh && bash tests/device_ab.sh MODE[,MODE...] [VARIANT...]
#   bash .device/setup.sh && BASE=.device/base bash tests/device_ab.sh ab
# MODE: tests (test_cl_persistent), gpucheck (also test_cl_forward without
# the SmolLM2 file's cases, test_fault_opencl, test_cl_object_counts; the
# small models in .device/shared/models), testvar, bench, trace, ab, all
# (tests and bench).
# The SmolLM2 file (94 MB) exceeds one call's 64 MiB carry but travels in two
# calls fired back to back while the machine is warm (~30 s): `split -b 49M`,
# the first call copies .device/part_aa to /tmp, the second carries part_ab
# and cats both into .device/shared/models/ (sha256 in .ci/fetch-model); then
# CLCHAT_SHARED_DIR=$PWD/.device/shared CLCHAT_TEST_DEVICE=gpu runs
# test_cl_forward --gtest_filter='ClForward.SmolLM2*' and
# test_cl_prefill --gtest_filter='ClchatPerplexity.*' (2026-11-24, H200: pass).
#
# A variant is LABEL=ITEM[,ITEM...]: an ITEM that starts with "--" is an
# argument of `clchat bench` (this tree's tuning: clchat bench --tune help
# lists the keys), any other is a NAME=VALUE environment variable (commas
# cannot appear inside items), e.g. 'pwg256=--tune=persist_wg_size=256'
# 'split64=--tune=att_split_pos=64'
# 'nvverbose=--tune=persist_defines=-cl-nv-verbose'. bench takes each variant's tg128 ROUNDS
# times (2), interleaved with the others (QUANT, DEPTH: q4_0, 0); testvar
# runs test_cl_persistent under each (GTEST_FILTER, GTEST_REPEAT); trace logs
# each one's per-stage times and NVIDIA's register count.
#
# ab: BASE is another source tree inside this one, built into BASE_BUILD
# (default /tmp/clchat-base-build: outside .device, which each call's carry
# replaces, so a warm machine keeps the build between calls): e.g. the
# commit to compare against, unpacked into the git-ignored .device (rm -rf
# .device/base && mkdir .device/base && git archive COMMIT | tar -x -C
# .device/base) and named in the device call's carry (".device"). Each
# of ROUNDS (3) rounds runs every case with `base` and `new` (this tree)
# back to back, the order swapped every other round: CASES (default
# "q4_0:0:tg q4_1:0:tg q4_0:512:tg q4_0:0:pp"), each QUANT:DEPTH:TEST, TEST
# tg (tg128) or pp (pp512), -r 5; QUANT is a `clchat synth --quant` name on
# the SmolLM2-135M shape, or PRESET/NAME for another `--preset` (e.g.
# llama-3.2-1b/q4_k_m:0:pp). QUANT (bench, trace) takes the same forms. Each
# model is written once per machine by this tree's `clchat synth` into
# /tmp/clchat-synth (kept while the machine stays warm).
# Only default settings: no variants, no environment.
#
# Results go to $OUT/ab.txt (and the terminal).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-/tmp/device_out}
mkdir -p "$out"
modes=,${1:-all},
shift || true
has_mode() { [[ $modes == *,$1,* || ($modes == *,all,* && ($1 == tests || $1 == bench)) ]]; }
start=$SECONDS

# A warm machine keeps TREE/build between calls, and each call's copy of the
# sources keeps their modification times, which can be older than objects
# that another state of the tree built there: the build then links stale
# objects (2026-11-27: a prefill.cpp.o from a helper's run of a mid-edit
# tree, so tensor cores looked broken). fresh_sources TREE BUILD touches
# every source whose content differs from what BUILD last saw (all of them if
# it has no record), so the build recompiles exactly those.
fresh_sources() {
  local tree=$1 dir=$2 record="$2/.source-sums" sums
  sums=$(cd "$tree" && find CMakeLists.txt cmake app common config engine fuzz kernels tests ui \
    -type f -print0 2>/dev/null | sort -z | xargs -0 sha1sum)
  if [ -d "$dir" ]; then
    if [ -f "$record" ]; then
      diff <(echo "$sums") "$record" | sed -n 's/^< [0-9a-f]*  //p'
    else
      echo "$sums" | cut -c43-
    fi | (cd "$tree" && xargs -r -d '\n' touch)
  fi
  mkdir -p "$dir"
  echo "$sums" >"$record"
}

# build LABEL TREE BUILD TARGET...: configures and builds TREE into BUILD.
build() {
  local label=$1 tree=$2 dir=$3
  shift 3
  fresh_sources "$tree" "$dir"
  cmake -S "$tree" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$out/cmake_$label.log" 2>&1 &&
    cmake --build "$dir" -j"$(nproc)" --target "$@" >"$out/build_$label.log" 2>&1 && return 0
  echo "build of $tree failed:"
  tail -40 "$out/build_$label.log"
  exit 1
}
targets=(clchat test_cl_persistent)
has_mode gpucheck && targets+=(test_cl_forward test_fault_opencl test_cl_object_counts)
build new . build "${targets[@]}"
if has_mode ab; then
  if [ -z "${BASE:-}" ] || [ ! -f "$BASE/CMakeLists.txt" ]; then
    echo "ab: BASE must name another source tree (BASE=${BASE:-})"
    exit 1
  fi
  base_build=${BASE_BUILD:-/tmp/clchat-base-build}
  build base "$BASE" "$base_build" clchat
fi
echo "build: $((SECONDS - start)) s"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true

log() { echo "$*" | tee -a "$out/ab.txt"; }

# The summary lines of a gtest log.
gtest_summary() { grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$1" | tr '\n' ' '; }

# Each binary keeps its kernel cache apart.
state_dir() { echo "/tmp/clchat-state-$1"; }
rm -rf /tmp/clchat-state-*
export XDG_STATE_HOME
XDG_STATE_HOME=$(state_dir new)

if has_mode tests; then
  test_log=$out/test_persistent_${TEST_LABEL:-default}.log
  CLCHAT_TEST_DEVICE=gpu timeout 300 build/tests/test_cl_persistent >"$test_log" 2>&1
  log "test_cl_persistent (${TEST_LABEL:-default}): rc $? $(gtest_summary "$test_log")"
  grep -E "^\[  FAILED|Failure|\[error\]" "$test_log" | head -20
fi

if has_mode gpucheck; then
  for t in test_cl_persistent test_cl_forward test_fault_opencl test_cl_object_counts; do
    CLCHAT_SHARED_DIR=$PWD/.device/shared CLCHAT_TEST_DEVICE=gpu timeout 400 "build/tests/$t" \
      --gtest_filter='-ClForward.SmolLM2LogitsMatchCpu:ClForward.SmolLM2GreedyIdsMatchReference' \
      >"$out/$t.log" 2>&1
    log "$t: rc $? $(gtest_summary "$out/$t.log")"
  done
fi

# Splits variant $1 (LABEL=ITEM[,ITEM...]) into label, env_kv (the NAME=VALUE
# items) and args (the items that start with "--").
parse_variant() {
  label=${1%%=*}
  local items=() item
  [ -n "${1#*=}" ] && IFS=',' read -r -a items <<<"${1#*=}"
  env_kv=()
  args=()
  for item in "${items[@]}"; do
    if [[ $item == --* ]]; then args+=("$item"); else env_kv+=("$item"); fi
  done
}

# synth_model QUANT: the file of QUANT's model (QUANT or PRESET/QUANT, see
# ab above), written by this tree's clchat the first time.
synth_model() {
  local preset=smollm2-135m quant=$1
  if [[ $quant == */* ]]; then
    preset=${quant%%/*}
    quant=${quant#*/}
  fi
  local file=/tmp/clchat-synth/$preset-$quant.gguf
  if [ ! -s "$file" ]; then
    mkdir -p /tmp/clchat-synth
    if build/clchat synth --preset "$preset" --quant "$quant" -o "$file.part" >"$out/synth.log" 2>&1; then
      mv "$file.part" "$file"
    else
      echo "synth $preset $quant failed:" >&2
      tail -5 "$out/synth.log" >&2
    fi
  fi
  echo "$file"
}

# run_bench BIN QUANT DEPTH TEST ARG...: one `clchat bench` of TEST (tg:
# tg128, pp: pp512) with the variables in env_kv, printed as "TEST | t/s".
run_bench() {
  local bin=$1 quant=$2 depth=$3 test=$4 counts model
  shift 4
  if [ "$test" = pp ]; then counts=(-p 512 -n 0); else counts=(-p 0 -n 128); fi
  model=$(synth_model "$quant")
  env "${env_kv[@]}" "$bin" bench -m "$model" "${counts[@]}" \
    -d "$depth" -r 5 --device gpu "$@" 2>&1 |
    awk -F'|' 'NF > 3 && $(NF-2) ~ /(pp|tg)[0-9]+/ {
      t = $(NF-2) "|" $(NF-1); gsub(/^ +| +$/, "", t); printf "%s", t }'
}

variants=("$@")
[ ${#variants[@]} -eq 0 ] && variants=("default=")

# test_cl_persistent under each variant: its "--" items go to the test
# (gtest flags), after GTEST_FILTER and GTEST_REPEAT.
if has_mode testvar; then
  for v in "${variants[@]}"; do
    parse_variant "$v"
    env "${env_kv[@]}" CLCHAT_TEST_DEVICE=gpu timeout 300 build/tests/test_cl_persistent \
      --gtest_filter="${GTEST_FILTER:-*}" --gtest_repeat="${GTEST_REPEAT:-1}" "${args[@]}" \
      >"$out/test_$label.log" 2>&1
    log "test $label: rc $? passed $(grep -c '^\[       OK' "$out/test_$label.log") failed $(grep -c '^\[  FAILED  \] .*ms)' "$out/test_$label.log") failures $(grep -c 'Failure' "$out/test_$label.log")"
  done
fi

# Per-stage trace (logged at exit) and NVIDIA's register count
# (-cl-nv-verbose, added to a variant's own --tune=persist_defines=...).
if has_mode trace; then
  for v in "${variants[@]}"; do
    parse_variant "$v"
    defs=-cl-nv-verbose
    rest=()
    for a in "${args[@]}"; do
      if [[ $a == --tune=persist_defines=* ]]; then defs="${a#--tune=persist_defines=} $defs"; else rest+=("$a"); fi
    done
    env "${env_kv[@]}" build/clchat bench -m "$(synth_model "${QUANT:-q4_0}")" -p 0 -n 128 -r 2 \
      --device gpu --tune trace=1 "--tune=persist_defines=$defs" "${rest[@]}" >"$out/trace_$label.log" 2>&1
    log "$label trace: $(grep -o 'per token):.*' "$out/trace_$label.log" | head -1)"
    log "$label $(grep -o 'Used [0-9]* registers.*' "$out/trace_$label.log" | head -1)"
  done
fi

if has_mode bench; then
  for round in $(seq "${ROUNDS:-2}"); do
    for v in "${variants[@]}"; do
      parse_variant "$v"
      log "$label ${QUANT:-q4_0} d${DEPTH:-0}: $(run_bench build/clchat "${QUANT:-q4_0}" "${DEPTH:-0}" tg "${args[@]}")"
    done
  done
fi

if has_mode ab; then
  # (No commit names: the device's copy of a working tree need not match
  # its .git, and a git-archive'd BASE has none. Say them in the call.)
  log "ab: base $BASE against new (this tree)"
  env_kv=()
  read -r -a cases <<<"${CASES:-q4_0:0:tg q4_1:0:tg q4_0:512:tg q4_0:0:pp}"
  for round in $(seq "${ROUNDS:-3}"); do
    order=(base new)
    ((round % 2 == 0)) && order=(new base)
    for c in "${cases[@]}"; do
      IFS=: read -r quant depth test <<<"$c"
      for tree in "${order[@]}"; do
        bin=build/clchat
        [ "$tree" = base ] && bin=$base_build/clchat
        log "round $round $tree $quant d$depth $test: $(XDG_STATE_HOME=$(state_dir "$tree") run_bench "$bin" "$quant" "$depth" "$test")"
      done
    done
  done
fi
echo "total: $((SECONDS - start)) s"
