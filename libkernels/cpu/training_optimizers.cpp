// The optimizer steps of ai.onnx.preview.training: Adagrad, Momentum and Adam. Each takes the
// learning rate R and step count T, then n tensors X, their gradients G and their optimizer
// states, and returns the updated X followed by the updated states (the formulas are in each
// kernel, as the operator docs state them). Computed in double, stored in each input's dtype.
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"
#include "dtype_dispatch.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

// One optimized tensor's inputs: X, G and `states` state tensors, as doubles.
struct Slot {
  std::vector<double> x, g;
  std::vector<std::vector<double>> state;
};

std::vector<double> readDoubles(const HostTensor& t) {
  FloatView v(t);
  return std::vector<double>(v.data(), v.data() + v.size());
}

// Splits inputs 2.. into n groups of (X, G, states...) and checks their sizes.
std::vector<Slot> readSlots(const KernelContext& ctx, size_t states) {
  const size_t per = 2 + states;
  if (ctx.numInputs() < 2 + per || (ctx.numInputs() - 2) % per != 0)
    ctx.fail(fmt::format("expects R, T and groups of {} tensors", per));
  const size_t n = (ctx.numInputs() - 2) / per;
  std::vector<Slot> slots(n);
  for (size_t i = 0; i < n; ++i) {
    const HostTensor& x = ctx.requireInput(2 + i);
    slots[i].x = readDoubles(x);
    slots[i].g = readDoubles(ctx.requireInput(2 + n + i));
    for (size_t s = 0; s < states; ++s)
      slots[i].state.push_back(readDoubles(ctx.requireInput(2 + (2 + s) * n + i)));
    if (slots[i].g.size() != slots[i].x.size())
      ctx.fail(fmt::format("X{} and its gradient differ in size", i));
    for (const auto& st : slots[i].state)
      if (st.size() != slots[i].x.size())
        ctx.fail(fmt::format("X{} and its state differ in size", i));
  }
  return slots;
}

// Output k * n + i from input 2 + k * n + i's dims and dtype.
void writeOutput(KernelContext& ctx, size_t out_index, size_t like_input,
                 const std::vector<double>& v) {
  if (out_index >= ctx.numOutputs() || !ctx.outputWanted(out_index)) return;
  const HostTensor& like = ctx.requireInput(like_input);
  HostTensor& out = ctx.allocateOutput(out_index, like.dtype(), like.dims());
  const std::vector<float> f(v.begin(), v.end());
  fromFloat(f.data(), like.dtype(), out.mutableRaw(), out.numel());
}

// r = R / (1 + T * decay_factor); G' = norm_coefficient * X + G; H' = H + G'^2;
// X' = X - r * G' / (sqrt(H') + epsilon).
void adagradKernel(KernelContext& ctx) {
  const double R = kutil::readScalar(ctx, ctx.requireInput(0));
  const double T = kutil::readScalar(ctx, ctx.requireInput(1));
  const double decay = ctx.attrFloat("decay_factor", 0), eps = ctx.attrFloat("epsilon", 1e-6f),
               norm = ctx.attrFloat("norm_coefficient", 0);
  std::vector<Slot> slots = readSlots(ctx, 1);
  const double r = R / (1 + T * decay);
  const size_t n = slots.size();
  for (size_t i = 0; i < n; ++i) {
    Slot& s = slots[i];
    for (size_t e = 0; e < s.x.size(); ++e) {
      const double g = norm * s.x[e] + s.g[e];
      s.state[0][e] += g * g;
      s.x[e] -= r * g / (std::sqrt(s.state[0][e]) + eps);
    }
    writeOutput(ctx, i, 2 + i, s.x);
    writeOutput(ctx, n + i, 2 + 2 * n + i, s.state[0]);
  }
}

// G' = norm_coefficient * X + G; V' = alpha * V + beta' * G' with beta' = beta after the first
// step (T > 0) and 1 on it; standard: X' = X - R * V', nesterov: X' = X - R * (G' + alpha * V').
void momentumKernel(KernelContext& ctx) {
  const double R = kutil::readScalar(ctx, ctx.requireInput(0));
  const double T = kutil::readScalar(ctx, ctx.requireInput(1));
  const double alpha = ctx.attrFloat("alpha", 0), beta = ctx.attrFloat("beta", 0),
               norm = ctx.attrFloat("norm_coefficient", 0);
  const std::string mode = ctx.attrString("mode", "standard");
  if (mode != "standard" && mode != "nesterov") ctx.fail(fmt::format("unknown mode '{}'", mode));
  std::vector<Slot> slots = readSlots(ctx, 1);
  const double beta_adj = T > 0 ? beta : 1.0;
  const size_t n = slots.size();
  for (size_t i = 0; i < n; ++i) {
    Slot& s = slots[i];
    for (size_t e = 0; e < s.x.size(); ++e) {
      const double g = norm * s.x[e] + s.g[e];
      double& v = s.state[0][e];
      v = alpha * v + beta_adj * g;
      s.x[e] -= mode == "standard" ? R * v : R * (g + alpha * v);
    }
    writeOutput(ctx, i, 2 + i, s.x);
    writeOutput(ctx, n + i, 2 + 2 * n + i, s.state[0]);
  }
}

// G' = norm_coefficient * X + G; V' = alpha V + (1 - alpha) G'; H' = beta H + (1 - beta) G'^2;
// R' = R sqrt(1 - beta^T) / (1 - alpha^T) when T > 0, else R;
// X' = (1 - norm_coefficient_post) * (X - R' V' / (sqrt(H') + epsilon)).
void adamKernel(KernelContext& ctx) {
  const double R = kutil::readScalar(ctx, ctx.requireInput(0));
  const double T = kutil::readScalar(ctx, ctx.requireInput(1));
  const double alpha = ctx.attrFloat("alpha", 0.9f), beta = ctx.attrFloat("beta", 0.999f),
               eps = ctx.attrFloat("epsilon", 1e-6f), norm = ctx.attrFloat("norm_coefficient", 0),
               post = ctx.attrFloat("norm_coefficient_post", 0);
  std::vector<Slot> slots = readSlots(ctx, 2);
  const double r = T > 0 ? R * std::sqrt(1 - std::pow(beta, T)) / (1 - std::pow(alpha, T)) : R;
  const size_t n = slots.size();
  for (size_t i = 0; i < n; ++i) {
    Slot& s = slots[i];
    for (size_t e = 0; e < s.x.size(); ++e) {
      const double g = norm * s.x[e] + s.g[e];
      double& v = s.state[0][e];
      double& h = s.state[1][e];
      v = alpha * v + (1 - alpha) * g;
      h = beta * h + (1 - beta) * g * g;
      s.x[e] = (1 - post) * (s.x[e] - r * v / (std::sqrt(h) + eps));
    }
    writeOutput(ctx, i, 2 + i, s.x);
    writeOutput(ctx, n + i, 2 + 2 * n + i, s.state[0]);
    writeOutput(ctx, 2 * n + i, 2 + 3 * n + i, s.state[1]);
  }
}

}  // namespace
}  // namespace cpu

void registerTrainingOptimizerKernels(KernelRegistry& r) {
  const char* domain = "ai.onnx.preview.training";
  r.add({domain, "Adagrad", 1, 1000, cpu::adagradKernel});
  r.add({domain, "Momentum", 1, 1000, cpu::momentumKernel});
  r.add({domain, "Adam", 1, 1000, cpu::adamKernel});
}

}  // namespace fusectl::kernels
