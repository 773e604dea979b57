// --isa NAME of `zipccl compress`, `decompress` and `bench`: the CPU codec's kernel set.
#pragma once

#include <string>

#include "zipccl/codec.h"

namespace zipccl {
namespace tools {

// Parses NAME (auto|avx512|avx2|neon|scalar) into *out and checks that this build and CPU run that
// set. Otherwise prints why to stderr, prefixed "zipccl CMD: " ("--isa avx512: this CPU has no
// AVX-512 (avx512f avx512bw ... missing); it has avx2"), and returns false: the caller exits 2.
bool parse_isa_option(const char* cmd, const std::string& name, codec::Isa* out);

// The set ZIPCCL_CODEC_ISA names, as the plugin reads it, so that one variable forces the kernel set
// of every process a job starts; a command's --isa, parsed after, overrides it. Unset or empty: auto.
// A set the CPU lacks is an error here (the plugin only WARNs: it must not fail a training job, while
// a user who asks the tool for a set wants that set's figures or none).
bool isa_from_environment(const char* cmd, codec::Isa* out);

// "--isa auto|avx512|avx2|neon|scalar  ..." for the commands' --help.
extern const char* const kIsaUsage;

}  // namespace tools
}  // namespace zipccl
