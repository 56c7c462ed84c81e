#pragma once

// An asynchronous Redis connection on one worker's event loop (docs/design.md §6).
// Nothing here ever blocks the loop: the host name is resolved with the
// dispatcher's evdns, and the connect, the handshake (AUTH, SELECT, SCRIPT
// LOAD, PING) and every command are bounded by `shared_state.timeout`.
//
//   down ──connect+handshake ok──► up ──a call timed out / connection lost──► down
//    ▲                                                                          │
//    └──────────── reconnect after a backoff (100 ms doubling to 2 s) ◄─────────┘
//
// The bytes move through SocketIo, the transport of the HTTP/1.1
// connections: plain TCP, or TLS for `rediss://` (bufferevent_openssl).
// hiredis reads the replies (its redisReader, building them in a
// RedisReplyArena: no allocation per reply); its async context is not
// used: the packaged hiredis 0.14 has no TLS, and its libevent adapter arms
// and disarms EV_WRITE around every command (two epoll_ctl per call). Here
// the commands of one loop turn go out in one write.
//
// A call that times out fails at once (its callback gets nullptr) and the
// connection is dropped: replies come in order, so a Redis that stopped
// answering would otherwise make every later call wait too. While down,
// command() refuses at once and the caller decides on local state.
//
// A subscriber sends no calls of its own, so a silently dead flow (a NAT or
// firewall that dropped it) would never be noticed: with `ping_interval` set
// it PINGs while up (subscribed, Redis answers a ["pong", ""] push) and drops
// the connection when no pong came within `timeout` (at least the interval).
//
// What Redis sends is bounded (a hostile or broken server must not grow
// memory without bound): a bulk string of at most 64 KiB, an array of at
// most 4096 elements, arrays nested at most 4 deep, at most 16384 values in
// one reply holding at most 256 KiB of strings in all (RedisReplyArena
// refuses more), and at most kMaxBufferedBytes
// (256 KiB) read but not yet parsed into whole replies. Past any of them the connection is
// dropped and counted as op "protocol". Each is far above what sluice's own
// scripts return (at most six values, one level of nesting).
//
// Not thread-safe: construct, use and destroy it on its dispatcher's thread
// (or after that thread stopped).

#include <hiredis/hiredis.h>
#include <openssl/ssl.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "proxy/event/dispatcher.h"
#include "proxy/event/event_util.h"
#include "proxy/event/socket_io.h"
#include "proxy/shared_state/redis_reply_arena.h"

namespace sluice {

/** Appends `argv` as a RESP array of bulk strings (what Redis reads as a command). */
void appendRespArray(std::string& out, std::initializer_list<std::string_view> argv);
void appendRespArray(std::string& out, const std::vector<std::string>& argv);

/**
 * A command formatted in pieces, for one sent per request: the array header
 * of `argc` arguments and the first of them (`head`), which never change, are
 * formatted once; each call appends the rest with appendRespBulk. Together
 * they are the bytes appendRespArray writes for the whole argv.
 */
std::string respCommandHead(size_t argc, std::initializer_list<std::string_view> head);
/** Appends one argument as a RESP bulk string. */
void appendRespBulk(std::string& out, std::string_view arg);
/** Appends `first` + `second` (e.g. a key's prefix and its hash) as one bulk string. */
void appendRespBulk(std::string& out, std::string_view first, std::string_view second);

class RedisClient final : private SocketIoCallbacks {
 public:
  /** A call's reply; nullptr when it failed (timeout, connection lost). Error replies are passed
   * on. */
  using Reply = std::function<void(const redisReply* reply)>;
  /** A pub/sub message on a subscribed channel. */
  using Message = std::function<void(std::string_view channel, std::string_view message)>;

  /**
   * Read but not yet whole replies, at most (the per-value limits are
   * RedisReplyArena's: kMaxBulkBytes, kMaxArrayElements, kMaxNesting,
   * kMaxReplyValues, kMaxReplyBytes).
   */
  static constexpr size_t kMaxBufferedBytes = 256 * 1024;

  struct Hooks {
    // Every up/down change. Down: why ("refused", "timeout", "auth: <Redis's
    // error>", "closed", "protocol", "tls or network error", ...).
    std::function<void(bool up, std::string_view reason)> on_state;
    // A connect that failed, with why, whether or not the state changed
    // (still down: the next backoff's attempt failed too).
    std::function<void(std::string_view reason)> on_connect_failed;
    std::function<void(std::string_view op)> on_error;  // one failed call or connect ("connect")
    std::function<void()> on_subscribed;  // a subscriber's SUBSCRIBE took effect (each connect)
  };

  /**
   * `ssl_ctx` set = TLS (`rediss://`, `tls` as shared_state.tls). `init`
   * are commands sent after AUTH/SELECT on every (re)connect, before the
   * client counts as up (e.g. SCRIPT LOAD); a failing one fails the
   * handshake. With `subscribe_to` set the connection is a subscriber: after
   * the handshake it SUBSCRIBEs and hands every message to `on_message`,
   * and with `ping_interval` > 0 checks that the connection is alive.
   */
  RedisClient(Dispatcher& dispatcher, const config::RedisUrl& url, SSL_CTX* ssl_ctx,
              const config::UpstreamTlsConfig& tls, std::chrono::milliseconds timeout, Hooks hooks,
              std::vector<std::vector<std::string>> init = {}, std::string subscribe_to = {},
              Message on_message = {},
              std::chrono::milliseconds ping_interval = std::chrono::milliseconds(0));
  ~RedisClient() override;
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  /** Starts connecting (on the dispatcher's thread). */
  void start();
  bool up() const { return state_ == State::Up; }

  /**
   * Sends one command. False when the client is not up (nothing sent, `done`
   * never called). Otherwise `done` (may be empty) is called exactly once on
   * this thread, from the event loop: with the reply, or with nullptr within
   * the timeout. `op` names the call in sluice_shared_state_errors_total
   * when it fails.
   */
  bool command(std::initializer_list<std::string_view> argv, Reply done, std::string_view op);
  /** The same for a command already formatted as RESP (appendRespArray). */
  bool commandFormatted(std::string_view resp, Reply done, std::string_view op);
  /**
   * The commands sent so far go out now, not later in this loop turn (see
   * SocketIo::writeNow): for one whose latency matters more than joining
   * the turn's other commands.
   */
  void flush();

 private:
  enum class State { Idle, Connecting, Handshake, Up, Backoff };

  struct Pending {
    MonotonicTime deadline;
    Reply done;
    std::string_view op;  // a literal ("quota", "circuit"), or "" for the handshake
  };

  // SocketIoCallbacks
  void onIoRead() override;
  void onIoWrite() override {}
  void onIoEvent(short events) override;

  void handshake();
  /** Queues `resp` (one command) with its reply callback; false when there is no connection. */
  bool send(std::string_view resp, Reply done, std::string_view op);
  bool sendArgv(std::initializer_list<std::string_view> argv, Reply done, std::string_view op);
  /** One reply (valid during the call) for the oldest pending call, or a pushed message. */
  void dispatch(const redisReply* reply);
  void onPushed(const redisReply* reply);
  /**
   * The timer is armed lazily: never moved later while armed (each call's
   * deadline is later than the one before it), so a busy connection arms
   * it about once per timeout, not once per call.
   */
  void armTimer();
  void expire();
  /**
   * Drops the connection (if any), fails what is pending (each counted as its
   * op), and schedules a reconnect. `cause` ("connect", or "" when the
   * pending calls are the cause) is counted once.
   */
  void fail(std::string_view cause, std::string_view reason);
  void dropConnection();
  void setState(State state, std::string_view reason = {});
  /** Reads `in` into the reader and dispatches every whole reply; false = the client failed. */
  bool feedAndDispatch();
  /** Subscribed and up: when the next PING is due, or its pong overdue. */
  void onPingTimer(MonotonicTime now);

  Dispatcher& dispatcher_;
  const config::RedisUrl url_;
  SSL_CTX* const ssl_ctx_;
  const config::UpstreamTlsConfig tls_;
  const std::chrono::milliseconds timeout_;
  const Hooks hooks_;
  const std::vector<std::vector<std::string>> init_;
  const std::string channel_;
  const Message on_message_;
  const std::chrono::milliseconds ping_interval_;

  State state_ = State::Idle;
  bool reported_up_ = false;
  SocketIoPtr io_;
  RedisReplyArena replies_;  // before reader_: the reader builds in it until freed
  RedisReplyArena::ReaderPtr reader_;
  std::string format_buffer_;  // sendArgv()'s RESP, reused
  Timer timer_;
  MonotonicTime timer_at_ = MonotonicTime::max();  // when the armed timer fires; max = disarmed
  MonotonicTime connect_deadline_{};
  MonotonicTime reconnect_at_{};
  std::chrono::milliseconds backoff_{0};
  std::deque<Pending> pending_;
  MonotonicTime next_ping_at_ = MonotonicTime::max();   // subscribed: the next PING
  MonotonicTime pong_deadline_ = MonotonicTime::max();  // a PING is unanswered until then
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace sluice
