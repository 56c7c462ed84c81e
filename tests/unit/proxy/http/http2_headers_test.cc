#include "proxy/http/http2_headers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "proxy/http/nghttp2_util.h"

namespace sluice {
namespace {

std::string nvName(const nghttp2_nv& nv) {
  return std::string(reinterpret_cast<const char*>(nv.name), nv.namelen);
}
std::string nvValue(const nghttp2_nv& nv) {
  return std::string(reinterpret_cast<const char*>(nv.value), nv.valuelen);
}

TEST(Http2HeadersTest, RequestPseudoHeadersBecomeTheRequestHead) {
  Http2RequestHeadBuilder b;
  b.add(":method", "POST");
  b.add(":scheme", "https");
  b.add(":authority", "api.example.com:8443");
  b.add(":path", "/v1/chat/completions?x=1");
  b.add("host", "ignored.example.com");
  b.add("content-type", "application/json");
  EXPECT_EQ(b.method(), "POST");
  EXPECT_EQ(b.scheme(), "https");
  const RequestHead head = b.finish();
  EXPECT_EQ(head.method, "POST");
  EXPECT_EQ(head.path, "/v1/chat/completions?x=1");
  EXPECT_EQ(head.pathOnly(), "/v1/chat/completions");
  EXPECT_EQ(head.version_major, 2);
  // :authority wins over a host field (RFC 9113 §8.3.1) and becomes the one host.
  EXPECT_EQ(head.headers.getAll("host").size(), 1u);
  EXPECT_EQ(head.headers.get("host").value_or(""), "api.example.com:8443");
  EXPECT_EQ(head.headers.get("content-type").value_or(""), "application/json");
  for (const auto& [name, value] : head.headers) EXPECT_NE(name.front(), ':') << name;
}

TEST(Http2HeadersTest, CookieCrumbsAreJoined) {
  Http2RequestHeadBuilder b;
  b.add(":method", "GET");
  b.add(":path", "/");
  b.add("cookie", "a=1");
  b.add("x", "y");
  b.add("cookie", "b=2");
  const RequestHead head = b.finish();
  EXPECT_EQ(head.headers.getAll("cookie").size(), 1u);
  EXPECT_EQ(head.headers.get("cookie").value_or(""), "a=1; b=2");
}

/** The builder as it was (`set("host", …)` always): the reference. */
RequestHead referenceRequestHead(const std::vector<std::pair<std::string, std::string>>& fields) {
  RequestHead head;
  std::string authority, cookie;
  for (const auto& [name, value] : fields) {
    if (!name.empty() && name.front() == ':') {
      if (name == ":method") head.method = value;
      if (name == ":path") head.path = value;
      if (name == ":authority") authority = value;
      continue;
    }
    if (name == "cookie") {
      if (!cookie.empty()) cookie += "; ";
      cookie += value;
      continue;
    }
    head.headers.add(name, value);
  }
  if (!authority.empty()) head.headers.set("host", authority);
  if (!cookie.empty()) head.headers.add("cookie", cookie);
  head.version_major = 2;
  head.version_minor = 0;
  return head;
}

TEST(Http2HeadersTest, RequestHeadsMatchTheSetBasedBuilderOnRandomFieldLists) {
  std::mt19937 rng(8);
  static const std::vector<std::string> kNames = {
      ":method", ":path",        ":authority", ":scheme",       "host", "Host", "HOST",
      "cookie",  "content-type", "x-a",        "authorization", "hos",  "hostx"};
  for (int round = 0; round < 5000; ++round) {
    std::vector<std::pair<std::string, std::string>> fields;
    const size_t n = rng() % 12;
    // Mostly as nghttp2 hands them over (pseudo-headers first), sometimes any order.
    const bool pseudo_first = rng() % 4 != 0;
    for (size_t i = 0; i < n; ++i) {
      std::string value = std::vector<std::string>{"", "a", "example.com", "x:1"}[rng() % 4];
      fields.emplace_back(kNames[rng() % kNames.size()], value);
    }
    if (pseudo_first) {
      std::stable_partition(fields.begin(), fields.end(),
                            [](const auto& f) { return f.first.front() == ':'; });
    }
    Http2RequestHeadBuilder b;
    for (const auto& [name, value] : fields) b.add(name, value);
    const RequestHead got = b.finish();
    const RequestHead want = referenceRequestHead(fields);
    ASSERT_EQ(got.method, want.method) << round;
    ASSERT_EQ(got.path, want.path) << round;
    ASSERT_EQ(got.headers.entries(), want.headers.entries()) << round;
    ASSERT_EQ(got.version_major, 2);
  }
}

TEST(Http2HeadersTest, ValidatedFieldsMakeTheSameHeadAsAdd) {
  // onHeader hands nghttp2's fields to addValidated (names stored as they
  // are): for the lower-case names nghttp2 lets through it must build the
  // head add() builds, host and cookie handling included.
  std::mt19937 rng(18);
  static const std::vector<std::string> kNames = {":method",
                                                  ":path",
                                                  ":authority",
                                                  ":scheme",
                                                  "host",
                                                  "cookie",
                                                  "content-type",
                                                  "x-a",
                                                  "hos",
                                                  "hostx",
                                                  "cookies",
                                                  "x-request-id",
                                                  "authorization",
                                                  "accept",
                                                  "user-agent",
                                                  "te",
                                                  "content-length",
                                                  "x-a-rather-long-field-name-past-two-words"};
  for (int round = 0; round < 5000; ++round) {
    std::vector<std::pair<std::string, std::string>> fields;
    const size_t n = rng() % 16;
    for (size_t i = 0; i < n; ++i) {
      std::string value = std::vector<std::string>{"", "a", "example.com", "x:1", "A=B"}[rng() % 5];
      fields.emplace_back(kNames[rng() % kNames.size()], value);
    }
    std::stable_partition(fields.begin(), fields.end(),
                          [](const auto& f) { return f.first.front() == ':'; });
    Http2RequestHeadBuilder by_add;
    Http2RequestHeadBuilder validated;
    for (const auto& [name, value] : fields) {
      by_add.add(name, value);
      validated.addValidated(name, value);
    }
    const RequestHead want = by_add.finish();
    const RequestHead got = validated.finish();
    ASSERT_EQ(got.method, want.method) << round;
    ASSERT_EQ(got.path, want.path) << round;
    ASSERT_EQ(got.headers.entries(), want.headers.entries()) << round;
    ASSERT_EQ(got.headers.entries(), referenceRequestHead(fields).headers.entries()) << round;
    ASSERT_EQ(got.version_major, 2);
  }
}

TEST(Http2HeadersTest, ResponseHasStatusFirstAndNoConnectionSpecificFields) {
  ResponseHead head;
  head.status = 503;
  head.reason = "Service Unavailable";  // HTTP/2 has no reason phrase
  head.headers.add("Content-Type", "application/problem+json");
  head.headers.add("connection", "keep-alive");
  head.headers.add("keep-alive", "timeout=5");
  head.headers.add("proxy-connection", "keep-alive");
  head.headers.add("transfer-encoding", "chunked");
  head.headers.add("upgrade", "h2c");
  head.headers.add("te", "trailers");
  head.headers.add("x-sluice-attempts", "2");
  std::string status;
  const auto nv = toHttp2ResponseNv(head, status);
  ASSERT_EQ(nv.size(), 3u);
  EXPECT_EQ(nvName(nv[0]), ":status");
  EXPECT_EQ(nvValue(nv[0]), "503");
  EXPECT_EQ(nvName(nv[1]), "content-type");  // lower-case
  EXPECT_EQ(nvValue(nv[1]), "application/problem+json");
  EXPECT_EQ(nvName(nv[2]), "x-sluice-attempts");
}

TEST(Http2HeadersTest, ConnectionSpecificFieldList) {
  for (const char* name :
       {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te"}) {
    EXPECT_TRUE(isHttp2ConnectionSpecificHeader(name)) << name;
  }
  for (const char* name : {"content-length", "content-type", "x-request-id", "trailer"}) {
    EXPECT_FALSE(isHttp2ConnectionSpecificHeader(name)) << name;
  }
}

TEST(Http2HeadersTest, PerResponseValues) {
  for (const char* name :
       {"x-request-id", "x-sluice-upstream-request-id", "request-id", "x-ratelimit-remaining",
        "x-ratelimit-remaining-requests", "x-ratelimit-reset-tokens", "x-ratelimit-reset",
        "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-tokens-reset",
        "anthropic-ratelimit-output-tokens-remaining"}) {
    EXPECT_TRUE(isHttp2PerResponseValue(name)) << name;
  }
  for (const char* name :
       {"content-type", "content-length", "date", "x-sluice-attempts", "x-sluice-upstream",
        "x-ratelimit-limit-requests", "anthropic-ratelimit-tokens-limit", "x-request",
        "request-ids", "remaining", "x-reset", "retry-after", ""}) {
    EXPECT_FALSE(isHttp2PerResponseValue(name)) << name;
  }
}

// --- Http2ResponseNv against the copying list (toHttp2ResponseNv) ------------------------

std::string randomName(std::mt19937& rng) {
  static const std::vector<std::string> kNames = {"content-type",
                                                  "content-length",
                                                  "x-request-id",
                                                  "x-sluice-upstream-request-id",
                                                  "x-ratelimit-remaining-requests",
                                                  "x-ratelimit-reset-tokens",
                                                  "x-ratelimit-limit-tokens",
                                                  "anthropic-ratelimit-tokens-remaining",
                                                  "request-id",
                                                  "connection",
                                                  "keep-alive",
                                                  "proxy-connection",
                                                  "transfer-encoding",
                                                  "upgrade",
                                                  "te",
                                                  "trailer",
                                                  "date",
                                                  ":status",
                                                  ":weird",
                                                  "x-sluice-attempts",
                                                  "Set-Cookie",
                                                  "X-Mixed-Case",
                                                  "cache-control"};
  if (rng() % 4 != 0) return kNames[rng() % kNames.size()];
  std::string name(1 + rng() % 40, 'a');
  for (char& c : name) c = "abcdefghijklmnopqrstuvwxyz0123456789-_ABCXYZ"[rng() % 45];
  return name;
}

ResponseHead randomResponseHead(std::mt19937& rng) {
  ResponseHead head;
  head.status = std::vector<int>{200, 204, 304, 404, 429, 500, 503, 101, 999}[rng() % 9];
  const size_t fields = rng() % 60;  // across Http2ResponseNv's inline bound
  for (size_t i = 0; i < fields; ++i) {
    std::string value(rng() % 50, 'v');
    for (char& c : value) c = static_cast<char>(0x20 + rng() % 95);
    // Valid on the wire (RFC 9113 §8.2.1: no leading or trailing SP).
    if (!value.empty()) value.front() = value.back() = 'v';
    head.headers.add(randomName(rng), value);
  }
  return head;
}

TEST(Http2HeadersTest, TheNoCopyListMatchesTheCopyingList) {
  std::mt19937 rng(18);
  constexpr uint8_t kNoCopy = NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE;
  for (int round = 0; round < 2000; ++round) {
    const ResponseHead head = randomResponseHead(rng);
    std::string status;
    const std::vector<nghttp2_nv> expected = toHttp2ResponseNv(head, status);
    for (bool index_all : {false, true}) {
      Http2ResponseNv::StatusText status_text{};
      const Http2ResponseNv nv(head.headers, head.status, status_text, index_all);
      ASSERT_EQ(nv.size(), expected.size()) << round;
      for (size_t i = 0; i < nv.size(); ++i) {
        const nghttp2_nv& got = nv.data()[i];
        EXPECT_EQ(nvName(got), nvName(expected[i])) << round << " " << i;
        EXPECT_EQ(nvValue(got), nvValue(expected[i])) << round << " " << i;
        const uint8_t index_flag = index_all ? 0 : expected[i].flags;
        EXPECT_EQ(got.flags, kNoCopy | index_flag) << round << " " << nvName(got);
        EXPECT_EQ(expected[i].flags, i > 0 && isHttp2PerResponseValue(nvName(expected[i]))
                                         ? NGHTTP2_NV_FLAG_NO_INDEX
                                         : NGHTTP2_NV_FLAG_NONE);
      }
      // The views point into the map and the status text, not into copies.
      if (nv.size() > 0) {
        EXPECT_EQ(reinterpret_cast<const char*>(nv.data()[0].value), status_text.data());
      }
    }
  }
}

// --- through nghttp2: a server session sends, a client session decodes ------------------

/** A client and a server nghttp2 session joined in memory. */
class SessionPair {
 public:
  SessionPair() {
    const Nghttp2CallbacksPtr cbs = newNghttp2Callbacks();
    nghttp2_session_callbacks_set_on_header_callback(
        cbs.get(), [](nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name,
                      size_t namelen, const uint8_t* value, size_t valuelen, uint8_t, void* user) {
          auto* self = static_cast<SessionPair*>(user);
          self->received_[frame->hd.stream_id].emplace_back(
              std::string(reinterpret_cast<const char*>(name), namelen),
              std::string(reinterpret_cast<const char*>(value), valuelen));
          return 0;
        });
    nghttp2_session_callbacks_set_on_frame_send_callback(
        cbs.get(), [](nghttp2_session*, const nghttp2_frame* frame, void* user) {
          auto* self = static_cast<SessionPair*>(user);
          if (frame->hd.type == NGHTTP2_HEADERS) {
            // What a Stream does once its HEADERS is out: the storage goes,
            // scribbled over first so a late read would show.
            auto it = self->kept_.find(frame->hd.stream_id);
            if (it != self->kept_.end()) {
              for (auto& [name, value] : it->second->fields) {
                std::fill(name.begin(), name.end(), '#');
                std::fill(value.begin(), value.end(), '#');
              }
              self->kept_.erase(it);
            }
          }
          return 0;
        });
    nghttp2_session* client = nullptr;
    nghttp2_session_client_new(&client, cbs.get(), this);
    client_.reset(client);
    nghttp2_session* server = nullptr;
    nghttp2_session_server_new(&server, cbs.get(), this);
    server_.reset(server);
    nghttp2_submit_settings(client_.get(), NGHTTP2_FLAG_NONE, nullptr, 0);
    nghttp2_submit_settings(server_.get(), NGHTTP2_FLAG_NONE, nullptr, 0);
  }

  /** Opens a stream (a GET from the client) and returns its id. */
  int32_t openStream() {
    const nghttp2_nv req[] = {nv(":method", "GET"), nv(":path", "/"), nv(":scheme", "http"),
                              nv(":authority", "x")};
    const int32_t id = nghttp2_submit_request(client_.get(), nullptr, req, 4, nullptr, nullptr);
    pump();
    return id;
  }

  /**
   * The server answers `id` with `head` as Http2ServerConnection does
   * (no_copy: a copy of the fields kept until HEADERS is sent) or as the
   * old path did (copied by nghttp2). Returns the HEADERS block's size.
   */
  size_t respond(int32_t id, const ResponseHead& head, bool no_copy, bool index_all) {
    int rv = 0;
    if (no_copy) {
      auto kept = std::make_unique<Kept>();
      kept->map = head.headers;
      const Http2ResponseNv list(kept->map, head.status, kept->status, index_all);
      rv = nghttp2_submit_response(server_.get(), id, list.data(), list.size(), nullptr);
      // Scribbles over the map's bytes at send time: remember where they are.
      for (const auto& [name, value] : kept->map) {
        kept->fields.emplace_back(std::span<char>(const_cast<char*>(name.data()), name.size()),
                                  std::span<char>(const_cast<char*>(value.data()), value.size()));
      }
      kept_[id] = std::move(kept);
    } else {
      std::string status;
      const std::vector<nghttp2_nv> list = toHttp2ResponseNv(head, status);
      rv = nghttp2_submit_response(server_.get(), id, list.data(), list.size(), nullptr);
    }
    EXPECT_EQ(rv, 0);
    const size_t before = server_bytes_;
    pump();
    return server_bytes_ - before;
  }

  std::map<int32_t, std::vector<std::pair<std::string, std::string>>> received_;
  size_t keptCount() const { return kept_.size(); }

 private:
  struct Kept {
    HeaderMap map;
    Http2ResponseNv::StatusText status{};
    std::vector<std::pair<std::span<char>, std::span<char>>> fields;
  };

  static nghttp2_nv nv(const char* name, const char* value) {
    return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name)),
                      reinterpret_cast<uint8_t*>(const_cast<char*>(value)), strlen(name),
                      strlen(value), NGHTTP2_NV_FLAG_NONE};
  }

  void pump() {
    for (bool moved = true; moved;) {
      moved = false;
      const uint8_t* data = nullptr;
      for (ssize_t n; (n = nghttp2_session_mem_send(client_.get(), &data)) > 0; moved = true) {
        ASSERT_EQ(nghttp2_session_mem_recv(server_.get(), data, static_cast<size_t>(n)), n);
      }
      for (ssize_t n; (n = nghttp2_session_mem_send(server_.get(), &data)) > 0; moved = true) {
        server_bytes_ += static_cast<size_t>(n);
        ASSERT_EQ(nghttp2_session_mem_recv(client_.get(), data, static_cast<size_t>(n)), n);
      }
    }
  }

  Nghttp2SessionPtr client_;
  Nghttp2SessionPtr server_;
  std::map<int32_t, std::unique_ptr<Kept>> kept_;
  size_t server_bytes_ = 0;
};

TEST(Http2HeadersTest, TheNoCopyListDecodesAsTheCopyingListDoes) {
  std::mt19937 rng(9113);
  SessionPair old_path;
  SessionPair new_path;
  for (uint32_t i = 0; i < 600; ++i) {
    ResponseHead head = randomResponseHead(rng);
    // Names are lower-case on the wire (nghttp2 rejects others): as a
    // HeaderMap stores them.
    const int32_t a = old_path.openStream();
    const int32_t b = new_path.openStream();
    ASSERT_EQ(a, b);
    old_path.respond(a, head, false, false);
    new_path.respond(b, head, true, i % 32 == 0);
    ASSERT_EQ(new_path.received_[b], old_path.received_[a]) << i;
    ASSERT_FALSE(new_path.received_[b].empty());
  }
  EXPECT_EQ(new_path.keptCount(), 0u);  // every HEADERS was sent, every copy let go
}

TEST(Http2HeadersTest, PerResponseValuesKeepTheTableForTheFieldsThatRepeat) {
  // A JSON answer as the bench sees it: the same fields every time, four
  // of them with a new value each time.
  SessionPair indexed;   // every field indexed (nghttp2's default)
  SessionPair adaptive;  // per-response values indexed once per 32 responses
  size_t indexed_bytes = 0;
  size_t adaptive_bytes = 0;
  for (int i = 0; i < 200; ++i) {
    ResponseHead head;
    head.status = 200;
    head.headers.add("content-type", "application/json");
    head.headers.add("content-length", "463");
    head.headers.add("x-ratelimit-limit-requests", "1000000000");
    head.headers.add("x-ratelimit-remaining-requests", std::to_string(999999999 - i));
    head.headers.add("x-ratelimit-reset-requests", std::to_string(59000 - i) + "ms");
    head.headers.add("x-sluice-attempts", "1");
    head.headers.add("x-sluice-upstream", "mock");
    head.headers.add("x-sluice-upstream-request-id", "req-" + std::to_string(i));
    head.headers.add("x-request-id", "a0996a0c-027a-43aa-8155-" + std::to_string(100000000000 + i));
    const int32_t a = indexed.openStream();
    const int32_t b = adaptive.openStream();
    const size_t x = indexed.respond(a, head, true, true);
    const size_t y = adaptive.respond(b, head, true, i % 32 == 0);
    ASSERT_EQ(adaptive.received_[b], indexed.received_[a]);
    if (i >= 1) {
      indexed_bytes += x;
      adaptive_bytes += y;
    }
  }
  // Never-indexed values still refer to their names by index: no larger on the wire.
  EXPECT_LE(adaptive_bytes, indexed_bytes) << adaptive_bytes << " vs " << indexed_bytes;
}

}  // namespace
}  // namespace sluice
