// libFuzzer entry point for every decoder entry point: read_frame_info and decode, with output
// buffers of the claimed size and smaller, on the SIMD and scalar paths. Inputs that decode must
// re-encode and decode to the same bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "zipccl/codec.h"

using namespace zipccl::codec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FrameInfo info;
  if (read_frame_info(data, size, &info) != Status::kOk) return 0;
  if (info.original_size > (64u << 20)) return 0;
  const size_t n = size_t(info.original_size);
  std::vector<uint8_t> out(n), out2(n);
  for (bool scalar : {false, true}) {
    DecodeOptions o;
    o.force_scalar = scalar;
    size_t got = 0;
    const Status s = decode(data, size, out.data(), n, &got, o);
    if (n) {
      size_t small;
      if (decode(data, size, out2.data(), n - 1, &small, o) == Status::kOk) std::abort();
    }
    if (s != Status::kOk) continue;
    if (got != n) std::abort();
    std::vector<uint8_t> frame(max_encoded_size(n));
    size_t fsize;
    if (encode(out.data(), n, frame.data(), frame.size(), &fsize) != Status::kOk) std::abort();
    if (decode(frame.data(), fsize, out2.data(), n, &got) != Status::kOk || got != n) std::abort();
    if (n && std::memcmp(out.data(), out2.data(), n)) std::abort();
  }
  return 0;
}
