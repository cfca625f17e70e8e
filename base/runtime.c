/* runtime.c - see runtime.h. */
#include "base/runtime.h"

#include <stdlib.h>
#include <unistd.h>

void lz_runtime_init(int argc, char **argv)
{
    (void)argc;
    if (getenv("OMP_WAIT_POLICY")) return; /* the user's choice, or already re-executed */
    if (setenv("OMP_WAIT_POLICY", "passive", 1)) return;
    execv("/proc/self/exe", argv);
    /* exec failed: continue with the policy libgomp already read */
}
