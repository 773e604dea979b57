// Entries that call the inner library's table of the same version with the same arguments: one
// template instead of a hand-written function per entry (the profiler's and CollNet's tables are
// forwarded only between equal versions, passthrough_versions.h).
#pragma once

#include <atomic>
#include <string>

#include "abi/net.h"
#include "abi/passthrough_library.h"
#include "common/log.h"
#include "nccl/net_common.h"

namespace zipccl {
namespace net {

// The inner table of kind Table (e.g. ncclCollNet_v11_t), version V, that a successful init found.
// Several versions can share one C type (v11 and v12 CollNet), hence V.
template <typename Table, int V>
struct InnerTable {
  static inline std::atomic<const Table*> table{nullptr};
};

// Finds the inner's table <prefix><V> and publishes it to the forwarders; nullptr without one. Says
// once per version, at INFO with `flags`, what `kind` ("CollNet") is passed to ("... passed through to
// <library><found_suffix>"), or why nothing is ("...; <without>").
template <typename Table, int V>
const Table* publish_inner(const char* prefix, const char* kind, const char* found_suffix,
                           const char* without, unsigned long flags) {
  static std::atomic<bool> said{false};
  std::string symbol;
  const auto* t = static_cast<const Table*>(passthrough_table(prefix, V, &symbol));
  if (!said.exchange(true)) {
    if (t)
      ZIPCCL_INFO(flags, "%s %s (v%d) passed through to %s%s", kind, t->name ? t->name : "(unnamed)", V,
                  passthrough_library().library.c_str(), found_suffix);
    else
      ZIPCCL_INFO(flags, "%s v%d: %s; %s", kind, V, passthrough_missing(symbol).c_str(), without);
  }
  if (t) InnerTable<Table, V>::table.store(t, std::memory_order_release);
  return t;
}

// Forward<V, &Table::entry>::call: calls the inner's entry with the arguments as they came. Before a
// successful init (NCCL does not do that) or when the inner's entry is NULL: ncclInternalError.
template <int V, auto Entry>
struct Forward;
template <int V, typename Table, typename... Args, ncclResult_t (*Table::*Entry)(Args...)>
struct Forward<V, Entry> {
  static ncclResult_t call(Args... args) noexcept {
    try {
      const Table* t = InnerTable<Table, V>::table.load(std::memory_order_acquire);
      if (!t || !(t->*Entry)) return ncclInternalError;
      return (t->*Entry)(args...);
    } catch (...) {
      return caught_exception("pass-through call");
    }
  }
};

}  // namespace net
}  // namespace zipccl
