#pragma once

// A client's connection for tests of the Exchange's parts, without sockets:
// it records what it is handed and buffers what the test says.

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "proxy/downstream/downstream_stream.h"

namespace sluice {

/** The client's connection: records what it is handed, buffers what the test says. */
class RecordingClient final : public DownstreamStream {
 public:
  void encodeHeaders(ResponseHead&& head, bool end_stream) override {
    heads.push_back(std::move(head));
    ended = ended || end_stream;
  }
  void encodeData(const char* data, size_t len, bool end_stream) override {
    body.append(data, len);
    ++data_calls;
    ended = ended || end_stream;
    if (on_data) on_data();
  }
  bool carriesTrailers() const override { return trailers_carried; }
  void encodeTrailers(HeaderMap&& t) override {
    trailers = std::move(t);
    ended = true;
  }
  void resetStream() override { reset = true; }
  void resetStreamAfter(std::string_view final_bytes) override {
    reset = true;
    final_event = std::string(final_bytes);
  }
  bool canWriteWithoutWaiting(size_t) const override { return writable; }
  bool aboveHighWatermark() const override { return buffered > 64 * 1024; }
  size_t bufferedBytes() const override { return buffered; }
  void pauseRequestBody() override {}
  void resumeRequestBody() override { ++resumed; }
  void onExchangeDone() override { done = true; }
  bool confirmsReads() const override { return confirms_reads; }
  void holdUntilRead(std::unique_ptr<HeldDelivery> hold) override { held = std::move(hold); }
  const ClientInfo& clientInfo() const override { return info; }

  std::vector<ResponseHead> heads;
  std::string body;
  int data_calls = 0;
  HeaderMap trailers;
  bool ended = false;
  bool reset = false;
  std::string final_event;
  bool writable = true;
  size_t buffered = 0;
  ClientInfo info;
  int resumed = 0;
  bool done = false;
  bool trailers_carried = true;
  bool confirms_reads = false;
  std::unique_ptr<HeldDelivery> held;  // what holdUntilRead() was handed
  std::function<void()> on_data;       // runs inside the write, as a codec reporting a disconnect
};

}  // namespace sluice
