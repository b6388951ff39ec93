#include "fusectl/graph/huge_page_malloc.h"

#include <cstdlib>
#include <fstream>
#include <string>

#if defined(__linux__)
#include <unistd.h>
#endif

namespace fusectl {

void restartWithHugePageMalloc(char** argv) {
#if defined(__linux__) && defined(__GLIBC__)
  if (!argv || !argv[0]) return;
  if (std::getenv("GLIBC_TUNABLES") || std::getenv("FUSECTL_NO_HUGE_PAGES")) return;
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  if (!std::getline(thp, modes) || modes.find("[never]") != std::string::npos) return;
  if (setenv("GLIBC_TUNABLES", "glibc.malloc.hugetlb=1", 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("GLIBC_TUNABLES");  // could not restart: carry on with ordinary pages
#else
  (void)argv;
#endif
}

}  // namespace fusectl
