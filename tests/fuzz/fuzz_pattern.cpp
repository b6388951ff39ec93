// The pattern syntax (docs/patterns.md): parse, and the printed form parses back to itself.
#include "fuzz_common.h"
#include "fusectl/passes/pattern.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fusectl::fuzz::expectCleanOutcome([&] {
    const fusectl::passes::Pattern p =
        fusectl::passes::Pattern::parse(fusectl::fuzz::bytesOf(data, size));
    const std::string printed = p.str();
    const std::string again = fusectl::passes::Pattern::parse(printed).str();
    if (again != printed) fusectl::fuzz::fail("pattern prints '" + printed + "' then '" + again + "'");
  });
  return 0;
}
