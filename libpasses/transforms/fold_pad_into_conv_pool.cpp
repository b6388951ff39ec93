// fold-pad-into-conv-pool: a Pad by zeros in front of a Conv or an AveragePool becomes that op's
// own padding, so the padded copy of the activation is never written.
//
//   x -> Pad(pads p, constant 0) -> Conv<pads q>                      =>  x -> Conv<pads q + p'>
//   x -> Pad(pads p, constant 0) -> AveragePool<pads 0>               =>  x -> AveragePool<pads p',
//                                                                            count_include_pad=1>
//   x -> Pad(pads p, constant 0) -> AveragePool<pads q, count_include_pad=1> =>  ... <pads q + p'>
//
// p' is p without its batch and channel entries. torch exports avg_pool2d(padding=k) with
// count_include_pad=True (its default) as such a Pad and an unpadded AveragePool (torchvision's
// Inception-v3: 9 of them); the zeros the Pad writes are elements the average counts, which is
// what count_include_pad=1 does with the op's own padding. ONNX Runtime folds the same pairs.
//
// Conditions, checked in this order (each failure is a reported rejection):
//  1. The Pad's output is read by the Conv/AveragePool only (as its data input) and is no graph
//     output.
//  2. The Pad's mode is "constant" and its value is absent or a constant 0.
//  3. Its pads are constants (the attribute before opset 11, the input from it; no `axes`
//     input), none negative (a negative pad crops), and those of the batch and channel axes 0.
//  4. The consumer's auto_pad is NOTSET (explicit pads to add to), and its pads, when given,
//     are two per spatial axis of the Pad's input.
//  5. AveragePool: its own pads are all 0, or count_include_pad is 1 (otherwise its padding
//     would be left out of the average where the Pad's zeros were counted).
// MaxPool is not taken: its padding is -inf, not the 0 the Pad writes.
#include <fmt/format.h>

#include <optional>
#include <vector>

#include "constant_math.h"
#include "fusectl/passes/rewriter.h"
#include "pass_factories.h"

namespace fusectl::passes {
namespace {

// The Pad's pads when they are constants and it has no axes input; nullopt otherwise.
std::optional<std::vector<int64_t>> constantPads(const Node& pad, int64_t opset) {
  if (pad.numInputs() > 3 && pad.input(3)) return std::nullopt;  // axes (opset 18)
  return padAmounts(pad, opset);
}

bool zeroValue(const Node& pad, int64_t opset) {
  if (opset > 0 && opset < 11) return pad.attrFloat("value", 0.f) == 0.f;
  const Value* v = pad.numInputs() > 2 ? pad.input(2) : nullptr;
  if (!v) return true;
  const Tensor* t = v->isConstant() ? v->initializer() : nullptr;
  return t && t->numel() == 1 && t->valueAsDouble(0) == 0.0;
}

Constraint foldablePad(int64_t opset) {
  return {"pad-foldable", [opset](const Match& m, Why& why) {
            Node* pad = m.get("pad");
            Node* op = m.get("op");
            const Value* y = pad->output(0);
            if (op->input(0) != y || y->isGraphOutput() || y->uses().size() != 1) {
              return why.fail(*pad, [&] {
                return fmt::format("{} output '{}' is read elsewhere too, or not as {} data input",
                                   pad->label(), y->name(), op->label());
              });
            }
            const std::string mode = pad->attrString("mode", "constant");
            if (mode != "constant" || !zeroValue(*pad, opset)) {
              return why.fail(*pad, [&] {
                return fmt::format("{} pads with mode '{}' and a value that is not a constant 0",
                                   pad->label(), mode);
              });
            }
            const std::optional<std::vector<int64_t>> pads = constantPads(*pad, opset);
            const size_t rank = pads ? pads->size() / 2 : 0;
            bool ok = pads && rank >= 3 && pads->size() == 2 * rank;
            for (size_t i = 0; ok && i < pads->size(); ++i) {
              const size_t axis = i % rank;
              ok = (*pads)[i] >= 0 && (axis >= 2 || (*pads)[i] == 0);
            }
            if (!ok) {
              return why.fail(*pad, [&] {
                return fmt::format("{} pads are not constants of a rank >= 3 tensor that pad only "
                                   "its spatial axes, none negative (an axes input is not taken)",
                                   pad->label());
              });
            }
            // The consumer's own pads are added to element by element: a list of another length
            // is a model the consumer's kernel refuses, and the sum would write past it.
            const std::vector<int64_t> own = op->attrInts("pads");
            if (!own.empty() && own.size() != 2 * (rank - 2)) {
              return why.fail(*op, [&] {
                return fmt::format("{} has {} pads for {} spatial axes", op->label(), own.size(),
                                   rank - 2);
              });
            }
            const std::string auto_pad = op->attrString("auto_pad", "NOTSET");
            if (auto_pad != "NOTSET") {
              return why.fail(*op, [&] {
                return fmt::format("{} has auto_pad={}, not explicit pads", op->label(), auto_pad);
              });
            }
            if (op->is("AveragePool") && op->attrInt("count_include_pad", 0) != 1) {
              for (int64_t q : op->attrInts("pads")) {
                if (q == 0) continue;
                return why.fail(*op, [&] {
                  return fmt::format("{} pads itself with count_include_pad=0, which leaves its "
                                     "padding out of the average where the Pad's zeros count",
                                     op->label());
                });
              }
            }
            return true;
          }};
}

class FoldPadIntoConvPoolPass : public Pass {
 public:
  const PassInfo& info() const override { return FoldPadIntoConvPoolPassInfo; }

  std::vector<Pattern> patterns() const override { return build(0); }

  bool run(const Graph& graph, PassContext& ctx) override {
    size_t folded = 0;
    for (const Pattern& p : build(ctx.opset())) {
      folded += applyPattern(graph, ctx, p, [&](Rewriter& rw, const Match& m) {
        fold(rw, p.name, m, ctx.opset());
        ctx.count(m.get("op")->is("Conv") ? "folded_into_conv" : "folded_into_average_pool");
        return true;
      });
    }
    return folded > 0;
  }

 private:
  static std::vector<Pattern> build(int64_t opset) {
    std::vector<Pattern> out;
    for (const char* op : {"Conv", "AveragePool"}) {
      out.push_back(Pattern::parse(fmt::format("pad:Pad -> op:{}", op),
                                   fmt::format("pad-{}", op[0] == 'C' ? "conv" : "average-pool")));
      out.back().require(foldablePad(opset));
      out.back().producing({op});
    }
    return out;
  }

  static void fold(Rewriter& rw, const std::string& pattern, const Match& m, int64_t opset) {
    Node* pad = m.get("pad");
    Node* op = m.get("op");
    const std::vector<int64_t> pads = *constantPads(*pad, opset);
    const size_t rank = pads.size() / 2, spatial = rank - 2;
    std::vector<int64_t> q = op->attrInts("pads");
    if (q.empty()) q.assign(2 * spatial, 0);
    for (size_t i = 0; i < spatial; ++i) {
      q[i] += pads[2 + i];
      q[spatial + i] += pads[rank + 2 + i];
    }
    rw.rewireInput(op, 0, pad->input(0));
    rw.setAttribute(op, Attribute::ofInts("pads", q));
    if (op->is("AveragePool")) rw.setAttribute(op, Attribute::ofInt("count_include_pad", 1));
    rw.replaceMatchInPlace(pattern, m, op->output(0), op);
  }
};

}  // namespace

std::unique_ptr<Pass> createFoldPadIntoConvPoolPass() {
  return std::make_unique<FoldPadIntoConvPoolPass>();
}

}  // namespace fusectl::passes
