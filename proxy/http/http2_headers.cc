#include "proxy/http/http2_headers.h"

#include <charconv>

namespace sluice {

namespace {

nghttp2_nv makeNv(std::string_view name, std::string_view value, uint8_t flags) {
  return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), flags};
}

/** A response field HTTP/2 does not carry: pseudo-header-like or connection-specific. */
bool droppedFromHttp2Response(std::string_view name) {
  return name.empty() || name.front() == ':' || isHttp2ConnectionSpecificHeader(name);
}

uint8_t indexFlag(std::string_view name) {
  return isHttp2PerResponseValue(name) ? NGHTTP2_NV_FLAG_NO_INDEX : NGHTTP2_NV_FLAG_NONE;
}

}  // namespace

bool isHttp2ConnectionSpecificHeader(std::string_view name) {
  // By length first: a response's ordinary fields rarely have these sizes.
  switch (name.size()) {
    case 2:
      return name == "te";
    case 7:
      return name == "upgrade";
    case 10:
      return name == "connection" || name == "keep-alive";
    case 16:
      return name == "proxy-connection";
    case 17:
      return name == "transfer-encoding";
    default:
      return false;
  }
}

bool isHttp2PerResponseValue(std::string_view name) {
  // Called for every response field: most leave at the first or last byte.
  if (name.size() < 10) return false;
  if (name.back() == 'd') return name.ends_with("request-id");
  if (name.front() == 'x') {
    // OpenAI, Azure: x-ratelimit-{limit,remaining,reset}[-{requests,tokens}]
    constexpr std::string_view kPrefix = "x-ratelimit-";
    if (!name.starts_with(kPrefix)) return false;
    const std::string_view kind = name.substr(kPrefix.size());
    return kind.starts_with("remaining") || kind.starts_with("reset");
  }
  if (name.front() == 'a') {
    // Anthropic: anthropic-ratelimit-<what>-{limit,remaining,reset}
    return name.starts_with("anthropic-ratelimit-") &&
           (name.ends_with("-remaining") || name.ends_with("-reset"));
  }
  return false;
}

void Http2RequestHeadBuilder::add(std::string_view name, std::string_view value) {
  addField(name, value, /*lower_case=*/false);
}

void Http2RequestHeadBuilder::addValidated(std::string_view name, std::string_view value) {
  addField(name, value, /*lower_case=*/true);
}

void Http2RequestHeadBuilder::addField(std::string_view name, std::string_view value,
                                       bool lower_case) {
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
  if (name.size() == 4 && equalsIgnoreCase(name, "host")) host_field_ = true;  // rare on HTTP/2
  if (lower_case) {
    head_.headers.addLowerCase(name, value);
  } else {
    head_.headers.add(name, value);
  }
}

RequestHead Http2RequestHeadBuilder::finish() {
  if (!authority_.empty()) {
    // :authority wins over host fields: `set` (a scan and a removal) only
    // when there is one to replace.
    if (host_field_) {
      head_.headers.set("host", authority_);
    } else {
      head_.headers.addLowerCase("host", authority_);
    }
  }
  if (!cookie_.empty()) head_.headers.addLowerCase("cookie", cookie_);
  head_.version_major = 2;
  head_.version_minor = 0;
  return std::move(head_);
}

std::vector<nghttp2_nv> toHttp2ResponseNv(const ResponseHead& head, std::string& status_storage) {
  status_storage = std::to_string(head.status);
  std::vector<nghttp2_nv> nv;
  nv.reserve(head.headers.size() + 1);
  nv.push_back(makeNv(":status", status_storage, NGHTTP2_NV_FLAG_NONE));
  for (const auto& [name, value] : head.headers) {
    // HeaderMap names are lower-case already; HTTP/2 requires it.
    if (droppedFromHttp2Response(name)) continue;
    nv.push_back(makeNv(name, value, indexFlag(name)));
  }
  return nv;
}

Http2ResponseNv::Http2ResponseNv(const HeaderMap& fields, int status, StatusText& status_text,
                                 bool index_per_response_values) {
  constexpr uint8_t kNoCopy = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
  const auto end =
      std::to_chars(status_text.data(), status_text.data() + status_text.size(), status).ptr;
  push(makeNv(":status",
              std::string_view(status_text.data(), static_cast<size_t>(end - status_text.data())),
              kNoCopy));
  for (const auto& [name, value] : fields) {
    if (droppedFromHttp2Response(name)) continue;
    push(makeNv(
        name, value,
        kNoCopy | (index_per_response_values ? uint8_t{NGHTTP2_NV_FLAG_NONE} : indexFlag(name))));
  }
}

void Http2ResponseNv::spill(const nghttp2_nv& nv) {
  if (heap_.empty()) heap_.assign(inline_, inline_ + kInline);
  heap_.push_back(nv);
  ++size_;
}

}  // namespace sluice
