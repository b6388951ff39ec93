// Which nodes take a channels-last value and where it pays (see channels_last.h).
#include "channels_last.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "compute_common.h"
#include "conv_depthwise.h"
#include "fusectl/graph/fused_ops.h"
#include "gemm_vector_epilogue.h"
#include "vec_kernels.h"

namespace fusectl::kernels::cpu {

bool planeTakesChannelsLast(const Shape& x) {
  // Planes up to 28x28 only. On MobileNetV2's 56x56 and 112x112 planes (node by node, five
  // layers channels-last against planar in alternating runs) every convolution that took the
  // layout ran 5-50% slower, the depthwise ones (a padded scratch per band, more traffic than
  // the planar rows on planes beyond L2) and the pointwise ones onto 16-24 channels alike; from
  // 28x28 down each ran 1-30% faster. A single pixel is the same bytes in either layout (a
  // squeeze-and-excitation's 1x1 convolutions), and its planar product is the cheaper one.
  return x.hasRank() && x.rank() == 4 && x[2].isStatic() && x[3].isStatic() &&
         x[2].value() * x[3].value() <= 28 * 28 && x[2].value() * x[3].value() > 1;
}

namespace {

enum class ConvKind { Other, Pointwise, Depthwise };

// What a Conv or FusedConv node is, by its attributes and declared shapes (before any run), for
// the layout: a one-group 2-D pointwise convolution (its product reads pixel rows as cheaply as
// channel rows), a depthwise one whose window the channel blocks run vectorised (where the
// planar kernels pay for two transposes, or run rows a quarter full on small planes), or
// another. Unknown weight dims or channels: another.
ConvKind convKind(const Node& node) {
  const Value* xv = node.numInputs() > 0 ? node.input(0) : nullptr;
  const Value* wv = node.numInputs() > 1 ? node.input(1) : nullptr;
  if (!xv || !wv) return ConvKind::Other;
  const Shape& xs = xv->shape();
  const Shape ws = wv->initializer() ? Shape::ofStatic(wv->initializer()->dims()) : wv->shape();
  if (!planeTakesChannelsLast(xs) || !ws.isStatic() || ws.rank() != 4) return ConvKind::Other;
  const std::vector<int64_t> wd = ws.staticDims();
  const int64_t M = wd[0], Cg = wd[1], KH = wd[2], KW = wd[3];
  const int64_t group = node.attrInt("group", 1);
  if (node.attrInts("kernel_shape", {KH, KW}) != std::vector<int64_t>{KH, KW})
    return ConvKind::Other;
  if (node.attrInts("dilations", {1, 1}) != std::vector<int64_t>{1, 1}) return ConvKind::Other;
  const std::vector<int64_t> strides = node.attrInts("strides", {1, 1});
  const std::string auto_pad = node.attrString("auto_pad", "NOTSET");
  if (strides.size() != 2) return ConvKind::Other;
  if (group == 1 && KH == 1 && KW == 1 && strides == std::vector<int64_t>{1, 1}) {
    const std::vector<int64_t> pads = node.attrInts("pads", {0, 0, 0, 0});
    const bool unpadded = pads == std::vector<int64_t>(4, 0) || auto_pad != "NOTSET";
    return unpadded ? ConvKind::Pointwise : ConvKind::Other;
  }
  if (Cg != 1 || group != M || !xs[1].isStatic() || xs[1].value() != M) return ConvKind::Other;
  Window probe;  // what depthwiseChannelsLastTakes reads of a window: all but the sizes
  probe.in = {KH, KW};
  probe.kernel = {KH, KW};
  probe.strides = strides;
  probe.dilations = {1, 1};
  probe.pad_begin = probe.pad_end = {0, 0};
  probe.out = {1, 1};
  return depthwiseChannelsLastTakes(probe) ? ConvKind::Depthwise : ConvKind::Other;
}

}  // namespace

bool convTakesChannelsLast(const Node& node) { return convKind(node) != ConvKind::Other; }

namespace {

bool isConvReading(const Node& reader, const Value* v) {
  const bool conv = (reader.domain().empty() && reader.opType() == "Conv") ||
                    (reader.domain() == "fusectl" && reader.opType().rfind("FusedConv", 0) == 0);
  return conv && reader.numInputs() > 0 && reader.input(0) == v && convTakesChannelsLast(reader);
}

// Whether `reader` of the value `v` keeps it channels-last on the way to a convolution: a
// convolution taking it; a global average pool (its output is [N, C, 1, 1], the same bytes in
// either layout); a per-channel scale whose output only such convolutions read.
bool keepsChannelsLast(const Node& reader, const Value* v) {
  if (isConvReading(reader, v)) return true;
  if (reader.domain().empty() && reader.opType() == "GlobalAveragePool")
    return globalPoolReadsChannelsLast(reader, 0);
  const int at = channelScaleInput(reader);
  if (at < 0 || reader.input(static_cast<size_t>(at)) != v) return false;
  const Value* out = reader.output(0);
  if (!out || out->isGraphOutput() || out->consumers().empty()) return false;
  for (const Node* next : out->consumers())
    if (!isConvReading(*next, out)) return false;
  return true;
}

}  // namespace

// A depthwise convolution only where its output goes channels-last too, as far as the nodes
// around it show (its readers convolutions that take it, or a squeeze-and-excitation's pool
// and scale on the way to one): one that reads channels-last and writes planes measured 15-20%
// slower than planes in and out, so it then keeps the layout out of its input.
bool convReadsChannelsLast(const Node& node, size_t input) {
  const ConvKind kind = input == 0 ? convKind(node) : ConvKind::Other;
  if (kind != ConvKind::Depthwise) return kind == ConvKind::Pointwise;
  const Value* y = node.numOutputs() > 0 ? node.output(0) : nullptr;
  if (!y || y->isGraphOutput() || !convWritesChannelsLast(node, 0)) return false;
  for (const Node* reader : y->consumers())
    if (!keepsChannelsLast(*reader, y)) return false;
  return true;
}

// Not with a residual: that is read in planes, like the output it is added to.
bool convWritesChannelsLast(const Node& node, size_t output) {
  if (output != 0 || !convTakesChannelsLast(node)) return false;
  if (node.domain() != "fusectl") return true;
  const std::optional<FusedOperandSlots> slots = fusedOperandSlots(node.opType());
  if (!slots || !slots->residual) return !!slots;
  const size_t at = *slots->residual;
  return !(at < node.numInputs() && node.input(at));
}

int channelScaleInput(const Node& mul) {
  if (!mul.domain().empty() || mul.opType() != "Mul" || mul.numInputs() != 2) return -1;
  for (int i = 0; i < 2; ++i) {
    const Value* x = mul.input(static_cast<size_t>(i));
    const Value* s = mul.input(static_cast<size_t>(1 - i));
    if (!x || !s || x->dtype() != DType::Float || s->dtype() != DType::Float) continue;
    const Shape& xs = x->shape();
    const Shape& ss = s->shape();
    if (!planeTakesChannelsLast(xs) || !xs[1].isStatic() || !ss.isStatic() || ss.rank() != 4)
      continue;
    const std::vector<int64_t> sd = ss.staticDims();
    const bool batch_ok = sd[0] == 1 || (xs[0].isStatic() && sd[0] == xs[0].value());
    if (batch_ok && sd[1] == xs[1].value() && sd[2] == 1 && sd[3] == 1) return i;
  }
  return -1;
}

bool mulReadsChannelsLast(const Node& node, size_t input) {
  return channelScaleInput(node) == static_cast<int>(input);
}

bool mulWritesChannelsLast(const Node& node, size_t output) {
  return output == 0 && channelScaleInput(node) >= 0;
}

bool globalPoolReadsChannelsLast(const Node& node, size_t input) {
  const Value* x = node.numInputs() > 0 ? node.input(0) : nullptr;
  return input == 0 && x && x->dtype() == DType::Float && planeTakesChannelsLast(x->shape());
}

namespace {

#ifdef FUSECTL_AVX512
FUSECTL_AVX512 void scaleChannelRowsAvx512(const float* x, const float* scale, int64_t pixels,
                                           int64_t C, float* out, int64_t out_stride) {
  for (int64_t p = 0; p < pixels; ++p) {
    const float* in = x + p * C;
    for (int64_t c = 0; c < C; c += 16) {
      const __mmask16 m = firstLanes(C - c);
      const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, in + c),
                                     _mm512_maskz_loadu_ps(m, scale + c));
      if (out_stride == 0) {
        _mm512_mask_storeu_ps(out + p * C + c, m, v);
      } else {
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, v);
        const int64_t n = std::min<int64_t>(16, C - c);
        for (int64_t j = 0; j < n; ++j) out[(c + j) * out_stride + p] = lanes[j];
      }
    }
  }
}

FUSECTL_AVX512 void sumChannelRowsAvx512(const float* x, int64_t pixels, int64_t C,
                                         float* sums) {
  for (int64_t c = 0; c < C; c += 16) {
    const __mmask16 m = firstLanes(C - c);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t p = 0;
    for (; p + 2 <= pixels; p += 2) {
      a0 = _mm512_add_ps(a0, _mm512_maskz_loadu_ps(m, x + p * C + c));
      a1 = _mm512_add_ps(a1, _mm512_maskz_loadu_ps(m, x + (p + 1) * C + c));
    }
    if (p < pixels) a0 = _mm512_add_ps(a0, _mm512_maskz_loadu_ps(m, x + p * C + c));
    const __m512 total = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_maskz_loadu_ps(m, sums + c));
    _mm512_mask_storeu_ps(sums + c, m, total);
  }
}
#endif

// The vector kernels' ISA (vec::activeIsa), as the global pool's planar means choose theirs:
// a test that forces a narrower one runs the portable loops.
bool hasAvx512() {
#ifdef FUSECTL_AVX512
  return vec::activeIsa() == vec::Isa::Avx512;
#else
  return false;
#endif
}

}  // namespace

void scaleChannelRows(const float* x, const float* scale, int64_t pixels, int64_t C, float* out,
                      int64_t out_stride) {
#ifdef FUSECTL_AVX512
  if (hasAvx512()) {
    scaleChannelRowsAvx512(x, scale, pixels, C, out, out_stride);
    return;
  }
#endif
  for (int64_t p = 0; p < pixels; ++p)
    for (int64_t c = 0; c < C; ++c)
      out[out_stride == 0 ? p * C + c : c * out_stride + p] = x[p * C + c] * scale[c];
}

void sumChannelRows(const float* x, int64_t pixels, int64_t C, float* sums) {
#ifdef FUSECTL_AVX512
  if (hasAvx512()) {
    sumChannelRowsAvx512(x, pixels, C, sums);
    return;
  }
#endif
  for (int64_t p = 0; p < pixels; ++p)
    for (int64_t c = 0; c < C; ++c) sums[c] += x[p * C + c];
}

}  // namespace fusectl::kernels::cpu
