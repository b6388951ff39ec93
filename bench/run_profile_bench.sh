#!/usr/bin/env bash
# Issue 13's model table: fusectl unfused vs fused (-O3) next to ONNX Runtime `disabled` vs
# `all`, on the same inputs, 1 and 2 threads, all in one run; then peak memory on ResNet-50.
#
#   bench/run_profile_bench.sh [BUILD_DIR] [MODELS_DIR]
#
# BUILD_DIR defaults to build, MODELS_DIR to $FUSECTL_BENCH_MODELS or /work/bench-models (made by
# bench/export_profile_models.py: NAME.onnx plus inputs/NAME/<input>.npy).
# Env: MODELS (default "resnet50 mobilenet_v2 efficientnet_b0 bert_base"), THREADS ("1 2"),
# RUNS (20), WARMUP (3), MEMORY_MODEL (resnet50; empty skips the memory section),
# FUSECTL_ORT_DIR (default BUILD/ort, where `make test` installs it: the folder holding
# node_modules/onnxruntime-node),
# PIN (1: 1-thread runs under `taskset -c $PIN_CORE`), PIN_CORE (1; 0 when core 1 is the one a
# neighbour slows: `profile --only fused` pinned to each core in turn shows it), OUT (bench/out/profile-<UTC time>: raw JSON kept),
# ROUNDS (1): how many times each model's fusectl and ONNX Runtime measurements are repeated,
# alternating. On a machine whose speed drifts, one round can put fusectl in a fast minute and
# ONNX Runtime in a slow one; with ROUNDS > 1 the table gives the median over rounds and, for
# fused / ORT all, the range of the per-round ratios (profile mode only).
#
# fusectl's side comes from `fusectl profile` (A/B/A/B in one process, JSON report) when the
# binary has that subcommand. Older binaries fall back to `fusectl optimize -O3` and
# build/bench/bench_latency, alternating unfused/fused blocks of RUNS/3 runs in separate
# processes (the median of the block medians is reported); that path times fusectl on
# bench_latency's seeded inputs, which it also hands to ONNX Runtime, so both runtimes still
# see the same bytes. ONNX Runtime alternates its two sessions the same way (bench/ort_profile.js).
set -euo pipefail

build=${1:-build}
models_dir=${2:-${FUSECTL_BENCH_MODELS:-/work/bench-models}}
models=${MODELS:-resnet50 mobilenet_v2 efficientnet_b0 bert_base}
threads=${THREADS:-1 2}
runs=${RUNS:-20}
warmup=${WARMUP:-3}
memory_model=${MEMORY_MODEL-resnet50}
pin=${PIN:-1}
pin_core=${PIN_CORE:-1}
rounds=${ROUNDS:-1}
[ "$rounds" -ge 1 ] 2>/dev/null || { echo "run_profile_bench: ROUNDS must be >= 1" >&2; exit 2; }
export FUSECTL_ORT_DIR=${FUSECTL_ORT_DIR:-$(cd "$build" 2>/dev/null && pwd)/ort}
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out/profile-$(date -u +%Y%m%dT%H%M%SZ)}
fusectl=$build/apps/fusectl

die() { echo "run_profile_bench: $*" >&2; exit 2; }
[ -x "$fusectl" ] || die "$fusectl not found (cmake --build $build --target fusectl)"
command -v node >/dev/null || die "node not found (ONNX Runtime runs from npm)"
for m in $models; do
  [ -f "$models_dir/$m.onnx" ] || die "$models_dir/$m.onnx missing: run bench/install-bench-deps.sh, then /usr/bin/python3 bench/export_profile_models.py $models_dir"
done
mkdir -p "$out"

if "$fusectl" --help | grep -qE '^ +profile +'; then
  mode=profile
else
  mode=fallback
  [ -x "$build/bench/bench_latency" ] || die "$fusectl has no 'profile' and $build/bench/bench_latency is missing"
  echo "run_profile_bench: $fusectl has no 'profile' subcommand; using optimize -O3 + bench_latency" >&2
fi

# `taskset -c 1` for one thread: the other core keeps the OS and other processes off it.
pinned() {
  local t=$1; shift
  if [ "$pin" = 1 ] && [ "$t" = 1 ] && command -v taskset >/dev/null; then
    taskset -c "$pin_core" "$@"
  else
    "$@"
  fi
}

input_args() {  # --input NAME=FILE for each .npy in $1
  local f
  for f in "$1"/*.npy; do printf -- '--input\n%s=%s\n' "$(basename "$f" .npy)" "$f"; done
}

# fallback: kernel invocations and peak activation bytes from one `fusectl run` (its summary line)
run_figures() {  # MODEL INPUTS_DIR -> "NODES PEAK_BYTES"
  local line
  mapfile -t args < <(input_args "$2")
  line=$("$fusectl" run "$1" "${args[@]}" | grep '^peak activation bytes:')
  echo "$(sed -E 's/.*; nodes: ([0-9]+);.*/\1/' <<<"$line") $(sed -E 's/^peak activation bytes: ([0-9]+).*/\1/' <<<"$line")"
}

fallback_side() {  # MODEL T INPUTS_DIR -> appends bench_latency lines for one model file
  pinned "$2" "$build/bench/bench_latency" "$1" --threads "$2" --repeat "$block_runs" --warmup "$warmup" --inputs-dir "$3"
}

echo "run_profile_bench: mode $mode, models in $models_dir, threads $threads, runs $runs, warmup $warmup, raw output in $out" >&2
for m in $models; do
  model=$models_dir/$m.onnx
  inputs=$models_dir/inputs/$m
  if [ "$mode" = fallback ]; then
    fused=$out/$m.O3.onnx
    "$fusectl" optimize "$model" -o "$fused" -O3 >/dev/null
    inputs=$out/inputs/$m   # bench_latency's seeded inputs (seed 1), shared with ONNX Runtime
    block_runs=$(( (runs + 2) / 3 ))
  fi
  for t in $threads; do
    if [ "$mode" = profile ]; then
      mapfile -t args < <(input_args "$inputs")
      for ((round = 1; round <= rounds; round++)); do
        echo "run_profile_bench: $m, $t thread(s), round $round of $rounds" >&2
        # Exit 1 means a check failed (outputs differ): the report is still written, and the
        # table says so; anything else is an error.
        rc=0
        report=$out/fusectl-$m-t$t-r$round
        pinned "$t" "$fusectl" profile "$model" "${args[@]}" --threads "$t" --runs "$runs" \
          --warmup "$warmup" --json "$report.json" >"$report.txt" || rc=$?
        [ "$rc" -le 1 ] && [ -f "$report.json" ] || die "fusectl profile $model failed (exit $rc)"
        pinned "$t" node "$here/ort_profile.js" "$model" "$inputs" --threads "$t" --runs "$runs" \
          --warmup "$warmup" --levels disabled,all --label "$m#$round" >>"$out/ort.jsonl"
      done
      continue
    else
      echo "run_profile_bench: $m, $t thread(s)" >&2
      for block in 1 2 3; do
        fallback_side "$model" "$t" "$inputs" >>"$out/fallback-$m-t$t-unfused.jsonl"
        fallback_side "$fused" "$t" "$inputs" >>"$out/fallback-$m-t$t-fused.jsonl"
      done
      read -r un_nodes un_peak < <(run_figures "$model" "$inputs")
      read -r fu_nodes fu_peak < <(run_figures "$fused" "$inputs")
      printf '{"unfused_nodes": %s, "unfused_peak": %s, "fused_nodes": %s, "fused_peak": %s}\n' \
        "$un_nodes" "$un_peak" "$fu_nodes" "$fu_peak" >"$out/fallback-$m-t$t-figures.json"
    fi
    pinned "$t" node "$here/ort_profile.js" "$model" "$inputs" --threads "$t" --runs "$runs" \
      --warmup "$warmup" --levels disabled,all --label "$m" >>"$out/ort.jsonl"
  done
done

# Peak memory: each runtime's max RSS running the model once, minus the same process running
# tiny_relu.onnx (the executable, its libraries and, for ORT, node itself), plus fusectl's own
# count of peak activation bytes.
if [ -n "$memory_model" ]; then
  [ -f "$models_dir/tiny_relu.onnx" ] || die "$models_dir/tiny_relu.onnx missing (export_profile_models.py writes it)"
  rss_kib() {  # COMMAND... -> its max RSS in KiB; exit 1 (a failed check in profile) is fine here
    local rc=0
    /usr/bin/time -f '%M' -o "$out/time.tmp" "$@" >"$out/rss-cmd.out" 2>&1 || rc=$?
    [ "$rc" -le 1 ] || { cat "$out/rss-cmd.out" >&2; die "failed (exit $rc): $*"; }
    tail -n 1 "$out/time.tmp"
  }
  mem_row() {  # NAME MODEL INPUTS
    local args peak=""
    mapfile -t args < <(input_args "$3")
    local f_rss o_rss
    f_rss=$(rss_kib "$fusectl" run "$2" "${args[@]}")
    peak=$(sed -nE 's/^peak activation bytes: ([0-9]+).*/\1/p' "$out/rss-cmd.out")
    o_rss=$(rss_kib node "$here/ort_profile.js" "$2" "$3" --runs 1 --warmup 0 --levels all)
    local p_rss=null p_peak=null o2_rss=null
    if [ "$mode" = profile ]; then
      # profile's job done by ONNX Runtime: both levels' sessions in one process.
      o2_rss=$(rss_kib node "$here/ort_profile.js" "$2" "$3" --runs 1 --warmup 0 --levels disabled,all)
      p_rss=$(rss_kib "$fusectl" profile "$2" "${args[@]}" --runs 1 --warmup 0 --json "$out/mem-profile-$1.json")
      p_peak=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["sides"]; print(max(v["peak_activation_bytes"] for v in s.values()))' "$out/mem-profile-$1.json")
    fi
    printf '{"model": "%s", "fusectl_run_rss_kib": %s, "fusectl_peak_activation_bytes": %s, "ort_all_rss_kib": %s, "ort_both_levels_rss_kib": %s, "fusectl_profile_rss_kib": %s, "fusectl_profile_peak_activation_bytes": %s}\n' \
      "$1" "$f_rss" "${peak:-null}" "$o_rss" "$o2_rss" "$p_rss" "$p_peak"
  }
  mem_row tiny_relu "$models_dir/tiny_relu.onnx" "$models_dir/inputs/tiny_relu" >"$out/memory.jsonl"
  mem_row "$memory_model" "$models_dir/$memory_model.onnx" "$models_dir/inputs/$memory_model" >>"$out/memory.jsonl"
  rm -f "$out/time.tmp" "$out/rss-cmd.out"
fi

MODE=$mode MODELS_LIST=$models THREADS_LIST=$threads ROUNDS_N=$rounds python3 - "$out" <<'EOF'
import functools, glob, json, os, statistics, sys

out = sys.argv[1]
mode = os.environ["MODE"]
rounds = int(os.environ["ROUNDS_N"]) if mode == "profile" else 1
ort = {}  # (model, threads, level, round) -> the ONNX Runtime record (median_ms, min_ms)
for line in open(os.path.join(out, "ort.jsonl")):
    r = json.loads(line)
    label, _, rnd = r["label"].partition("#")
    ort[(label, r["threads"], r["level"], int(rnd or 1))] = r

@functools.lru_cache(maxsize=None)
def profile_report(m, t, rnd):
    return json.load(open(os.path.join(out, f"fusectl-{m}-t{t}-r{rnd}.json")))

def fused_min(m, t, rnd):
    """The fused side's fastest run (profile mode), or None."""
    return profile_report(m, t, rnd)["sides"]["fused"]["min_ms"] if mode == "profile" else None

def fusectl_side(m, t, rnd):
    """(unfused ms, fused ms, fused/unfused gain, unfused calls, fused calls, outputs agree)."""
    if mode == "profile":
        j = profile_report(m, t, rnd)
        u, f = j["sides"]["unfused"], j["sides"]["fused"]
        agree = {True: "yes", False: "NO"}.get(j.get("outputs_agree"), "-")
        return (u["median_ms"], f["median_ms"], j["speedup"]["median"],
                u["kernel_invocations"], f["kernel_invocations"], agree)
    med = lambda side: statistics.median(
        json.loads(l)["median_ms"] for l in open(os.path.join(out, f"fallback-{m}-t{t}-{side}.jsonl")))
    fig = json.load(open(os.path.join(out, f"fallback-{m}-t{t}-figures.json")))
    u, f = med("unfused"), med("fused")
    return u, f, u / f, fig["unfused_nodes"], fig["fused_nodes"], "-"

def ms(x):
    return f"{x:.1f}" if x >= 10 else f"{x:.3g}"

head = ["model", "threads", "fusectl unfused ms", "fusectl fused (-O3) ms", "fused/unfused gain",
        "ORT disabled ms", "ORT all ms", "ORT gain", "fused / ORT all", "same, minima", "goal met",
        "kernels unfused -> fused", "outputs agree"]
# The goals by issue: the CNNs issue 13's (fused <= 0.9x ONNX Runtime `all`, fusectl's gain at
# least ONNX Runtime's), the transformer encoders and decoders issue 12's (fused >= 1.3x faster
# than unfused; BERT-sized also <= 0.8x ONNX Runtime `all`).
def goal_of(model, ratio, gain, ort_gain):
    if model.startswith("bert"):
        checks = (("latency", ratio <= 0.8), ("gain", gain >= 1.3))
    elif model.startswith(("llama", "gpt", "vit", "qwen")):
        checks = (("gain", gain >= 1.3),)
    else:
        checks = (("latency", ratio <= 0.9), ("gain", gain >= ort_gain))
    missed = [w for w, ok in checks if not ok]
    return "yes" if not missed else "no (" + ", ".join(missed) + ")"

print(f"\nfusectl ({'profile' if mode == 'profile' else 'optimize -O3 + bench_latency, fallback'}) "
      f"vs ONNX Runtime, medians, batch 1; goals: CNNs fused <= 0.9x ORT all and fusectl gain >= "
      f"ORT gain (issue 13); bert* fused <= 0.8x ORT all and gain >= 1.3x, other transformers "
      f"gain >= 1.3x (issue 12)"
      + (f"; each figure the median of {rounds} alternating rounds, fused / ORT all with the range "
         f"of the rounds' ratios" if rounds > 1 else "")
      + "; 'same, minima': the median over rounds of fused's fastest run / ORT all's fastest, "
        "less sensitive to a busy host (the goal column reads the medians)\n")
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for m in os.environ["MODELS_LIST"].split():
    for t in map(int, os.environ["THREADS_LIST"].split()):
        per_round = [fusectl_side(m, t, k) + (ort[(m, t, "disabled", k)]["median_ms"],
                                              ort[(m, t, "all", k)]["median_ms"])
                     for k in range(1, rounds + 1)]
        med = lambda i: statistics.median(r[i] for r in per_round)
        u, f, gain, od, oa = med(0), med(1), med(2), med(6), med(7)
        uc, fc = per_round[0][3], per_round[0][4]
        agree = "yes" if all(r[5] == "yes" for r in per_round) else per_round[0][5]
        ratios = [r[1] / r[7] for r in per_round]
        ratio = statistics.median(ratios)
        ort_gain = statistics.median(r[6] / r[7] for r in per_round)
        ratio_text = f"{ratio:.2f}x" + (f" ({min(ratios):.2f}-{max(ratios):.2f})" if rounds > 1 else "")
        goal = goal_of(m, ratio, gain, ort_gain)
        minima = [fused_min(m, t, k) for k in range(1, rounds + 1)]
        min_text = "-"
        if None not in minima:
            min_ratios = [fm / ort[(m, t, "all", k)]["min_ms"] for k, fm in enumerate(minima, 1)]
            min_text = f"{statistics.median(min_ratios):.2f}x"
        print(f"| {m} | {t} | {ms(u)} | {ms(f)} | {gain:.2f}x | {ms(od)} | {ms(oa)} | "
              f"{ort_gain:.2f}x | {ratio_text} | {min_text} | {goal} | {uc} -> {fc} | {agree} |")

mem = os.path.join(out, "memory.jsonl")
if os.path.exists(mem):
    rows = [json.loads(l) for l in open(mem)]
    base, r = rows[0], rows[1]
    mib = lambda kib: kib / 1024
    print(f"\npeak memory, {r['model']}, 1 run, 1 thread (max RSS; 'net' subtracts the same "
          f"process running tiny_relu.onnx); goal: fusectl <= ORT\n")
    print("| process | max RSS MiB | baseline MiB | net MiB | peak activation MiB (fusectl's plan) |")
    print("|---|---|---|---|---|")
    def row(name, key, peak=None):
        if r[key] is None:
            return
        p = f"{peak / 2**20:.1f}" if peak is not None else "-"
        print(f"| {name} | {mib(r[key]):.1f} | {mib(base[key]):.1f} | "
              f"{mib(r[key] - base[key]):.1f} | {p} |")
    row("fusectl run", "fusectl_run_rss_kib", r["fusectl_peak_activation_bytes"])
    row("fusectl profile (both sides)", "fusectl_profile_rss_kib",
        r["fusectl_profile_peak_activation_bytes"])
    row("ONNX Runtime (node, all)", "ort_all_rss_kib")
    row("ONNX Runtime (node, disabled and all sessions, as profile)", "ort_both_levels_rss_kib")
    net = lambda key: r[key] - base[key]
    net_f, net_o = net("fusectl_run_rss_kib"), net("ort_all_rss_kib")
    print(f"\nfusectl run / ONNX Runtime, net: {net_f / net_o:.2f}x "
          f"({'goal met' if net_f <= net_o else 'goal missed'})")
    if r.get("fusectl_profile_rss_kib") is not None:
        net_p = net("fusectl_profile_rss_kib")
        print(f"fusectl profile / ONNX Runtime all, net: {net_p / net_o:.2f}x "
              f"({'goal met' if net_p <= net_o else 'goal missed'})")
        if r.get("ort_both_levels_rss_kib") is not None:
            net_o2 = net("ort_both_levels_rss_kib")
            print(f"fusectl profile / ONNX Runtime with both sessions, net: {net_p / net_o2:.2f}x")
EOF
echo "run_profile_bench: raw results in $out" >&2
