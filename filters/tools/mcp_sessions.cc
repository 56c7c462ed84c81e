#include "filters/tools/mcp_sessions.h"

#include <openssl/evp.h>

#include <utility>

namespace sluice {

std::string sessionKey(std::string_view session_id) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_len = 0;
  if (EVP_Digest(session_id.data(), session_id.size(), digest, &digest_len, EVP_sha256(),
                 nullptr) != 1 ||
      digest_len < 16) {
    return "-";  // cannot happen with a working OpenSSL; never fall back to the raw id
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string key(32, '0');
  for (size_t i = 0; i < 16; ++i) {
    key[2 * i] = kHex[digest[i] >> 4];
    key[2 * i + 1] = kHex[digest[i] & 0xf];
  }
  return key;
}

void McpSessionTable::learn(const std::string& key, const std::string& endpoint, MonotonicTime now,
                            bool publish) {
  Publisher publisher;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.order);
      it->second.used = now;
      if (it->second.endpoint == endpoint) return;
      it->second.endpoint = endpoint;
    } else {
      dropExpiredTail(now);
      if (entries_.size() >= max_entries_ && !lru_.empty()) {
        entries_.erase(lru_.back());
        lru_.pop_back();
      }
      lru_.push_front(key);
      entries_.emplace(key, Entry{endpoint, now, lru_.begin()});
    }
    if (publish) publisher = publisher_;
  }
  if (publisher) publisher(key, endpoint);
}

std::optional<std::string> McpSessionTable::lookup(const std::string& key, MonotonicTime now) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  if (now - it->second.used >= idle_ttl_) {
    lru_.erase(it->second.order);
    entries_.erase(it);
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, it->second.order);
  it->second.used = now;
  return it->second.endpoint;
}

void McpSessionTable::forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  lru_.erase(it->second.order);
  entries_.erase(it);
}

void McpSessionTable::setPublisher(Publisher publisher) {
  std::lock_guard<std::mutex> lock(mu_);
  publisher_ = std::move(publisher);
}

size_t McpSessionTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

void McpSessionTable::dropExpiredTail(MonotonicTime now) {
  // The least recently used are at the back: idle ones go first, a few at a time.
  for (int i = 0; i < 4 && !lru_.empty(); ++i) {
    auto it = entries_.find(lru_.back());
    if (now - it->second.used < idle_ttl_) return;
    entries_.erase(it);
    lru_.pop_back();
  }
}

}  // namespace sluice
