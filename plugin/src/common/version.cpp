#include "common/version.h"

#include "zipccl_git_commit.h"  // generated at build time: ZIPCCL_GIT_COMMIT

#ifndef ZIPCCL_VERSION
#error "ZIPCCL_VERSION (the project's version) must be defined by the build"
#endif

namespace zipccl {

const char* version_string() {
  return sizeof(ZIPCCL_GIT_COMMIT) > 1 ? ZIPCCL_VERSION " (git " ZIPCCL_GIT_COMMIT ")" : ZIPCCL_VERSION;
}

}  // namespace zipccl
