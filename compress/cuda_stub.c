/* CPU-only build: the device codecs are not built in (R7.2). */
#include "compress/device.h"

rumor_err
compress_dev_cuda(const struct compress_dev_i **out, const char **why)
{
    *out = NULL;
    *why = "CPU-only build (no CUDA device codecs)";
    return RUMOR_ENOTSUP;
}
