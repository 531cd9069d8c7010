/*
 * Private to gossip/: where a model's tensors live (issue #31). An
 * algorithm that keeps its state where the model is (the `device` flag of
 * its gossip_algo_i) reaches the tensors, and allocates model-sized state,
 * only through this table: host memory on the CPU, CUDA memory on a GPU
 * (gossip/mem_cuda.cu). What crosses between the two is counted, so the
 * metrics can show that only payloads do.
 *
 * gossip_mem_ref is host memory that the code treats as a device's: every
 * access goes through the table and is counted. The CPU tests run the
 * device path on it and compare it, bit for bit, with the host path.
 */
#ifndef RUMOR_GOSSIP_MEM_H
#define RUMOR_GOSSIP_MEM_H

#include "rumor/core.h"

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum gossip_copy {
    GOSSIP_TO_DEVICE, /* host -> model memory */
    GOSSIP_TO_HOST,   /* model memory -> host */
    GOSSIP_ON_DEVICE  /* model memory -> model memory */
};

struct gossip_mem_i {
    const char *name;
    /* Host code may read and write the memory directly. */
    bool host_memory;
    /* The low-rank products run on the CUDA backend (the memory is
     * CUDA's). */
    bool cuda;
    /* bytes of model memory (zeroed) into *out; RUMOR_ENOMEM or
     * RUMOR_EBACKEND (logged). */
    rumor_err (*alloc)(size_t bytes, void **out);
    void (*release)(void *p); /* NULL is ignored */
    rumor_err (*copy)(void *dst,
                      const void *src,
                      size_t bytes,
                      enum gossip_copy kind);
};

extern const struct gossip_mem_i gossip_mem_host;
extern const struct gossip_mem_i gossip_mem_ref;

/* The CUDA table; RUMOR_ENOTSUP with *why in CPU-only builds or without a
 * usable GPU. */
rumor_err gossip_mem_cuda(const struct gossip_mem_i **out, const char **why);

#ifdef __cplusplus
}
#endif

#endif
