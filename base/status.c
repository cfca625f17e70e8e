/* status.c - see status.h. */
#include "base/status.h"

const char *lz_strerror(int status)
{
    switch (status) {
    case LZ_OK: return "ok";
    case LZ_EIO: return "I/O error";
    case LZ_ECORRUPT: return "corrupt data";
    case LZ_EUNSUPPORTED: return "unsupported content";
    case LZ_ENOMEM: return "out of memory";
    case LZ_ENOTFOUND: return "not found";
    case LZ_ETYPE: return "value has another type";
    case LZ_EINVAL: return "invalid argument";
    case LZ_ECHECKSUM: return "checksum mismatch";
    case LZ_EVERSION: return "unsupported format version";
    case LZ_ECODEC: return "zstd error";
    case LZ_EREADONLY: return "opened read-only";
    case LZ_EFULL: return "LMDB map full";
    case LZ_ESCHEMA: return "store schema version mismatch";
    case LZ_ECONSTRAINT: return "constraint violated";
    case LZ_EMODEL: return "store built with another model";
    case LZ_EBUSY: return "store busy (another process holds its writer lock)";
    case LZ_ECOUNT: return "token counter failed";
    }
    return "unknown status";
}
