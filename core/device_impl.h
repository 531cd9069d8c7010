/* Private to core: the CUDA probe, defined by device_cuda.cu in CUDA builds
 * and by device_cuda_stub.c otherwise, so the symbols exist exactly once. */
#ifndef RUMOR_CORE_DEVICE_IMPL_H
#define RUMOR_CORE_DEVICE_IMPL_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

extern const bool core_cuda_built;

/* Returns the number of usable devices; when 0, *reason says why. */
int core_cuda_probe(const char **reason);

#ifdef __cplusplus
}
#endif

#endif
