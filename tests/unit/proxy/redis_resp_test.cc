// appendRespArray (proxy/redis_client.h): sluice formats Redis commands
// itself; the bytes must be exactly what hiredis's own formatter writes.

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <string>
#include <vector>

#include "proxy/redis_client.h"

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

}  // namespace
}  // namespace sluice
