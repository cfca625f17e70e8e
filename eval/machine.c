/* machine.c - the machine a report was made on (machine.h): uname,
 * /proc/cpuinfo, sysconf, and nvidia-smi's GPU list when it is installed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "eval/machine.h"

void lz_eval_cpu_name(char *buf, size_t n)
{
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        const char *c = strchr(line, ':');
        if (!c) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        snprintf(buf, n, "%s", c);
        buf[strcspn(buf, "\n")] = 0;
        break;
    }
    fclose(f);
}

/* "name, memory" lines of nvidia-smi, when the program is on PATH and answers */
static json_t *gpus_json(void)
{
    json_t *a = json_array();
    if (system("command -v nvidia-smi >/dev/null 2>&1") != 0) return a;
    FILE *p = popen("nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null", "r");
    if (!p) return a;
    char line[512];
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        if (line[0]) json_array_append_new(a, json_string(line));
    }
    pclose(p);
    return a;
}

json_t *lz_eval_machine_json(void)
{
    char host[256] = "unknown", cpu[256], os[600] = "unknown";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    lz_eval_cpu_name(cpu, sizeof cpu);
    struct utsname u;
    if (uname(&u) == 0) snprintf(os, sizeof os, "%s %s %s", u.sysname, u.release, u.machine);
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return json_pack("{s:s, s:s, s:s, s:i, s:I, s:o}", "hostname", host, "os", os, "cpu", cpu, "cores",
                     (int)sysconf(_SC_NPROCESSORS_ONLN), "memory_bytes",
                     (json_int_t)(pages > 0 && page > 0 ? pages * page : 0), "gpus", gpus_json());
}
