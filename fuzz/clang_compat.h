/* clang_compat.h - forced into every file of the fuzz build (clang -include):
 * what gcc accepts and clang 14 does not. clang 14 refuses the "f16c"
 * feature string of __builtin_cpu_supports (formats/weights.c asks for it
 * beside "avx2" and "fma"); here it reads as "avx2", which every x86 CPU
 * with AVX2 implies. Nothing else changes. */
#ifndef LZ_FUZZ_CLANG_COMPAT_H
#define LZ_FUZZ_CLANG_COMPAT_H

#if defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
static inline int lz_fuzz_cpu_supports(const char *feature)
{
    /* the literals the builtin needs, chosen by name (before the macro below exists) */
    if (__builtin_strcmp(feature, "f16c") == 0 || __builtin_strcmp(feature, "avx2") == 0)
        return __builtin_cpu_supports("avx2");
    if (__builtin_strcmp(feature, "fma") == 0) return __builtin_cpu_supports("fma");
    return 0;
}
#define __builtin_cpu_supports(feature) lz_fuzz_cpu_supports(feature)
#endif

#endif /* LZ_FUZZ_CLANG_COMPAT_H */
