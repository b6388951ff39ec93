#!/usr/bin/env bash
# The GPU check of the CUDA backend (docs/cuda.md), in one run of a few minutes:
#
#   scripts/gpu-check.sh            (from the repository root; relative paths below are taken
#                                    from the repository root)
#
#  1. finds fusectl, fusectl_tests and gen_gpu_models in FUSECTL_BIN_DIR (default build:
#     apps/fusectl, tests/fusectl_tests, bench/gen_gpu_models), or builds them there with CMake
#     (Release, -DFUSECTL_BUILD_BENCH=ON) when one is missing;
#  2. prints `nvidia-smi -L` and checks `fusectl run testdata/models/resnet_mini.onnx --device cuda`;
#  3. runs the CUDA tests (`fusectl_tests "[cuda],[cuda_codegen],[cuda_placement]"`) and counts
#     what passed and failed;
#  4. for every testdata/models/*.onnx: `fusectl verify M M --device cuda` (the CPU run is the
#     reference) and `fusectl profile M --device cuda --runs 20 --json`, symbolic input dims fixed
#     (batch -> BATCH, seq -> SEQ, any other symbol -> 1);
#  5. generates ResNet-50 (batch 1 and 8) and BERT-base (batch 8, seq 128, float and float16) with
#     gen_gpu_models in a temporary folder, and verifies and profiles each the same way;
#  6. prints one table: unfused and fused median ms, speedup, device launches unfused/fused and
#     their ratio, timed runs that replayed a CUDA Graph per side (profile's --cuda-graph, on by
#     default; PROFILE_ARGS=--no-cuda-graph turns it off), nodes on the CPU in the fused model,
#     whether profile's two sides agree, verify.
#
# Everything goes to OUT (default gpu-check-out/): console.txt (this run's output), summary.txt
# (the table), results.tsv (its raw figures), cuda-tests.txt, and per model verify/NAME.txt,
# profile/NAME.txt and profile/NAME.json (docs/schemas/profile.schema.json).
#
# Exit status: 0 when everything passed, or when there is no GPU (the GPU steps are skipped with
# "no GPU: ...", and a CPU smoke run of two testdata models checks the script's own plumbing);
# 1 when a test, a verify, a profile or the CUDA run check failed; 2 when the binaries are
# missing and cannot be built.
#
# Environment:
#   FUSECTL_BIN_DIR   build folder holding the binaries (default build)
#   FUSECTL_LIB_DIR   prepended to LD_LIBRARY_PATH: the shared libraries carried along with
#                     binaries built on another machine (a lent GPU machine has no -dev packages)
#   FUSECTL_NO_BUILD  1: never run CMake; a missing binary is an error
#   FUSECTL_CHECK_DEVICE  cuda (default) or cpu: cpu runs every step on the CPU executor (for
#                     debugging this script on a machine without a GPU; CUDA tests skipped)
#   OUT               output folder (default gpu-check-out)
#   RUNS              timed runs per side for profile (default 20)
#   BATCH, SEQ        dims given to symbolic batch and seq inputs of testdata models (1, 16)
#   CUDA_TEST_SPEC    Catch2 test spec (default "[cuda],[cuda_codegen],[cuda_placement]")
#   GEN_SPECS         generated models, "NAME:gen_gpu_models args" separated by ';'
#                     (default: the four models of step 5)
#   PROFILE_ARGS      more flags for every profile (e.g. --no-cuda-graph)
#   PROFILE_THREADS   --threads for profile and verify (CPU reference and fallbacks; default 0,
#                     all cores)
#   KEEP_MODELS       1: keep the generated models (in OUT/models instead of a temporary folder)
#   BUDGET_S          seconds the run may take (default 450): steps past it are skipped, and
#                     count as failures
set -euo pipefail

script_start=$SECONDS
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

bin_dir=${FUSECTL_BIN_DIR:-build}
out=${OUT:-gpu-check-out}
runs=${RUNS:-20}
batch=${BATCH:-1}
seq_len=${SEQ:-16}
test_spec=${CUDA_TEST_SPEC:-[cuda],[cuda_codegen],[cuda_placement]}
threads=${PROFILE_THREADS:-0}
read -r -a profile_extra <<<"${PROFILE_ARGS:-}" || true
device=${FUSECTL_CHECK_DEVICE:-cuda}
budget=${BUDGET_S:-450}
default_gen_specs="resnet50_b1:--model resnet50 --batch 1;resnet50_b8:--model resnet50 --batch 8;bert_base_b8_s128:--model bert_base --batch 8 --seq 128 --dtype float;bert_base_b8_s128_fp16:--model bert_base --batch 8 --seq 128 --dtype float16"
gen_specs=${GEN_SPECS:-$default_gen_specs}
# Tolerances of verify and of profile's comparison of its two sides: testdata models use the
# defaults; the generated ones are 50-layer ResNets and 12-layer encoders, whose outputs drift
# further from the CPU's by summation order alone.
tol_fp32_generated="--atol 1e-4 --rtol 1e-3 --min-cosine 0.9999"
tol_fp16="--atol 2e-2 --rtol 2e-2 --min-cosine 0.999"

case $device in cuda | cpu) ;; *) echo "gpu-check: FUSECTL_CHECK_DEVICE must be cuda or cpu, not '$device'" >&2; exit 2 ;; esac
if [ -n "${FUSECTL_LIB_DIR:-}" ]; then
  export LD_LIBRARY_PATH="$FUSECTL_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

mkdir -p "$out/verify" "$out/profile"
out=$(cd "$out" && pwd)
: >"$out/results.tsv"
# Everything printed from here on is also kept in OUT/console.txt.
exec > >(tee "$out/console.txt") 2>&1

log() { printf 'gpu-check: %s\n' "$*"; }
section() { printf '\n== %s (%ds)\n' "$*" "$((SECONDS - script_start))"; }
failures=()
fail() { failures+=("$*"); log "FAILED: $*"; }
# A command under a time limit (when coreutils' timeout exists): a hang costs one step, not the
# run. No limit reaches past the run's budget (BUDGET_S) by more than 10 s.
limited() {
  local seconds=$1 left=$((budget - (SECONDS - script_start)))
  shift
  [ "$left" -ge 10 ] || left=10
  [ "$seconds" -le "$left" ] || seconds=$left
  if command -v timeout >/dev/null 2>&1; then timeout --kill-after=10 "$seconds" "$@"; else "$@"; fi
}
over_budget() { [ $((SECONDS - script_start)) -ge "$budget" ]; }
status_of_rc() {  # RC -> word for the table; 124/137 are timeouts
  case $1 in
    0) echo ok ;; 1) echo FAIL ;; 124 | 137) echo TIMEOUT ;; 134) echo ABORT ;; 139) echo SEGV ;;
    *) echo "ERR$1" ;;
  esac
}

# ---- the machine ----------------------------------------------------------------------------
section "machine"
log "repository $root; binaries in $bin_dir; output in $out"
log "$(uname -srm); $(nproc 2>/dev/null || echo '?') cores; LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
gpu=0
no_gpu_reason=
if [ "$device" = cpu ]; then
  no_gpu_reason="FUSECTL_CHECK_DEVICE=cpu"
elif ! command -v nvidia-smi >/dev/null 2>&1; then
  no_gpu_reason="nvidia-smi not found"
elif ! nvidia-smi -L >"$out/nvidia-smi.txt" 2>&1; then
  no_gpu_reason="nvidia-smi -L failed: $(head -n 1 "$out/nvidia-smi.txt")"
elif ! grep -q '^GPU ' "$out/nvidia-smi.txt"; then
  no_gpu_reason="nvidia-smi -L lists no GPU"
else
  gpu=1
  cat "$out/nvidia-smi.txt"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>/dev/null || true
fi
smoke=0
if [ "$gpu" = 0 ]; then
  if [ "$device" = cuda ]; then
    log "no GPU: $no_gpu_reason; skipping the CUDA tests and verify/profile --device cuda."
    log "no GPU: running a CPU smoke check of this script's steps on two testdata models instead."
    device=cpu
    smoke=1
    runs=3
  else
    log "FUSECTL_CHECK_DEVICE=cpu: every step runs on the CPU executor; CUDA tests skipped"
  fi
fi

# ---- binaries -------------------------------------------------------------------------------
section "binaries"
fusectl=$bin_dir/apps/fusectl
tests_bin=$bin_dir/tests/fusectl_tests
gen=$bin_dir/bench/gen_gpu_models
missing=()
for b in "$fusectl" "$tests_bin" "$gen"; do [ -x "$b" ] || missing+=("$b"); done
if [ "${#missing[@]}" -gt 0 ]; then
  log "missing: ${missing[*]}"
  if [ "$smoke" = 1 ]; then
    log "no GPU: not building for a smoke check; using what exists"
  elif [ "${FUSECTL_NO_BUILD:-0}" = 1 ]; then
    log "FUSECTL_NO_BUILD=1: not building"; exit 2
  elif ! command -v cmake >/dev/null 2>&1; then
    log "cmake not found: build them elsewhere and set FUSECTL_BIN_DIR (and FUSECTL_LIB_DIR)"; exit 2
  else
    config=()
    # Keep an existing build's type; a new one is Release.
    [ -f "$bin_dir/CMakeCache.txt" ] || config+=(-DCMAKE_BUILD_TYPE=Release)
    log "building them: cmake -S . -B $bin_dir ${config[*]} -DFUSECTL_BUILD_BENCH=ON -DFUSECTL_BUILD_TESTS=ON"
    if ! { cmake -S . -B "$bin_dir" "${config[@]}" -DFUSECTL_BUILD_BENCH=ON -DFUSECTL_BUILD_TESTS=ON &&
           cmake --build "$bin_dir" -j "$(nproc 2>/dev/null || echo 4)" --target fusectl fusectl_tests gen_gpu_models
         } >"$out/build.txt" 2>&1; then
      tail -n 30 "$out/build.txt"
      log "build failed (full log in $out/build.txt); on a machine without the -dev packages, carry binaries and libraries instead"
      exit 2
    fi
    log "built ($((SECONDS - script_start))s in all so far)"
  fi
fi
# A binary carried from another machine fails here when a shared library is missing: say which.
check_runs() {  # BINARY ARGS...
  local b=$1
  shift
  if "$b" "$@" >/dev/null 2>"$out/ldcheck.txt"; then return 0; fi
  log "$b does not run: $(head -n 1 "$out/ldcheck.txt")"
  if command -v ldd >/dev/null 2>&1; then
    ldd "$b" 2>&1 | grep 'not found' | sed 's/^/    /' || true
    log "copy those libraries next to it and set FUSECTL_LIB_DIR"
  fi
  return 1
}
have_fusectl=0 have_tests=0 have_gen=0
[ -x "$fusectl" ] && check_runs "$fusectl" --version && have_fusectl=1
[ -x "$tests_bin" ] && check_runs "$tests_bin" --help && have_tests=1
[ -x "$gen" ] && check_runs "$gen" --help && have_gen=1
rm -f "$out/ldcheck.txt"
log "fusectl: $([ $have_fusectl = 1 ] && "$fusectl" --version || echo unusable); fusectl_tests: $([ $have_tests = 1 ] && echo ok || echo unusable); gen_gpu_models: $([ $have_gen = 1 ] && echo ok || echo unusable)"
if [ "$have_fusectl" = 0 ]; then
  if [ "$smoke" = 1 ]; then log "no GPU, and no usable fusectl to smoke-test with: done"; exit 0; fi
  log "no usable fusectl: nothing to check"
  exit 2
fi
if [ "$gpu" = 1 ]; then
  [ "$have_tests" = 1 ] || fail "fusectl_tests unusable"
  [ "$have_gen" = 1 ] || fail "gen_gpu_models unusable"
fi

# ---- the CUDA run check ---------------------------------------------------------------------
cuda_usable=1
if [ "$gpu" = 1 ]; then
  section "fusectl run testdata/models/resnet_mini.onnx --device cuda"
  rc=0
  limited 120 "$fusectl" run testdata/models/resnet_mini.onnx --device cuda >"$out/run-resnet_mini.txt" 2>&1 || rc=$?
  head -n 1 "$out/run-resnet_mini.txt"
  sed -n '2,$p' "$out/run-resnet_mini.txt" | head -n 8
  if [ "$rc" != 0 ]; then
    fail "fusectl run resnet_mini --device cuda exited $rc"
    if [ "$rc" = 5 ]; then
      log "exit 5: this fusectl has no usable CUDA backend (built without the CUDA Toolkit, or the driver is unusable); skipping the model steps"
      cuda_usable=0
    fi
  fi
fi

# ---- CUDA tests -----------------------------------------------------------------------------
if [ "$gpu" = 1 ] && [ "$have_tests" = 1 ]; then
  section "fusectl_tests \"$test_spec\""
  rc=0
  limited 300 "$tests_bin" "$test_spec" >"$out/cuda-tests.txt" 2>&1 || rc=$?
  # Catch2 v2: "All tests passed (A assertions in N test cases)" or
  # "test cases: N | P passed | F failed"; a CUDA test without a device WARNs "skipped: ...".
  total=- passed=- failed=-
  line=$(grep -E '^All tests passed|^test cases:' "$out/cuda-tests.txt" | tail -n 1 || true)
  case $line in
    "All tests passed"*)
      total=$(sed -E 's/.* in ([0-9]+) test case.*/\1/' <<<"$line"); passed=$total; failed=0 ;;
    "test cases:"*)
      total=$(sed -E 's/^test cases: *([0-9]+).*/\1/' <<<"$line")
      passed=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+' || echo 0)
      failed=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+' || echo 0) ;;
  esac
  skipped=$(grep -c 'skipped: no CUDA device' "$out/cuda-tests.txt" || true)
  log "CUDA tests: $passed passed, $failed failed, of $total test cases (exit $rc; $skipped skipped for want of a device); output in $out/cuda-tests.txt"
  if [ "$rc" != 0 ]; then
    grep -E '^[^ ].*FAILED:|^/.*: FAILED' "$out/cuda-tests.txt" | head -n 20 || true
    tail -n 5 "$out/cuda-tests.txt"
    fail "CUDA tests: exit $(status_of_rc "$rc") ($failed failed of $total)"
  fi
  if [ "$rc" = 0 ] && { [ "$total" = - ] || [ "$total" = 0 ]; }; then
    # Catch2 v2 exits 0 when the spec matches nothing ("No tests ran").
    fail "CUDA tests: none ran for \"$test_spec\" (a fusectl_tests without the CUDA tests?)"
  fi
  [ "${skipped:-0}" = 0 ] || fail "CUDA tests: $skipped skipped for want of a device although nvidia-smi lists one"
fi

# ---- per-model verify and profile -----------------------------------------------------------
# --shape flags for a model's symbolic inputs, from `fusectl dump --summary`: "batch" -> BATCH,
# "seq" -> SEQ, any other plain symbol -> 1. An input with an unknown ("?") or compound dim gets
# none (profile's and verify's own default applies: symbols become 1).
shape_args() {  # MODEL -> one argument per line
  "$fusectl" dump "$1" --summary 2>/dev/null | awk -v B="$batch" -v S="$seq_len" '
    /^inputs \(/ { on = 1; next }
    /^[^ ]/ { on = 0 }
    on && NF >= 2 {
      name = $1; type = $2
      if (index(type, "[") == 0) next
      dims = substr(type, index(type, "[") + 1); sub(/\].*/, "", dims)
      n = split(dims, d, ",")
      spec = ""; symbolic = 0; ok = 1
      for (i = 1; i <= n; i++) {
        v = d[i]
        if (v ~ /^[0-9]+$/) { }
        else if (v ~ /^(batch|batch_size|N)$/) { v = B; symbolic = 1 }
        else if (v ~ /^(seq|seq_len|sequence|sequence_length|seqlen)$/) { v = S; symbolic = 1 }
        else if (v ~ /^[A-Za-z_][A-Za-z0-9_]*$/) { v = 1; symbolic = 1 }
        else { ok = 0 }
        spec = spec (i > 1 ? "x" : "") v
      }
      if (ok && symbolic) { print "--shape"; print name "=" spec }
    }'
}

# verify + profile of one model; appends a row to results.tsv.
check_model() {  # NAME MODEL_FILE VERIFY_TOLERANCE... (as one string, may be empty) PROFILE_TOL
  local name=$1 model=$2 vtol=$3 ptol=$4 rc vstatus pstatus
  if over_budget; then
    fail "$name: skipped, past the ${budget}s budget"
    printf '%s\t%s\t%s\t%s\n' "$name" - SKIPPED SKIPPED >>"$out/results.tsv"
    return 0
  fi
  local -a shapes=()
  mapfile -t shapes < <(shape_args "$model")
  local -a vtol_args=() ptol_args=() device_args=()
  # --device only for cuda: the CPU is the default, and an older fusectl's verify lacks the flag.
  [ "$device" = cpu ] || device_args=(--device "$device")
  read -r -a vtol_args <<<"$vtol" || true
  read -r -a ptol_args <<<"$ptol" || true
  [ "${#shapes[@]}" = 0 ] || log "$name: ${shapes[*]}"

  rc=0
  limited 240 "$fusectl" verify "$model" "$model" "${device_args[@]}" --threads "$threads" \
    "${shapes[@]}" "${vtol_args[@]}" >"$out/verify/$name.txt" 2>&1 || rc=$?
  vstatus=$(status_of_rc "$rc")
  [ "$rc" = 0 ] && vstatus=PASS
  log "$name: verify $vstatus: $(grep -E '^(PASS|FAIL)|error' "$out/verify/$name.txt" | tail -n 1)"
  [ "$rc" = 0 ] || fail "$name: verify $vstatus (see $out/verify/$name.txt)"

  rc=0
  rm -f "$out/profile/$name.json"
  limited 300 "$fusectl" profile "$model" "${device_args[@]}" --runs "$runs" --threads "$threads" \
    "${shapes[@]}" "${ptol_args[@]}" "${profile_extra[@]}" --json "$out/profile/$name.json" \
    >"$out/profile/$name.txt" 2>&1 || rc=$?
  pstatus=$(status_of_rc "$rc")
  # Exit 1: the two sides' outputs differ (the report is still written).
  if [ "$rc" = 1 ] && [ -s "$out/profile/$name.json" ]; then pstatus=DIFFER; fi
  log "$name: profile $pstatus: $(grep -E '^speedup|^outputs agree|error' "$out/profile/$name.txt" | tr '\n' ' ' | cut -c1-160)"
  # A side whose timed runs did not all replay a CUDA Graph says why.
  grep -E '^CUDA graph, ' "$out/profile/$name.txt" | while IFS= read -r line; do log "$name: $line"; done || true
  [ "$rc" = 0 ] || fail "$name: profile $pstatus (see $out/profile/$name.txt)"
  printf '%s\t%s\t%s\t%s\n' "$name" "$out/profile/$name.json" "$vstatus" "$pstatus" >>"$out/results.tsv"
}

if [ "$cuda_usable" = 1 ]; then
  section "testdata models: verify M M --device $device, profile --device $device --runs $runs"
  if [ "$smoke" = 1 ]; then
    models=(testdata/models/resnet_mini.onnx testdata/models/bert_layer.onnx)
  else
    models=(testdata/models/*.onnx)
  fi
  for m in "${models[@]}"; do
    [ -f "$m" ] || continue
    check_model "$(basename "$m" .onnx)" "$m" "" ""
  done

  if [ "$smoke" = 0 ] && [ "$have_gen" = 1 ]; then
    section "generated models (gen_gpu_models)"
    if [ "${KEEP_MODELS:-0}" = 1 ]; then
      gen_dir=$out/models
      mkdir -p "$gen_dir"
    else
      gen_dir=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-models.XXXXXX")
      trap 'rm -rf "$gen_dir"' EXIT
    fi
    IFS=';' read -r -a specs <<<"$gen_specs"
    for spec in "${specs[@]}"; do
      [ -n "${spec// /}" ] || continue
      name=${spec%%:*}
      if over_budget; then
        fail "$name: skipped, past the ${budget}s budget"
        printf '%s\t%s\t%s\t%s\n' "$name" - SKIPPED SKIPPED >>"$out/results.tsv"
        continue
      fi
      args=${spec#*:}
      read -r -a gen_args <<<"$args"
      rc=0
      limited 180 "$gen" "${gen_args[@]}" --out "$gen_dir/$name.onnx" || rc=$?
      if [ "$rc" != 0 ]; then
        fail "$name: gen_gpu_models ${args} exited $rc"
        printf '%s\t%s\t%s\t%s\n' "$name" "-" "GEN-FAIL" "-" >>"$out/results.tsv"
        continue
      fi
      case " $args " in
        *" float16 "*) check_model "$name" "$gen_dir/$name.onnx" "$tol_fp16" "$tol_fp16" ;;
        *) check_model "$name" "$gen_dir/$name.onnx" "$tol_fp32_generated" "$tol_fp32_generated" ;;
      esac
      [ "${KEEP_MODELS:-0}" = 1 ] || rm -f "$gen_dir/$name.onnx"
    done
  elif [ "$smoke" = 0 ]; then
    log "gen_gpu_models unusable: generated models skipped"
  fi
fi

# ---- the table ------------------------------------------------------------------------------
# One TSV line of figures from a profile report: unfused ms, fused ms, speedup, launches
# unfused, launches fused, fused nodes on the CPU, outputs agree, CUDA Graph replays unfused,
# fused ("-" where absent). python3,
# else jq, else grep (the report is pretty-printed with keys in schema order: unfused first).
json_tool=${GPU_CHECK_JSON_TOOL:-}
if [ -z "$json_tool" ]; then
  if command -v python3 >/dev/null 2>&1 && python3 -c 'import json' >/dev/null 2>&1; then json_tool=python3
  elif command -v jq >/dev/null 2>&1; then json_tool=jq
  else json_tool='grep'
  fi
fi
figures() {  # REPORT.json
  local f=$1
  if [ ! -s "$f" ]; then printf -- '-\t-\t-\t-\t-\t-\t-\t-\t-\n'; return; fi
  case $json_tool in
    python3)
      python3 - "$f" <<'PY' || printf -- '-\t-\t-\t-\t-\t-\t-\t-\t-\n'
import json, sys

def get(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d

def text(v):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return repr(v) if isinstance(v, float) else str(v)

try:
    with open(sys.argv[1]) as fh:
        d = json.load(fh)
except Exception:
    print("\t".join(["-"] * 9))
    sys.exit(0)
speedup = d.get("speedup") if isinstance(d, dict) else None
if isinstance(speedup, dict):
    speedup = speedup.get("median")
row = [get(d, "sides", "unfused", "median_ms"), get(d, "sides", "fused", "median_ms"), speedup,
       get(d, "sides", "unfused", "device_launches"), get(d, "sides", "fused", "device_launches"),
       get(d, "sides", "fused", "fallback_nodes"), get(d, "outputs_agree"),
       get(d, "sides", "unfused", "cuda_graph", "replayed_runs"),
       get(d, "sides", "fused", "cuda_graph", "replayed_runs")]
print("\t".join(text(v) for v in row))
PY
      ;;
    jq)
      jq -r '[.sides.unfused.median_ms, .sides.fused.median_ms,
              (if (.speedup | type) == "object" then .speedup.median else .speedup end),
              .sides.unfused.device_launches, .sides.fused.device_launches,
              .sides.fused.fallback_nodes,
              (if .outputs_agree == true then "yes" elif .outputs_agree == false then "no" else null end),
              .sides.unfused.cuda_graph.replayed_runs, .sides.fused.cuda_graph.replayed_runs]
             | map(if . == null then "-" else tostring end) | @tsv' "$f" 2>/dev/null ||
        printf -- '-\t-\t-\t-\t-\t-\t-\t-\t-\n'
      ;;
    *)
      local num='-?[0-9][0-9.eE+-]*'
      local -a med=() dl=() fb=() gr=()
      mapfile -t med < <(grep -oE "\"median_ms\": *$num" "$f" | sed -E 's/.*: *//' || true)
      mapfile -t dl < <(grep -oE "\"device_launches\": *$num" "$f" | sed -E 's/.*: *//' || true)
      mapfile -t fb < <(grep -oE "\"fallback_nodes\": *$num" "$f" | sed -E 's/.*: *//' || true)
      mapfile -t gr < <(grep -oE "\"replayed_runs\": *$num" "$f" | sed -E 's/.*: *//' || true)
      local sp agree
      sp=$(tr -d '\n' <"$f" | grep -oE "\"speedup\": *\\{[^}]*" | grep -oE "\"median\": *$num" | head -n 1 | sed -E 's/.*: *//' || true)
      [ -n "$sp" ] || sp=$(grep -oE "\"speedup\": *$num" "$f" | head -n 1 | sed -E 's/.*: *//' || true)
      agree=$(grep -oE '"outputs_agree": *(true|false)' "$f" | head -n 1 | sed -E 's/.*: *//; s/true/yes/; s/false/no/' || true)
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "${med[0]:--}" "${med[1]:--}" "${sp:--}" \
        "${dl[0]:--}" "${dl[1]:--}" "${fb[1]:--}" "${agree:--}" "${gr[0]:--}" "${gr[1]:--}"
      ;;
  esac
}

section "summary"
{
  printf 'device %s; %s timed runs per side; figures from %s\n' "$device" "$runs" "$json_tool"
  while IFS=$'\t' read -r name json vstatus pstatus; do
    printf '%s\t%s\t%s\t' "$name" "$vstatus" "$pstatus"
    if [ "$json" = - ]; then printf -- '-\t-\t-\t-\t-\t-\t-\t-\t-\n'; else figures "$json"; fi
  done <"$out/results.tsv"
} >"$out/figures.tsv"
table() {
  awk -F '\t' '
    NR == 1 { print; print ""; next }
    function num(v) { return v ~ /^-?[0-9.]+([eE][-+]?[0-9]+)?$/ }
    function ms(v) { return num(v) ? sprintf("%.3f", v) : v }
    {
      name = $1; verify = $2; prof = $3; u = $4; f = $5; sp = $6; lu = $7; lf = $8; cpu = $9; agree = $10
      graphs = $11 "/" $12
      speed = num(sp) ? sprintf("%.2fx", sp) : sp
      launches = lu "/" lf
      ratio = (num(lu) && num(lf) && lf > 0) ? sprintf("%.2fx", lu / lf) : "-"
      if (prof != "ok") agree = agree " (" prof ")"
      rows[++n] = sprintf("%-26s %11s %9s %8s %15s %7s %9s %8s %-14s %s", name, ms(u), ms(f), speed,
                          launches, ratio, graphs, cpu, agree, verify)
    }
    END {
      printf "%-26s %11s %9s %8s %15s %7s %9s %8s %-14s %s\n", "model", "unfused ms", "fused ms",
             "speedup", "launches u/f", "ratio", "graph u/f", "cpu nodes", "sides agree", "verify"
      for (i = 1; i <= n; i++) print rows[i]
    }' "$out/figures.tsv"
}
table | tee "$out/summary.txt"
printf '\n(graph u/f: timed runs per side that replayed a CUDA Graph, "-" when not asked for; cpu nodes: nodes of the fused model that ran on the CPU; sides agree: profile'"'"'s unfused vs fused outputs on the device; verify: verify M M --device %s, the CPU as reference. Tolerances (verify and sides agree): testdata models the defaults, generated float models %s, float16 %s)\n' \
  "$device" "$tol_fp32_generated" "$tol_fp16" | tee -a "$out/summary.txt"

elapsed=$((SECONDS - script_start))
log "done in ${elapsed}s (budget ${budget}s); output in $out"
if [ "$gpu" = 0 ] && [ "$device" = cpu ] && [ "$smoke" = 1 ]; then
  if [ "${#failures[@]}" -gt 0 ]; then
    log "the CPU smoke check failed ${#failures[@]} step(s): ${failures[*]}"
  fi
  log "no GPU: $no_gpu_reason; the GPU checks were skipped (exit 0)"
  exit 0
fi
if [ "${#failures[@]}" -gt 0 ]; then
  log "${#failures[@]} failure(s):"
  printf '  - %s\n' "${failures[@]}"
  exit 1
fi
log "all checks passed"
