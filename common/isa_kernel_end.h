// Closes the region opened by common/isa_kernel_begin.h.
#if defined(GOSSIP_ISA_AVX512) || defined(GOSSIP_ISA_AVX2)
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
