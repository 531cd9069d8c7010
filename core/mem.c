/*
 * Memory for large streamed buffers (error memories, models, benchmark
 * vectors). Buffers of at least one huge page are 2 MiB aligned and asked
 * for transparent huge pages before the first touch: with 4 KiB pages the
 * hardware prefetcher stops at every page boundary, and one core streams
 * at about 17 GB/s on this project's EPYC against 30-34 GB/s on huge pages
 * (bench/membw.c prints both). Where THP is off ("never") or left to the
 * kernel ("always"), the advice changes nothing, so the call is always
 * safe; the memory is plain malloc-family memory, freed with free().
 */
#include "rumor/core.h"

#include <stdlib.h>
#include <sys/mman.h>

#define MEM_HUGE_PAGE ((size_t)2 << 20) /* x86-64 and arm64 transparent */
#define MEM_ALIGN     64                /* a cache line, and AVX-512 */

void *
rumor_mem_alloc_large(size_t bytes)
{
    bool huge = bytes >= MEM_HUGE_PAGE;
    size_t align = huge ? MEM_HUGE_PAGE : MEM_ALIGN;
    size_t rounded = ((bytes > 0 ? bytes : 1) + align - 1) & ~(align - 1);
    void *mem = NULL;
    if (posix_memalign(&mem, align, rounded) != 0)
        return NULL;
    if (huge)
        (void)madvise(mem, rounded, MADV_HUGEPAGE);
    return mem;
}
