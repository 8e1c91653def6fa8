/* proc_stat: reads the line of Linux's /proc/<pid>/stat (proc(5)) into the figures the standard
 * process_* metrics need. Pure: the caller reads the file (net/process.c) and passes its bytes.
 *
 * The line is "pid (comm) state ppid ...": comm is the executable's name, up to 15 bytes of
 * anything, spaces and parentheses included, so fields are counted from the LAST ')' in the
 * line, never by splitting the whole line on spaces. Not for other /proc files. */
#ifndef SB_PROTO_PROC_STAT_H
#define SB_PROTO_PROC_STAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sb_proc_stat {
    uint64_t utime_ticks, stime_ticks; /* CPU time in user and kernel mode, in clock ticks */
    uint64_t start_ticks;              /* start time, clock ticks after boot */
    uint64_t vsize_bytes;              /* virtual memory size */
    uint64_t rss_pages;                /* resident set size, in pages */
} sb_proc_stat;

/* Parses len bytes of a stat line (no NUL needed; reads none past len). Returns 0 and fills
 * *out, or -1 when the line is malformed or ends before the space after rss (out then unspecified).
 * Linear in len; never allocates. */
int sb_proc_stat_parse(const char *line, size_t len, sb_proc_stat *out);

#endif
