/* Ctrl-C: the handler only raises a flag. A signal handler cannot reach per-object state, so
 * this one atomic is the program's only global; the engine polls it as its cancel flag, the
 * generation loop between tokens and the REPL's line reader after an interrupted read. */
#include <signal.h>
#include <string.h>

#include "cli.h"

static atomic_int g_sigint;

static void on_sigint(int sig) {
    (void)sig;
    atomic_store(&g_sigint, 1);
}

void cli_sigint_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a blocked read returns EINTR so the REPL sees the key */
    sigaction(SIGINT, &sa, NULL);
}

atomic_int *cli_sigint_flag(void) { return &g_sigint; }
void cli_sigint_clear(void) { atomic_store(&g_sigint, 0); }
