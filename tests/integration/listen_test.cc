// Listening sockets belong to one process: sluice's
// workers share a listener through SO_REUSEPORT, and that used to let a
// second sluice bind the same port and silently take part of the traffic.
// A second instance now fails to start (exit 1) with a clear error, and the
// first keeps every connection.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/sluice_process.h"

namespace sluice::test {
namespace {

constexpr char kConfig[] = R"(
listen: ${LISTEN}
admin: 127.0.0.1:0
workers: 2
upstreams:
  - name: mock
    url: ${MOCK_URL}
routes:
  - name: models
    match: {path_prefix: /v1/models}
    upstream: mock
)";

TEST(ListenTest, ASecondSluiceOnTheSamePortExitsOneWithAClearError) {
  MockLlm mock;
  SluiceProcess first(substitute(kConfig, {{"LISTEN", "127.0.0.1:0"}, {"MOCK_URL", mock.url()}}));
  ASSERT_TRUE(first.running());
  const std::string port = std::to_string(first.port());

  // The same address, and the wildcard that covers it.
  for (const std::string& listen : {"127.0.0.1:" + port, "0.0.0.0:" + port}) {
    const auto path = std::filesystem::temp_directory_path() /
                      ("sluice-listen-" + std::to_string(::getpid()) + ".yaml");
    std::ofstream(path) << substitute(kConfig, {{"LISTEN", listen}, {"MOCK_URL", mock.url()}});
    // `timeout`: a second instance that starts would otherwise run forever.
    auto [code, out] = runCommand("timeout 20 " + sluicePath() + " --config " + path.string());
    std::filesystem::remove(path);
    EXPECT_EQ(code, 1) << listen << ": " << out;
    EXPECT_NE(out.find("sluice: cannot listen on " + listen +
                       ": another process is already listening there"),
              std::string::npos)
        << listen << ": " << out;
  }

  // The first instance is untouched and answers every request.
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(httpRequest(first.port(), "GET", "/v1/models").status, 200);
  }
  EXPECT_EQ(first.metric("sluice_requests_total", {{"route", "models"}}), 8);
  EXPECT_EQ(first.stop(), 0);
}

}  // namespace
}  // namespace sluice::test
