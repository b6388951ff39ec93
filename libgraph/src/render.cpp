// Format names and streaming a rendering into a file atomically.
#include <fmt/format.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <ostream>

#include "fusectl/graph/error.h"
#include "fusectl/graph/render.h"
#include "fusectl/support/temp_file_registry.h"

namespace fusectl {

std::optional<DumpFormat> dumpFormatFromName(std::string_view name) {
  if (name == "text") return DumpFormat::Text;
  if (name == "json") return DumpFormat::Json;
  if (name == "dot") return DumpFormat::Dot;
  return std::nullopt;
}

std::string_view dumpFormatName(DumpFormat format) {
  switch (format) {
    case DumpFormat::Text: return "text";
    case DumpFormat::Json: return "json";
    case DumpFormat::Dot: return "dot";
  }
  return "text";
}

void renderModel(const Model& model, DumpFormat format, std::ostream& out,
                 const RenderOptions& options) {
  switch (format) {
    case DumpFormat::Text: renderText(model, out, options); break;
    case DumpFormat::Json: renderJson(model, out, options); break;
    case DumpFormat::Dot: renderDot(model, out, options); break;
  }
}

void renderModelToFile(const Model& model, DumpFormat format, const std::string& path,
                       const RenderOptions& options) {
  // mkstemp in the target's folder, so that rename() stays on one file system.
  std::string tmp = path + ".tmp.XXXXXX";
  int cleanup_slot = -1;
  {
    CleanupSignalsBlocked until_registered;  // no signal between creating and registering it
    int fd = mkstemp(tmp.data());
    if (fd < 0) throwIo(fmt::format("{}: cannot create file: {}", path, std::strerror(errno)));
    close(fd);
    cleanup_slot = registerTempFile(tmp.c_str());  // removed on SIGINT/SIGTERM
  }
  try {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    renderModel(model, format, out, options);
    out.close();
    if (!out) throwIo(fmt::format("{}: write failed: {}", path, std::strerror(errno)));
    // mkstemp creates 0600; give the file the permissions an ordinary create would.
    mode_t mask = umask(0);
    umask(mask);
    chmod(tmp.c_str(), 0666 & ~mask);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      throwIo(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
    }
    unregisterTempFile(cleanup_slot);
  } catch (...) {
    std::remove(tmp.c_str());
    unregisterTempFile(cleanup_slot);
    throw;
  }
}

}  // namespace fusectl
