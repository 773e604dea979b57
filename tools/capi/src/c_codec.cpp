// The codec behind the C API: streams of frames written straight from the caller's input into the
// caller's output (no staging copy), cut as `zipccl compress` cuts them.
#include <algorithm>
#include <cstdint>

#include "c_status.h"
#include "zipccl/codec.h"
#include "zipccl/zipccl_c.h"

using namespace zipccl;
using capi::fail;
using capi::guarded;

// The layout bindings declare (ctypes.Structure): no padding, the same on every 64- and 32-bit ABI.
static_assert(sizeof(zipccl_frame_info) == 32, "zipccl_frame_info is 32 bytes");

namespace {

// tools/zipccl/frame_stream.h's kDefaultFrameInput: the tool and the Python package write the same bytes.
constexpr size_t kFrameInput = ZIPCCL_FRAME_INPUT;

bool stream_bound(size_t n, size_t* bound) {
  const size_t full = n / kFrameInput, rest = n % kFrameInput;
  size_t total = 0;
  if (__builtin_mul_overflow(full, codec::max_encoded_size(kFrameInput), &total)) return false;
  if (rest != 0 || n == 0) {
    if (__builtin_add_overflow(total, codec::max_encoded_size(rest), &total)) return false;
  }
  *bound = total;
  return true;
}

// The arguments compress and decompress share: an input, an output, and where its length goes.
int check_buffers(const char* fn, const void* src, size_t n, const void* dst, size_t dst_capacity,
                  size_t* written) {
  if (!written) return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "%s: written is NULL", fn);
  *written = 0;
  if (!src && n != 0) return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "%s: src is NULL with n = %zu", fn, n);
  if (!dst && dst_capacity != 0)
    return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "%s: dst is NULL with dst_capacity = %zu", fn, dst_capacity);
  return ZIPCCL_OK;
}

int isa_of(const char* fn, int isa, codec::Isa* out) {
  switch (isa) {
    case ZIPCCL_ISA_AUTO:
      *out = codec::Isa::kAuto;
      return ZIPCCL_OK;
    case ZIPCCL_ISA_SCALAR:
      *out = codec::Isa::kScalar;
      return ZIPCCL_OK;
    case ZIPCCL_ISA_AVX2:
      *out = codec::Isa::kAvx2;
      return ZIPCCL_OK;
    case ZIPCCL_ISA_AVX512:
      *out = codec::Isa::kAvx512;
      return ZIPCCL_OK;
    case ZIPCCL_ISA_NEON:
      *out = codec::Isa::kNeon;
      return ZIPCCL_OK;
  }
  return fail(ZIPCCL_ERR_INVALID_ARGUMENT,
              "%s: isa must be ZIPCCL_ISA_AUTO (0), SCALAR (1), AVX2 (2), AVX512 (3) or NEON (4), not %d", fn,
              isa);
}

// Walks the frame headers of src[0, n), calling visit(index, offset, info) for each; the headers are
// validated and every frame lies inside the input.
template <class Visit>
int walk(const char* fn, const uint8_t* src, size_t n, Visit&& visit) {
  if (n == 0) return fail(ZIPCCL_ERR_TRUNCATED, "%s: an empty input is not a zipccl stream", fn);
  size_t off = 0, index = 0;
  while (off < n) {
    codec::FrameInfo info{};
    const codec::Status st = codec::read_frame_info(src + off, n - off, &info);
    if (st != codec::Status::kOk)
      return fail(capi::status_code(st), "%s: frame %zu at byte %zu: %s", fn, index, off,
                  codec::status_string(st));
    if (info.frame_size == 0 || info.frame_size > n - off)
      return fail(ZIPCCL_ERR_TRUNCATED, "%s: frame %zu at byte %zu: %s (it says %llu bytes, %zu are left)",
                  fn, index, off, codec::status_string(codec::Status::kTruncated),
                  static_cast<unsigned long long>(info.frame_size), n - off);
    const int rc = visit(index, off, info);
    if (rc != ZIPCCL_OK) return rc;
    off += static_cast<size_t>(info.frame_size);
    ++index;
  }
  return ZIPCCL_OK;
}

}  // namespace

extern "C" {

int zipccl_max_compressed_size(size_t n, size_t* bound) {
  return guarded("max_compressed_size", [&]() -> int {
    if (!bound) return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "max_compressed_size: bound is NULL");
    if (!stream_bound(n, bound))
      return fail(ZIPCCL_ERR_TOO_LARGE, "max_compressed_size: the bound of %zu bytes does not fit a size_t",
                  n);
    return ZIPCCL_OK;
  });
}

int zipccl_compress(const void* src, size_t n, void* dst, size_t dst_capacity, size_t* written, int elem_type,
                    int block_log2, int threads, int isa) {
  return guarded("compress", [&]() -> int {
    int rc = check_buffers("compress", src, n, dst, dst_capacity, written);
    if (rc != ZIPCCL_OK) return rc;
    codec::EncodeOptions opt;
    rc = capi::elem_type_of("compress", elem_type, &opt.type);
    if (rc == ZIPCCL_OK) rc = capi::check_threads("compress", threads);
    if (rc == ZIPCCL_OK) rc = isa_of("compress", isa, &opt.isa);
    if (rc != ZIPCCL_OK) return rc;
    if (block_log2 != 0 && (block_log2 < 10 || block_log2 > 14))
      return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "compress: block_log2 must be 0 (default) or 10..14, not %d",
                  block_log2);
    opt.block_log2 = block_log2;
    opt.threads = threads;
    const uint8_t* in = static_cast<const uint8_t*>(src);
    uint8_t* out = static_cast<uint8_t*>(dst);
    size_t done = 0, off = 0;
    do {
      const size_t len = std::min(kFrameInput, n - off);
      size_t frame = 0;
      // A null dst only with capacity 0: hand the codec a valid pointer, it writes nothing past 0 bytes.
      uint8_t empty = 0;
      const codec::Status st = codec::encode(in ? in + off : &empty, len, out ? out + done : &empty,
                                             dst_capacity - done, &frame, opt);
      if (st == codec::Status::kDstTooSmall) {
        size_t bound = 0;
        stream_bound(n, &bound);
        return fail(
            ZIPCCL_ERR_BUFFER_TOO_SMALL,
            "compress: dst_capacity %zu is too small: the frame of input byte %zu does not fit the %zu bytes "
            "left (max_compressed_size(%zu) = %zu)",
            dst_capacity, off, dst_capacity - done, n, bound);
      }
      if (st != codec::Status::kOk)
        return fail(capi::status_code(st), "compress: input byte %zu: %s", off, codec::status_string(st));
      done += frame;
      off += len;
    } while (off < n);
    *written = done;
    return ZIPCCL_OK;
  });
}

int zipccl_frames(const void* src, size_t n, zipccl_frame_info* frames, size_t capacity, size_t* count,
                  size_t* decoded_size) {
  return guarded("frames", [&]() -> int {
    if (!count) return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "frames: count is NULL");
    if (!src && n != 0) return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "frames: src is NULL with n = %zu", n);
    if (!frames && capacity != 0)
      return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "frames: frames is NULL with capacity = %zu", capacity);
    size_t total = 0, seen = 0;
    const int rc = walk(
        "frames", static_cast<const uint8_t*>(src), n,
        [&](size_t i, size_t off, const codec::FrameInfo& f) -> int {
          if (__builtin_add_overflow(total, f.original_size, &total))
            return fail(ZIPCCL_ERR_TOO_LARGE,
                        "frames: frame %zu at byte %zu: the stream decodes to more than a size_t", i, off);
          if (i < capacity) {
            zipccl_frame_info& o = frames[i];
            o.kind = static_cast<int32_t>(f.kind);
            o.elem_type = static_cast<int32_t>(f.type);
            o.original_size = f.original_size;
            o.frame_size = f.frame_size;
            o.num_blocks = f.num_blocks;
            o.block_elems = f.block_elems;
          }
          seen = i + 1;
          return ZIPCCL_OK;
        });
    if (rc != ZIPCCL_OK) return rc;
    *count = seen;
    if (decoded_size) *decoded_size = total;
    return ZIPCCL_OK;
  });
}

int zipccl_decompress(const void* src, size_t n, void* dst, size_t dst_capacity, size_t* written, int threads,
                      int isa) {
  return guarded("decompress", [&]() -> int {
    int rc = check_buffers("decompress", src, n, dst, dst_capacity, written);
    if (rc != ZIPCCL_OK) return rc;
    codec::DecodeOptions opt;
    rc = capi::check_threads("decompress", threads);
    if (rc == ZIPCCL_OK) rc = isa_of("decompress", isa, &opt.isa);
    if (rc != ZIPCCL_OK) return rc;
    opt.threads = threads;
    const uint8_t* in = static_cast<const uint8_t*>(src);
    // First the headers (cheap: one per 8 MiB), so that a stream too big for dst writes nothing.
    uint64_t total = 0;
    rc = walk("decompress", in, n, [&](size_t, size_t, const codec::FrameInfo& f) -> int {
      if (__builtin_add_overflow(total, f.original_size, &total))
        return fail(ZIPCCL_ERR_TOO_LARGE, "decompress: the stream decodes to more than 2^64 bytes");
      return ZIPCCL_OK;
    });
    if (rc != ZIPCCL_OK) return rc;
    if (total > dst_capacity)
      return fail(ZIPCCL_ERR_BUFFER_TOO_SMALL,
                  "decompress: the stream decodes to %llu bytes; dst_capacity is %zu",
                  static_cast<unsigned long long>(total), dst_capacity);
    uint8_t* out = static_cast<uint8_t*>(dst);
    size_t out_off = 0;
    rc = walk("decompress", in, n, [&](size_t i, size_t off, const codec::FrameInfo& f) -> int {
      size_t got = 0;
      uint8_t empty = 0;
      codec::Status st = codec::decode(in + off, static_cast<size_t>(f.frame_size),
                                       out ? out + out_off : &empty, dst_capacity - out_off, &got, opt);
      if (st == codec::Status::kOk && got != f.original_size) st = codec::Status::kCorrupt;
      if (st != codec::Status::kOk)
        return fail(capi::status_code(st), "decompress: frame %zu at byte %zu: %s", i, off,
                    codec::status_string(st));
      out_off += got;
      return ZIPCCL_OK;
    });
    if (rc != ZIPCCL_OK) return rc;
    *written = out_off;
    return ZIPCCL_OK;
  });
}

}  // extern "C"
