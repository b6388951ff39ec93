// The output comparison's options, shared by verify, optimize (--verify, --bisect) and profile.
#include <fmt/format.h>

#include <cctype>

#include "commands.h"
#include "fusectl/graph/error.h"

namespace fusectl::cli {

kernels::Tolerance cliTolerance() {
  kernels::Tolerance t;
  t.atol = 1e-5;
  t.rtol = 1e-4;
  t.rtol_scale = kernels::RtolScale::Tensor;
  t.min_cosine = 0.9999;
  return t;
}

ToleranceOptions addToleranceOptions(CLI::App& command, kernels::Tolerance& tolerance,
                                     const std::string& what, const std::string& reference) {
  const auto help = [&what](std::string text) {
    if (what.empty()) text[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(text[0])));
    return what + text;
  };
  ToleranceOptions o;
  o.atol = command.add_option("--atol", tolerance.atol, help("absolute tolerance"))
               ->capture_default_str();
  o.rtol = command
               .add_option("--rtol", tolerance.rtol,
                           help(fmt::format("relative tolerance, times |{}| (see --rtol-scale)",
                                            reference)))
               ->capture_default_str();
  o.rtol_scale =
      command
          .add_option_function<std::string>(
              "--rtol-scale",
              [&tolerance](const std::string& name) {
                tolerance.rtol_scale =
                    name == "element" ? kernels::RtolScale::Element : kernels::RtolScale::Tensor;
              },
              help(fmt::format("what rtol multiplies: tensor, the largest |{0}| of each output "
                               "(rounding drift is of the output's scale, not of each "
                               "element's); element, each element's own |{0}| (numpy's "
                               "allclose)",
                               reference)))
          ->check(CLI::IsMember({"element", "tensor"}))
          ->default_str(kernels::rtolScaleName(tolerance.rtol_scale));
  o.min_cosine = command
                     .add_option("--min-cosine", tolerance.min_cosine,
                                 help("smallest accepted cosine similarity"))
                     ->capture_default_str();
  return o;
}

size_t ToleranceOptions::given() const {
  return atol->count() + rtol->count() + rtol_scale->count() + min_cosine->count();
}

void checkTolerance(const kernels::Tolerance& tolerance) {
  if (tolerance.atol < 0 || tolerance.rtol < 0)
    throw Error(ErrorKind::Usage, "tolerances must be >= 0");
}

std::string rtolText(double rtol, kernels::RtolScale scale) {
  return scale == kernels::RtolScale::Tensor
             ? fmt::format("rtol {:g} of each output's largest magnitude", rtol)
             : fmt::format("rtol {:g}", rtol);
}

}  // namespace fusectl::cli
