#!/usr/bin/env node
// Runs the ONNX node tests in onnxruntime-node, as `fusectl conformance` runs them in fusectl:
// the second runner on the same data (docs/conformance.md compares the two).
//
//   node tests/ort_conformance.js SUITE_DIR [--filter SUBSTR] [--tsv FILE]
//
// For each SUITE_DIR/<test>/model.onnx: the first data set's input_K.pb bind by TensorProto
// name when it names a model input, else by position; each output_K.pb is compared with model
// output K: same type and shape, floats within atol 1e-7 + rtol 1e-3 * |expected| with NaN
// where NaN is expected, integers and bools equal. A model ORT refuses, or data the JS API
// cannot carry (strings, float8, 4- and 2-bit types...), counts as not passing, with the
// reason. The tests run in a worker process: a test that kills it (ORT runs out of memory on
// a few) counts as not passing and the next worker resumes after it. --tsv writes
// "test<TAB>pass|fail<TAB>reason" per test. Prints a summary line; exit codes: 0 ran, 2 usage,
// 77 onnxruntime-node not installed.
'use strict';

const childProcess = require('child_process');
const fs = require('fs');
const path = require('path');
const { loadOrt, readTensorProto } = require('./ort_reference.js');

const RTOL = 1e-3;
const ATOL = 1e-7;

function compare(actual, expected) {
  if (actual.type !== expected.type) return `type ${actual.type}, expected ${expected.type}`;
  const ad = actual.dims.map(Number);
  const ed = expected.dims.map(Number);
  if (ad.length !== ed.length || ad.some((d, i) => d !== ed[i])) {
    return `shape [${ad}], expected [${ed}]`;
  }
  const isFloat = ['float32', 'float64', 'float16'].includes(expected.type);
  const toNum = (v) => (typeof v === 'bigint' ? v : Number(v));
  const a = actual.data;
  const e = expected.data;
  if (a.length !== e.length) return `${a.length} elements, expected ${e.length}`;
  for (let i = 0; i < e.length; ++i) {
    let av = toNum(a[i]);
    let ev = toNum(e[i]);
    if (expected.type === 'float16') {  // both sides hold float16 bit patterns
      av = halfToNumber(Number(a[i]));
      ev = halfToNumber(Number(e[i]));
    }
    if (expected.type === 'bool') {
      av = av ? 1 : 0;
      ev = ev ? 1 : 0;
    }
    if (isFloat) {
      if (Number.isNaN(ev) ? !Number.isNaN(av)
                           : !(av === ev || Math.abs(av - ev) <= ATOL + RTOL * Math.abs(ev))) {
        return `element ${i}: ${av}, expected ${ev}`;
      }
    } else if (av !== ev) {
      return `element ${i}: ${av}, expected ${ev}`;
    }
  }
  return '';
}

function halfToNumber(h) {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

function indexed(dir, prefix) {
  return fs.readdirSync(dir)
      .map((f) => ({ f, m: new RegExp(`^${prefix}(\\d+)\\.pb$`).exec(f) }))
      .filter((x) => x.m)
      .sort((x, y) => Number(x.m[1]) - Number(y.m[1]))
      .map((x) => path.join(dir, x.f));
}

async function runTest(ort, dir) {
  const data = path.join(dir, 'test_data_set_0');
  let session;
  try {
    session = await ort.InferenceSession.create(path.join(dir, 'model.onnx'),
                                                { graphOptimizationLevel: 'all',
                                                  intraOpNumThreads: 1, logSeverityLevel: 3 });
  } catch (e) {
    return `ORT refuses the model: ${String(e.message || e).split('\n')[0]}`;
  }
  const feeds = {};
  const inputs = indexed(data, 'input_');
  for (let k = 0; k < inputs.length; ++k) {
    let t;
    try {
      t = readTensorProto(inputs[k]);
    } catch (e) {
      return `input ${k}: ${e.message}`;
    }
    const name = session.inputNames.includes(t.name) ? t.name : session.inputNames[k];
    if (name === undefined) return `input_${k}.pb has no model input to bind to`;
    feeds[name] = new ort.Tensor(t.type, t.data, t.dims);
  }
  let results;
  try {
    results = await session.run(feeds);
  } catch (e) {
    return `ORT run fails: ${String(e.message || e).split('\n')[0]}`;
  }
  const outputs = indexed(data, 'output_');
  for (let k = 0; k < outputs.length; ++k) {
    let expected;
    try {
      expected = readTensorProto(outputs[k]);
    } catch (e) {
      return `output ${k}: ${e.message}`;
    }
    const name = session.outputNames[k];
    if (name === undefined || !results[name]) return `no output ${k}`;
    const why = compare(results[name], expected);
    if (why) return `output '${name}': ${why}`;
  }
  return '';
}

function listTests(suite, filter) {
  return fs.readdirSync(suite)
      .filter((t) => t.includes(filter) && fs.existsSync(path.join(suite, t, 'model.onnx')))
      .sort();
}

// Worker: runs tests[start..] and prints one TSV line per finished test.
async function worker(suite, filter, start) {
  const ort = loadOrt();
  const tests = listTests(suite, filter);
  for (let i = start; i < tests.length; ++i) {
    let why;
    try {
      why = await runTest(ort, path.join(suite, tests[i]));
    } catch (e) {
      why = `error: ${String(e.message || e).split('\n')[0]}`;
    }
    process.stdout.write(`${tests[i]}\t${why ? 'fail' : 'pass'}\t${why.replace(/[\t\n]/g, ' ')}\n`);
  }
}

function main() {
  const args = process.argv.slice(2);
  let filter = '';
  let tsv = '';
  const positional = [];
  for (let i = 0; i < args.length; ++i) {
    if (args[i] === '--filter') filter = args[++i] || '';
    else if (args[i] === '--tsv') tsv = args[++i] || '';
    else positional.push(args[i]);
  }
  if (positional[0] === '--worker') {
    worker(positional[1], filter, Number(positional[2])).catch((e) => {
      console.error(`ort_conformance: ${e.message || e}`);
      process.exit(3);
    });
    return;
  }
  if (positional.length !== 1) {
    console.error('usage: node tests/ort_conformance.js SUITE_DIR [--filter SUBSTR] [--tsv FILE]');
    process.exit(2);
  }
  const suite = positional[0];
  loadOrt();  // exits 77 when missing
  const tests = listTests(suite, filter);
  const lines = [];
  while (lines.length < tests.length) {
    const r = childProcess.spawnSync(process.execPath,
        [__filename, '--filter', filter, '--worker', suite, String(lines.length)],
        { encoding: 'utf8', maxBuffer: 1 << 28, stdio: ['ignore', 'pipe', 'ignore'] });
    const done = r.stdout.split('\n').filter((l) => l.length);
    lines.push(...done);
    if (lines.length < tests.length && (r.status !== 0 || done.length === 0)) {
      lines.push(`${tests[lines.length]}\tfail\tORT crashed the process (${
          r.signal || 'exit ' + r.status}), e.g. out of memory`);
    }
  }
  const passed = lines.filter((l) => l.split('\t')[1] === 'pass').length;
  if (tsv) fs.writeFileSync(tsv, lines.join('\n') + '\n');
  const version = require(require.resolve('onnxruntime-node/package.json',
      { paths: [process.env.FUSECTL_ORT_DIR || process.cwd()] })).version;
  console.log(`onnxruntime-node ${version}: ${passed} passed of ${tests.length} (${
      (100 * passed / Math.max(1, tests.length)).toFixed(1)}%)`);
}

main();
