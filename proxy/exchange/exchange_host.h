#pragma once

// What an Exchange needs from the worker that hosts it: its dispatcher, its
// pools, its ids, its access log and MCP cancel sender, and the Exchange's
// own retirement. The worker implements it; tests fake it.

#include <cstddef>
#include <cstdint>
#include <functional>

#include "proxy/event/dispatcher.h"
#include "proxy/exchange/config_snapshot.h"
#include "proxy/exchange/tool_cancel_notifier.h"
#include "proxy/upstream/upstream_stream.h"

namespace sluice {

class AccessLogBuffer;
class Exchange;
class IdGenerator;

class ExchangeHost {
 public:
  virtual ~ExchangeHost() = default;
  virtual Dispatcher& dispatcher() = 0;
  /** This worker's pool number `index` of `runtime` (an endpoint's: EndpointRuntime::pool_index).
   */
  virtual UpstreamStreamSource& pool(const ConfigSnapshot& runtime, size_t index) = 0;
  /** The Exchange has finished: the host deletes it (deferred). */
  virtual void retire(Exchange& exchange) = 0;
  /** True while exchange `id` exists on this host and has not finished. */
  virtual bool alive(uint64_t id) const = 0;
  /** This worker's source of request and trace ids (docs/design.md §7). */
  virtual IdGenerator& ids() = 0;
  /** This worker's access log buffer; null while the access log is off. */
  virtual AccessLogBuffer* accessLog() = 0;
  /** This worker's sender of MCP `notifications/cancelled`; null: none are sent. */
  virtual ToolCancelNotifier* toolCancels() { return nullptr; }

  /**
   * A callable any thread may run: it posts `fn` to this host's dispatcher,
   * where `fn` runs only while exchange `id` is still alive (a filter's
   * answer from another thread never reaches an Exchange that has ended).
   */
  std::function<void()> wakerFor(uint64_t id, std::function<void()> fn);
};

}  // namespace sluice
