// Det: the determinant of each trailing [M, M] matrix, by LU decomposition with partial
// pivoting in double.
#include <cmath>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

void detKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (!isFloatComputeType(x.dtype())) ctx.fail("input must be a float tensor");
  if (x.rank() < 2 || x.dim(x.rank() - 1) != x.dim(x.rank() - 2))
    ctx.fail(fmt::format("input dims {} must end in a square matrix", formatDims(x.dims())));
  const int64_t m = x.dims().back();
  const std::vector<int64_t> dims(x.dims().begin(), x.dims().end() - 2);
  const int64_t count = product(dims);
  FloatView xv(x);
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), dims);
  std::vector<float> result(static_cast<size_t>(count));
  std::vector<double> a(static_cast<size_t>(m * m));
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t i = 0; i < m * m; ++i) a[static_cast<size_t>(i)] = xv[b * m * m + i];
    double det = 1;
    for (int64_t col = 0; col < m && det != 0; ++col) {
      int64_t pivot = col;
      for (int64_t r = col + 1; r < m; ++r)
        if (std::fabs(a[r * m + col]) > std::fabs(a[pivot * m + col])) pivot = r;
      if (a[pivot * m + col] == 0) {
        det = 0;
        break;
      }
      if (pivot != col) {
        for (int64_t k = 0; k < m; ++k) std::swap(a[col * m + k], a[pivot * m + k]);
        det = -det;
      }
      det *= a[col * m + col];
      for (int64_t r = col + 1; r < m; ++r) {
        const double f = a[r * m + col] / a[col * m + col];
        for (int64_t k = col; k < m; ++k) a[r * m + k] -= f * a[col * m + k];
      }
    }
    result[static_cast<size_t>(b)] = static_cast<float>(det);
  }
  fromFloat(result.data(), x.dtype(), out.mutableRaw(), count);
}

}  // namespace
}  // namespace cpu

void registerDetKernels(KernelRegistry& r) { r.add({"", "Det", 11, 1000, cpu::detKernel}); }

}  // namespace fusectl::kernels
