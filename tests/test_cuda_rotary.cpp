// The rotary embeddings (libkernels/cuda/rotary.cu) and SwiGLUPacked (elementwise.cu) on the
// CUDA backend against their CPU kernels, one node per model on seeded inputs (cuda_case.h):
// X of rank 3 and 4, head sizes 32 to 128 (fewer pairs than a warp's lanes, one and two pairs
// per lane, a partial second round), row counts that fill no whole block, Cos and Sin as [S, D],
// [B, 1, S, D], [B, S, 1, D], [1, D] and X's own shape, the QK-norm's Scale of [D] and [1], in
// float32, float16 and bfloat16.
//
// Tolerances. float32: both sides compute in float32 in the same order; the QK-norm's sum of
// squares is float32 on the GPU and double on the CPU, and the GPU may contract a product and a
// sum into one fma: a few ulps per element, an nmse near 1e-13, so 1e-7 leaves a wide margin
// and still catches a wrong pair, table row or scale. float16: both read the same halves,
// compute in float32 and round once, differing where their float32 results straddle a
// rounding boundary: 1e-5. bfloat16: the same, with 8 significant bits for float16's 11, so a
// straddled boundary costs up to 2^-8 relative (one rounding of a whole tensor would be an
// nmse near 5e-6): 1e-4, as for the other bfloat16 kernels, still catches a wrong pair or row.
//
// Without a GPU every model is still parsed, run on the CPU (finite outputs) and placed against
// the CUDA registry, so a typo, a missing registration or an `accepts` that declines shows here.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_case.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/cuda_backend.h"
#include "fusectl/kernels/cuda_device.h"
#include "fusectl/kernels/executor.h"

using namespace fusectl;
using namespace fusectl::kernels;
using fusectl::testing::checkCudaAgainstCpu;
using fusectl::testing::cudaDeviceOrSkip;
using fusectl::testing::CudaRun;

namespace {

constexpr double kFloatNmse = 1e-7;
constexpr double kHalfNmse = 1e-5;
constexpr double kBFloat16Nmse = 1e-4;

using Dims = std::vector<int64_t>;

std::string typeText(const std::string& dtype, const Dims& dims) {
  std::string out = dtype + "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + "]";
}

std::string modelText(const std::string& inputs, const std::string& output,
                      const std::string& node) {
  return "<ir_version: 8, opset_import: [\"\" : 17, \"fusectl\" : 1]>\n"
         "g (" + inputs + ") => (" + output + ")\n{\n  " + node + "\n}\n";
}

struct Case {
  std::string name;
  std::string text;
  double nmse = kFloatNmse;
};

// X and the Cos/Sin tables' shapes (the tables broadcast into X).
struct Layout {
  Dims x, table;
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> all = {
      {{2, 4, 7, 64}, {7, 64}},          // [B, H, S, D] against [S, D]
      {{2, 4, 7, 128}, {2, 1, 7, 128}},  // against [B, 1, S, D]
      {{2, 7, 4, 64}, {2, 7, 1, 64}},    // [B, S, H, D] against [B, S, 1, D]
      {{3, 5, 64}, {5, 64}},             // rank 3
      {{3, 7, 128}, {1, 7, 128}},        // 21 rows: the last block part full
      {{1, 3, 1, 64}, {1, 64}},          // 3 rows, one table row for all
      {{2, 3, 5, 96}, {2, 3, 5, 96}},    // the tables X's shape; 48 pairs: lanes 0-15 do two
      {{2, 2, 3, 32}, {2, 1, 3, 32}},    // 16 pairs: half the lanes idle
  };
  return all;
}

std::string layoutName(const Layout& l) {
  return typeText("X", l.x) + " " + typeText("Cos", l.table);
}

std::vector<Case> rotaryCases(const std::string& dtype) {
  const double nmse = dtype == "float16"    ? kHalfNmse
                      : dtype == "bfloat16" ? kBFloat16Nmse
                                            : kFloatNmse;
  std::vector<Case> cases;
  for (const Layout& l : layouts()) {
    const int64_t d = l.x.back();
    const std::string x = typeText(dtype, l.x) + " X";
    const std::string tables = typeText(dtype, l.table) + " C, " + typeText(dtype, l.table) + " S";
    const std::string y = typeText(dtype, l.x) + " Y";
    for (const char* op : {"RotaryEmbedding", "InterleavedRotaryEmbedding"}) {
      cases.push_back({std::string(op) + " " + dtype + " " + layoutName(l),
                       modelText(x + ", " + tables, y, std::string("Y = fusectl.") + op + " (X, C, S)"),
                       nmse});
    }
    for (const char* op : {"QKNormRotaryEmbedding", "QKNormInterleavedRotaryEmbedding"}) {
      for (int64_t scale : {d, int64_t{1}}) {
        const std::string w = typeText(dtype, {scale}) + " W";
        cases.push_back(
            {std::string(op) + " " + dtype + " " + layoutName(l) + " Scale [" +
                 std::to_string(scale) + "]",
             modelText(x + ", " + w + ", " + tables, y,
                       std::string("Y = fusectl.") + op + " <epsilon = 0.000001> (X, W, C, S)"),
             nmse});
      }
    }
  }
  return cases;
}

std::vector<Case> swigluPackedCases(const std::string& dtype) {
  const double nmse = dtype == "float16"    ? kHalfNmse
                      : dtype == "bfloat16" ? kBFloat16Nmse
                                            : kFloatNmse;
  std::vector<Case> cases;
  for (const Dims& y_dims : std::vector<Dims>{{3, 7, 37}, {5, 1100}, {2, 64}, {5}}) {
    Dims x_dims = y_dims;
    x_dims.back() *= 2;
    cases.push_back({"SwiGLUPacked " + dtype + " " + typeText("X", x_dims),
                     modelText(typeText(dtype, x_dims) + " X", typeText(dtype, y_dims) + " Y",
                               "Y = fusectl.SwiGLUPacked (X)"),
                     nmse});
  }
  return cases;
}

std::vector<Case> allCases() {
  std::vector<Case> all;
  for (const char* dtype : {"float", "float16", "bfloat16"}) {
    for (auto group : {rotaryCases(dtype), swigluPackedCases(dtype)})
      all.insert(all.end(), group.begin(), group.end());
  }
  return all;
}

size_t cudaFallbacks(const Model& model) {
  return fusectl::testing::cudaFallbackNodes(model).size();
}

bool allFinite(const HostTensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(elementAsDouble(t, i))) return false;
  return true;
}

}  // namespace

// ---- Without a GPU -------------------------------------------------------------------------

TEST_CASE("cuda rotary: every case parses, runs on the CPU and places on the GPU", "[cuda]") {
  const std::vector<Case> cases = allCases();
  CHECK(cases.size() == 3 * (8 * 6 + 4));
  for (const Case& c : cases) {
    INFO(c.name << "\n" << c.text);
    std::unique_ptr<Model> model;
    REQUIRE_NOTHROW(model = parseModelText(c.text, c.name));
    std::vector<NamedTensor> outputs;
    REQUIRE_NOTHROW(outputs = runModel(*model, makeRandomInputs(*model->graph, 7)));
    REQUIRE(outputs.size() == 1);
    CHECK(allFinite(outputs[0].tensor));
    if (fusectl::cuda::builtWithCuda()) CHECK(cudaFallbacks(*model) == 0);
  }
}

TEST_CASE("cuda rotary: X of a declared rank past the kernel's dims is declined", "[cuda]") {
  if (!fusectl::cuda::builtWithCuda()) {
    WARN("skipped: fusectl was built without CUDA");
    return;
  }
  // Ten dims leave nine leading ones, one more than the kernel indexes: the node runs on the
  // CPU instead of failing on the device.
  const Dims x = {2, 1, 2, 1, 2, 1, 2, 1, 2, 8};
  const std::string text =
      modelText(typeText("float", x) + " X, float[8] C, float[8] S", typeText("float", x) + " Y",
                "Y = fusectl.RotaryEmbedding (X, C, S)");
  const auto model = parseModelText(text, "rank 10");
  CHECK(cudaFallbacks(*model) == 1);
  CHECK_NOTHROW(runModel(*model, makeRandomInputs(*model->graph, 7)));
}

// ---- On a GPU ------------------------------------------------------------------------------

TEST_CASE("cuda rotary: the four rotary embeddings against the CPU, one launch each", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  for (const char* dtype : {"float", "float16", "bfloat16"}) {
    for (const Case& c : rotaryCases(dtype)) {
      INFO(c.name << "\n" << c.text);
      const CudaRun r = checkCudaAgainstCpu(c.text, c.nmse);
      CHECK(r.stats.device_launches == 1);
    }
  }
}

TEST_CASE("cuda rotary: SwiGLUPacked against the CPU, one launch each", "[cuda]") {
  if (!cudaDeviceOrSkip()) return;
  for (const char* dtype : {"float", "float16", "bfloat16"}) {
    for (const Case& c : swigluPackedCases(dtype)) {
      INFO(c.name << "\n" << c.text);
      const CudaRun r = checkCudaAgainstCpu(c.text, c.nmse);
      CHECK(r.stats.device_launches == 1);
    }
  }
}

TEST_CASE("cuda rotary: the GPU fails a node as the CPU does", "[cuda]") {
  // Tables that do not broadcast into X, and a Scale of neither [D] nor [1]: the run on either
  // backend stops with the CPU kernel's message.
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"does not broadcast into X",
       modelText("float[2, 4, 7, 64] X, float[5, 64] C, float[5, 64] S", "float[2, 4, 7, 64] Y",
                 "Y = fusectl.RotaryEmbedding (X, C, S)")},
      {"Scale has 3 elements; X's last dim is 64",
       modelText("float[2, 7, 64] X, float[3] W, float[7, 64] C, float[7, 64] S",
                 "float[2, 7, 64] Y",
                 "Y = fusectl.QKNormRotaryEmbedding <epsilon = 0.000001> (X, W, C, S)")},
  };
  for (const auto& [message, text] : bad) {
    INFO(text);
    const auto model = parseModelText(text, "bad");
    CHECK_THROWS_WITH(runModel(*model, makeRandomInputs(*model->graph, 7)),
                      Catch::Contains(message));
  }
  if (!cudaDeviceOrSkip()) return;
  for (const auto& [message, text] : bad) {
    INFO(text);
    const auto model = parseModelText(text, "bad");
    const auto inputs = makeRandomInputs(*model->graph, 7);
    ExecutorOptions options;
    options.backend = &cudaBackend();
    CHECK_THROWS_WITH(runModel(*model, inputs, options), Catch::Contains(message));
  }
}
