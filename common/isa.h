// The instruction-set level at which the hand-vectorised kernels run (docs/design.md §6). One
// binary carries every level its architecture has and picks one per process:
//
//   avx512    x86-64 with AVX-512F, AVX2 and FMA (Skylake-SP, Ice Lake, Zen 4, ...)
//   avx2      x86-64 with AVX2 and FMA (Haswell and later, Zen 1-3)
//   portable  plain C++ (any x86-64; the only level on other architectures, e.g. aarch64)
//
// The level is the best one this CPU and OS support, unless the environment variable GOSSIP_CPU
// names another (avx512 | avx2 | portable); a level the CPU lacks, or an unknown name, is an
// error. Every level computes the same operations in the same order (each float result is a chain
// of fused multiply-adds written out by the kernel), so the level changes speed, not bits — the
// exception being the C library's exp/log in the loss, which are the same on one machine.
//
// Kernel translation units are compiled once per level (CMake: gossip_isa_sources) inside a
// target region opened by common/isa_kernel_begin.h; callers reach them through a table picked
// with isa_pick().
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace gossip {

enum class Isa { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };

std::string_view isa_name(Isa isa);
// "avx512", "avx2" or "portable" (exactly; no case folding).
Result<Isa> parse_isa(std::string_view name);

// Whether this CPU (and the OS, for the register state) can run `isa`.
bool isa_supported(Isa isa);
// The best level isa_supported() accepts.
Isa detected_isa();

// The level GOSSIP_CPU asks for, checked against this CPU: `value` is the variable's text (null:
// unset, the detected level). Errors name the variable, the value and the levels this CPU has.
Result<Isa> isa_from_env(const char* value);

// The level the kernels use. Fixed at the first call from GOSSIP_CPU (a bad value is fatal there:
// call init_isa() first in a main() to report it cleanly). Thread-safe.
Isa active_isa();
// Reads GOSSIP_CPU; the error of isa_from_env, for a main() to print before doing anything else.
Status init_isa();
// Sets the active level (tests and benchmarks comparing the paths in one process); refuses a level
// this CPU lacks. Not for use while kernels run on other threads.
Status set_active_isa(Isa isa);

// One line for --version and start-up logs, e.g. "cpu kernels: avx2 (GOSSIP_CPU; this CPU has
// avx512)" or "cpu kernels: avx512 (detected)".
std::string isa_description();

// The entry of a per-level table for the active level: `portable`, `avx2` and `avx512` are the
// same function compiled for each level (the x86 ones are absent on other architectures).
template <typename Fn>
Fn isa_pick(Fn portable, [[maybe_unused]] Fn avx2, [[maybe_unused]] Fn avx512) {
  switch (active_isa()) {
    case Isa::kAvx512:
      return avx512;
    case Isa::kAvx2:
      return avx2;
    case Isa::kPortable:
      break;
  }
  return portable;
}

}  // namespace gossip

// GOSSIP_ISA_PICK(ns_prefix, fn): the active level's `ns_prefix::<level>::fn`.
#if defined(__x86_64__)
#define GOSSIP_ISA_PICK(prefix, fn) \
  ::gossip::isa_pick(&prefix::portable::fn, &prefix::avx2::fn, &prefix::avx512::fn)
#define GOSSIP_ISA_DECLARE(declare) declare(portable) declare(avx2) declare(avx512)
#else
#define GOSSIP_ISA_PICK(prefix, fn) \
  ::gossip::isa_pick(&prefix::portable::fn, &prefix::portable::fn, &prefix::portable::fn)
#define GOSSIP_ISA_DECLARE(declare) declare(portable)
#endif
