/* status.h - the project's one status space, as LMDB has one: every library
 * function that can fail returns LZ_OK (0) or one of these codes, whatever
 * module it is in, and lz_strerror names it. The message a function writes
 * into its caller's err buffer (base/error.h) says which file, document,
 * key or tensor; the code says what kind of failure it was, so a caller can
 * act on it (ENOTFOUND: absent; EBUSY: another writer; ECHECKSUM: damaged).
 * The CUDA kernels keep their own small space (kernels/lz_attn.h): negative
 * argument errors, positive CUDA errors. */
#ifndef LZ_STATUS_H
#define LZ_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

enum lz_status {
    LZ_OK = 0,
    LZ_EIO = 1,          /* a read, write, map or lock failed (LMDB, SQLite, a file) */
    LZ_ECORRUPT = 2,     /* data fails its format's checks (GGUF, safetensors, payload, tokenizer, store) */
    LZ_EUNSUPPORTED = 3, /* well-formed, but outside what is implemented */
    LZ_ENOMEM = 4,       /* out of memory */
    LZ_ENOTFOUND = 5,    /* no such key, row, document or folder */
    LZ_ETYPE = 6,        /* a GGUF value of another type than asked */
    LZ_EINVAL = 7,       /* an invalid argument or input value */
    LZ_ECHECKSUM = 8,    /* a payload's CRC32C does not match its bytes */
    LZ_EVERSION = 9,     /* a payload format version this build cannot read */
    LZ_ECODEC = 10,      /* zstd failed */
    LZ_EREADONLY = 11,   /* a write through a handle opened read-only */
    LZ_EFULL = 12,       /* the LMDB map has no room for the write (nothing written) */
    LZ_ESCHEMA = 13,     /* the store's schema is newer than this build, or a migration failed */
    LZ_ECONSTRAINT = 14, /* an SQLite constraint was violated */
    LZ_EMODEL = 15,      /* the store was built with another model */
    LZ_EBUSY = 16,       /* another process holds the store's writer lock */
    LZ_ECOUNT = 17       /* the caller's token counter failed (passage splitting) */
};

/* A short text for a status ("not found"); unknown values give "unknown status". */
const char *lz_strerror(int status);

#ifdef __cplusplus
}
#endif

#endif /* LZ_STATUS_H */
