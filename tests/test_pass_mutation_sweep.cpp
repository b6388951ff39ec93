// Every golden pass case (testdata/passes), changed in one field at a time, must optimize to a
// model that computes what the changed original computes, or be refused with an Error.
//
// The golden cases are the graphs each pass was written against, with its negative cases beside
// them: a constant that is not quite GELU's, a Sub with its operands the other way round, an
// intermediate value that a second consumer reads. Each near-miss that a pass author thought of
// is one case; this test makes the ones nobody wrote down. Each case is changed one field at a
// time (a constant scaled by 1.001 or negated, an integer off by one, an attribute moved, two
// operands swapped, an op replaced by its sibling, an intermediate value made an output, an
// input's dims changed), optimized at -O3 and by the case's own pipeline, and both the original
// and the optimized model run on the same seeded inputs (sweep_harness.h). A pass whose legality
// check misses what the change broke rewrites the graph into one that computes something else,
// and the outputs differ: a finding, named by the case and the change.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <onnx/defs/tensor_proto_util.h>
#include <onnx/onnx_pb.h>

#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/npy.h"
#include "golden_cases.h"
#include "shell_util.h"
#include "sweep_harness.h"
#include "test_files.h"

namespace fs = std::filesystem;

namespace {

using fusectl::sweep::intsOf;
using fusectl::sweep::setInts;

// The cases of one golden file, named "<pass dir>/<file>" (relative to testdata/passes).
std::vector<golden::Case> casesOf(const fs::path& file) {
  return golden::parseFile(fs::relative(file, golden::goldenRoot()).string(),
                           fusectl::testing::slurp(file));
}

std::string labelOf(const golden::Case& c) { return fmt::format("{}: {}", c.file, c.name); }

// The case's model as a ModelProto for the mutations (shapes as written, none inferred).
onnx::ModelProto protoOf(const golden::Case& c) {
  fusectl::LoadOptions load;
  load.infer_shapes = false;
  onnx::ModelProto base;
  REQUIRE(base.ParseFromString(
      fusectl::modelToBinary(*fusectl::parseModelText(c.text, labelOf(c), load))));
  return base;
}

// x + delta and -x as two's complement wraps them: a Slice's open end (INT64_MAX) plus one is
// INT64_MIN, a hostile value of its own, where the signed sum would be undefined behaviour in
// this test.
int64_t wrapped(int64_t x, int64_t delta) {
  return static_cast<int64_t>(static_cast<uint64_t>(x) + static_cast<uint64_t>(delta));
}
int64_t negated(int64_t x) { return static_cast<int64_t>(uint64_t{0} - static_cast<uint64_t>(x)); }

using Mutation = std::function<void(onnx::ModelProto&)>;

struct LabelledMutation {
  std::string label;
  Mutation apply;
  // Dims the changed model's inputs run at, by name (over the case's own SHAPE lines).
  std::vector<std::pair<std::string, fusectl::Shape>> run_shapes = {};
};

// A tensor of the main graph the mutations change: an initializer, or a Constant node's value.
struct TensorSite {
  std::string who;
  std::function<onnx::TensorProto&(onnx::ModelProto&)> get;
};

std::vector<TensorSite> tensorSites(const onnx::ModelProto& base) {
  std::vector<TensorSite> sites;
  for (int i = 0; i < base.graph().initializer_size(); ++i)
    sites.push_back({fmt::format("initializer '{}'", base.graph().initializer(i).name()),
                     [i](onnx::ModelProto& m) -> onnx::TensorProto& {
                       return *m.mutable_graph()->mutable_initializer(i);
                     }});
  for (int n = 0; n < base.graph().node_size(); ++n) {
    const auto& node = base.graph().node(n);
    if (node.op_type() != "Constant") continue;
    for (int a = 0; a < node.attribute_size(); ++a)
      if (node.attribute(a).name() == "value" && node.attribute(a).has_t())
        sites.push_back({fmt::format("Constant '{}'", node.output(0)),
                         [n, a](onnx::ModelProto& m) -> onnx::TensorProto& {
                           return *m.mutable_graph()->mutable_node(n)->mutable_attribute(a)
                                       ->mutable_t();
                         }});
  }
  return sites;
}

int64_t elementCount(const onnx::TensorProto& t) {
  int64_t n = 1;
  for (int64_t d : t.dims()) n *= d;
  return n;
}

void setFloats(onnx::TensorProto& t, const std::vector<float>& v) {
  t.clear_raw_data();
  t.clear_float_data();
  for (float x : v) t.add_float_data(x);
}

// Float constants: scaled by 1.001 (a near-miss of an exact constant: GELU's 0.5 and sqrt(2),
// HardSigmoid's 1/6, an epsilon), negated, one element moved (no longer uniform), or a vector
// made the scalar of its first value (a different broadcast). Integer constants (axes, shapes,
// perms, pads): one element off by one either way, negated, or the order reversed.
void tensorMutations(const onnx::ModelProto& base, int64_t max_float_elements,
                     std::vector<LabelledMutation>& out) {
  for (const TensorSite& site : tensorSites(base)) {
    onnx::ModelProto copy = base;
    const onnx::TensorProto& t = site.get(copy);
    const int64_t n = elementCount(t);
    auto add = [&](const std::string& what, std::function<void(onnx::TensorProto&)> fn) {
      out.push_back({site.who + ": " + what, [get = site.get, fn](onnx::ModelProto& m) {
                       fn(get(m));
                     }});
    };
    if (t.data_type() == onnx::TensorProto::FLOAT && n > 0 && n <= max_float_elements) {
      auto map = [](std::function<float(float)> f) {
        return [f](onnx::TensorProto& p) {
          std::vector<float> v = onnx::ParseData<float>(&p);
          for (float& x : v) x = f(x);
          setFloats(p, v);
        };
      };
      add("scaled by 1.001", map([](float x) { return x * 1.001f; }));
      add("negated", map([](float x) { return -x; }));
      add("plus 1", map([](float x) { return x + 1.0f; }));
      // Another broadcast of the same values: [8] as [8, 1] broadcasts down the other axis.
      if (t.dims_size() >= 1)
        add("a 1 appended to its dims", [](onnx::TensorProto& p) { p.add_dims(1); });
      if (n > 1) {
        add("first element plus 1", [](onnx::TensorProto& p) {
          std::vector<float> v = onnx::ParseData<float>(&p);
          v[0] += 1.0f;
          setFloats(p, v);
        });
        if (n <= 64)
          add("the scalar of its first element", [](onnx::TensorProto& p) {
            std::vector<float> v = onnx::ParseData<float>(&p);
            p.clear_dims();
            setFloats(p, {v[0]});
          });
      }
    } else if ((t.data_type() == onnx::TensorProto::INT64 ||
                t.data_type() == onnx::TensorProto::INT32) &&
               n > 0 && n <= 64) {
      const std::vector<int64_t> values = intsOf(t);
      for (int64_t i = 0; i < std::min<int64_t>(n, 6); ++i) {
        for (int64_t delta : {int64_t{1}, int64_t{-1}})
          add(fmt::format("element {} {:+}", i, delta), [i, delta](onnx::TensorProto& p) {
            std::vector<int64_t> v = intsOf(p);
            v[static_cast<size_t>(i)] = wrapped(v[static_cast<size_t>(i)], delta);
            setInts(p, v);
          });
        if (values[static_cast<size_t>(i)] != 0)
          add(fmt::format("element {} negated", i), [i](onnx::TensorProto& p) {
            std::vector<int64_t> v = intsOf(p);
            v[static_cast<size_t>(i)] = negated(v[static_cast<size_t>(i)]);
            setInts(p, v);
          });
      }
      if (n > 1)
        add("reversed", [](onnx::TensorProto& p) {
          std::vector<int64_t> v = intsOf(p);
          std::reverse(v.begin(), v.end());
          setInts(p, v);
        });
    }
  }
}

// Attributes moved a step: an int by one either way (a flag flipped), a list element by one, a
// list reversed or shortened, a float scaled by 1.001 or negated.
void attributeMutations(const onnx::ModelProto& base, std::vector<LabelledMutation>& out) {
  for (int n = 0; n < base.graph().node_size(); ++n) {
    const auto& node = base.graph().node(n);
    for (int a = 0; a < node.attribute_size(); ++a) {
      const auto& attr = node.attribute(a);
      const std::string who =
          fmt::format("{} '{}' attribute '{}'", node.op_type(),
                      node.output_size() > 0 ? node.output(0) : node.name(), attr.name());
      auto add = [&](const std::string& what, std::function<void(onnx::AttributeProto&)> fn) {
        out.push_back({who + ": " + what, [n, a, fn](onnx::ModelProto& m) {
                         fn(*m.mutable_graph()->mutable_node(n)->mutable_attribute(a));
                       }});
      };
      // Its default instead (Softmax's axis, Gemm's alpha, a Transpose's perm).
      out.push_back({who + ": removed", [n, a](onnx::ModelProto& m) {
                       auto* attrs = m.mutable_graph()->mutable_node(n)->mutable_attribute();
                       attrs->erase(attrs->begin() + a);
                     }});
      switch (attr.type()) {
        case onnx::AttributeProto::INT:
          add("plus 1", [](onnx::AttributeProto& p) { p.set_i(wrapped(p.i(), 1)); });
          add("minus 1", [](onnx::AttributeProto& p) { p.set_i(wrapped(p.i(), -1)); });
          if (attr.i() != 0)
            add("negated", [](onnx::AttributeProto& p) { p.set_i(negated(p.i())); });
          break;
        case onnx::AttributeProto::INTS:
          for (int i = 0; i < std::min(attr.ints_size(), 6); ++i) {
            add(fmt::format("element {} plus 1", i),
                [i](onnx::AttributeProto& p) { p.set_ints(i, wrapped(p.ints(i), 1)); });
            add(fmt::format("element {} minus 1", i),
                [i](onnx::AttributeProto& p) { p.set_ints(i, wrapped(p.ints(i), -1)); });
          }
          if (attr.ints_size() > 1) {
            add("reversed", [](onnx::AttributeProto& p) {
              std::reverse(p.mutable_ints()->begin(), p.mutable_ints()->end());
            });
            add("last element dropped",
                [](onnx::AttributeProto& p) { p.mutable_ints()->RemoveLast(); });
          }
          break;
        case onnx::AttributeProto::FLOAT:
          add("scaled by 1.001", [](onnx::AttributeProto& p) { p.set_f(p.f() * 1.001f); });
          add("negated", [](onnx::AttributeProto& p) { p.set_f(-p.f()); });
          add("plus 1", [](onnx::AttributeProto& p) { p.set_f(p.f() + 1.0f); });
          break;
        default:
          break;
      }
    }
  }
}

// Ops replaced by a sibling of the same arity, the change a pattern must see by op type.
const std::map<std::string, std::vector<std::string>>& siblings() {
  static const std::map<std::string, std::vector<std::string>> table = {
      {"Add", {"Sub", "Mul"}},
      {"Sub", {"Add"}},
      {"Mul", {"Add", "Div"}},
      {"Div", {"Mul", "Sub"}},
      {"MatMul", {"Add"}},
      {"ReduceMean", {"ReduceSum", "ReduceMax"}},
      {"ReduceSum", {"ReduceMean"}},
      {"Sqrt", {"Abs", "Reciprocal"}},
      {"Reciprocal", {"Sqrt"}},
      {"Sigmoid", {"Tanh", "HardSigmoid"}},
      {"Tanh", {"Sigmoid"}},
      {"Erf", {"Tanh"}},
      {"Relu", {"Sigmoid", "Abs"}},
      {"Neg", {"Abs"}},
      {"Softmax", {"LogSoftmax"}},
      {"Max", {"Min"}},
      {"Min", {"Max"}},
      // Pow is left out: Pow(d, 2) made Mul(d, 2) turns a variance into the mean of d, zero up
      // to rounding, and the norm divides by it: any reordering then moves every output.
      {"Exp", {"Log"}},
      {"Where", {}},
  };
  return table;
}

void structureMutations(const onnx::ModelProto& base, std::vector<LabelledMutation>& out) {
  const auto& g = base.graph();
  // The same nodes under another opset: Softmax before 13 flattens from its axis, ReduceMean
  // takes its axes as an input from 18, LayerNormalization exists from 17.
  for (int i = 0; i < base.opset_import_size(); ++i) {
    if (!base.opset_import(i).domain().empty()) continue;
    for (int64_t version : {11, 12, 13, 17, 18}) {
      if (version == base.opset_import(i).version()) continue;
      out.push_back({fmt::format("opset {}", version), [i, version](onnx::ModelProto& m) {
                       m.mutable_opset_import(i)->set_version(version);
                     }});
    }
  }
  std::vector<std::string> outputs;
  for (const auto& o : g.output()) outputs.push_back(o.name());
  for (int n = 0; n < g.node_size(); ++n) {
    const auto& node = g.node(n);
    const std::string who =
        fmt::format("{} '{}'", node.op_type(), node.output_size() > 0 ? node.output(0) : "");
    if (node.input_size() >= 2 && !node.input(0).empty() && !node.input(1).empty() &&
        node.input(0) != node.input(1))
      out.push_back({who + ": first two inputs swapped", [n](onnx::ModelProto& m) {
                       auto* node = m.mutable_graph()->mutable_node(n);
                       std::string first = node->input(0);
                       node->set_input(0, node->input(1));
                       node->set_input(1, first);
                     }});
    if (auto it = siblings().find(node.op_type()); it != siblings().end() && node.domain().empty())
      for (const std::string& other : it->second)
        out.push_back({fmt::format("{}: made {}", who, other), [n, other](onnx::ModelProto& m) {
                         m.mutable_graph()->mutable_node(n)->set_op_type(other);
                       }});
    // A second reader of an intermediate value: a fusion that swallows it must keep it.
    for (const std::string& value : node.output()) {
      if (value.empty() || std::find(outputs.begin(), outputs.end(), value) != outputs.end())
        continue;
      out.push_back({fmt::format("'{}' also a graph output", value),
                     [value](onnx::ModelProto& m) {
                       m.mutable_graph()->add_output()->set_name(value);
                     }});
    }
  }
  for (int i = 0; i < g.input_size(); ++i) {
    const auto& type = g.input(i).type();
    if (!type.has_tensor_type() || !type.tensor_type().has_shape()) continue;
    const int rank = type.tensor_type().shape().dim_size();
    if (rank == 0) continue;
    const std::string who = fmt::format("input '{}'", g.input(i).name());
    auto dims = [i](onnx::ModelProto& m) {
      return m.mutable_graph()->mutable_input(i)->mutable_type()->mutable_tensor_type()
          ->mutable_shape()->mutable_dim();
    };
    out.push_back({who + ": last dim 1", [dims, rank](onnx::ModelProto& m) {
                     dims(m)->Mutable(rank - 1)->set_dim_value(1);
                   }});
    if (type.tensor_type().shape().dim(0).has_dim_value())
      out.push_back({who + ": first dim plus 1", [dims](onnx::ModelProto& m) {
                       auto* d = dims(m)->Mutable(0);
                       d->set_dim_value(d->dim_value() + 1);
                     }});
    // The same sizes at run time, but none known to the optimizer: a pass must then prove
    // what it assumed from the static dims, or not fire.
    std::vector<int64_t> static_dims;
    for (const auto& d : type.tensor_type().shape().dim())
      if (d.has_dim_value()) static_dims.push_back(d.dim_value());
    if (static_cast<int>(static_dims.size()) == rank) {
      const std::string name = g.input(i).name();
      out.push_back({who + ": every dim symbolic, run at its static dims",
                     [dims, name](onnx::ModelProto& m) {
                       int k = 0;
                       for (auto& d : *dims(m)) d.set_dim_param(fmt::format("{}_d{}", name, k++));
                     },
                     {{name, fusectl::Shape::ofStatic(static_dims)}}});
    }
  }
}

// The pipelines a case is optimized by: -O3, and the case's own RUN line when it is another
// (a level written "-ON" runs as that level) that fusectl's executor can run the output of:
// emit-ort writes com.microsoft ops, which only ONNX Runtime runs (test_ort_optimize.cpp).
std::vector<std::pair<std::string, std::string>> pipelinesFor(const golden::Case& c) {
  std::vector<std::pair<std::string, std::string>> out = {{"-O3", ""}};
  if (!c.pipeline.empty() && c.pipeline != "-O3" &&
      c.pipeline.find("emit-ort") == std::string::npos)
    out.push_back({c.pipeline, c.pipeline});
  return out;
}

// `base` as it is and changed one field at a time, each optimized by each of `pipelines`
// (label, pipeline text); with `keep_every` > 1, only every such mutation (the first, the
// keep_every + 1st...) is kept.
void addCases(const onnx::ModelProto& base, const std::string& label,
              const std::vector<std::pair<std::string, std::string>>& pipelines,
              int64_t max_float_elements, size_t keep_every, bool loose,
              const std::vector<std::pair<std::string, fusectl::Shape>>& shapes,
              std::vector<fusectl::sweep::SweepCase>& cases) {
  std::vector<LabelledMutation> mutations = {{"as written", [](onnx::ModelProto&) {}}};
  tensorMutations(base, max_float_elements, mutations);
  attributeMutations(base, mutations);
  structureMutations(base, mutations);
  auto shared = std::make_shared<const onnx::ModelProto>(base);
  for (size_t i = 0; i < mutations.size(); i += keep_every) {
    for (const std::pair<std::string, std::string>& pipeline : pipelines) {
      fusectl::sweep::SweepCase c;
      c.label = fmt::format("{} ({}) [{}]", label, mutations[i].label, pipeline.first);
      c.passes = pipeline.second;
      c.loose = loose;
      c.shapes = shapes;
      for (const std::pair<std::string, fusectl::Shape>& run : mutations[i].run_shapes) {
        auto same = std::find_if(c.shapes.begin(), c.shapes.end(),
                                 [&](const auto& s) { return s.first == run.first; });
        if (same != c.shapes.end()) same->second = run.second;
        else c.shapes.push_back(run);
      }
      c.build = [shared, apply = mutations[i].apply] {
        onnx::ModelProto m = *shared;
        apply(m);
        return m.SerializeAsString();
      };
      cases.push_back(std::move(c));
    }
  }
}

// The golden files whose index is `part` modulo `parts`; CTest spreads the parts over the cores.
void sweepGoldenCases(size_t part, size_t parts) {
  const std::vector<fs::path> files = golden::goldenFiles();
  REQUIRE(files.size() >= 100);
  std::vector<fusectl::sweep::SweepCase> cases;
  size_t golden = 0;
  for (size_t i = part; i < files.size(); i += parts) {
    for (const golden::Case& c : casesOf(files[i])) {
      if (!c.numeric) continue;
      ++golden;
      addCases(protoOf(c), labelOf(c), pipelinesFor(c), 65536, 1, false, c.shapes, cases);
    }
  }
  CHECK(golden >= 100);
  fusectl::sweep::runAndCheck(fmt::format("golden pass cases, part {} of {}", part + 1, parts),
                              cases, 25);
}

}  // namespace

TEST_CASE("every golden pass case, changed in one field at a time, optimizes to a model that "
          "computes the same (1/4)",
          "[passes][executor][sweep]") {
  sweepGoldenCases(0, 4);
}
TEST_CASE("every golden pass case, changed in one field at a time, optimizes to a model that "
          "computes the same (2/4)",
          "[passes][executor][sweep]") {
  sweepGoldenCases(1, 4);
}
TEST_CASE("every golden pass case, changed in one field at a time, optimizes to a model that "
          "computes the same (3/4)",
          "[passes][executor][sweep]") {
  sweepGoldenCases(2, 4);
}
TEST_CASE("every golden pass case, changed in one field at a time, optimizes to a model that "
          "computes the same (4/4)",
          "[passes][executor][sweep]") {
  sweepGoldenCases(3, 4);
}

namespace {

// The transformer and CNN models of testdata/models, where the passes run on whole layers: the
// same changes, except to weights (only constants of at most 64 elements: epsilons, GELU's
// constants, shapes, axes), at -O3 only, and judged as sweep_harness.h's `loose` says (a change
// that zeroes a variance makes a layer ill-conditioned). The models whose index is `part`
// modulo `parts`.
void sweepTestdataModels(size_t part, size_t parts) {
  const fs::path root = fs::path(FUSECTL_SOURCE_DIR) / "testdata" / "models";
  std::vector<fs::path> files;
  for (const auto& entry : fs::recursive_directory_iterator(root))
    if (entry.path().extension() == ".onnx") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  REQUIRE(files.size() >= 10);
  std::vector<fusectl::sweep::SweepCase> cases;
  for (size_t i = part; i < files.size(); i += parts) {
    onnx::ModelProto base;
    REQUIRE(base.ParseFromString(fusectl::testing::slurp(files[i])));
    addCases(base, fs::relative(files[i], root).string(), {{"-O3", ""}}, 64, 1, true, {}, cases);
  }
  fusectl::sweep::runAndCheck(fmt::format("testdata models, part {} of {}", part + 1, parts),
                              cases, 25);
}

}  // namespace

TEST_CASE("every testdata model, changed in one field at a time, optimizes to a model that "
          "computes the same (1/2)",
          "[passes][executor][sweep]") {
  sweepTestdataModels(0, 2);
}
TEST_CASE("every testdata model, changed in one field at a time, optimizes to a model that "
          "computes the same (2/2)",
          "[passes][executor][sweep]") {
  sweepTestdataModels(1, 2);
}

namespace {

// The golden cases of the passes whose output `--emit ort` writes as ONNX Runtime's contrib ops
// (MultiHeadAttention, GroupQueryAttention, SkipLayerNormalization, RotaryEmbedding, FastGelu,
// BiasGelu, FusedMatMul, QuickGelu...): fusectl's executor cannot run those, so the emitted
// models of the sweeps above are not checked; ONNX Runtime runs them here.
const char* const kEmitOrtDirs[] = {
    "emit-ort",         "fuse-attention",        "fuse-gelu",
    "fuse-layer-norm",  "fuse-matmul-epilogue",  "fuse-rms-norm",
    "fuse-rotary",      "fuse-skip-norm",        "fuse-swiglu",
    "unpack-packed-attention", "merge-parallel-matmuls", "canonicalize"};

// Every `keep_every`-th change of those cases, as an original and its -O3 --emit ort model in
// `dir`/<n>/ with seeded inputs: the jobs of tests/ort_batch.js (one per model).
struct EmitOrtCase {
  std::string label;
  std::filesystem::path dir;
};

}  // namespace

TEST_CASE("every golden case of the transformer passes, changed in one field at a time, runs "
          "in ONNX Runtime after -O3 --emit ort as it did before",
          "[.][ort][sweep]") {
  const fusectl::test::OrtSetup ort = fusectl::test::findOrtSetup();
  if (!ort.found) {
    WARN(ort.skip_reason);
    return;
  }
  const fs::path work = fusectl::testing::processTempPath("fusectl_emit_ort_sweep");
  fs::remove_all(work);
  fs::create_directories(work);
  std::vector<fusectl::sweep::SweepCase> cases;
  for (const fs::path& file : golden::goldenFiles()) {
    const std::string dir = file.parent_path().filename().string();
    if (std::find(std::begin(kEmitOrtDirs), std::end(kEmitOrtDirs), dir) == std::end(kEmitOrtDirs))
      continue;
    for (const golden::Case& c : casesOf(file))
      addCases(protoOf(c), labelOf(c), {{"-O3 --emit ort", ""}}, 65536, 7, true, c.shapes, cases);
  }
  // Each case: both models and the inputs written, one ORT job each.
  std::vector<EmitOrtCase> written;
  std::string jobs;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string bytes = cases[i].modelBytes();
    std::unique_ptr<fusectl::Model> emitted;
    std::vector<fusectl::kernels::NamedTensor> inputs;
    try {
      emitted = fusectl::parseModelBinary(bytes, "sweep.onnx", "/nonexistent-sweep-dir", {});
      fusectl::passes::OptimizeRequest request;
      request.level = 3;
      request.pass_manager.emit_ort = true;
      fusectl::passes::optimize(*emitted, request);
      fusectl::LoadOptions load;
      load.infer_shapes = false;
      auto original =
          fusectl::parseModelBinary(bytes, "sweep.onnx", "/nonexistent-sweep-dir", load);
      inputs = fusectl::kernels::makeRandomInputs(*original->graph, 1, cases[i].shapes);
    } catch (const fusectl::Error&) {
      continue;  // refused by fusectl: the other sweeps hold what that may be
    }
    const fs::path dir = work / std::to_string(i);
    fs::create_directories(dir / "in");
    fusectl::testing::writeFile(dir / "original.onnx", bytes);
    fusectl::testing::writeFile(dir / "emitted.onnx", fusectl::modelToBinary(*emitted));
    std::string specs;
    try {
      for (size_t k = 0; k < inputs.size(); ++k) {
        const fs::path npy = dir / "in" / fmt::format("{}.npy", k);
        fusectl::kernels::writeNpy(inputs[k].tensor, npy.string());
        specs += fmt::format("\t{}={}", inputs[k].name, npy.string());
      }
    } catch (const fusectl::Error&) {
      continue;  // bfloat16 and the narrow types have no .npy dtype
    }
    jobs += fmt::format("{}\t{}{}\n", (dir / "original.onnx").string(), (dir / "a").string(),
                        specs);
    jobs += fmt::format("{}\t{}{}\n", (dir / "emitted.onnx").string(), (dir / "b").string(), specs);
    written.push_back({cases[i].label, dir});
  }
  fusectl::testing::writeFile(work / "jobs.tsv", jobs);
  const std::string cmd =
      "FUSECTL_ORT_DIR=" + fusectl::test::shellQuote(ort.dir) + " " +
      fusectl::test::shellQuote(ort.node) + " " +
      fusectl::test::shellQuote(std::string(FUSECTL_SOURCE_DIR) + "/tests/ort_batch.js") + " " +
      fusectl::test::shellQuote((work / "jobs.tsv").string()) + " > " +
      fusectl::test::shellQuote((work / "ort.log").string()) + " 2>&1";
  INFO(cmd);
  REQUIRE(std::system(cmd.c_str()) == 0);
  // Outputs of one side, by file stem (the name as ort_batch.js sanitized it).
  auto outputsIn = [](const fs::path& dir) {
    std::vector<fusectl::kernels::NamedTensor> out;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".npy") files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files)
      out.push_back({f.stem().string(), fusectl::kernels::readNpy(f.string())});
    return out;
  };
  std::vector<std::string> failures;
  size_t ran = 0;
  for (const EmitOrtCase& c : written) {
    if (fs::exists(c.dir / "a" / "error.txt")) continue;  // ORT does not run the original
    if (fs::exists(c.dir / "b" / "error.txt")) {
      failures.push_back(fmt::format("{}: ONNX Runtime refuses the emitted model: {}", c.label,
                                     fusectl::testing::slurp(c.dir / "b" / "error.txt")));
      continue;
    }
    ++ran;
    const std::string differs =
        fusectl::sweep::outputsDiffer(outputsIn(c.dir / "a"), outputsIn(c.dir / "b"), true);
    if (!differs.empty()) failures.push_back(fmt::format("{}: {}", c.label, differs));
  }
  printf("emit-ort sweep: %zu models, %zu written, %zu ran in ONNX Runtime, %zu failed\n",
         cases.size(), written.size(), ran, failures.size());
  for (const std::string& f : failures) UNSCOPED_INFO(f);
  CHECK(failures.empty());
  CHECK(ran * 4 >= written.size());
  if (failures.empty()) fs::remove_all(work);
}
