/* The .qfm model file (qforge-model(5)) as the writer (qfm_write.c) and the
 * reader (qfm_read.c) both see it: the layout and hard bounds of version 1,
 * little-endian fields, CRC-32, and the checks both directions make (qfm_format.c).
 * The man page is the specification; the constants below are its numbers. */
#ifndef QFORGE_QFM_INTERNAL_H
#define QFORGE_QFM_INTERNAL_H

#include "internal.h"

/* ---- the layout (qforge-model(5)) ------------------------------------------------------ */
#define QFM_MAGIC "QFM" /* the first 4 bytes, with the literal's NUL */
#define HEADER_BYTES 32
#define ENTRY_BYTES 32
#define MAX_SECTIONS 64
#define WEIGHT_ALIGN 64
enum { SEC_META = 1, SEC_GRAPH = 2, SEC_WEIGHTS = 3, SEC_KNOWN_END };

/* Hard bounds of format version 1 (beyond QF_MAX_NODES, QF_MAX_VALUES,
 * QF_MAX_DIMS and QF_MAX_TENSOR_BYTES of graph.h). */
#define MAX_NAME 4096          /* value and node names, bytes */
#define MAX_ATTR_NAME 256
#define MAX_STRING 65536       /* string attributes and META values */
#define MAX_META_KEYS 256
#define MAX_META_KEY 64
#define MAX_NODE_IO 4096       /* inputs or outputs of one node */
#define MAX_ATTRS 1024         /* attributes of one node */
#define MAX_ATTR_ELEMS (1 << 24)
#define MAX_BATCH (1 << 20)
#define MAX_OPSET 1000
#define VALUE_FLAGS (QF_VALUE_INPUT | QF_VALUE_OUTPUT | QF_VALUE_CONST)
/* A value record's flag, in the file only (format 1.1): an i32 zero point
 * follows the scale. Readers of 1.0 refuse the bit, so an asymmetric model
 * cannot be read as a symmetric one. */
#define FILE_VALUE_ZERO_POINT (1u << 8)
/* Fewest bytes a record can take: counts are checked against them before anything is allocated. */
#define MIN_VALUE_BYTES 13     /* name length + 1-byte name + dtype, ndim, flags, scale */
#define MIN_NODE_BYTES 32      /* name length, op, precision/act, act_lo/hi, three counts, one output */
#define MIN_ATTR_BYTES 9       /* name length + 1-byte name + type and padding */
#define MIN_META_BYTES 9       /* two lengths + 1-byte key */

/* ---- little-endian encoding ---------------------------------------------------------- */
static inline void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32; }

static inline uint64_t align_up(uint64_t x) { return (x + WEIGHT_ALIGN - 1) / WEIGHT_ALIGN * WEIGHT_ALIGN; }

/* CRC-32 (zlib's) of n bytes, or continued over n more. */
uint32_t qfi_qfm_crc(const uint8_t *p, uint64_t n);
uint32_t qfi_qfm_crc_update(uint32_t crc, const uint8_t *p, uint64_t n);
/* Strings in a .qfm are one line of text: no NUL, no control characters
 * (they end up in one-line error messages). */
bool qfi_qfm_has_control(const uint8_t *p, size_t n);
/* The first name that appears twice, or NULL. Sorts `names`. */
const char *qfi_qfm_duplicate_name(char **names, size_t n);
/* Whether s is a scale source META's scale_source may hold. */
bool qfi_qfm_is_scale_source(const char *s);
/* Whether s names a calibration method (META's calib_method). */
bool qfi_qfm_is_method_name(const char *s);

#endif
