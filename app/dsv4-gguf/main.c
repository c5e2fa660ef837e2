/* dsv4-gguf: inspect GGUF files (`info`) and write random-weight models of the family (`synth`). */
#include <stdio.h>
#include <string.h>

#include "tool.h"

static void usage(FILE *o) {
    fprintf(o, "usage: dsv4-gguf info FILE\n"
               "       dsv4-gguf synth [options] OUT.gguf   (dsv4-gguf synth --help for options)\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(argv[1], "synth")) return cmd_synth(argc - 1, argv + 1);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "dsv4-gguf: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
