#include "abi/passthrough_library.h"

#include <dlfcn.h>

#include <vector>

#include "common/log.h"
#include "fabric/fabric.h"
#include "inner/inner_transport.h"
#include "zipccl/net_load.h"

namespace zipccl {
namespace net {
namespace {

// Whether `handle` is the object this code runs in. dlopen hands out one handle per loaded object, so
// the object dladdr names, reopened without loading, is the same handle exactly when it is us.
bool is_self(void* handle) {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&is_self), &info) || !info.dli_fname) return false;
  void* own = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  if (!own) return false;
  const bool same = own == handle;
  dlclose(own);  // only drops the reference NOLOAD took
  return same;
}

PassthroughLibrary open_library() {
  PassthroughLibrary lib;
  std::vector<std::string> names;
  std::string library, name;
  int abi = 0;
  if (inner_transport_info(&library, &name, &abi)) {
    names.push_back(library);
  } else {
    const FabricDecision& d = node_decision();
    if (d.action != FabricAction::kWrap) {
      lib.why_none = "zipccl wraps no other net plugin";
      return lib;
    }
    names = inner_plugin_list(d.inner);
    if (names.empty()) {
      lib.why_none = "ZIPCCL_NET_INNER names no plugin";
      return lib;
    }
  }
  std::string reasons;
  for (const std::string& n : names) {
    char opened[ZIPCCL_NET_PATH_MAX];
    char error[ZIPCCL_NET_ERROR_MAX];
    void* h = zipccl_net_dlopen(n.c_str(), opened, sizeof opened, error, sizeof error);
    std::string why;
    if (!h) {
      why = error;
    } else if (is_self(h)) {
      // As the inner transport does, the search ends here: zipccl then wraps nothing. Going on down the
      // list could pick a second zipccl whose own list leads back here, each forwarding to the other.
      dlclose(h);
      lib.why_none = reasons + (reasons.empty() ? "" : "; ") + n + ": this zipccl library itself";
      return lib;
    } else {
      lib.handle = h;
      lib.library = opened;
      return lib;
    }
    reasons += (reasons.empty() ? "" : "; ") + n + ": " + why;
  }
  lib.why_none = reasons;
  return lib;
}

}  // namespace

const PassthroughLibrary& passthrough_library() {
  static const PassthroughLibrary& lib = *new PassthroughLibrary(open_library());
  return lib;
}

const void* passthrough_symbol(const char* symbol) {
  const PassthroughLibrary& lib = passthrough_library();
  return lib.handle ? dlsym(lib.handle, symbol) : nullptr;
}

const void* passthrough_table(const char* prefix, int version, std::string* symbol) {
  *symbol = prefix + std::to_string(version);
  return passthrough_symbol(symbol->c_str());
}

std::string passthrough_missing(const std::string& what) {
  const PassthroughLibrary& lib = passthrough_library();
  if (lib.handle) return lib.library + " has no " + what;
  return "nothing to pass through to (" + lib.why_none + ")";
}

void passthrough_adopt_logger(ncclDebugLogger_t logger) {
  if (logger && !net::logger()) set_logger(logger);
}

}  // namespace net
}  // namespace zipccl
