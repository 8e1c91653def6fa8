#include "net/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "proto/proc_stat.h"

/* The stat line is some 300 bytes (comm is at most 16); a full buffer still holds rss, the
 * 24th of its 52 fields, or the parser says so. */
#define STAT_MAX 1024

static bool read_stat(sb_proc_stat *st)
{
    char buf[STAT_MAX];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof buf); /* procfs hands a line this short over in one read */
    close(fd);
    return n > 0 && sb_proc_stat_parse(buf, (size_t)n, st) == 0;
}

/* Entries of /proc/self/fd, less the one the listing itself holds open. */
static long count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    long n = 0;
    char self[16];
    snprintf(self, sizeof self, "%d", dirfd(d));
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && strcmp(e->d_name, self))
            n++;
    closedir(d);
    return n;
}

void sb_process_sample_read(sb_process_sample *out)
{
    *out = (sb_process_sample){.open_fds = count_fds(), .max_fds = -1};
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        out->max_fds = (long)rl.rlim_cur;
    sb_proc_stat st;
    long hz = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    if (hz <= 0 || page <= 0 || !read_stat(&st))
        return;
    out->have_stat = true;
    out->cpu_seconds = (double)(st.utime_ticks + st.stime_ticks) / (double)hz;
    out->resident_bytes = (double)st.rss_pages * (double)page;
    out->virtual_bytes = (double)st.vsize_bytes;
    /* Computed once and kept: the value identifies this process (the dashboard takes a change
     * for a restart), and recomputing it on each scrape could move it by a tick when the wall
     * clock is slewed. One process, one value: a static is its natural home. */
    static double start_time_s;
    if (start_time_s > 0) {
        out->start_time_s = start_time_s;
        return;
    }
    /* Started start_ticks after boot: the wall clock now, less the time since then (boot time
     * as CLOCK_BOOTTIME counts it, the base procfs uses). */
    struct timespec wall, boot;
    clock_gettime(CLOCK_REALTIME, &wall);
    clock_gettime(CLOCK_BOOTTIME, &boot);
    double since_boot = (double)boot.tv_sec + (double)boot.tv_nsec / 1e9;
    double now = (double)wall.tv_sec + (double)wall.tv_nsec / 1e9;
    double start = now - (since_boot - (double)st.start_ticks / (double)hz);
    /* To the tick, as procfs has it: the same value on every scrape, not one jittering by the
     * microseconds between the two clock reads. */
    out->start_time_s = start_time_s = (double)(long long)(start * (double)hz + 0.5) / (double)hz;
}
