// fatbin_archs LIBRARY ARCHS: lists the GPU code in LIBRARY's .nv_fatbin section and fails, naming
// the gap, when a translation unit's fatbin lacks an architecture of ARCHS (CMake's
// CMAKE_CUDA_ARCHITECTURES, comma-separated: "80-real,90-real,120-virtual"; NN alone is both).
// A GPU whose architecture has no cubin JIT-compiles the PTX at the first launch in every process
// (NCCL init), or cannot run the kernels at all when no usable PTX exists either.
//
// Reads the section itself, as the toolkit's cuobjdump would (not every toolkit ships it). Layout
// (little-endian; observed on nvcc 12 and 13 output, as documented by cuobjdump's reverse engineering):
//   container: u32 magic 0xBA55ED50, u16 version 1, u16 header size (16), u64 size of the entries
//   entry:     u16 kind (1 PTX, 2 cubin), u16, u32 header size (64..136), u64 payload size, u32, u32,
//              u16 minor, u16 major, u32 arch (e.g. 90), ...; the payload follows the entry header.
// nvcc emits one container per .cu file; the linker may pad between containers with zeros.
// Exit: 0 all present, 1 a gap or a malformed section, 77 (skip) for ARCHS CMake resolves itself
// (all, all-major, native).
#include <elf.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr uint32_t kFatbinMagic = 0xBA55ED50;
constexpr uint16_t kKindPtx = 1;
constexpr uint16_t kKindCubin = 2;

struct Code {
  uint16_t kind;
  uint32_t arch;
  bool operator<(const Code& o) const {
    return kind != o.kind ? kind > o.kind : arch < o.arch;
  }  // cubins first
};

std::string name(const Code& c) {
  return (c.kind == kKindPtx     ? "compute_"
          : c.kind == kKindCubin ? "sm_"
                                 : "kind" + std::to_string(c.kind) + "_") +
         std::to_string(c.arch);
}

template <typename T>
T load(const std::vector<char>& b, uint64_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof v);
  return v;
}

// The bytes of section `want`, or an error in *why.
bool section(const std::vector<char>& f, const char* want, uint64_t* off, uint64_t* size, std::string* why) {
  if (f.size() < sizeof(Elf64_Ehdr) || std::memcmp(f.data(), ELFMAG, SELFMAG) != 0 ||
      f[EI_CLASS] != ELFCLASS64 || f[EI_DATA] != ELFDATA2LSB) {
    *why = "not a 64-bit little-endian ELF file";
    return false;
  }
  const auto eh = load<Elf64_Ehdr>(f, 0);
  if (eh.e_shoff == 0 || eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shstrndx >= eh.e_shnum ||
      eh.e_shoff + uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr) > f.size()) {
    *why = "no readable section headers";
    return false;
  }
  const auto strtab = load<Elf64_Shdr>(f, eh.e_shoff + uint64_t{eh.e_shstrndx} * sizeof(Elf64_Shdr));
  for (unsigned i = 0; i < eh.e_shnum; ++i) {
    const auto sh = load<Elf64_Shdr>(f, eh.e_shoff + uint64_t{i} * sizeof(Elf64_Shdr));
    const uint64_t n = strtab.sh_offset + sh.sh_name;
    if (n >= f.size() || std::strncmp(f.data() + n, want, f.size() - n) != 0) continue;
    if (sh.sh_type == SHT_NOBITS || sh.sh_offset + sh.sh_size > f.size()) {
      *why = std::string(want) + " has no bytes in the file";
      return false;
    }
    *off = sh.sh_offset;
    *size = sh.sh_size;
    return true;
  }
  *why = std::string("no ") + want + " section: no CUDA code was linked in (a CPU-only build?)";
  return false;
}

struct Container {
  uint64_t offset, bytes;
  std::set<Code> codes;
};

bool parse(const std::vector<char>& f, uint64_t base, uint64_t size, std::vector<Container>* out,
           std::string* why) {
  uint64_t at = 0;
  while (at + 16 <= size) {
    const uint32_t magic = load<uint32_t>(f, base + at);
    if (magic != kFatbinMagic) {
      if (magic != 0) {
        *why = "unknown data at .nv_fatbin+" + std::to_string(at);
        return false;
      }
      at += 4;  // padding between containers
      continue;
    }
    const uint16_t header = load<uint16_t>(f, base + at + 6);
    const uint64_t body = load<uint64_t>(f, base + at + 8);
    if (header < 16 || body > size - at - header) {
      *why = "container at .nv_fatbin+" + std::to_string(at) + " runs past the section";
      return false;
    }
    Container c{at, header + body, {}};
    for (uint64_t e = at + header; e < at + header + body;) {
      const uint64_t left = at + header + body - e;
      if (left < 32) {
        *why = "truncated entry at .nv_fatbin+" + std::to_string(e);
        return false;
      }
      const uint32_t entry_header = load<uint32_t>(f, base + e + 4);
      const uint64_t payload = load<uint64_t>(f, base + e + 8);
      if (entry_header < 32 || entry_header > left || payload > left - entry_header) {
        *why = "entry at .nv_fatbin+" + std::to_string(e) + " runs past its container";
        return false;
      }
      c.codes.insert({load<uint16_t>(f, base + e), load<uint32_t>(f, base + e + 28)});
      e += entry_header + payload;
    }
    out->push_back(c);
    at += header + body;
  }
  return true;
}

// CMAKE_CUDA_ARCHITECTURES items -> the codes they ask for; false for the values CMake resolves
// itself (all, all-major, native), which name no list to check.
bool expected_codes(const std::string& archs, std::set<Code>* out, std::string* why) {
  std::stringstream ss(archs);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t digits = 0;
    while (digits < item.size() && item[digits] >= '0' && item[digits] <= '9') ++digits;
    if (digits == 0) {
      *why = "'" + item + "' names no fixed architecture";
      return false;
    }
    const uint32_t arch = static_cast<uint32_t>(std::stoul(item.substr(0, digits)));
    const bool real = item.find("-virtual") == std::string::npos;
    const bool virt = item.find("-real") == std::string::npos;
    if (real) out->insert({kKindCubin, arch});
    if (virt) out->insert({kKindPtx, arch});
  }
  return true;
}

std::string join(const std::set<Code>& s) {
  std::string r;
  for (const Code& c : s) r += (r.empty() ? "" : " ") + name(c);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fatbin_archs LIBRARY ARCHS   (ARCHS: e.g. 80-real,90-real,90-virtual)\n");
    return 2;
  }
  const std::string lib = argv[1];
  std::set<Code> want;
  std::string why;
  if (!expected_codes(argv[2], &want, &why)) {
    std::printf("skipped: ARCHS=%s: %s\n", argv[2], why.c_str());
    return 77;
  }
  std::ifstream in(lib, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fatbin_archs: cannot read %s\n", lib.c_str());
    return 1;
  }
  const std::vector<char> f((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t off = 0, size = 0;
  std::vector<Container> containers;
  if (!section(f, ".nv_fatbin", &off, &size, &why) || !parse(f, off, size, &containers, &why)) {
    std::fprintf(stderr, "fatbin_archs: %s: %s\n", lib.c_str(), why.c_str());
    return 1;
  }
  if (containers.empty()) {
    std::fprintf(stderr, "fatbin_archs: %s: .nv_fatbin holds no fatbin container\n", lib.c_str());
    return 1;
  }
  std::printf("%s: expected %s (ARCHS=%s)\n", lib.c_str(), join(want).c_str(), argv[2]);
  int gaps = 0;
  for (size_t i = 0; i < containers.size(); ++i) {
    const Container& c = containers[i];
    std::set<Code> missing;
    for (const Code& w : want)
      if (!c.codes.count(w)) missing.insert(w);
    std::printf("  fatbin %zu of %zu (%llu KiB): %s\n", i + 1, containers.size(),
                static_cast<unsigned long long>(c.bytes >> 10), join(c.codes).c_str());
    if (!missing.empty()) {
      std::printf("  GAP: fatbin %zu of %zu lacks %s\n", i + 1, containers.size(), join(missing).c_str());
      ++gaps;
    }
  }
  if (gaps) {
    std::printf(
        "FAILED: %d of %zu fatbins lack architectures this build was configured with: GPUs of those "
        "architectures would JIT-compile the kernels at NCCL init, or fail to run them\n",
        gaps, containers.size());
    return 1;
  }
  std::printf("OK: every fatbin has %s\n", join(want).c_str());
  return 0;
}
