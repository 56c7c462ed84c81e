#include "proxy/http/llhttp_parser.h"

#include <llhttp.h>

namespace sluice {

void LlhttpDeleter::operator()(llhttp_t* parser) const { delete parser; }

LlhttpPtr newLlhttp() { return LlhttpPtr(new llhttp_t{}); }

}  // namespace sluice
