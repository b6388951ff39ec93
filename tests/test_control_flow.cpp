// Control flow in the executor (If, Loop, Scan): nested bodies, outer-scope captures at two
// levels, a Loop that runs zero times, Scan in reverse along inner axes. Each model is checked
// against a hand-written loop here, and against ONNX Runtime where it is installed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "fusectl/graph/error.h"
#include "fusectl/graph/onnx_io.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/npy.h"
#include "ort_runner.h"
#include "shell_util.h"
#include "test_files.h"

using namespace fusectl;
using namespace fusectl::kernels;

namespace {

HostTensor floats(std::vector<int64_t> dims, const std::vector<float>& values) {
  HostTensor t(DType::Float, std::move(dims));
  REQUIRE(static_cast<size_t>(t.numel()) == values.size());
  for (size_t i = 0; i < values.size(); ++i) t.mutableData<float>()[i] = values[i];
  return t;
}

HostTensor int64Scalar(int64_t v) {
  HostTensor t(DType::Int64, {});
  t.mutableData<int64_t>()[0] = v;
  return t;
}

std::vector<float> valuesOf(const HostTensor& t) {
  REQUIRE(t.dtype() == DType::Float);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

void requireClose(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-5).margin(1e-6));
}

// A Loop whose body branches on the iteration's parity; the odd branch runs a second Loop of
// `i` steps (M captured from the outer body, no cond input) that adds `w` (captured from the
// main graph, two scopes up); the even branch multiplies by `w`.
//   a = x; for i < n: a = (i odd) ? a + i*w : a*w; trace[i] = a
const char* kNestedLoop = R"(<ir_version: 8, opset_import: ["" : 16]>
nested (int64 n, float[3] x, float[3] w) => (float[3] acc, float[N,3] trace) {
  two = Constant <value_int = 2> ()
  go = Constant <value = bool {1}> ()
  acc, trace = Loop (n, go, x) <body = outer_body (int64 i, bool c, float[3] a) => (bool c2, float[3] a2, float[3] snap) {
    c2 = Identity (c)
    parity = Mod (i, two)
    odd = Cast <to = 9> (parity)
    a2 = If (odd) <then_branch = add_steps () => (float[3] r) {
      r = Loop (i, , a) <body = inner_body (int64 j, bool cc, float[3] b) => (bool cc2, float[3] b2) {
        cc2 = Identity (cc)
        b2 = Add (b, w)
      }>
    }, else_branch = scale () => (float[3] r2) {
      r2 = Mul (a, w)
    }>
    snap = Identity (a2)
  }>
}
)";

void nestedReference(int64_t n, std::vector<float> a, const std::vector<float>& w,
                     std::vector<float>& acc, std::vector<float>& trace) {
  trace.clear();
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < a.size(); ++k) a[k] = (i % 2) ? a[k] + static_cast<float>(i) * w[k] : a[k] * w[k];
    trace.insert(trace.end(), a.begin(), a.end());
  }
  acc = a;
}

// Scan along axis 1 of xs[4,3,2], read last step first; the state adds each [4,2] slice; ys
// stacks s*k (k captured) along axis 1 in reverse, es stacks the slices as read along axis 0.
const char* kReverseScan = R"(<ir_version: 8, opset_import: ["" : 16]>
reverse_scan (float[4,2] s0, float[4,3,2] xs, float[2] k) => (float[4,2] s, float[4,3,2] ys, float[3,4,2] es) {
  s, ys, es = Scan (s0, xs) <num_scan_inputs = 1, scan_input_axes = [1], scan_input_directions = [1], scan_output_axes = [1, 0], scan_output_directions = [1, 0], body = step (float[4,2] st, float[4,2] e) => (float[4,2] st2, float[4,2] y, float[4,2] e2) {
    st2 = Add (st, e)
    y = Mul (st2, k)
    e2 = Identity (e)
  }>
}
)";

struct ScanReference {
  std::vector<float> s, ys, es;
};

ScanReference reverseScanReference(const std::vector<float>& s0, const std::vector<float>& xs,
                                   const std::vector<float>& k) {
  // xs[r][t][c] at (r*3 + t)*2 + c
  ScanReference ref;
  ref.s = s0;
  ref.ys.assign(4 * 3 * 2, 0.f);
  ref.es.assign(3 * 4 * 2, 0.f);
  for (int it = 0; it < 3; ++it) {
    const int t = 2 - it;  // reverse input direction
    for (int r = 0; r < 4; ++r) {
      for (int c = 0; c < 2; ++c) {
        const float e = xs[(r * 3 + t) * 2 + c];
        ref.s[r * 2 + c] += e;
        const int out_pos = 2 - it;  // reverse output direction, stacked on axis 1
        ref.ys[(r * 3 + out_pos) * 2 + c] = ref.s[r * 2 + c] * k[c];
        ref.es[(it * 4 + r) * 2 + c] = e;
      }
    }
  }
  return ref;
}

std::vector<float> ramp(size_t count, float start, float step) {
  std::vector<float> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = start + step * static_cast<float>(i);
  return v;
}

}  // namespace

// The profiled run names each node inside a body by the control-flow nodes around it and counts
// its calls: with n = 5 the outer body runs 5 times, the then branch for i = 1 and 3 (its Loop
// running 1 + 3 times), the else branch for i = 0, 2 and 4.
TEST_CASE("control flow: a profiled run times the nodes inside bodies, per parent and calls",
          "[control_flow][profile]") {
  auto model = parseModelText(kNestedLoop, "nested.onnxtxt");
  const std::vector<NamedTensor> inputs = {{"n", int64Scalar(5)},
                                           {"x", floats({3}, {1.f, -2.f, 0.5f})},
                                           {"w", floats({3}, {2.f, 0.5f, -1.f})}};
  Executor executor(*model);
  ExecutionStats plain;
  executor.run(inputs, &plain);
  CHECK(plain.node_times.empty());
  CHECK(plain.body_node_times.empty());

  // Switched on after construction, as `fusectl profile` does between its passes: the bodies'
  // executors follow.
  executor.setProfiling(true);
  ExecutionStats stats;
  auto out = executor.run(inputs, &stats);
  std::vector<float> acc, trace;
  nestedReference(5, {1.f, -2.f, 0.5f}, {2.f, 0.5f, -1.f}, acc, trace);
  requireClose(valuesOf(out[0].tensor), acc);

  const std::string body = "Loop(acc)/body";
  const std::string then_branch = body + " > If(a2)/then_branch";
  const std::string inner = then_branch + " > Loop(r)/body";
  const std::string else_branch = body + " > If(a2)/else_branch";
  std::vector<std::tuple<std::string, std::string, size_t>> got;
  for (const BodyNodeTime& b : stats.body_node_times) {
    got.emplace_back(b.parent, b.time.node, b.calls);
    CHECK(b.time.seconds >= 0);
  }
  std::sort(got.begin(), got.end());
  std::vector<std::tuple<std::string, std::string, size_t>> want = {
      {body, "Identity(c2)", 5},     {body, "Mod(parity)", 5},      {body, "Cast(odd)", 5},
      {body, "If(a2)", 5},           {body, "Identity(snap)", 5},   {then_branch, "Loop(r)", 2},
      {inner, "Identity(cc2)", 4},   {inner, "Add(b2)", 4},         {else_branch, "Mul(r2)", 3}};
  std::sort(want.begin(), want.end());
  CHECK(got == want);

  // A body's nodes ran inside their parent's time.
  double loop_seconds = -1, in_body = 0;
  for (const NodeTime& t : stats.node_times)
    if (t.node == "Loop(acc)") loop_seconds = t.seconds;
  for (const BodyNodeTime& b : stats.body_node_times)
    if (b.parent == body) in_body += b.time.seconds;
  CHECK(in_body <= loop_seconds);
  // Dims of a first call; bytes of every call: Add(b2) wrote four float[3]s.
  for (const BodyNodeTime& b : stats.body_node_times) {
    if (b.time.node != "Add(b2)") continue;
    CHECK(b.time.output_dims == std::vector<std::vector<int64_t>>{{3}});
    CHECK(b.time.output_bytes == 4 * 3 * sizeof(float));
  }

  executor.setProfiling(false);
  ExecutionStats off;
  executor.run(inputs, &off);
  CHECK(off.body_node_times.empty());
}

TEST_CASE("control flow: a Loop holding an If holding a Loop, with captures two scopes up",
          "[control_flow]") {
  auto model = parseModelText(kNestedLoop, "nested.onnxtxt");
  Executor executor(*model);
  const std::vector<float> x = {1.f, -2.f, 0.5f}, w = {2.f, 0.5f, -1.f};
  for (int64_t n : {1, 2, 5}) {
    INFO("n = " << n);
    auto out = executor.run({{"n", int64Scalar(n)}, {"x", floats({3}, x)}, {"w", floats({3}, w)}});
    std::vector<float> acc, trace;
    nestedReference(n, x, w, acc, trace);
    requireClose(valuesOf(out[0].tensor), acc);
    CHECK(out[1].tensor.dims() == std::vector<int64_t>{n, 3});
    requireClose(valuesOf(out[1].tensor), trace);
  }
}

TEST_CASE("control flow: a Loop with zero iterations returns its initial values and empty scans",
          "[control_flow]") {
  auto model = parseModelText(kNestedLoop, "nested.onnxtxt");
  const std::vector<float> x = {1.f, -2.f, 0.5f};
  auto out = runModel(*model, {{"n", int64Scalar(0)}, {"x", floats({3}, x)},
                               {"w", floats({3}, {2.f, 0.5f, -1.f})}});
  requireClose(valuesOf(out[0].tensor), x);
  CHECK(out[1].tensor.dims() == std::vector<int64_t>{0, 3});
}

TEST_CASE("control flow: Scan reverses inputs and outputs along inner axes", "[control_flow]") {
  auto model = parseModelText(kReverseScan, "reverse_scan.onnxtxt");
  const std::vector<float> s0 = ramp(8, -1.f, 0.25f), xs = ramp(24, 0.5f, 0.75f), k = {2.f, -3.f};
  auto out = runModel(*model, {{"s0", floats({4, 2}, s0)}, {"xs", floats({4, 3, 2}, xs)},
                               {"k", floats({2}, k)}});
  const ScanReference ref = reverseScanReference(s0, xs, k);
  requireClose(valuesOf(out[0].tensor), ref.s);
  CHECK(out[1].tensor.dims() == std::vector<int64_t>{4, 3, 2});
  requireClose(valuesOf(out[1].tensor), ref.ys);
  CHECK(out[2].tensor.dims() == std::vector<int64_t>{3, 4, 2});
  requireClose(valuesOf(out[2].tensor), ref.es);
}

TEST_CASE("control flow: a bad condition fails naming the node", "[control_flow]") {
  auto model = parseModelText(R"(<ir_version: 8, opset_import: ["" : 16]>
g (bool[2] c, float[2] x) => (float[2] y) {
  y = If (c) <then_branch = t () => (float[2] a) { a = Relu (x) }, else_branch = e () => (float[2] b) { b = Neg (x) }>
}
)", "bad_cond.onnxtxt");
  HostTensor cond(DType::Bool, {2});
  try {
    runModel(*model, {{"c", cond}, {"x", floats({2}, {1.f, 2.f})}});
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("(If): the condition must hold one element") != std::string::npos);
  }
}

TEST_CASE("control flow: the executor runs If, Loop and Scan as onnxruntime does", "[.][ort][control_flow]") {
  namespace fs = std::filesystem;
  const test::OrtSetup ort = test::findOrtSetup();
  if (!ort.found) {
    WARN(ort.skip_reason);
    return;
  }
  const fs::path work = testing::processTempPath("fusectl_control_flow_ort");
  fs::remove_all(work);
  fs::create_directories(work);
  struct Case {
    std::string name;
    const char* text;
    std::vector<NamedTensor> inputs;
  };
  const std::vector<Case> cases = {
      {"nested_5", kNestedLoop,
       {{"n", int64Scalar(5)}, {"x", floats({3}, {1.f, -2.f, 0.5f})}, {"w", floats({3}, {2.f, 0.5f, -1.f})}}},
      {"reverse_scan", kReverseScan,
       {{"s0", floats({4, 2}, ramp(8, -1.f, 0.25f))}, {"xs", floats({4, 3, 2}, ramp(24, 0.5f, 0.75f))},
        {"k", floats({2}, {2.f, -3.f})}}},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      auto model = parseModelText(c.text, c.name + ".onnxtxt");
      const fs::path file = work / (c.name + ".onnx");
      saveModel(*model, file.string());
      std::vector<std::string> names;
      for (const Value* v : model->graph->outputs()) names.push_back(v->name());
      auto want = test::runOrt(ort, file, c.inputs, names, work / c.name);
      auto got = runModel(*model, c.inputs);
      REQUIRE(got.size() == want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        INFO("output " << names[i]);
        CHECK(got[i].tensor.dims() == want[i].tensor.dims());
        requireClose(valuesOf(got[i].tensor), valuesOf(want[i].tensor));
      }
    }
  }
}

// ---- sequences and optionals ----

namespace {

// Splits x[3,4] into its rows, inserts a row at the front, drops the last, and reads it back
// three ways: one element, the length, and the concatenation along a new axis 1.
const char* kSequenceOps = R"(<ir_version: 8, opset_import: ["" : 17]>
seqs (float[3,4] x, float[4] extra) => (float[4] second, int64 length, float[4,3] stacked, bool has, float[4] got) {
  rows = SplitToSequence <axis = 0, keepdims = 0> (x)
  front = Constant <value = int64 {0}> ()
  one = Constant <value = int64 {1}> ()
  grown = SequenceInsert (rows, extra, front)
  shrunk = SequenceErase (grown)
  second = SequenceAt (shrunk, one)
  length = SequenceLength (shrunk)
  stacked = ConcatFromSequence <axis = 1, new_axis = 1> (shrunk)
  maybe = Optional (extra)
  has = OptionalHasElement (maybe)
  got = OptionalGetElement (maybe)
}
)";

}  // namespace

TEST_CASE("control flow: sequence and optional ops against a hand-written reference",
          "[control_flow]") {
  auto model = parseModelText(kSequenceOps, "seqs.onnxtxt");
  const std::vector<float> x = ramp(12, -3.f, 0.5f), extra = {9.f, 8.f, 7.f, 6.f};
  auto out = runModel(*model, {{"x", floats({3, 4}, x)}, {"extra", floats({4}, extra)}});
  // shrunk = [extra, row0, row1]
  const std::vector<std::vector<float>> shrunk = {
      extra, {x.begin(), x.begin() + 4}, {x.begin() + 4, x.begin() + 8}};
  requireClose(valuesOf(out[0].tensor), shrunk[1]);
  CHECK(out[1].tensor.data<int64_t>()[0] == 3);
  std::vector<float> stacked(12);
  for (int r = 0; r < 4; ++r)
    for (int s = 0; s < 3; ++s) stacked[r * 3 + s] = shrunk[s][r];
  CHECK(out[2].tensor.dims() == std::vector<int64_t>{4, 3});
  requireClose(valuesOf(out[2].tensor), stacked);
  CHECK(out[3].tensor.data<bool>()[0]);
  requireClose(valuesOf(out[4].tensor), extra);
}

TEST_CASE("control flow: an empty optional has no element and cannot be read", "[control_flow]") {
  // Built by testdata/gen/export_control_flow_models.py: libonnx 1.12's text syntax cannot
  // spell the type attribute an empty Optional needs.
  const std::string dir = std::string(FUSECTL_SOURCE_DIR) + "/testdata/models/control_flow/";
  auto has_model = loadModel(dir + "empty_optional_has.onnx");
  auto out = runModel(*has_model, {{"x", floats({2}, {1.f, 2.f})}});
  CHECK_FALSE(out[0].tensor.data<bool>()[0]);
  auto get_model = loadModel(dir + "empty_optional_get.onnx");
  try {
    runModel(*get_model, {{"x", floats({2}, {1.f, 2.f})}});
    FAIL("reading an empty optional did not fail");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("the optional input is empty"));
  }
}

// ---- models exported from PyTorch (testdata/gen/export_control_flow_models.py) ----

namespace {

std::string controlFlowModel(const std::string& file) {
  return std::string(FUSECTL_SOURCE_DIR) + "/testdata/models/control_flow/" + file;
}

// The greedy decoder by hand from the model's own weights: h = tanh(E[tok] W1^T + b1 + h W2),
// tok = argmax(h Wh^T + bh), for `steps` steps.
void greedyReference(const Model& model, std::vector<float> h, std::vector<int64_t> tokens,
                     int64_t steps, std::vector<int64_t>& all_tokens, std::vector<float>& h_out) {
  auto weight = [&](const std::string& name) {
    const Value* v = model.graph->findValue(name);
    REQUIRE(v);
    REQUIRE(v->initializer());
    HostTensor t = HostTensor::fromTensor(*v->initializer());
    return valuesOf(t);
  };
  const int V = 11, H = 8, B = 2;
  const std::vector<float> E = weight("embed.weight"), W1 = weight("input_proj.weight"),
                           b1 = weight("input_proj.bias"), Wh = weight("head.weight"),
                           bh = weight("head.bias");
  // state_proj has no bias; the exporter stores its weight transposed under a numeric name.
  std::vector<float> W2t;
  for (const Value* v : model.graph->initializers()) {
    if (v->name() != "embed.weight" && v->name().find('.') == std::string::npos) W2t = weight(v->name());
  }
  REQUIRE(W2t.size() == static_cast<size_t>(H * H));
  all_tokens.clear();
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<float> next(B * H);
    for (int b = 0; b < B; ++b) {
      for (int j = 0; j < H; ++j) {
        double acc = b1[j];
        for (int k = 0; k < H; ++k) acc += double(E[tokens[b] * H + k]) * W1[j * H + k];
        for (int k = 0; k < H; ++k) acc += double(h[b * H + k]) * W2t[k * H + j];
        next[b * H + j] = static_cast<float>(std::tanh(acc));
      }
      int best = 0;
      double best_logit = -1e30;
      for (int v = 0; v < V; ++v) {
        double logit = bh[v];
        for (int k = 0; k < H; ++k) logit += double(next[b * H + k]) * Wh[v * H + k];
        if (logit > best_logit) best_logit = logit, best = v;
      }
      tokens[b] = best;
      all_tokens.push_back(best);
    }
    h = next;
  }
  h_out = h;
}

}  // namespace

TEST_CASE("control flow: a torch.jit-scripted greedy decode loop runs as written",
          "[control_flow]") {
  LoadOptions load;
  auto model = loadModel(controlFlowModel("greedy_decode.onnx"), load);
  HostTensor tokens(DType::Int64, {2});
  tokens.mutableData<int64_t>()[0] = 1;
  tokens.mutableData<int64_t>()[1] = 7;
  const std::vector<float> h0 = ramp(16, -0.4f, 0.05f);
  Executor executor(*model);
  for (int64_t steps : {1, 6}) {
    INFO("steps = " << steps);
    auto out = executor.run({{"h", floats({2, 8}, h0)}, {"token", tokens}, {"steps", int64Scalar(steps)}});
    std::vector<int64_t> want_tokens;
    std::vector<float> want_h;
    greedyReference(*model, h0, {1, 7}, steps, want_tokens, want_h);
    REQUIRE(out[0].tensor.dims() == std::vector<int64_t>{steps, 2});
    CHECK(std::vector<int64_t>(out[0].tensor.data<int64_t>(),
                               out[0].tensor.data<int64_t>() + out[0].tensor.numel()) == want_tokens);
    requireClose(valuesOf(out[1].tensor), want_h);
  }
}

TEST_CASE("control flow: a torch.jit-scripted if on a tensor's sum takes either branch",
          "[control_flow]") {
  auto model = loadModel(controlFlowModel("branch_on_sum.onnx"));
  Executor executor(*model);
  auto weight = [&](const std::string& name) {
    const Value* v = model->graph->findValue(name);
    REQUIRE(v);
    return valuesOf(HostTensor::fromTensor(*v->initializer()));
  };
  for (float sign : {1.f, -1.f}) {
    INFO("sign " << sign);
    std::vector<float> x = ramp(18, 0.1f * sign, 0.03f * sign);
    auto out = executor.run({{"x", floats({3, 6}, x)}});
    const std::string layer = sign > 0 ? "pos" : "neg";
    const std::vector<float> W = weight(layer + ".weight"), b = weight(layer + ".bias");
    std::vector<float> want(18);
    for (int r = 0; r < 3; ++r) {
      for (int j = 0; j < 6; ++j) {
        double acc = b[j];
        for (int k = 0; k < 6; ++k) acc += double(x[r * 6 + k]) * W[j * 6 + k];
        want[r * 6 + j] = sign > 0 ? std::max(0.f, float(acc)) : float(acc) * 2.f;
      }
    }
    requireClose(valuesOf(out[0].tensor), want);
  }
}

TEST_CASE("control flow: fusectl run and onnxruntime agree on the exported loop and if models",
          "[.][ort][control_flow]") {
  namespace fs = std::filesystem;
  const test::OrtSetup ort = test::findOrtSetup();
  if (!ort.found) {
    WARN(ort.skip_reason);
    return;
  }
  const fs::path work = testing::processTempPath("fusectl_control_flow_models_ort");
  fs::remove_all(work);
  HostTensor tokens(DType::Int64, {2});
  tokens.mutableData<int64_t>()[0] = 3;
  tokens.mutableData<int64_t>()[1] = 5;
  struct Case {
    std::string file;
    std::vector<NamedTensor> inputs;
  };
  const std::vector<Case> cases = {
      {"greedy_decode.onnx",
       {{"h", floats({2, 8}, ramp(16, 0.3f, -0.04f))}, {"token", tokens}, {"steps", int64Scalar(7)}}},
      {"branch_on_sum.onnx", {{"x", floats({3, 6}, ramp(18, 0.5f, -0.02f))}}},
      {"branch_on_sum.onnx", {{"x", floats({3, 6}, ramp(18, -0.5f, 0.01f))}}},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    SECTION(cases[c].file + " #" + std::to_string(c)) {
      const fs::path file = controlFlowModel(cases[c].file);
      auto model = loadModel(file.string());
      std::vector<std::string> names;
      for (const Value* v : model->graph->outputs()) names.push_back(v->name());
      auto want = test::runOrt(ort, file, cases[c].inputs, names, work / std::to_string(c));
      // Through the CLI, as a user runs it: fusectl run --output-dir.
      std::string cmd = test::shellQuote(FUSECTL_BINARY) + " run " + test::shellQuote(file.string());
      fs::create_directories(work / std::to_string(c) / "fin");
      for (const NamedTensor& in : cases[c].inputs) {
        const std::string npy = (work / std::to_string(c) / "fin" / (in.name + ".npy")).string();
        writeNpy(in.tensor, npy);
        cmd += " --input " + test::shellQuote(in.name + "=" + npy);
      }
      const fs::path got_dir = work / std::to_string(c) / "fusectl";
      cmd += " --output-dir " + test::shellQuote(got_dir.string()) + " > /dev/null 2>&1";
      INFO(cmd);
      REQUIRE(std::system(cmd.c_str()) == 0);
      for (size_t i = 0; i < names.size(); ++i) {
        INFO("output " << names[i]);
        const HostTensor got = readNpy((got_dir / (test::outputFileStem(names[i]) + ".npy")).string());
        const HostTensor& ref = want[i].tensor;
        REQUIRE(got.dims() == ref.dims());
        REQUIRE(got.dtype() == ref.dtype());
        if (ref.dtype() == DType::Float) {
          requireClose(valuesOf(got), valuesOf(ref));
        } else {
          CHECK(std::memcmp(got.raw(), ref.raw(), ref.byteSize()) == 0);
        }
      }
    }
  }
}

TEST_CASE("control flow: run prints sequence and optional outputs and writes a file per element",
          "[control_flow][cli]") {
  // `fusectl run` printed a sequence output as "float[0]" with zero statistics.
  testing::TempDir dir("cf-seq-cli");
  const std::string model = controlFlowModel("sequence_out.onnx");
  const std::string x = dir / "x.npy", y = dir / "y.npy";
  HostTensor xt(DType::Float, {2}), yt(DType::Float, {3});
  const float xv[] = {1, 3}, yv[] = {-2, 0, 5};
  std::memcpy(xt.mutableData<float>(), xv, sizeof xv);
  std::memcpy(yt.mutableData<float>(), yv, sizeof yv);
  writeNpy(xt, x);
  writeNpy(yt, y);
  const std::string out_dir = dir / "out";
  const std::string cmd = test::shellQuote(FUSECTL_BINARY) + " run " + test::shellQuote(model) +
                          " --input x=" + test::shellQuote(x) + " --input y=" +
                          test::shellQuote(y) + " --output-dir " + test::shellQuote(out_dir) +
                          " > " + test::shellQuote(dir / "stdout") + " 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  const std::string printed = testing::slurp(dir / "stdout");
  INFO(printed);
  CHECK(printed.find("output s: sequence of 2 float tensors\n"
                     "  [0]: float[2] min 1 max 3 mean 2 ") != std::string::npos);
  CHECK(printed.find("  [1]: float[3] min -2 max 5 mean 1 ") != std::string::npos);
  CHECK(printed.find("output none: empty optional of float\n") != std::string::npos);
  CHECK(printed.find("none: an empty optional, no file written\n") != std::string::npos);
  const HostTensor first = readNpy(out_dir + "/s.0.npy");
  const HostTensor second = readNpy(out_dir + "/s.1.npy");
  REQUIRE(first.dims() == std::vector<int64_t>{2});
  REQUIRE(second.dims() == std::vector<int64_t>{3});
  CHECK(first.data<float>()[1] == 3.0f);
  CHECK(second.data<float>()[2] == 5.0f);
  CHECK(!std::filesystem::exists(out_dir + "/none.npy"));
}
