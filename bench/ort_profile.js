#!/usr/bin/env node
// ONNX Runtime's side of bench/run_profile_bench.sh and bench/run_kernel_bench.sh: latency of
// one model at one or more graph optimization levels, measured in one process, A/B/A/B.
//
//   node bench/ort_profile.js MODEL INPUTS [--threads N] [--runs R] [--warmup W]
//                             [--levels disabled,all] [--label TEXT]
//
// INPUTS is a folder holding <input name>.npy for every graph input (left in place, unlike
// bench/ort_latency.js), or `random:SEED` for seeded float32 data uniform in [-1, 1) shaped
// by the model's static input dims (the single-op models of bench/make_kernel_models.py). One session per level, each warmed up W times (default 3), then R
// rounds (default 20) that run every session once in turn, so that the levels see the same
// machine noise, as `fusectl profile` does for its two sides (above one thread the levels run
// one after another instead: bench/ort_runs.js). Sequential execution, intra-op threads N (fusectl's
// --threads), inter-op 1. One JSON line per level on stdout: median, min,
// max, p90 in ms, and the process's peak RSS (which, with several sessions alive, is theirs
// together: measure memory with one level and --runs 1).
'use strict';

const path = require('path');
const { loadOrt, readNpy } = require('../tests/ort_reference.js');
const { timeSessions } = require('./ort_runs.js');

function usage() {
  console.error('usage: node ort_profile.js MODEL INPUTS_DIR [--threads N] [--runs R] ' +
                '[--warmup W] [--levels disabled,all] [--label TEXT]');
  process.exit(2);
}

function percentile(sorted, p) {
  // Nearest rank on the sorted sample, the same rule for every percentile.
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1));
  return sorted[rank];
}

// Seeded data without a dependency: xorshift32 is plenty for benchmark inputs.
function randomFloats(count, seed) {
  const a = new Float32Array(count);
  let x = (seed >>> 0) || 1;
  for (let i = 0; i < count; ++i) {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    a[i] = x / 2147483648 - 1;
  }
  return a;
}

function staticDims(meta, what) {
  if (!meta.shape.every((d) => typeof d === 'number')) {
    throw new Error(`${what} '${meta.name}' has symbolic dims [${meta.shape}]`);
  }
  return meta.shape;
}

function median(sorted) {
  const n = sorted.length;
  return n % 2 ? sorted[(n - 1) / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

async function main() {
  const args = process.argv.slice(2);
  if (args.length < 2 || args[0].startsWith('--') || args[1].startsWith('--')) usage();
  const [model, inputsDir] = args;
  const opt = { threads: '1', runs: '20', warmup: '3', levels: 'disabled,all', label: '' };
  for (let i = 2; i < args.length; i += 2) {
    const key = args[i].replace(/^--/, '');
    if (!(key in opt) || i + 1 >= args.length) usage();
    opt[key] = args[i + 1];
  }
  const threads = Number(opt.threads), runs = Number(opt.runs), warmup = Number(opt.warmup);
  if (!(threads >= 1 && runs >= 1 && warmup >= 0)) usage();
  const levels = opt.levels.split(',').filter((s) => s.length);

  const ort = loadOrt();
  const sessions = [];
  for (const level of levels) {
    sessions.push(await ort.InferenceSession.create(model, {
      graphOptimizationLevel: level,
      intraOpNumThreads: threads,
      interOpNumThreads: 1,
      executionMode: 'sequential',
    }));
  }
  const feeds = {};
  const seed = /^random:(\d+)$/.exec(inputsDir);
  sessions[0].inputMetadata.forEach((meta, k) => {
    if (seed) {
      const dims = staticDims(meta, 'input');
      const count = dims.reduce((a, b) => a * b, 1);
      feeds[meta.name] = new ort.Tensor('float32', randomFloats(count, Number(seed[1]) + k), dims);
    } else {
      const t = readNpy(path.join(inputsDir, meta.name + '.npy'));
      feeds[meta.name] = new ort.Tensor(t.type, t.data, t.dims);
    }
  });
  const run = (k) => sessions[k].run(feeds);
  const ms = await timeSessions(sessions.length, run, { threads, warmup, runs });
  const rssMiB = process.resourceUsage().maxRSS / 1024;
  levels.forEach((level, k) => {
    const s = ms[k].slice().sort((a, b) => a - b);
    const round = (x) => +x.toFixed(3);
    console.log(JSON.stringify({
      runtime: 'onnxruntime-node', version: ort.env.versions ? ort.env.versions.common : '',
      level, label: opt.label, model, threads, warmup, runs,
      median_ms: round(median(s)), min_ms: round(s[0]), max_ms: round(s[s.length - 1]),
      p90_ms: round(percentile(s, 0.9)), max_rss_mib: +rssMiB.toFixed(1),
    }));
  });
}

main().catch((e) => {
  console.error(`ort_profile: ${process.argv[2] || ''}: ${e.message || e}`);
  process.exit(3);
});
