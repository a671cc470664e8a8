#!/usr/bin/env bash
# Runs the libFuzzer targets of a CLCHAT_FUZZ build for a bounded time each.
#   fuzz/run.sh BUILD_DIR SECONDS [TARGET...]     (default: every target)
# Seeds are written fresh by fuzz_make_seeds from $CLCHAT_SHARED_DIR (default
# ../shared) into BUILD_DIR/fuzz-work/seeds; each target's corpus grows in
# BUILD_DIR/fuzz-work/corpus/<target> and is kept between runs. A crash, a
# sanitizer report, a broken invariant, a leak, a timeout (10 s per input) or
# more than 2 GiB resident fails the run; the input is saved as
# BUILD_DIR/fuzz-work/artifacts/<target>-crash-* (add it to
# fuzz/regressions/<target>/ once fixed). JOBS=2 runs two targets at a time.
# Prints one line per target: executions, seconds, corpus size, result.
set -uo pipefail
[ $# -ge 2 ] || { echo "usage: fuzz/run.sh BUILD_DIR SECONDS [TARGET...]" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$1" && pwd)
seconds=$2
shift 2
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf tokenizer_bpe tokenizer_spm chat_template config commands kernel_cache)
export CLCHAT_SHARED_DIR=${CLCHAT_SHARED_DIR:-$(cd "$root/.." && pwd)/shared}
# Symbolized reports; no core files.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:disable_coredump=1:intercept_tls_get_addr=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
work=$build/fuzz-work
mkdir -p "$work/artifacts" "$work/logs"
rm -rf "$work/seeds"
"$build/fuzz/fuzz_make_seeds" "$work/seeds" "$root" || exit 1

run_one() {
  local t=$1 max_len=4096
  [ "$t" = gguf ] && max_len=131072
  mkdir -p "$work/corpus/$t"
  local log=$work/logs/$t.log
  "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -max_len=$max_len -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/artifacts/$t-" \
    "$work/corpus/$t" "$work/seeds/$t" >"$log" 2>&1
  local rc=$?
  local execs
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  local result=ok
  if [ $rc -ne 0 ]; then
    result="FAILED (exit $rc; see $log)"
    grep -m3 -E "ERROR|what\(\)|SUMMARY" "$log" | sed "s/^/  $t: /"
  fi
  printf '%-14s %10s executions in %ss, corpus %s files: %s\n' "$t" "${execs:-?}" "$seconds" \
    "$(ls "$work/corpus/$t" | wc -l)" "$result"
  [ $rc -eq 0 ]
}

jobs=${JOBS:-1}
failed=0
pids=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}" || failed=$((failed + 1))
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
echo "fuzz: $((${#targets[@]} - failed)) passed, $failed failed"
[ $failed -eq 0 ]
