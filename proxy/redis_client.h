#pragma once

// An asynchronous Redis connection on one worker's event loop (DESIGN §6),
// built on hiredis and its libevent adapter. Nothing here ever blocks the
// loop: the host name is resolved with the dispatcher's evdns, the connect,
// the handshake (AUTH, SELECT, SCRIPT LOAD, PING) and every command are
// bounded by `shared_state.timeout`.
//
//   down ──connect+handshake ok──► up ──a call timed out / connection lost──► down
//    ▲                                                                          │
//    └──────────── reconnect after a backoff (100 ms doubling to 2 s) ◄─────────┘
//
// A call that times out fails at once (its callback gets nullptr) and the
// connection is dropped: replies come in order, so a Redis that stopped
// answering would otherwise make every later call wait too. While down,
// command() refuses at once and the caller decides on local state.
//
// Not thread-safe: construct, use and destroy it on its dispatcher's thread
// (or after that thread stopped).

#include <hiredis/async.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "proxy/dispatcher.h"
#include "proxy/event_util.h"

struct evdns_getaddrinfo_request;
struct evutil_addrinfo;

namespace sluice {

/** Appends `argv` as a RESP array of bulk strings (what Redis reads as a command). */
void appendRespArray(std::string& out, const std::vector<std::string>& argv);

class RedisClient {
 public:
  /** A call's reply; nullptr when it failed (timeout, connection lost). Error replies are passed
   * on. */
  using Reply = std::function<void(const redisReply* reply)>;
  /** A pub/sub message on a subscribed channel. */
  using Message = std::function<void(std::string_view channel, std::string_view message)>;

  struct Hooks {
    std::function<void(bool up)> on_state;              // every up/down change
    std::function<void(std::string_view op)> on_error;  // one failed call or connect ("connect")
  };

  /**
   * `init` are commands sent after AUTH/SELECT on every (re)connect, before
   * the client counts as up (e.g. SCRIPT LOAD); a failing one fails the
   * handshake. With `subscribe_to` set the connection is a subscriber: after
   * the handshake it SUBSCRIBEs and hands every message to `on_message`.
   */
  RedisClient(Dispatcher& dispatcher, const config::RedisUrl& url,
              std::chrono::milliseconds timeout, Hooks hooks,
              std::vector<std::vector<std::string>> init = {}, std::string subscribe_to = {},
              Message on_message = {});
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  /** Starts connecting (on the dispatcher's thread). */
  void start();
  bool up() const { return state_ == State::Up; }

  /**
   * Sends one command. False when the client is not up (nothing sent, `done`
   * never called). Otherwise `done` is called exactly once on this thread:
   * with the reply, or with nullptr within the timeout. `op` names the call
   * in sluice_shared_state_errors_total when it fails.
   */
  bool command(const std::vector<std::string>& argv, Reply done, std::string_view op);

 private:
  enum class State { Idle, Resolving, Connecting, Handshake, Up, Backoff };

  struct Pending {
    uint64_t id = 0;
    MonotonicTime deadline;
    Reply done;
    std::string op;
  };

  static void onResolved(int result, evutil_addrinfo* res, void* arg);
  static void onConnect(const redisAsyncContext* ac, int status);
  static void onDisconnect(const redisAsyncContext* ac, int status);
  static void onReply(redisAsyncContext* ac, void* reply, void* privdata);
  static void onMessageReply(redisAsyncContext* ac, void* reply, void* privdata);

  void connectTo(const std::string& ip);
  void handshake();
  bool send(const std::vector<std::string>& argv, Reply done, std::string_view op);
  std::string format_buffer_;  // send()'s RESP, reused
  void armTimer();
  void expire();
  /**
   * Drops the connection (if any), fails what is pending (each counted as its
   * op), and schedules a reconnect. `cause` ("connect", or "" when the
   * pending calls are the cause) is counted once.
   */
  void fail(std::string_view cause);
  void dropContext();
  void setState(State state);

  Dispatcher& dispatcher_;
  const config::RedisUrl url_;
  const std::chrono::milliseconds timeout_;
  const Hooks hooks_;
  const std::vector<std::vector<std::string>> init_;
  const std::string channel_;
  const Message on_message_;

  State state_ = State::Idle;
  bool reported_up_ = false;
  redisAsyncContext* ac_ = nullptr;
  evdns_getaddrinfo_request* resolving_ = nullptr;
  Timer timer_;
  MonotonicTime connect_deadline_{};
  MonotonicTime reconnect_at_{};
  std::chrono::milliseconds backoff_{0};
  std::deque<Pending> pending_;
  uint64_t next_id_ = 1;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace sluice
