// Models that load but ask a kernel for something it cannot do, or for arithmetic C++ leaves
// undefined. Each one was found by the executor's fuzz target (tests/fuzz/fuzz_executor.cpp):
// the kernel must refuse with a one-line fusectl::Error naming the node, or compute what numpy
// and ONNX Runtime compute, and never read out of bounds or run into undefined behaviour (the
// sanitizer suite runs these too).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/executor.h"

using namespace fusectl;
using namespace fusectl::kernels;

namespace {

template <typename T>
HostTensor tensorOf(DType dtype, std::vector<int64_t> dims, const std::vector<T>& values) {
  HostTensor t(dtype, std::move(dims));
  REQUIRE(static_cast<size_t>(t.numel()) == values.size());
  for (size_t i = 0; i < values.size(); ++i) t.mutableData<T>()[i] = values[i];
  return t;
}

HostTensor floats(std::vector<int64_t> dims, float fill) {
  HostTensor t(DType::Float, std::move(dims));
  for (int64_t i = 0; i < t.numel(); ++i) t.mutableData<float>()[i] = fill;
  return t;
}

std::vector<NamedTensor> run(const char* text, std::vector<NamedTensor> inputs) {
  auto model = parseModelText(text, "hostile.onnxtxt");
  return runModel(*model, inputs);
}

// The refusal: one line, naming the node's op, containing `reason`.
void requireRefused(const char* text, std::vector<NamedTensor> inputs, const std::string& op,
                    const std::string& reason) {
  try {
    run(text, std::move(inputs));
    FAIL("the model ran");
  } catch (const Error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(e.kind() != ErrorKind::Internal);
    CHECK(message.find('\n') == std::string::npos);
    CHECK(message.find("(" + op + ")") != std::string::npos);
    CHECK(message.find(reason) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("hostile models: ConcatFromSequence with a new axis over items of another rank",
          "[executor][bad_input]") {
  // The new axis goes at position 3, valid for rank-3 items only: y's rank 2 was inserted into
  // out of bounds before the ranks were compared.
  const char* model = R"(<ir_version: 8, opset_import: ["" : 12]>
g (float[2,3,4] x, float[2,4] y) => (float[2,3,4,2] out) {
  seq = SequenceConstruct (x, y)
  out = ConcatFromSequence <axis = -1, new_axis = 1> (seq)
}
)";
  requireRefused(model, {{"x", floats({2, 3, 4}, 1)}, {"y", floats({2, 4}, 2)}},
                 "ConcatFromSequence", "differ in dtype or rank");
}

TEST_CASE("hostile models: Reshape and Tile whose dims overflow int64", "[executor][bad_input]") {
  const char* reshape = R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[1,9,4,4] x) => (float[1,1,12,12] y) {
  shape = Constant <value = int64[6] {1, 432345564227567617, 0, 2312, 4, 4}> ()
  y = Reshape (x, shape)
}
)";
  requireRefused(reshape, {{"x", floats({1, 9, 4, 4}, 1)}}, "Reshape",
                 "more elements than int64 can count");
  const char* tile = R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[2,3] x) => (float[4,3] y) {
  repeats = Constant <value = int64[2] {5260205124977950722, 1}> ()
  y = Tile (x, repeats)
}
)";
  requireRefused(tile, {{"x", floats({2, 3}, 1)}}, "Tile", "overflow int64 on dim 0");
}

TEST_CASE("hostile models: BatchNormalization's statistics outside training mode",
          "[executor][bad_input]") {
  // running_mean and running_var exist only with training_mode=1 (opset 14+); the kernel used to
  // leave them unset, which the executor reported as its own internal error.
  const char* model = R"(<ir_version: 8, opset_import: ["" : 15]>
g (float[2,3,4,5] x, float[3] s, float[3] b, float[3] m, float[3] v) => (float[2,3,4,5] y, float[3] rm, float[3] rv) {
  y, rm, rv = BatchNormalization (x, s, b, m, v)
}
)";
  std::vector<NamedTensor> inputs = {{"x", floats({2, 3, 4, 5}, 1)}, {"s", floats({3}, 1)},
                                     {"b", floats({3}, 0)},          {"m", floats({3}, 0)},
                                     {"v", floats({3}, 1)}};
  requireRefused(model, inputs, "BatchNormalization", "outputs after Y need training_mode=1");
}

TEST_CASE("hostile models: QLinearMatMul with an empty or zero y_scale", "[executor][bad_input]") {
  const char* model = R"(<ir_version: 8, opset_import: ["" : 10]>
g (uint8[2,4] a, float[1] as, uint8[1] az, uint8[4,3] b, float[1] bs, uint8[1] bz, float[N] ys, uint8[1] yz) => (uint8[2,3] y) {
  y = QLinearMatMul (a, as, az, b, bs, bz, ys, yz)
}
)";
  auto inputs = [](std::vector<int64_t> ys_dims, float ys) {
    return std::vector<NamedTensor>{
        {"a", tensorOf<uint8_t>(DType::UInt8, {2, 4}, {1, 2, 3, 4, 0, 0, 0, 0})},
        {"as", floats({1}, 1)},
        {"az", tensorOf<uint8_t>(DType::UInt8, {1}, {0})},
        {"b", tensorOf<uint8_t>(DType::UInt8, {4, 3}, std::vector<uint8_t>(12, 1))},
        {"bs", floats({1}, 1)},
        {"bz", tensorOf<uint8_t>(DType::UInt8, {1}, {0})},
        {"ys", floats(std::move(ys_dims), ys)},
        {"yz", tensorOf<uint8_t>(DType::UInt8, {1}, {0})}};
  };
  requireRefused(model, inputs({0}, 1), "QLinearMatMul", "must not be empty");
  // A zero scale: row 0's sums (10) scale to +inf and saturate, row 1's (0) to 0 * inf = NaN,
  // which becomes 0 as QuantizeLinear maps NaN (converting NaN to uint8 is undefined).
  auto out = run(model, inputs({1}, 0));
  const uint8_t* y = out[0].tensor.data<uint8_t>();
  CHECK(std::vector<uint8_t>(y, y + 6) == std::vector<uint8_t>{255, 255, 255, 0, 0, 0});
}

TEST_CASE("hostile models: DynamicQuantizeLinear of an infinite value", "[executor][bad_input]") {
  const char* model = R"(<ir_version: 8, opset_import: ["" : 11]>
g (float[3] x) => (uint8[3] y, float s, uint8 z) {
  y, s, z = DynamicQuantizeLinear (x)
}
)";
  const float inf = std::numeric_limits<float>::infinity();
  auto out = run(model, {{"x", tensorOf<float>(DType::Float, {3}, {-inf, 0.f, 1.f})}});
  CHECK(std::isinf(out[1].tensor.data<float>()[0]));
  CHECK(out[2].tensor.data<uint8_t>()[0] == 0);  // -(-inf) / inf is NaN: zero point 0
}

TEST_CASE("hostile models: integer Add, Sub, Mul, Neg, Abs and Sum wrap as numpy's do",
          "[executor][bad_input]") {
  const char* model = R"(<ir_version: 8, opset_import: ["" : 13]>
g (int64[3] a, int64[3] b, int16[2] c, int16[2] d) => (int64[3] add, int64[3] sub, int64[3] mul, int64[3] neg, int64[3] abs, int64[3] sum, int16[2] mul16) {
  add = Add (a, b)
  sub = Sub (b, a)
  mul = Mul (a, b)
  neg = Neg (a)
  abs = Abs (a)
  sum = Sum (a, b, a)
  mul16 = Mul (c, d)
}
)";
  const int64_t max = std::numeric_limits<int64_t>::max(), min = std::numeric_limits<int64_t>::min();
  auto out = run(model, {{"a", tensorOf<int64_t>(DType::Int64, {3}, {max, min, 7})},
                         {"b", tensorOf<int64_t>(DType::Int64, {3}, {2, -1, 7885630324200177673})},
                         {"c", tensorOf<int16_t>(DType::Int16, {2}, {300, -32768})},
                         {"d", tensorOf<int16_t>(DType::Int16, {2}, {300, -1})}});
  auto values = [&](size_t k) {
    const int64_t* p = out[k].tensor.data<int64_t>();
    return std::vector<int64_t>(p, p + 3);
  };
  // The expected values are numpy's (int64 arithmetic modulo 2^64).
  CHECK(values(0) == std::vector<int64_t>{min + 1, max, 7885630324200177680});
  CHECK(values(1) == std::vector<int64_t>{min + 3, max, 7885630324200177666});
  CHECK(values(2) == std::vector<int64_t>{-2, min, -140819951727411137});
  CHECK(values(3) == std::vector<int64_t>{min + 1, min, -7});
  CHECK(values(4) == std::vector<int64_t>{max, min, 7});
  CHECK(values(5) == std::vector<int64_t>{0, -1, 7885630324200177687});
  const int16_t* m16 = out[6].tensor.data<int16_t>();
  CHECK(m16[0] == 24464);   // 90000 - 65536
  CHECK(m16[1] == -32768);  // 32768 wraps
}

TEST_CASE("hostile models: pools whose window is wider than the input", "[executor][bad_input]") {
  const char* model = R"(<ir_version: 8, opset_import: ["" : 12]>
g (float[1,1,5,1] x) => (float[1,1,4,0] y, float[1,1,4,0] z) {
  y = MaxPool <kernel_shape = [2, 2]> (x)
  z = AveragePool <kernel_shape = [2, 2]> (x)
}
)";
  auto out = run(model, {{"x", floats({1, 1, 5, 1}, 1)}});
  CHECK(out[0].tensor.dims() == std::vector<int64_t>{1, 1, 4, 0});
  CHECK(out[1].tensor.dims() == std::vector<int64_t>{1, 1, 4, 0});
}

TEST_CASE("hostile models: GatherElements with indices longer than data off the axis",
          "[executor][bad_input]") {
  // Indices [2, 3] over data [2, 2] on axis 0: position (0, 2) would read data column 2.
  const char* model = R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[2,2] x, int64[2,3] i) => (float[2,3] y) {
  y = GatherElements <axis = 0> (x, i)
}
)";
  requireRefused(model,
                 {{"x", floats({2, 2}, 1)},
                  {"i", tensorOf<int64_t>(DType::Int64, {2, 3}, {0, 1, 0, 1, 0, 1})}},
                 "GatherElements", "indices [2,3] are longer than data [2,2] on axis 1");
}

TEST_CASE("hostile models: Pad to a size past the tensor limit, or past int64",
          "[executor][bad_input]") {
  // The pad's index maps (one entry per output position) were built before the output's size
  // was checked: 9.6 GB of them for a pad of 1.2e9.
  const char* model = R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[2] x, int64[2] pads) => (float[N] y) {
  y = Pad (x, pads)
}
)";
  auto pads = [](int64_t before, int64_t after) {
    return std::vector<NamedTensor>{{"x", floats({2}, 1)},
                                    {"pads", tensorOf<int64_t>(DType::Int64, {2}, {before, after})}};
  };
  ExecutorOptions small;
  small.max_tensor_bytes = 1 << 20;
  auto parsed = parseModelText(model, "pad.onnxtxt");
  try {
    runModel(*parsed, pads(0, 1200000000), small);
    FAIL("the pad ran");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("more than the limit") != std::string::npos);
  }
  requireRefused(model, pads(std::numeric_limits<int64_t>::max(), 1), "Pad", "overflow int64");
}

TEST_CASE("hostile models: integer convolutions and products with no output channels",
          "[executor][bad_input]") {
  // W with 0 output channels and 2 per-channel zero points: the block size divided by W's
  // first dim (SIGFPE in `fusectl run`); an empty zero point was read at [0].
  const char* conv = R"(<ir_version: 8, opset_import: ["" : 10]>
g (uint8[1,1,3,3] x, uint8[0,1,2,2] w, uint8 xz, uint8[N] wz) => (int32[1,0,2,2] y) {
  y = ConvInteger (x, w, xz, wz)
}
)";
  auto inputs = [](int64_t zero_points) {
    return std::vector<NamedTensor>{
        {"x", tensorOf<uint8_t>(DType::UInt8, {1, 1, 3, 3}, std::vector<uint8_t>(9, 1))},
        {"w", HostTensor(DType::UInt8, {0, 1, 2, 2})},
        {"xz", tensorOf<uint8_t>(DType::UInt8, {}, {0})},
        {"wz", tensorOf<uint8_t>(DType::UInt8, {zero_points},
                                 std::vector<uint8_t>(static_cast<size_t>(zero_points), 0))}};
  };
  requireRefused(conv, inputs(2), "ConvInteger", "one value per channel");
  requireRefused(conv, inputs(0), "ConvInteger", "one value per channel");
  const char* matmul = R"(<ir_version: 8, opset_import: ["" : 10]>
g (uint8[2,3] a, uint8[3,0] b, uint8 az, uint8[2] bz) => (int32[2,0] y) {
  y = MatMulInteger (a, b, az, bz)
}
)";
  requireRefused(matmul,
                 {{"a", tensorOf<uint8_t>(DType::UInt8, {2, 3}, std::vector<uint8_t>(6, 1))},
                  {"b", HostTensor(DType::UInt8, {3, 0})},
                  {"az", tensorOf<uint8_t>(DType::UInt8, {}, {0})},
                  {"bz", tensorOf<uint8_t>(DType::UInt8, {2}, {0, 0})}},
                 "MatMulInteger", "zero point must be a scalar or per-column");
}

TEST_CASE("hostile models: Shape's start and end before opset 15", "[executor][bad_input]") {
  // Shape-1 has no start or end: the kernel honoured them, fold-shape-subgraphs did not, so -O3
  // changed the output from [3, 4] to [3, 4, 5].
  const char* model = R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[3,4,5] x) => (int64[3] y) {
  y = Shape <end = -1> (x)
}
)";
  auto out = run(model, {{"x", floats({3, 4, 5}, 0)}});
  REQUIRE(out[0].tensor.dims() == std::vector<int64_t>{3});
  CHECK(out[0].tensor.data<int64_t>()[2] == 5);
}

TEST_CASE("hostile models: element-type attributes that name no type", "[executor][bad_input]") {
  // EyeLike's dtype (and a window's output_datatype, SequenceEmpty's dtype) went to the
  // allocator unchecked: dtype 0 became the executor's "undefined dtype" internal error.
  const char* eye = R"(<ir_version: 8, opset_import: ["" : 13]>
g (int32[4,5] x) => (float[4,5] y) {
  y = EyeLike <dtype = 0, k = 1> (x)
}
)";
  requireRefused(eye, {{"x", tensorOf<int32_t>(DType::Int32, {4, 5}, std::vector<int32_t>(20))}},
                 "EyeLike", "attribute 'dtype' = 0 is not an ONNX element type");
  const char* window = R"(<ir_version: 8, opset_import: ["" : 17]>
g (int64 n) => (float[N] y) {
  y = HannWindow <output_datatype = 99> (n)
}
)";
  requireRefused(window, {{"n", tensorOf<int64_t>(DType::Int64, {}, {8})}}, "HannWindow",
                 "attribute 'output_datatype' = 99 is not an ONNX element type");
}

TEST_CASE("hostile models: RoiAlign with an output of width 0", "[executor][bad_input]") {
  // Bins of infinite width: the sampling grid's size, inf, was converted to int64.
  const char* model = R"(<ir_version: 8, opset_import: ["" : 16]>
g (float[1,1,4,4] x, float[1,4] rois, int64[1] b) => (float[1,1,2,0] y) {
  y = RoiAlign <output_height = 2, output_width = 0> (x, rois, b)
}
)";
  auto out = run(model, {{"x", floats({1, 1, 4, 4}, 1)},
                         {"rois", tensorOf<float>(DType::Float, {1, 4}, {0, 0, 3, 3})},
                         {"b", tensorOf<int64_t>(DType::Int64, {1}, {0})}});
  CHECK(out[0].tensor.dims() == std::vector<int64_t>{1, 1, 2, 0});
}

TEST_CASE("hostile models: RoiAlign whose spatial_scale makes a huge sampling grid",
          "[executor][bad_input]") {
  // One side of the grid 6e28, the other negative (no samples): their product passed the
  // 2^20 bound and 6e28 was converted to int64.
  const char* model = R"(<ir_version: 8, opset_import: ["" : 16]>
g (float[1,1,4,4] x, float[1,4] rois, int64[1] b) => (float[1,1,2,2] y) {
  y = RoiAlign <output_height = 2, output_width = 2, spatial_scale = -5.9e29> (x, rois, b)
}
)";
  requireRefused(model,
                 {{"x", floats({1, 1, 4, 4}, 1)},
                  {"rois", tensorOf<float>(DType::Float, {1, 4}, {0, 1e-10f, 1e-9f, 0})},
                  {"b", tensorOf<int64_t>(DType::Int64, {1}, {0})}},
                 "RoiAlign", "sampling grid per bin");
}

TEST_CASE("hostile models: integer reductions wrap as numpy's do", "[executor][bad_input]") {
  const char* model = R"(<ir_version: 8, opset_import: ["" : 13]>
g (int64[3] x, int16[2] s) => (int64[1] prod, int64[1] sum, int64[1] l1, int64[1] sq, int16[1] prod16) {
  prod = ReduceProd (x)
  sum = ReduceSum (x)
  l1 = ReduceL1 (x)
  sq = ReduceSumSquare (x)
  prod16 = ReduceProd (s)
}
)";
  const int64_t max = std::numeric_limits<int64_t>::max(), min = std::numeric_limits<int64_t>::min();
  auto out = run(model, {{"x", tensorOf<int64_t>(DType::Int64, {3}, {max, min, 7})},
                         {"s", tensorOf<int16_t>(DType::Int16, {2}, {300, 300})}});
  // numpy: np.prod, np.sum, np.sum(np.abs), np.sum(x * x) of int64 [max, min, 7]; int16 prod
  // accumulates in int64 (90000) and the cast back to int16 wraps to 24464.
  CHECK(out[0].tensor.data<int64_t>()[0] == min);
  CHECK(out[1].tensor.data<int64_t>()[0] == 6);
  CHECK(out[2].tensor.data<int64_t>()[0] == 6);
  CHECK(out[3].tensor.data<int64_t>()[0] == 50);
  CHECK(out[4].tensor.data<int16_t>()[0] == 24464);
}

// The cases below were found by the sweeps (tests/test_node_mutation_sweep.cpp), not the fuzzer.

TEST_CASE("hostile models: a Loop whose trip count is negative runs no iteration",
          "[executor][bad_input]") {
  // As ONNX's reference implementation and ONNX Runtime read `it < M`; -1 was read as "no
  // bound", and with cond true the run never ended.
  const char* model = R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[1] y) => (float[1] res) {
  m = Constant <value = int64 {-1}> ()
  cond = Constant <value = bool {1}> ()
  res = Loop (m, cond, y) <body = body (int64 i, bool c, float[1] acc)
                                  => (bool c_out, float[1] acc_out) {
    c_out = Identity (c)
    one = Constant <value = float[1] {1.0}> ()
    acc_out = Add (acc, one)
  }>
}
)";
  for (int64_t trip_count : {int64_t{-1}, std::numeric_limits<int64_t>::min()}) {
    std::string text = model;
    if (trip_count != -1)
      text.replace(text.find("{-1}"), 4, "{" + std::to_string(trip_count) + "}");
    const auto out = run(text.c_str(), {{"y", floats({1}, 5)}});
    REQUIRE(out.size() == 1);
    CHECK(out[0].tensor.data<float>()[0] == 5.0f);
  }
  // Three iterations when M says 3: the fix did not stop the loop from running.
  std::string three = model;
  three.replace(three.find("{-1}"), 4, "{3}");
  CHECK(run(three.c_str(), {{"y", floats({1}, 5)}})[0].tensor.data<float>()[0] == 8.0f);
}

TEST_CASE("hostile models: bool bytes other than 0 and 1 in a file read as true",
          "[executor][bad_input]") {
  // ONNX stores bools in int32_data; a file may hold 2 or 255 there (or in raw_data). Kernels
  // read bools as C++ bool, for which those bytes are undefined behaviour: the loader now stores
  // them as 1.
  const char* model = R"(<ir_version: 8, opset_import: ["" : 13]>
g (bool[4] x) => (bool[4] y, int32[4] z) {
  c = Constant <value = bool[4] {0, 2, 255, 1}> ()
  y = And (x, c)
  z = Cast <to = 6> (c)
}
)";
  HostTensor x(DType::Bool, {4});
  for (int i = 0; i < 4; ++i) x.mutableData<bool>()[i] = true;
  const auto out = run(model, {{"x", x}});
  REQUIRE(out.size() == 2);
  const bool expected[] = {false, true, true, true};
  for (int i = 0; i < 4; ++i) {
    CHECK(reinterpret_cast<const uint8_t*>(out[0].tensor.raw())[i] == (expected[i] ? 1 : 0));
    CHECK(out[1].tensor.data<int32_t>()[i] == (expected[i] ? 1 : 0));
  }
}

TEST_CASE("hostile models: Range at the ends of int64 counts and steps without overflow",
          "[executor][bad_input]") {
  const char* model = R"(<ir_version: 8, opset_import: ["" : 13]>
g (int64 start, int64 limit, int64 delta) => (int64[N] y) {
  y = Range (start, limit, delta)
}
)";
  auto scalar = [](int64_t v) { return tensorOf<int64_t>(DType::Int64, {}, {v}); };
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  // limit - start overflows int64 here; the elements themselves do not.
  auto out = run(model, {{"start", scalar(lo)}, {"limit", scalar(hi)}, {"delta", scalar(hi)}});
  REQUIRE(out[0].tensor.numel() == 3);
  CHECK(out[0].tensor.data<int64_t>()[0] == lo);
  CHECK(out[0].tensor.data<int64_t>()[1] == -1);
  CHECK(out[0].tensor.data<int64_t>()[2] == hi - 1);
  // Counting down from the top.
  out = run(model, {{"start", scalar(hi)}, {"limit", scalar(hi - 3)}, {"delta", scalar(-1)}});
  REQUIRE(out[0].tensor.numel() == 3);
  CHECK(out[0].tensor.data<int64_t>()[2] == hi - 2);
  // A count no tensor can hold is refused before anything is allocated.
  requireRefused(model, {{"start", scalar(lo)}, {"limit", scalar(hi)}, {"delta", scalar(1)}},
                 "Range", "than a tensor can hold");
}

TEST_CASE("hostile models: window geometry that overflows or crops is refused",
          "[executor][bad_input]") {
  const char* negative_pads = R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[1,1,8,8] x) => (float[1,1,N,M] y) {
  y = AveragePool <kernel_shape = [3, 3], pads = [-2, -2, -2, -2]> (x)
}
)";
  // Negative pads made the pool index before its row buffer (a heap corruption).
  requireRefused(negative_pads, {{"x", floats({1, 1, 8, 8}, 1)}}, "AveragePool",
                 "pads must not be negative");
  const char* huge_kernel = R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[1,1,4,4,4] x) => (float[1,1,N,M,K] y) {
  y = MaxPool <kernel_shape = [9223372036854775807, 2, 2], dilations = [2, 1, 1]> (x)
}
)";
  requireRefused(huge_kernel, {{"x", floats({1, 1, 4, 4, 4}, 1)}}, "MaxPool", "overflow");
  const char* col2im = R"(<ir_version: 8, opset_import: ["" : 18]>
g (float[1,5,5] x) => (float[1,1,N,M] y) {
  image = Constant <value = int64[2] {5, 5}> ()
  block = Constant <value = int64[2] {4611686018427387904, 4611686018427387904}> ()
  y = Col2Im (x, image, block)
}
)";
  // A block of 2^62 made the block count overflow to 0, then divided by it (SIGFPE).
  requireRefused(col2im, {{"x", floats({1, 5, 5}, 1)}}, "Col2Im", "block_shape");
}

TEST_CASE("hostile models: an LpPool kernel far larger than its input costs what the input holds",
          "[executor][bad_input]") {
  // 1000 x 1000 over 4 x 4 with SAME padding visited 10^6 taps per output; only the taps inside
  // the input are visited now, and the result is the p-norm of the input's window.
  const char* model = R"(<ir_version: 8, opset_import: ["" : 18]>
g (float[1,1,4,4] x) => (float[1,1,4,4] y) {
  y = LpPool <kernel_shape = [1000, 1000], auto_pad = "SAME_UPPER", p = 2> (x)
}
)";
  const auto out = run(model, {{"x", floats({1, 1, 4, 4}, 1)}});
  REQUIRE(out[0].tensor.numel() == 16);
  // Every window covers the whole 4 x 4 input: sqrt(16 * 1^2) = 4.
  for (int i = 0; i < 16; ++i) CHECK(out[0].tensor.data<float>()[i] == Approx(4.0f));
}

TEST_CASE("hostile models: a Loop's scan output fails at the tensor limit, not at its last "
          "iteration",
          "[executor][bad_input]") {
  // The expanded Range of a node test with start 2^31 - 1 asks for 7e8 iterations, each adding
  // a scalar to a scan output: the elements were gathered until the end (or until memory ran
  // out) before the stacked output met the limit.
  const char* model = R"(<ir_version: 8, opset_import: ["" : 13]>
g (float[1] y) => (float[1] res, float[N, 1] scan) {
  m = Constant <value = int64 {1000000000}> ()
  cond = Constant <value = bool {1}> ()
  res, scan = Loop (m, cond, y) <body = body (int64 i, bool c, float[1] acc)
                                       => (bool c_out, float[1] acc_out, float[1] scan_out) {
    c_out = Identity (c)
    acc_out = Identity (acc)
    scan_out = Identity (acc)
  }>
}
)";
  auto parsed = parseModelText(model, "hostile.onnxtxt");
  ExecutorOptions options;
  options.max_tensor_bytes = 1 << 16;  // 16,384 four-byte elements
  try {
    runModel(*parsed, {{"y", floats({1}, 1)}}, options);
    FAIL("the model ran");
  } catch (const Error& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find("(Loop)") != std::string::npos);
    CHECK(message.find("after 16385 iterations") != std::string::npos);
  }
  // Under the limit the scan output is stacked as before.
  std::string short_loop = model;
  short_loop.replace(short_loop.find("1000000000"), 10, "3");
  const auto out = runModel(*parseModelText(short_loop, "ok.onnxtxt"), {{"y", floats({1}, 2)}},
                            options);
  REQUIRE(out.size() == 2);
  CHECK(out[1].tensor.dims() == std::vector<int64_t>{3, 1});
}
