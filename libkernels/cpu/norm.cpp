// BatchNormalization, LayerNormalization and InstanceNormalization.
//
// Statistics are accumulated in double (float lanes over short blocks, vec_kernels.h), the
// normalization itself runs in float, vectorised. A float16/bfloat16 LayerNormalization rounds
// where its function body does (layerNormHalfRows), not once at the end.
// BatchNormalization in inference form folds each channel into y = x * a + b with
// a = scale / sqrt(var + eps), b = B - mean * a. Its training form (training_mode=1 at opset 14+,
// or the extra outputs of opsets 1-9) normalizes with the batch statistics and returns the
// running statistics mean' = mean * momentum + batch_mean * (1 - momentum) (same for var, with
// the population variance), as the ONNX reference does. spatial=0 (opsets 1-8) gives every
// element of a sample its own statistics: the parameters then have shape X.shape[1:].
#include <algorithm>
#include <cmath>
#include <vector>

#include "compute_common.h"
#include "vec_kernels.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

void requireFloat(const KernelContext& ctx, const HostTensor& x) {
  if (!isFloatComputeType(x.dtype())) {
    ctx.fail("unsupported element type " + std::string(dtypeName(x.dtype())));
  }
}

// Expands a tensor that broadcasts (numpy, right-aligned) to `target` into a dense vector.
std::vector<float> broadcastTo(const KernelContext& ctx, const FloatView& v,
                               const std::vector<int64_t>& dims,
                               const std::vector<int64_t>& target, const char* what) {
  const int64_t n = product(target);
  std::vector<float> out(static_cast<size_t>(n));
  if (v.size() == n) {
    std::copy(v.data(), v.data() + n, out.begin());
    return out;
  }
  if (dims.size() > target.size()) ctx.fail(std::string(what) + " has too many dims");
  const size_t off = target.size() - dims.size();
  std::vector<int64_t> stride(target.size(), 0);
  int64_t s = 1;
  for (int64_t i = static_cast<int64_t>(dims.size()) - 1; i >= 0; --i) {
    const int64_t t = target[off + i];
    if (dims[i] != 1 && dims[i] != t) {
      ctx.fail(std::string(what) + " is not broadcastable to the normalized shape");
    }
    stride[off + i] = dims[i] == 1 ? 0 : s;
    s *= dims[i];
  }
  std::vector<int64_t> idx(target.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t src = 0;
    for (size_t d = 0; d < target.size(); ++d) src += idx[d] * stride[d];
    out[static_cast<size_t>(i)] = v[src];
    for (int64_t d = static_cast<int64_t>(target.size()) - 1; d >= 0; --d) {
      if (++idx[d] < target[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

void runBatchNorm(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  requireFloat(ctx, x);
  if (x.rank() < 2) ctx.fail("X must have rank >= 2");
  const float eps = ctx.attrFloat("epsilon", 1e-5f);
  const float momentum = ctx.attrFloat("momentum", 0.9f);
  const int64_t opset = ctx.opset();
  const bool spatial = opset >= 9 || ctx.attrInt("spatial", 1) != 0;
  bool training = false;
  if (opset >= 14) {
    training = ctx.attrInt("training_mode", 0) != 0;
  } else {
    // Old versions return training statistics through outputs 1-4 when asked for them.
    for (size_t i = 1; i < ctx.numOutputs(); ++i) training = training || ctx.outputWanted(i);
    if (opset < 7 && ctx.attrInt("is_test", 0) != 0) training = false;
  }
  // The statistics outputs exist only in training mode (the spec leaves them unset otherwise).
  for (size_t i = 1; i < ctx.numOutputs() && !training; ++i) {
    if (ctx.outputWanted(i)) {
      ctx.fail(opset >= 14 ? "outputs after Y need training_mode=1"
                           : "outputs after Y need is_test=0");
    }
  }
  const int64_t N = x.dim(0), C = x.dim(1);
  const int64_t inner = product(x.dims(), 2);
  // Parameters per channel (spatial) or per element of a sample (spatial=0).
  const int64_t groups = spatial ? C : C * inner, per_group = spatial ? inner : 1;
  FloatView xf(x), scale(ctx.requireInput(1)), bias(ctx.requireInput(2)),
      mean(ctx.requireInput(3)), var(ctx.requireInput(4));
  for (const FloatView* p : {&scale, &bias, &mean, &var}) {
    if (p->size() != groups) {
      ctx.fail("scale, B, mean and var must have " + std::to_string(groups) + " values");
    }
  }
  std::vector<float> use_mean(mean.data(), mean.data() + groups);
  std::vector<float> use_var(var.data(), var.data() + groups);
  if (training) {
    std::vector<double> s(groups, 0.0), s2(groups, 0.0);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t g = 0; g < groups; ++g) {
        const float* p = xf.data() + n * C * inner + g * per_group;
        double a = 0;
        for (int64_t i = 0; i < per_group; ++i) a += p[i];
        s[g] += a;
      }
    }
    const double count = static_cast<double>(N * per_group);
    for (int64_t g = 0; g < groups; ++g) s[g] = count > 0 ? s[g] / count : 0.0;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t g = 0; g < groups; ++g) {
        const float* p = xf.data() + n * C * inner + g * per_group;
        double a = 0;
        for (int64_t i = 0; i < per_group; ++i) a += (p[i] - s[g]) * (p[i] - s[g]);
        s2[g] += a;
      }
    }
    for (int64_t g = 0; g < groups; ++g) {
      use_mean[g] = static_cast<float>(s[g]);
      use_var[g] = static_cast<float>(count > 0 ? s2[g] / count : 0.0);
    }
    const std::vector<int64_t> pdims = ctx.requireInput(3).dims();
    const DType ptype = ctx.requireInput(3).dtype();
    auto emit = [&](size_t index, auto value) {
      if (index >= ctx.numOutputs() || !ctx.outputWanted(index)) return;
      HostTensor& o = ctx.allocateOutput(index, ptype, pdims);
      FloatSink os(o);
      for (int64_t g = 0; g < groups; ++g) os.data()[g] = value(g);
      os.commit();
    };
    auto running_mean = [&](int64_t g) {
      return mean[g] * momentum + use_mean[g] * (1 - momentum);
    };
    auto running_var = [&](int64_t g) { return var[g] * momentum + use_var[g] * (1 - momentum); };
    emit(1, running_mean);
    emit(2, running_var);
    if (opset < 14) {
      emit(3, [&](int64_t g) { return use_mean[g]; });
      emit(4, [&](int64_t g) { return use_var[g]; });
    }
  }
  std::vector<float> a(groups), b(groups);
  for (int64_t g = 0; g < groups; ++g) {
    a[g] = static_cast<float>(scale[g] / std::sqrt(static_cast<double>(use_var[g]) + eps));
    b[g] = bias[g] - use_mean[g] * a[g];
  }
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), x.dims());
  FloatSink ys(y);
  parallelFor(N * groups, ctx.numThreads(), grainFor(per_group), [&](int64_t b0, int64_t b1) {
    for (int64_t t = b0; t < b1; ++t) {
      const int64_t n = t / groups, g = t % groups;
      const int64_t off = n * C * inner + g * per_group;
      vec::affine(xf.data() + off, ys.data() + off, per_group, a[g], b[g]);
    }
  });
  ys.commit();
}

// LayerNormalization on float16/bfloat16 rows, as its function body rounds: stage one in
// float32 (stash_type), then Cast(Normalized, to = T), then Mul(., Scale) and Add(., B) in T, one
// rounding each. Rounding only the final float32 y (FloatSink) differs from that by a half ulp
// on a quarter to a third of the elements. Each step is done in float32 and rounded to T: the
// product of two half values is exact in float32, and their float32 sum rounds to the same half
// value as the exact sum (24 >= 2p + 2 bits, p = 11 or 8), so this is the half arithmetic itself.
void layerNormHalfRows(const KernelContext& ctx, DType t, const float* x, uint16_t* y,
                       int64_t rows, int64_t cols, const float* scale, const float* bias,
                       float eps, float* means, float* inv_std) {
  // A unit scale and no bias make vec::layerNormRow return Normalized itself (the product by 1
  // is exact), with the statistics and the float32 Normalized of the float32 path.
  const std::vector<float> unit(static_cast<size_t>(cols), 1.0f);
  parallelFor(rows, ctx.numThreads(), grainFor(cols), [&](int64_t r0, int64_t r1) {
    std::vector<float> v(static_cast<size_t>(cols));
    for (int64_t r = r0; r < r1; ++r) {
      uint16_t* yr = y + r * cols;
      vec::layerNormRow(x + r * cols, v.data(), cols, unit.data(), nullptr, eps, &means[r],
                        &inv_std[r]);
      fromFloat(v.data(), t, yr, cols);
      toFloat(t, yr, v.data(), cols);
      for (int64_t j = 0; j < cols; ++j) v[j] *= scale[j];
      fromFloat(v.data(), t, yr, cols);
      if (!bias) continue;
      toFloat(t, yr, v.data(), cols);
      for (int64_t j = 0; j < cols; ++j) v[j] += bias[j];
      fromFloat(v.data(), t, yr, cols);
    }
  });
}

void runLayerNorm(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  requireFloat(ctx, x);
  const int64_t rank = static_cast<int64_t>(x.rank());
  int64_t axis = ctx.attrInt("axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) ctx.fail("axis out of range");
  const float eps = ctx.attrFloat("epsilon", 1e-5f);
  const std::vector<int64_t> norm_dims(x.dims().begin() + axis, x.dims().end());
  const int64_t rows = product(x.dims(), 0, axis), cols = product(norm_dims);
  const HostTensor& scale_t = ctx.requireInput(1);
  const HostTensor* bias_t = ctx.input(2);
  FloatView xf(x), sv(scale_t), bv(bias_t);
  const std::vector<float> scale = broadcastTo(ctx, sv, scale_t.dims(), norm_dims, "Scale");
  std::vector<float> bias;
  if (bias_t) bias = broadcastTo(ctx, bv, bias_t->dims(), norm_dims, "B");

  std::vector<int64_t> stat_dims(x.dims().begin(), x.dims().begin() + axis);
  stat_dims.resize(static_cast<size_t>(rank), 1);
  const DType stat_type = ctx.attrInt("stash_type", 1) == 16 ? DType::BFloat16 : DType::Float;
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), x.dims());
  std::vector<float> means(static_cast<size_t>(rows)), inv_std(static_cast<size_t>(rows));
  if (x.dtype() == DType::Float16 || x.dtype() == DType::BFloat16) {
    layerNormHalfRows(ctx, x.dtype(), xf.data(), y.mutableData<uint16_t>(), rows, cols,
                      scale.data(), bias.empty() ? nullptr : bias.data(), eps, means.data(),
                      inv_std.data());
  } else {
    FloatSink ys(y);
    parallelFor(rows, ctx.numThreads(), grainFor(cols), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        vec::layerNormRow(xf.data() + r * cols, ys.data() + r * cols, cols, scale.data(),
                          bias.empty() ? nullptr : bias.data(), eps, &means[r], &inv_std[r]);
      }
    });
    ys.commit();
  }
  for (size_t out = 1; out <= 2; ++out) {
    if (out >= ctx.numOutputs() || !ctx.outputWanted(out)) continue;
    HostTensor& t = ctx.allocateOutput(out, stat_type, stat_dims);
    fromFloat(out == 1 ? means.data() : inv_std.data(), stat_type, t.mutableRaw(), rows);
  }
}

void runInstanceNorm(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  requireFloat(ctx, x);
  if (x.rank() < 2) ctx.fail("X must have rank >= 2");
  const float eps = ctx.attrFloat("epsilon", 1e-5f);
  const int64_t N = x.dim(0), C = x.dim(1), inner = product(x.dims(), 2);
  FloatView xf(x), scale(ctx.requireInput(1)), bias(ctx.requireInput(2));
  if (scale.size() != C || bias.size() != C) {
    ctx.fail("scale and B must have one value per channel");
  }
  HostTensor& y = ctx.allocateOutput(0, x.dtype(), x.dims());
  FloatSink ys(y);
  parallelFor(N * C, ctx.numThreads(), grainFor(inner), [&](int64_t b0, int64_t b1) {
    for (int64_t t = b0; t < b1; ++t) {
      const int64_t c = t % C;
      const float* src = xf.data() + t * inner;
      const double m = inner > 0 ? vec::sum(src, inner) / inner : 0.0;
      const double s2 = vec::sumSquaredDeviations(src, inner, static_cast<float>(m));
      const double var = inner > 0 ? s2 / inner : 0.0;
      const float a = static_cast<float>(scale[c] / std::sqrt(var + eps));
      const float b = static_cast<float>(bias[c] - m * a);
      vec::affine(src, ys.data() + t * inner, inner, a, b);
    }
  });
  ys.commit();
}

}  // namespace
}  // namespace cpu

void registerNormKernels(KernelRegistry& r) {
  r.add({"", "BatchNormalization", 1, 1000, cpu::runBatchNorm});
  r.add({"", "LayerNormalization", 17, 1000, cpu::runLayerNorm});
  r.add({"", "InstanceNormalization", 1, 1000, cpu::runInstanceNorm});
}

}  // namespace fusectl::kernels
