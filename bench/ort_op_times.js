#!/usr/bin/env node
// ONNX Runtime's own profiler on two models with the same inputs (issue 12's `--emit ort`
// goals): the original and fusectl's `-O3 --emit ort` output, each in a session at graph
// optimization level `all`, sequential, 1 intra-op thread by default. Runs A/B/A/B (above one
// thread, A's runs then B's: bench/ort_runs.js), then sums the kernel time its profiler records (`enableProfiling`,
// events of category "Node" whose name ends in "_kernel_time") per op type over the timed runs,
// divided by the run count.
//
//   node bench/ort_op_times.js ORIGINAL EMITTED INPUTS [--threads N] [--runs R] [--warmup W]
//                              [--per-node FILE]
//
// INPUTS is a folder with <input name>.npy for every graph input (bench/export_profile_models.py
// writes them). Prints one JSON line per model: end-to-end median ms (wall, taken around
// session.run), nodes in ONNX Runtime's optimized graph, and per op type the kernel ms per run
// and the number of kernel calls per run; then one line with MatMul-family and other kernel
// time per run for both and the share of the other time removed. --per-node FILE also writes
// each side's kernel ms per run by node name (ONNX Runtime keeps the name of the node a fusion
// started from, so its Conv+activation nodes pair with fusectl's fused ones by name). The last
// line also gives the share with attention's products charged to the MatMul side on both (at
// the original's kernel time for them), since the fused attention kernels run them inside.
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const { loadOrt, readNpy } = require('../tests/ort_reference.js');
const { timeSessions } = require('./ort_runs.js');

function usage() {
  console.error('usage: node ort_op_times.js ORIGINAL EMITTED INPUTS_DIR [--threads N] ' +
                '[--runs R] [--warmup W] [--per-node FILE]');
  process.exit(2);
}

const MATMUL_FAMILY = new Set(['MatMul', 'Gemm', 'FusedMatMul', 'FusedGemm', 'MatMulNBits']);

async function main() {
  const args = process.argv.slice(2);
  if (args.length < 3) usage();
  const [original, emitted, inputsDir] = args;
  let threads = 1, runs = 10, warmup = 3, perNodeFile = '';
  for (let i = 3; i < args.length; i += 2) {
    const v = Number(args[i + 1]);
    if (args[i] === '--threads') threads = v;
    else if (args[i] === '--runs') runs = v;
    else if (args[i] === '--warmup') warmup = v;
    else if (args[i] === '--per-node' && args[i + 1]) perNodeFile = args[i + 1];
    else usage();
  }
  const perNodeAll = {};
  const ort = loadOrt();
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'ort_op_times_'));
  const sides = [];
  for (const [label, model] of [['original', original], ['emitted', emitted]]) {
    const optimized = path.join(work, label + '.opt.onnx');
    const session = await ort.InferenceSession.create(model, {
      graphOptimizationLevel: 'all',
      executionMode: 'sequential',
      intraOpNumThreads: threads,
      interOpNumThreads: 1,
      enableProfiling: true,
      profileFilePrefix: path.join(work, label),
      optimizedModelFilePath: optimized,
    });
    const feeds = {};
    for (const name of session.inputNames) {
      const t = readNpy(path.join(inputsDir, name + '.npy'));
      feeds[name] = new ort.Tensor(t.type, t.data, t.dims);
    }
    sides.push({ label, session, feeds, optimized });
  }
  const times = await timeSessions(sides.length, (k) => sides[k].session.run(sides[k].feeds),
                                   { threads, warmup, runs });
  sides.forEach((s, k) => { s.times = times[k]; });
  const summary = {};
  for (const s of sides) {
    s.session.endProfiling();  // writes <profileFilePrefix>_<timestamp>.json; returns nothing
    const file = fs.readdirSync(work).find((f) => f.startsWith(s.label + '_') && f.endsWith('.json'));
    if (!file) throw new Error(`no profile file for ${s.label} in ${work}`);
    const events = JSON.parse(fs.readFileSync(path.join(work, file), 'utf8'));
    const runStarts = events.filter((e) => e.cat === 'Session' && e.name === 'model_run');
    // The timed runs are the last `runs` model_run events; kernel events inside them count.
    const timed = runStarts.slice(-runs);
    const from = timed.length ? timed[0].ts : 0;
    const perOp = {};
    const perNode = {};
    // Products of two activations (attention's Q K^T and P V in the original): MatMul-family
    // kernels whose first two inputs both have batch dimensions (rank 3 or more). A weight is
    // a 2-D input in these exports, and ONNX Runtime's Gemm reads 2-D views. (The profiler's
    // parameter_size cannot tell: it is 0 for weights that a MatMul kernel prepacked.)
    let activationProducts = 0;
    for (const e of events) {
      if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time') || e.ts < from) continue;
      const op = (e.args && e.args.op_name) || '?';
      perOp[op] = perOp[op] || { ms: 0, calls: 0 };
      perOp[op].ms += e.dur / 1000 / runs;
      perOp[op].calls += 1 / runs;
      const node = e.name.slice(0, -'_kernel_time'.length);
      perNode[node] = perNode[node] || { op, ms: 0 };
      perNode[node].ms += e.dur / 1000 / runs;
      const shapes = ((e.args && e.args.input_type_shape) || []).map((t) => Object.values(t)[0] || []);
      if (MATMUL_FAMILY.has(op) && shapes.length >= 2 && shapes[0].length >= 3 &&
          shapes[1].length >= 3)
        activationProducts += e.dur / 1000 / runs;
    }
    perNodeAll[s.label] = perNode;
    let matmul = 0, other = 0;
    for (const [op, v] of Object.entries(perOp)) {
      v.ms = Number(v.ms.toFixed(3));
      v.calls = Math.round(v.calls);
      if (MATMUL_FAMILY.has(op)) matmul += v.ms; else other += v.ms;
    }
    const sorted = [...s.times].sort((a, b) => a - b);
    const median = sorted[Math.floor(sorted.length / 2)];
    const nodes = countNodes(s.optimized);
    summary[s.label] = { matmul, other, activationProducts };
    console.log(JSON.stringify({ model: s.label, median_ms: Number(median.toFixed(2)),
                                 min_ms: Number(sorted[0].toFixed(2)), ort_nodes: nodes,
                                 kernel_ms_matmul: Number(matmul.toFixed(2)),
                                 kernel_ms_activation_products:
                                     Number(activationProducts.toFixed(2)),
                                 kernel_ms_other: Number(other.toFixed(2)), ops: perOp }));
  }
  const o = summary.original, e = summary.emitted;
  // A fused attention kernel (MultiHeadAttention, Attention, GroupQueryAttention) runs the
  // products the original ran as MatMul nodes, so its time counts as "other" on the emitted
  // side only. The second share charges those products to the MatMul side at the original's
  // own kernel time for them: the products that left the MatMul family (the original's minus
  // what the emitted graph still runs as MatMul) are taken out of the emitted "other" time.
  const movedProducts = Math.max(0, o.activationProducts - e.activationProducts);
  const otherWithoutProducts = Math.max(0, e.other - movedProducts);
  console.log(JSON.stringify({
    other_kernel_ms_original: Number(o.other.toFixed(2)),
    other_kernel_ms_emitted: Number(e.other.toFixed(2)),
    other_removed_share: Number((1 - e.other / o.other).toFixed(3)),
    attention_products_moved_ms: Number(movedProducts.toFixed(2)),
    other_kernel_ms_emitted_products_as_matmul: Number(otherWithoutProducts.toFixed(2)),
    other_removed_share_products_as_matmul:
        Number((1 - otherWithoutProducts / o.other).toFixed(3)),
  }));
  if (perNodeFile) fs.writeFileSync(perNodeFile, JSON.stringify(perNodeAll, null, 1) + '\n');
  fs.rmSync(work, { recursive: true, force: true });
}

// Nodes in a saved ONNX file's main graph: NodeProto is field 1 of GraphProto, GraphProto field
// 7 of ModelProto; a minimal protobuf walk keeps this script free of an ONNX package.
function countNodes(file) {
  const buf = fs.readFileSync(file);
  const graph = findField(buf, 0, buf.length, 7);
  if (!graph) return -1;
  let count = 0;
  forEachField(buf, graph[0], graph[1], (field, start, end) => { if (field === 1) ++count; });
  return count;
}

function readVarint(buf, pos) {
  let v = 0, shift = 0, b;
  do {
    b = buf[pos++];
    v += (b & 0x7f) * 2 ** shift;
    shift += 7;
  } while (b & 0x80);
  return [v, pos];
}

function forEachField(buf, start, end, fn) {
  let pos = start;
  while (pos < end) {
    let key;
    [key, pos] = readVarint(buf, pos);
    const field = Math.floor(key / 8), wire = key & 7;
    if (wire === 0) { [, pos] = readVarint(buf, pos); continue; }
    if (wire === 1) { pos += 8; continue; }
    if (wire === 5) { pos += 4; continue; }
    if (wire !== 2) throw new Error('unsupported wire type ' + wire);
    let len;
    [len, pos] = readVarint(buf, pos);
    fn(field, pos, pos + len);
    pos += len;
  }
}

function findField(buf, start, end, wanted) {
  let found = null;
  forEachField(buf, start, end, (field, s, e) => { if (field === wanted && !found) found = [s, e]; });
  return found;
}

main().catch((err) => {
  console.error(`ort_op_times: ${err.message || err}`);
  process.exit(3);
});
