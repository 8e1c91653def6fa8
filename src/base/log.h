/* log: leveled logging to stderr for the live processes (net/, sim server, cmd/).
 * Pure layers (core/, proto/) never log: they return what happened and the caller decides. */
#ifndef SB_BASE_LOG_H
#define SB_BASE_LOG_H

enum sb_log_level { SB_LOG_DEBUG = 0, SB_LOG_INFO, SB_LOG_WARN, SB_LOG_ERROR, SB_LOG_OFF };

void sb_log_set_level(enum sb_log_level lvl);
enum sb_log_level sb_log_get_level(void);
void sb_log(enum sb_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define SB_DEBUG(...) sb_log(SB_LOG_DEBUG, __VA_ARGS__)
#define SB_INFO(...) sb_log(SB_LOG_INFO, __VA_ARGS__)
#define SB_WARN(...) sb_log(SB_LOG_WARN, __VA_ARGS__)
#define SB_ERROR(...) sb_log(SB_LOG_ERROR, __VA_ARGS__)

#endif
