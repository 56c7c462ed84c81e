#pragma once

// RAII ownership for nghttp2's C objects, as proxy/event/event_util.h does for
// libevent's: the session an HTTP/2 connection or upstream session keeps for
// its lifetime, and the callbacks and options that only live while that
// session is being created (nghttp2 copies both).

#include <nghttp2/nghttp2.h>

#include <memory>

namespace sluice {

struct Nghttp2SessionDeleter {
  void operator()(nghttp2_session* s) const { nghttp2_session_del(s); }
};
struct Nghttp2CallbacksDeleter {
  void operator()(nghttp2_session_callbacks* c) const { nghttp2_session_callbacks_del(c); }
};
struct Nghttp2OptionDeleter {
  void operator()(nghttp2_option* o) const { nghttp2_option_del(o); }
};

using Nghttp2SessionPtr = std::unique_ptr<nghttp2_session, Nghttp2SessionDeleter>;
using Nghttp2CallbacksPtr = std::unique_ptr<nghttp2_session_callbacks, Nghttp2CallbacksDeleter>;
using Nghttp2OptionPtr = std::unique_ptr<nghttp2_option, Nghttp2OptionDeleter>;

/** A new, empty callback table (null only if nghttp2 ran out of memory). */
inline Nghttp2CallbacksPtr newNghttp2Callbacks() {
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  return Nghttp2CallbacksPtr(callbacks);
}

/** A new option set, all defaults (null only if nghttp2 ran out of memory). */
inline Nghttp2OptionPtr newNghttp2Option() {
  nghttp2_option* option = nullptr;
  nghttp2_option_new(&option);
  return Nghttp2OptionPtr(option);
}

}  // namespace sluice
