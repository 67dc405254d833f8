/* sdgp: safetensors files (https://huggingface.co/docs/safetensors), the checkpoint format.
 *
 * Layout: u64 little-endian header length N, N bytes of JSON header
 * {"__metadata__": {"k": "v", ...}, "name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...},
 * then the data. sdgp adds the metadata key "sdgp_crc32" (CRC-32 of the data section, hex) and
 * rejects a file whose data does not match it, so a damaged or half-written file is never taken
 * for good. Writes are atomic: PATH.tmp.<pid>, fwrite, fflush, fsync, rename, fsync of the dir.
 *
 * Layout written: the header lists tensors in the order given; the data section holds tensors of
 * 8-byte dtypes first, then 4-byte, then 1-byte (each group in the given order) and the header is
 * padded with spaces to a multiple of 8, so every tensor of an sdgp file is aligned for its dtype
 * in memory. The reader accepts any layout the format allows (it checks what the reference reader
 * checks: tensors tile the data section exactly, no gaps, no overlap); `data` of a tensor from a
 * foreign file may then be unaligned: use sdgp_safetensors_copy. */
#ifndef SDGP_SAFETENSORS_H
#define SDGP_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "sdgp/export.h"
#include "sdgp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SDGP_DT_F32 = 0, SDGP_DT_I64 = 1, SDGP_DT_U8 = 2, SDGP_DT_I32 = 3, SDGP_DT_U32 = 4 } sdgp_dtype;

typedef struct {
    const char *name;
    sdgp_dtype dtype;
    int ndim;            /* 0..4 */
    int64_t shape[4];
    const void *data;    /* product(shape) elements of dtype */
} sdgp_st_tensor;

typedef struct {
    const char *key, *value;
} sdgp_st_meta;

/* Writes tensors and metadata atomically to path. Names and metadata must be valid UTF-8, names
 * unique and not "__metadata__", metadata keys unique and not "sdgp_crc32" (SDGP_ERR_INVALID).
 * On failure (SDGP_ERR_IO, naming path and the failing step) an existing file at path is untouched
 * and no temporary file is left behind. data may be NULL for empty tensors. */
SDGP_API sdgp_status sdgp_safetensors_write(const char *path, const sdgp_st_tensor *tensors, int count,
                                            const sdgp_st_meta *meta, int meta_count, sdgp_error *err);

/* A file read fully into memory and validated (header JSON, offsets inside the file and not
 * overlapping, shapes matching byte counts, checksum when present). Damage is SDGP_ERR_FORMAT
 * with the file name; valid files of other dtypes (F16, BF16, ...) or more than 4 dims are
 * SDGP_ERR_UNSUPPORTED. */
typedef struct sdgp_st_file sdgp_st_file;
SDGP_API sdgp_status sdgp_safetensors_read(sdgp_st_file **out, const char *path, sdgp_error *err);
/* Parses a file already in memory (for fuzzing and tests); the bytes are copied. */
SDGP_API sdgp_status sdgp_safetensors_parse(sdgp_st_file **out, const void *bytes, size_t size, sdgp_error *err);
SDGP_API void sdgp_safetensors_free(sdgp_st_file *f);

/* Finds a tensor; returns NULL when absent. The returned struct points into f. */
SDGP_API const sdgp_st_tensor *sdgp_safetensors_get(const sdgp_st_file *f, const char *name);
SDGP_API int sdgp_safetensors_count(const sdgp_st_file *f);
SDGP_API const sdgp_st_tensor *sdgp_safetensors_at(const sdgp_st_file *f, int i);
/* Metadata value for key, or NULL. */
SDGP_API const char *sdgp_safetensors_meta(const sdgp_st_file *f, const char *key);

/* Copies tensor `name` into dst after checking dtype and shape (message names the tensor,
 * the expected and the found shape). */
SDGP_API sdgp_status sdgp_safetensors_copy(const sdgp_st_file *f, const char *name, sdgp_dtype dtype, int ndim,
                                           const int64_t *shape, void *dst, sdgp_error *err);

#ifdef __cplusplus
}
#endif
#endif
