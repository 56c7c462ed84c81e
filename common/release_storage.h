#pragma once

// Giving a member's heap storage back, for objects kept alive after a part of
// them is no longer needed (a held stream's request head once no retry can
// replay it, a parser's buffer between events).
//
// `x = T{}` does not always do it: libstdc++'s std::string move assignment
// from a string held inline (short, no heap buffer) copies the characters
// into the target's buffer and keeps that buffer, so a RequestHead (its
// method and path strings) assigned an empty value keeps what it had
// reserved. (HeaderMap's move assignment takes the other's block and frees
// its own; releaseStorage works for either.) Moving the value out into a
// temporary that is destroyed frees it.

#include <utility>

namespace sluice {

/** Leaves `value` as a default-constructed T with no heap storage of its own. */
template <typename T>
void releaseStorage(T& value) {
  {
    T gone = std::move(value);  // takes the buffers; freed at the end of this scope
  }
  value = T{};  // a moved-from object is only "valid but unspecified": make it empty
}

}  // namespace sluice
