#include "tests/support/http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/sockios.h>
#include <llhttp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <regex>

namespace sluice::test {

struct TestConnection::Parser {
  llhttp_t parser{};
  llhttp_settings_t settings{};
  bool failed = false;  // llhttp stopped at an error: nothing after it is parsed
};

namespace {

TestConnection* owner(llhttp_t* p) { return static_cast<TestConnection*>(p->data); }

}  // namespace

TestConnection::TestConnection(uint16_t port, int receive_buffer) : port_(port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (receive_buffer > 0) {
    setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ADD_FAILURE() << "connect to 127.0.0.1:" << port << " failed: " << strerror(errno);
    ::close(fd_);
    fd_ = -1;
  }
  const int one = 1;
  if (fd_ >= 0) setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  parser_ = std::make_unique<Parser>();
  llhttp_settings_t& settings = parser_->settings;
  llhttp_settings_init(&settings);
  settings.on_header_field = [](llhttp_t* p, const char* at, size_t len) {
    owner(p)->onHeaderField(at, len);
    return 0;
  };
  settings.on_header_value = [](llhttp_t* p, const char* at, size_t len) {
    owner(p)->onHeaderValue(at, len);
    return 0;
  };
  settings.on_headers_complete = [](llhttp_t* p) {
    owner(p)->onHeadersComplete(static_cast<int>(p->status_code));
    return 0;
  };
  settings.on_body = [](llhttp_t* p, const char* at, size_t len) {
    owner(p)->current_.body.append(at, len);
    return 0;
  };
  settings.on_message_complete = [](llhttp_t* p) {
    owner(p)->onMessageComplete();
    return 0;
  };
  llhttp_init(&parser_->parser, HTTP_RESPONSE, &settings);
  parser_->parser.data = this;
}

TestConnection::~TestConnection() {
  if (fd_ >= 0) ::close(fd_);
}

void TestConnection::send(const std::string& bytes) {
  size_t off = 0;
  while (fd_ >= 0 && off < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

void TestConnection::sendRequest(const std::string& method, const std::string& path,
                                 const std::vector<std::pair<std::string, std::string>>& headers,
                                 const std::string& body) {
  std::string out = method + " " + path + " HTTP/1.1\r\n";
  const bool has_host = std::any_of(headers.begin(), headers.end(), [](const auto& h) {
    return equalsIgnoreCase(h.first, "host");
  });
  if (!has_host) out += "host: 127.0.0.1:" + std::to_string(port_) + "\r\n";
  bool has_length = false;
  for (const auto& [k, v] : headers) {
    out += k + ": " + v + "\r\n";
    if (equalsIgnoreCase(k, "content-length") || equalsIgnoreCase(k, "transfer-encoding")) {
      has_length = true;
    }
  }
  if (!has_length && (!body.empty() || method == "POST" || method == "PUT")) {
    out += "content-length: " + std::to_string(body.size()) + "\r\n";
  }
  out += "\r\n" + body;
  send(out);
}

bool TestConnection::readOnce(std::chrono::milliseconds timeout) {
  if (fd_ < 0 || peer_closed_) return false;
  pollfd pfd{fd_, POLLIN, 0};
  const int rc = ::poll(&pfd, 1, static_cast<int>(timeout.count()));
  if (rc <= 0) return false;
  char buf[16384];
  const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
  if (n <= 0) {
    peer_closed_ = true;
    // The end of a response framed by the close (no length, not chunked).
    if (!parser_->failed) llhttp_finish(&parser_->parser);
    return false;
  }
  raw_.append(buf, static_cast<size_t>(n));
  parse(buf, static_cast<size_t>(n));
  return true;
}

const TestResponse& TestConnection::readUntil(const std::function<bool(const TestResponse&)>& done,
                                              std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done(current_)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    const size_t before = completed_.size();
    if (!readOnce(left) && (peer_closed_ || fd_ < 0)) break;
    if (completed_.size() > before && done(completed_.back())) return completed_.back();
  }
  return current_;
}

TestResponse TestConnection::readResponse(std::chrono::milliseconds timeout) {
  const size_t want = ++responses_returned_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (completed_.size() < want) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    if (!readOnce(left) && (peer_closed_ || fd_ < 0)) break;
  }
  if (completed_.size() >= want) return completed_[want - 1];
  return current_;  // incomplete: complete == false
}

size_t TestConnection::readAvailable() {
  const size_t before = raw_.size();
  while (readOnce(std::chrono::milliseconds(0))) {
  }
  return raw_.size() - before;
}

size_t TestConnection::unreadBytes() const {
  int n = 0;
  if (fd_ < 0 || ::ioctl(fd_, SIOCINQ, &n) != 0) return 0;
  return static_cast<size_t>(n);
}

void TestConnection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TestConnection::reset() {
  if (fd_ < 0) return;
  linger lg{1, 0};
  setsockopt(fd_, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
  ::close(fd_);
  fd_ = -1;
}

bool TestConnection::waitForClose(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!peer_closed_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    readOnce(left);
  }
  return true;
}

void TestConnection::parse(const char* data, size_t len) {
  if (parser_->failed) return;
  if (llhttp_execute(&parser_->parser, data, len) != HPE_OK) parser_->failed = true;
}

void TestConnection::onHeaderField(const char* at, size_t len) {
  header_fields_.onField({at, len}, current_.headers);
}

void TestConnection::onHeaderValue(const char* at, size_t len) {
  header_fields_.appendValue({at, len});
}

void TestConnection::onHeadersComplete(int status) {
  header_fields_.flush(current_.headers);
  current_.status = status;
}

void TestConnection::onMessageComplete() {
  current_.complete = true;
  if (current_.status >= 100 && current_.status < 200) {
    current_ = TestResponse{};  // interim (100 Continue): not a response
    return;
  }
  completed_.push_back(std::move(current_));
  current_ = TestResponse{};
}

TestResponse httpRequest(uint16_t port, const std::string& method, const std::string& path,
                         const std::vector<std::pair<std::string, std::string>>& headers,
                         const std::string& body, std::chrono::milliseconds timeout) {
  TestConnection conn(port);
  conn.sendRequest(method, path, headers, body);
  return conn.readResponse(timeout);
}

std::string withoutVolatileFields(const std::string& body) {
  static const std::regex kVolatile(R"re("(id|created)":("[^"]*"|[0-9]+))re");
  return std::regex_replace(body, kVolatile, "\"$1\":_");
}

}  // namespace sluice::test
