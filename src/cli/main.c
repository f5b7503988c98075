/* main.c - `lockstep <command> [flags]`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static void usage(FILE *out) {
    fprintf(out,
            "usage: lockstep <command> [flags]\n"
            "\n"
            "commands:\n"
            "  run        generate text from a prompt or a chat message\n"
            "  info       show a model's architecture, hyperparameters and tensors\n"
            "  tokenize   show the token ids of a text\n"
            "  probe      the parity probe: certifies this machine's serving configuration\n"
            "  serve      an OpenAI-compatible HTTP server\n"
            "  mtp-data   the training data of an MTP module (tools/fit_mtp.py runs it)\n"
            "\n"
            "Run `lockstep <command> --help` for a command's flags.\n"
            "The default model is %s (`make model` fetches it).\n",
            LS_DEFAULT_MODEL);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return LS_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "run")) return cli_run(argc - 1, argv + 1);
    if (!strcmp(cmd, "info")) return cli_info(argc - 1, argv + 1);
    if (!strcmp(cmd, "tokenize")) return cli_tokenize(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench")) {
        fprintf(stderr, "lockstep: the benchmarks are build/lockstep-bench now (`make bench-tools`; bench/README.md)\n");
        return LS_EXIT_USAGE;
    }
    if (!strcmp(cmd, "probe")) return cli_probe(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return cli_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "mtp-data")) return cli_mtp_data(argc - 1, argv + 1);
    fprintf(stderr, "lockstep: unknown command '%s'\n\n", cmd);
    usage(stderr);
    return LS_EXIT_USAGE;
}
