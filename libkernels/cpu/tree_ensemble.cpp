// ai.onnx.ml TreeEnsemble (opset 5): the sum (or average, min, max) per target of the leaf each
// tree sends a row of X to.
//
// Interior node i compares X[row, nodes_featureids[i]] with nodes_splits[i] by nodes_modes[i]
// (0 <=, 1 <, 2 >=, 3 >, 4 ==, 5 !=, 6 member of a set) and goes to its true or false child;
// nodes_trueleafs/falseleafs say whether that child index names a leaf (leaf_weights,
// leaf_targetids) or another interior node. A NaN feature takes the true branch where
// nodes_missing_value_tracks_true says so. Set-membership nodes take their sets from
// membership_values, NaN-separated, in the order a depth-first walk from each root (true child
// first) meets them, as the operator's reference builds them. A root whose two children are the
// same leaf is that leaf. Trees are validated once (indices in range, no cycles) before rows
// are walked, so a malformed model fails with a reason instead of looping.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "compute_common.h"

namespace fusectl::kernels {
namespace cpu {
namespace {

enum class Cmp : int64_t { Leq = 0, Lt, Gte, Gt, Eq, Neq, Member };

// A tensor attribute (any float or integer type) as doubles; empty when absent.
std::vector<double> tensorAttrDoubles(const KernelContext& ctx, const char* name) {
  const Attribute* a = ctx.node().attr(name);
  if (!a) return {};
  if (a->kind == AttrKind::Floats) return {a->floats.begin(), a->floats.end()};
  if (a->kind == AttrKind::Ints) return {a->ints.begin(), a->ints.end()};
  if (a->kind != AttrKind::Tensor) ctx.fail(fmt::format("attribute '{}' must be a tensor", name));
  const Tensor& t = a->t;
  const int64_t n = t.numel();
  std::vector<double> out(static_cast<size_t>(n));
  if (t.dtype() == DType::Double) {
    std::copy(t.data<double>(), t.data<double>() + n, out.begin());
  } else {
    std::vector<float> f(static_cast<size_t>(n));
    if (n > 0) toFloat(t.dtype(), t.bytes(), f.data(), n);
    std::copy(f.begin(), f.end(), out.begin());
  }
  return out;
}

struct Forest {
  std::vector<int64_t> feature, true_id, false_id, true_leaf, false_leaf, target, roots;
  std::vector<Cmp> mode;
  std::vector<double> split, weight;
  std::vector<uint8_t> missing_true;
  std::vector<std::set<double>> members;  // per node, for Cmp::Member
};

bool takesTrue(const Forest& f, int64_t node, double x) {
  if (std::isnan(x) && f.missing_true[static_cast<size_t>(node)]) return true;
  const double s = f.split[static_cast<size_t>(node)];
  switch (f.mode[static_cast<size_t>(node)]) {
    case Cmp::Leq:
      return x <= s;
    case Cmp::Lt:
      return x < s;
    case Cmp::Gte:
      return x >= s;
    case Cmp::Gt:
      return x > s;
    case Cmp::Eq:
      return x == s;
    case Cmp::Neq:
      return x != s;
    case Cmp::Member:
      return f.members[static_cast<size_t>(node)].count(x) != 0;
  }
  return false;
}

Forest readForest(const KernelContext& ctx, int64_t n_features) {
  Forest f;
  f.feature = ctx.attrInts("nodes_featureids");
  f.true_id = ctx.attrInts("nodes_truenodeids");
  f.false_id = ctx.attrInts("nodes_falsenodeids");
  f.true_leaf = ctx.attrInts("nodes_trueleafs");
  f.false_leaf = ctx.attrInts("nodes_falseleafs");
  f.target = ctx.attrInts("leaf_targetids");
  f.roots = ctx.attrInts("tree_roots");
  f.split = tensorAttrDoubles(ctx, "nodes_splits");
  f.weight = tensorAttrDoubles(ctx, "leaf_weights");
  const std::vector<double> modes = tensorAttrDoubles(ctx, "nodes_modes");
  const std::vector<double> missing = tensorAttrDoubles(ctx, "nodes_missing_value_tracks_true");
  const size_t nodes = f.feature.size(), leaves = f.weight.size();
  for (size_t len : {f.true_id.size(), f.false_id.size(), f.true_leaf.size(), f.false_leaf.size(),
                     f.split.size(), modes.size()})
    if (len != nodes)
      ctx.fail(fmt::format("the nodes_* attributes must all have {} entries", nodes));
  if (f.target.size() != leaves)
    ctx.fail("leaf_targetids and leaf_weights must have one entry per leaf");
  if (!missing.empty() && missing.size() != nodes)
    ctx.fail("nodes_missing_value_tracks_true must have one entry per node");
  f.missing_true.assign(nodes, 0);
  for (size_t i = 0; i < missing.size(); ++i) f.missing_true[i] = missing[i] != 0;
  for (size_t i = 0; i < nodes; ++i) {
    if (!(modes[i] >= 0 && modes[i] <= 6))
      ctx.fail(fmt::format("nodes_modes[{}] = {} is not 0..6", i, modes[i]));
    f.mode.push_back(static_cast<Cmp>(static_cast<int64_t>(modes[i])));
    if (f.feature[i] < 0 || f.feature[i] >= n_features)
      ctx.fail(fmt::format("nodes_featureids[{}] = {} is out of range for {} features", i,
                           f.feature[i], n_features));
    for (const auto& [id, leaf] :
         {std::pair{f.true_id[i], f.true_leaf[i]}, std::pair{f.false_id[i], f.false_leaf[i]}}) {
      const size_t bound = leaf ? leaves : nodes;
      if (id < 0 || static_cast<size_t>(id) >= bound)
        ctx.fail(
            fmt::format("node {} points at {} {}, out of range", i, leaf ? "leaf" : "node", id));
    }
  }
  // Membership sets in depth-first order; a node met on the current path again is a cycle.
  const std::vector<double> values = tensorAttrDoubles(ctx, "membership_values");
  size_t next_value = 0;
  f.members.assign(nodes, {});
  std::vector<uint8_t> state(nodes, 0);        // 0 unseen, 1 on the path, 2 done
  std::vector<std::pair<int64_t, int>> stack;  // node, children pushed
  for (int64_t root : f.roots) {
    if (root < 0 || static_cast<size_t>(root) >= nodes)
      ctx.fail(fmt::format("tree root {} is out of range", root));
    stack.push_back({root, 0});
    while (!stack.empty()) {
      auto& [node, step] = stack.back();
      const size_t n = static_cast<size_t>(node);
      if (step == 0) {
        if (state[n] == 2) {
          stack.pop_back();
          continue;
        }
        if (state[n] == 1) ctx.fail(fmt::format("the trees have a cycle through node {}", node));
        state[n] = 1;
        if (f.mode[n] == Cmp::Member) {
          while (next_value < values.size() && !std::isnan(values[next_value]))
            f.members[n].insert(values[next_value++]);
          if (next_value >= values.size())
            ctx.fail(fmt::format("membership_values has no NaN-terminated set for node {}", node));
          ++next_value;
        }
      }
      if (step == 0 && !f.true_leaf[n]) {
        step = 1;
        stack.push_back({f.true_id[n], 0});
        continue;
      }
      if (step <= 1 && !f.false_leaf[n]) {
        step = 2;
        stack.push_back({f.false_id[n], 0});
        continue;
      }
      state[n] = 2;
      stack.pop_back();
    }
  }
  return f;
}

void treeEnsembleKernel(KernelContext& ctx) {
  const HostTensor& x = ctx.requireInput(0);
  if (!isFloatComputeType(x.dtype())) ctx.fail("X must be a float tensor");
  if (x.rank() != 2)
    ctx.fail(fmt::format("X dims {} must be [rows, features]", formatDims(x.dims())));
  const int64_t rows = x.dim(0), features = x.dim(1);
  const int64_t targets = ctx.attrInt("n_targets", 0);
  if (targets <= 0) ctx.fail("n_targets must be positive");
  const int64_t aggregate = ctx.attrInt("aggregate_function", 1);
  if (aggregate < 0 || aggregate > 3) ctx.fail("aggregate_function must be 0..3");
  if (ctx.attrInt("post_transform", 0) != 0)
    ctx.fail("post_transform other than NONE (0) is not supported");
  const Forest f = readForest(ctx, features);
  for (int64_t t : f.target)
    if (t < 0 || t >= targets) ctx.fail(fmt::format("leaf target {} is out of range", t));
  std::vector<double> xv(static_cast<size_t>(x.numel()));
  if (x.dtype() == DType::Double) {
    std::copy(x.data<double>(), x.data<double>() + x.numel(), xv.begin());
  } else {
    FloatView fv(x);
    std::copy(fv.data(), fv.data() + fv.size(), xv.begin());
  }
  // The output first: its allocation checks [rows, n_targets] against the tensor limit before
  // the accumulators below (an n_targets of 2^63 - 1 overflowed their count).
  HostTensor& out = ctx.allocateOutput(0, x.dtype(), {rows, targets});
  const double init = aggregate == 2   ? std::numeric_limits<double>::max()
                      : aggregate == 3 ? std::numeric_limits<double>::lowest()
                                       : 0.0;
  std::vector<double> y(static_cast<size_t>(rows * targets), init);
  const double trees = static_cast<double>(f.roots.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = xv.data() + r * features;
    for (int64_t root : f.roots) {
      const size_t rt = static_cast<size_t>(root);
      int64_t leaf = -1;
      if (f.true_leaf[rt] && f.false_leaf[rt] && f.true_id[rt] == f.false_id[rt]) {
        leaf = f.true_id[rt];
      } else {
        int64_t node = root;
        while (leaf < 0) {
          const size_t n = static_cast<size_t>(node);
          const bool t = takesTrue(f, node, row[f.feature[n]]);
          const int64_t next = t ? f.true_id[n] : f.false_id[n];
          if (t ? f.true_leaf[n] : f.false_leaf[n])
            leaf = next;
          else
            node = next;
        }
      }
      double& acc = y[static_cast<size_t>(r * targets + f.target[static_cast<size_t>(leaf)])];
      const double w = f.weight[static_cast<size_t>(leaf)];
      switch (aggregate) {
        case 0:
          acc += w / trees;
          break;
        case 1:
          acc += w;
          break;
        case 2:
          acc = std::min(acc, w);
          break;
        default:
          acc = std::max(acc, w);
          break;
      }
    }
  }
  if (x.dtype() == DType::Double) {
    std::copy(y.begin(), y.end(), out.mutableData<double>());
  } else {
    std::vector<float> yf(y.begin(), y.end());
    fromFloat(yf.data(), x.dtype(), out.mutableRaw(), out.numel());
  }
}

}  // namespace
}  // namespace cpu

void registerTreeEnsembleKernels(KernelRegistry& r) {
  r.add({"ai.onnx.ml", "TreeEnsemble", 5, 1000, cpu::treeEnsembleKernel});
}

}  // namespace fusectl::kernels
