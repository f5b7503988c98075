/* mtp_data.c - `lockstep mtp-data`: the training data of an MTP module
 * (ls_mtp_data_write; tools/fit_mtp.py runs it; docs/mtp.md has the files' format). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"

static const char *mtp_data_help =
    "usage: lockstep mtp-data [-m MODEL] --prompts FILE --out DIR [flags]\n"
    "\n"
    "Writes the training data of an MTP module (tools/fit_mtp.py runs it; docs/mtp.md):\n"
    "the model answers each prompt itself and the hidden state of every position is kept.\n"
    "\n"
    "  -m, --model PATH      GGUF model (default " LS_DEFAULT_MODEL ")\n"
    "      --prompts FILE    one prompt per line (a user message; blank lines are skipped)\n"
    "      --out DIR         the output folder (created; its files are replaced)\n"
    "  -n, --n-predict N     tokens to generate per prompt (default 256; fewer at end of generation)\n"
    "      --max-prompts N   use the first N prompts only (default all)\n"
    "      --temp T          sampling temperature (default 0.8)\n"
    "      --seed S          sampling seed (default 1); prompt i samples with seed S + i\n"
    "      --raw             the prompts are raw text, not chat messages\n"
    "      --module FILE     also run this MTP module over every position: mtp_top1.i32\n"
    "  -t, --threads N       threads (default: all CPUs)\n"
    "  -h, --help            this help\n";

typedef struct {
    struct timespec t0;
    bool tty;
} progress;

static void on_progress(void *ud, int64_t n_seqs, int64_t n_tokens, int64_t n_gen) {
    progress *pr = ud;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double s = (double)(t.tv_sec - pr->t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - pr->t0.tv_nsec);
    fprintf(stderr, "%s[mtp-data: %lld sequences, %lld tokens (%lld generated), %.0f s]%s", pr->tty ? "\r" : "",
            (long long)n_seqs, (long long)n_tokens, (long long)n_gen, s, pr->tty ? "" : "\n");
}

int cli_mtp_data(int argc, char **argv) {
    const char *cmd = "mtp-data";
    const char *model_path = LS_DEFAULT_MODEL, *module = NULL;
    long long n_predict = 256, max_prompts = 0, threads = 0;
    double temp = 0.8;
    ls_mtp_data_params p = LS_MTP_DATA_PARAMS_INIT;
    enum { O_PROMPTS = 256, O_OUT, O_MAXP, O_TEMP, O_SEED, O_RAW, O_MODULE };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},      {"prompts", required_argument, 0, O_PROMPTS},
        {"out", required_argument, 0, O_OUT},      {"n-predict", required_argument, 0, 'n'},
        {"max-prompts", required_argument, 0, O_MAXP}, {"temp", required_argument, 0, O_TEMP},
        {"seed", required_argument, 0, O_SEED},    {"raw", no_argument, 0, O_RAW},
        {"module", required_argument, 0, O_MODULE}, {"threads", required_argument, 0, 't'},
        {"help", no_argument, 0, 'h'},             {0, 0, 0, 0},
    };
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "m:n:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model_path = optarg; break;
        case O_PROMPTS: p.prompts = optarg; break;
        case O_OUT: p.out_dir = optarg; break;
        case 'n': if (!cli_parse_int(cmd, "--n-predict", optarg, 1, 1 << 20, &n_predict)) return LS_EXIT_USAGE; break;
        case O_MAXP: if (!cli_parse_int(cmd, "--max-prompts", optarg, 1, 1 << 24, &max_prompts)) return LS_EXIT_USAGE; break;
        case O_TEMP: if (!cli_parse_float(cmd, "--temp", optarg, 0.0, 100.0, &temp)) return LS_EXIT_USAGE; break;
        case O_SEED: if (!cli_parse_u64(cmd, "--seed", optarg, &p.seed)) return LS_EXIT_USAGE; break;
        case O_RAW: p.raw = true; break;
        case O_MODULE: module = optarg; break;
        case 't': if (!cli_parse_int(cmd, "--threads", optarg, 1, 256, &threads)) return LS_EXIT_USAGE; break;
        case 'h': fputs(mtp_data_help, stdout); return 0;
        default: fputs(mtp_data_help, stderr); return LS_EXIT_USAGE;
        }
    }
    if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    if (!p.prompts || !p.out_dir) return cli_usage_error(cmd, "--prompts FILE and --out DIR are required");
    if (access(model_path, R_OK) != 0) return cli_usage_error(cmd, "cannot read model file '%s'", model_path);
    if (access(p.prompts, R_OK) != 0) return cli_usage_error(cmd, "cannot read prompts file '%s'", p.prompts);
    if (module && access(module, R_OK) != 0) return cli_usage_error(cmd, "cannot read module file '%s'", module);
    p.n_predict = (int32_t)n_predict;
    p.max_prompts = (int32_t)max_prompts;
    p.temperature = (float)temp;
    p.n_threads = (int32_t)(threads ? threads : cli_default_threads());
    p.mtp_top1 = module != NULL;
    ls_err err;
    ls_err_clear(&err);
    ls_model_params mp = LS_MODEL_PARAMS_INIT;
    mp.path = model_path;
    mp.mtp_path = module;
    ls_model *m = ls_model_load(&mp, &err);
    if (!m) {
        fprintf(stderr, "lockstep mtp-data: cannot load '%s': %s\n", model_path, err.msg);
        return LS_EXIT_USAGE;
    }
    progress pr = {.tty = isatty(2)};
    clock_gettime(CLOCK_MONOTONIC, &pr.t0);
    p.on_progress = on_progress;
    p.progress_ud = &pr;
    ls_mtp_data_result r = LS_MTP_DATA_RESULT_INIT;
    ls_status st = ls_mtp_data_write(m, &p, &r, &err);
    if (pr.tty) fputc('\n', stderr);
    ls_model_free(m);
    if (st) {
        fprintf(stderr, "lockstep mtp-data: %s\n", err.msg);
        return st == LS_E_INVALID ? LS_EXIT_USAGE : 1;
    }
    fprintf(stderr, "lockstep mtp-data: %lld sequences, %lld tokens (%lld generated) in '%s'\n", (long long)r.n_seqs,
            (long long)r.n_tokens, (long long)r.n_generated, p.out_dir);
    return 0;
}
