// Opens the instruction-set region of a kernel translation unit (common/isa.h). Include it after
// every other header; close with common/isa_kernel_end.h. CMake (gossip_isa_sources) compiles the
// unit once per level with exactly one of GOSSIP_ISA_AVX512, GOSSIP_ISA_AVX2, GOSSIP_ISA_PORTABLE
// defined. Inside the region:
//   GOSSIP_ISA_NS     the level's namespace name (avx512, avx2, portable): put every definition in
//                     it, so the three copies of a function are three symbols;
//   GOSSIP_ISA_LEVEL  2, 1 or 0.
// Functions defined in the region are compiled for the level (a pragma, not a command-line flag):
// templates defined in the headers above (the standard library, Eigen) keep the baseline target,
// so their out-of-line copies, which the linker merges across units, never hold AVX code.
// No include guard: once per unit.
#if defined(GOSSIP_ISA_AVX512)
#define GOSSIP_ISA_NS avx512
#define GOSSIP_ISA_LEVEL 2
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#endif
#elif defined(GOSSIP_ISA_AVX2)
#define GOSSIP_ISA_NS avx2
#define GOSSIP_ISA_LEVEL 1
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
#elif defined(GOSSIP_ISA_PORTABLE)
#define GOSSIP_ISA_NS portable
#define GOSSIP_ISA_LEVEL 0
#else
#error "a kernel unit is compiled through gossip_isa_sources (one GOSSIP_ISA_* defined)"
#endif
