#!/usr/bin/env bash
# Issue 13's kernel figures, fusectl beside ONNX Runtime in the same run: GEMM 1024^3 and skinny
# M = 1..16 (bench_gemm), ResNet-50's convolutions (bench_gemm), memory-bound kernels against
# the STREAM triad (bench_bandwidth) and the executor's cost per node on a 10k-node chain
# (bench_executor_overhead).
#
#   bench/run_kernel_bench.sh [BUILD_DIR]
#
# ONNX Runtime times single-op models of the same shapes (bench/make_kernel_models.py, written
# once to KERNEL_MODELS) through bench/ort_profile.js on seeded inputs, median of RUNS (>= 10)
# runs, levels `disabled` and `all` alternating in one process, 1 and 2 intra-op threads.
# A fusectl benchmark binary that is not built is reported as missing, and its cases are timed
# instead through the executor, on the very models ORT runs (bench_latency; marked "(e)" in the
# tables: they include the executor's per-run allocation and any per-run weight packing).
# Env: THREADS ("1 2"), RUNS (10), WARMUP (2), ONLY (substring of the case names to keep),
# KERNEL_MODELS ($FUSECTL_BENCH_MODELS/kernels, default /work/bench-models/kernels),
# FUSECTL_ORT_DIR (default BUILD/ort), PIN (1: 1-thread ORT runs and fusectl runs that take a thread
# count under `taskset -c 1`), OUT (bench/out/kernels-<UTC time>: raw JSON lines kept).
set -euo pipefail

build=${1:-build}
threads=${THREADS:-1 2}
runs=${RUNS:-10}
warmup=${WARMUP:-2}
only=${ONLY:-}
pin=${PIN:-1}
models=${KERNEL_MODELS:-${FUSECTL_BENCH_MODELS:-/work/bench-models}/kernels}
export FUSECTL_ORT_DIR=${FUSECTL_ORT_DIR:-$(cd "$build" 2>/dev/null && pwd)/ort}
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out/kernels-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
[ "$runs" -ge 10 ] || { echo "run_kernel_bench: RUNS must be >= 10" >&2; exit 2; }

if [ ! -f "$models/cases.json" ]; then
  /usr/bin/python3 "$here/make_kernel_models.py" "$models" >&2
fi

pinned() {
  local t=$1; shift
  if [ "$pin" = 1 ] && [ "$t" = 1 ] && command -v taskset >/dev/null; then taskset -c 1 "$@"; else "$@"; fi
}

missing=()
built() {  # NAME: true when $build/bench/NAME exists, else recorded as missing
  [ -x "$build/bench/$1" ] && return 0
  missing+=("$1")
  return 1
}

# fusectl first, then ORT, one suite after the other, so each pair sees similar machine load.
: >"$out/fusectl.jsonl"
if built bench_gemm; then
  echo "run_kernel_bench: bench_gemm (1 and 2 threads in one process)" >&2
  "$build/bench/bench_gemm" --repeat "$runs" >>"$out/fusectl.jsonl"
fi
if built bench_bandwidth; then
  for t in $threads; do
    echo "run_kernel_bench: bench_bandwidth --threads $t" >&2
    pinned "$t" "$build/bench/bench_bandwidth" --threads "$t" --repeat "$runs" >>"$out/fusectl.jsonl"
  done
fi
if built bench_executor_overhead; then
  for t in $threads; do
    echo "run_kernel_bench: bench_executor_overhead --threads $t" >&2
    pinned "$t" "$build/bench/bench_executor_overhead" --nodes 10000 --threads "$t" \
      --repeat "$runs" >>"$out/fusectl.jsonl"
  done
fi
# Groups whose dedicated benchmark is missing: the same single-op models through the executor.
: >"$out/fusectl_models.jsonl"
fallback_groups=()
for m in "${missing[@]+"${missing[@]}"}"; do
  case $m in
    bench_gemm) fallback_groups+=(gemm conv) ;;
    bench_bandwidth) fallback_groups+=(bandwidth) ;;
    bench_executor_overhead) fallback_groups+=(overhead) ;;
  esac
  echo "run_kernel_bench: missing $build/bench/$m (cmake --build $build --target $m)" >&2
done
if [ ${#fallback_groups[@]} -gt 0 ]; then
  if [ -x "$build/bench/bench_latency" ]; then
    echo "run_kernel_bench: timing ${fallback_groups[*]} through the executor instead (bench_latency)" >&2
    fallback_cases=$(python3 -c 'import json,sys; print("\n".join(c["name"] for c in json.load(open(sys.argv[1])) if c["group"] in sys.argv[2:]))' "$models/cases.json" "${fallback_groups[@]}")
    for c in $fallback_cases; do
      [ -z "$only" ] || [[ $c == *"$only"* ]] || continue
      for t in $threads; do
        pinned "$t" "$build/bench/bench_latency" "$models/$c.onnx" --threads "$t" --repeat "$runs" \
          --warmup "$warmup" >>"$out/fusectl_models.jsonl"
      done
    done
  else
    echo "run_kernel_bench: no $build/bench/bench_latency either: fusectl columns of ${fallback_groups[*]} stay empty" >&2
  fi
fi

: >"$out/ort.jsonl"
cases=$(python3 -c 'import json,sys; print("\n".join(c["name"] for c in json.load(open(sys.argv[1]))))' "$models/cases.json")
echo "run_kernel_bench: ONNX Runtime on $(wc -l <<<"$cases") single-op models, threads $threads" >&2
for c in $cases; do
  [ -z "$only" ] || [[ $c == *"$only"* ]] || continue
  for t in $threads; do
    pinned "$t" node "$here/ort_profile.js" "$models/$c.onnx" random:13 --threads "$t" \
      --runs "$runs" --warmup "$warmup" --levels disabled,all --label "$c" >>"$out/ort.jsonl"
  done
done

python3 - "$out" "$models/cases.json" <<'EOF'
import json, sys

out, manifest = sys.argv[1], sys.argv[2]
cases = {c["name"]: c for c in json.load(open(manifest))}
ort = {}
for line in open(f"{out}/ort.jsonl"):
    r = json.loads(line)
    ort[(r["label"], r["threads"], r["level"])] = r["median_ms"] / 1e3
fus = [json.loads(l) for l in open(f"{out}/fusectl.jsonl") if l.startswith("{")]
by_model = {c["model"]: n for n, c in cases.items()}
# Through the executor (bench_latency on the ORT models), used where a benchmark binary is missing.
executor = {}
for line in open(f"{out}/fusectl_models.jsonl"):
    r = json.loads(line)
    executor[(by_model.get(r["model"]), r["threads"])] = r["median_ms"] / 1e3

def via_executor(name, t, per_second):
    s = executor.get((name, t))
    return None if s is None else per_second(cases[name]) / s
threads = sorted({t for _, t, _ in ort})

def f(x, fmt="{:.1f}"):
    return "-" if x is None else fmt.format(x)

def cell(d, key, fmt="{:.1f}"):
    """d[key] formatted, marked (e) when it was timed through the executor."""
    return f(d.get(key), fmt) + (" (e)" if d.get("e") and d.get(key) is not None else "")

def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b

def table(title, head, rows, keys=2):
    # Rows with no figure on either side (cases left out by ONLY) are dropped.
    rows = [r for r in rows if any(cell != "-" for cell in r[keys:])]
    if not rows:
        return
    print(f"\n{title}\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")

def ort_rate(name, t, level, per_second):
    s = ort.get((name, t, level))
    return None if s is None else per_second(cases[name]) / s

gflops = lambda c: c["flops"] / 1e9
gbps_b = lambda c: c["weight_bytes"] / 1e9
gbps = lambda c: c["bytes"] / 1e9

# GEMM 1024^3: every fusectl ISA / packing line beside ORT's figure for the same threads.
rows = []
for t in threads:
    od, oa = ort_rate("gemm_1024", t, "disabled", gflops), ort_rate("gemm_1024", t, "all", gflops)
    lines = [l for l in fus if l.get("bench") == "gemm" and l.get("threads") == t]
    e = via_executor("gemm_1024", t, gflops)
    if not lines and e is not None:
        lines = [{"kernel": "executor", "gflops": e, "b_prepacked": False, "e": True}]
    for l in lines or [{}]:
        g = l.get("gflops")
        rows.append([str(t), l.get("kernel", "(not built)"),
                     "prepacked" if l.get("b_prepacked") else ("packed per call" if l else "-"),
                     cell(l, "gflops"), f(od), f(oa), f(ratio(g, max(od or 0, oa or 0) or None), "{:.2f}x")])
table("GEMM 1024x1024x1024 fp32, GFLOP/s (fusectl: bench_gemm; ORT: MatMul with a constant B)",
      ["threads", "fusectl kernel", "B", "fusectl GFLOP/s", "ORT disabled", "ORT all",
       "fusectl / best ORT"], rows, keys=3)

# The FMA peak (bench_gemm's register-only loop) the GEMM rows are bounded by.
rows = []
for t in threads:
    for l in (l for l in fus if l.get("bench") == "fma_peak" and l.get("threads") == t):
        best = max((g.get("gflops") or 0 for g in fus if g.get("bench") == "gemm"
                    and g.get("threads") == t and g.get("kernel") == l["kernel"]), default=0)
        rows.append([str(t), l["kernel"], cell(l, "gflops"),
                     f(ratio(best or None, l.get("gflops")), "{:.0%}")])
if rows:
    table("FMA peak, GFLOP/s (fused multiply-adds on registers only; the ceiling of any fp32 GEMM)",
          ["threads", "ISA", "peak GFLOP/s", "best 1024^3 GEMM / peak"], rows, keys=2)

# Skinny: GB/s of B streamed.
rows = []
for name, c in cases.items():
    if c["group"] != "gemm" or not name.startswith("gemm_skinny"):
        continue
    for t in threads:
        pick = lambda pre: next((l for l in fus if l.get("bench") == "skinny" and l.get("M") == c["m"]
                                 and l.get("N") == c["n"] and l.get("K") == c["k"]
                                 and l.get("threads") == t and l.get("b_prepacked") == pre), {})
        pre, per_call = pick(True), pick(False)
        e = via_executor(name, t, gbps_b)
        if not pre and not per_call and e is not None:
            per_call = {"b_gbps": e, "e": True}
        od = ort_rate(name, t, "disabled", gbps_b)
        oa = ort_rate(name, t, "all", gbps_b)
        best = pre.get("b_gbps") or per_call.get("b_gbps")
        rows.append([str(c["m"]), f"{c['k']}x{c['n']}", str(t), cell(pre, "b_gbps"),
                     cell(per_call, "b_gbps"), f(od), f(oa),
                     f(ratio(best, max(od or 0, oa or 0) or None), "{:.2f}x")])
table("Skinny GEMM (decode case), GB/s of B streamed", ["M", "K x N", "threads",
      "fusectl prepacked", "fusectl packed per call", "ORT disabled", "ORT all",
      "fusectl (prepacked if built) / best ORT"], rows, keys=3)

# Convolutions.
rows = []
for name, c in cases.items():
    if c["group"] != "conv":
        continue
    for t in threads:
        l = next((l for l in fus if l.get("bench") == "conv" and l.get("x") == c["x"]
                  and l.get("w") == c["w"] and l.get("stride") == c["stride"]
                  and l.get("threads") == t), {})
        if not l and via_executor(name, t, gflops) is not None:
            l = {"gflops": via_executor(name, t, gflops), "e": True}
        od, oa = ort_rate(name, t, "disabled", gflops), ort_rate(name, t, "all", gflops)
        rows.append([f"{c['x'][1]}x{c['x'][2]}² -> {c['w'][0]}, {c['w'][2]}x{c['w'][3]} s{c['stride']}",
                     str(t), cell(l, "gflops"), f(od), f(oa),
                     f(ratio(l.get("gflops"), max(od or 0, oa or 0) or None), "{:.2f}x")])
table("ResNet-50 convolutions, GFLOP/s (ORT all may switch to its NCHWc layout, "
      "reorders included)", ["C x H² -> M, k s", "threads", "fusectl", "ORT disabled", "ORT all",
      "fusectl / best ORT"], rows)

# Memory-bound kernels against the triad measured by bench_bandwidth in the same run.
triad = {l["threads"]: l["gb_per_s"] for l in fus if l.get("kernel") == "stream_triad"}
rows = []
for t in threads:
    if t in triad:
        rows.append(["STREAM triad", str(t), f(triad[t]), "1.00", "-", "-", "-"])
    for name, c in cases.items():
        if c["group"] != "bandwidth":
            continue
        l = next((l for l in fus if l.get("kernel") == name and l.get("threads") == t), {})
        if not l and via_executor(name, t, gbps) is not None:
            l = {"gb_per_s": via_executor(name, t, gbps), "e": True}
        o = ort_rate(name, t, "disabled", gbps)
        g = l.get("gb_per_s")
        # bench_bandwidth may pair each kernel with its own triad pass (triad_gb_per_s): then
        # both runtimes' ratios use that one, measured right beside the kernel.
        ref = l.get("triad_gb_per_s") or triad.get(t)
        own = l.get("ratio_to_triad") if "triad_gb_per_s" in l else ratio(g, ref)
        rows.append([name, str(t), cell(l, "gb_per_s"), f(own, "{:.2f}"), f(o),
                     f(ratio(o, ref), "{:.2f}"), f(ratio(g, o), "{:.2f}x")])
table(f"Memory-bound kernels on {cases['Relu']['bytes'] // 8 // 2**20}M floats, GB/s of inputs + output "
      "(ORT: level disabled)", ["kernel", "threads", "fusectl GB/s", "fusectl / triad", "ORT GB/s",
      "ORT / triad", "fusectl / ORT"], rows)

# Executor overhead.
rows = []
c = cases["executor_overhead"]
for t in threads:
    l = next((l for l in fus if l.get("bench") == "executor_overhead" and l.get("threads") == t), {})
    if not l and executor.get(("executor_overhead", t)) is not None:
        l = {"ns_per_node": executor[("executor_overhead", t)] * 1e9 / c["nodes"], "e": True}
    s = ort.get(("executor_overhead", t, "disabled"))
    o = None if s is None else s * 1e9 / c["nodes"]
    rows.append([str(t), cell(l, "ns_per_node"), f(l.get("executor_ns_per_node")),
                 f(l.get("kernel_ns_per_call")), f(o), f(ratio(l.get("ns_per_node"), o), "{:.2f}x")])
table(f"Executor cost per node, chain of {c['nodes']} Relu on {c['elements']} floats, ns",
      ["threads", "fusectl ns/node", "fusectl executor only", "fusectl kernel alone",
       "ORT ns/node (disabled)", "fusectl / ORT"], rows)
for l in fus:
    if l.get("bench") == "parallel_region":
        print(f"\nfusectl parallel region ({l['threads']} threads): {l['us_per_region']} us per "
              f"region, {l['us_overhead']} us over half the serial time")
if executor:
    print("\n(e): timed through the executor (bench_latency on the model ORT runs: includes the "
          "per-run output allocation and whatever weight packing the kernels redo each run), "
          "because the dedicated fusectl benchmark was not built.")
EOF
echo "run_kernel_bench: raw results in $out" >&2
