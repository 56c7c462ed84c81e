#include "proxy/http/request_id.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <random>

namespace sluice {

namespace {

/** `x` as 8 lower-case hex digits, most significant first: all eight at once. */
void writeHex32(char* out, uint32_t x) {
  uint64_t n = x;
  n = (n | (n << 16)) & 0x0000FFFF0000FFFFULL;  // 16-bit halves into 32-bit lanes
  n = (n | (n << 8)) & 0x00FF00FF00FF00FFULL;   // bytes into 16-bit lanes
  n = (n | (n << 4)) & 0x0F0F0F0F0F0F0F0FULL;   // nibble k in byte k
  // '0' + d, and 'a' - '0' - 10 more where d > 9 (d + 6 carries into bit 4).
  const uint64_t letters = ((n + 0x0606060606060606ULL) >> 4) & 0x0101010101010101ULL;
  n += 0x3030303030303030ULL + letters * ('a' - '0' - 10);
  // The most significant nibble goes first: byte 7 to the lowest address.
  n = __builtin_bswap64(n);
  if constexpr (std::endian::native == std::endian::big) n = __builtin_bswap64(n);
  std::memcpy(out, &n, sizeof n);
}

/** `v` as 16 lower-case hex digits, most significant first. */
void writeHex(char* out, uint64_t v) {
  writeHex32(out, static_cast<uint32_t>(v >> 32));
  writeHex32(out + 8, static_cast<uint32_t>(v));
}

bool isLowerHex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

/** `n` lower-case hex digits at `s`, not all '0'. */
bool isNonZeroHex(std::string_view s) {
  bool non_zero = false;
  for (char c : s) {
    if (!isLowerHex(c)) return false;
    non_zero = non_zero || c != '0';
  }
  return non_zero;
}

/** One header's value when it appears exactly once (empty otherwise), and whether it appears. */
struct SingleValue {
  std::string_view value;
  int seen = 0;

  void note(std::string_view v) {
    if (++seen == 1) value = v;
  }
  bool present() const { return seen > 0; }
  std::string_view single() const { return seen == 1 ? value : std::string_view(); }
};

}  // namespace

IdGenerator::IdGenerator() {
  std::random_device rd;
  state_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

uint64_t IdGenerator::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::string IdGenerator::uuid() {
  uint64_t hi = next();
  uint64_t lo = next();
  hi = (hi & ~0xF000ULL) | 0x4000ULL;                         // version 4
  lo = (lo & 0x3FFFFFFFFFFFFFFFULL) | 0x8000000000000000ULL;  // variant 10xx
  char hex[32];
  writeHex(hex, hi);
  writeHex(hex + 16, lo);
  std::string out(36, '-');
  std::memcpy(&out[0], hex, 8);
  std::memcpy(&out[9], hex + 8, 4);
  std::memcpy(&out[14], hex + 12, 4);
  std::memcpy(&out[19], hex + 16, 4);
  std::memcpy(&out[24], hex + 20, 12);
  return out;
}

void IdGenerator::fillHex(char* out, size_t bytes) {
  for (;;) {
    uint64_t any = 0;
    for (size_t i = 0; i < bytes; i += 8) {
      const uint64_t v = next();
      const size_t used = std::min<size_t>(8, bytes - i);  // bytes of v written, high first
      if (used == 8) {  // a whole word: its sixteen digits straight into place
        any |= v;
        writeHex(out + 2 * i, v);
        continue;
      }
      any |= v >> (64 - 8 * used);
      char digits[16];
      writeHex(digits, v);
      std::memcpy(out + 2 * i, digits, 2 * used);
    }
    if (any != 0) return;  // all zeros is invalid for trace and span ids (and never happens)
  }
}

std::string IdGenerator::hex(size_t bytes) {
  std::string out(bytes * 2, '0');
  fillHex(out.data(), bytes);
  return out;
}

bool isValidRequestId(std::string_view id) {
  if (id.empty() || id.size() > kMaxRequestIdLength) return false;
  for (char c : id) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && std::string_view("-_.:+/=@").find(c) == std::string_view::npos) return false;
  }
  return true;
}

std::string_view traceIdOf(std::string_view tp) {
  // version "-" trace-id(32) "-" parent-id(16) "-" flags(2)
  if (tp.size() < 55) return {};
  if (tp[2] != '-' || tp[35] != '-' || tp[52] != '-') return {};
  const std::string_view version = tp.substr(0, 2);
  if (!isLowerHex(version[0]) || !isLowerHex(version[1]) || version == "ff") return {};
  if (version == "00" ? tp.size() != 55 : tp.size() > 55 && tp[55] != '-') return {};
  const std::string_view trace_id = tp.substr(3, 32);
  if (!isNonZeroHex(trace_id) || !isNonZeroHex(tp.substr(36, 16))) return {};
  if (!isLowerHex(tp[53]) || !isLowerHex(tp[54])) return {};
  return trace_id;
}

RequestIdentity establishIdentity(HeaderMap& headers, IdGenerator& ids) {
  RequestIdentity identity;
  // Both fields in one pass over the head. Replacing or adding x-request-id
  // below leaves the traceparent fields as they were.
  SingleValue request_id;
  SingleValue traceparent_field;
  for (const auto& [n, v] : headers) {
    if (n == "x-request-id") request_id.note(v);
    if (n == "traceparent") traceparent_field.note(v);
  }
  // Read (copied) before the head changes: adding a field may move the
  // block these views point into.
  if (const std::string_view trace_id = traceIdOf(traceparent_field.single()); !trace_id.empty()) {
    identity.trace_id = trace_id;
  }
  const std::string_view client_id = request_id.single();
  if (isValidRequestId(client_id)) {
    identity.request_id = std::string(client_id);
  } else {
    identity.request_id = ids.uuid();
    identity.request_id_generated = true;
    // set() when one is there to replace; add() when none is (set()'s search would find nothing).
    if (request_id.present()) {
      headers.set("x-request-id", identity.request_id);
    } else {
      headers.add("x-request-id", identity.request_id);
    }
  }

  if (identity.trace_id.empty()) {  // no valid client traceparent
    // 00-<trace-id>-<parent-id>-01, written in place.
    char tp[55];
    std::memcpy(tp, "00-", 3);
    ids.fillHex(tp + 3, 16);
    tp[35] = '-';
    ids.fillHex(tp + 36, 8);
    std::memcpy(tp + 52, "-01", 3);
    identity.trace_id = std::string_view(tp + 3, 32);
    identity.trace_started = true;
    if (traceparent_field.present()) {
      headers.remove("tracestate");  // it described the trace we could not read
      headers.set("traceparent", std::string_view(tp, sizeof(tp)));
    } else {
      headers.add("traceparent", std::string_view(tp, sizeof(tp)));
    }
  }
  return identity;
}

}  // namespace sluice
