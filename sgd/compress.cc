// Compressors (compress.h): size checks and the choice of kernel; the arithmetic is in
// cpu/compress_kernels.cc, one copy per instruction-set level.
#include "sgd/compress.h"

#include <bit>
#include <cstring>
#include <string>

#include "common/check.h"
#include "sgd/cpu/compress_kernels.h"

namespace gossip::sgd {

static_assert(std::endian::native == std::endian::little,
              "the wire formats of compress.h are little-endian; a big-endian build would need "
              "byte swaps in cpu/compress_kernels.cc");

namespace {

void check_spec(const CompressionSpec& spec) {
  const Status s = spec.validate();
  GOSSIP_CHECK(s.is_ok()) << s.to_string();
}

}  // namespace

Status CompressionSpec::validate() const {
  if (kind != CompressionKind::kNone && kind != CompressionKind::kBf16 &&
      kind != CompressionKind::kInt8) {
    return invalid_argument("compression.kind: expected " + kCompressionKinds.choices());
  }
  if (block_floats < kMinBlockFloats || block_floats > kMaxBlockFloats ||
      !std::has_single_bit(block_floats)) {
    return invalid_argument(
        "compression.block_floats: must be a power of two in [" + std::to_string(kMinBlockFloats) +
        ", " + std::to_string(kMaxBlockFloats) + "], got " + std::to_string(block_floats));
  }
  return Status::ok();
}

std::size_t compressed_bytes(const CompressionSpec& spec, std::size_t num_floats) {
  switch (spec.kind) {
    case CompressionKind::kNone:
      return 4 * num_floats;
    case CompressionKind::kBf16:
      return 2 * num_floats;
    case CompressionKind::kInt8:
      return num_floats + 4 * ((num_floats + spec.block_floats - 1) / spec.block_floats);
  }
  GOSSIP_CHECK(false) << "compression kind " << static_cast<int>(spec.kind);
  return 0;
}

std::size_t gossip_message_bytes(const CompressionSpec& spec, std::size_t num_floats) {
  return 4 * ((compressed_bytes(spec, num_floats) + 3) / 4);
}

void compress(const CompressionSpec& spec, std::span<const float> in, std::span<std::byte> out) {
  check_spec(spec);
  GOSSIP_CHECK_EQ(out.size(), compressed_bytes(spec, in.size()));
  switch (spec.kind) {
    case CompressionKind::kNone:
      if (!in.empty()) std::memcpy(out.data(), in.data(), out.size());
      return;
    case CompressionKind::kBf16:
      return GOSSIP_ISA_PICK(gossip::sgd::cpu, encode_bf16)(cpu::EncodeMode::kPlain, in.data(),
                                                            nullptr, in.size(), out.data());
    case CompressionKind::kInt8:
      return GOSSIP_ISA_PICK(gossip::sgd::cpu, encode_int8)(
          cpu::EncodeMode::kPlain, in.data(), nullptr, in.size(), spec.block_floats, out.data());
  }
}

void decompress(const CompressionSpec& spec, std::span<const std::byte> in, std::span<float> out) {
  check_spec(spec);
  GOSSIP_CHECK_EQ(in.size(), compressed_bytes(spec, out.size()));
  switch (spec.kind) {
    case CompressionKind::kNone:
      if (!out.empty()) std::memcpy(out.data(), in.data(), in.size());
      return;
    case CompressionKind::kBf16:
      return GOSSIP_ISA_PICK(gossip::sgd::cpu, decode_bf16)(in.data(), out.size(), out.data(),
                                                            false);
    case CompressionKind::kInt8:
      return GOSSIP_ISA_PICK(gossip::sgd::cpu, decode_int8)(in.data(), out.size(),
                                                            spec.block_floats, out.data(), false);
  }
}

void decompress_add(const CompressionSpec& spec, std::span<const std::byte> in,
                    std::span<float> out) {
  check_spec(spec);
  GOSSIP_CHECK_EQ(in.size(), compressed_bytes(spec, out.size()));
  switch (spec.kind) {
    case CompressionKind::kNone:
      for (std::size_t k = 0; k < out.size(); ++k) {
        float d;
        std::memcpy(&d, in.data() + 4 * k, sizeof d);
        out[k] = out[k] + d;
      }
      return;
    case CompressionKind::kBf16:
      return GOSSIP_ISA_PICK(gossip::sgd::cpu, decode_bf16)(in.data(), out.size(), out.data(),
                                                            true);
    case CompressionKind::kInt8:
      return GOSSIP_ISA_PICK(gossip::sgd::cpu, decode_int8)(in.data(), out.size(),
                                                            spec.block_floats, out.data(), true);
  }
}

void compress_with_feedback(const CompressionSpec& spec, std::span<const float> x,
                            std::span<float> residual, std::span<std::byte> out) {
  check_spec(spec);
  GOSSIP_CHECK_EQ(residual.size(), x.size());
  GOSSIP_CHECK_EQ(out.size(), compressed_bytes(spec, x.size()));
  switch (spec.kind) {
    case CompressionKind::kNone:
      for (std::size_t k = 0; k < x.size(); ++k) {
        const float v = x[k] + residual[k];
        std::memcpy(out.data() + 4 * k, &v, sizeof v);
        residual[k] = 0.0f;  // v − D(out) = v − v
      }
      return;
    case CompressionKind::kBf16:
      return GOSSIP_ISA_PICK(gossip::sgd::cpu, encode_bf16)(cpu::EncodeMode::kFeedback, x.data(),
                                                            residual.data(), x.size(), out.data());
    case CompressionKind::kInt8:
      return GOSSIP_ISA_PICK(gossip::sgd::cpu, encode_int8)(cpu::EncodeMode::kFeedback, x.data(),
                                                            residual.data(), x.size(),
                                                            spec.block_floats, out.data());
  }
}

}  // namespace gossip::sgd
