// How `fusectl profile` shows a kernels::ProfileResult (profile_output.cpp): text on stdout, the
// JSON report (docs/schemas/profile.schema.json), the annotation summary (the Chrome trace is
// libkernels' profileTraceJson); and
// the optimizer's fusion sites as profileModels takes them (also for `fusectl report --profile`).
#pragma once

#include <string>
#include <vector>

#include "fusectl/graph/graph.h"
#include "fusectl/kernels/profile.h"
#include "fusectl/passes/report.h"

namespace fusectl::cli {

extern const char* const kProfileSchema;  // "fusectl.profile/1", the report's "schema"

// How the run was asked for: what the report says besides the result.
struct ProfileRequestInfo {
  std::string model;          // as given on the command line
  std::string pipeline;       // the fused side's pipeline text
  std::string pipeline_name;  // "-O3" or "--passes ..."
  std::string device;         // "cpu"
  std::string only;           // "", "fused" or "unfused"
  int top = 10;               // slowest nodes listed per side
  const std::vector<kernels::NamedTensor>* inputs = nullptr;
  std::vector<std::string> sources;  // per input: its file, or "random, seed N"
  kernels::Tolerance tolerance;
};

// The text report on stdout: the header, both sides' figures, the speedup, the output
// comparison, per-op tables, the slowest nodes and the fusion sites.
void printProfile(const ProfileRequestInfo& info, const kernels::ProfileResult& result);

// The JSON report, indented, with a final newline.
std::string profileReportJson(const ProfileRequestInfo& info, const kernels::ProfileResult& result);

// One line for the annotated model's "fusectl.profile" metadata.
std::string profileAnnotation(const kernels::ProfileResult& result,
                              const kernels::SideProfile& side, const std::string& pipeline_name);

// The report's fusion sites as plain data. A site names its fused node by the label it had
// when the fusion was committed; a later pass may still relabel it (an unnamed node is labelled
// by its first output, which can be renamed), so the node is also looked up by its fusion stamp
// (fusion_stamp.h), which stays on it, and final_node set when the label moved.
std::vector<kernels::FusionSiteInput> profileFusionSites(const passes::Report& report,
                                                         const Model& fused);

}  // namespace fusectl::cli
