/* The per-thread choice of core/cuda_stream.h: host code, every build. */
#include "core/cuda_stream.h"

static _Thread_local bool s_own;

bool
core_cuda_own_stream(bool on)
{
    bool was = s_own;
    s_own = on;
    return was;
}

bool
core_cuda_own_stream_on(void)
{
    return s_own;
}
