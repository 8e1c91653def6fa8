#include "proto/proc_stat.h"

/* proc(5) numbers the fields from 1: (2) comm, (3) state, then (14) utime, (15) stime,
 * (22) starttime, (23) vsize, (24) rss. After the last ')' comes " state ..." = field 3. */
enum { F_UTIME = 14, F_STIME = 15, F_START = 22, F_VSIZE = 23, F_RSS = 24 };

int sb_proc_stat_parse(const char *line, size_t len, sb_proc_stat *out)
{
    size_t i = len;
    while (i > 0 && line[i - 1] != ')')
        i--;
    if (i == 0)
        return -1;
    /* i is just past the last ')'; field 3 starts after the space that follows it. */
    int field = 2;
    uint64_t v = 0;
    bool in_num = false, digits = true;
    /* A field counts once the space after it is seen: a read cut inside rss is not taken for a
     * smaller rss (the kernel writes some 28 fields after it). */
    for (; i < len; i++) {
        char c = line[i];
        if (c == ' ' || c == '\n') {
            if (in_num) {
                bool wanted =
                    field == F_UTIME || field == F_STIME || field == F_START || field == F_VSIZE || field == F_RSS;
                if (wanted && !digits)
                    return -1; /* only the fields read must be counts (nice may be negative) */
                switch (field) {
                case F_UTIME: out->utime_ticks = v; break;
                case F_STIME: out->stime_ticks = v; break;
                case F_START: out->start_ticks = v; break;
                case F_VSIZE: out->vsize_bytes = v; break;
                case F_RSS: out->rss_pages = v; return 0;
                default: break;
                }
                in_num = false;
            }
            continue;
        }
        if (!in_num) {
            in_num = true;
            field++;
            v = 0;
            digits = true;
        }
        if (c >= '0' && c <= '9' && v <= (UINT64_MAX - 9) / 10)
            v = v * 10 + (uint64_t)(c - '0');
        else
            digits = false; /* the state letter, a negative value, an overflow: not a count */
    }
    return -1;
}
