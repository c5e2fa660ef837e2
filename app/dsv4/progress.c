/* Progress lines on stderr, drawn only when stderr is a terminal and at most 10 times a second. */
#include <time.h>
#include <unistd.h>

#include "cli.h"

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void cli_progress_init(cli_progress *p, const char *label) {
    p->tty = isatty(STDERR_FILENO);
    p->label = label;
    p->t0 = cli_now();
    p->last = 0;
    p->drawn = false;
}

void cli_progress_update(void *user, uint32_t done, uint32_t total) {
    cli_progress *p = user;
    if (!p->tty) return;
    const double now = cli_now();
    if (done < total && now - p->last < 0.1) return;
    p->last = now;
    const double dt = now - p->t0;
    const int width = 30;
    const int fill = total ? (int)((uint64_t)done * width / total) : width;
    char bar[64];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
    bar[width] = 0;
    fprintf(stderr, "\r\033[K%s [%s] %u/%u tokens", p->label, bar, done, total);
    if (dt > 0 && done) fprintf(stderr, "  %.1f tok/s", done / dt);
    fflush(stderr);
    p->drawn = true;
}

void cli_progress_done(cli_progress *p) {
    if (p->tty && p->drawn) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
    p->drawn = false;
}
