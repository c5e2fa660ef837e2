/* Leveled logging on stderr. The level is per process (set once by app/ from flags or
 * DSV4_LOG=error|warn|info|debug); it is configuration, not mutable model state. */
#ifndef DSV4_COMMON_LOG_H
#define DSV4_COMMON_LOG_H

typedef enum { DSV4_LOG_ERROR = 0, DSV4_LOG_WARN, DSV4_LOG_INFO, DSV4_LOG_DEBUG } dsv4_log_level;

void dsv4_log_set_level(dsv4_log_level level);
dsv4_log_level dsv4_log_get_level(void);
void dsv4_log(dsv4_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define DSV4_LOGE(...) dsv4_log(DSV4_LOG_ERROR, __VA_ARGS__)
#define DSV4_LOGW(...) dsv4_log(DSV4_LOG_WARN, __VA_ARGS__)
#define DSV4_LOGI(...) dsv4_log(DSV4_LOG_INFO, __VA_ARGS__)
#define DSV4_LOGD(...) dsv4_log(DSV4_LOG_DEBUG, __VA_ARGS__)

#endif
