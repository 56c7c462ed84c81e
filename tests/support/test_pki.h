#pragma once

// A throwaway certificate authority and a server certificate for localhost /
// 127.0.0.1, made at test time with the openssl CLI (the TLS upstream and
// rediss:// tests). Files: ca.pem, server.pem, server.key.

#include <filesystem>
#include <string>

namespace sluice::test {

class TestPki {
 public:
  /** The key type of the CA and server certificate. */
  enum class Key { Ec, Rsa };
  explicit TestPki(Key key = Key::Ec);
  ~TestPki();
  TestPki(const TestPki&) = delete;
  TestPki& operator=(const TestPki&) = delete;
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
};

}  // namespace sluice::test
