#include "proxy/server/health_check.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "config/loader.h"

namespace sluice {

namespace {

using Clock = std::chrono::steady_clock;

/** Milliseconds left until `deadline` (at least 0), for poll(). */
int msLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::max<int64_t>(0, left.count()));
}

/** Waits for `events` on `fd` until `deadline`; false on timeout or error. */
bool waitFor(int fd, short events, Clock::time_point deadline) {
  pollfd pfd{fd, events, 0};
  int rc = 0;
  do {
    rc = ::poll(&pfd, 1, msLeft(deadline));
  } while (rc < 0 && errno == EINTR);
  return rc > 0;
}

/** A connected non-blocking socket to host:port, or -1 with `why` set. */
int connectTo(const std::string& host, uint16_t port, Clock::time_point deadline,
              std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    why = std::string("resolving ") + host + ": " + gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  why = "no address";
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int error = 0;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      error = errno;
      if (error == EINPROGRESS) {
        error = ETIMEDOUT;
        if (waitFor(fd, POLLOUT, deadline)) {
          socklen_t len = sizeof(error);
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
        }
      }
    }
    if (error != 0) {
      why = "connect: " + std::string(std::strerror(error));
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  return fd;
}

}  // namespace

int checkHealth(const std::string& url_text, std::chrono::milliseconds timeout, std::ostream& out,
                std::ostream& err) {
  std::string why;
  const std::optional<config::UpstreamUrl> url = config::parseUpstreamUrl(url_text, &why);
  if (!url || url->isTls()) {
    err << "sluice --health-check: " << (url ? "only http:// URLs can be checked" : why) << "\n";
    return 2;
  }
  const auto deadline = Clock::now() + timeout;
  const int fd = connectTo(url->host, url->port, deadline, why);
  if (fd < 0) {
    err << "sluice --health-check: " << url_text << ": " << why << "\n";
    return 1;
  }
  const std::string request = "GET " + (url->path_prefix.empty() ? "/" : url->path_prefix) +
                              " HTTP/1.1\r\nHost: " + url->authority() +
                              "\r\nUser-Agent: sluice-health-check\r\nx-sluice-admin: 1\r\n"
                              "Connection: close\r\n\r\n";
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR) && waitFor(fd, POLLOUT, deadline)) {
      continue;
    } else {
      break;
    }
  }
  // Only the status line matters.
  std::string head;
  while (sent == request.size() && head.find("\r\n") == std::string::npos && head.size() < 4096) {
    char buf[1024];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      head.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR) && waitFor(fd, POLLIN, deadline)) {
      continue;
    } else {
      break;
    }
  }
  ::close(fd);
  const size_t eol = head.find("\r\n");
  const std::string status_line = head.substr(0, eol);
  const bool http = eol != std::string::npos && status_line.rfind("HTTP/1.", 0) == 0 &&
                    status_line.size() >= 12 && status_line[8] == ' ';
  if (!http) {
    err << "sluice --health-check: " << url_text << ": "
        << (sent < request.size() ? "could not send the request"
            : head.empty()        ? "no answer within the timeout"
                                  : "the answer is not HTTP/1.x")
        << "\n";
    return 1;
  }
  out << status_line << "\n";
  const char status_class = status_line[9];
  return status_class == '2' ? 0 : 1;
}

}  // namespace sluice
