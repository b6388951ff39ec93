// Signal processing: DFT, STFT, the Hann, Hamming and Blackman windows and MelWeightMatrix.
//
// DFT transforms one axis of a real ([..., 1]) or complex ([..., 2]) signal:
// X[k] = sum_t x[t] exp(-2 pi i k t / n), inverse with +i and a 1/n scale. dft_length n pads
// with zeros or truncates the axis; onesided keeps bins [0, n/2] (with inverse: irfft, below). The
// transform is the direct O(n^2) sum in double, with k*t reduced mod n before the angle is formed,
// so long signals keep their precision; the node-test and exporter sizes are small. STFT is the
// same transform over frames of frame_length at frame_step, each multiplied by the window.
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"
#include "dtype_dispatch.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

constexpr double kPi = 3.14159265358979323846;

// out[k] for k < bins of the n-point DFT of in (complex pairs, length n, zero-padded already).
void dft(const double* in, int64_t n, int64_t bins, bool inverse, double* out) {
  const double sign = inverse ? 1.0 : -1.0;
  for (int64_t k = 0; k < bins; ++k) {
    double re = 0, im = 0;
    for (int64_t t = 0; t < n; ++t) {
      const double angle =
          sign * 2 * kPi * static_cast<double>((k * t) % n) / static_cast<double>(n);
      const double c = std::cos(angle), s = std::sin(angle);
      re += in[2 * t] * c - in[2 * t + 1] * s;
      im += in[2 * t] * s + in[2 * t + 1] * c;
    }
    if (inverse) {
      re /= static_cast<double>(n);
      im /= static_cast<double>(n);
    }
    out[2 * k] = re;
    out[2 * k + 1] = im;
  }
}

int64_t optionalScalar(const KernelContext& ctx, size_t i, int64_t def) {
  const HostTensor* t = ctx.input(i);
  return t && t->numel() > 0 ? kutil::readIntScalar(ctx, *t) : def;
}

void dftKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (!isFloatComputeType(x.dtype())) ctx.fail("input must be a float tensor");
  const int64_t rank = static_cast<int64_t>(x.rank());
  if (rank < 3 || (x.dims().back() != 1 && x.dims().back() != 2))
    ctx.fail(fmt::format("input dims {} must be [batch, ..., 1 or 2]", formatDims(x.dims())));
  int64_t axis = ctx.opset() >= 20 ? optionalScalar(ctx, 2, -2) : ctx.attrInt("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 1 || axis > rank - 2)
    ctx.fail(fmt::format("axis {} is not a signal axis of rank-{} input", axis, rank));
  const size_t ax = static_cast<size_t>(axis);
  const int64_t len = x.dim(ax);
  const bool inverse = ctx.attrInt("inverse", 0) != 0;
  const bool onesided = ctx.attrInt("onesided", 0) != 0;
  // An inverse one-sided transform reads bins [0, n/2] of a Hermitian spectrum and returns a
  // real signal of n = 2 (len - 1) samples (irfft); the missing bins are X[k] = conj(X[n - k]).
  const bool irfft = inverse && onesided;
  const int64_t n = optionalScalar(ctx, 1, irfft ? 2 * (len - 1) : len);
  if (n < 1) ctx.fail(fmt::format("dft_length {} must be positive", n));
  const int64_t bins = irfft || !onesided ? n : n / 2 + 1;
  const bool complex_in = x.dims().back() == 2;

  std::vector<int64_t> out_dims = x.dims();
  out_dims[ax] = bins;
  out_dims.back() = irfft ? 1 : 2;
  const int64_t out_comp = out_dims.back();
  const int64_t outer = product(x.dims(), 0, ax);
  const int64_t inner = product(x.dims(), ax + 1, x.rank() - 1);  // between axis and last
  const int64_t comp = x.dims().back();
  FloatView xv(x);
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), out_dims);
  FloatSink sink(out);
  std::vector<double> sig(static_cast<size_t>(2 * n)), spec(static_cast<size_t>(2 * bins));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      std::fill(sig.begin(), sig.end(), 0.0);
      for (int64_t t = 0; t < std::min(n, len); ++t) {
        const float* p = xv.data() + ((o * len + t) * inner + i) * comp;
        sig[static_cast<size_t>(2 * t)] = p[0];
        sig[static_cast<size_t>(2 * t + 1)] = complex_in ? p[1] : 0.0;
      }
      if (irfft) {
        for (int64_t k = len; k < n; ++k) {
          if (n - k >= len) continue;
          sig[static_cast<size_t>(2 * k)] = sig[static_cast<size_t>(2 * (n - k))];
          sig[static_cast<size_t>(2 * k + 1)] = -sig[static_cast<size_t>(2 * (n - k) + 1)];
        }
      }
      dft(sig.data(), n, bins, inverse, spec.data());
      for (int64_t k = 0; k < bins; ++k) {
        float* q = sink.data() + ((o * bins + k) * inner + i) * out_comp;
        for (int64_t c = 0; c < out_comp; ++c)
          q[c] = static_cast<float>(spec[static_cast<size_t>(2 * k + c)]);
      }
    }
  }
  sink.commit();
}

void stftKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (!isFloatComputeType(x.dtype())) ctx.fail("signal must be a float tensor");
  if (x.rank() != 3 || (x.dim(2) != 1 && x.dim(2) != 2))
    ctx.fail(fmt::format("signal dims {} must be [batch, length, 1 or 2]", formatDims(x.dims())));
  const int64_t step = optionalScalar(ctx, 1, 0);
  const HostTensor* window = ctx.input(2) && ctx.input(2)->numel() > 0 ? ctx.input(2) : nullptr;
  const int64_t frame = optionalScalar(ctx, 3, window ? window->numel() : 0);
  if (step < 1) ctx.fail("frame_step must be positive");
  if (frame < 1) ctx.fail("frame_length (or a window) is required");
  if (window && window->numel() != frame) ctx.fail("window length must equal frame_length");
  const int64_t batch = x.dim(0), len = x.dim(1), comp = x.dim(2);
  if (frame > len) ctx.fail("frame_length exceeds the signal length");
  const int64_t frames = 1 + (len - frame) / step;
  const bool onesided = ctx.attrInt("onesided", 1) != 0;
  const int64_t bins = onesided ? frame / 2 + 1 : frame;
  FloatView xv(x), wv(window);
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), {batch, frames, bins, 2});
  FloatSink sink(out);
  std::vector<double> sig(static_cast<size_t>(2 * frame)), spec(static_cast<size_t>(2 * bins));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t f = 0; f < frames; ++f) {
      for (int64_t t = 0; t < frame; ++t) {
        const float* p = xv.data() + (b * len + f * step + t) * comp;
        const double w = window ? wv[t] : 1.0;
        sig[static_cast<size_t>(2 * t)] = p[0] * w;
        sig[static_cast<size_t>(2 * t + 1)] = comp == 2 ? p[1] * w : 0.0;
      }
      dft(sig.data(), frame, bins, false, spec.data());
      float* q = sink.data() + (b * frames + f) * bins * 2;
      for (int64_t k = 0; k < 2 * bins; ++k)
        q[k] = static_cast<float>(spec[static_cast<size_t>(k)]);
    }
  }
  sink.commit();
}

// Writes a window or matrix computed in float into an output of the node's output_datatype.
HostTensor& allocateTyped(KernelContext& ctx, const std::vector<int64_t>& dims) {
  const DType t = kutil::dtypeAttr(ctx, "output_datatype", DType::Float);
  return ctx.allocateOutput(0, t, dims);
}

// a0 - a1 cos(2 pi k / N) + a2 cos(4 pi k / N), N = size (periodic) or size - 1 (symmetric).
void cosineWindow(KernelContext& ctx, double a0, double a1, double a2) {
  const int64_t size = kutil::readIntScalar(ctx, ctx.requireInput(0));
  if (size < 0) ctx.fail(fmt::format("size {} must not be negative", size));
  const bool periodic = ctx.attrInt("periodic", 1) != 0;
  const double denom = static_cast<double>(periodic ? size : size - 1);
  // The output first: its allocation is held to --max-tensor-bytes, so an absurd size is
  // refused by name before the scratch below is asked for.
  HostTensor& out = allocateTyped(ctx, {size});
  std::vector<float> w(static_cast<size_t>(size));
  for (int64_t k = 0; k < size; ++k) {
    const double phase = denom > 0 ? 2 * kPi * static_cast<double>(k) / denom : 0.0;
    w[static_cast<size_t>(k)] =
        static_cast<float>(a0 - a1 * std::cos(phase) + a2 * std::cos(2 * phase));
  }
  fromFloat(w.data(), out.dtype(), out.mutableRaw(), size);
}

void hannWindowKernel(KernelContext& ctx) { cosineWindow(ctx, 0.5, 0.5, 0.0); }
void hammingWindowKernel(KernelContext& ctx) {
  cosineWindow(ctx, 25.0 / 46.0, 1.0 - 25.0 / 46.0, 0.0);
}
void blackmanWindowKernel(KernelContext& ctx) { cosineWindow(ctx, 0.42, 0.5, 0.08); }

// Triangular filters between num_mel_bins + 2 points evenly spaced on the mel scale
// (mel = 2595 log10(1 + hz / 700)), each point snapped down to a DFT bin, as the ONNX reference
// and ONNX Runtime compute them.
void melWeightMatrixKernel(KernelContext& ctx) {
  const int64_t mel_bins = kutil::readIntScalar(ctx, ctx.requireInput(0));
  const int64_t dft_length = kutil::readIntScalar(ctx, ctx.requireInput(1));
  const int64_t sample_rate = kutil::readIntScalar(ctx, ctx.requireInput(2));
  const double lower_hz = kutil::readScalar(ctx, ctx.requireInput(3));
  const double upper_hz = kutil::readScalar(ctx, ctx.requireInput(4));
  if (mel_bins < 1 || dft_length < 1 || sample_rate < 1)
    ctx.fail("num_mel_bins, dft_length and sample_rate must be positive");
  const int64_t spec_bins = dft_length / 2 + 1;
  // The output first: its allocation checks [spec_bins, mel_bins] against the tensor limit
  // before the filter edges and the float matrix (a file's 2^31 - 1 mel bins once asked for
  // 16 GB here and ran on).
  HostTensor& out = allocateTyped(ctx, {spec_bins, mel_bins});
  const int64_t points = mel_bins + 2;
  const double low_mel = 2595 * std::log10(1 + lower_hz / 700);
  const double high_mel = 2595 * std::log10(1 + upper_hz / 700);
  const double step = (high_mel - low_mel) / static_cast<double>(points);
  std::vector<int64_t> bin(static_cast<size_t>(points));
  for (int64_t i = 0; i < points; ++i) {
    const double hz = 700 * (std::pow(10.0, (static_cast<double>(i) * step + low_mel) / 2595) - 1);
    // NaN or out-of-range edges (from the file's frequencies) become INT64_MIN, which the
    // range check below refuses.
    bin[static_cast<size_t>(i)] = kutil::floatToIntegral<int64_t>(
        std::floor(static_cast<double>(dft_length + 1) * hz / static_cast<double>(sample_rate)));
  }
  std::vector<float> m(static_cast<size_t>(spec_bins * mel_bins), 0.0f);
  auto at = [&](int64_t j, int64_t i) -> float& {
    if (j < 0 || j >= spec_bins) ctx.fail("a mel filter edge falls outside the DFT bins");
    return m[static_cast<size_t>(j * mel_bins + i)];
  };
  for (int64_t i = 0; i < mel_bins; ++i) {
    const int64_t lo = bin[static_cast<size_t>(i)], mid = bin[static_cast<size_t>(i + 1)],
                  hi = bin[static_cast<size_t>(i + 2)];
    if (mid == lo) {
      at(mid, i) = 1;
    } else {
      for (int64_t j = lo; j <= mid; ++j)
        at(j, i) = static_cast<float>(j - lo) / static_cast<float>(mid - lo);
    }
    for (int64_t j = mid; j < hi; ++j)
      at(j, i) = static_cast<float>(hi - j) / static_cast<float>(hi - mid);
  }
  fromFloat(m.data(), out.dtype(), out.mutableRaw(), out.numel());
}

void add(KernelRegistry& r, const char* op, int64_t since, KernelFn fn) {
  r.add({"", op, since, 1000, std::move(fn)});
}

}  // namespace
}  // namespace cpu

void registerSignalKernels(KernelRegistry& r) {
  cpu::add(r, "DFT", 17, cpu::dftKernel);
  cpu::add(r, "STFT", 17, cpu::stftKernel);
  cpu::add(r, "HannWindow", 17, cpu::hannWindowKernel);
  cpu::add(r, "HammingWindow", 17, cpu::hammingWindowKernel);
  cpu::add(r, "BlackmanWindow", 17, cpu::blackmanWindowKernel);
  cpu::add(r, "MelWeightMatrix", 17, cpu::melWeightMatrixKernel);
}

}  // namespace fusectl::kernels
