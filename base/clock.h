/* clock.h - the one wall clock the project times itself with: seconds of
 * CLOCK_MONOTONIC as a double (never jumps with the system time). */
#ifndef LZ_CLOCK_H
#define LZ_CLOCK_H

#include <time.h>

static inline double lz_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#endif /* LZ_CLOCK_H */
