/* error.h - the one way library code reports an error: format a message into
 * the caller's buffer (err may be NULL or errlen 0) and return the status, so
 * `return lz_fail(err, errlen, LZ_X_EIO, "%s: %s", path, strerror(errno));`
 * reads as one statement. */
#ifndef LZ_ERROR_H
#define LZ_ERROR_H

#include <stddef.h>

int lz_fail(char *err, size_t errlen, int status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif /* LZ_ERROR_H */
