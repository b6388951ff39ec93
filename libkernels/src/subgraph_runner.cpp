// KernelContext::runSubgraph: the one entry from a control-flow kernel into the executor.
#include <string>

#include "fusectl/kernels/kernel.h"

namespace fusectl::kernels {

std::vector<HostTensor> KernelContext::runSubgraph(std::string_view attr,
                                                   const std::vector<HostTensor>& inputs) const {
  const Attribute* a = node_.attr(attr);
  if (!a || !a->g) fail("has no graph attribute '" + std::string(attr) + "'");
  if (!subgraph_runner_) fail("its subgraphs run only inside an executor");
  return subgraph_runner_->run(*a->g, inputs);
}

}  // namespace fusectl::kernels
