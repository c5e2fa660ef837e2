#include "common/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static dsv4_log_level current_level(int set, dsv4_log_level value) {
    static int initialized;
    static dsv4_log_level level = DSV4_LOG_WARN;
    if (set) {
        level = value;
        initialized = 1;
    } else if (!initialized) {
        const char *env = getenv("DSV4_LOG");
        if (env) {
            if (!strcmp(env, "error"))
                level = DSV4_LOG_ERROR;
            else if (!strcmp(env, "warn"))
                level = DSV4_LOG_WARN;
            else if (!strcmp(env, "info"))
                level = DSV4_LOG_INFO;
            else if (!strcmp(env, "debug"))
                level = DSV4_LOG_DEBUG;
        }
        initialized = 1;
    }
    return level;
}

void dsv4_log_set_level(dsv4_log_level level) { current_level(1, level); }
dsv4_log_level dsv4_log_get_level(void) { return current_level(0, DSV4_LOG_WARN); }

void dsv4_log(dsv4_log_level level, const char *fmt, ...) {
    if (level > dsv4_log_get_level()) return;
    static const char *names[] = {"error", "warn", "info", "debug"};
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "dsv4 %s: %s\n", names[level], line);
}
