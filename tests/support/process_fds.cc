#include "tests/support/process_fds.h"

#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace sluice::test {

namespace {

/** Socket inodes of TCP connections in `pid`'s network namespace whose remote port is `port`. */
std::set<std::string> socketsTo(pid_t pid, uint16_t port) {
  std::set<std::string> inodes;
  for (const char* table : {"tcp", "tcp6"}) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/net/" + table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
      fields >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
      const auto colon = remote.rfind(':');
      if (colon == std::string::npos) continue;
      if (std::stoul(remote.substr(colon + 1), nullptr, 16) == port) inodes.insert(inode);
    }
  }
  return inodes;
}

}  // namespace

FdCount countFds(pid_t pid, uint16_t remote_port) {
  FdCount count;
  const std::set<std::string> upstream = socketsTo(pid, remote_port);
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return count;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    ++count.total;
    char target[256];
    const ssize_t n = ::readlink((dir + "/" + e->d_name).c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    const std::string link(target, static_cast<size_t>(n));
    if (link.rfind("socket:[", 0) == 0 && upstream.count(link.substr(8, link.size() - 9)) != 0) {
      ++count.upstream;
    }
  }
  ::closedir(d);
  return count;
}

}  // namespace sluice::test
