// The ONNX project's node tests, each changed in one field at a time: a dim dropped or added,
// a dim of 0, an attribute out of range or missing, a shape-like input holding -1, 0 or 2^62.
// Every variant must load, optimize and run as the commands would, or be refused with an
// Error: never crash, hang, trip a sanitizer or throw anything else (sweep_harness.h).
//
// The fuzz targets reach such variants by chance, from the same models; this reaches each of
// them by construction, so that a kernel or shape rule that trusts a value a file controls is
// found whatever the fuzzer's luck. Integer inputs of a test (shapes, axes, indices, pads) are
// made initializers holding the test's own data, so that the kernels that read them are reached
// with meaningful values before the mutations make them hostile.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <onnx/defs/tensor_proto_util.h>
#include <onnx/onnx_pb.h>

#include "fusectl/graph/fused_ops.h"
#include "fusectl/graph/single_node.h"
#include "sweep_harness.h"
#include "test_files.h"

namespace fs = std::filesystem;

namespace {

using fusectl::sweep::intsOf;
using fusectl::sweep::setInts;

const std::string kFullSuiteDir =
    std::string(FUSECTL_SOURCE_DIR) + "/../shared/onnx-node-tests-full/node";

// Integer inputs up to this many elements become initializers: they are shapes, axes, indices
// and pads, which a seeded random input would only make an error.
constexpr int kMaxConstantElements = 4096;

// Integer inputs up to kMaxConstantElements, and float vectors of at most 8 (Resize's scales,
// Clip's bounds, Pad's value, a LayerNorm's epsilon-like scalars): values a kernel reads as
// parameters rather than as data.
bool isShapeLike(const onnx::TensorProto& t) {
  int64_t n = 1;
  for (int64_t d : t.dims())
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  if (t.data_type() == onnx::TensorProto::FLOAT) return t.dims_size() <= 1 && n <= 8;
  if (t.data_type() != onnx::TensorProto::INT64 && t.data_type() != onnx::TensorProto::INT32)
    return false;
  return n <= kMaxConstantElements;
}

// Sets every element of a float initializer to `value`.
void fillFloats(onnx::TensorProto& t, float value) {
  int64_t n = 1;
  for (int64_t d : t.dims()) n *= d;  // isShapeLike: at most 8
  t.clear_raw_data();
  t.clear_float_data();
  for (int64_t i = 0; i < n; ++i) t.add_float_data(value);
}

// The test's model with its shape-like inputs as initializers; false when it cannot be read.
bool baseModel(const fs::path& dir, onnx::ModelProto& model) {
  if (!model.ParseFromString(fusectl::testing::slurp(dir / "model.onnx"))) return false;
  auto* graph = model.mutable_graph();
  std::vector<std::string> initialized;
  for (const auto& init : graph->initializer()) initialized.push_back(init.name());
  size_t data_index = 0;
  for (int i = 0; i < graph->input_size();) {
    const std::string name = graph->input(i).name();
    if (std::find(initialized.begin(), initialized.end(), name) != initialized.end()) {
      ++i;
      continue;
    }
    fs::path pb = dir / "test_data_set_0" / fmt::format("input_{}.pb", data_index++);
    onnx::TensorProto t;
    if (fs::exists(pb) && t.ParseFromString(fusectl::testing::slurp(pb)) && isShapeLike(t)) {
      t.set_name(name);
      *graph->add_initializer() = t;
      graph->mutable_input()->erase(graph->mutable_input()->begin() + i);
      continue;
    }
    ++i;
  }
  return true;
}

using Mutation = std::function<void(onnx::ModelProto&)>;

struct LabelledMutation {
  std::string label;
  Mutation apply;
};

onnx::TensorShapeProto* shapeOf(onnx::ModelProto& m, int input) {
  auto* type = m.mutable_graph()->mutable_input(input)->mutable_type();
  return type->has_tensor_type() && type->tensor_type().has_shape()
             ? type->mutable_tensor_type()->mutable_shape()
             : nullptr;
}

void inputMutations(const onnx::ModelProto& base, std::vector<LabelledMutation>& out) {
  for (int i = 0; i < base.graph().input_size(); ++i) {
    const auto& type = base.graph().input(i).type();
    if (!type.has_tensor_type() || !type.tensor_type().has_shape()) continue;
    const std::string who = fmt::format("input '{}'", base.graph().input(i).name());
    const int rank = type.tensor_type().shape().dim_size();
    if (rank > 0) {
      out.push_back({who + ": last dim dropped", [i](onnx::ModelProto& m) {
                       shapeOf(m, i)->mutable_dim()->RemoveLast();
                     }});
      out.push_back({who + ": first dim 0", [i](onnx::ModelProto& m) {
                       shapeOf(m, i)->mutable_dim(0)->set_dim_value(0);
                     }});
      out.push_back({who + ": every dim 1", [i](onnx::ModelProto& m) {
                       for (auto& d : *shapeOf(m, i)->mutable_dim()) d.set_dim_value(1);
                     }});
      out.push_back({who + ": every dim unknown", [i](onnx::ModelProto& m) {
                       for (auto& d : *shapeOf(m, i)->mutable_dim()) d.Clear();
                     }});
      out.push_back({who + ": rank 0", [i](onnx::ModelProto& m) { shapeOf(m, i)->clear_dim(); }});
    }
    out.push_back({who + ": a dim of 3 appended", [i](onnx::ModelProto& m) {
                     shapeOf(m, i)->add_dim()->set_dim_value(3);
                   }});
  }
}

// Sets every element of an int32/int64 initializer from `value(old)`.
void mapInts(onnx::TensorProto& t, const std::function<int64_t(int64_t)>& value) {
  std::vector<int64_t> v = intsOf(t);
  for (int64_t& x : v) x = value(x);
  setInts(t, v);
}

onnx::TensorProto& initializerNamed(onnx::ModelProto& m, const std::string& name) {
  for (auto& t : *m.mutable_graph()->mutable_initializer())
    if (t.name() == name) return t;
  throw std::logic_error("no initializer " + name);
}

void initializerMutations(const onnx::ModelProto& base, std::vector<LabelledMutation>& out) {
  for (const auto& init : base.graph().initializer()) {
    const std::string name = init.name();
    const std::string who = fmt::format("initializer '{}'", name);
    if (init.data_type() == onnx::TensorProto::FLOAT) {
      if (!isShapeLike(init)) continue;  // weights: their values are data, not parameters
      constexpr float kInf = std::numeric_limits<float>::infinity();
      for (float v : {std::numeric_limits<float>::quiet_NaN(), kInf, -kInf, 0.0f, -1.0f, 1e30f}) {
        out.push_back({fmt::format("{}: every value {}", who, v), [name, v](onnx::ModelProto& m) {
                         fillFloats(initializerNamed(m, name), v);
                       }});
      }
      continue;
    }
    if (init.data_type() != onnx::TensorProto::INT64 &&
        init.data_type() != onnx::TensorProto::INT32) {
      continue;
    }
    constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
    constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
    const std::pair<const char*, std::function<int64_t(int64_t)>> values[] = {
        {"every value -1", [](int64_t) { return int64_t{-1}; }},
        {"every value 0", [](int64_t) { return int64_t{0}; }},
        {"every value negated", [](int64_t x) { return x == kMin ? x : -x; }},
        {"every value 2^31 - 1", [](int64_t) { return kInt32Max; }},
        {"every value 2^62", [](int64_t) { return int64_t{1} << 62; }},
        {"every value INT64_MIN", [](int64_t) { return kMin; }},
    };
    for (const auto& [label, fn] : values) {
      out.push_back({who + ": " + label, [name, fn = fn](onnx::ModelProto& m) {
                       mapInts(initializerNamed(m, name), fn);
                     }});
    }
    if (init.dims_size() == 1 && init.dims(0) > 0) {
      out.push_back({who + ": last element dropped", [name](onnx::ModelProto& m) {
                       onnx::TensorProto& t = initializerNamed(m, name);
                       std::vector<int64_t> kept = intsOf(t);
                       kept.pop_back();
                       t.set_dims(0, static_cast<int64_t>(kept.size()));
                       setInts(t, kept);
                     }});
    }
    if (init.dims_size() == 1 && init.dims(0) == 1) {
      out.push_back({who + ": a scalar", [name](onnx::ModelProto& m) {
                       initializerNamed(m, name).clear_dims();
                     }});
    }
    if (init.dims_size() == 0) {
      out.push_back({who + ": a 1-element vector", [name](onnx::ModelProto& m) {
                       initializerNamed(m, name).add_dims(1);
                     }});
    }
  }
}

onnx::AttributeProto& attributeOf(onnx::ModelProto& m, int node, int attr) {
  return *m.mutable_graph()->mutable_node(node)->mutable_attribute(attr);
}

void attributeMutations(const onnx::ModelProto& base, std::vector<LabelledMutation>& out) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  const float kInf = std::numeric_limits<float>::infinity();
  for (int n = 0; n < base.graph().node_size(); ++n) {
    const auto& node = base.graph().node(n);
    for (int a = 0; a < node.attribute_size(); ++a) {
      const auto& attr = node.attribute(a);
      const std::string who = fmt::format("{} attribute '{}'", node.op_type(), attr.name());
      auto add = [&](const std::string& what, std::function<void(onnx::AttributeProto&)> fn) {
        out.push_back({who + ": " + what, [n, a, fn](onnx::ModelProto& m) {
                         fn(attributeOf(m, n, a));
                       }});
      };
      out.push_back({who + ": removed", [n, a](onnx::ModelProto& m) {
                       auto* attrs = m.mutable_graph()->mutable_node(n)->mutable_attribute();
                       attrs->erase(attrs->begin() + a);
                     }});
      switch (attr.type()) {
        case onnx::AttributeProto::INT:
          for (int64_t v : {int64_t{-1000}, int64_t{-1}, int64_t{0}, int64_t{1000}, kMin, kMax})
            add(fmt::format("{}", v), [v](onnx::AttributeProto& p) { p.set_i(v); });
          break;
        case onnx::AttributeProto::INTS:
          add("empty", [](onnx::AttributeProto& p) { p.clear_ints(); });
          if (attr.ints_size() > 0)
            add("last value dropped", [](onnx::AttributeProto& p) {
              p.mutable_ints()->RemoveLast();
            });
          add("a value of 1 appended", [](onnx::AttributeProto& p) { p.add_ints(1); });
          add("every value negated", [](onnx::AttributeProto& p) {
            for (auto& v : *p.mutable_ints()) v = v == kMin ? v : -v;
          });
          add("every value 1000", [](onnx::AttributeProto& p) {
            for (auto& v : *p.mutable_ints()) v = 1000;
          });
          add("every value INT64_MAX", [](onnx::AttributeProto& p) {
            for (auto& v : *p.mutable_ints()) v = kMax;
          });
          break;
        case onnx::AttributeProto::FLOAT:
          for (float v : {kNaN, -kInf, 0.0f, -1e30f})
            add(fmt::format("{}", v), [v](onnx::AttributeProto& p) { p.set_f(v); });
          break;
        case onnx::AttributeProto::FLOATS:
          add("empty", [](onnx::AttributeProto& p) { p.clear_floats(); });
          add("a NaN appended", [kNaN](onnx::AttributeProto& p) { p.add_floats(kNaN); });
          break;
        case onnx::AttributeProto::STRING:
          add("\"\"", [](onnx::AttributeProto& p) { p.set_s(""); });
          add("\"bogus\"", [](onnx::AttributeProto& p) { p.set_s("bogus"); });
          break;
        case onnx::AttributeProto::STRINGS:
          add("empty", [](onnx::AttributeProto& p) { p.clear_strings(); });
          break;
        case onnx::AttributeProto::TENSOR:
          add("scalar dims", [](onnx::AttributeProto& p) { p.mutable_t()->clear_dims(); });
          break;
        default:
          break;
      }
    }
  }
}

// `base` as it is, labelled `name`, and then changed in one field at a time.
void addMutatedCases(const onnx::ModelProto& base, const std::string& name,
                     std::vector<fusectl::sweep::SweepCase>& cases) {
  cases.push_back(fusectl::sweep::SweepCase::of(name, base.SerializeAsString()));
  std::vector<LabelledMutation> mutations;
  inputMutations(base, mutations);
  // A Loop's trip count is data: made 2^62 it is a slow model, not a fault (as in the fuzz
  // targets, which leave Loop out).
  const bool has_loop = std::any_of(base.graph().node().begin(), base.graph().node().end(),
                                    [](const onnx::NodeProto& n) { return n.op_type() == "Loop"; });
  if (!has_loop) initializerMutations(base, mutations);
  attributeMutations(base, mutations);
  // The same node under other opsets: kernels and shape rules that read a version's spelling
  // (Softmax's axis before 13, Reduce axes as an attribute before 18, Split's split input).
  for (int i = 0; i < base.opset_import_size(); ++i) {
    if (!base.opset_import(i).domain().empty()) continue;
    for (int64_t version : {7, 11, 13, 17, 18, 21}) {
      if (version == base.opset_import(i).version()) continue;
      mutations.push_back({fmt::format("opset {}", version), [i, version](onnx::ModelProto& m) {
                             m.mutable_opset_import(i)->set_version(version);
                           }});
    }
  }
  for (const LabelledMutation& mutation : mutations) {
    onnx::ModelProto m = base;
    mutation.apply(m);
    cases.push_back(fusectl::sweep::SweepCase::of(fmt::format("{} ({})", name, mutation.label),
                                                  m.SerializeAsString()));
  }
}

// The node tests whose index is `part` modulo `parts`, each as its own models and then changed
// one field at a time; the sweep runs in parts so that CTest spreads it over the cores.
void sweepNodeTests(size_t part, size_t parts) {
  if (!fs::is_directory(kFullSuiteDir)) {
    WARN("skipped: the ONNX node tests are not at " << kFullSuiteDir);
    return;
  }
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(kFullSuiteDir))
    if (entry.is_directory()) dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  std::vector<fusectl::sweep::SweepCase> cases;
  size_t tests = 0;
  for (size_t i = part; i < dirs.size(); i += parts) {
    onnx::ModelProto base;
    if (!baseModel(dirs[i], base)) continue;
    ++tests;
    addMutatedCases(base, dirs[i].filename().string(), cases);
  }
  CHECK(tests >= 400);
  // 36% ran when written.
  fusectl::sweep::runAndCheck(fmt::format("node tests, part {} of {}", part + 1, parts), cases,
                              25);
}

}  // namespace

TEST_CASE("every ONNX node test, changed in one field at a time, runs or is refused (1/4)",
          "[executor][shape_inference][sweep]") {
  sweepNodeTests(0, 4);
}
TEST_CASE("every ONNX node test, changed in one field at a time, runs or is refused (2/4)",
          "[executor][shape_inference][sweep]") {
  sweepNodeTests(1, 4);
}
TEST_CASE("every ONNX node test, changed in one field at a time, runs or is refused (3/4)",
          "[executor][shape_inference][sweep]") {
  sweepNodeTests(2, 4);
}
TEST_CASE("every ONNX node test, changed in one field at a time, runs or is refused (4/4)",
          "[executor][shape_inference][sweep]") {
  sweepNodeTests(3, 4);
}

// The fusectl ops as the optimizer writes them: each node of a fusectl op in the testdata
// models after -O3, alone in a model (its weights as initializers), then changed one field at
// a time as above. The ops' kernels and shape rules are fusectl's own, and no node test
// reaches them.
TEST_CASE("every fused node of the testdata models, changed in one field at a time, runs or is "
          "refused",
          "[executor][shape_inference][sweep]") {
  const fs::path models_dir = fs::path(FUSECTL_SOURCE_DIR) / "testdata" / "models";
  std::vector<fs::path> models;
  for (const auto& entry : fs::directory_iterator(models_dir))
    if (entry.path().extension() == ".onnx") models.push_back(entry.path());
  std::sort(models.begin(), models.end());
  std::vector<fusectl::sweep::SweepCase> cases;
  size_t fused_nodes = 0;
  for (const fs::path& path : models) {
    auto model = fusectl::loadModel(path.string());
    fusectl::passes::OptimizeRequest request;
    request.level = 3;
    fusectl::passes::optimize(*model, request);
    for (const fusectl::Node* node : model->graph->nodes()) {
      if (node->domain() != fusectl::kFusectlDomain) continue;
      ++fused_nodes;
      onnx::ModelProto base;
      REQUIRE(base.ParseFromString(
          fusectl::modelToBinary(*fusectl::singleNodeModel(*model, *node))));
      addMutatedCases(base,
                      fmt::format("{} node '{}' ({})", path.filename().string(), node->name(),
                                  node->opType()),
                      cases);
    }
  }
  CHECK(fused_nodes >= 50);
  fusectl::sweep::runAndCheck("fused nodes", cases, 20);  // 33% ran when written
}
