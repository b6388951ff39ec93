// `fusectl ops`: list the fusectl-domain operators (fused_ops.def) with their inputs,
// attributes and activations.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "fusectl/graph/error.h"
#include "fusectl/graph/fused_ops.h"

namespace fusectl::cli {
namespace {

struct OpsOptions {
  bool json = false;
  bool markdown = false;
};

std::string inputList(const FusedOpInfo& op) {
  std::vector<std::string> names;
  for (const FusedOpInput& in : op.inputs)
    names.push_back(in.optional ? fmt::format("[{}]", in.name) : std::string(in.name));
  return fmt::format("{}", fmt::join(names, ", "));
}

nlohmann::ordered_json toJson(const FusedOpInfo& op) {
  nlohmann::ordered_json inputs = nlohmann::ordered_json::array();
  for (const FusedOpInput& in : op.inputs) {
    inputs.push_back({{"name", std::string(in.name)},
                      {"type", std::string(in.type)},
                      {"optional", in.optional}});
  }
  nlohmann::ordered_json attributes = nlohmann::ordered_json::array();
  for (const FusedOpAttribute& a : op.attributes) {
    attributes.push_back({{"name", std::string(a.name)},
                          {"type", std::string(attrKindName(a.kind))},
                          {"passed_to", a.by_reference ? std::string(op.compute) : ""}});
  }
  nlohmann::ordered_json outputs = nlohmann::ordered_json::array();
  for (const FusedOpOutput& out : op.outputs) {
    outputs.push_back({{"name", std::string(out.name)},
                       {"type", std::string(out.type)},
                       {"optional", out.optional}});
  }
  nlohmann::ordered_json activations = nlohmann::ordered_json::array();
  for (Activation a : op.epilogue_activations)
    activations.push_back(std::string(activationName(a)));
  return {{"domain", std::string(kFusectlDomain)},
          {"name", std::string(op.name)},
          {"kind", op.isComposite() ? "composite" : op.takesEpilogue() ? "epilogue" : "activation"},
          {"formula", std::string(op.formula)},
          {"op_class", std::string(opClassName(op.op_class))},
          {"inputs", inputs},
          {"outputs", outputs},
          {"attributes", attributes},
          {"activations", activations}};
}

int runOps(const OpsOptions& opts) {
  if (opts.json && opts.markdown) {
    throw Error(ErrorKind::Usage, "--json and --markdown exclude each other");
  }
  if (opts.markdown) {
    std::cout << fusedOpsMarkdown();
  } else if (opts.json) {
    nlohmann::ordered_json ops = nlohmann::ordered_json::array();
    for (const FusedOpInfo& op : allFusedOps()) ops.push_back(toJson(op));
    nlohmann::ordered_json activations = nlohmann::ordered_json::array();
    for (const ActivationInfo& a : allActivations()) {
      if (a.activation == Activation::None) continue;
      activations.push_back({{"name", std::string(a.name)},
                             {"computes", std::string(a.computes)},
                             {"params", a.num_params},
                             {"defaults", std::vector<float>(a.defaults.begin(),
                                                             a.defaults.begin() + a.num_params)}});
    }
    nlohmann::ordered_json j;
    j["ops"] = ops;
    j["activations"] = activations;
    std::cout << j.dump(2) << "\n";
  } else {
    for (const FusedOpInfo& op : allFusedOps()) {
      std::cout << fmt::format("{}::{}({})  {}\n", kFusectlDomain, op.name, inputList(op),
                               op.formula);
      std::vector<std::string> attributes;
      for (const FusedOpAttribute& a : op.attributes) attributes.emplace_back(a.name);
      if (!attributes.empty())
        std::cout << fmt::format("  attributes:  {}\n", fmt::join(attributes, ", "));
      std::vector<std::string> activations;
      for (Activation a : op.epilogue_activations) activations.emplace_back(activationName(a));
      if (!activations.empty())
        std::cout << fmt::format("  activations: {}\n", fmt::join(activations, ", "));
    }
  }
  std::cout.flush();
  if (!std::cout) throwIo("<stdout>: write failed");
  return 0;
}

}  // namespace

Command addOpsCommand(CLI::App& parent) {
  auto opts = std::make_shared<OpsOptions>();
  CLI::App* cmd = parent.add_subcommand(
      "ops", "List the fusectl-domain operators: inputs, attributes, epilogue activations");
  cmd->add_flag("--json", opts->json, "JSON, with each activation's parameters and defaults");
  cmd->add_flag("--markdown", opts->markdown, "The Markdown that docs/ops.md embeds");
  return Command{cmd, [opts] { return runOps(*opts); }};
}

}  // namespace fusectl::cli
