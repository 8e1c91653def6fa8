#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

/* Process-wide on purpose: set once by cmd/ from the command line before any loop runs, read
 * only afterwards (every loop logs at the same level). */
static enum sb_log_level level = SB_LOG_INFO;

void sb_log_set_level(enum sb_log_level lvl) { level = lvl; }
enum sb_log_level sb_log_get_level(void) { return level; }

void sb_log(enum sb_log_level lvl, const char *fmt, ...)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    if (lvl < level || lvl >= SB_LOG_OFF)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%02d:%02d:%02d.%03ld %-5s ", tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000,
            names[lvl]);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}
