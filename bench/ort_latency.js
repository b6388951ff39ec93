#!/usr/bin/env node
// ONNX Runtime's latency on one model, the reference side of bench/run_latency_bench.sh:
//   node bench/ort_latency.js MODEL INPUTS_DIR [--threads N] [--repeat R] [--warmup W] [--level L]
// INPUTS_DIR holds <input name>.npy (written by bench_latency --inputs-dir). Sequential
// execution, intra-op threads N (same as fusectl's --threads), graph optimization level L
// ('all' by default; 'disabled' times ORT's kernels on the unoptimized graph). INPUTS_DIR is
// only read: the caller owns it.
'use strict';

const path = require('path');
const { loadOrt, readNpy } = require('../tests/ort_reference.js');

async function main() {
  const args = process.argv.slice(2);
  if (args.length < 2) {
    console.error('usage: node ort_latency.js MODEL INPUTS_DIR [--threads N] [--repeat R] ' +
                  '[--warmup W] [--level L]');
    process.exit(2);
  }
  const [model, inputsDir] = args;
  const opt = { threads: 1, repeat: 20, warmup: 3, level: 'all' };
  for (let i = 2; i + 1 < args.length; i += 2) opt[args[i].replace(/^--/, '')] = args[i + 1];
  const ort = loadOrt();
  const session = await ort.InferenceSession.create(model, {
    graphOptimizationLevel: opt.level,
    intraOpNumThreads: Number(opt.threads),
    interOpNumThreads: 1,
    executionMode: 'sequential',
  });
  const feeds = {};
  for (const name of session.inputNames) {
    const t = readNpy(path.join(inputsDir, name + '.npy'));
    feeds[name] = new ort.Tensor(t.type, t.data, t.dims);
  }
  for (let i = 0; i < Number(opt.warmup); ++i) await session.run(feeds);
  const ms = [];
  for (let i = 0; i < Number(opt.repeat); ++i) {
    const t0 = process.hrtime.bigint();
    await session.run(feeds);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  ms.sort((a, b) => a - b);
  console.log(JSON.stringify({
    runtime: `onnxruntime-node (${opt.level})`, model, threads: Number(opt.threads),
    repeat: ms.length, median_ms: +ms[Math.floor(ms.length / 2)].toFixed(3),
    min_ms: +ms[0].toFixed(3),
  }));
}

main().catch((e) => {
  console.error(`ort_latency: ${e.message || e}`);
  process.exit(3);
});
