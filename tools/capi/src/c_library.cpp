// The C API's library-wide functions (version, kernel set, last error) and the settings registry.
#include <vector>

#include "c_status.h"
#include "common/settings.h"
#include "common/version.h"
#include "zipccl/codec.h"
#include "zipccl/zipccl_c.h"

using namespace zipccl;
using capi::fail;
using capi::guarded;

namespace {

// The registry's descriptions, read once: the strings live as long as the process, so that they are
// handed out without a copy (never destroyed: a thread may still read them while the process exits).
// Only the fields that do not depend on the environment are exposed.
const std::vector<net::SettingInfo>& registry() {
  static const std::vector<net::SettingInfo>& settings =
      *new std::vector<net::SettingInfo>(net::describe_settings());
  return settings;
}

}  // namespace

extern "C" {

int zipccl_abi_version(void) {
  return ZIPCCL_C_ABI_VERSION;
}

const char* zipccl_last_error(void) {
  return capi::last_error();
}

int zipccl_version(const char** version) {
  return guarded("version", [&]() -> int {
    if (!version) return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "version: version is NULL");
    *version = zipccl::version_string();
    return ZIPCCL_OK;
  });
}

int zipccl_simd_path(const char** name) {
  return guarded("simd_path", [&]() -> int {
    if (!name) return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "simd_path: name is NULL");
    *name = codec::simd_path();
    return ZIPCCL_OK;
  });
}

int zipccl_setting_count(size_t* count) {
  return guarded("setting_count", [&]() -> int {
    if (!count) return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "setting_count: count is NULL");
    *count = registry().size();
    return ZIPCCL_OK;
  });
}

int zipccl_setting(size_t index, const char** name, const char** values, const char** default_value,
                   const char** doc) {
  return guarded("setting", [&]() -> int {
    const std::vector<net::SettingInfo>& all = registry();
    if (index >= all.size())
      return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "setting: index %zu is out of range (%zu settings)", index,
                  all.size());
    const net::SettingInfo& s = all[index];
    if (name) *name = s.name.c_str();
    if (values) *values = s.values.c_str();
    if (default_value) *default_value = s.default_value.c_str();
    if (doc) *doc = s.doc.c_str();
    return ZIPCCL_OK;
  });
}

}  // extern "C"
