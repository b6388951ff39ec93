#!/usr/bin/env node
// Runs an ONNX model with onnxruntime-node and writes its outputs as .npy: the reference side
// of the ORT differential test (tests/test_executor.cpp, "[ort]"; CTest `ort_differential`).
//
//   node tests/ort_reference.js MODEL OUT_DIR [NAME=FILE]...
//
// FILE is .npy (C order, little-endian) or a serialized onnx.TensorProto (.pb). Every graph input
// must be given. Outputs go to OUT_DIR/<name>.npy with the name sanitized as `fusectl run`
// does ([A-Za-z0-9._-] kept, others '_'). onnxruntime-node is looked up in $FUSECTL_ORT_DIR
// (a folder holding node_modules/, see scripts/install-ort.sh), then on the normal module path.
// Exit codes: 0 ok, 2 usage, 3 bad input or ORT failure, 77 onnxruntime-node not installed.
'use strict';

const fs = require('fs');
const path = require('path');

function loadOrt() {
  const dirs = [];
  if (process.env.FUSECTL_ORT_DIR) dirs.push(process.env.FUSECTL_ORT_DIR);
  dirs.push(process.cwd());
  try {
    return require(require.resolve('onnxruntime-node', { paths: dirs }));
  } catch (e) {
    console.error(`ort_reference: onnxruntime-node not found (FUSECTL_ORT_DIR=${
        process.env.FUSECTL_ORT_DIR || ''}); run scripts/install-ort.sh: ${e.message}`);
    process.exit(77);
  }
}

// ---- .npy ----

const NPY_TYPES = {
  f4: 'float32', f2: 'float16', f8: 'float64', i1: 'int8', u1: 'uint8', i2: 'int16',
  u2: 'uint16', i4: 'int32', u4: 'uint32', i8: 'int64', u8: 'uint64', b1: 'bool',
};
const ARRAYS = {
  float32: Float32Array, float64: Float64Array, int8: Int8Array, uint8: Uint8Array,
  int16: Int16Array, uint16: Uint16Array, int32: Int32Array, uint32: Uint32Array,
  int64: BigInt64Array, uint64: BigUint64Array, bool: Uint8Array, float16: Uint16Array,
};

function typedArray(type, bytes) {
  const Ctor = ARRAYS[type];
  const copy = new Uint8Array(bytes.length);  // copy: aligned offset 0
  copy.set(bytes);
  return new Ctor(copy.buffer, 0, bytes.length / Ctor.BYTES_PER_ELEMENT);
}

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.slice(0, 6).toString('latin1') !== '\x93NUMPY') throw new Error(`${file}: not .npy`);
  const major = buf[6];
  const hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8);
  const start = major === 1 ? 10 : 12;
  const header = buf.slice(start, start + hlen).toString('latin1');
  const descr = /'descr':\s*'([<>|=])(\w\d)'/.exec(header);
  if (!descr || !(descr[2] in NPY_TYPES) || descr[1] === '>') {
    throw new Error(`${file}: unsupported dtype in ${header.trim()}`);
  }
  if (/'fortran_order':\s*True/.test(header)) throw new Error(`${file}: Fortran order`);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1]
      .split(',').map((s) => s.trim()).filter((s) => s.length).map((s) => parseInt(s, 10));
  const type = NPY_TYPES[descr[2]];
  return { type, dims: shape, data: typedArray(type, buf.slice(start + hlen)) };
}

function writeNpy(file, type, dims, data) {
  const descr = Object.keys(NPY_TYPES).find((k) => NPY_TYPES[k] === type);
  if (!descr) throw new Error(`cannot write ${type} as .npy`);
  const order = ['i1', 'u1', 'b1'].includes(descr) ? '|' : '<';
  const shape = dims.length === 1 ? `(${dims[0]},)` : `(${dims.join(', ')})`;
  let header = `{'descr': '${order}${descr}', 'fortran_order': False, 'shape': ${shape}, }`;
  header += ' '.repeat((64 - ((10 + header.length + 1) % 64)) % 64) + '\n';
  const pre = Buffer.alloc(10);
  Buffer.from('\x93NUMPY', 'latin1').copy(pre);
  pre[6] = 1;
  pre[7] = 0;
  pre.writeUInt16LE(header.length, 8);
  let bytes;
  if (type === 'bool') bytes = Buffer.from(Uint8Array.from(data, (v) => (v ? 1 : 0)));
  else bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  fs.writeFileSync(file, Buffer.concat([pre, Buffer.from(header, 'latin1'), bytes]));
}

// ---- onnx.TensorProto (just the fields tensors use) ----

const ONNX_TYPES = {
  1: 'float32', 2: 'uint8', 3: 'int8', 4: 'uint16', 5: 'int16', 6: 'int32', 7: 'int64',
  9: 'bool', 10: 'float16', 11: 'float64', 12: 'uint32', 13: 'uint64',
};

function readTensorProto(file) {
  const buf = fs.readFileSync(file);
  let pos = 0;
  const varint = () => {
    let result = 0n;
    let shift = 0n;
    for (;;) {
      const b = buf[pos++];
      result |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) return result;
      shift += 7n;
    }
  };
  const t = { dims: [], dataType: 0, raw: null, floats: [], int32s: [], int64s: [], doubles: [],
              uint64s: [], name: '' };
  const packedOrOne = (wire, read, into) => {
    if (wire === 2) {
      const end = pos + Number(varint());
      while (pos < end) into.push(read());
    } else {
      into.push(read());
    }
  };
  while (pos < buf.length) {
    const key = Number(varint());
    const field = key >> 3;
    const wire = key & 7;
    const f32 = () => { const v = buf.readFloatLE(pos); pos += 4; return v; };
    const f64 = () => { const v = buf.readDoubleLE(pos); pos += 8; return v; };
    if (field === 1) packedOrOne(wire, () => Number(BigInt.asIntN(64, varint())), t.dims);
    else if (field === 2) t.dataType = Number(varint());
    else if (field === 4) packedOrOne(wire, f32, t.floats);
    else if (field === 5) packedOrOne(wire, () => Number(BigInt.asIntN(32, varint())), t.int32s);
    else if (field === 7) packedOrOne(wire, () => BigInt.asIntN(64, varint()), t.int64s);
    else if (field === 10) packedOrOne(wire, f64, t.doubles);
    else if (field === 11) packedOrOne(wire, () => BigInt.asUintN(64, varint()), t.uint64s);
    else if (field === 8 || field === 9) {
      const len = Number(varint());
      const bytes = buf.slice(pos, pos + len);
      pos += len;
      if (field === 8) t.name = bytes.toString('utf8');
      else t.raw = bytes;
    } else if (wire === 0) varint();
    else if (wire === 1) pos += 8;
    else if (wire === 5) pos += 4;
    else if (wire === 2) pos += Number(varint());
    else throw new Error(`${file}: unsupported protobuf wire type ${wire}`);
  }
  const type = ONNX_TYPES[t.dataType];
  if (!type) throw new Error(`${file}: unsupported TensorProto data_type ${t.dataType}`);
  let data;
  if (t.raw) data = typedArray(type, t.raw);
  else if (type === 'float32') data = Float32Array.from(t.floats);
  else if (type === 'float64') data = Float64Array.from(t.doubles);
  else if (type === 'int64') data = BigInt64Array.from(t.int64s);
  else if (type === 'uint64') data = BigUint64Array.from(t.uint64s);
  else if (type === 'uint32') data = Uint32Array.from(t.uint64s.map(Number));
  else data = ARRAYS[type].from(t.int32s);  // int32, int16, int8, uint16, uint8, bool, float16
  return { type, dims: t.dims, data, name: t.name };
}

function sanitize(name, used) {
  let s = name.replace(/[^A-Za-z0-9._-]/g, '_');
  if (s.length === 0 || /^\.+$/.test(s)) s = 'output' + s;
  if (s.length > 200) s = s.slice(0, 200);
  let candidate = s;
  for (let k = 1; used.has(candidate); ++k) candidate = `${s}_${k}`;
  used.add(candidate);
  return candidate;
}

// Runs `model` on the inputs NAME=FILE of `specs` and writes its outputs to outDir; returns
// the files written. Throws on a bad spec or an ORT failure.
async function runModel(ort, model, outDir, specs) {
  const feeds = {};
  for (const spec of specs) {
    const eq = spec.lastIndexOf('=');
    if (eq <= 0) throw new Error(`input '${spec}' is not NAME=FILE`);
    const file = spec.slice(eq + 1);
    const t = file.endsWith('.npy') ? readNpy(file) : readTensorProto(file);
    feeds[spec.slice(0, eq)] = new ort.Tensor(t.type, t.data, t.dims);
  }
  const options = { graphOptimizationLevel: 'disabled', intraOpNumThreads: 1 };
  const session = await ort.InferenceSession.create(model, options);
  const results = await session.run(feeds);
  fs.mkdirSync(outDir, { recursive: true });
  const used = new Set();
  const written = [];
  for (const name of session.outputNames) {
    const t = results[name];
    const file = path.join(outDir, sanitize(name, used) + '.npy');
    writeNpy(file, t.type, t.dims, t.data);
    written.push(`${file} (${t.type}[${t.dims.join(',')}])`);
  }
  return written;
}

async function main() {
  const args = process.argv.slice(2);
  if (args.length < 2) {
    console.error('usage: node ort_reference.js MODEL OUT_DIR [NAME=FILE]...');
    process.exit(2);
  }
  const [model, outDir, ...specs] = args;
  if (specs.some((spec) => spec.lastIndexOf('=') <= 0)) {
    console.error(`ort_reference: an input is not NAME=FILE: ${specs.join(' ')}`);
    process.exit(2);
  }
  const ort = loadOrt();
  for (const file of await runModel(ort, model, outDir, specs)) console.log(`wrote ${file}`);
}

module.exports = { loadOrt, readNpy, writeNpy, readTensorProto, runModel };

if (require.main === module) {
  main().catch((e) => {
    console.error(`ort_reference: ${e.message || e}`);
    process.exit(3);
  });
}
