// libFuzzer entry point for every decoder entry point: read_frame_info and decode, with output
// buffers of the claimed size and smaller. Each input is decoded by the SIMD kernels this CPU picks
// (simd_path()) and by the scalar ones: they must agree on the status and, when it is kOk, on every
// byte, so a SIMD decoder that accepts what the scalar one rejects (or decodes it differently) is a
// crash the fuzzer reports. Inputs that decode must re-encode and decode to the same bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "zipccl/codec.h"

using namespace zipccl::codec;

namespace {

[[noreturn]] void fail(const char* what, Status simd, Status scalar) {
  std::fprintf(stderr, "fuzz_decode: %s (%s: %s, scalar: %s)\n", what, simd_path(), status_string(simd),
               status_string(scalar));
  std::abort();
}

// Decodes with the given kernels into out (the frame's claimed size); checks that one byte less is
// refused and that a kOk decode writes exactly the claimed size.
Status decode_checked(const uint8_t* data, size_t size, std::vector<uint8_t>& out, bool scalar) {
  DecodeOptions o;
  o.force_scalar = scalar;
  const size_t n = out.size();
  size_t got = 0;
  const Status s = decode(data, size, out.data(), n, &got, o);
  if (s == Status::kOk && got != n) fail("decoded size differs from the header's", s, s);
  if (n) {
    std::vector<uint8_t> small(n - 1);
    size_t small_got;
    const Status t = decode(data, size, small.data(), n - 1, &small_got, o);
    if (t == Status::kOk) fail("decoded into a buffer one byte short", t, t);
  }
  return s;
}

}  // namespace

// libFuzzer calls this once: the log says which kernels were compared.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::fprintf(stderr, "fuzz_decode: decoding with the %s kernels and the scalar ones\n", simd_path());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FrameInfo info;
  if (read_frame_info(data, size, &info) != Status::kOk) return 0;
  if (info.original_size > (64u << 20)) return 0;
  const size_t n = size_t(info.original_size);
  std::vector<uint8_t> simd_out(n), scalar_out(n);
  const Status simd = decode_checked(data, size, simd_out, false);
  const Status scalar = decode_checked(data, size, scalar_out, true);
  if (simd != scalar) fail("SIMD and scalar decoders disagree on the status", simd, scalar);
  if (simd != Status::kOk) return 0;
  if (n && std::memcmp(simd_out.data(), scalar_out.data(), n))
    fail("SIMD and scalar decoders disagree on the bytes", simd, scalar);

  std::vector<uint8_t> frame(max_encoded_size(n));
  size_t fsize = 0, got = 0;
  if (encode(simd_out.data(), n, frame.data(), frame.size(), &fsize) != Status::kOk)
    fail("re-encode failed", simd, scalar);
  const Status again = decode(frame.data(), fsize, scalar_out.data(), n, &got);
  if (again != Status::kOk || got != n) fail("re-encoded frame does not decode", again, again);
  if (n && std::memcmp(simd_out.data(), scalar_out.data(), n))
    fail("re-encoded frame decodes differently", again, again);
  return 0;
}
