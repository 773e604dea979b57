#include "entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace zipccl {
namespace tools {

using codec::ElemType;

double order0_entropy(const uint64_t* hist256, uint64_t total) {
  if (total == 0) return 0;
  // H = log2(N) - sum(c log2 c) / N: one log per non-empty bin.
  double sum = 0;
  for (int i = 0; i < 256; ++i) {
    if (hist256[i] != 0) {
      double c = static_cast<double>(hist256[i]);
      sum += c * std::log2(c);
    }
  }
  double n = static_cast<double>(total);
  double h = std::log2(n) - sum / n;
  return h < 0 ? 0 : h;  // rounding can leave -1e-16 for a constant input
}

double byte_entropy(const uint8_t* src, size_t n) {
  uint64_t hist[256] = {};
  for (size_t i = 0; i < n; ++i) ++hist[src[i]];
  return order0_entropy(hist, n);
}

int plane_count(ElemType t) {
  switch (t) {
    case ElemType::kBf16:
    case ElemType::kFp16:
      return 2;
    case ElemType::kFp32:
      return 4;
    case ElemType::kNone:
      return 1;
    default:
      return 0;
  }
}

static size_t bytes_per_elem(ElemType t) {
  switch (t) {
    case ElemType::kBf16:
    case ElemType::kFp16:
      return 2;
    case ElemType::kFp32:
      return 4;
    default:
      return 1;
  }
}

void plane_symbols(ElemType t, const uint8_t* src, uint8_t* sym) {
  switch (t) {
    case ElemType::kBf16:
    case ElemType::kFp16: {
      uint32_t v = src[0] | (uint32_t{src[1]} << 8);
      sym[0] = static_cast<uint8_t>(v >> 7);
      sym[1] = static_cast<uint8_t>(((v >> 8) & 0x80) | (v & 0x7F));
      break;
    }
    case ElemType::kFp32: {
      uint32_t v = src[0] | (uint32_t{src[1]} << 8) | (uint32_t{src[2]} << 16) | (uint32_t{src[3]} << 24);
      sym[0] = static_cast<uint8_t>(v >> 23);
      sym[1] = static_cast<uint8_t>(((v >> 24) & 0x80) | ((v >> 16) & 0x7F));
      sym[2] = static_cast<uint8_t>(v >> 8);
      sym[3] = static_cast<uint8_t>(v);
      break;
    }
    default:
      sym[0] = src[0];
  }
}

EntropyBound entropy_bound(const void* src, size_t n, ElemType t, size_t block_elems) {
  EntropyBound b;
  int np = plane_count(t);
  if (np == 0) np = 1, t = ElemType::kNone;
  if (block_elems == 0) block_elems = 4096;
  const size_t es = bytes_per_elem(t);
  b.type = t;
  b.bytes = n;
  b.elems = n / es;
  b.block_elems = block_elems;
  b.planes.resize(np);

  const uint8_t* p = static_cast<const uint8_t*>(src);
  std::vector<uint64_t> whole(256 * np, 0), block(256 * np, 0);
  std::vector<double> block_bits_total(np, 0);  // sum over blocks of elems * H
  uint8_t sym[4];
  for (size_t start = 0; start < b.elems; start += block_elems) {
    size_t count = std::min(block_elems, b.elems - start);
    std::fill(block.begin(), block.end(), 0);
    const uint8_t* e = p + start * es;
    if (np == 1) {
      for (size_t i = 0; i < count; ++i) ++block[e[i]];
    } else {
      for (size_t i = 0; i < count; ++i, e += es) {
        plane_symbols(t, e, sym);
        for (int k = 0; k < np; ++k) ++block[256 * k + sym[k]];
      }
    }
    for (int k = 0; k < np; ++k) {
      const uint64_t* h = &block[256 * k];
      block_bits_total[k] += static_cast<double>(count) * order0_entropy(h, count);
      for (int s = 0; s < 256; ++s) whole[256 * k + s] += h[s];
    }
  }

  double whole_sum = 0, block_sum = 0;
  for (int k = 0; k < np; ++k) {
    PlaneEntropy& pe = b.planes[k];
    pe.whole_bits = order0_entropy(&whole[256 * k], b.elems);
    pe.block_bits = b.elems ? block_bits_total[k] / static_cast<double>(b.elems) : 0;
    whole_sum += pe.whole_bits;
    block_sum += pe.block_bits;
  }
  const double tail_bits = 8.0 * static_cast<double>(n - b.elems * es);
  const double in_bits = 8.0 * static_cast<double>(n);
  const double elems = static_cast<double>(b.elems);
  auto ratio = [&](double bits_per_elem) {
    if (n == 0) return 1.0;
    double out_bits = bits_per_elem * elems + tail_bits;
    return out_bits > 0 ? in_bits / out_bits : std::numeric_limits<double>::infinity();
  };
  b.whole_ratio = ratio(whole_sum);
  b.block_ratio = ratio(block_sum);
  return b;
}

}  // namespace tools
}  // namespace zipccl
