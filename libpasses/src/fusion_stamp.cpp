// The fusion stamp codec (fusion_stamp.h): written by the Rewriter, read by `fusectl diff`.
#include "fusectl/passes/fusion_stamp.h"

#include <fmt/format.h>

namespace fusectl::passes {

namespace {
constexpr std::string_view kStampPrefix = "fusectl ";
constexpr std::string_view kStampFused = ": fused ";
constexpr std::string_view kLabelSeparator = ", ";
}  // namespace

std::string formatFusionStamp(std::string_view pass, const std::vector<std::string>& replaced) {
  return fmt::format("{}{}{}{}", kStampPrefix, pass, kStampFused,
                     fmt::join(replaced, kLabelSeparator));
}

std::string appendFusionStamp(std::string_view doc, std::string_view stamp) {
  if (doc.empty()) return std::string(stamp);
  std::string out;
  out.reserve(doc.size() + 1 + stamp.size());
  out.append(doc).append("\n").append(stamp);
  return out;
}

bool parseFusionStamp(std::string_view line, std::string& pass,
                      std::vector<std::string>& replaced) {
  if (line.substr(0, kStampPrefix.size()) != kStampPrefix) return false;
  const size_t colon = line.find(kStampFused, kStampPrefix.size());
  if (colon == std::string_view::npos || colon == kStampPrefix.size()) return false;
  pass = std::string(line.substr(kStampPrefix.size(), colon - kStampPrefix.size()));
  if (pass.find(' ') != std::string::npos) return false;  // pass names have no blanks
  replaced.clear();
  const std::string_view rest = line.substr(colon + kStampFused.size());
  size_t start = 0;
  while (start <= rest.size()) {
    const size_t comma = rest.find(kLabelSeparator, start);
    const std::string_view item =
        rest.substr(start, comma == std::string_view::npos ? std::string_view::npos
                                                           : comma - start);
    if (!item.empty()) replaced.emplace_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + kLabelSeparator.size();
  }
  return true;
}

std::vector<std::string> fusionStampLines(std::string_view doc) {
  std::vector<std::string> out;
  std::string pass;
  std::vector<std::string> replaced;
  size_t start = 0;
  while (start < doc.size()) {
    size_t end = doc.find('\n', start);
    if (end == std::string_view::npos) end = doc.size();
    const std::string_view line = doc.substr(start, end - start);
    if (parseFusionStamp(line, pass, replaced)) out.emplace_back(line);
    start = end + 1;
  }
  return out;
}

}  // namespace fusectl::passes
