/* cmd_chat.c - `moestream chat` (being written). */
#include <stdio.h>

#include "cli/cli.h"

int cmd_chat(int argc, char **argv) {
    fprintf(stderr, "moestream chat: not implemented yet\n");
    return 1;
}
