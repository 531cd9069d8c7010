#include "core/cpu.h"

#include <pthread.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

static struct core_cpu s_cpu;
static pthread_once_t s_once = PTHREAD_ONCE_INIT;

/* The builtin answers for the features with OS state (it checks XGETBV);
 * F16C, BMI2 and VBMI2 come from cpuid, which clang's builtin does not name. */
static void
s_probe(void)
{
#if defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    __builtin_cpu_init();
    s_cpu.sse42 = __builtin_cpu_supports("sse4.2");
    s_cpu.avx2_fma =
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    s_cpu.f16c = __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u);
    bool leaf7 = __get_cpuid_count(7, 0, &a, &b, &c, &d);
    s_cpu.bmi2 = leaf7 && (b >> 8 & 1u);
    s_cpu.vbmi2 = leaf7 && (c >> 6 & 1u);
    s_cpu.avx512 = __builtin_cpu_supports("avx512f") &&
                   __builtin_cpu_supports("avx512vl") &&
                   __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512dq");
#endif
}

const struct core_cpu *
core_cpu(void)
{
    pthread_once(&s_once, s_probe);
    return &s_cpu;
}
