/* dsv4-gguf subcommands. */
#ifndef DSV4_APP_GGUF_TOOL_H
#define DSV4_APP_GGUF_TOOL_H

int cmd_info(int argc, char **argv);
int cmd_synth(int argc, char **argv);

#endif
