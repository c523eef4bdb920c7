// The one little-endian codec of the project: fixed-width integers and float32 written to and read
// from byte buffers least significant byte first, at any alignment, whatever the host's byte
// order. Every binary format of ours (net/frame.h's frame header, daemon/checkpoint.h's files,
// attach/protocol.h's messages, topology fingerprints) encodes through here, so their bytes are the
// same on every host.
//
//   put_u32(p, 0x11223344)  ->  p[0..3] = 44 33 22 11
//   get_u32(p)              <-  the same four bytes
//   put_f32(p, x)           ->  the IEEE-754 bits of x as put_u32 writes them
//
// `p` points to at least 2, 4 or 8 bytes of any byte type (char, unsigned char, std::byte,
// std::uint8_t); nothing is checked. Pure functions, thread-safe.
#pragma once

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace gossip {

template <class T>
concept ByteLike = sizeof(T) == 1 && (std::same_as<std::remove_cv_t<T>, char> ||
                                      std::same_as<std::remove_cv_t<T>, unsigned char> ||
                                      std::same_as<std::remove_cv_t<T>, signed char> ||
                                      std::same_as<std::remove_cv_t<T>, std::byte>);

namespace little_endian_detail {

// A shift loop rather than memcpy and a byte swap: it is correct on every host, and compilers turn
// it into one load or store on little-endian ones.
template <std::unsigned_integral U, ByteLike B>
void put(B* p, U v) {
  for (std::size_t i = 0; i < sizeof(U); ++i)
    p[i] = static_cast<B>(static_cast<unsigned char>(v >> (8 * i)));
}

template <std::unsigned_integral U, ByteLike B>
U get(const B* p) {
  U v = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) {
    v |= static_cast<U>(static_cast<U>(static_cast<unsigned char>(p[i])) << (8 * i));
  }
  return v;
}

}  // namespace little_endian_detail

template <ByteLike B>
void put_u16(B* p, std::uint16_t v) {
  little_endian_detail::put(p, v);
}
template <ByteLike B>
void put_u32(B* p, std::uint32_t v) {
  little_endian_detail::put(p, v);
}
template <ByteLike B>
void put_u64(B* p, std::uint64_t v) {
  little_endian_detail::put(p, v);
}
template <ByteLike B>
void put_f32(B* p, float v) {
  little_endian_detail::put(p, std::bit_cast<std::uint32_t>(v));
}

template <ByteLike B>
std::uint16_t get_u16(const B* p) {
  return little_endian_detail::get<std::uint16_t>(p);
}
template <ByteLike B>
std::uint32_t get_u32(const B* p) {
  return little_endian_detail::get<std::uint32_t>(p);
}
template <ByteLike B>
std::uint64_t get_u64(const B* p) {
  return little_endian_detail::get<std::uint64_t>(p);
}
template <ByteLike B>
float get_f32(const B* p) {
  return std::bit_cast<float>(little_endian_detail::get<std::uint32_t>(p));
}

}  // namespace gossip
