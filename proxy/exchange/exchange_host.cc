#include "proxy/exchange/exchange_host.h"

#include <utility>

namespace sluice {

std::function<void()> ExchangeHost::wakerFor(uint64_t id, std::function<void()> fn) {
  Dispatcher* dispatcher = &this->dispatcher();
  ExchangeHost* host = this;
  return [dispatcher, host, id, fn = std::move(fn)] {
    dispatcher->post([host, id, fn] {
      if (host->alive(id)) fn();
    });
  };
}

}  // namespace sluice
