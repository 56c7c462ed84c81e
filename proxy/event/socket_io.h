#pragma once

// The byte stream under an HTTP/1.1 connection (downstream and upstream):
// an input and an output evbuffer over either a libevent bufferevent or,
// for a connected plain TCP socket, the socket itself on the event_base.
//
// Why plain sockets leave the bufferevent: per request a bufferevent arms
// EV_WRITE when output is added and disarms it once drained (two
// `epoll_ctl` per side and request), and sizes every read with an
// `ioctl(FIONREAD)` (libevent 2.1's evbuffer_read always asks, whatever
// `howmuch` says). On a plain socket SocketIo registers the read event once
// (level-triggered, persistent), writes output once per loop turn (one
// `send`/`sendmsg` for a head and its body, after the code that added them
// has returned) and arms EV_WRITE only when the kernel did not take it all;
// reads go straight into a fixed-size reservation of the input buffer
// (`recv`). Socket calls, not `readv`/`writev`: those pass the VFS layer.
// That is what nginx does (minus edge-triggering): per request a read and a
// write on each side, no `epoll_ctl`, no `ioctl`.
//
// TLS stays on bufferevent_openssl, and an upstream socket stays on its
// bufferevent while it resolves and connects (evdns, connect errors);
// useSocketIfPlain() moves a connected plain socket over, buffered bytes
// included.
//
// The callbacks mean what a bufferevent's do: onIoRead after bytes were
// added to input(); onIoWrite after a write left output() at or below the
// write low watermark; onIoEvent with BEV_EVENT_* flags (EOF, ERROR,
// CONNECTED). They run from the event loop, never from inside a call into
// SocketIo, and may destroy the SocketIo.

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include <cstddef>
#include <memory>

#include "proxy/event/event_util.h"

namespace sluice {

class SocketIoCallbacks {
 public:
  virtual ~SocketIoCallbacks() = default;
  virtual void onIoRead() = 0;
  virtual void onIoWrite() = 0;
  virtual void onIoEvent(short events) = 0;
};

class SocketIo;

/**
 * The "write later in this loop turn" of every plain-socket SocketIo on one
 * event_base: one libevent event for all of them (the Dispatcher's) instead
 * of one per socket — 128 bytes per connection, two per proxied stream.
 * A SocketIo with output added joins the list once; when the event runs it
 * writes each SocketIo that was on the list then, in the order they joined
 * (one joining meanwhile is written on a later run of the same loop turn).
 * A SocketIo stopped or destroyed leaves the list at once.
 */
class WriteFlusher {
 public:
  explicit WriteFlusher(event_base* base);
  /** Unlinks any SocketIo still waiting (they must not be used to write afterwards). */
  ~WriteFlusher();
  WriteFlusher(const WriteFlusher&) = delete;
  WriteFlusher& operator=(const WriteFlusher&) = delete;

  /** An intrusive list link (circular; `next == nullptr` means not on a list). */
  struct Link {
    Link* prev = nullptr;
    Link* next = nullptr;
    SocketIo* owner = nullptr;
  };

  /** SocketIos waiting for the event (for tests). */
  size_t pendingCount() const;

 private:
  friend class SocketIo;
  /** Puts `link` at the end of the list and activates the event if idle. */
  void schedule(Link& link);
  static void unlink(Link& link);
  static void onFire(evutil_socket_t, short, void* arg);

  Link pending_;  // the sentinel
  EventPtr event_;
  bool active_ = false;
};

class SocketIo {
 public:
  /**
   * Takes `bev` (its callbacks are replaced by `callbacks`'), reading and
   * writing enabled. It stays the transport until useSocketIfPlain().
   * `flusher` (on `base`, outliving this SocketIo) writes its output later
   * in the loop turn on a plain socket; null: a flusher of its own.
   */
  SocketIo(event_base* base, BufferEventPtr bev, SocketIoCallbacks& callbacks,
           WriteFlusher* flusher = nullptr);
  ~SocketIo();
  SocketIo(const SocketIo&) = delete;
  SocketIo& operator=(const SocketIo&) = delete;

  evbuffer* input() const { return input_; }
  evbuffer* output() const { return output_; }

  void enableRead();
  void disableRead();
  /** onIoWrite fires when a write leaves output() at or below `low` bytes. */
  void setWriteLowWatermark(size_t low);

  /**
   * Once the socket is connected (accepted, or BEV_EVENT_CONNECTED): a plain
   * TCP socket moves off its bufferevent, buffered bytes included, and
   * onIoEvent never reports BEV_EVENT_CONNECTED after it. TLS (or a
   * bufferevent without a socket) stays. Idempotent.
   */
  void useSocketIfPlain();

  /** The bufferevent still in use (TLS, connecting); null on a plain socket. */
  bufferevent* bufferEvent() const { return bev_.get(); }
  /** Gives up the bufferevent (HTTP/2 takes a TLS socket over); null on a plain socket. */
  BufferEventPtr takeBufferEvent();
  evutil_socket_t fd() const;

  /**
   * Writes what output() holds now instead of later in this loop turn: for
   * a message whose latency matters more than leaving with the turn's other
   * output (a run's cancel told to the other replicas, before this loop
   * cuts its own tasks). One send on a plain socket; what the kernel does
   * not take, and an error, are left to the turn's write as before (so no
   * callback from here). A TLS or still-connecting socket: nothing.
   */
  void writeNow();

  /** No callback after this; the socket stays open until destruction. */
  void stop();

  /** Bytes read at most per read on a plain socket (libevent's own per-read cap is 16 KiB). */
  static constexpr size_t kReadSize = 16 * 1024 - 128;
  /**
   * A read of at most this many bytes went through a per-thread scratch buffer,
   * and so does the socket's next one; after a larger read the next goes into
   * a kReadSize reservation in the input itself (no copy). 2 KiB: of 1, 2 and
   * 4 KiB the best for HTTP/1.1 and h2c together (PROFILE.md, eighth round).
   */
  static constexpr size_t kSmallReadBytes = 2048;

 private:
  friend class WriteFlusher;
  static void onBevRead(bufferevent*, void* arg);
  static void onBevWrite(bufferevent*, void* arg);
  static void onBevEvent(bufferevent*, short events, void* arg);
  static void onReadable(evutil_socket_t, short, void* arg);
  static void onWritable(evutil_socket_t, short, void* arg);
  /** The flusher's turn: output added this loop turn is written. */
  void onFlush();
  static void onOutputChanged(evbuffer*, const evbuffer_cb_info* info, void* arg);
  void readSocket();
  void writeSocket();
  /** One send/sendmsg of the output's first chunks; drains what went. -1 and errno on failure. */
  int sendOutput();

  event_base* base_;
  SocketIoCallbacks& callbacks_;
  BufferEventPtr bev_;  // TLS or connecting; null once on the plain socket
  evbuffer* input_ = nullptr;
  evbuffer* output_ = nullptr;
  size_t write_low_ = 0;
  bool read_enabled_ = true;
  bool stopped_ = false;
  bool write_armed_ = false;  // write_event_ is added (here: in the padding before fd_)
  bool bulk_reads_ = false;   // the last read was above kSmallReadBytes (also in the padding)

  // Plain socket mode.
  evutil_socket_t fd_ = -1;
  EvBufferPtr own_input_;
  EvBufferPtr own_output_;
  EventPtr read_event_;
  // Made the first time the kernel does not take all output (most sockets never need it).
  EventPtr write_event_;             // armed only while the kernel did not take all output
  WriteFlusher* flusher_ = nullptr;  // writes later in this loop turn (plain socket)
  std::unique_ptr<WriteFlusher> own_flusher_;  // when none was given
  WriteFlusher::Link flush_link_;              // on the flusher's list while a write is due
  // 128 bytes: mimalloc's 128 class (write_armed_ here made it 136, the 160 class).
};

using SocketIoPtr = std::unique_ptr<SocketIo>;

}  // namespace sluice
