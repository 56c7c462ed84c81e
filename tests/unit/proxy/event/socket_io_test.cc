// SocketIo on a socketpair: a plain socket leaves its bufferevent with the
// bytes buffered in it, output added during a loop turn leaves in one write
// at its end, EV_WRITE is registered only while the kernel holds some back,
// and reads, EOF and paused reading behave as a bufferevent's.

#include "proxy/event/socket_io.h"

#include <event2/bufferevent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice {
namespace {

class Recorder : public SocketIoCallbacks {
 public:
  void onIoRead() override { ++reads; }
  void onIoWrite() override { ++writes; }
  void onIoEvent(short e) override { events |= e; }
  int reads = 0;
  int writes = 0;
  short events = 0;
};

class SocketIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_.reset(event_base_new());
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0);
    evutil_make_socket_nonblocking(fds_[0]);
    evutil_make_socket_nonblocking(fds_[1]);
  }
  void TearDown() override {
    io_.reset();
    if (fds_[1] >= 0) ::close(fds_[1]);
  }

  /** SocketIo over a plain socket bufferevent on fds_[0], moved onto the socket. */
  void openPlain() {
    BufferEventPtr bev(bufferevent_socket_new(base_.get(), fds_[0], BEV_OPT_CLOSE_ON_FREE));
    io_ = std::make_unique<SocketIo>(base_.get(), std::move(bev), recorder_);
    io_->useSocketIfPlain();
  }

  void runOnce() { event_base_loop(base_.get(), EVLOOP_NONBLOCK); }

  std::string peerRead() {
    std::string out;
    char buf[65536];
    for (;;) {
      const ssize_t n = ::recv(fds_[1], buf, sizeof(buf), MSG_DONTWAIT);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }

  int addedEvents() { return event_base_get_num_events(base_.get(), EVENT_BASE_COUNT_ADDED); }

  EventBasePtr base_;
  int fds_[2] = {-1, -1};
  Recorder recorder_;
  SocketIoPtr io_;
};

TEST_F(SocketIoTest, PlainSocketLeavesItsBufferEventWithTheBytesInIt) {
  BufferEventPtr bev(bufferevent_socket_new(base_.get(), fds_[0], BEV_OPT_CLOSE_ON_FREE));
  // As the protocol detector leaves it: bytes libevent read (it thaws the
  // input's end to add them).
  evbuffer* sniffed = bufferevent_get_input(bev.get());
  evbuffer_unfreeze(sniffed, 0);
  evbuffer_add(sniffed, "sniffed", 7);
  evbuffer_freeze(sniffed, 0);
  io_ = std::make_unique<SocketIo>(base_.get(), std::move(bev), recorder_);
  EXPECT_NE(io_->bufferEvent(), nullptr);
  // A request written while connecting: the bufferevent had not sent it yet.
  evbuffer_add(io_->output(), "early", 5);

  io_->useSocketIfPlain();
  EXPECT_EQ(io_->bufferEvent(), nullptr);
  EXPECT_EQ(io_->fd(), fds_[0]);
  EXPECT_EQ(evbuffer_get_length(io_->input()), 7u);
  runOnce();
  EXPECT_EQ(peerRead(), "early");
}

TEST_F(SocketIoTest, OutputOfOneTurnLeavesTogetherWithoutRegisteringWrite) {
  openPlain();
  runOnce();
  const int idle_events = addedEvents();  // the read event

  evbuffer_add(io_->output(), "HTTP/1.1 200 OK\r\n\r\n", 19);
  evbuffer_add(io_->output(), "body", 4);
  EXPECT_EQ(peerRead(), "");  // not before the code adding it returned to the loop
  runOnce();
  EXPECT_EQ(peerRead(), "HTTP/1.1 200 OK\r\n\r\nbody");
  EXPECT_EQ(evbuffer_get_length(io_->output()), 0u);
  EXPECT_EQ(addedEvents(), idle_events);  // EV_WRITE was never registered
  EXPECT_EQ(recorder_.writes, 1);         // drained: at or below the low watermark
}

TEST_F(SocketIoTest, WriteNowSendsTheOutputBeforeTheLoopTurnEnds) {
  openPlain();
  runOnce();
  evbuffer_add(io_->output(), "PUBLISH", 7);
  io_->writeNow();
  EXPECT_EQ(peerRead(), "PUBLISH") << "sent in the call, not later in the turn";
  EXPECT_EQ(evbuffer_get_length(io_->output()), 0u);
  evbuffer_add(io_->output(), "more", 4);
  EXPECT_EQ(peerRead(), "");
  runOnce();  // the turn's write still goes as before
  EXPECT_EQ(peerRead(), "more");
}

TEST_F(SocketIoTest, ShortWriteWaitsForTheSocketAndReportsTheDrain) {
  openPlain();
  io_->setWriteLowWatermark(1024);
  runOnce();
  const int idle_events = addedEvents();

  const std::string big(4 * 1024 * 1024, 'x');
  evbuffer_add(io_->output(), big.data(), big.size());
  runOnce();
  ASSERT_GT(evbuffer_get_length(io_->output()), 0u);  // more than the kernel takes at once
  EXPECT_EQ(addedEvents(), idle_events + 1);          // EV_WRITE, while output is held back
  EXPECT_EQ(recorder_.writes, 0);

  std::string got;
  for (int i = 0; i < 100000 && got.size() < big.size(); ++i) {
    got += peerRead();
    runOnce();
  }
  EXPECT_EQ(got.size(), big.size());
  EXPECT_EQ(evbuffer_get_length(io_->output()), 0u);
  EXPECT_GE(recorder_.writes, 1);
  EXPECT_EQ(addedEvents(), idle_events);  // EV_WRITE dropped once drained
}

TEST_F(SocketIoTest, ReadsIntoInputAndReportsEof) {
  openPlain();
  ASSERT_EQ(::write(fds_[1], "hello", 5), 5);
  runOnce();
  EXPECT_EQ(recorder_.reads, 1);
  ASSERT_EQ(evbuffer_get_length(io_->input()), 5u);
  char buf[5];
  evbuffer_remove(io_->input(), buf, 5);
  EXPECT_EQ(std::string(buf, 5), "hello");

  ::close(fds_[1]);
  fds_[1] = -1;
  runOnce();
  EXPECT_TRUE(recorder_.events & BEV_EVENT_EOF);
  EXPECT_TRUE(recorder_.events & BEV_EVENT_READING);
}

TEST_F(SocketIoTest, SmallAndLargeReadsDeliverEveryByteInOrder) {
  // Small reads go through the thread's scratch buffer, a read after a large
  // one straight into the input: sizes around both bounds, alternating, and
  // the input left partly unread in between (the next read appends).
  openPlain();
  std::string sent;
  std::string got;
  const size_t sizes[] = {1,
                          SocketIo::kSmallReadBytes,
                          SocketIo::kSmallReadBytes + 1,
                          100,
                          SocketIo::kReadSize,
                          SocketIo::kReadSize + 1,
                          7,
                          3 * SocketIo::kReadSize + 5,
                          SocketIo::kSmallReadBytes - 1,
                          40000,
                          2};
  int round = 0;
  for (const size_t size : sizes) {
    std::string chunk(size, '\0');
    for (size_t i = 0; i < size; ++i) chunk[i] = static_cast<char>('a' + (sent.size() + i) % 26);
    ASSERT_EQ(::write(fds_[1], chunk.data(), chunk.size()), static_cast<ssize_t>(chunk.size()));
    sent += chunk;
    for (int i = 0; i < 100 && got.size() + evbuffer_get_length(io_->input()) < sent.size(); ++i) {
      runOnce();
    }
    // Take all but a few bytes (every other round): the rest waits for the next read.
    const size_t keep =
        ++round % 2 == 0 ? std::min<size_t>(3, evbuffer_get_length(io_->input())) : 0;
    const size_t take = evbuffer_get_length(io_->input()) - keep;
    std::string part(take, '\0');
    evbuffer_remove(io_->input(), part.data(), take);
    got += part;
  }
  std::string rest(evbuffer_get_length(io_->input()), '\0');
  evbuffer_remove(io_->input(), rest.data(), rest.size());
  got += rest;
  EXPECT_EQ(got, sent);
  EXPECT_GE(recorder_.reads, static_cast<int>(std::size(sizes)));
  EXPECT_EQ(recorder_.events, 0);
}

TEST_F(SocketIoTest, DisabledReadingLeavesBytesInTheKernelUntilEnabled) {
  openPlain();
  io_->disableRead();
  ASSERT_EQ(::write(fds_[1], "later", 5), 5);
  runOnce();
  EXPECT_EQ(recorder_.reads, 0);
  EXPECT_EQ(evbuffer_get_length(io_->input()), 0u);

  io_->enableRead();
  runOnce();
  EXPECT_EQ(recorder_.reads, 1);
  EXPECT_EQ(evbuffer_get_length(io_->input()), 5u);
}

TEST_F(SocketIoTest, StoppedSocketCallsNothing) {
  openPlain();
  evbuffer_add(io_->output(), "x", 1);
  io_->stop();
  ASSERT_EQ(::write(fds_[1], "y", 1), 1);
  runOnce();
  EXPECT_EQ(recorder_.reads, 0);
  EXPECT_EQ(recorder_.writes, 0);
  EXPECT_EQ(peerRead(), "");
}

TEST_F(SocketIoTest, BufferEventWithoutASocketStaysOnIt) {
  bufferevent* pair[2];
  ASSERT_EQ(bufferevent_pair_new(base_.get(), BEV_OPT_CLOSE_ON_FREE, pair), 0);
  BufferEventPtr other(pair[1]);
  bufferevent_enable(other.get(), EV_READ);
  io_ = std::make_unique<SocketIo>(base_.get(), BufferEventPtr(pair[0]), recorder_);
  io_->useSocketIfPlain();
  EXPECT_NE(io_->bufferEvent(), nullptr);
  evbuffer_add(io_->output(), "via pair", 8);
  for (int i = 0; i < 5; ++i) runOnce();
  EXPECT_EQ(evbuffer_get_length(bufferevent_get_input(other.get())), 8u);
  io_.reset();
  ::close(fds_[0]);
}

// --- one WriteFlusher for several sockets (the Dispatcher's) -----------------------------

/** A SocketIo on its own socketpair, with callbacks a test can script. */
struct Pipe : SocketIoCallbacks {
  void onIoRead() override {}
  void onIoWrite() override {
    ++writes;
    if (on_write) on_write();
  }
  void onIoEvent(short e) override { events |= e; }

  std::string peerRead() {
    std::string out;
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fds[1], buf, sizeof(buf), MSG_DONTWAIT);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  void add(std::string_view bytes) { evbuffer_add(io->output(), bytes.data(), bytes.size()); }

  int fds[2] = {-1, -1};
  SocketIoPtr io;
  int writes = 0;
  short events = 0;
  std::function<void()> on_write;
};

class WriteFlusherTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (auto& p : pipes_) {
      if (p->io) p->io.reset();  // closes fds[0]
      if (p->fds[1] >= 0) ::close(p->fds[1]);
    }
  }
  Pipe& open() {
    auto p = std::make_unique<Pipe>();
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, p->fds), 0);
    evutil_make_socket_nonblocking(p->fds[0]);
    evutil_make_socket_nonblocking(p->fds[1]);
    BufferEventPtr bev(bufferevent_socket_new(base_.get(), p->fds[0], BEV_OPT_CLOSE_ON_FREE));
    p->io = std::make_unique<SocketIo>(base_.get(), std::move(bev), *p, flusher_.get());
    p->io->useSocketIfPlain();
    pipes_.push_back(std::move(p));
    return *pipes_.back();
  }
  void runOnce() { event_base_loop(base_.get(), EVLOOP_NONBLOCK); }
  int addedEvents() { return event_base_get_num_events(base_.get(), EVENT_BASE_COUNT_ADDED); }

  EventBasePtr base_{event_base_new()};
  std::unique_ptr<WriteFlusher> flusher_ = std::make_unique<WriteFlusher>(base_.get());
  std::vector<std::unique_ptr<Pipe>> pipes_;
};

TEST_F(WriteFlusherTest, OneRunWritesEverySocketWithOutputOfTheTurn) {
  Pipe& a = open();
  Pipe& b = open();
  Pipe& idle = open();
  runOnce();
  const int idle_events = addedEvents();  // the three read events
  a.add("head-a ");
  b.add("head-b ");
  a.add("body-a");  // joins once
  b.add("body-b");
  EXPECT_EQ(flusher_->pendingCount(), 2u);
  EXPECT_EQ(a.peerRead(), "");  // not before the code adding it returned to the loop
  runOnce();
  EXPECT_EQ(flusher_->pendingCount(), 0u);
  EXPECT_EQ(a.peerRead(), "head-a body-a");
  EXPECT_EQ(b.peerRead(), "head-b body-b");
  EXPECT_EQ(idle.peerRead(), "");
  EXPECT_EQ(a.writes, 1);
  EXPECT_EQ(b.writes, 1);
  EXPECT_EQ(idle.writes, 0);
  EXPECT_EQ(addedEvents(), idle_events);  // no EV_WRITE: the kernel took it all
}

TEST_F(WriteFlusherTest, OutputAddedWhileFlushingIsWrittenInTheSameLoopTurn) {
  Pipe& a = open();
  Pipe& b = open();
  runOnce();
  // a's write callback answers on b (as a drained client lets the upstream
  // send more): b joins while the flusher runs, and goes out on its next run.
  a.on_write = [&] {
    if (b.writes == 0) b.add("from a's callback");
  };
  a.add("first");
  runOnce();
  EXPECT_EQ(a.peerRead(), "first");
  EXPECT_EQ(b.peerRead(), "from a's callback");
  EXPECT_EQ(flusher_->pendingCount(), 0u);
}

TEST_F(WriteFlusherTest, ASocketDestroyedByAnEarlierWriteOfTheRunIsSkipped) {
  Pipe& a = open();
  Pipe& b = open();
  Pipe& c = open();
  runOnce();
  a.on_write = [&] { b.io.reset(); };  // b waits behind a in the same run
  a.add("a");
  b.add("b");
  c.add("c");
  EXPECT_EQ(flusher_->pendingCount(), 3u);
  runOnce();
  EXPECT_EQ(a.peerRead(), "a");
  EXPECT_EQ(b.peerRead(), "");  // closed with its output unwritten
  EXPECT_EQ(c.peerRead(), "c");
  EXPECT_EQ(b.writes, 0);
  EXPECT_EQ(flusher_->pendingCount(), 0u);
}

TEST_F(WriteFlusherTest, AStoppedSocketLeavesTheList) {
  Pipe& a = open();
  Pipe& b = open();
  runOnce();
  a.add("a");
  b.add("b");
  a.io->stop();
  EXPECT_EQ(flusher_->pendingCount(), 1u);
  runOnce();
  EXPECT_EQ(a.peerRead(), "");
  EXPECT_EQ(b.peerRead(), "b");
}

TEST_F(WriteFlusherTest, AFlusherGoneFirstLeavesItsSocketsSafe) {
  Pipe& a = open();
  runOnce();
  a.add("a");
  EXPECT_EQ(flusher_->pendingCount(), 1u);
  flusher_.reset();
  a.io.reset();  // leaves no list it is not on
  runOnce();
  EXPECT_EQ(a.peerRead(), "");
}

}  // namespace
}  // namespace sluice
