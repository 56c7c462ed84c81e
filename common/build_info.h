#pragma once

// What binary this is: the version (CMake's project version) and the git
// commit it was configured from ("unknown" outside a git checkout, e.g. a
// source tarball; -DSLUICE_COMMIT=... overrides it). Exported as
// sluice_build_info{version,commit} 1.

#include <string_view>

namespace sluice {

/** The release version, e.g. "0.1.0". */
std::string_view buildVersion();
/** The abbreviated git commit at configure time, or "unknown". */
std::string_view buildCommit();

}  // namespace sluice
