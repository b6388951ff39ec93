#!/usr/bin/python3
"""Black-box mutation run: mutate real models and feed them to `fusectl dump`, `optimize -O3`
and `run`; count crashes and hangs.

Each run takes one of the testdata models (binary .onnx and the .onnxtxt fixtures), applies
one mutation and runs one command on it with a timeout:

  bytes      flip bytes, truncate, insert or delete a range, duplicate a chunk
  structure  (through the onnx package, binary models only) bad or huge dims, wrong element
             types, wrong attribute types and values, shuffled nodes, wrong op types,
             dangling inputs, removed nodes or initializers, swapped inputs, odd opsets

An outcome is a crash when the process dies of a signal, prints a sanitizer report, exits with
a code outside docs/cli.md's set (0 1 2 3 4 5 70); a hang when it times out; a failure without
exactly one line "fusectl: error: ..." on stderr is counted as "multiline" (fails with --strict).
Exit 70 (an internal error, or out of memory under the run's address-space cap) is counted
apart. Each finding's input is kept in --findings with the command that failed.

    /usr/bin/python3 bench/mutate_models.py --fusectl build/apps/fusectl --runs 10000 -j 2

Needs only the standard library and onnx. Deterministic for a given --seed (the outcomes can
still differ with load: a timeout).
"""
import argparse
import concurrent.futures
import copy
import glob
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import onnx
from onnx import TensorProto

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DOCUMENTED_EXIT_CODES = {0, 1, 2, 3, 4, 5, 70}
SANITIZER_MARKS = ("AddressSanitizer", "UndefinedBehaviorSanitizer", "runtime error:",
                   "LeakSanitizer", "ThreadSanitizer")
OP_TYPES = ["Add", "Conv", "MatMul", "Relu", "Gemm", "Reshape", "Transpose", "Concat", "Split",
            "Slice", "Gather", "Softmax", "LayerNormalization", "BatchNormalization", "If",
            "Loop", "Cast", "Expand", "Tile", "Pad", "ReduceMean", "Squeeze", "Unsqueeze",
            "Where", "Resize", "ConstantOfShape", "Range", "TopK", "NoSuchOp", "Identity"]
HUGE_DIMS = [1 << 31, 1 << 40, (1 << 62), (1 << 63) - 1, -1, -(1 << 40), 0, 3, 1 << 20]


def source_models():
    models = sorted(glob.glob(os.path.join(ROOT, "testdata", "models", "*.onnx")))
    models += sorted(glob.glob(os.path.join(ROOT, "testdata", "models", "fp16", "*.onnx")))
    models += sorted(glob.glob(os.path.join(ROOT, "testdata", "fixtures", "*.onnxtxt")))
    return models


# ---- byte mutations ----

def mutate_bytes(rng, data):
    data = bytearray(data)
    kind = rng.choice(["flip", "flip", "truncate", "insert", "delete", "duplicate"])
    if not data:
        return "empty", bytes(data)
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8) if rng.random() < 0.7 else rng.randrange(1, 256)
    elif kind == "truncate":
        del data[rng.randrange(len(data)):]
    elif kind == "insert":
        i = rng.randrange(len(data) + 1)
        data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    elif kind == "delete":
        i = rng.randrange(len(data))
        del data[i:i + rng.randint(1, 64)]
    else:
        i = rng.randrange(len(data))
        chunk = data[i:i + rng.randint(1, 256)]
        j = rng.randrange(len(data) + 1)
        data[j:j] = chunk
    return "bytes:" + kind, bytes(data)


# ---- structure-aware mutations ----

def all_graphs(g):
    yield g
    for n in g.node:
        for a in n.attribute:
            if a.HasField("g"):
                yield from all_graphs(a.g)
            for sub in a.graphs:
                yield from all_graphs(sub)


def mutate_structure(rng, model):
    m = copy.deepcopy(model)
    graphs = list(all_graphs(m.graph))
    g = rng.choice(graphs)
    kinds = ["bad_dims", "huge_dims", "dtype", "attr_type", "attr_value", "shuffle", "op_type",
             "dangling", "drop_node", "drop_initializer", "swap_inputs", "opset", "input_shape"]
    kind = rng.choice(kinds)
    nodes = list(g.node)
    if kind == "bad_dims" and g.initializer:
        t = rng.choice(g.initializer)
        dims = list(t.dims)
        choice = rng.randrange(4)
        if choice == 0 and dims:
            dims.pop(rng.randrange(len(dims)))
        elif choice == 1:
            dims.insert(rng.randrange(len(dims) + 1), rng.choice([0, 1, 2, 7]))
        elif choice == 2 and dims:
            dims[rng.randrange(len(dims))] = rng.choice([0, -1, 2, 1000])
        else:
            dims = list(reversed(dims)) + [1]
        del t.dims[:]
        t.dims.extend(dims)
    elif kind == "huge_dims" and g.initializer:
        t = rng.choice(g.initializer)
        if t.dims:
            t.dims[rng.randrange(len(t.dims))] = rng.choice(HUGE_DIMS)
    elif kind == "input_shape" and (g.input or g.output):
        vi = rng.choice(list(g.input) + list(g.output) + list(g.value_info))
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            if len(dims):
                d = dims[rng.randrange(len(dims))]
                d.dim_value = rng.choice(HUGE_DIMS)
    elif kind == "dtype":
        if g.initializer and rng.random() < 0.5:
            rng.choice(g.initializer).data_type = rng.randrange(0, 26)
        elif g.input:
            vi = rng.choice(g.input)
            if vi.type.HasField("tensor_type"):
                vi.type.tensor_type.elem_type = rng.randrange(0, 26)
    elif kind in ("attr_type", "attr_value"):
        with_attrs = [n for n in nodes if n.attribute]
        if with_attrs:
            a = rng.choice(rng.choice(with_attrs).attribute)
            if kind == "attr_type":
                a.type = rng.randrange(0, 15)
            elif a.type == onnx.AttributeProto.INT:
                a.i = rng.choice([-1, 0, 100, -(1 << 40), 1 << 40, 2])
            elif a.type == onnx.AttributeProto.INTS:
                if len(a.ints) and rng.random() < 0.7:
                    a.ints[rng.randrange(len(a.ints))] = rng.choice([-1, 0, 1 << 40, -(1 << 40)])
                else:
                    a.ints.append(rng.choice([0, 5, -3]))
            elif a.type == onnx.AttributeProto.FLOAT:
                a.f = rng.choice([float("nan"), float("inf"), -1.0, 0.0])
            elif a.type == onnx.AttributeProto.STRING:
                a.s = rng.choice([b"", b"bogus", b"\xff\xfe"])
            elif a.type == onnx.AttributeProto.TENSOR:
                a.t.data_type = rng.randrange(0, 26)
    elif kind == "shuffle" and nodes:
        rng.shuffle(nodes)
        del g.node[:]
        g.node.extend(nodes)
    elif kind == "op_type" and nodes:
        rng.choice(g.node).op_type = rng.choice(OP_TYPES)
    elif kind == "dangling" and nodes:
        n = rng.choice(g.node)
        if len(n.input):
            n.input[rng.randrange(len(n.input))] = rng.choice(["nonexistent", "", n.output[0]])
        else:
            n.input.append("nonexistent")
    elif kind == "drop_node" and nodes:
        del g.node[rng.randrange(len(nodes))]
    elif kind == "drop_initializer" and g.initializer:
        del g.initializer[rng.randrange(len(g.initializer))]
    elif kind == "swap_inputs" and nodes:
        n = rng.choice(g.node)
        if len(n.input) >= 2:
            i, j = rng.sample(range(len(n.input)), 2)
            n.input[i], n.input[j] = n.input[j], n.input[i]
    elif kind == "opset" and m.opset_import:
        m.opset_import[0].version = rng.choice([1, 6, 9, 11, 17, 21, 25, 1000, 0, -1])
    else:
        kind += "(no-op)"
    return "structure:" + kind, m.SerializeToString()


# ---- running ----

MEMORY_CAP = 8 << 30
# Set by main() when the fusectl binary is built with AddressSanitizer, which reserves terabytes
# of address space for its shadow memory and so cannot start under an address-space cap.
ASAN_BINARY = False


def limit_child():
    # A mutated shape may still ask for gigabytes in many tensors each below --max-tensor-bytes:
    # cap the address space so that it ends as "out of memory" (exit 70), not by taking the
    # shared machine. Under ASan the same cap is ASan's malloc_limit_mb (child_env()).
    if not ASAN_BINARY:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def child_env():
    env = dict(os.environ)
    if ASAN_BINARY:
        options = env.get("ASAN_OPTIONS", "")
        env["ASAN_OPTIONS"] = (options + ":" if options else "") + \
            "allocator_may_return_null=1:malloc_limit_mb={}".format(MEMORY_CAP >> 20)
    return env


def classify(returncode, stderr, timed_out):
    if timed_out:
        return "hang"
    if returncode < 0:
        return "crash"
    if any(mark in stderr for mark in SANITIZER_MARKS):
        return "crash"
    if returncode not in DOCUMENTED_EXIT_CODES:
        return "crash"
    if returncode != 0:
        lines = stderr.splitlines()
        if len(lines) != 1 or not (lines[0].startswith("fusectl: error: ") or
                                   lines[0].startswith("fusectl: check failed: ")):
            return "multiline"
        if returncode == 70:
            return "internal"
    return "ok"


def one_run(index, args, sources, parsed, workdir):
    rng = random.Random(args.seed * 1000003 + index)
    source = rng.choice(sources)
    with open(source, "rb") as f:
        original = f.read()
    text = source.endswith(".onnxtxt")
    if text or rng.random() < 0.5:
        mutation, data = mutate_bytes(rng, original)
    else:
        mutation, data = mutate_structure(rng, parsed[source])
    command = rng.choice(["dump", "optimize", "run"])
    run_dir = os.path.join(workdir, "run{}".format(index))
    os.makedirs(run_dir)
    model = os.path.join(run_dir, "model.onnxtxt" if text else "model.onnx")
    with open(model, "wb") as f:
        f.write(data)
    argv = [args.fusectl, command, model]
    if command == "optimize":
        argv += ["-O3", "-o", os.path.join(run_dir, "out.onnx")]
    # Each run is bounded as a CI job running untrusted models would bound it: no tensor, read
    # or computed, above 256 MiB. A mutated input shape such as [1,3,32,1048576] is a legal
    # model whose run computes for half a minute in 2 GiB tensors (docs/hardening.md): real
    # work, not a hang, and refused at once under this limit.
    argv += ["--max-tensor-bytes", "256MiB"]
    timed_out = False
    try:
        p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           timeout=args.timeout, preexec_fn=limit_child, env=child_env())
        returncode, stderr = p.returncode, p.stderr.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        timed_out, returncode = True, None
        stderr = (e.stderr or b"").decode("utf-8", "replace")
    outcome = classify(returncode, stderr, timed_out)
    record = {"index": index, "source": os.path.relpath(source, ROOT), "mutation": mutation,
              "command": command, "exit": returncode, "outcome": outcome,
              "stderr": stderr[-2000:]}
    if outcome != "ok" and args.findings:
        os.makedirs(args.findings, exist_ok=True)
        ext = ".onnxtxt" if text else ".onnx"
        keep = os.path.join(args.findings, "finding_{}_{}{}".format(index, outcome, ext))
        shutil.copyfile(model, keep)
        with open(keep + ".json", "w") as f:
            json.dump(record, f, indent=1)
    shutil.rmtree(run_dir, ignore_errors=True)
    return record


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fusectl", default=os.path.join(ROOT, "build", "apps", "fusectl"))
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per run")
    ap.add_argument("--findings", default="", help="folder for the inputs of crashes and hangs")
    ap.add_argument("--json", default="", help="write every run's record here")
    ap.add_argument("--strict", action="store_true", help="fail on multi-line errors too")
    args = ap.parse_args()
    global ASAN_BINARY
    with open(args.fusectl, "rb") as f:
        ASAN_BINARY = b"__asan_init" in f.read()

    sources = source_models()
    parsed = {s: onnx.load_from_string(open(s, "rb").read())
              for s in sources if not s.endswith(".onnxtxt")}
    counts = {"ok": 0, "crash": 0, "hang": 0, "internal": 0, "multiline": 0}
    by_exit = {}
    records = []
    start = time.time()
    os.environ.setdefault("FUSECTL_NO_PREFAULT", "1")
    with tempfile.TemporaryDirectory(prefix="fusectl-mutate-") as workdir:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            futures = [pool.submit(one_run, i, args, sources, parsed, workdir)
                       for i in range(args.runs)]
            for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
                r = future.result()
                records.append(r)
                counts[r["outcome"]] += 1
                by_exit[str(r["exit"])] = by_exit.get(str(r["exit"]), 0) + 1
                if r["outcome"] not in ("ok",):
                    print("{}: run {} ({}, {}, {}): exit {}: {}".format(
                        r["outcome"], r["index"], r["source"], r["mutation"], r["command"],
                        r["exit"], r["stderr"].strip().splitlines()[-1:] or ""), flush=True)
                if done % 500 == 0:
                    print("{} runs, {:.0f} s: {}".format(done, time.time() - start, counts),
                          flush=True)
    records.sort(key=lambda r: r["index"])
    summary = {"runs": args.runs, "seed": args.seed, "seconds": round(time.time() - start, 1),
               "counts": counts, "exit_codes": dict(sorted(by_exit.items()))}
    print(json.dumps(summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "runs": records}, f, indent=1)
    # Crashes and hangs fail the run; --strict makes multi-line refusals fail it too. Internal
    # errors (exit 70: out of memory under the cap, or a bug) are counted and reported apart.
    return 1 if counts["crash"] or counts["hang"] or (args.strict and counts["multiline"]) else 0


if __name__ == "__main__":
    sys.exit(main())
