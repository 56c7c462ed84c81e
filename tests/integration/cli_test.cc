// The sluice binary's command line: --check-config validates and exits 0 or
// 2 with the exact FILE:LINE:COL: key.path error (values as written, never
// an expanded secret) and prints warnings; --config refuses to start on an
// invalid file the same way; SIGTERM drains and exits 0; --health-check (alias --probe), --version,
// --help; a taken admin address names the reason.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/http_client.h"
#include "tests/support/processes.h"
#include "tests/support/sluice_process.h"
#include "tests/support/test_pki.h"

namespace sluice::test {
namespace {

std::string writeTemp(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("sluice-cli-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(path) << text;
  return path.string();
}

TEST(CliTest, CheckConfigAcceptsTheExamples) {
  for (const char* name : {"minimal.yaml", "local-mock.yaml", "container.yaml"}) {
    auto [code, out] =
        runCommand(sluicePath() + " --check-config " + sourceDir() + "/config/examples/" + name);
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
  const std::string path = writeTemp("env.yaml",
                                     "listen: 127.0.0.1:0\nupstreams:\n  - name: a\n    url: "
                                     "http://x\n    headers: {authorization: "
                                     "\"Bearer ${SLUICE_TEST_SURELY_UNSET_VAR}\"}\n");
  auto [code, out] =
      runCommand("env -u SLUICE_TEST_SURELY_UNSET_VAR " + sluicePath() + " --check-config " + path);
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find("SLUICE_TEST_SURELY_UNSET_VAR"), std::string::npos) << out;
  std::filesystem::remove(path);
}

TEST(CliTest, RunsAndExitsZeroOnSigterm) {
  MockLlm mock;
  const std::string path =
      writeTemp("run.yaml",
                "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nworkers: 1\ndrain_timeout: 2s\n"
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

// --check-config shows values as written, never a
// ${VAR}-expanded secret.
TEST(CliTest, CheckConfigNeverPrintsExpandedSecrets) {
  const std::string secret = "sk-cli-secret-4242xyz";
  const std::string path =
      writeTemp("secret.yaml",
                "listen: 127.0.0.1:0\nupstreams:\n  - name: a\n    url: \"${SLUICE_TEST_URL}\"\n"
                "  - name: b\n    url: \"http://user:${SLUICE_TEST_KEY}@host\"\n");
  const std::string env =
      "env SLUICE_TEST_URL=http://user:" + secret + "@api.example SLUICE_TEST_KEY=" + secret + " ";
  auto [code, out] = runCommand(env + sluicePath() + " --check-config " + path);
  EXPECT_EQ(code, 2) << out;
  EXPECT_NE(out.find(path + ":4:10: upstreams[0].url: invalid URL \"${SLUICE_TEST_URL}\""),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find(secret), std::string::npos) << out;
  // The second upstream alone: the credentials part is redacted.
  const std::string second = writeTemp("secret2.yaml",
                                       "listen: 127.0.0.1:0\nupstreams:\n  - name: b\n    url: "
                                       "\"http://user:${SLUICE_TEST_KEY}@host\"\n");
  auto [code2, out2] = runCommand(env + sluicePath() + " --check-config " + second);
  EXPECT_EQ(code2, 2) << out2;
  EXPECT_NE(out2.find("invalid URL \"http://<redacted>@host\""), std::string::npos) << out2;
  EXPECT_EQ(out2.find(secret), std::string::npos) << out2;
  std::filesystem::remove(path);
  std::filesystem::remove(second);
}

// A directory, and a file far too big to be a config.
TEST(CliTest, CheckConfigNamesADirectoryAndRefusesAHugeFile) {
  const std::string dir = std::filesystem::temp_directory_path().string();
  auto [code, out] = runCommand(sluicePath() + " --check-config " + dir);
  EXPECT_EQ(code, 2);
  EXPECT_NE(out.find(dir + ": is a directory, not a config file"), std::string::npos) << out;

  // 22 MB of valid YAML (it used to take over 10 s and 1.4 GB to reject).
  const std::string path = writeTemp("huge.yaml", "");
  {
    std::ofstream f(path);
    f << "listen: 127.0.0.1:0\npricing:\n";
    const std::string entry = "  - {model: \"m*\", input: 1.0, output: 2.0}   # padding padding\n";
    for (size_t written = 0; written < 22'000'000; written += entry.size()) f << entry;
  }
  auto [big_code, big_out] = runCommand(sluicePath() + " --check-config " + path);
  EXPECT_EQ(big_code, 2);
  EXPECT_NE(big_out.find(path + ": config file is larger than 4MiB"), std::string::npos) << big_out;
  std::filesystem::remove(path);
}

// The upstream url's path is prepended to request paths;
// a route repeating it is valid but warned about.
TEST(CliTest, CheckConfigWarnsWhenTheUrlPathIsRepeatedByTheRoute) {
  const std::string path = writeTemp(
      "doubled.yaml",
      "listen: 127.0.0.1:0\nupstreams:\n  - {name: oai, url: \"https://api.openai.com/v1\"}\n"
      "routes:\n  - {name: chat, match: {path_prefix: /v1/chat/completions}, upstream: oai}\n");
  auto [code, out] = runCommand(sluicePath() + " --check-config " + path);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("sluice: warning: " + path +
                     ":5:39: routes[0].match.path_prefix: upstream "
                     "\"oai\"'s url path \"/v1\" is prepended to every request path, so a request "
                     "for /v1/chat/completions goes upstream as /v1/v1/chat/completions"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(path + ": ok"), std::string::npos) << out;
  std::filesystem::remove(path);
}

TEST(CliTest, VersionAndHelpGoToStdoutAndExitZero) {
  auto [code, out] = runCommand("(" + sluicePath() + " --version 2>/dev/null)");
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out.rfind("sluice ", 0), 0u) << out;
  EXPECT_NE(out.find("(commit "), std::string::npos) << out;
  // The allocator in effect: mimalloc unless the build chose the system one
  // (sanitizer builds do); "mimalloc" here means malloc really hands out
  // mimalloc's memory.
  EXPECT_NE(out.find(", allocator " SLUICE_EXPECTED_ALLOCATOR), std::string::npos) << out;
  auto [help_code, help] = runCommand("(" + sluicePath() + " --help 2>/dev/null)");
  EXPECT_EQ(help_code, 0);
  for (const char* flag :
       {"--config", "--check-config", "--health-check", "--probe", "--version"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag << " in: " << help;
  }
  auto [bad_code, bad] = runCommand("(" + sluicePath() + " --frobnicate 2>/dev/null)");
  EXPECT_EQ(bad_code, 2);
  EXPECT_EQ(bad, "") << "usage errors go to stderr";
}

// The container HEALTHCHECK, with no curl in the image.
TEST(CliTest, HealthCheckExitsZeroOnlyOnA2xxAnswer) {
  SluiceProcess sluice(
      "listen: 127.0.0.1:0\nadmin: 127.0.0.1:0\nworkers: 1\nupstreams:\n"
      "  - {name: a, url: \"http://127.0.0.1:1\"}\n");
  ASSERT_TRUE(sluice.running());
  const std::string admin = "http://127.0.0.1:" + std::to_string(sluice.adminPort());
  auto [ready, ready_out] = runCommand(sluicePath() + " --health-check " + admin + "/ready");
  EXPECT_EQ(ready, 0) << ready_out;
  EXPECT_NE(ready_out.find("HTTP/1.1 200"), std::string::npos) << ready_out;
  EXPECT_EQ(runCommand(sluicePath() + " --health-check " + admin + "/nope").first, 1);
  // 405 is an answer, not a success.
  EXPECT_EQ(runCommand(sluicePath() + " --health-check " + admin + "/drain").first, 1);
  EXPECT_EQ(runCommand(sluicePath() + " --health-check https://127.0.0.1:1/ready").first, 2);
  EXPECT_EQ(runCommand(sluicePath() + " --health-check not-a-url").first, 2);
  // `--probe` is the same check, kept for existing health check commands.
  EXPECT_EQ(runCommand(sluicePath() + " --probe " + admin + "/ready").first, 0);
  EXPECT_EQ(runCommand(sluicePath() + " --probe " + admin + "/nope").first, 1);
  EXPECT_EQ(sluice.stop(), 0);
  // Nothing listening any more: refused.
  auto [gone, gone_out] = runCommand(sluicePath() + " --health-check " + admin + "/ready");
  EXPECT_EQ(gone, 1);
  EXPECT_NE(gone_out.find("Connection refused"), std::string::npos) << gone_out;
}

// The admin bind error says why.
TEST(CliTest, AdminAddressInUseSaysWhy) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string taken = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  const std::string path =
      writeTemp("admin-taken.yaml",
                "listen: 127.0.0.1:0\nadmin: " + taken +
                    "\nworkers: 1\nupstreams:\n  - {name: a, url: \"http://127.0.0.1:1\"}\n");
  auto [code, out] = runCommand(sluicePath() + " --config " + path);
  EXPECT_EQ(code, 1);
  EXPECT_NE(
      out.find("sluice: cannot listen on admin address " + taken + ": Address already in use"),
      std::string::npos)
      << out;
  ::close(fd);
  std::filesystem::remove(path);
}

// --check-config loads what start loads from files (certificates, keys, CA
// files, the access log's directory), with the message start gives: a config
// that passes it starts. (The TLS example used to pass and then fail to start
// on its missing certificate files.)
TEST(CliTest, CheckConfigLoadsTheFilesStartLoads) {
  const std::string missing =
      std::filesystem::temp_directory_path() / ("sluice-cli-missing-" + std::to_string(::getpid()));
  auto expectBoth = [&](const std::string& name, const std::string& yaml,
                        const std::string& expected) {
    const std::string path = writeTemp(name, yaml);
    auto [code, out] = runCommand(sluicePath() + " --check-config " + path);
    EXPECT_EQ(code, 2) << name << ": " << out;
    EXPECT_NE(out.find("sluice: " + expected), std::string::npos) << name << ": " << out;
    auto [run_code, run_out] = runCommand(sluicePath() + " --config " + path);
    EXPECT_EQ(run_code, 1) << name << ": " << run_out;
    EXPECT_NE(run_out.find("sluice: " + expected), std::string::npos) << name << ": " << run_out;
    std::filesystem::remove(path);
  };
  const std::string base = "admin: 127.0.0.1:0\nworkers: 1\n";
  expectBoth("missing-cert.yaml",
             base + "listen:\n  - address: 127.0.0.1:0\n    tls: {cert: " + missing +
                 "/cert.pem, key: " + missing +
                 "/key.pem}\nupstreams:\n  - {name: a, url: "
                 "\"http://127.0.0.1:1\"}\n",
             "listener 127.0.0.1:0: tls.cert " + missing + "/cert.pem: No such file or directory");
  expectBoth("missing-ca.yaml",
             base +
                 "listen: 127.0.0.1:0\nupstreams:\n  - name: a\n    url: "
                 "\"https://127.0.0.1:1\"\n    tls: {ca_file: " +
                 missing + "/ca.pem}\n",
             "upstream a: loading ca_file " + missing + "/ca.pem");
  expectBoth("missing-log-dir.yaml",
             base + "listen: 127.0.0.1:0\naccess_log: {path: " + missing +
                 "/access.log}\nupstreams:\n  - {name: a, url: \"http://127.0.0.1:1\"}\n",
             "access_log.path: cannot open " + missing + "/access.log: No such file or directory");
  EXPECT_FALSE(std::filesystem::exists(missing));

  // The TLS example with its certificate files made: passes, and starts.
  TestPki pki;
  std::ifstream in(sourceDir() + "/config/examples/tls.yaml");
  std::string example((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"/tmp/sluice-tls/cert.pem", pki.path("server.pem")},
           {"/tmp/sluice-tls/key.pem", pki.path("server.key")},
           {"127.0.0.1:8080", "127.0.0.1:0"},
           {"127.0.0.1:8443", "127.0.0.1:0"},
           {"127.0.0.1:9901", "127.0.0.1:0"}}) {
    size_t at = example.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    for (; at != std::string::npos; at = example.find(from, at + to.size())) {
      example.replace(at, from.size(), to);
    }
  }
  const std::string path = writeTemp("tls-example.yaml", example);
  auto [code, out] = runCommand(sluicePath() + " --check-config " + path);
  EXPECT_EQ(code, 0) << out;
  ChildProcess sluice({sluicePath(), "--config", path}, "sluice admin on");
  EXPECT_TRUE(sluice.running());
  EXPECT_EQ(sluice.stop(), 0);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace sluice::test
