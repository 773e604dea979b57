// Uses both installed targets: round-trips a bf16 buffer through zipccl::codec and validates a
// layout with zipccl::hetero. Exit status 0 only if both work.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "zipccl/codec.h"
#include "zipccl/hetero/hetero.h"

int main() {
  namespace codec = zipccl::codec;
  std::vector<uint16_t> src(1 << 16);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(0x3f00 | ((i * 2654435761u) >> 24));
  const size_t n = src.size() * sizeof(uint16_t);
  std::vector<uint8_t> frame(codec::max_encoded_size(n));
  size_t frame_size = 0;
  codec::EncodeOptions eo;
  eo.type = codec::ElemType::kBf16;
  if (codec::encode(src.data(), n, frame.data(), frame.size(), &frame_size, eo) != codec::Status::kOk) {
    std::fprintf(stderr, "encode failed\n");
    return 1;
  }
  std::vector<uint16_t> back(src.size());
  size_t back_size = 0;
  if (codec::decode(frame.data(), frame_size, back.data(), n, &back_size) != codec::Status::kOk ||
      back_size != n || std::memcmp(back.data(), src.data(), n) != 0) {
    std::fprintf(stderr, "round trip failed\n");
    return 1;
  }

  zipccl::hetero::LayoutSpec spec;
  spec.world_size = 8;
  spec.llm.tp = 4;
  zipccl::hetero::ModuleSpec enc;
  enc.tp = 2;
  spec.encoders.push_back(enc);
  zipccl::hetero::Layout layout(spec);
  std::printf("codec: %zu -> %zu bytes; hetero: %d modules, llm dp=%d, encoder dp=%d\n", n, frame_size,
              static_cast<int>(layout.modules().size()), layout.llm().dp(), layout.encoder(0).dp());
  return layout.llm().dp() == 2 && layout.encoder(0).dp() == 4 ? 0 : 1;
}
