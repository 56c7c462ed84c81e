#include "common/http_message.h"

#include <llhttp.h>

namespace sluice {

std::optional<std::string> methodRefusal(std::string_view method) {
  if (method == "CONNECT") {
    return std::string("CONNECT cannot be proxied: sluice proxies requests, not tunnels");
  }
  // llhttp's HTTP methods: the same 34 as http-parser 2.9's before it.
#define SLUICE_KNOWN_METHOD(num, name, string) \
  if (method == #string) return std::nullopt;
  HTTP_METHOD_MAP(SLUICE_KNOWN_METHOD)
#undef SLUICE_KNOWN_METHOD
  return "the request method " + std::string(method.substr(0, 32)) + " is not one sluice proxies";
}

const char* reasonPhrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 101:
      return "Switching Protocols";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 204:
      return "No Content";
    case 206:
      return "Partial Content";
    case 301:
      return "Moved Permanently";
    case 302:
      return "Found";
    case 304:
      return "Not Modified";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 422:
      return "Unprocessable Content";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 499:
      return "Client Closed Request";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "";
  }
}

}  // namespace sluice
