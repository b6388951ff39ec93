#!/usr/bin/env node
// Saves ONNX Runtime's own optimized version of a model: the baseline `fusectl optimize` is
// held to (tests/test_ort_optimize.cpp).
//   node tests/ort_optimized_model.js MODEL OUT LEVEL      LEVEL: basic | extended | all
// Exit codes: 0 ok, 2 usage, 3 ORT failure, 77 onnxruntime-node not installed.
'use strict';

const { loadOrt } = require('./ort_reference.js');

async function main() {
  const [model, out, level] = process.argv.slice(2);
  if (!model || !out || !['basic', 'extended', 'all'].includes(level)) {
    console.error('usage: node ort_optimized_model.js MODEL OUT basic|extended|all');
    process.exit(2);
  }
  const ort = loadOrt();
  await ort.InferenceSession.create(model, {
    graphOptimizationLevel: level,
    optimizedModelFilePath: out,
    intraOpNumThreads: 1,
  });
  console.log(`wrote ${out} (ORT level ${level})`);
}

main().catch((e) => {
  console.error(`ort_optimized_model: ${e.message || e}`);
  process.exit(3);
});
