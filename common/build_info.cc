#include "common/build_info.h"

// Both are set by CMakeLists.txt for this file only, so a new commit
// recompiles one file.
#ifndef SLUICE_VERSION
#define SLUICE_VERSION "0.0.0"
#endif
#ifndef SLUICE_COMMIT
#define SLUICE_COMMIT "unknown"
#endif

namespace sluice {

std::string_view buildVersion() { return SLUICE_VERSION; }
std::string_view buildCommit() { return SLUICE_COMMIT; }

}  // namespace sluice
