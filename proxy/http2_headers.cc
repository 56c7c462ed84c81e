#include "proxy/http2_headers.h"

namespace sluice {

namespace {

nghttp2_nv makeNv(std::string_view name, std::string_view value) {
  // nghttp2 copies names and values when the frame is built (no NO_COPY flags).
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NONE};
}

}  // namespace

bool isHttp2ConnectionSpecificHeader(std::string_view name) {
  return name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
         name == "transfer-encoding" || name == "upgrade" || name == "te";
}

void Http2RequestHeadBuilder::add(std::string_view name, std::string_view value) {
  if (!name.empty() && name.front() == ':') {
    if (name == ":method") {
      head_.method.assign(value);
    } else if (name == ":path") {
      head_.path.assign(value);
    } else if (name == ":authority") {
      authority_.assign(value);
    } else if (name == ":scheme") {
      scheme_.assign(value);
    }
    return;  // nghttp2 rejects any other pseudo-header before it reaches us
  }
  if (name == "cookie") {
    // HTTP/2 may split cookies into crumbs; HTTP/1.1 upstreams need one field.
    if (!cookie_.empty()) cookie_ += "; ";
    cookie_.append(value);
    return;
  }
  head_.headers.add(name, value);
}

RequestHead Http2RequestHeadBuilder::finish() {
  if (!authority_.empty()) head_.headers.set("host", authority_);
  if (!cookie_.empty()) head_.headers.add("cookie", cookie_);
  head_.version_major = 2;
  head_.version_minor = 0;
  return std::move(head_);
}

std::vector<nghttp2_nv> toHttp2ResponseNv(const ResponseHead& head, std::string& status_storage) {
  status_storage = std::to_string(head.status);
  std::vector<nghttp2_nv> nv;
  nv.reserve(head.headers.size() + 1);
  nv.push_back(makeNv(":status", status_storage));
  for (const auto& [name, value] : head.headers) {
    // HeaderMap names are lower-case already; HTTP/2 requires it.
    if (name.empty() || name.front() == ':' || isHttp2ConnectionSpecificHeader(name)) continue;
    nv.push_back(makeNv(name, value));
  }
  return nv;
}

}  // namespace sluice
