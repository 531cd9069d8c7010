/*
 * The host's SIMD features, probed once per process for every module that
 * picks a kernel at run time (crc32c, the codecs' AVX2/AVX-512 tiers, the
 * low-rank AVX2 path): one probe, so the modules agree on what the CPU has.
 * gossip/ref.c's element loops are cloned by the compiler instead
 * (target_clones, libgcc's probe): each clone rounds every element alike,
 * so no result depends on which one runs.
 */
#ifndef RUMOR_CORE_CPU_H
#define RUMOR_CORE_CPU_H

#include <stdbool.h>

struct core_cpu {
    bool sse42;    /* the crc32 instruction */
    bool avx2_fma; /* AVX2 and FMA, with the OS saving the YMM state */
    bool f16c;     /* CPUID 1, ECX bit 29 */
    bool bmi2;     /* CPUID 7, EBX bit 8 */
    bool avx512;   /* F, VL, BW and DQ */
    bool vbmi2;    /* CPUID 7, ECX bit 6 (vpcompressw) */
};

/* Thread-safe; the first call probes. */
const struct core_cpu *core_cpu(void);

#endif
