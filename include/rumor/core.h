/*
 * core: errors, logging, diagnostics, the counter-based random generator,
 * capped buffers, crc32c, the monotonic clock and the compute device
 * probe. Every other module builds on these.
 *
 * Thread safety: everything here is safe to call from any thread on
 * distinct objects; rumor_log may be called concurrently (one write(2) per
 * line). rumor_log_set_level is meant for start-up.
 * Ownership: objects are owned by the caller; nothing here keeps pointers
 * to caller memory beyond a call, except rumor_buf, which borrows its
 * storage for its lifetime.
 */
#ifndef RUMOR_CORE_H
#define RUMOR_CORE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RUMOR_API __attribute__((visibility("default")))
#define RUMOR_PRINTF(fmt_idx, arg_idx) \
    __attribute__((format(printf, fmt_idx, arg_idx)))
#define RUMOR_NODISCARD __attribute__((warn_unused_result))

/* Defensive branch reachable only through a bug (R4.4): asserts in debug
 * builds, passes the condition through in release builds. */
#ifdef NDEBUG
#define RUMOR_NEVER(x) (x)
#else
#include <assert.h>
#define RUMOR_NEVER(x) (assert(!(x)), (x))
#endif

/* --- errors ------------------------------------------------------------ */

/* Append-only: values are part of the ABI and of log files; never renumber. */
typedef enum rumor_err {
    RUMOR_OK = 0,
    RUMOR_EINVAL = 1,    /* the caller's bug: bad argument or option */
    RUMOR_EPROTO = 2,    /* malformed bytes from a peer or a file */
    RUMOR_EAUTH = 3,     /* CURVE or key rejected */
    RUMOR_ENOTSUP = 4,   /* feature not built in or not available here */
    RUMOR_EBACKEND = 5,  /* BLAS, LAPACK or CUDA failure */
    RUMOR_ETIMEDOUT = 6, /* a deadline passed */
    RUMOR_ENOMEM = 7,    /* allocation failed */
    RUMOR_ENUMERIC = 8,  /* NaN or Inf where finite numbers are required */
    RUMOR_ETOOBIG = 9,   /* a size exceeds its configured cap */
    RUMOR_EIO = 10,      /* file or system I/O failed */
    RUMOR_ENOTFOUND = 11 /* a named thing (file, key, codec) does not exist */
} rumor_err;

#define RUMOR_ERR_COUNT 12

/* Returns a static, never NULL, English description of err (also for
 * values outside the enum, which read "unknown error"). */
RUMOR_API const char *rumor_strerror(rumor_err err);

/* Returns the symbolic name ("RUMOR_EPROTO") of err, or "RUMOR_E?". */
RUMOR_API const char *rumor_errname(rumor_err err);

/* --- diagnostics for parsers of human-written files (R4.7) ------------- */

#define RUMOR_DIAG_TEXT_BYTES 256

/* The transport's framing (net/, docs/protocol.md): every chunk of at most
 * RUMOR_FRAME_CHUNK_MAX payload bytes travels behind one header of
 * RUMOR_FRAME_HEADER_BYTES. Here, below both, so that the simulator
 * (gossip/) counts the bytes net/ puts on the wire without depending on
 * it. */
#define RUMOR_FRAME_HEADER_BYTES 64
#define RUMOR_FRAME_CHUNK_MAX    (1u << 20)

struct rumor_diag {
    char file[RUMOR_DIAG_TEXT_BYTES]; /* source name, "" when not a file */
    int line;                         /* 1-based, 0 when not applicable */
    int col;                          /* 1-based, 0 when not applicable */
    char msg[RUMOR_DIAG_TEXT_BYTES];  /* what is wrong */
};

/* Fills diag (which may be NULL: then nothing happens). */
RUMOR_API void rumor_diag_set(struct rumor_diag *diag,
                              const char *file,
                              int line,
                              int col,
                              const char *fmt,
                              ...) RUMOR_PRINTF(5, 6);

/* Writes "file:line:col: msg" (parts that are unset are left out) into
 * out, truncated to cap bytes including the terminator. */
RUMOR_API void
rumor_diag_format(const struct rumor_diag *diag, char *out, size_t cap);

/* For a failed system call on a file: fills diag with file = path and
 * msg = "<what>: <strerror(errno)> (<ENAME>)", e.g. "cannot open for
 * writing: Too many open files (EMFILE)", and returns RUMOR_EIO. Reads
 * errno first, so call it right after the failing call. */
RUMOR_API rumor_err rumor_diag_errno(struct rumor_diag *diag,
                                     const char *path,
                                     const char *what);

/* The symbolic name of an errno value ("ENOSPC"), or "errno N" in buf
 * (which must hold 16 bytes) for one not in the table. */
RUMOR_API const char *rumor_errno_name(int err, char buf[16]);

/* Copies len bytes of in to out (cap bytes, always terminated, truncated
 * at a whole escape) with every control byte, DEL, C1 control and byte
 * that is not part of valid UTF-8 written as \xNN, so that text quoted
 * from a file or a peer cannot drive a terminal. Returns the bytes
 * written, the terminator excluded. rumor_diag_set and rumor_log pass
 * everything they write through it. */
RUMOR_API size_t rumor_escape(char *out,
                              size_t cap,
                              const char *in,
                              size_t len);

/* --- logging ----------------------------------------------------------- */

typedef enum rumor_log_level {
    RUMOR_LOG_ERROR = 0,
    RUMOR_LOG_WARN = 1,
    RUMOR_LOG_INFO = 2,
    RUMOR_LOG_DEBUG = 3
} rumor_log_level;

/* Lines at or below level are written to stderr (default: INFO). */
RUMOR_API void rumor_log_set_level(rumor_log_level level);

/* Parses "error", "warn", "info" or "debug"; RUMOR_EINVAL otherwise. */
RUMOR_API rumor_err rumor_log_parse_level(const char *name,
                                          rumor_log_level *out);

/* Sets a prefix (e.g. "node 3") written on every line; copied. */
RUMOR_API void rumor_log_set_prefix(const char *prefix);

/* Writes one line "LEVEL [prefix] message" to stderr with one write(2). */
RUMOR_API void rumor_log(rumor_log_level level, const char *fmt, ...)
    RUMOR_PRINTF(2, 3);

/* As rumor_log, for lines a peer can provoke at will (a refused
 * handshake): of the lines with the same key (e.g. reason and peer
 * address) one is written per interval_ms, and the next one written says
 * how many were held back: "... (and 1234 more like it in the last 10 s)".
 * Lines held back when no further one comes are written by
 * rumor_log_limited_flush once their interval has passed. A bounded table
 * of keys (when it is full, the keys left over share one slot). */
RUMOR_API void rumor_log_limited(rumor_log_level level,
                                 const char *key,
                                 uint32_t interval_ms,
                                 const char *fmt,
                                 ...) RUMOR_PRINTF(4, 5);

/* Writes the held-back count of every key whose interval has passed; cheap
 * when there is none (an event loop may call it on every wake-up). */
RUMOR_API void rumor_log_limited_flush(void);

/* --- counter-based random numbers -------------------------------------- */

/*
 * Philox4x32-10 (Salmon et al., SC 2011). A stream is (seed, stream id);
 * element i of a stream is a pure function of (seed, stream, i), so two
 * peers holding the same seed draw identical numbers without talking,
 * and any element can be computed independently (vectorisable, parallel).
 */
RUMOR_API void rumor_philox4x32_10(const uint32_t ctr[4],
                                   const uint32_t key[2],
                                   uint32_t out[4]);

struct rumor_rng {
    uint64_t seed;   /* becomes the Philox key */
    uint64_t stream; /* upper half of the Philox counter */
    uint64_t index;  /* next 32-bit word to hand out */
    uint32_t block[4];
    uint64_t block_at; /* index of block[0], or UINT64_MAX when empty */
};

/* Starts the stream (seed, stream) at element 0. */
RUMOR_API void
rumor_rng_init(struct rumor_rng *rng, uint64_t seed, uint64_t stream);

RUMOR_API uint32_t rumor_rng_u32(struct rumor_rng *rng);
RUMOR_API uint64_t rumor_rng_u64(struct rumor_rng *rng);

/* Uniform in [0, 1) with 24 random bits (float) / 53 bits (double). */
RUMOR_API float rumor_rng_uniform(struct rumor_rng *rng);
RUMOR_API double rumor_rng_uniform_double(struct rumor_rng *rng);

/* Uniform integer in [0, bound) without modulo bias; bound > 0. */
RUMOR_API uint32_t rumor_rng_below(struct rumor_rng *rng, uint32_t bound);

/* Standard normal (Box-Muller on two uniforms). */
RUMOR_API double rumor_rng_normal(struct rumor_rng *rng);

/* Fills out[0..n) with elements [index, index + n) of the stream as
 * uniform floats in [0, 1), without touching any rng state. */
RUMOR_API void rumor_rng_fill_uniform(uint64_t seed,
                                      uint64_t stream,
                                      uint64_t index,
                                      float *out,
                                      size_t n);

/* Derives a seed for a sub-purpose (e.g. an edge (i, j)) from a run seed,
 * so that unrelated consumers never share a stream by accident. */
RUMOR_API uint64_t rumor_seed_derive(uint64_t seed, uint64_t a, uint64_t b);

/* --- buffers with a hard cap (R5.5) ------------------------------------ */

/* A growable byte buffer that refuses to grow past cap. */
typedef struct rumor_buf {
    uint8_t *data; /* owned */
    size_t len;    /* bytes in use */
    size_t alloc;  /* bytes allocated */
    size_t cap;    /* the most bytes it may ever hold */
} rumor_buf;

/* Starts an empty buffer; allocates nothing. */
RUMOR_API void rumor_buf_init(rumor_buf *buf, size_t cap);

/* Makes room for extra more bytes: RUMOR_ETOOBIG past cap, RUMOR_ENOMEM. */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_buf_reserve(rumor_buf *buf,
                                                      size_t extra);

/* Appends n bytes of src (src may be NULL only when n == 0). */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_buf_append(rumor_buf *buf,
                                                     const void *src,
                                                     size_t n);

/* Empties the buffer, keeping its allocation. */
RUMOR_API void rumor_buf_reset(rumor_buf *buf);

/* Frees the storage; the buffer may be reused after rumor_buf_init. */
RUMOR_API void rumor_buf_free(rumor_buf *buf);

/* Reads a whole file into buf; RUMOR_ETOOBIG when it is larger than the
 * buffer's cap, RUMOR_ENOTFOUND / RUMOR_EIO on system errors (errno then
 * says which, for rumor_diag_errno). */
RUMOR_API RUMOR_NODISCARD rumor_err rumor_buf_read_file(rumor_buf *buf,
                                                        const char *path);

/* --- large buffers ------------------------------------------------------ */

/* Uninitialised memory for a buffer that kernels stream through: 64-byte
 * aligned, and from 2 MiB on 2 MiB aligned with transparent huge pages
 * asked for (one core streams about twice as fast on them). NULL when out
 * of memory. Free with free(). */
RUMOR_API void *rumor_mem_alloc_large(size_t bytes);

/* --- crc32c (Castagnoli) ----------------------------------------------- */

/* Continues crc over data; start with crc = 0. Uses SSE4.2 when the CPU
 * has it, a table otherwise; both give the same value. */
RUMOR_API uint32_t rumor_crc32c(uint32_t crc, const void *data, size_t len);

/* --- clock ------------------------------------------------------------- */

/* Monotonic time in nanoseconds since an arbitrary origin. */
RUMOR_API uint64_t rumor_clock_ns(void);

/* --- compute device ---------------------------------------------------- */

typedef enum rumor_device {
    RUMOR_DEVICE_CPU = 0,
    RUMOR_DEVICE_CUDA = 1
} rumor_device;

/* True when this library was compiled with the CUDA backend. */
RUMOR_API bool rumor_cuda_built(void);

/* Number of usable CUDA devices (0 in a CPU-only build or without a GPU).
 * reason, when not NULL and the count is 0, receives why (static text). */
RUMOR_API int rumor_cuda_device_count(const char **reason);

/* Chooses the device for compute: CUDA when requested and usable,
 * otherwise CPU with one INFO log line saying why. want_cuda false always
 * gives CPU. */
RUMOR_API rumor_device rumor_device_select(bool want_cuda);

/* Static text: "cpu" or "cuda". */
RUMOR_API const char *rumor_device_name(rumor_device device);

/* Library version string, e.g. "0.1.0". */
RUMOR_API const char *rumor_version(void);

#endif /* RUMOR_CORE_H */
