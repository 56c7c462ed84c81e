// appendRespArray, respCommandHead and appendRespBulk (proxy/shared_state/redis_client.h):
// sluice formats Redis commands itself; the bytes must be exactly what
// hiredis's own formatter writes.

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <random>
#include <string>
#include <vector>

#include "proxy/shared_state/redis_client.h"

namespace sluice {
namespace {

std::string hiredisFormat(const std::vector<std::string>& argv) {
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (const auto& a : argv) {
    args.push_back(a.data());
    lens.push_back(a.size());
  }
  char* out = nullptr;
  const int n =
      redisFormatCommandArgv(&out, static_cast<int>(args.size()), args.data(), lens.data());
  std::string s(out, static_cast<size_t>(n));
  redisFreeCommand(out);
  return s;
}

TEST(RedisRespTest, ACommandIsAnArrayOfBulkStrings) {
  std::string out;
  appendRespArray(out, {"SET", "k", "v"});
  EXPECT_EQ(out, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
}

TEST(RedisRespTest, TheBytesAreHiredisOwn) {
  const std::vector<std::vector<std::string>> commands = {
      {"PING"},
      {"EVALSHA", std::string(40, 'a'), "1", "sluice:q:0123456789abcdef", "0"},
      {"HSET", "", std::string("bin\0ary\r\n", 9), std::string(1000, 'x')},
  };
  for (const auto& argv : commands) {
    std::string out;
    appendRespArray(out, argv);
    EXPECT_EQ(out, hiredisFormat(argv));
  }
}

TEST(RedisRespTest, AHeadFormattedOnceAndItsArgumentsAreTheWholeCommand) {
  // The reserve as RedisQuota sends it: EVALSHA <sha> 1 <prefix + key> <reserve> <need>.
  const std::string sha(40, 'f');
  const std::string head = respCommandHead(6, {"EVALSHA", sha, "1"});
  std::string out = head;
  appendRespBulk(out, "sluice:q:0123456789abcdef:", "a1b2c3d4e5f60718");
  appendRespBulk(out, "10");
  appendRespBulk(out, "0");
  EXPECT_EQ(out, hiredisFormat({"EVALSHA", sha, "1", "sluice:q:0123456789abcdef:a1b2c3d4e5f60718",
                                "10", "0"}));

  // Any split of any arguments, empty and binary ones included.
  std::mt19937 rng(18);
  const auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  for (int round = 0; round < 500; ++round) {
    std::vector<std::string> argv(1 + pick(8));
    for (auto& a : argv) {
      a.resize(pick(round % 50 == 0 ? 20000 : 30));
      for (char& c : a) c = static_cast<char>(pick(256));
    }
    const size_t fixed = pick(argv.size() + 1);
    std::string resp;
    if (fixed == 0) resp = respCommandHead(argv.size(), {});
    if (fixed == 1) resp = respCommandHead(argv.size(), {argv[0]});
    if (fixed >= 2) resp = respCommandHead(argv.size(), {argv[0], argv[1]});
    for (size_t i = std::min<size_t>(fixed, 2); i < argv.size(); ++i) {
      const size_t cut = pick(argv[i].size() + 1);
      if (i % 2 == 0) {
        appendRespBulk(resp, std::string_view(argv[i]).substr(0, cut),
                       std::string_view(argv[i]).substr(cut));
      } else {
        appendRespBulk(resp, argv[i]);
      }
    }
    ASSERT_EQ(resp, hiredisFormat(argv)) << "round " << round;
  }
}

}  // namespace
}  // namespace sluice
