// NonMaxSuppression: per batch and class, greedy selection of boxes by descending score.
//
// A box is a candidate when its score is strictly above score_threshold (when given). Candidates
// are visited best first (ties: the lower box index first, a stable order); one is kept unless
// its IoU with a box already kept for the same batch and class is strictly above
// iou_threshold, until max_output_boxes_per_class are kept (0, the default, keeps none).
// Boxes are corners [y1, x1, y2, x2] in either order, or with center_point_box=1
// [x_center, y_center, width, height]. A box of zero area overlaps nothing. The output is
// [num_selected, 3] int64 rows (batch, class, box), by batch, then class, then selection order.
#include <algorithm>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"
#include "dtype_dispatch.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

struct Box {
  float y1, x1, y2, x2;
  float area() const { return (y2 - y1) * (x2 - x1); }
};

Box readBox(const float* b, bool center) {
  if (center) {
    const float xc = b[0], yc = b[1], w = b[2], h = b[3];
    return {yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2};
  }
  return {std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

bool suppresses(const Box& a, const Box& b, float iou_threshold) {
  const float ih = std::min(a.y2, b.y2) - std::max(a.y1, b.y1);
  const float iw = std::min(a.x2, b.x2) - std::max(a.x1, b.x1);
  if (ih <= 0 || iw <= 0) return false;
  const float inter = ih * iw;
  const float uni = a.area() + b.area() - inter;
  if (a.area() <= 0 || b.area() <= 0 || uni <= 0) return false;
  return inter / uni > iou_threshold;
}

void nonMaxSuppressionKernel(KernelContext& ctx) {
  const HostTensor& boxes_t = ctx.requireInput(0);
  const HostTensor& scores_t = ctx.requireInput(1);
  if (boxes_t.rank() != 3 || boxes_t.dim(2) != 4) ctx.fail("boxes must have shape [B, N, 4]");
  if (scores_t.rank() != 3 || scores_t.dim(0) != boxes_t.dim(0) ||
      scores_t.dim(2) != boxes_t.dim(1))
    ctx.fail(fmt::format("scores dims {} do not fit boxes dims {}", formatDims(scores_t.dims()),
                         formatDims(boxes_t.dims())));
  auto scalarInput = [&](size_t i, double def) {
    const HostTensor* t = ctx.input(i);
    return t && t->numel() > 0 ? kutil::readScalar(ctx, *t) : def;
  };
  // As an integer: torchvision's batched NMS passes sys.maxsize (SSDlite and RetinaNet kept no
  // box while it was read through a double).
  const HostTensor* max_t = ctx.input(2);
  const int64_t max_out = max_t && max_t->numel() > 0 ? kutil::readIntScalar(ctx, *max_t) : 0;
  const float iou_threshold = static_cast<float>(scalarInput(3, 0));
  const bool has_score_threshold = ctx.input(4) && ctx.input(4)->numel() > 0;
  const float score_threshold = static_cast<float>(scalarInput(4, 0));
  const int64_t center = ctx.attrInt("center_point_box", 0);
  if (center != 0 && center != 1) ctx.fail("center_point_box must be 0 or 1");

  const int64_t batches = boxes_t.dim(0), num_boxes = boxes_t.dim(1), classes = scores_t.dim(1);
  FloatView bv(boxes_t), sv(scores_t);
  std::vector<int64_t> selected;  // triples
  std::vector<Box> boxes(static_cast<size_t>(num_boxes));
  std::vector<int64_t> order;
  std::vector<Box> kept;
  for (int64_t b = 0; b < batches && max_out > 0; ++b) {
    for (int64_t i = 0; i < num_boxes; ++i)
      boxes[static_cast<size_t>(i)] = readBox(bv.data() + (b * num_boxes + i) * 4, center == 1);
    for (int64_t c = 0; c < classes; ++c) {
      const float* s = sv.data() + (b * classes + c) * num_boxes;
      order.clear();
      for (int64_t i = 0; i < num_boxes; ++i)
        if (!has_score_threshold || s[i] > score_threshold) order.push_back(i);
      std::stable_sort(order.begin(), order.end(),
                       [&](int64_t x, int64_t y) { return s[x] > s[y]; });
      kept.clear();
      for (int64_t i : order) {
        if (static_cast<int64_t>(kept.size()) >= max_out) break;
        const Box& box = boxes[static_cast<size_t>(i)];
        const bool drop = std::any_of(kept.begin(), kept.end(), [&](const Box& k) {
          return suppresses(k, box, iou_threshold);
        });
        if (drop) continue;
        kept.push_back(box);
        selected.insert(selected.end(), {b, c, i});
      }
    }
  }
  const int64_t rows = static_cast<int64_t>(selected.size() / 3);
  HostTensor& out = ctx.allocateOutput(0, DType::Int64, {rows, 3});
  std::copy(selected.begin(), selected.end(), out.mutableData<int64_t>());
}

}  // namespace
}  // namespace cpu

void registerNmsKernels(KernelRegistry& r) {
  r.add({"", "NonMaxSuppression", 10, 1000, cpu::nonMaxSuppressionKernel});
}

}  // namespace fusectl::kernels
