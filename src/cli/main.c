/*
 * main.c - `moestream <command> [options]`: git-style dispatch to the
 * subcommands in cmd_*.c (see cli.h).
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "moestream.h"

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct command commands[] = {
    {"run", cmd_run, "generate text from a prompt, streamed to stdout"},
    {"chat", cmd_chat, "interactive multi-turn chat"},
    {"bench", cmd_bench, "prefill/decode throughput at context frontiers, CSV out"},
    {"inspect", cmd_inspect, "show a GGUF's metadata, tensors, quant types and layout"},
    {"logits", cmd_logits, "next-token probabilities per position, as JSON"},
    {"perplexity", cmd_perplexity, "perplexity of a text, as llama.cpp's llama-perplexity measures it"},
    {"serve", cmd_serve, "OpenAI- and Anthropic-compatible HTTP server"},
    {"mkmodel", cmd_mkmodel, "write a small DeepSeek-V4-architecture GGUF with random weights"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: moestream <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "\n`moestream <command> --help` describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("moestream %s (kernels: %s)\n", MOESTREAM_VERSION, ms_kernels_isa());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(cmd, commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "moestream: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
