#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS on a corpus seeded afresh from the testdata and, when
# present, ../shared/onnx-node-tests and onnx-node-tests-full (seeds are copied at run time,
# never committed). Prints executions and findings per target; exits non-zero when any target
# found a crash, a leak, an UB report, an out-of-memory or a timeout (the input is kept in
# BUILD/findings/).
#   run_fuzzers.sh BUILD SECONDS TARGET...
set -uo pipefail
build=$(cd "$1" && pwd)
seconds=$2
shift 2
root=$(cd "$(dirname "$0")/../.." && pwd)
shared="$root/../shared/onnx-node-tests"
shared_full="$root/../shared/onnx-node-tests-full/node"
work="$build/fuzz-work"
findings="$build/findings"
rm -rf "$work"
mkdir -p "$work" "$findings"

# seed TARGET FIND-ARGS...: copies the files find selects (at most 256 KiB each: larger ones only
# slow libFuzzer down) into TARGET's corpus in one cp; equal names get numbered backups.
seed() {
  local dir="$work/corpus/$1"
  shift
  mkdir -p "$dir"
  find "$@" -type f -size -257k -print0 2>/dev/null | xargs -0 -r cp --backup=numbered -t "$dir"
}
models=("$root/testdata/models" "$root/testdata/bad")
[ -d "$shared" ] && models+=("$shared")
# The loader also starts from the whole node-test suite (one model per op and variant, 1802 in
# all): the curated subset left out the LabelEncoder model whose mutation crashed libonnx's
# shape inference at load. The targets that optimize or run each input (some 30 inputs a second
# instrumented) take it only with FUZZ_FULL_SEEDS=1, for longer runs: with it, fuzz_optimizer
# spent 95 s of a 20 s smoke reading its 2,581 seeds and mutated none (7 December 2026).
loader_models=("${models[@]}")
[ -d "$shared_full" ] && loader_models+=("$shared_full")
[ "${FUZZ_FULL_SEEDS:-0}" = 1 ] && models=("${loader_models[@]}")
seed fuzz_onnx_loader "${loader_models[@]}" -name '*.onnx'
seed fuzz_optimizer "${models[@]}" -name '*.onnx'
seed fuzz_executor "${models[@]}" -name '*.onnx'
seed fuzz_optimized_outputs "${models[@]}" -name '*.onnx'
seed fuzz_onnx_text "$root/testdata/fixtures" "$root/testdata/bad" "$root/testdata/passes" \
  -name '*.onnxtxt'
mkdir -p "$work/corpus/fuzz_tensor_pb"
[ -d "$shared" ] && seed fuzz_tensor_pb "$shared" -name '*.pb'
# Patterns as the passes spell them, and pipelines built from the registered pass names.
mkdir -p "$work/corpus/fuzz_pattern" "$work/corpus/fuzz_pipeline" "$work/corpus/fuzz_npy"
grep -oh 'Pattern::parse("[^"]*"' "$root"/libpasses/transforms/*.cpp |
  sed 's/^Pattern::parse("//; s/"$//' | sort -u | awk -v d="$work/corpus/fuzz_pattern" \
  '{ f = d "/seed_" NR; printf "%s", $0 > f; close(f) }'
printf 'c:Conv -> bn:BatchNormalization -> act:Relu|Clip' >"$work/corpus/fuzz_pattern/doc_0"
printf 'm:MatMul[dtype=float]($a, $b:const) -> add:Add(m, $c:const); ^x:*' \
  >"$work/corpus/fuzz_pattern/doc_1"
names=$(grep -oh 'FUSECTL_PASS("[a-z0-9-]*' "$root/libpasses/include/fusectl/passes/passes.def" |
  sed 's/FUSECTL_PASS("//' | sort -u)
printf '%s' "$(echo $names | tr ' ' ',')" >"$work/corpus/fuzz_pipeline/all"
printf 'cleanup,fold-conv-bn,fuse-epilogue{act=relu},dce' >"$work/corpus/fuzz_pipeline/doc"
# Two small .npy files (format 1.0): float32 [2,3] and int64 [4], header padded to 64 bytes.
npy_seed() {
  local dict="{'descr': '$2', 'fortran_order': False, 'shape': $3, }"
  local pad=$(( (64 - (10 + ${#dict} + 1) % 64) % 64 ))
  local len=$(( ${#dict} + pad + 1 ))
  { printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $((len % 256)))\\x$(printf %02x $((len / 256)))"
    printf '%s%*s\n' "$dict" "$pad" ''; head -c "$4" /dev/zero; } >"$work/corpus/fuzz_npy/$1"
}
npy_seed f32 '<f4' '(2, 3)' 24
npy_seed i64 '<i8' '(4,)' 32

# One target per core at a time (FUZZ_JOBS, default nproc): CI's 2 cores finish the seven
# targets in four rounds instead of seven (fuzz smoke 225 -> 129 s). Two at once do not each run
# as fast as one alone: the loader, text, pipeline and optimizer targets executed 30-50% fewer
# inputs in their 30 s (docs/hardening.md); FUZZ_JOBS=1 runs them one by one.
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
run_target() {
  local target=$1 log="$work/$1.log" rc runs result=ok
  "$build/tests/fuzz/$target" "$work/corpus/$target" -max_total_time="$seconds" -timeout=20 \
    -rss_limit_mb=2048 -max_len=262144 -dict="$root/tests/fuzz/onnx.dict" -print_final_stats=1 \
    -artifact_prefix="$findings/$target-" >"$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  if [ $rc -ne 0 ]; then
    result="FINDING (rc $rc): $(grep -m1 -E 'ERROR|runtime error|fuzz finding|deadly signal' "$log")"
  fi
  printf '%-22s %12s %8s %s\n' "$target" "${runs:-?}" "$seconds" "$result" >"$work/$target.result"
}
running=0
for target in "$@"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  run_target "$target" &
  running=$((running + 1))
done
wait

status=0
printf '%-22s %12s %8s %s\n' target executions seconds result
for target in "$@"; do
  if [ -f "$work/$target.result" ]; then
    cat "$work/$target.result"
    grep -q ' FINDING ' "$work/$target.result" && status=1
  else
    printf '%-22s %12s %8s %s\n' "$target" '?' "$seconds" 'FINDING: no result (the runner died)'
    status=1
  fi
done
[ $status -eq 0 ] || echo "findings kept in $findings; logs in $work"
exit $status
