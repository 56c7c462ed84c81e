// The sluice binary's command line: --check-config validates and exits 0 or
// 2 with the exact FILE:LINE:COL: key.path error; --config refuses to start
// on an invalid file the same way; SIGTERM drains and exits 0.

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/http_client.h"
#include "tests/support/processes.h"

namespace sluice::test {
namespace {

std::string writeTemp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("sluice-cli-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(path) << text;
  return path.string();
}

TEST(CliTest, CheckConfigAcceptsTheExamples) {
  for (const char* name : {"minimal.yaml", "local-mock.yaml"}) {
    auto [code, out] = runCommand(sluicePath() + " --check-config " + sourceDir() +
                                  "/config/examples/" + name);
    EXPECT_EQ(code, 0) << name << ": " << out;
  }
}

TEST(CliTest, InvalidConfigsExitTwoWithFileLineColumnAndKeyPath) {
  struct Case {
    const char* name;
    const char* yaml;
    const char* expected;  // after "<path>:"
  };
  const Case cases[] = {
      {"unknown-key.yaml",
       "listen: 127.0.0.1:8080\nupstreams:\n  - name: a\n    url: http://x\n    colour: red\n",
       ":5:5: upstreams[0].colour: unknown key"},
      {"bad-duration.yaml",
       "listen: 127.0.0.1:8080\nupstreams:\n  - name: a\n    url: http://x\n    connect_timeout: "
       "fast\n",
       ":5:22: upstreams[0].connect_timeout:"},
      {"dangling.yaml",
       "listen: 127.0.0.1:8080\nupstreams:\n  - name: a\n    url: http://x\nroutes:\n  - name: r\n"
       "    match: {path_prefix: /}\n    upstream: b\n",
       ":8:15: routes[0].upstream:"},
      {"wrong-type.yaml", "listen: 127.0.0.1:8080\nworkers: [1]\n", ":2:10: workers:"},
  };
  for (const auto& c : cases) {
    const std::string path = writeTemp(c.name, c.yaml);
    auto [code, out] = runCommand(sluicePath() + " --check-config " + path);
    EXPECT_EQ(code, 2) << c.name << ": " << out;
    EXPECT_NE(out.find(path + c.expected), std::string::npos)
        << c.name << ": expected '" << path << c.expected << "' in: " << out;
    auto [run_code, run_out] = runCommand(sluicePath() + " --config " + path);
    EXPECT_EQ(run_code, 2) << run_out;
    std::filesystem::remove(path);
  }
}

TEST(CliTest, UnsetEnvironmentVariableIsAnError) {
  const std::string path = writeTemp(
      "env.yaml",
      "listen: 127.0.0.1:0\nupstreams:\n  - name: a\n    url: http://x\n    headers: {authorization: "
      "\"Bearer ${SLUICE_TEST_SURELY_UNSET_VAR}\"}\n");
  auto [code, out] = runCommand("env -u SLUICE_TEST_SURELY_UNSET_VAR " + sluicePath() +
                                " --check-config " + path);
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("SLUICE_TEST_SURELY_UNSET_VAR"), std::string::npos) << out;
  std::filesystem::remove(path);
}

TEST(CliTest, RunsAndExitsZeroOnSigterm) {
  MockLlm mock;
  const std::string path = writeTemp(
      "run.yaml", "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nworkers: 1\ndrain_timeout: 2s\n"
                  "upstreams:\n  - name: mock\n    url: " +
                      mock.url() +
                      "\nroutes:\n  - name: all\n    match: {path_prefix: /}\n    upstream: mock\n");
  ChildProcess sluice({sluicePath(), "--config", path}, "sluice listening on");
  ASSERT_TRUE(sluice.running());
  const auto& line = sluice.readyLine();
  const uint16_t port = static_cast<uint16_t>(std::stoi(line.substr(line.rfind(':') + 1)));
  EXPECT_EQ(httpRequest(port, "GET", "/v1/models").status, 200);
  EXPECT_EQ(sluice.stop(), 0);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace sluice::test
