// Pipeline text (`--passes`): parse, and the printed pipeline parses back to itself.
#include "fuzz_common.h"
#include "fusectl/passes/pipeline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fusectl::fuzz::expectCleanOutcome([&] {
    const fusectl::passes::Pipeline p =
        fusectl::passes::Pipeline::parse(fusectl::fuzz::bytesOf(data, size));
    const std::string printed = p.str();
    const std::string again = fusectl::passes::Pipeline::parse(printed).str();
    if (again != printed) fusectl::fuzz::fail("pipeline prints '" + printed + "' then '" + again + "'");
  });
  return 0;
}
