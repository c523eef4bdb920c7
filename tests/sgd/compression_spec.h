// The tests' compression settings (sgd/compress.h): a kind and an INT8 block size that validate, or
// the test fails. Header-only; needs doctest.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>

#include "sgd/compress.h"

namespace gossip::sgd {

inline CompressionSpec spec_of(CompressionKind kind, std::size_t block = 16) {
  CompressionSpec s;
  s.kind = kind;
  s.block_floats = block;
  REQUIRE(s.validate().is_ok());
  return s;
}

}  // namespace gossip::sgd
