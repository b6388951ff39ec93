// ONNX Runtime as the reference, through node and tests/ort_reference.js (graph optimizations
// off, one thread): a model's outputs on given inputs. Where ORT is installed: findOrtSetup().
#pragma once

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "shell_util.h"
#include "test_files.h"
#include "fusectl/kernels/executor.h"
#include "fusectl/kernels/npy.h"

namespace fusectl::test {

// Runs `model` under ORT on `inputs` and returns the outputs named `outputs`; the .npy files
// and ORT's log go to `dir`. A failed run fails the test with the command and the log.
inline std::vector<kernels::NamedTensor> runOrt(const OrtSetup& ort,
                                                const std::filesystem::path& model,
                                                const std::vector<kernels::NamedTensor>& inputs,
                                                const std::vector<std::string>& outputs,
                                                const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir / "in");
  std::string cmd = "FUSECTL_ORT_DIR=" + shellQuote(ort.dir) + " " + shellQuote(ort.node) + " " +
                    shellQuote(std::string(FUSECTL_SOURCE_DIR) + "/tests/ort_reference.js") +
                    " " + shellQuote(model.string()) + " " + shellQuote((dir / "out").string());
  for (const kernels::NamedTensor& in : inputs) {
    const std::string file = (dir / "in" / (outputFileStem(in.name) + ".npy")).string();
    kernels::writeNpy(in.tensor, file);
    cmd += " " + shellQuote(in.name + "=" + file);
  }
  cmd += " > " + shellQuote((dir / "ort.log").string()) + " 2>&1";
  const int status = std::system(cmd.c_str());
  INFO(cmd << "\n" << fusectl::testing::slurp(dir / "ort.log"));
  REQUIRE(status == 0);
  std::vector<kernels::NamedTensor> out;
  for (const std::string& name : outputs)
    out.push_back({name, kernels::readNpy((dir / "out" / (outputFileStem(name) + ".npy")).string())});
  return out;
}

}  // namespace fusectl::test
