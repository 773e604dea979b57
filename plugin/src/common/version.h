// The release version of zipccl (the top-level CMakeLists.txt's project(VERSION), the one place it is
// written) and the git commit it was built from. Compiled into both the plugin and the zipccl tool,
// so that `zipccl doctor` can tell when the two differ.
#pragma once

namespace zipccl {

// "0.1.0 (git 1a2b3c4d5e)", or "0.1.0" for a build outside a git checkout. Static storage.
const char* version_string();

}  // namespace zipccl
