/* process: what the operating system says of this process, for the standard process_*
 * metrics (the names Prometheus's client libraries export, so dashboards built for them work):
 * CPU time, resident and virtual memory, open and allowed descriptors, start time.
 *
 * Read from /proc/self on demand (a scrape), never on a timer or the request path: a few small
 * reads of in-memory files plus one pass over /proc/self/fd, bounded by the descriptor limit.
 * Linux only; elsewhere every field reads as unknown. */
#ifndef SB_NET_PROCESS_H
#define SB_NET_PROCESS_H

#include <stdbool.h>
#include <stdint.h>

typedef struct sb_process_sample {
    bool have_stat;     /* /proc/self/stat was read: the four figures below are set */
    double cpu_seconds; /* user + system */
    double resident_bytes;
    double virtual_bytes;
    double start_time_s; /* Unix time */
    long open_fds;       /* -1: unknown */
    long max_fds;        /* the soft RLIMIT_NOFILE; -1: unknown or unlimited */
} sb_process_sample;

/* Fills *out with what can be read now; what cannot is marked unknown (never fails). */
void sb_process_sample_read(sb_process_sample *out);

#endif
