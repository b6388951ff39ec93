#!/usr/bin/env node
// ONNX Runtime's graph-optimization cost, the reference for bench/run_optimize_bench.sh:
//   node bench/ort_session.js MODEL [--level all|extended|basic|disabled] [--repeat R]
// Creates an onnxruntime-node InferenceSession (graph optimization level 'all' by default: ORT's
// counterpart of `fusectl optimize -O3`) R times (default 3) and prints one JSON line with the
// median creation seconds. Session creation also loads the model and allocates kernels, so it
// is an upper bound for ORT's optimizer alone; '--level disabled' gives the load-only baseline.
// onnxruntime-node is found through FUSECTL_ORT_DIR (scripts/install-ort.sh DIR) or the cwd.
'use strict';

const { loadOrt } = require('../tests/ort_reference.js');

async function main() {
  const args = process.argv.slice(2);
  if (args.length < 1 || args[0].startsWith('--')) {
    console.error('usage: node ort_session.js MODEL [--level all|extended|basic|disabled] ' +
                  '[--repeat R]');
    process.exit(2);
  }
  const model = args[0];
  const opt = { level: 'all', repeat: 3 };
  for (let i = 1; i + 1 < args.length; i += 2) opt[args[i].replace(/^--/, '')] = args[i + 1];
  const ort = loadOrt();
  const seconds = [];
  for (let r = 0; r < Number(opt.repeat); ++r) {
    const t0 = process.hrtime.bigint();
    const session = await ort.InferenceSession.create(model, {
      graphOptimizationLevel: opt.level,
      intraOpNumThreads: 1,
      interOpNumThreads: 1,
    });
    seconds.push(Number(process.hrtime.bigint() - t0) / 1e9);
    await session.release();
  }
  seconds.sort((a, b) => a - b);
  console.log(JSON.stringify({
    model,
    level: opt.level,
    repeat: seconds.length,
    session_create_s: Number(seconds[Math.floor((seconds.length - 1) / 2)].toFixed(4)),
    runs_s: seconds.map((s) => Number(s.toFixed(4))),
    peak_rss_mib: Math.round(process.resourceUsage().maxRSS / 1024),
  }));
}

main().catch((e) => {
  console.error(`ort_session: ${e.message}`);
  process.exit(1);
});
