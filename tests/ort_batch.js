#!/usr/bin/env node
// Runs many models with onnxruntime-node in one process, as ort_reference.js runs one: for the
// sweeps, where starting node and ORT per model would cost more than the models.
//
//   node tests/ort_batch.js JOBS
//
// JOBS holds one job per line, tab-separated: MODEL, OUT_DIR, then NAME=FILE inputs. Each job
// writes its outputs to OUT_DIR/<name>.npy, or, when ORT refuses the model or fails to run it,
// OUT_DIR/error.txt with the message. Exit codes: 0 every job done (failed or not), 2 usage,
// 77 onnxruntime-node not installed.
'use strict';

const fs = require('fs');
const path = require('path');
const { loadOrt, runModel } = require('./ort_reference.js');

async function main() {
  const [jobs] = process.argv.slice(2);
  if (!jobs) {
    console.error('usage: node ort_batch.js JOBS');
    process.exit(2);
  }
  const ort = loadOrt();
  const lines = fs.readFileSync(jobs, 'utf8').split('\n').filter((l) => l.length > 0);
  for (const line of lines) {
    const [model, outDir, ...specs] = line.split('\t');
    try {
      await runModel(ort, model, outDir, specs);
    } catch (e) {
      fs.mkdirSync(outDir, { recursive: true });
      fs.writeFileSync(path.join(outDir, 'error.txt'), String(e.message || e));
    }
  }
  console.log(`ort_batch: ${lines.length} jobs`);
}

main().catch((e) => {
  console.error(`ort_batch: ${e.message || e}`);
  process.exit(3);
});
