/* CRC-32C (Castagnoli) for record batch v2 -- plain C, no Python.h.
 *
 * pb_crc32c(value, buf, len) continues a CRC the way the `crc32c` PyPI package does:
 * pb_crc32c(pb_crc32c(0, a), b) == pb_crc32c(0, a || b). The pre/post inversion is done
 * inside, so `value` is a finished CRC (0 to start).
 *
 * Implementations, picked once at run time (pb_crc32c_init, idempotent, call it before
 * threads race; the Cython modules call it at import):
 *   x86-64  SSE4.2 crc32 instruction, three interleaved streams combined by shift tables
 *   AArch64 ARMv8 CRC32C instructions, same structure
 *   other   slicing-by-8 tables
 * Reentrant after init; never allocates.
 */
#ifndef PYBROKER_CRC32C_H
#define PYBROKER_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void pb_crc32c_init(void);
uint32_t pb_crc32c(uint32_t value, const void *buf, size_t len);
/* Forced implementations, for tests and benchmarks. */
uint32_t pb_crc32c_sw(uint32_t value, const void *buf, size_t len);
/* NULL when the CPU lacks the instructions. */
typedef uint32_t (*pb_crc32c_fn)(uint32_t value, const void *buf, size_t len);
pb_crc32c_fn pb_crc32c_hw(void);
/* "sse4.2", "armv8-crc" or "slicing-by-8". */
const char *pb_crc32c_impl(void);

#ifdef __cplusplus
}
#endif

#endif
