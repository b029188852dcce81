/*
 * cli.h - the moestream subcommands. Each lives in cmd_<name>.c, takes the
 * arguments after its name (argv[0] is the subcommand name) and returns the
 * process exit status: 0 success, 1 runtime error, 2 usage error. Errors are
 * printed as one line on stderr: "moestream <cmd>: <message>".
 *
 * Each command is split in two: a parse step that reads every option into
 * an options struct and validates all of them (syntax, ranges, combinations,
 * files that must exist or be writable) before any work starts, each error
 * one line naming the flag; and a run step that does the work from the
 * struct. A parse step returns CLI_CONTINUE or the exit status.
 */
#ifndef MS_CLI_CLI_H
#define MS_CLI_CLI_H

/* What a parse step returns when the command should go on to run. */
#define CLI_CONTINUE (-1)

/* The largest prompt file `run -f` and `bench --prompt-file` read: a
 * million-token context is about 4 MB of text, so a larger file is a
 * mistake (a device, an endless pipe), not a prompt. */
#define MS_PROMPT_FILE_MAX ((size_t)256 << 20)

int cmd_mkmodel(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif
