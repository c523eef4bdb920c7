// Helpers shared by the CoalescingStream tests (coalescing_stream_test.cc on plain TCP,
// coalescing_stream_tls_test.cc with TLS over it): seeded byte patterns and a connected pair of
// loopback sockets.
#pragma once

#include <asio.hpp>
#include <cstdint>
#include <random>
#include <vector>

namespace gossip::net::testing {

inline std::vector<std::uint8_t> pattern(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<std::uint8_t>(rng());
  return v;
}

// Connects `a` (a CoalescingStream's socket or a plain socket) to `b` over loopback.
inline void connect_pair(asio::io_context& io, asio::ip::tcp::socket& a, asio::ip::tcp::socket& b) {
  asio::ip::tcp::acceptor acc(io, {asio::ip::address_v4::loopback(), 0});
  a.connect(acc.local_endpoint());
  acc.accept(b);
}

}  // namespace gossip::net::testing
