#include "tests/support/test_pki.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <fstream>

#include "tests/support/processes.h"

namespace sluice::test {

namespace {
std::atomic<int> g_counter{0};
}  // namespace

TestPki::TestPki(Key key) {
  dir_ = std::filesystem::temp_directory_path() /
         ("sluice-pki-" + std::to_string(::getpid()) + "-" + std::to_string(g_counter++));
  std::filesystem::create_directories(dir_);
  const std::string d = dir_.string();
  std::ofstream(d + "/san.ext") << "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
  const std::string ec = key == Key::Rsa
                             ? "-newkey rsa:2048 -nodes"
                             : "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string script =
      "cd " + d + " && openssl req -x509 " + ec +
      " -keyout ca.key -out ca.pem -days 2 -subj /CN=sluice-test-ca && openssl req " + ec +
      " -keyout server.key -out server.csr -subj /CN=localhost && openssl x509 -req -in "
      "server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile "
      "san.ext";
  auto [code, out] = runCommand(script);
  EXPECT_EQ(code, 0) << out;
}

TestPki::~TestPki() { std::filesystem::remove_all(dir_); }

}  // namespace sluice::test
