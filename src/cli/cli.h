/*
 * cli.h - the moestream subcommands. Each lives in cmd_<name>.c, takes the
 * arguments after its name (argv[0] is the subcommand name) and returns the
 * process exit status: 0 success, 1 runtime error, 2 usage error. Errors are
 * printed as one line on stderr: "moestream <cmd>: <message>".
 */
#ifndef MS_CLI_CLI_H
#define MS_CLI_CLI_H

int cmd_mkmodel(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);

#endif
