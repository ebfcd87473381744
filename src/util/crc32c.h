/*
 * CRC32C (the Castagnoli polynomial, iSCSI's and ext4's), the checksum a
 * version's bytes carry from the source's packer to the target's check.
 *
 * The values here are the raw remainder: initial value 0, no final
 * inversion. Raw CRCs are linear, so a stream's CRC is put together from
 * its parts in any order: crc(A || B) = crc32c_shift(crc(A), |B|) ^ crc(B).
 * That is what lets a source checksum a tensor's bytes bucket by bucket,
 * from two threads, and its direct writes apart, while the target reads
 * them whole. (The standard CRC32C of a buffer is the raw CRC continued
 * from 0xffffffff, inverted: unit tests check it against "123456789".)
 */
#ifndef FX_UTIL_CRC32C_H
#define FX_UTIL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* crc continued over n bytes at p: carry-less multiplications folding 256
 * bytes a step where the CPU has AVX-512's VPCLMULQDQ and the bytes are
 * likely in cache (512 bytes to 256 KiB), else SSE4.2's crc32 instruction
 * (three streams at once over long buffers), else a table. */
uint32_t crc32c(uint32_t crc, const void *p, size_t n);

/* The same for bytes that come from memory rather than cache (a target's
 * landed units, a source's tensors): the crc32 instruction's streams at
 * any length, which keep pace with memory where the folds do not. */
uint32_t crc32c_cold(uint32_t crc, const void *p, size_t n);

/* The table's way alone, as CPUs without SSE4.2 take it (for the tests). */
uint32_t crc32c_table(uint32_t crc, const void *p, size_t n);

/* The folding way alone (AVX-512 VPCLMULQDQ), which crc32c takes for
 * 512 bytes to 256 KiB where the CPU has it, for the tests: *crc
 * continued over n >= 256 bytes; 0 (and *crc untouched) where the CPU has
 * not. */
int crc32c_fold(uint32_t *crc, const void *p, size_t n);

/* crc followed by n zero bytes: crc x x^(8n) mod P. */
uint32_t crc32c_shift(uint32_t crc, uint64_t n);

/* The factor crc32c_shift(., n) multiplies by, and the product, for a
 * caller that shifts many CRCs by the same n. */
uint32_t crc32c_shift_factor(uint64_t n);
uint32_t crc32c_mul(uint32_t a, uint32_t b);

/* "avx512-vpclmulqdq", "sse4.2" or "table": for the bench's report. */
const char *crc32c_impl(void);

#endif
