// The library zipccl passes NCCL's tuner, profiler and CollNet calls through to: the net plugin it
// wraps (ZIPCCL_NET_INNER, or what the fabric room decided to wrap).
//
// NCCL looks for ncclTunerPlugin_vN, ncclProfiler_vN and ncclCollNetPlugin_vN in the net plugin's own
// library when NCCL_TUNER_PLUGIN / NCCL_PROFILER_PLUGIN are unset. zipccl exports them so that the
// fabric's tuner and CollNet (aws-ofi-nccl's tuner, SHARP) are not lost behind it; each call goes to the
// inner library's table of the same kind (passthrough_tuner.cpp, passthrough_profiler.cpp,
// passthrough_collnet.cpp).
#pragma once

#include <exception>
#include <string>

#include "nccl/net_common.h"

namespace zipccl {
namespace net {

struct PassthroughLibrary {
  void* handle = nullptr;  // dlopen handle, kept for the life of the process; nullptr: none
  std::string library;     // the name dlopen succeeded with (for messages)
  std::string why_none;    // handle == nullptr: why, one phrase ("zipccl wraps no other net plugin")
};

// The library, opened on the first call and kept open (thread-safe; later calls return the same one).
// Preferred: the library the inner transport already runs on (inner_transport_info), the very one NCCL's
// net traffic goes through. Before the net init: the first entry of the decision's list (node_decision()
// with FabricAction::kWrap) that dlopen finds, resolved as NCCL resolves NCCL_NET_PLUGIN. Never this
// zipccl library itself (forwarding to it would call these same entries again): an entry naming it
// ends the search with no library, as the inner transport then wraps nothing.
const PassthroughLibrary& passthrough_library();

// dlsym(symbol) in passthrough_library(); nullptr without a library or without the symbol.
const void* passthrough_symbol(const char* symbol);
// The table <prefix><version> ("ncclTunerPlugin_v", 6) in passthrough_library(), or nullptr;
// *symbol: the name looked up.
const void* passthrough_table(const char* prefix, int version, std::string* symbol);

// Why a pass-through of `what` ("ncclCollNetPlugin_v12") has nothing to call, for an INFO:
// "<library> has no <what>", or "nothing to pass through to (<why_none>)".
std::string passthrough_missing(const std::string& what);

// Installs `logger` as the plugin's logger when NCCL has not handed one yet (the tuner or profiler may
// be initialised before the net).
void passthrough_adopt_logger(ncclDebugLogger_t logger);

}  // namespace net
}  // namespace zipccl
