// CHOCO-SGD's edge copies (choco.h). The encoder updates the sender's copy in the same pass that
// writes the message, with the kernel the receiver's decompress_add uses, so both copies round the
// same way.
#include "sgd/choco.h"

#include <cstring>

#include "common/check.h"
#include "sgd/cpu/compress_kernels.h"

namespace gossip::sgd {

void choco_encode(const CompressionSpec& spec, std::span<const float> x, std::span<float> copy,
                  std::span<std::byte> out) {
  const Status s = spec.validate();
  GOSSIP_CHECK(s.is_ok()) << s.to_string();
  GOSSIP_CHECK_EQ(copy.size(), x.size());
  GOSSIP_CHECK_EQ(out.size(), compressed_bytes(spec, x.size()));
  switch (spec.kind) {
    case CompressionKind::kNone:
      for (std::size_t k = 0; k < x.size(); ++k) {
        const float d = x[k] - copy[k];
        std::memcpy(out.data() + 4 * k, &d, sizeof d);
        copy[k] = copy[k] + d;  // decompress_add's none
      }
      return;
    case CompressionKind::kBf16:
      return GOSSIP_ISA_PICK(gossip::sgd::cpu, encode_bf16)(cpu::EncodeMode::kChoco, x.data(),
                                                            copy.data(), x.size(), out.data());
    case CompressionKind::kInt8:
      return GOSSIP_ISA_PICK(gossip::sgd::cpu, encode_int8)(
          cpu::EncodeMode::kChoco, x.data(), copy.data(), x.size(), spec.block_floats, out.data());
  }
}

void choco_decode_apply(const CompressionSpec& spec, std::span<const std::byte> in,
                        std::span<float> copy) {
  decompress_add(spec, in, copy);
}

}  // namespace gossip::sgd
