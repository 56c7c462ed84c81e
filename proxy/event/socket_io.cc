#include "proxy/event/socket_io.h"

#include <event2/bufferevent_ssl.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>

#include "common/clock.h"

namespace sluice {

// --- WriteFlusher ----------------------------------------------------------------------

WriteFlusher::WriteFlusher(event_base* base)
    : event_(event_new(base, -1, 0, &WriteFlusher::onFire, this)) {
  pending_.prev = &pending_;
  pending_.next = &pending_;
}

WriteFlusher::~WriteFlusher() {
  while (pending_.next != &pending_) unlink(*pending_.next);
}

size_t WriteFlusher::pendingCount() const {
  size_t n = 0;
  for (const Link* l = pending_.next; l != &pending_; l = l->next) ++n;
  return n;
}

void WriteFlusher::schedule(Link& link) {
  if (link.next != nullptr) return;  // already waiting
  link.prev = pending_.prev;
  link.next = &pending_;
  pending_.prev->next = &link;
  pending_.prev = &link;
  if (!active_) {
    active_ = true;
    event_active(event_.get(), EV_WRITE, 0);
  }
}

void WriteFlusher::unlink(Link& link) {
  if (link.next == nullptr) return;
  link.prev->next = link.next;
  link.next->prev = link.prev;
  link.prev = nullptr;
  link.next = nullptr;
}

void WriteFlusher::onFire(evutil_socket_t, short, void* arg) {
  const EventTimeScope event_time;
  auto* self = static_cast<WriteFlusher*>(arg);
  self->active_ = false;
  if (self->pending_.next == &self->pending_) return;
  // This run writes the SocketIos waiting now; one that joins while they are
  // written (a callback added output) waits for the next run, as a socket's
  // own event activated again would. A write's callback may destroy any
  // SocketIo (it unlinks itself from `batch`) but not the flusher.
  Link batch;
  batch.next = self->pending_.next;
  batch.prev = self->pending_.prev;
  batch.next->prev = &batch;
  batch.prev->next = &batch;
  self->pending_.next = &self->pending_;
  self->pending_.prev = &self->pending_;
  while (batch.next != &batch) {
    Link* link = batch.next;
    unlink(*link);
    link->owner->onFlush();
  }
}

// --- SocketIo ---------------------------------------------------------------------------

SocketIo::SocketIo(event_base* base, BufferEventPtr bev, SocketIoCallbacks& callbacks,
                   WriteFlusher* flusher)
    : base_(base), callbacks_(callbacks), bev_(std::move(bev)), flusher_(flusher) {
  flush_link_.owner = this;
  input_ = bufferevent_get_input(bev_.get());
  output_ = bufferevent_get_output(bev_.get());
  bufferevent_setcb(bev_.get(), &SocketIo::onBevRead, &SocketIo::onBevWrite, &SocketIo::onBevEvent,
                    this);
  bufferevent_enable(bev_.get(), EV_READ | EV_WRITE);
}

SocketIo::~SocketIo() {
  stop();
  // Events first (they name the fd), then the buffers, then the socket.
  read_event_.reset();
  write_event_.reset();
  own_flusher_.reset();
  own_input_.reset();
  own_output_.reset();
  if (fd_ >= 0) evutil_closesocket(fd_);
}

void SocketIo::useSocketIfPlain() {
  if (!bev_ || stopped_) return;
  bufferevent* bev = bev_.get();
  const evutil_socket_t fd = bufferevent_getfd(bev);
  if (fd < 0 || bufferevent_openssl_get_ssl(bev) != nullptr ||
      bufferevent_get_underlying(bev) != nullptr) {
    return;  // TLS, a filter or pair, or no socket yet
  }

  own_input_.reset(evbuffer_new());
  own_output_.reset(evbuffer_new());
  // A socket bufferevent freezes its output's front (only it writes from
  // there) and its input's end: thawed, as the bytes in them move here.
  evbuffer* bev_input = bufferevent_get_input(bev);
  evbuffer* bev_output = bufferevent_get_output(bev);
  evbuffer_unfreeze(bev_input, 0);
  evbuffer_unfreeze(bev_output, 1);
  evbuffer_add_buffer(own_input_.get(), bev_input);
  evbuffer_add_buffer(own_output_.get(), bev_output);
  // The bufferevent lets go of the socket without closing it (its events are deleted).
  bufferevent_setcb(bev, nullptr, nullptr, nullptr, nullptr);
  bufferevent_disable(bev, EV_READ | EV_WRITE);
  bufferevent_setfd(bev, -1);
  bev_.reset();

  fd_ = fd;
  input_ = own_input_.get();
  output_ = own_output_.get();
  read_event_.reset(event_new(base_, fd_, EV_READ | EV_PERSIST, &SocketIo::onReadable, this));
  if (flusher_ == nullptr) {
    own_flusher_ = std::make_unique<WriteFlusher>(base_);
    flusher_ = own_flusher_.get();
  }
  evbuffer_add_cb(output_, &SocketIo::onOutputChanged, this);
  if (read_enabled_) event_add(read_event_.get(), nullptr);
  if (evbuffer_get_length(output_) > 0) flusher_->schedule(flush_link_);
}

void SocketIo::enableRead() {
  if (stopped_) return;
  read_enabled_ = true;
  if (bev_) {
    bufferevent_enable(bev_.get(), EV_READ);
  } else if (read_event_) {
    event_add(read_event_.get(), nullptr);
  }
}

void SocketIo::disableRead() {
  read_enabled_ = false;
  if (bev_) {
    bufferevent_disable(bev_.get(), EV_READ);
  } else if (read_event_) {
    event_del(read_event_.get());
  }
}

void SocketIo::setWriteLowWatermark(size_t low) {
  write_low_ = low;
  if (bev_) bufferevent_setwatermark(bev_.get(), EV_WRITE, low, 0);
}

BufferEventPtr SocketIo::takeBufferEvent() {
  if (bev_) bufferevent_setcb(bev_.get(), nullptr, nullptr, nullptr, nullptr);
  input_ = nullptr;
  output_ = nullptr;
  stopped_ = true;
  return std::move(bev_);
}

evutil_socket_t SocketIo::fd() const { return bev_ ? bufferevent_getfd(bev_.get()) : fd_; }

void SocketIo::stop() {
  if (stopped_) return;
  stopped_ = true;
  if (bev_) {
    bufferevent_disable(bev_.get(), EV_READ | EV_WRITE);
    bufferevent_setcb(bev_.get(), nullptr, nullptr, nullptr, nullptr);
  }
  if (read_event_) event_del(read_event_.get());
  if (write_event_) event_del(write_event_.get());
  WriteFlusher::unlink(flush_link_);
  if (own_output_) evbuffer_remove_cb(own_output_.get(), &SocketIo::onOutputChanged, this);
  write_armed_ = false;
}

// --- bufferevent mode -----------------------------------------------------------------

void SocketIo::onBevRead(bufferevent*, void* arg) {
  const EventTimeScope event_time;
  static_cast<SocketIo*>(arg)->callbacks_.onIoRead();
}

void SocketIo::onBevWrite(bufferevent*, void* arg) {
  const EventTimeScope event_time;
  static_cast<SocketIo*>(arg)->callbacks_.onIoWrite();
}

void SocketIo::onBevEvent(bufferevent*, short events, void* arg) {
  const EventTimeScope event_time;
  static_cast<SocketIo*>(arg)->callbacks_.onIoEvent(events);
}

// --- plain socket mode ----------------------------------------------------------------

void SocketIo::onOutputChanged(evbuffer*, const evbuffer_cb_info* info, void* arg) {
  auto* self = static_cast<SocketIo*>(arg);
  if (info->n_added == 0 || self->write_armed_ || self->flush_link_.next != nullptr ||
      self->stopped_) {
    return;
  }
  // Written once the code adding output returns, later in this loop turn:
  // a head and its body leave in one send.
  self->flusher_->schedule(self->flush_link_);
}

void SocketIo::onFlush() {
  if (stopped_ || write_armed_) return;
  writeSocket();
}

void SocketIo::onWritable(evutil_socket_t, short, void* arg) {
  const EventTimeScope event_time;
  static_cast<SocketIo*>(arg)->writeSocket();
}

void SocketIo::writeSocket() {
  if (stopped_) return;
  int written = 0;
  if (evbuffer_get_length(output_) > 0) {
    written = sendOutput();
    if (written < 0) {
      const int err = EVUTIL_SOCKET_ERROR();
      if (err != EAGAIN && err != EWOULDBLOCK && err != EINTR) {
        if (write_armed_) event_del(write_event_.get());
        write_armed_ = false;
        callbacks_.onIoEvent(BEV_EVENT_WRITING | BEV_EVENT_ERROR);  // last: may destroy us
        return;
      }
      written = 0;
    }
  }
  const size_t left = evbuffer_get_length(output_);
  if (left > 0 && !write_armed_) {
    write_armed_ = true;  // the kernel's buffer is full: wait until it takes more
    if (!write_event_) {
      write_event_.reset(event_new(base_, fd_, EV_WRITE | EV_PERSIST, &SocketIo::onWritable, this));
    }
    event_add(write_event_.get(), nullptr);
  } else if (left == 0 && write_armed_) {
    write_armed_ = false;
    event_del(write_event_.get());
  }
  if (written > 0 && left <= write_low_) callbacks_.onIoWrite();  // last: may destroy us
}

void SocketIo::writeNow() {
  if (stopped_ || bev_ || write_armed_ || fd_ < 0 || evbuffer_get_length(output_) == 0) return;
  // The flusher still has this SocketIo on its list: the rest, or the
  // error, goes there (callbacks from the loop, not from this call).
  (void)sendOutput();
}

int SocketIo::sendOutput() {
  // What evbuffer_write does (the first chunks, one call, drain what went),
  // with send/sendmsg instead of writev: see readSocket. MSG_NOSIGNAL: a
  // peer that is gone is an EPIPE here, not a signal.
  constexpr int kMaxChunks = 64;  // a full write comes back for the rest (EV_WRITE)
  evbuffer_iovec vec[kMaxChunks];
  const int n = std::min(evbuffer_peek(output_, -1, nullptr, vec, kMaxChunks), kMaxChunks);
  if (n <= 0) return 0;
  ssize_t sent;
  if (n == 1) {
    sent = ::send(fd_, vec[0].iov_base, vec[0].iov_len, MSG_NOSIGNAL);
  } else {
    iovec iov[kMaxChunks];
    for (int i = 0; i < n; ++i) iov[i] = iovec{vec[i].iov_base, vec[i].iov_len};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    sent = ::sendmsg(fd_, &msg, MSG_NOSIGNAL);
  }
  if (sent > 0) evbuffer_drain(output_, static_cast<size_t>(sent));
  return static_cast<int>(sent);
}

void SocketIo::onReadable(evutil_socket_t, short, void* arg) {
  const EventTimeScope event_time;
  static_cast<SocketIo*>(arg)->readSocket();
}

void SocketIo::readSocket() {
  if (stopped_ || !read_enabled_) return;
  // Socket calls, not read/readv: those go through the VFS layer (fdget_pos,
  // rw_verify_area, security and fsnotify hooks) that recv/recvmsg skip, ~3%
  // of a proxied request's CPU on loopback (PROFILE.md, sixth round).
  ssize_t got;
  if (!bulk_reads_) {
    // Small reads (a request, a head, a streamed chunk) land in this thread's
    // scratch buffer and the input gets only what came. Reserving 16 KiB in
    // the input left an empty 16 KiB chain behind when nothing came (EOF, a
    // wake-up with nothing to read), and cost a 16 KiB allocation per read
    // where evbuffer_add takes 1 KiB (PROFILE.md, eighth round). The scratch
    // is free again before any callback runs.
    alignas(64) static thread_local char scratch[kReadSize];
    got = ::recv(fd_, scratch, sizeof(scratch), 0);
    if (got > 0) evbuffer_add(input_, scratch, static_cast<size_t>(got));
  } else {
    // After a large read the next one goes straight into the input: a bulk
    // transfer is not copied twice.
    evbuffer_iovec vec[2];
    const int n = evbuffer_reserve_space(input_, static_cast<ev_ssize_t>(kReadSize), vec, 2);
    if (n <= 0) return;
    if (n == 1) {
      got = ::recv(fd_, vec[0].iov_base, vec[0].iov_len, 0);
    } else {
      iovec iov[2];
      for (int i = 0; i < n; ++i) iov[i] = iovec{vec[i].iov_base, vec[i].iov_len};
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(n);
      got = ::recvmsg(fd_, &msg, 0);
    }
    if (got > 0) {
      size_t left = static_cast<size_t>(got);
      int used = 0;
      for (; used < n && left > 0; ++used) {
        vec[used].iov_len = std::min(vec[used].iov_len, left);
        left -= vec[used].iov_len;
      }
      evbuffer_commit_space(input_, vec, used);
    }
  }
  if (got > 0) {
    bulk_reads_ = static_cast<size_t>(got) > kSmallReadBytes;
    callbacks_.onIoRead();  // last: may destroy us
    return;
  }
  if (got < 0) {
    const int err = errno;
    if (err == EAGAIN || err == EWOULDBLOCK || err == EINTR) return;
  }
  // EOF or an error: no more reading (as a bufferevent does), then tell the owner.
  disableRead();
  callbacks_.onIoEvent(BEV_EVENT_READING | (got == 0 ? BEV_EVENT_EOF : BEV_EVENT_ERROR));
}

}  // namespace sluice
