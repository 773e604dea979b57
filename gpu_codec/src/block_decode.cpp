#include <cstring>

#include "block.h"

namespace zipccl {
namespace codec {

using namespace fmt;

namespace {

// Expands a SPARSE plane into out (m bytes): the base everywhere, then the exceptions. Positions
// must ascend strictly and stay below m; an exception equal to the base is invalid.
bool read_sparse(const uint8_t* data, uint32_t k, uint8_t base, uint32_t m, uint8_t* out) {
  std::memset(out, base, m);
  const uint8_t* val = data + 2 * size_t(k);
  uint32_t next = 0;  // smallest position the next exception may have
  for (uint32_t j = 0; j < k; ++j) {
    const uint32_t i = load_le16(data + 2 * size_t(j));
    if (i < next || i >= m || val[j] == base) return false;
    out[i] = val[j];
    next = i + 1;
  }
  return true;
}

}  // namespace

bool decode_block(const Kernels& k, const uint8_t* blk, size_t size, uint32_t m, uint8_t type, int lanes,
                  const uint8_t* readable_end, uint8_t* dst, bool stream_out, Ahead* ahead) {
  alignas(64) uint8_t scratch[4][kMaxBlockElems];
  DecodeTable table[4];
  const uint8_t* plane[4];
  uint8_t mode[4], value[4] = {0};
  uint32_t except[4] = {0};
  uint16_t lane_bytes[4][kMaxLanes];
  size_t stream[4] = {0};
  const int np = type_planes(type);

  if (size < 4 || size > block_bound(m, np)) return false;
  const uint8_t modes = blk[0];
  if (np == 2 && (modes >> 4)) return false;
  size_t pos = 1;
  for (int p = 0; p < np; ++p) {
    mode[p] = (modes >> (2 * p)) & 3;
    if (mode[p] == kPlaneConst) {
      if (pos + 1 > size) return false;
      value[p] = blk[pos++];
    } else if (mode[p] == kPlaneHuff) {
      uint32_t lo, nsym;
      const size_t used = read_huff_desc(blk + pos, size - pos, &lo, &nsym, &table[p], k.table_kind);
      if (!used || pos + used + 2 * size_t(lanes) > size) return false;
      pos += used;
      for (int l = 0; l < lanes; ++l, pos += 2) {
        lane_bytes[p][l] = load_le16(blk + pos);
        stream[p] += lane_bytes[p][l];
      }
    } else if (mode[p] == kPlaneSparse) {
      if (pos + kSparseDescBytes > size) return false;
      value[p] = blk[pos];
      except[p] = load_le16(blk + pos + 1);
      if (except[p] == 0) return false;
      pos += kSparseDescBytes;
    }
  }
  for (; pos & 3; ++pos) {
    if (pos >= size || blk[pos]) return false;
  }
  for (int p = 0; p < np; ++p) {
    size_t bytes = 0;
    if (mode[p] == kPlaneRaw) {
      bytes = m;
      if (pos + bytes > size) return false;
      plane[p] = blk + pos;
    } else if (mode[p] == kPlaneConst) {
      std::memset(scratch[p], value[p], m);
      plane[p] = scratch[p];
    } else if (mode[p] == kPlaneSparse) {
      bytes = sparse_data_bytes(except[p]);
      if (pos + bytes > size || !read_sparse(blk + pos, except[p], value[p], m, scratch[p])) return false;
      plane[p] = scratch[p];
    } else {
      bytes = stream[p];
      if (pos + bytes > size) return false;
      if (!k.huff_decode(blk + pos, lane_bytes[p], lanes, table[p], m, scratch[p], readable_end, ahead))
        return false;
      plane[p] = scratch[p];
    }
    const size_t end = pos + round_up4(bytes);
    if (end > size) return false;
    for (size_t i = pos + bytes; i < end; ++i) {
      if (blk[i]) return false;
    }
    pos = end;
  }
  if (pos != size) return false;
  if (np == 2) {
    (stream_out && k.merge16_stream ? k.merge16_stream : k.merge16)(plane[0], plane[1], m, dst);
  } else {
    k.merge32(plane, m, dst);
  }
  return true;
}

}  // namespace codec
}  // namespace zipccl
