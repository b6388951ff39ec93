// Reusable pattern constraints. Each failure names the node it is about (Why) and a reason
// that opens with that node's label, built only when someone listens, so that
// `fusectl match --explain` and the report read as "Conv_12 output has 2 consumers: ...".
#include <fmt/format.h>

#include <algorithm>

#include "fusectl/passes/pattern.h"

namespace fusectl::passes::constraints {

namespace {

// The bound node of `capture`; a missing capture is a bug in the pass, said as a reason (about
// the root) so that it shows up in tests rather than crashing.
Node* captured(const Match& m, const std::string& capture, Why& why) {
  Node* n = m.get(capture);
  if (!n) why.fail(*m.root(), [&] { return fmt::format("pattern has no capture '{}'", capture); });
  return n;
}

std::string outputText(int output) { return output == 0 ? "output" : fmt::format("output {}", output); }

bool noOutput(Why& why, const Node& n, int output) {
  return why.fail(n, [&] { return fmt::format("{} has no output {}", n.label(), output); });
}

bool isGraphOutputOf(Why& why, const Node& n, int output, const Value& v) {
  return why.fail(n, [&] {
    return fmt::format("{} {} '{}' is a graph output", n.label(), outputText(output), v.name());
  });
}

}  // namespace

Constraint uniqueConsumer(std::string capture, int output) {
  return {"unique-consumer:" + capture, [capture, output](const Match& m, Why& why) {
            Node* n = captured(m, capture, why);
            if (!n) return false;
            Value* v = n->output(output);
            if (!v) return noOutput(why, *n, output);
            if (v->isGraphOutput()) return isGraphOutputOf(why, *n, output, *v);
            if (v->consumers().size() == 1) return true;
            return why.fail(*n, [&] {
              std::vector<Node*> consumers = v->consumers();
              if (consumers.empty()) {
                return fmt::format("{} {} '{}' has no consumers", n->label(), outputText(output),
                                   v->name());
              }
              std::string list;
              for (size_t i = 0; i < consumers.size() && i < 5; ++i)
                list += (i ? ", " : "") + consumers[i]->label();
              if (consumers.size() > 5) list += ", ...";
              return fmt::format("{} {} has {} consumers: {}", n->label(), outputText(output),
                                 consumers.size(), list);
            });
          }};
}

Constraint notGraphOutput(std::string capture, int output) {
  return {"not-graph-output:" + capture, [capture, output](const Match& m, Why& why) {
            Node* n = captured(m, capture, why);
            if (!n) return false;
            Value* v = n->output(output);
            if (v && v->isGraphOutput()) return isGraphOutputOf(why, *n, output, *v);
            return true;
          }};
}

Constraint opsetAtLeast(std::string capture, int64_t opset, int64_t minimum, std::string needs) {
  return {fmt::format("opset-{}", minimum),
          [capture, opset, minimum, needs](const Match& m, Why& why) {
            if (opset >= minimum) return true;
            Node* n = captured(m, capture, why);
            if (!n) return false;
            return why.fail(*n, fmt::format("the model's opset is {}: {}", opset, needs));
          }};
}

Constraint constantInput(std::string capture, int input) {
  return {fmt::format("constant-input:{}.{}", capture, input),
          [capture, input](const Match& m, Why& why) {
            Node* n = captured(m, capture, why);
            if (!n) return false;
            Value* v = n->input(input);
            if (!v) {
              return why.fail(*n, [&] { return fmt::format("{} input {} is absent", n->label(),
                                                           input); });
            }
            if (v->isConstant()) return true;
            return why.fail(*n, [&] {
              std::string origin;
              if (v->isInitializer()) {
                origin = "it is an initializer that is also a graph input, so it can be overridden";
              } else if (v->isGraphInput()) {
                origin = "it is a graph input";
              } else if (v->producer()) {
                origin = fmt::format("it is computed by {}", v->producer()->label());
              } else {
                origin = "it comes from an outer graph";
              }
              return fmt::format("{} input '{}' is not a constant ({})", n->label(), v->name(),
                                 origin);
            });
          }};
}

Constraint batchNormInference(std::string capture) {
  return {"batchnorm-inference:" + capture, [capture](const Match& m, Why& why) {
            Node* n = captured(m, capture, why);
            if (!n) return false;
            if (!n->is("BatchNormalization")) {
              return why.fail(*n, [&] {
                return fmt::format("{} is {}, not BatchNormalization", n->label(), n->opType());
              });
            }
            size_t outputs = 0;
            for (Value* v : n->outputs()) outputs += v != nullptr;
            if (outputs > 1) {
              return why.fail(*n, [&] {
                return fmt::format("{} has {} outputs (training form)", n->label(), outputs);
              });
            }
            if (n->attrInt("training_mode", 0) != 0) {
              return why.fail(*n, [&] {
                return fmt::format("{} has training_mode=1 (training form)", n->label());
              });
            }
            if (n->numInputs() < 5) {
              return why.fail(*n, [&] {
                return fmt::format("{} has {} inputs, expected 5", n->label(), n->numInputs());
              });
            }
            return true;
          }};
}

const std::vector<DType>& fusibleFloatTypes() {
  static const std::vector<DType> types = {DType::Float, DType::Float16, DType::BFloat16};
  return types;
}

bool isFusibleFloat(DType t) {
  const std::vector<DType>& types = fusibleFloatTypes();
  return std::find(types.begin(), types.end(), t) != types.end();
}

Constraint dtypeIn(std::vector<std::string> captures, std::vector<DType> dtypes) {
  std::string names;
  for (const std::string& c : captures) names += (names.empty() ? "" : ",") + c;
  return {"dtype:" + names, [captures, dtypes](const Match& m, Why& why) {
            auto fits = [&](Node* n, Value* v, const char* side, size_t i) {
              if (!v || std::find(dtypes.begin(), dtypes.end(), v->dtype()) != dtypes.end()) {
                return true;
              }
              return why.fail(*n, [&] {
                std::string allowed;
                for (size_t k = 0; k < dtypes.size(); ++k)
                  allowed += std::string(k ? ", " : "") + std::string(dtypeName(dtypes[k]));
                std::string_view got =
                    v->dtype() == DType::Undefined ? "of unknown type" : dtypeName(v->dtype());
                return fmt::format("{} {} {} '{}' is {}, expected {}", n->label(), side, i,
                                   v->name(), got, allowed);
              });
            };
            for (const std::string& c : captures) {
              Node* n = captured(m, c, why);
              if (!n) return false;
              for (size_t i = 0; i < n->numInputs(); ++i)
                if (!fits(n, n->input(i), "input", i)) return false;
              for (size_t i = 0; i < n->numOutputs(); ++i)
                if (!fits(n, n->output(i), "output", i)) return false;
            }
            return true;
          }};
}

Constraint rankKnown(std::string capture, int output) {
  return {"rank-known:" + capture, [capture, output](const Match& m, Why& why) {
            Node* n = captured(m, capture, why);
            if (!n) return false;
            Value* v = n->output(output);
            if (!v) return noOutput(why, *n, output);
            if (v->shape().hasRank()) return true;
            return why.fail(*n, [&] {
              return fmt::format("{} {} '{}' has unknown rank", n->label(), outputText(output),
                                 v->name());
            });
          }};
}

Constraint sameShapeAs(std::string capture, int input, std::string other) {
  return {fmt::format("same-shape:{}.{}={}", capture, input, other),
          [capture, input, other](const Match& m, Why& why) {
            Node* n = captured(m, capture, why);
            if (!n) return false;
            Node* o = captured(m, other, why);
            if (!o) return false;
            Value* a = n->input(input);
            Value* b = o->output(0);
            if (!a) {
              return why.fail(*n, [&] { return fmt::format("{} input {} is absent", n->label(),
                                                           input); });
            }
            if (!b) return noOutput(why, *o, 0);
            if (dimsProvablyEqual(a->shape(), b->shape())) return true;
            return why.fail(*n, [&] {
              return fmt::format(
                  "{} input '{}' has shape {}, not provably the shape {} of {} output", n->label(),
                  a->name(), a->shape().str(), b->shape().str(), o->label());
            });
          }};
}

Constraint readOnlyBy(std::string capture, std::vector<std::string> readers) {
  std::string name = "read-only-by:" + capture;
  return {name, [capture, readers](const Match& m, Why& why) {
            Node* n = m.get(capture);
            Value* v = n->output(0);
            if (v->isGraphOutput()) {
              return why.fail(*n, [&] {
                return fmt::format("{} output '{}' is a graph output", n->label(), v->name());
              });
            }
            std::vector<Node*> allowed;
            for (const std::string& r : readers) allowed.push_back(m.get(r));
            for (Node* c : v->consumers()) {
              if (std::find(allowed.begin(), allowed.end(), c) == allowed.end()) {
                return why.fail(*n, [&] {
                  return fmt::format("{} output '{}' is also read by {}", n->label(), v->name(),
                                     c->label());
                });
              }
            }
            return true;
          }};
}

}  // namespace fusectl::passes::constraints
namespace fusectl::passes {

bool dimsProvablyEqual(const Shape& a, const Shape& b) {
  if (!a.hasRank() || !b.hasRank() || a.rank() != b.rank()) return false;
  for (size_t i = 0; i < a.rank(); ++i)
    if (!a[i].provablyEqual(b[i])) return false;
  return true;
}

}  // namespace fusectl::passes

