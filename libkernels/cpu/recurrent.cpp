// RNN, GRU and LSTM (opsets 7-22), forward, reverse or bidirectional, with sequence_lens,
// initial states, peepholes, clip, layout and custom activations.
//
// Per direction and time step, with gates packed in W/R/B in the ONNX order (GRU z, r, h; LSTM
// i, o, f, c) and x = X_t W^T + Wb, hr = H_{t-1} R^T + Rb:
//   RNN:  H = f(x + hr)
//   GRU:  z = f(x_z + hr_z), r = f(x_r + hr_r),
//         h = g(x_h + (r * H_{t-1}) R_h^T + Rb_h)    (linear_before_reset=0)
//         h = g(x_h + r * hr_h)                      (linear_before_reset=1)
//         H = (1 - z) * h + z * H_{t-1}
//   LSTM: i = f(x_i + hr_i + P_i * C_{t-1}), f = f(x_f + hr_f + P_f * C_{t-1}) (or 1 - i with
//         input_forget), c = g(x_c + hr_c), C = f * C_{t-1} + i * c,
//         o = f(x_o + hr_o + P_o * C), H = o * h(C)
// clip bounds every gate's pre-activation. A batch entry past its sequence length produces zero
// outputs and keeps its state, so Y_h / Y_c hold its last valid step. The reverse direction
// walks each entry's valid steps backward. Computed in float, the products by the GEMM: X W^T
// for every step at once (one product a direction), H R^T each step against R packed once per
// session (packedRecurrence). (Until 2026-12-06 every product was a scalar loop summing in double and each
// activation compared names per element: torchaudio's DeepSpeech, one bidirectional RNN of 512
// over 100 steps, took 87 ms where ONNX Runtime takes 5.6; now 8.9. torch.nn's 2-layer
// bidirectional LSTM and GRU of 128 over 20 steps: 15.7 -> 1.9 and 11.8 -> 1.3 ms.)
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"
#include "dtype_dispatch.h"
#include "gemm_micro.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

enum class Cell { Rnn, Gru, Lstm };

// One of the ONNX recurrent activations, its name resolved once (readActivations): the
// function runs once per gate and element, where comparing names each time cost more than the
// arithmetic.
struct Activation {
  enum Kind { Tanh, Sigmoid, Relu, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid,
              Elu, Softsign, Softplus };
  std::string name;
  float alpha = 0, beta = 0;
  Kind kind = Tanh;
  float operator()(float v) const {
    switch (kind) {
      case Tanh: return std::tanh(v);
      case Sigmoid: return 1.0f / (1.0f + std::exp(-v));
      case Relu: return std::max(v, 0.0f);
      case Affine: return alpha * v + beta;
      case LeakyRelu: return v >= 0 ? v : alpha * v;
      case ThresholdedRelu: return v > alpha ? v : 0.0f;
      case ScaledTanh: return alpha * std::tanh(beta * v);
      case HardSigmoid: return std::clamp(alpha * v + beta, 0.0f, 1.0f);
      case Elu: return v >= 0 ? v : alpha * (std::exp(v) - 1);
      case Softsign: return v / (1 + std::fabs(v));
      case Softplus: break;
    }
    return std::log1p(std::exp(v));
  }
};

// The activations of every direction: `per_dir` functions each, from the attributes (names are
// matched case-insensitively; alpha/beta are consumed in order by the functions that take them).
std::vector<Activation> readActivations(const KernelContext& ctx, size_t per_dir, size_t dirs,
                                        const std::vector<std::string>& defaults) {
  std::vector<std::string> names;
  if (const Attribute* a = ctx.node().attr("activations")) names = a->strings;
  if (names.empty())
    for (size_t d = 0; d < dirs; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
  if (names.size() != per_dir * dirs)
    ctx.fail(
        fmt::format("activations lists {} functions, expected {}", names.size(), per_dir * dirs));
  const std::vector<float> alphas = ctx.attrFloats("activation_alpha");
  const std::vector<float> betas = ctx.attrFloats("activation_beta");
  size_t ai = 0, bi = 0;
  std::vector<Activation> acts;
  for (std::string n : names) {
    static const char* kKnown[] = {"Tanh",      "Sigmoid",         "Relu",       "Affine",
                                   "LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid",
                                   "Elu",       "Softsign",        "Softplus"};
    std::string canonical;
    size_t kind = 0;
    for (size_t i = 0; i < std::size(kKnown); ++i) {
      std::string lk = kKnown[i], ln = n;
      std::transform(lk.begin(), lk.end(), lk.begin(), ::tolower);
      std::transform(ln.begin(), ln.end(), ln.begin(), ::tolower);
      if (lk == ln) {
        canonical = kKnown[i];
        kind = i;
      }
    }
    if (canonical.empty()) ctx.fail(fmt::format("unknown activation '{}'", n));
    Activation act{canonical};
    act.kind = static_cast<Activation::Kind>(kind);  // kKnown lists the Kinds in order
    const bool takes_alpha = canonical == "Affine" || canonical == "LeakyRelu" ||
                             canonical == "ThresholdedRelu" || canonical == "ScaledTanh" ||
                             canonical == "HardSigmoid" || canonical == "Elu";
    const bool takes_beta =
        canonical == "Affine" || canonical == "ScaledTanh" || canonical == "HardSigmoid";
    const float def_alpha = canonical == "LeakyRelu"     ? 0.01f
                            : canonical == "HardSigmoid" ? 0.2f
                                                         : 1.0f;
    const float def_beta = canonical == "HardSigmoid" ? 0.5f : 0.0f;
    act.alpha = takes_alpha ? (ai < alphas.size() ? alphas[ai++] : def_alpha) : 0.0f;
    act.beta = takes_beta ? (bi < betas.size() ? betas[bi++] : def_beta) : 0.0f;
    acts.push_back(act);
  }
  return acts;
}

// y[b, j] = sum_k x[b, k] * w[j, k] for b < batch, j < rows: the GEMM with w read transposed,
// from `packed` (packedRecurrence) where given.
void matmulT(const float* x, const float* w, float* y, int64_t batch, int64_t rows, int64_t k,
             const PackedMatrix* packed = nullptr) {
  GemmParams p = gemmParams(batch, rows, k, x, k, false, w, k, true, y, rows);
  p.packed_b = packed;
  gemm(p, 1);
}

// R^T packed as the recurrent product's B operand, per direction (then GRU's R_h^T on its own
// for (r * H) R_h^T): once per session for a constant R, kept in the node's state (its bytes,
// dims and the micro-kernel checked as cachedPackedWeights checks them; R itself stays, since
// the state is no copy of it), per run otherwise.
struct PackedRecurrence : KernelState {
  const void* source = nullptr;
  std::vector<int64_t> dims;
  std::vector<PackedMatrix> r, rh;
};

const PackedRecurrence& packedRecurrence(KernelContext& ctx, const float* r, int64_t dirs,
                                         int64_t gh, int64_t hidden, bool gru_rh,
                                         std::unique_ptr<PackedRecurrence>& per_run) {
  const HostTensor* t = ctx.input(2);
  const bool constant = ctx.inputIsConstant(2);
  if (auto* s = constant ? dynamic_cast<PackedRecurrence*>(ctx.state()) : nullptr) {
    bool fresh = s->source == t->identity() && s->dims == t->dims() && s->rh.empty() != gru_rh;
    for (const PackedMatrix& m : s->r) fresh = fresh && packedForCurrentKernel(m);
    for (const PackedMatrix& m : s->rh) fresh = fresh && packedForCurrentKernel(m);
    if (fresh) return *s;
  }
  auto made = std::make_unique<PackedRecurrence>();
  made->source = t->identity();
  made->dims = t->dims();
  for (int64_t d = 0; d < dirs; ++d) {
    const float* R = r + d * gh * hidden;
    made->r.push_back(packGemmB(hidden, gh, R, 1, hidden));
    if (gru_rh) made->rh.push_back(packGemmB(hidden, hidden, R + 2 * hidden * hidden, 1, hidden));
  }
  // The GEMM falls back to the source only for another micro-kernel; a converted (half) R is a
  // copy that ends with this run, so the cached panels forget it (a stale cache is repacked).
  if (constant) {
    for (PackedMatrix& m : made->r) m.source = nullptr;
    for (PackedMatrix& m : made->rh) m.source = nullptr;
    const PackedRecurrence& result = *made;
    ctx.setState(std::move(made));
    return result;
  }
  per_run = std::move(made);
  return *per_run;
}

void recurrentKernel(KernelContext& ctx, Cell cell) {
  const HostTensor& x_t = ctx.requireInput(0);
  const HostTensor& w_t = ctx.requireInput(1);
  const HostTensor& r_t = ctx.requireInput(2);
  if (!isFloatComputeType(x_t.dtype())) ctx.fail("X must be a float tensor");
  if (x_t.rank() != 3 || w_t.rank() != 3 || r_t.rank() != 3)
    ctx.fail("X, W and R must have rank 3");
  const int64_t layout = ctx.attrInt("layout", 0);
  const std::string direction = ctx.attrString("direction", "forward");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    ctx.fail(fmt::format("unknown direction '{}'", direction));
  const int64_t gates = cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 3 : 4;
  const int64_t seq = layout ? x_t.dim(1) : x_t.dim(0);
  const int64_t batch = layout ? x_t.dim(0) : x_t.dim(1);
  const int64_t input = x_t.dim(2);
  const int64_t hidden = ctx.attrInt("hidden_size", r_t.dim(2));
  // hidden_size comes from the file: gates * hidden must not overflow before the comparisons.
  if (hidden <= 0 || hidden > r_t.dim(1))
    ctx.fail(fmt::format("hidden_size {} does not fit R dims {}", hidden, formatDims(r_t.dims())));
  if (w_t.dim(0) != dirs || w_t.dim(1) != gates * hidden || w_t.dim(2) != input)
    ctx.fail(fmt::format("W dims {} do not fit {} directions, hidden size {}, input size {}",
                         formatDims(w_t.dims()), dirs, hidden, input));
  if (r_t.dim(0) != dirs || r_t.dim(1) != gates * hidden || r_t.dim(2) != hidden)
    ctx.fail(fmt::format("R dims {} do not fit hidden size {}", formatDims(r_t.dims()), hidden));
  const float clip = ctx.attrFloat("clip", 0.0f);
  const bool has_clip = ctx.node().hasAttr("clip");
  const bool linear_before_reset = ctx.attrInt("linear_before_reset", 0) != 0;
  const bool input_forget = ctx.attrInt("input_forget", 0) != 0;
  const size_t per_dir = cell == Cell::Rnn ? 1 : cell == Cell::Gru ? 2 : 3;
  const std::vector<Activation> acts =
      readActivations(ctx, per_dir, static_cast<size_t>(dirs),
                      cell == Cell::Rnn   ? std::vector<std::string>{"Tanh"}
                      : cell == Cell::Gru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                          : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"});

  auto optional = [&](size_t i) -> const HostTensor* {
    const HostTensor* t = ctx.input(i);
    return t && t->numel() > 0 ? t : nullptr;
  };
  const HostTensor* b_t = optional(3);
  const HostTensor* lens_t = optional(4);
  const HostTensor* h0_t = optional(5);
  const HostTensor* c0_t = cell == Cell::Lstm ? optional(6) : nullptr;
  const HostTensor* p_t = cell == Cell::Lstm ? optional(7) : nullptr;
  if (b_t && b_t->numel() != dirs * 2 * gates * hidden)
    ctx.fail("B must have shape [dirs, 2*G*hidden]");
  if (p_t && p_t->numel() != dirs * 3 * hidden) ctx.fail("P must have shape [dirs, 3*hidden]");
  const int64_t state_size = dirs * batch * hidden;
  if (h0_t && h0_t->numel() != state_size) ctx.fail("initial_h has the wrong size");
  if (c0_t && c0_t->numel() != state_size) ctx.fail("initial_c has the wrong size");
  std::vector<int64_t> lens(static_cast<size_t>(batch), seq);
  if (lens_t) {
    lens = kutil::readInts(ctx, *lens_t);
    if (static_cast<int64_t>(lens.size()) != batch)
      ctx.fail("sequence_lens must have shape [batch]");
    for (int64_t l : lens)
      if (l < 0 || l > seq) ctx.fail(fmt::format("sequence length {} is outside [0, {}]", l, seq));
  }

  FloatView xv(x_t), wv(w_t), rv(r_t), bv(b_t), h0v(h0_t), c0v(c0_t), pv(p_t);
  // States laid out [dir, batch, hidden] whatever the layout; converted on the way in and out.
  auto stateIndex = [&](int64_t d, int64_t b, int64_t j) {
    return layout ? (b * dirs + d) * hidden + j : (d * batch + b) * hidden + j;
  };
  std::vector<float> h(static_cast<size_t>(state_size), 0.0f), c(h.size(), 0.0f);
  for (int64_t d = 0; d < dirs; ++d)
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t j = 0; j < hidden; ++j) {
        const size_t i = static_cast<size_t>((d * batch + b) * hidden + j);
        if (h0_t) h[i] = h0v[stateIndex(d, b, j)];
        if (c0_t) c[i] = c0v[stateIndex(d, b, j)];
      }
  std::vector<float> y(static_cast<size_t>(seq * dirs * batch * hidden), 0.0f);
  const int64_t gh = gates * hidden;
  std::vector<float> xg(static_cast<size_t>(batch * gh)), hg(xg.size()),
      hprev(static_cast<size_t>(batch * hidden)), rh(hprev.size()), rhh(hprev.size());
  auto clipped = [&](float v) { return has_clip ? std::clamp(v, -clip, clip) : v; };

  // X W^T for every time step at once (one GEMM a direction instead of a product per step),
  // rows in X's own order: t * batch + b, or b * seq + t with layout 1.
  std::vector<float> xw(static_cast<size_t>(seq * batch * gh));
  const bool gru_rh = cell == Cell::Gru && !linear_before_reset;
  std::unique_ptr<PackedRecurrence> per_run;
  const PackedRecurrence& packed =
      packedRecurrence(ctx, rv.data(), dirs, gh, hidden, gru_rh, per_run);
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const float* W = wv.data() + d * gh * input;
    const float* R = rv.data() + d * gh * hidden;
    matmulT(xv.data(), W, xw.data(), seq * batch, gh, input);
    const PackedMatrix& packed_r = packed.r[static_cast<size_t>(d)];
    const float* Wb = b_t ? bv.data() + d * 2 * gh : nullptr;
    const float* Rb = b_t ? Wb + gh : nullptr;
    const float* P = p_t ? pv.data() + d * 3 * hidden : nullptr;
    const Activation* act = acts.data() + d * static_cast<int64_t>(per_dir);
    float* H = h.data() + d * batch * hidden;
    float* C = c.data() + d * batch * hidden;
    for (int64_t step = 0; step < seq; ++step) {
      // Each batch entry reads its own time index: reverse walks its valid steps backward.
      // An entry past its length reads nothing (its outputs are skipped below).
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t len = lens[static_cast<size_t>(b)];
        const int64_t t = reverse ? len - 1 - step : step;
        float* row = xg.data() + b * gh;
        if (step < len) {
          const float* src = xw.data() + (layout ? b * seq + t : t * batch + b) * gh;
          std::copy(src, src + gh, row);
        } else {
          std::fill(row, row + gh, 0.0f);
        }
      }
      matmulT(H, R, hg.data(), batch, gh, hidden, &packed_r);
      std::copy(H, H + batch * hidden, hprev.begin());
      if (gru_rh) {
        // (r * H_{t-1}) R_h^T needs r first.
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t j = 0; j < hidden; ++j) {
            const int64_t g = b * gh + hidden + j;
            const float r =
                act[0](clipped(xg[g] + hg[g] + (Wb ? Wb[hidden + j] + Rb[hidden + j] : 0)));
            rh[static_cast<size_t>(b * hidden + j)] =
                r * hprev[static_cast<size_t>(b * hidden + j)];
          }
        matmulT(rh.data(), R + 2 * hidden * hidden, rhh.data(), batch, hidden, hidden,
                &packed.rh[static_cast<size_t>(d)]);
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t j = 0; j < hidden; ++j)
            hg[static_cast<size_t>(b * gh + 2 * hidden + j)] =
                rhh[static_cast<size_t>(b * hidden + j)];
      }
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t len = lens[static_cast<size_t>(b)];
        if (step >= len) continue;
        const int64_t t = reverse ? len - 1 - step : step;
        for (int64_t j = 0; j < hidden; ++j) {
          auto pre = [&](int64_t gate) {
            const int64_t g = b * gh + gate * hidden + j;
            return xg[g] + hg[g] + (Wb ? Wb[gate * hidden + j] + Rb[gate * hidden + j] : 0.0f);
          };
          const size_t s = static_cast<size_t>(b * hidden + j);
          float out = 0;
          if (cell == Cell::Rnn) {
            out = act[0](clipped(pre(0)));
          } else if (cell == Cell::Gru) {
            const float z = act[0](clipped(pre(0)));
            float hh;
            if (linear_before_reset) {
              const float r = act[0](clipped(pre(1)));
              const int64_t g = b * gh + 2 * hidden + j;
              const float hr = hg[g] + (Rb ? Rb[2 * hidden + j] : 0.0f);
              hh = act[1](clipped(xg[g] + (Wb ? Wb[2 * hidden + j] : 0.0f) + r * hr));
            } else {
              hh = act[1](clipped(pre(2)));
            }
            out = (1 - z) * hh + z * hprev[s];
          } else {
            const float cprev = C[s];
            const float i = act[0](clipped(pre(0) + (P ? P[j] * cprev : 0.0f)));
            const float f = input_forget
                                ? 1 - i
                                : act[0](clipped(pre(2) + (P ? P[2 * hidden + j] * cprev : 0.0f)));
            const float cc = act[1](clipped(pre(3)));
            const float cnew = f * cprev + i * cc;
            const float o = act[0](clipped(pre(1) + (P ? P[hidden + j] * cnew : 0.0f)));
            C[s] = cnew;
            out = o * act[2](cnew);
          }
          H[s] = out;
          const int64_t yi = layout ? ((b * seq + t) * dirs + d) * hidden + j
                                    : ((t * dirs + d) * batch + b) * hidden + j;
          y[static_cast<size_t>(yi)] = out;
        }
      }
    }
  }
  auto write = [&](size_t index, const std::vector<float>& v, std::vector<int64_t> dims,
                   bool is_state) {
    if (ctx.numOutputs() <= index || !ctx.outputWanted(index)) return;
    HostTensor& out = ctx.allocateOutput(index, x_t.dtype(), dims);
    std::vector<float> tmp(v.size());
    if (is_state) {
      for (int64_t d = 0; d < dirs; ++d)
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t j = 0; j < hidden; ++j)
            tmp[static_cast<size_t>(stateIndex(d, b, j))] =
                v[static_cast<size_t>((d * batch + b) * hidden + j)];
    } else {
      tmp = v;
    }
    fromFloat(tmp.data(), x_t.dtype(), out.mutableRaw(), out.numel());
  };
  write(0, y,
        layout ? std::vector<int64_t>{batch, seq, dirs, hidden}
               : std::vector<int64_t>{seq, dirs, batch, hidden},
        false);
  const std::vector<int64_t> state_dims = layout ? std::vector<int64_t>{batch, dirs, hidden}
                                                 : std::vector<int64_t>{dirs, batch, hidden};
  write(1, h, state_dims, true);
  if (cell == Cell::Lstm) write(2, c, state_dims, true);
}

}  // namespace
}  // namespace cpu

void registerRecurrentKernels(KernelRegistry& r) {
  r.add({"", "RNN", 1, 1000, [](KernelContext& c) { cpu::recurrentKernel(c, cpu::Cell::Rnn); }});
  r.add({"", "GRU", 1, 1000, [](KernelContext& c) { cpu::recurrentKernel(c, cpu::Cell::Gru); }});
  r.add({"", "LSTM", 1, 1000, [](KernelContext& c) { cpu::recurrentKernel(c, cpu::Cell::Lstm); }});
}

}  // namespace fusectl::kernels
