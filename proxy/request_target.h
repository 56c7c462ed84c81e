#pragma once

// The request target of an HTTP/1.1 request head, as sluice routes it.

#include "common/http_message.h"

namespace sluice {

/**
 * RFC 9112 §3.2.2: a server accepts the absolute-form ("http://host/p?q")
 * too. Routes match on the path, so the target becomes origin-form
 * ("/p?q"; "/" without a path; a fragment is dropped) and Host becomes the
 * target's authority (the received Host is ignored). Origin-form and "*"
 * are left alone. False when the target is not an http(s) URI sluice can
 * use: another scheme, userinfo, an empty or malformed host or port (the
 * rules http-parser's URL parser applied before llhttp, which has none).
 */
bool toOriginForm(RequestHead& head);

}  // namespace sluice
