// docs/ops.md's generated part: one section per fusectl op and the activation table, from
// fused_ops.def (fusectl ops --markdown; tests/test_fused_ops.cpp keeps the file current).
#include <fmt/format.h>

#include "fusectl/graph/fused_ops.h"

namespace fusectl {

namespace {

std::string quoted(std::string_view s) { return fmt::format("`{}`", s); }

std::string inputTable(const FusedOpInfo& op) {
  std::string out = "| input | | |\n|---|---|---|\n";
  for (const FusedOpInput& in : op.inputs) {
    out += fmt::format("| `{}` | {}{} | {} |\n", in.name, in.type, in.optional ? ", optional" : "",
                       in.description);
  }
  return out;
}

// Epilogue and activation ops have the one output `Y`, which their formula names.
std::string outputTable(const FusedOpInfo& op) {
  if (!op.isComposite()) return "";
  std::string out = "| output | | |\n|---|---|---|\n";
  for (const FusedOpOutput& o : op.outputs) {
    out += fmt::format("| `{}` | {}{} | {} |\n", o.name, o.type, o.optional ? ", optional" : "",
                       o.description);
  }
  return out + "\n";
}

std::string attributeLine(const FusedOpInfo& op) {
  if (op.isComposite()) {
    std::vector<std::string> attrs;
    for (const FusedOpAttribute& a : op.attributes)
      attrs.push_back(fmt::format("`{}` ({})", a.name, attrKindName(a.kind)));
    if (attrs.empty()) return "Attributes: none.\n";
    return fmt::format("Attributes: {}.\n", fmt::join(attrs, ", "));
  }
  std::vector<std::string> by_reference, own;
  for (const FusedOpAttribute& a : op.attributes)
    (a.by_reference ? by_reference : own).push_back(quoted(a.name));
  if (by_reference.empty() && own.empty()) return "Attributes: none.\n";
  std::string out = "Attributes: ";
  if (!by_reference.empty()) {
    out += fmt::format("{}'s ({}, same defaults)", op.compute, fmt::join(by_reference, ", "));
  }
  if (!own.empty()) {
    out += fmt::format("{}{} (the epilogue, [Activations](#activations))",
                       by_reference.empty() ? "" : ", plus ", fmt::join(own, " and "));
  }
  return out + ".\n";
}

std::string activationTable() {
  std::vector<std::string> epilogue_ops;
  for (const FusedOpInfo& op : allFusedOps())
    if (op.takesEpilogue()) epilogue_ops.emplace_back(op.name);
  std::string out = fmt::format(
      "## Activations\n\nWhat the epilogue of {} applies last, as its `activation` attribute "
      "names it, and how the op's ONNX function computes it (`p[i]`: `activation_params[i]`).\n\n",
      fmt::join(epilogue_ops, " and "));
  out += "| `activation` | computes | `activation_params` (default) | function body |\n"
         "|---|---|---|---|\n";
  for (const ActivationInfo& a : allActivations()) {
    std::string name = a.activation == Activation::None ? "absent or `\"\"`" : quoted(a.name);
    out += fmt::format("| {} | {} | {} | {} |\n", name, quoted(a.computes), a.params_doc,
                       a.body_doc);
  }
  return out;
}

}  // namespace

std::string fusedOpsMarkdown() {
  std::string out;
  for (const FusedOpInfo& op : allFusedOps()) {
    out += fmt::format("## {}\n\n`{}`\n\n", op.name, op.formula);
    out += inputTable(op) + "\n" + outputTable(op) + attributeLine(op);
    if (!op.notes.empty()) out += "\n" + std::string(op.notes);
    out += "\n";
  }
  return out + activationTable();
}

}  // namespace fusectl
