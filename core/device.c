/*
 * Compute device choice. A CUDA build must still run on a machine without a
 * GPU (CI, laptops): the probe asks the CUDA runtime how many devices there
 * are and, when the answer is none, the caller falls back to the CPU path,
 * which carries every feature, with one log line that says why.
 */
#include "rumor/core.h"

#include "core/device_impl.h"

bool
rumor_cuda_built(void)
{
    return core_cuda_built;
}

int
rumor_cuda_device_count(const char **reason)
{
    const char *why = NULL;
    int count = core_cuda_probe(&why);
    if (reason != NULL)
        *reason = count > 0 ? NULL : why;
    return count;
}

rumor_device
rumor_device_select(bool want_cuda)
{
    if (!want_cuda)
        return RUMOR_DEVICE_CPU;
    const char *why = NULL;
    int count = rumor_cuda_device_count(&why);
    if (count > 0)
        return RUMOR_DEVICE_CUDA;
    rumor_log(RUMOR_LOG_INFO,
              "CUDA unavailable (%s); using the CPU backend",
              why);
    return RUMOR_DEVICE_CPU;
}

const char *
rumor_device_name(rumor_device device)
{
    return device == RUMOR_DEVICE_CUDA ? "cuda" : "cpu";
}

const char *
rumor_version(void)
{
    return RUMOR_VERSION_TEXT;
}
