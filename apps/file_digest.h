// SHA-256 digests of a model's files for the optimization report (OpenSSL's libcrypto). The
// report (libpasses) only holds them; reading files to hash them is the app's business.
#pragma once

#include <string>
#include <vector>

#include "fusectl/passes/report.h"

namespace fusectl::cli {

// The file's SHA-256 and size, read in pieces (a model file can be gigabytes); `file` is
// recorded as given. Throws fusectl::Error(Io) naming the file when it cannot be read.
passes::FileDigest digestFile(const std::string& path, std::string file);

// digestFile for each external-data location of the model at `model_path` (locations are
// relative to its folder, and recorded as given).
std::vector<passes::FileDigest> digestExternalFiles(const std::string& model_path,
                                                    const std::vector<std::string>& locations);

}  // namespace fusectl::cli
