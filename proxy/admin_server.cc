#include "proxy/admin_server.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>

#include "common/http_headers.h"
#include "config/render.h"
#include "proxy/admin_access.h"
#include "proxy/filter_chain.h"
#include "proxy/server.h"

namespace sluice {

namespace {

void reply(evhttp_request* req, int code, const char* reason, const char* content_type,
           const std::string& body) {
  evkeyvalq* headers = evhttp_request_get_output_headers(req);
  evhttp_add_header(headers, "Content-Type", content_type);
  evhttp_add_header(headers, "Cache-Control", "no-store");
  evbuffer* buf = evbuffer_new();
  evbuffer_add(buf, body.data(), body.size());
  evhttp_send_reply(req, code, reason, buf);
  evbuffer_free(buf);
}

/**
 * A listening socket for the admin address. Bound here rather than by
 * evhttp so a failure can say why (errno), and without SO_REUSEPORT: a
 * second process must not share the admin port.
 */
evutil_socket_t bindAdminSocket(const std::string& host, uint16_t port, std::string* error) {
  const std::string address =
      (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), std::to_string(port).c_str(),
                             &hints, &res);
  if (rc != 0) {
    *error = "cannot listen on admin address " + address + ": " + gai_strerror(rc);
    return -1;
  }
  std::string why = "no address to bind";
  evutil_socket_t fd = -1;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      why = std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) *error = "cannot listen on admin address " + address + ": " + why;
  return fd;
}

/** The headers refuseAdminRequest() reads (views into `req`'s header list). */
AdminRequestHeaders accessHeaders(evhttp_request* req) {
  AdminRequestHeaders h;
  const evkeyvalq* headers = evhttp_request_get_input_headers(req);
  for (const evkeyval* kv = headers->tqh_first; kv != nullptr; kv = kv->next.tqe_next) {
    const std::string_view name = kv->key;
    const std::string_view value = kv->value;
    if (equalsIgnoreCase(name, "host")) h.hosts.push_back(value);
    if (equalsIgnoreCase(name, "origin")) h.origin = value;
    if (equalsIgnoreCase(name, "sec-fetch-site")) h.sec_fetch_site = value;
    if (equalsIgnoreCase(name, "content-type")) h.content_type = value;
    if (equalsIgnoreCase(name, kAdminHeader) && !value.empty()) h.has_admin_header = true;
  }
  return h;
}

}  // namespace

AdminServer::AdminServer(Server& server) : server_(server), dispatcher_(RealClock::instance()) {}

AdminServer::~AdminServer() { stop(); }

bool AdminServer::start(const std::string& host, uint16_t port, std::string* error) {
  const evutil_socket_t fd = bindAdminSocket(host, port, error);
  if (fd < 0) return false;
  http_ = evhttp_new(dispatcher_.base());
  evhttp_set_allowed_methods(http_, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD);
  evhttp_set_gencb(http_, &AdminServer::onRequest, this);
  evhttp_bound_socket* bound = evhttp_accept_socket_with_handle(http_, fd);
  if (bound == nullptr) {
    *error = "cannot listen on admin address " + host + ":" + std::to_string(port) +
             ": evhttp refused the socket";
    ::close(fd);
    evhttp_free(http_);
    http_ = nullptr;
    return false;
  }
  host_ = host;
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  thread_ = std::thread([this] { dispatcher_.run(); });
  return true;
}

void AdminServer::stop() {
  if (thread_.joinable()) {
    dispatcher_.exit();
    thread_.join();
  }
  if (http_ != nullptr) {
    evhttp_free(http_);
    http_ = nullptr;
  }
}

void AdminServer::onRequest(evhttp_request* req, void* arg) {
  static_cast<AdminServer*>(arg)->handle(req);
}

void AdminServer::handle(evhttp_request* req) {
  const evhttp_uri* uri = evhttp_request_get_evhttp_uri(req);
  const char* raw_path = uri != nullptr ? evhttp_uri_get_path(uri) : nullptr;
  const std::string path = raw_path != nullptr ? raw_path : "/";
  const bool post = evhttp_request_get_command(req) == EVHTTP_REQ_POST;

  // Who may ask (proxy/admin_access.h): Host and Origin first, for every path.
  AdminAccessPolicy policy{host_, server_.runtime()->config().admin_allowed_hosts};
  AdminRequestHeaders headers = accessHeaders(req);
  if (auto why = refuseAdminRequest(policy, headers)) {
    reply(req, 403, "Forbidden", "text/plain", *why + "\n");
    return;
  }
  static constexpr std::string_view kGetPaths[] = {"/metrics", "/healthz", "/ready", "/config",
                                                   "/exchanges"};
  const bool get_path =
      std::find(std::begin(kGetPaths), std::end(kGetPaths), path) != std::end(kGetPaths);
  if (!get_path && path != "/drain") {
    reply(req, 404, "Not Found", "text/plain", "not found\n");
    return;
  }
  if (get_path == post) {
    evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                      get_path ? "GET, HEAD" : "POST");
    reply(req, 405, "Method Not Allowed", "text/plain",
          path + (get_path ? " answers GET and HEAD\n" : " answers POST only\n"));
    return;
  }
  if (post) {
    headers.post = true;
    if (auto why = refuseAdminRequest(policy, headers)) {
      reply(req, 403, "Forbidden", "text/plain", *why + "\n");
      return;
    }
  }

  if (path == "/metrics") {
    reply(req, 200, "OK", "text/plain; version=0.0.4; charset=utf-8",
          server_.metrics().serialize());
  } else if (path == "/healthz") {
    reply(req, 200, "OK", "text/plain", "ok\n");
  } else if (path == "/ready") {
    if (server_.ready()) {
      reply(req, 200, "OK", "text/plain", "ready\n");
    } else {
      reply(req, 503, "Service Unavailable", "text/plain", "draining\n");
    }
  } else if (path == "/config") {
    nlohmann::json j = config::toRedactedJson(server_.runtime()->config());
    nlohmann::json chain = nlohmann::json::array();
    for (auto name : filterChainNames()) chain.push_back(std::string(name));
    j["filter_chain"] = chain;
    reply(req, 200, "OK", "application/json",
          j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  } else if (path == "/exchanges") {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& s : server_.exchanges()) {
      list.push_back(
          {{"id", s.id},
           {"request_id", s.request_id},
           {"route", s.route},
           {"upstream", s.upstream},
           {"endpoint", s.endpoint.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.endpoint)},
           {"method", s.method},
           {"path", s.path},
           {"state", s.state},
           {"cancel_reason",
            s.cancel_reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.cancel_reason)},
           {"attempts", s.attempts},
           {"fallbacks", s.fallbacks},
           {"age_seconds", s.age_seconds},
           {"budget_left_seconds", s.budget_left_seconds < 0
                                       ? nlohmann::json(nullptr)
                                       : nlohmann::json(s.budget_left_seconds)},
           {"client_attached", s.client_attached},
           {"upstream_paused", s.upstream_paused},
           {"downstream_buffered_bytes", s.downstream_buffered_bytes},
           {"response_bytes", s.response_bytes}});
    }
    reply(req, 200, "OK", "application/json",
          nlohmann::json{{"exchanges", list}}.dump(2, ' ', false,
                                                   nlohmann::json::error_handler_t::replace) +
              "\n");
  } else {  // POST /drain
    // Start the drain once the 202 is written (or the client is gone): with
    // nothing in flight the process exits at once, and the admin loop would
    // stop before the answer left.
    evhttp_request_set_on_complete_cb(
        req, [](evhttp_request*, void* arg) { static_cast<Server*>(arg)->requestShutdown(); },
        &server_);
    evhttp_connection_set_closecb(
        evhttp_request_get_connection(req),
        [](evhttp_connection*, void* arg) { static_cast<Server*>(arg)->requestShutdown(); },
        &server_);
    reply(req, 202, "Accepted", "text/plain", "draining\n");
  }
}

}  // namespace sluice
