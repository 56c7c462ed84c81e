#pragma once

// The one header-list type mock-llm passes around: request headers as
// received and response headers as the router decides them.

#include <string>
#include <utility>
#include <vector>

namespace mockllm {

/** Header fields in order: names as given (requests: lower-case), values verbatim, duplicates kept.
 */
using HeaderList = std::vector<std::pair<std::string, std::string>>;

}  // namespace mockllm
