// `--rtol-scale`, shared by verify, optimize (--verify, --bisect) and profile.
#include <fmt/format.h>

#include "commands.h"

namespace fusectl::cli {

CLI::Option* addRtolScaleOption(CLI::App& command, kernels::RtolScale& scale,
                                const std::string& reference) {
  return command
      .add_option_function<std::string>(
          "--rtol-scale",
          [&scale](const std::string& name) {
            scale = name == "element" ? kernels::RtolScale::Element : kernels::RtolScale::Tensor;
          },
                  fmt::format("What rtol multiplies: tensor, the largest |{0}| of each output "
                              "(rounding drift is of the output's scale, not of each element's); "
                              "element, each element's own |{0}| (numpy's allclose)",
                              reference))
      ->check(CLI::IsMember({"element", "tensor"}))
      ->default_str("tensor");
}

std::string rtolText(double rtol, kernels::RtolScale scale) {
  return scale == kernels::RtolScale::Tensor
             ? fmt::format("rtol {:g} of each output's largest magnitude", rtol)
             : fmt::format("rtol {:g}", rtol);
}

}  // namespace fusectl::cli
