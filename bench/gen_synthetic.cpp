// gen_synthetic: write a large synthetic ONNX model for optimizer benchmarks.
//
//   gen_synthetic --nodes N --out FILE.onnx [--channels C] [--seed S]
//                 [--external-data | --no-external-data]
//
// The graph is a chain of residual blocks
//
//   x -> Conv(3x3, pads 1) -> BatchNormalization -> Relu -> Add(., x) -> ...
//
// on an input "input" float[1, C, 16, 16] (output "output", same shape),
// opset 13, ir_version 8. Exactly N nodes are emitted (the last block may be
// partial). Each full block has 6 initializers (conv W [C,C,3,3], conv B [C], BN
// scale/bias/mean/var [C]) stored as raw_data, filled from a deterministic
// LCG, so equal arguments give byte-identical files.
//
// A ModelProto cannot be serialized beyond 2 GiB. If the estimated size is
// above ~1.8 GB (or --external-data is given), all weights go to
// FILE.onnx.data and the initializers use ONNX external data
// (data_location = EXTERNAL, external_data: location/offset/length, with
// offsets aligned to 64 bytes).
//
// Build standalone:
//   g++ -O2 -std=c++17 -DONNX_NAMESPACE=onnx -DONNX_ML=1 gen_synthetic.cpp
//       -o gen_synthetic -lonnx_proto -lprotobuf     (one command line)

#include <onnx/onnx_pb.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {

using onnx::AttributeProto;
using onnx::GraphProto;
using onnx::ModelProto;
using onnx::NodeProto;
using onnx::TensorProto;

struct Options {
  int64_t nodes = -1;
  int64_t channels = 8;
  uint32_t seed = 12345;
  std::string out;
  int external = -1;  // -1 auto, 0 never, 1 always
};

[[noreturn]] void usage(const char* msg) {
  if (msg) std::fprintf(stderr, "gen_synthetic: %s\n", msg);
  std::fprintf(stderr,
               "usage: gen_synthetic --nodes N --out FILE.onnx [--channels C] [--seed S]\n"
               "                     [--external-data | --no-external-data]\n");
  std::exit(2);
}

int64_t parse_int(const char* flag, const char* s, int64_t min) {
  char* end = nullptr;
  long long v = std::strtoll(s, &end, 10);
  if (end == s || *end != '\0' || v < min) {
    std::fprintf(stderr, "gen_synthetic: bad value for %s: '%s'\n", flag, s);
    std::exit(2);
  }
  return v;
}

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(("missing value for " + a).c_str());
      return argv[++i];
    };
    if (a == "--nodes") o.nodes = parse_int("--nodes", value(), 1);
    else if (a == "--out") o.out = value();
    else if (a == "--channels") o.channels = parse_int("--channels", value(), 1);
    else if (a == "--seed") o.seed = static_cast<uint32_t>(parse_int("--seed", value(), 0));
    else if (a == "--external-data") o.external = 1;
    else if (a == "--no-external-data") o.external = 0;
    else if (a == "-h" || a == "--help") usage(nullptr);
    else usage(("unknown argument " + a).c_str());
  }
  if (o.nodes < 1) usage("--nodes is required");
  if (o.out.empty()) usage("--out is required");
  return o;
}

// Deterministic pseudo-random floats (Numerical Recipes LCG).
class Lcg {
 public:
  explicit Lcg(uint32_t seed) : s_(seed * 2654435761u + 1u) {}
  // uniform in [lo, hi)
  float uniform(float lo, float hi) {
    s_ = s_ * 1664525u + 1013904223u;
    return lo + (hi - lo) * static_cast<float>(s_ >> 8) * (1.0f / 16777216.0f);
  }

 private:
  uint32_t s_;
};

// Where the weights of one tensor go: either the TensorProto's raw_data or
// the external data file.
class WeightSink {
 public:
  WeightSink(bool external, const std::string& data_path, const std::string& location)
      : external_(external), location_(location) {
    if (external_) {
      file_.open(data_path, std::ios::binary | std::ios::trunc);
      if (!file_) {
        std::fprintf(stderr, "gen_synthetic: cannot open %s\n", data_path.c_str());
        std::exit(1);
      }
    }
  }

  void put(TensorProto* t, const std::vector<float>& v) {
    const size_t bytes = v.size() * sizeof(float);
    if (!external_) {
      t->set_raw_data(v.data(), bytes);  // host is little-endian (x86/arm64)
      return;
    }
    static const char zeros[64] = {};
    const uint64_t pad = (64 - offset_ % 64) % 64;
    file_.write(zeros, static_cast<std::streamsize>(pad));
    offset_ += pad;
    file_.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(bytes));
    t->set_data_location(TensorProto::EXTERNAL);
    add_kv(t, "location", location_);
    add_kv(t, "offset", std::to_string(offset_));
    add_kv(t, "length", std::to_string(bytes));
    offset_ += bytes;
  }

  bool finish() {
    if (!external_) return true;
    file_.close();
    return static_cast<bool>(file_);
  }

  uint64_t bytes_written() const { return offset_; }

 private:
  static void add_kv(TensorProto* t, const char* k, const std::string& v) {
    auto* e = t->add_external_data();
    e->set_key(k);
    e->set_value(v);
  }

  bool external_;
  std::string location_;
  std::ofstream file_;
  uint64_t offset_ = 0;
};

void set_tensor_type(onnx::ValueInfoProto* vi, const std::string& name, int64_t c) {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(TensorProto::FLOAT);
  auto* shape = tt->mutable_shape();
  for (int64_t d : {int64_t{1}, c, int64_t{16}, int64_t{16}}) shape->add_dim()->set_dim_value(d);
}

AttributeProto* add_attr(NodeProto* n, const char* name, AttributeProto::AttributeType type) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(type);
  return a;
}

void add_ints(NodeProto* n, const char* name, std::initializer_list<int64_t> vals) {
  auto* a = add_attr(n, name, AttributeProto::INTS);
  for (int64_t v : vals) a->add_ints(v);
}

TensorProto* add_init(GraphProto* g, const std::string& name, std::initializer_list<int64_t> dims) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  return t;
}

std::string basename_of(const std::string& p) {
  auto pos = p.find_last_of('/');
  return pos == std::string::npos ? p : p.substr(pos + 1);
}

}  // namespace

int main(int argc, char** argv) {
  GOOGLE_PROTOBUF_VERIFY_VERSION;
  const Options opt = parse_args(argc, argv);
  const auto t0 = std::chrono::steady_clock::now();

  const int64_t C = opt.channels;
  const int64_t nodes = opt.nodes;
  const int64_t blocks = (nodes + 3) / 4;

  // Size estimate: weights + per-tensor/per-node overhead (names, dims,
  // attributes). Only used to decide on external data.
  const double weight_bytes = static_cast<double>(blocks) * (C * C * 9 + 5 * C) * 4.0;
  const double est_bytes = weight_bytes + static_cast<double>(nodes) * 120.0 +
                           static_cast<double>(blocks) * 6 * 40.0;
  const bool external = opt.external == 1 || (opt.external == -1 && est_bytes > 1.8e9);
  const std::string data_path = opt.out + ".data";

  ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("fusectl-gen_synthetic");
  model.set_producer_version("1");
  model.set_doc_string("synthetic Conv-BN-Relu-Add chain, " + std::to_string(nodes) + " nodes");
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(13);

  GraphProto* g = model.mutable_graph();
  g->set_name("synthetic");
  set_tensor_type(g->add_input(), "input", C);
  set_tensor_type(g->add_output(), "output", C);
  g->mutable_node()->Reserve(static_cast<int>(nodes));
  g->mutable_initializer()->Reserve(static_cast<int>(blocks * 6));

  WeightSink sink(external, data_path, basename_of(data_path));
  Lcg rng(opt.seed);
  std::vector<float> w(static_cast<size_t>(C * C * 9));
  std::vector<float> v(static_cast<size_t>(C));
  const float wscale = 1.0f / std::sqrt(static_cast<float>(C * 9));

  std::string x = "input";  // block input
  int64_t emitted = 0;
  for (int64_t b = 0; b < blocks && emitted < nodes; ++b) {
    const std::string p = "b" + std::to_string(b) + "_";
    // initializers
    for (auto& f : w) f = rng.uniform(-wscale, wscale);
    sink.put(add_init(g, p + "conv_w", {C, C, 3, 3}), w);
    for (auto& f : v) f = rng.uniform(-0.1f, 0.1f);
    sink.put(add_init(g, p + "conv_b", {C}), v);
    if (nodes - emitted >= 2) {  // a truncated last block may have no BN
      for (auto& f : v) f = rng.uniform(0.5f, 1.5f);
      sink.put(add_init(g, p + "bn_scale", {C}), v);
      for (auto& f : v) f = rng.uniform(-0.2f, 0.2f);
      sink.put(add_init(g, p + "bn_bias", {C}), v);
      for (auto& f : v) f = rng.uniform(-0.5f, 0.5f);
      sink.put(add_init(g, p + "bn_mean", {C}), v);
      for (auto& f : v) f = rng.uniform(0.5f, 2.0f);
      sink.put(add_init(g, p + "bn_var", {C}), v);
    }

    const std::string conv = p + "conv", bn = p + "bn", relu = p + "relu", add = p + "add";
    auto out_name = [&](const std::string& n) {
      return emitted + 1 == nodes ? std::string("output") : n;
    };

    NodeProto* n = g->add_node();
    n->set_op_type("Conv");
    n->set_name(conv);
    n->add_input(x);
    n->add_input(p + "conv_w");
    n->add_input(p + "conv_b");
    n->add_output(out_name(conv));
    add_ints(n, "kernel_shape", {3, 3});
    add_ints(n, "pads", {1, 1, 1, 1});
    add_ints(n, "strides", {1, 1});
    if (++emitted == nodes) break;

    n = g->add_node();
    n->set_op_type("BatchNormalization");
    n->set_name(bn);
    n->add_input(conv);
    n->add_input(p + "bn_scale");
    n->add_input(p + "bn_bias");
    n->add_input(p + "bn_mean");
    n->add_input(p + "bn_var");
    n->add_output(out_name(bn));
    auto* eps = add_attr(n, "epsilon", AttributeProto::FLOAT);
    eps->set_f(1e-5f);
    if (++emitted == nodes) break;

    n = g->add_node();
    n->set_op_type("Relu");
    n->set_name(relu);
    n->add_input(bn);
    n->add_output(out_name(relu));
    if (++emitted == nodes) break;

    n = g->add_node();
    n->set_op_type("Add");
    n->set_name(add);
    n->add_input(relu);
    n->add_input(x);
    n->add_output(out_name(add));
    ++emitted;
    x = add;
  }

  if (!sink.finish()) {
    std::fprintf(stderr, "gen_synthetic: error writing %s\n", data_path.c_str());
    return 1;
  }

  const size_t size = model.ByteSizeLong();
  if (size > static_cast<size_t>(INT32_MAX)) {
    std::fprintf(stderr,
                 "gen_synthetic: model would be %zu bytes (> 2 GiB protobuf limit); "
                 "use --external-data\n",
                 size);
    return 1;
  }
  {
    std::ofstream os(opt.out, std::ios::binary | std::ios::trunc);
    if (!os || !model.SerializeToOstream(&os)) {
      std::fprintf(stderr, "gen_synthetic: error writing %s\n", opt.out.c_str());
      return 1;
    }
  }

  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: %lld nodes, %d initializers, %zu bytes", opt.out.c_str(),
              static_cast<long long>(emitted), g->initializer_size(), size);
  if (external)
    std::printf(" + %s (%llu bytes)", data_path.c_str(),
                static_cast<unsigned long long>(sink.bytes_written()));
  std::printf(", %.2f s\n", secs);
  return 0;
}
