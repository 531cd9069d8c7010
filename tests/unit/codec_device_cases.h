/*
 * The cases the device codec tests share (test_codec_device_ref.c: the
 * plain-C twins against the CPU codecs; test_codec_device.c: the CUDA
 * kernels against both): every codec the device path has, with buckets
 * and sizes that cross bytes, buckets, the sign's 4096-value chunks,
 * TernGrad clip's 16384-value pieces and the kernels' 256-thread blocks;
 * top-k at ratio 0.95 keeps some of the zeros (s_dev_fill's -0.0), so its
 * ties are broken by index.
 */
#ifndef RUMOR_TESTS_CODEC_DEVICE_CASES_H
#define RUMOR_TESTS_CODEC_DEVICE_CASES_H

#include "rumor/compress.h"
#include "rumor/core.h"

#include <math.h>
#include <stddef.h>

static const char *const s_dev_specs[] = {
    "fp32",
    "fp16",
    "bf16",
    "sign",
    "sign:bucket=100",
    "sign:bucket=13",
    "sign:bucket=4099",
    "sign:bucket=8200",
    "randk:ratio=0.1",
    "randk:ratio=0.05,scale=1",
    "randk:k=7|fp16",
    "randk:ratio=0.2,scale=1|bf16",
    "randk:ratio=0.3|sign:bucket=3",
    "qsgd",
    "qsgd:bits=2,bucket=64",
    "qsgd:bits=8,bucket=100",
    "qsgd:bits=1,bucket=33",
    "qsgd:bits=7,bucket=5000",
    "terngrad",
    "terngrad:bucket=100",
    "terngrad:bucket=7",
    "randk:ratio=0.2|qsgd:bits=3,bucket=16",
    "randk:ratio=0.1,scale=1|terngrad:bucket=9",
    "topk",
    "topk:ratio=0.1",
    "topk:ratio=0.95",
    "topk:k=7|fp16",
    "topk:ratio=0.3|sign:bucket=3",
    "topk:ratio=0.05|qsgd:bits=4,bucket=64",
    "topk:ratio=0.2|terngrad:bucket=9",
    "threshold:t=1",
    "threshold:t=0",
    "threshold:t=1e9",
    "threshold:t=0.5|bf16",
    "threshold:t=2|qsgd:bits=2,bucket=16",
    "qsgd:levels=6",
    "qsgd:levels=1000,bucket=100",
    "qsgd:levels=16777216,bucket=64",
    "qsgd:levels=5,bucket=7",
    "qsgd:bits=4,biased=1",
    "qsgd:levels=6,biased=1,bucket=50",
    "randk:ratio=0.2|qsgd:bits=3,biased=1,bucket=16",
    "topk:ratio=0.1|qsgd:bits=2,biased=1",
    "randk:ratio=0.1|qsgd:levels=5,bucket=7",
    "topk:ratio=0.1|qsgd:levels=12",
    "qsgd:elias=1",
    "qsgd:bits=1,elias=1,bucket=33",
    "qsgd:bits=8,elias=1,bucket=100",
    "qsgd:bits=3,elias=1,biased=1,bucket=9",
    "qsgd:levels=6,code=elias",
    "qsgd:levels=1000,code=elias,bucket=100",
    "qsgd:levels=15,code=elias,bucket=7",
    "qsgd:levels=16777216,code=elias,bucket=64",
    "qsgd:levels=5,code=elias,biased=1,bucket=50",
    "fp8",
    "fp4",
    "fp8:bias=fit",
    "fp4:code=gennorm",
    "fp8:bias=fit,code=gennorm",
    "fp8:bias=real",
    "fp4:bias=real",
    "fp4:bias=real,code=gennorm",
    "natural",
    "randk:ratio=0.1|natural",
    "topk:ratio=0.05|natural",
    "dgc",
    "dgc:ratio=0.01",
    "dgc:ratio=0.3",
    "dgc:ratio=1",
    "dgc:ratio=0.05|fp16",
    "dgc:ratio=0.1|qsgd:bits=3,bucket=32",
    "terngrad:clip=2.5",
    "terngrad:clip=1,bucket=100",
    "terngrad:clip=0.5,bucket=7,share=1",
    "randk:ratio=0.2|terngrad:clip=2,bucket=9",
    "topk:ratio=0.1|terngrad:clip=1.5",
    /* a coded values codec: made after the selection, fp8's decoded on
     * the host */
    "topk:ratio=0.1|fp8",
    "topk:ratio=0.95|fp4:bias=real",
    "threshold:t=1|fp8:bias=fit",
    "dgc:ratio=0.1|fp4",
    "randk:ratio=0.1|fp8",
    "randk:ratio=0.3,scale=1|fp4:code=gennorm",
    "topk|qsgd:bits=4,elias=1",
    "topk:ratio=0.2|qsgd:levels=12,code=elias",
    "randk:ratio=0.1|qsgd:levels=6,code=elias",
    "randk:ratio=0.2|qsgd:bits=3,elias=1,bucket=16",
    "dgc:ratio=0.05|qsgd:levels=5,code=elias,bucket=7",
};

static const size_t s_dev_sizes[] =
    {0, 1, 7, 8, 9, 255, 256, 257, 1000, 4096, 4097, 9001, 70000};

#define S_DEV_NSPECS (sizeof s_dev_specs / sizeof s_dev_specs[0])
#define S_DEV_NSIZES (sizeof s_dev_sizes / sizeof s_dev_sizes[0])

/* Normal values at several scales: fp16 subnormals (1e-6), values past
 * fp16's largest (1e5, saturated), negative zeros, halfway cases of the
 * narrow roundings (1 + 2^-11, 1 + 2^-8). */
static void
s_dev_fill(float *x, size_t n, uint64_t seed)
{
    struct rumor_rng rng;
    rumor_rng_init(&rng, seed, 7);
    for (size_t i = 0; i < n; i++) {
        float v = (float)rumor_rng_normal(&rng);
        if (i % 7 == 3)
            v *= 1e-6f;
        else if (i % 11 == 5)
            v *= 1e5f;
        else if (i % 13 == 6)
            v = -0.0f;
        else if (i % 17 == 2)
            v = i % 2 ? 1.0f + 0x1.0p-11f : -(1.0f + 0x1.0p-8f);
        x[i] = v;
    }
}

#endif /* RUMOR_TESTS_CODEC_DEVICE_CASES_H */
