// CRC32C (Castagnoli, the iSCSI/ext4 polynomial) of parameter payloads.
//
// Chosen over zlib's crc32 because x86's SSE4.2 `crc32` instruction computes it at several
// bytes per cycle; three independent lanes hide the instruction's latency (see checksum.cc), so the
// checksum runs at well above loopback TCP speed (bench/net_bench prints both rates). Falls back to
// a table-driven loop where SSE4.2 is absent. Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gossip::net {

// CRC32C of `data[0, num_bytes)`, continuing from `crc` (0 to start): crc32c(AB) ==
// crc32c(B, crc32c(A)). Standard conditioning (init and final xor 0xFFFFFFFF):
// crc32c("123456789") == 0xE3069283.
std::uint32_t crc32c(const void* data, std::size_t num_bytes, std::uint32_t crc = 0);

// The portable table-driven version (the reference the fast path is tested against).
std::uint32_t crc32c_portable(const void* data, std::size_t num_bytes, std::uint32_t crc = 0);

// Whether crc32c() uses the SSE4.2 instruction on this machine.
bool crc32c_hardware();

}  // namespace gossip::net
