#include "proxy/admin_server.h"

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <nlohmann/json.hpp>

#include "config/render.h"
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

}  // namespace

AdminServer::AdminServer(Server& server)
    : server_(server), dispatcher_(RealClock::instance()) {}

AdminServer::~AdminServer() { stop(); }

bool AdminServer::start(const std::string& host, uint16_t port, std::string* error) {
  http_ = evhttp_new(dispatcher_.base());
  evhttp_set_allowed_methods(http_, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD);
  evhttp_set_gencb(http_, &AdminServer::onRequest, this);
  evhttp_bound_socket* bound = evhttp_bind_socket_with_handle(http_, host.c_str(), port);
  if (bound == nullptr) {
    *error = "cannot listen on admin address " + host + ":" + std::to_string(port);
    evhttp_free(http_);
    http_ = nullptr;
    return false;
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(evhttp_bound_socket_get_fd(bound), reinterpret_cast<sockaddr*>(&ss), &len);
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

  if (path == "/metrics" && !post) {
    reply(req, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", server_.metrics().serialize());
  } else if (path == "/healthz" && !post) {
    reply(req, 200, "OK", "text/plain", "ok\n");
  } else if (path == "/ready" && !post) {
    if (server_.ready()) {
      reply(req, 200, "OK", "text/plain", "ready\n");
    } else {
      reply(req, 503, "Service Unavailable", "text/plain", "draining\n");
    }
  } else if (path == "/config" && !post) {
    nlohmann::json j = config::toRedactedJson(server_.runtime()->config());
    nlohmann::json chain = nlohmann::json::array();
    for (auto name : filterChainNames()) chain.push_back(std::string(name));
    j["filter_chain"] = chain;
    reply(req, 200, "OK", "application/json",
          j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  } else if (path == "/exchanges" && !post) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& s : server_.exchanges()) {
      list.push_back({{"id", s.id},
                      {"request_id", s.request_id},
                      {"route", s.route},
                      {"upstream", s.upstream},
                      {"method", s.method},
                      {"path", s.path},
                      {"state", s.state},
                      {"cancel_reason", s.cancel_reason.empty() ? nlohmann::json(nullptr)
                                                                : nlohmann::json(s.cancel_reason)},
                      {"attempts", s.attempts},
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
  } else if (path == "/drain" && post) {
    server_.requestShutdown();
    reply(req, 202, "Accepted", "text/plain", "draining\n");
  } else {
    reply(req, 404, "Not Found", "text/plain", "not found\n");
  }
}

}  // namespace sluice
