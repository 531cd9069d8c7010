/* Monotonic clock: deadlines and timings never follow wall-clock jumps. */
#include "rumor/core.h"

#include <time.h>

uint64_t
rumor_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
