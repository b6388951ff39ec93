#!/usr/bin/python3
# Two fusectl binaries (or one binary under two environments) compared node by node on one
# model: rounds that run A then B, each `fusectl profile MODEL --only fused --json --top 1000`
# (one thread, pinned to core 1 when taskset exists), then each node's minimum over the rounds
# per side, the nodes that moved most, and each round's whole-run minimum.
#
# On a host whose speed drifts by 2-3% from one minute to the next, a whole-model A/B does not
# resolve a change to a few nodes; per-node minima over alternating rounds do: a node the change
# does not touch stays level, one it touches moves the same way in every round.
#
#   /usr/bin/python3 bench/ab_node_times.py --a FUSECTL_A [--b FUSECTL_B] [--env-a K=V ...]
#       [--env-b K=V ...] [--args-a "PROFILE ARGS"] [--args-b "PROFILE ARGS"] [--alternated]
#       [--rounds 3] [--runs 30] [--top 12] MODEL.onnx [--input NAME=FILE ...]
#
# --b defaults to --a (then the environments or the profile arguments are what differs:
# `--args-a "--disable fuse-expand-depthwise"` compares a pass off and on). --alternated profiles
# each side alternating with the unfused model (no --only fused), as the tables run it, so that
# each fused run starts on caches the unfused one has used. Prints per round "A min / B min", the
# sums of the per-node minima, the `--top` nodes that gained and lost most (each with its
# per-round times, so a one-round outlier shows; "A-op -> B-op" where the op differs), and the
# nodes only one side has (a fusion's replaced nodes on one side, its new node's name on both).
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile


def run_profile(binary, env, extra, alternated, model, inputs, runs, out_json):
    pin = ["taskset", "-c", "1"] if shutil.which("taskset") else []
    cmd = pin + [binary, "profile", model] + ([] if alternated else ["--only", "fused"]) + [
        "--threads", "1", "--runs", str(runs), "--warmup", "5", "--top", "1000", "--json",
        out_json] + extra
    for i in inputs:
        cmd += ["--input", i]
    full_env = dict(os.environ)
    full_env.update(env)
    subprocess.run(cmd, check=True, env=full_env, stdout=subprocess.DEVNULL)
    with open(out_json) as f:
        side = json.load(f)["sides"]["fused"]
    return side["min_ms"], {n["node"]: n for n in side["top_nodes"]}


def parse_env(pairs):
    env = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep:
            sys.exit(f"ab_node_times: --env-a/--env-b takes KEY=VALUE, not '{p}'")
        env[key] = value
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model")
    ap.add_argument("--a", required=True, help="fusectl binary of side A")
    ap.add_argument("--b", help="fusectl binary of side B (default: --a)")
    ap.add_argument("--env-a", action="append", default=[])
    ap.add_argument("--env-b", action="append", default=[])
    ap.add_argument("--args-a", default="", help="extra `fusectl profile` arguments of side A")
    ap.add_argument("--args-b", default="", help="extra `fusectl profile` arguments of side B")
    ap.add_argument("--alternated", action="store_true",
                    help="profile each side alternating with the unfused model")
    ap.add_argument("--input", action="append", default=[])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    sides = {"A": (args.a, parse_env(args.env_a), shlex.split(args.args_a)),
             "B": (args.b or args.a, parse_env(args.env_b), shlex.split(args.args_b))}
    times = {"A": {}, "B": {}}
    whole = {"A": [], "B": []}
    info = {"A": {}, "B": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, (binary, env, extra) in sides.items():
                out = os.path.join(tmp, f"{name}{r}.json")
                run_min, nodes = run_profile(binary, env, extra, args.alternated, args.model,
                                             args.input, args.runs, out)
                whole[name].append(run_min)
                for node, n in nodes.items():
                    times[name].setdefault(node, []).append(n["ms"])
                    info[name][node] = n
    common = [n for n in times["A"] if n in times["B"]]
    if not common:
        sys.exit("ab_node_times: the two sides share no node names (different pipelines?)")
    print("whole-run minimum per round, ms: A " + " ".join(f"{t:.3f}" for t in whole["A"]) +
          " | B " + " ".join(f"{t:.3f}" for t in whole["B"]))
    sum_a = sum(min(times["A"][n]) for n in common)
    sum_b = sum(min(times["B"][n]) for n in common)
    print(f"sum of per-node minima over {len(common)} nodes: A {sum_a:.3f} ms, B {sum_b:.3f} ms")
    moved = sorted(common, key=lambda n: min(times["B"][n]) - min(times["A"][n]))
    shown = moved[:args.top] + [n for n in moved[-args.top:] if n not in moved[:args.top]]
    for n in shown:
        a, b = times["A"][n], times["B"][n]
        shapes = info["B"][n].get("input_shapes", [])[:2]
        op_a, op_b = info["A"][n]["op"], info["B"][n]["op"]
        op = op_b if op_a == op_b else f"{op_a} -> {op_b}"
        print(f"{min(b) - min(a):+.3f} ms  A {' '.join(f'{t:.3f}' for t in a)}  "
              f"B {' '.join(f'{t:.3f}' for t in b)}  {op} {shapes} {n}")
    for side, other in (("A", "B"), ("B", "A")):
        for n in [n for n in times[side] if n not in times[other]]:
            print(f"{side} only: {min(times[side][n]):.3f} ms  "
                  f"{' '.join(f'{t:.3f}' for t in times[side][n])}  {info[side][n]['op']} {n}")


if __name__ == "__main__":
    main()
