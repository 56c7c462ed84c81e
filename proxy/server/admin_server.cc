#include "proxy/server/admin_server.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>

#include "common/http_headers.h"
#include "config/render.h"
#include "filters/runs/run_filter.h"
#include "proxy/exchange/filter_chain.h"
#include "proxy/server/admin_access.h"
#include "proxy/server/server.h"

namespace sluice {

struct AdminResponse {
  int code = 200;
  std::string reason = "OK";
  std::string content_type = "text/plain";
  std::string body;
  std::string allow;   // the Allow field of a 405
  bool drain = false;  // start draining once written (or once the client is gone)
};

/**
 * One admin connection: reads one request head (then its body, if any, to
 * discard), writes one answer and closes. Lives on the admin thread.
 */
class AdminConnection final : public DeferredDeletable {
 public:
  AdminConnection(AdminServer& server, evutil_socket_t fd);
  ~AdminConnection() override;

  // The parsed head (views into head_).
  std::string_view method;
  std::string_view target;
  AdminRequestHeaders access;

 private:
  enum class State { kHead, kBody, kWriting, kLingering, kClosed };
  static void onRead(bufferevent*, void* arg) { static_cast<AdminConnection*>(arg)->readSome(); }
  static void onWrite(bufferevent*, void* arg) { static_cast<AdminConnection*>(arg)->written(); }
  static void onEvent(bufferevent*, short what, void* arg) {
    static_cast<AdminConnection*>(arg)->event(what);
  }
  void readSome();
  void written();
  void event(short what);
  void deadline();
  /** Parses head_ (complete); false with `refusal` set when it is not a request sluice reads. */
  bool parseHead(AdminResponse& refusal);
  /** After the head: admission and body framing; then the body or the answer. */
  void headComplete(std::string_view body_bytes);
  void respond(const AdminResponse& response);
  void close();

  AdminServer& server_;
  BufferEventPtr bev_;
  ScheduledTimerPtr timer_;
  State state_ = State::kHead;
  std::string head_;
  size_t scanned_ = 0;      // head_ bytes already searched for the blank line
  uint64_t body_left_ = 0;  // body bytes still to read (and discard)
  std::string path_;
  bool drain_ = false;
  std::chrono::nanoseconds body_timeout_{};
  uint64_t discarded_ = 0;  // bytes read and dropped after the answer
  // After the answer: how long, and how much, is read and dropped before closing.
  static constexpr std::chrono::seconds kLinger{2};
  static constexpr uint64_t kLingerBytes = 64 * 1024;
};

namespace {

/** Token characters (RFC 9110 §5.6.2): method and field names. */
bool isToken(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

AdminResponse plain(int code, const char* reason, std::string body) {
  AdminResponse r;
  r.code = code;
  r.reason = reason;
  r.body = std::move(body);
  return r;
}

/**
 * A listening socket for the admin address. Bound here so a failure can
 * say why (errno), and without SO_REUSEPORT: a second process must not
 * share the admin port.
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

}  // namespace

// --- one connection ------------------------------------------------------------------------

AdminConnection::AdminConnection(AdminServer& server, evutil_socket_t fd)
    : server_(server),
      bev_(bufferevent_socket_new(server.dispatcher_.base(), fd, BEV_OPT_CLOSE_ON_FREE)),
      timer_(server.dispatcher_.createTimer([this] { deadline(); })) {
  const config::Config& cfg = server_.server_.runtime()->config();
  body_timeout_ = cfg.limits.body_read_timeout;
  // Reading stops while this much input waits: memory stays bounded whatever a client sends.
  bufferevent_setwatermark(bev_.get(), EV_READ, 0, kAdminMaxHeadBytes + kAdminMaxBodyBytes);
  // A client that stops reading its answer is dropped after send_timeout without progress.
  const timeval send_tv = toTimeval(cfg.limits.send_timeout);
  bufferevent_set_timeouts(bev_.get(), nullptr, &send_tv);
  bufferevent_setcb(bev_.get(), &AdminConnection::onRead, &AdminConnection::onWrite,
                    &AdminConnection::onEvent, this);
  bufferevent_enable(bev_.get(), EV_READ | EV_WRITE);
  timer_->arm(cfg.limits.header_read_timeout);
}

AdminConnection::~AdminConnection() {
  // A POST /drain whose client left before the 202 was written still drains
  // (not while the admin server itself is being torn down).
  if (drain_ && !server_.stopped_) server_.server_.requestShutdown();
}

void AdminConnection::readSome() {
  evbuffer* in = bufferevent_get_input(bev_.get());
  if (state_ == State::kBody) {
    const size_t n = std::min<uint64_t>(evbuffer_get_length(in), body_left_);
    evbuffer_drain(in, n);
    body_left_ -= n;
    if (body_left_ == 0) {
      timer_->disarm();
      respond(server_.answer(path_));
    }
    return;
  }
  if (state_ != State::kHead) {  // answered: what follows is discarded
    discarded_ += evbuffer_get_length(in);
    evbuffer_drain(in, evbuffer_get_length(in));
    if (state_ == State::kLingering && discarded_ > kLingerBytes) close();
    return;
  }
  const size_t room = kAdminMaxHeadBytes - head_.size();
  const size_t n = std::min(evbuffer_get_length(in), room);
  const size_t old = head_.size();
  head_.resize(old + n);
  evbuffer_remove(in, head_.data() + old, n);
  const size_t end = head_.find("\r\n\r\n", scanned_ >= 3 ? scanned_ - 3 : 0);
  scanned_ = head_.size();
  if (end == std::string::npos) {
    if (head_.size() >= kAdminMaxHeadBytes) {
      respond(plain(431, "Request Header Fields Too Large",
                    "the admin port reads request heads up to " +
                        std::to_string(kAdminMaxHeadBytes) + " bytes\n"));
    }
    return;
  }
  const std::string body_bytes = head_.substr(end + 4);
  head_.resize(end + 4);
  timer_->disarm();
  headComplete(body_bytes);
}

bool AdminConnection::parseHead(AdminResponse& refusal) {
  refusal = plain(400, "Bad Request", "malformed request head\n");
  std::string_view rest(head_);
  rest.remove_suffix(4);  // the blank line
  const size_t line_end = rest.find("\r\n");
  const std::string_view line = rest.substr(0, line_end);
  rest = line_end == std::string_view::npos ? std::string_view() : rest.substr(line_end + 2);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) return false;
  method = line.substr(0, sp1);
  target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!isToken(method) || target.empty() || (version != "HTTP/1.1" && version != "HTTP/1.0")) {
    return false;
  }
  while (!rest.empty()) {
    const size_t eol = rest.find("\r\n");
    const std::string_view field = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 2);
    const size_t colon = field.find(':');
    if (colon == std::string_view::npos || !isToken(field.substr(0, colon))) return false;
    const std::string_view name = field.substr(0, colon);
    const std::string_view value = trimOws(field.substr(colon + 1));
    if (equalsIgnoreCase(name, "host")) access.hosts.push_back(value);
    if (equalsIgnoreCase(name, "origin")) access.origin = value;
    if (equalsIgnoreCase(name, "sec-fetch-site")) access.sec_fetch_site = value;
    if (equalsIgnoreCase(name, "content-type")) access.content_type = value;
    if (equalsIgnoreCase(name, kAdminHeader) && !value.empty()) access.has_admin_header = true;
    if (equalsIgnoreCase(name, "transfer-encoding")) {
      refusal = plain(411, "Length Required",
                      "the admin port takes no Transfer-Encoding; send Content-Length\n");
      return false;
    }
    if (equalsIgnoreCase(name, "content-length")) {
      if (value.empty() || value.size() > 18 ||
          value.find_first_not_of("0123456789") != std::string_view::npos) {
        return false;
      }
      const uint64_t length = std::stoull(std::string(value));
      if (body_left_ != 0 && body_left_ != length) return false;
      body_left_ = length;
    }
  }
  return true;
}

void AdminConnection::headComplete(std::string_view body_bytes) {
  AdminResponse refusal;
  if (!parseHead(refusal)) {
    respond(refusal);
    return;
  }
  // The path, without query; an absolute-form target keeps only its path.
  std::string_view path = target.substr(0, target.find('?'));
  if (path.substr(0, 7) == "http://" || path.substr(0, 8) == "https://") {
    const size_t slash = path.find('/', path.find("//") + 2);
    path = slash == std::string_view::npos ? std::string_view("/") : path.substr(slash);
  }
  path_ = std::string(path);
  // Who asks, then what: all decided from the head alone.
  if (auto refused = server_.admit(*this, path_)) {
    respond(*refused);
    return;
  }
  if (body_left_ > kAdminMaxBodyBytes) {
    respond(plain(413, "Content Too Large",
                  "the admin port takes request bodies up to " +
                      std::to_string(kAdminMaxBodyBytes) + " bytes\n"));
    return;
  }
  const size_t already = std::min<uint64_t>(body_bytes.size(), body_left_);
  body_left_ -= already;
  if (body_left_ == 0) {
    respond(server_.answer(path_));
    return;
  }
  state_ = State::kBody;
  timer_->arm(body_timeout_);
  readSome();  // bytes already waiting in the input buffer
}

void AdminConnection::deadline() {
  if (state_ == State::kLingering || (state_ == State::kHead && head_.empty())) {
    close();  // never said anything, or answered and lingered long enough
  } else if (state_ == State::kHead || state_ == State::kBody) {
    respond(plain(408, "Request Timeout",
                  state_ == State::kHead ? "the request head did not complete in time\n"
                                         : "the request body did not complete in time\n"));
  }
}

void AdminConnection::respond(const AdminResponse& r) {
  state_ = State::kWriting;
  timer_->disarm();
  drain_ = r.drain;
  const bool head = method == "HEAD";
  std::string out = "HTTP/1.1 " + std::to_string(r.code) + " " + r.reason +
                    "\r\nContent-Type: " + r.content_type +
                    "\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: " +
                    std::to_string(r.body.size()) + "\r\n";
  if (!r.allow.empty()) out += "Allow: " + r.allow + "\r\n";
  out += "\r\n";
  if (!head) out += r.body;
  bufferevent_write(bev_.get(), out.data(), out.size());
}

void AdminConnection::written() {
  if (state_ != State::kWriting) return;
  if (evbuffer_get_length(bufferevent_get_output(bev_.get())) != 0) return;
  if (drain_) {
    drain_ = false;
    server_.server_.requestShutdown();
  }
  // A lingering close: the answer and a FIN go now, and what the client still
  // sends (the rest of a refused head or body) is read and dropped for a
  // moment, so closing does not reset the connection before it read the answer.
  ::shutdown(bufferevent_getfd(bev_.get()), SHUT_WR);
  state_ = State::kLingering;
  timer_->arm(kLinger);
}

void AdminConnection::event(short what) {
  if ((what & BEV_EVENT_EOF) != 0 && state_ == State::kWriting) {
    return;  // the client finished sending (half-close): the answer still goes out
  }
  if ((what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT)) != 0) close();
}

void AdminConnection::close() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  timer_->disarm();
  bufferevent_disable(bev_.get(), EV_READ | EV_WRITE);
  server_.close(this);
}

// --- the server ----------------------------------------------------------------------------

AdminServer::AdminServer(Server& server) : server_(server), dispatcher_(RealClock::instance()) {}

AdminServer::~AdminServer() { stop(); }

bool AdminServer::start(const std::string& host, uint16_t port, std::string* error) {
  const evutil_socket_t fd = bindAdminSocket(host, port, error);
  if (fd < 0) return false;
  listener_.reset(evconnlistener_new(dispatcher_.base(), &AdminServer::onAccept, this,
                                     LEV_OPT_CLOSE_ON_FREE, -1, fd));
  if (!listener_) {
    *error = "cannot listen on admin address " + host + ":" + std::to_string(port) +
             ": libevent refused the socket";
    ::close(fd);
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
  stopped_ = true;
  connections_.clear();
  listener_.reset();
}

void AdminServer::onAccept(evconnlistener*, evutil_socket_t fd, sockaddr*, int, void* arg) {
  auto* self = static_cast<AdminServer*>(arg);
  if (self->connections_.size() >= kAdminMaxConnections) {
    ::close(fd);
    return;
  }
  evutil_make_socket_nonblocking(fd);
  auto conn = std::make_unique<AdminConnection>(*self, fd);
  AdminConnection* raw = conn.get();
  self->connections_.emplace(raw, std::move(conn));
}

void AdminServer::close(AdminConnection* conn) {
  auto it = connections_.find(conn);
  if (it == connections_.end()) return;
  dispatcher_.deferredDelete(std::move(it->second));
  connections_.erase(it);
}

std::unique_ptr<AdminResponse> AdminServer::admit(const AdminConnection& conn,
                                                  const std::string& path) {
  const bool post = conn.method == "POST";
  // Who may ask (proxy/server/admin_access.h): Host and Origin first, for every path.
  AdminAccessPolicy policy{host_, server_.runtime()->config().admin_allowed_hosts};
  AdminRequestHeaders headers = conn.access;
  if (auto why = refuseAdminRequest(policy, headers)) {
    return std::make_unique<AdminResponse>(plain(403, "Forbidden", *why + "\n"));
  }
  static constexpr std::string_view kGetPaths[] = {"/metrics", "/healthz", "/ready", "/config",
                                                   "/exchanges"};
  const RunPath run = parseRunPath(path);
  const bool get_path =
      std::find(std::begin(kGetPaths), std::end(kGetPaths), path) != std::end(kGetPaths) ||
      run.kind == RunPath::Kind::List || run.kind == RunPath::Kind::One;
  if (!get_path && path != "/drain" && run.kind != RunPath::Kind::Cancel) {
    return std::make_unique<AdminResponse>(plain(404, "Not Found", "not found\n"));
  }
  const bool allowed = get_path ? (conn.method == "GET" || conn.method == "HEAD") : post;
  if (!allowed) {
    auto r = std::make_unique<AdminResponse>(
        plain(405, "Method Not Allowed",
              path + (get_path ? " answers GET and HEAD\n" : " answers POST only\n")));
    r->allow = get_path ? "GET, HEAD" : "POST";
    return r;
  }
  if (post) {
    headers.post = true;
    if (auto why = refuseAdminRequest(policy, headers)) {
      return std::make_unique<AdminResponse>(plain(403, "Forbidden", *why + "\n"));
    }
  }
  return nullptr;
}

AdminServer::RunPath AdminServer::parseRunPath(std::string_view path) {
  RunPath out;
  constexpr std::string_view kPrefix = "/runs";
  if (path.substr(0, kPrefix.size()) != kPrefix) return out;
  std::string_view rest = path.substr(kPrefix.size());
  if (rest.empty()) {
    out.kind = RunPath::Kind::List;
    return out;
  }
  if (rest.front() != '/') return out;
  rest.remove_prefix(1);
  constexpr std::string_view kCancel = "/cancel";
  RunPath::Kind kind = RunPath::Kind::One;
  if (rest.size() > kCancel.size() && rest.substr(rest.size() - kCancel.size()) == kCancel) {
    rest.remove_suffix(kCancel.size());
    kind = RunPath::Kind::Cancel;
  }
  // The id, percent-decoded (an id may hold any visible character but `/`).
  std::string id;
  for (size_t i = 0; i < rest.size(); ++i) {
    const char c = rest[i];
    if (c == '/') return out;
    if (c == '%' && i + 2 < rest.size() && std::isxdigit(static_cast<unsigned char>(rest[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(rest[i + 2]))) {
      id += static_cast<char>(std::stoi(std::string(rest.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      id += c;
    }
  }
  if (!validRunId(id)) return out;
  out.kind = kind;
  out.id = std::move(id);
  return out;
}

AdminResponse AdminServer::answerRuns(const RunPath& run) {
  RunTable* runs = server_.runtime()->runs();
  if (runs == nullptr) return plain(404, "Not Found", "runs are not configured (runs:)\n");
  const auto toJson = [](const RunTable::Snapshot& s) {
    return nlohmann::json{
        {"id", s.id},
        {"parent", s.parent.empty() ? nlohmann::json(nullptr) : nlohmann::json(s.parent)},
        {"state", s.state},
        {"tasks_in_flight", s.tasks_in_flight},
        {"tasks_total", s.tasks_total},
        {"age_seconds", s.age_seconds},
        {"time_left_seconds", s.time_left_seconds},
        {"spend_usd", s.spend_usd},
        {"max_usd", s.max_usd > 0 ? nlohmann::json(s.max_usd) : nlohmann::json(nullptr)},
        {"children", s.children}};
  };
  AdminResponse r;
  r.content_type = "application/json";
  switch (run.kind) {
    case RunPath::Kind::List: {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& s : runs->snapshot()) list.push_back(toJson(s));
      r.body =
          nlohmann::json{{"runs", list}, {"active", runs->active()}, {"held", runs->size()}}.dump(
              2, ' ', false, nlohmann::json::error_handler_t::replace) +
          "\n";
      return r;
    }
    case RunPath::Kind::One: {
      const auto s = runs->snapshot(run.id);
      if (!s) return plain(404, "Not Found", "no run " + run.id + "\n");
      r.body = toJson(*s).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      return r;
    }
    case RunPath::Kind::Cancel: {
      const size_t tasks = runs->cancel(run.id);
      r.code = 202;
      r.reason = "Accepted";
      r.body =
          nlohmann::json{{"id", run.id}, {"state", "cancelled"}, {"tasks_cancelled", tasks}}.dump(
              2, ' ', false, nlohmann::json::error_handler_t::replace) +
          "\n";
      return r;
    }
    case RunPath::Kind::None:
      break;
  }
  return plain(404, "Not Found", "not found\n");
}

AdminResponse AdminServer::answer(const std::string& path) {
  AdminResponse r;
  if (path == "/metrics") {
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = server_.metrics().serialize();
  } else if (path == "/healthz") {
    r.body = "ok\n";
  } else if (path == "/ready") {
    if (server_.ready()) {
      r.body = "ready\n";
    } else {
      r = plain(503, "Service Unavailable", "draining\n");
    }
  } else if (path == "/config") {
    nlohmann::json j = config::toRedactedJson(server_.runtime()->config());
    nlohmann::json chain = nlohmann::json::array();
    for (auto name : filterChainNames()) chain.push_back(std::string(name));
    j["filter_chain"] = chain;
    r.content_type = "application/json";
    r.body = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
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
    r.content_type = "application/json";
    r.body = nlohmann::json{{"exchanges", list}}.dump(2, ' ', false,
                                                      nlohmann::json::error_handler_t::replace) +
             "\n";
  } else if (const RunPath run = parseRunPath(path); run.kind != RunPath::Kind::None) {
    r = answerRuns(run);
  } else {  // POST /drain
    // The drain starts once the 202 is written or the client is gone (the
    // connection's end): with nothing in flight the process exits at once,
    // and the admin loop would stop before the answer left.
    r = plain(202, "Accepted", "draining\n");
    r.drain = true;
  }
  return r;
}

}  // namespace sluice
