/* serve.c - `lockstep serve`: flags for the OpenAI-compatible server. */
#include <getopt.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "server/server.h"

static const char *help =
    "usage: lockstep serve [-m MODEL] [--host 127.0.0.1] [--port 8080] [-np/--parallel N] [-c/--ctx-size N]\n"
    "                      [--kv-mem SIZE] [-t/--threads N] [--spec KIND] [--api-key KEY] [--max-queue N]\n"
    "                      [--timeout S] [flags]\n"
    "\n"
    "  -m, --model PATH      GGUF model (default " LS_DEFAULT_MODEL ")\n"
    "      --alias NAME      the model name in responses (default: the file name); with several\n"
    "                        models, the name of the -m before it\n"
    "Several models (router mode; docs/server.md): -m repeated and/or --models-dir; each loads\n"
    "on first use, the request's \"model\" picks one (default name: the file name without .gguf)\n"
    "      --models-dir DIR  serve every *.gguf in DIR (a split model by its first shard)\n"
    "      --models-max N    at most N models loaded at once; the least recently used idle one\n"
    "                        is unloaded to make room (default 4; 0: no limit)\n"
    "      --models-memory SIZE  loaded models' files together at most SIZE, e.g. 8G (default: no limit)\n"
    "      --host ADDR       address or name to bind, IPv4 or IPv6 (default 127.0.0.1, loopback only)\n"
    "      --port N          (default 8080)\n"
    "  -np, --parallel N     sequences decoded together (default 8)\n"
    "  -c, --ctx-size N      context per sequence (default min(trained, 4096))\n"
    "      --kv-mem SIZE     KV cache size, e.g. 512M or 2G (default: ctx-size x parallel positions)\n"
    "  -t, --threads N       threads (default: online CPUs)\n"
    "      --spec KIND       speculative decoding for every request: ngram, draft, layerskip, mtp, off\n"
    "      --draft-max K, --draft-min N, --draft-model PATH, --draft-layers L   as for `run`\n"
    "                        (--spec mtp --draft-model FILE: an MTP module fitted to the model)\n"
    "      --draft-p-min P   as for `run` (default 0.5)\n"
    "      --draft-lookup N  as for `run`: prompt lookup before the drafter (default 2 with mtp, else 0)\n"
    "      --allow-inexact   keep speculating even if the parity probe fails\n"
    "      --kernels K       auto, wide, narrow (default auto)\n"
    "      --device D        cpu, or cuda in a CUDA build (default cpu)\n"
    "      --api-key KEY     require Authorization: Bearer KEY (also $LOCKSTEP_API_KEY)\n"
    "      --max-queue N     requests waiting beyond --parallel before 503 (default 64)\n"
    "      --timeout S       idle-connection timeout and shutdown grace period (default 30)\n"
    "      --max-body BYTES  request body limit (default 1048576)\n"
    "      --max-tokens N    cap on a request's max_tokens (default 4096)\n"
    "      --max-connections N  open connections beyond N get 503 (default 8192)\n"
    "      --header-timeout S   a request head, once begun, must be complete within S seconds (default 10)\n"
    "      --body-timeout S     a request body must be complete within S seconds of its head (default 60)\n"
    "      --cors-origin ORIGIN allow browser calls from ORIGIN (or *): CORS headers, OPTIONS\n"
    "      --reasoning-format F  deepseek: a reply's leading <think>...</think> is split out as\n"
    "                        reasoning (reasoning_content, a reasoning item, a thinking block);\n"
    "                        none: it stays in the content (default deepseek)\n"
    "      --chat-template-file PATH  a Jinja chat template used in place of the model's\n"
    "      --no-probe        skip the startup parity probe\n"
    "      --cache-dir DIR   keep the prefix cache's full KV blocks in DIR across restarts; a file is\n"
    "                        used only if its model sha256, recipe version, KV layout and checksum match\n"
    "      --cache-dir-max SIZE  cap on DIR's block files, least recently used deleted first (default 1G)\n"
    "      --no-progress     no progress lines (the startup probe, a long prefill) on a terminal\n"
    "\n"
    "Endpoints (docs/server.md):\n"
    "  GET /                       the chat page (streaming chat, replay, parity verdict)\n"
    "  POST /v1/chat/completions   OpenAI chat completions (tools, streaming)\n"
    "  POST /v1/completions        OpenAI completions\n"
    "  POST /v1/responses          OpenAI Responses API (store: false; tools, streaming)\n"
    "  POST /v1/messages           Anthropic Messages API (tools, streaming; x-api-key accepted)\n"
    "  POST /v1/embeddings, POST /embeddings   embeddings\n"
    "  POST /completion, GET /slots           llama-server's native endpoints\n"
    "  GET /v1/models, GET /health, GET /metrics, GET /props\n"
    "  GET /models, POST /models/load, POST /models/unload   the models and their status (router mode)\n"
    "  POST /tokenize, POST /detokenize, POST /apply-template\n"
    "SIGINT/SIGTERM drain and exit 0.\n";

static bool parse_size(const char *s, int64_t *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || v <= 0) return false;
    double mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return false;
    v *= mul;
    if (v > 9e18) return false;
    *out = (int64_t)v;
    return true;
}

int cli_serve(int argc, char **argv) {
    const char *cmd = "serve";
    /* One HTTP thread per connection: without a cap glibc gives threads their own malloc
     * arenas (up to 8 per core), and RSS climbs in steps as concurrency peaks rise. */
    mallopt(M_ARENA_MAX, 2);
    for (int i = 1; i < argc; i++) /* llama-server spells it -np */
        if (!strcmp(argv[i], "-np")) argv[i] = "--parallel";
    ls_server_params p = {.model_path = LS_DEFAULT_MODEL, .host = "127.0.0.1", .port = 8080, .n_parallel = 8,
                          .max_queue = 64, .timeout_s = 30, .max_body = 1 << 20, .max_tokens = 4096,
                          .max_messages = 256, .max_connections = 8192, .header_timeout_s = 10,
                          .body_timeout_s = 60, .reasoning_format = 1};
    p.spec = (ls_spec_params)LS_SPEC_PARAMS_INIT;
    const char *spec = "off", *kernels = "auto";
    bool progress = true;
    long long port = 8080, par = 8, ctx = 0, threads = 0, maxq = 64, timeout = 30, maxbody = 1 << 20, maxtok = 4096;
    long long dmax = 8, dmin = 1, dlayers = 0, dlookup = -1, maxconn = 8192, htimeout = 10, btimeout = 60;
    p.api_key = getenv("LOCKSTEP_API_KEY");
    if (p.api_key && !*p.api_key) p.api_key = NULL;
    double p_min = 0.5;
    enum { O_HOST = 256, O_PORT, O_KVMEM, O_SPEC, O_DMAX, O_DMIN, O_DMODEL, O_DLAYERS, O_KEY, O_MAXQ, O_TIMEOUT,
           O_MAXBODY, O_MAXTOK, O_ALIAS, O_INEXACT, O_NOPROBE, O_KERNELS, O_PAR, O_DEVICE, O_MAXCONN,
           O_HTIMEOUT, O_CORS, O_BTIMEOUT, O_REASON, O_TMPLFILE, O_NOPROGRESS,
           O_CACHEDIR, O_CACHEMAX, O_MDIR, O_MMAX, O_MMEM, O_PMIN, O_LOOKUP };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"host", required_argument, 0, O_HOST},
        {"port", required_argument, 0, O_PORT}, {"parallel", required_argument, 0, O_PAR},
        {"ctx-size", required_argument, 0, 'c'}, {"kv-mem", required_argument, 0, O_KVMEM},
        {"threads", required_argument, 0, 't'}, {"spec", required_argument, 0, O_SPEC},
        {"draft-max", required_argument, 0, O_DMAX}, {"draft-min", required_argument, 0, O_DMIN},
        {"draft-p-min", required_argument, 0, O_PMIN}, {"draft-lookup", required_argument, 0, O_LOOKUP},
        {"draft-model", required_argument, 0, O_DMODEL}, {"draft-layers", required_argument, 0, O_DLAYERS},
        {"api-key", required_argument, 0, O_KEY}, {"max-queue", required_argument, 0, O_MAXQ},
        {"timeout", required_argument, 0, O_TIMEOUT}, {"max-body", required_argument, 0, O_MAXBODY},
        {"max-tokens", required_argument, 0, O_MAXTOK}, {"alias", required_argument, 0, O_ALIAS},
        {"allow-inexact", no_argument, 0, O_INEXACT}, {"no-probe", no_argument, 0, O_NOPROBE},
        {"kernels", required_argument, 0, O_KERNELS}, {"device", required_argument, 0, O_DEVICE},
        {"max-connections", required_argument, 0, O_MAXCONN}, {"header-timeout", required_argument, 0, O_HTIMEOUT},
        {"body-timeout", required_argument, 0, O_BTIMEOUT},
        {"cors-origin", required_argument, 0, O_CORS}, {"reasoning-format", required_argument, 0, O_REASON},
        {"chat-template-file", required_argument, 0, O_TMPLFILE}, {"no-progress", no_argument, 0, O_NOPROGRESS},
        {"cache-dir", required_argument, 0, O_CACHEDIR}, {"cache-dir-max", required_argument, 0, O_CACHEMAX},
        {"models-dir", required_argument, 0, O_MDIR}, {"models-max", required_argument, 0, O_MMAX},
        {"models-memory", required_argument, 0, O_MMEM},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    /* -m repeated: the models, each named by the --alias after it (one before any -m names the first) */
    ls_server_model mods[256];
    int n_m = 0;
    const char *first_alias = NULL, *two_aliases = NULL; /* the -m given two (several models: an error) */
    long long mmax = 4;
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:c:t:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm':
            if (n_m == (int)(sizeof mods / sizeof *mods)) return cli_usage_error(cmd, "too many -m (at most 256)");
            mods[n_m++] = (ls_server_model){.path = optarg};
            break;
        case O_HOST: p.host = optarg; break;
        case O_PORT: if (!cli_parse_int(cmd, "--port", optarg, 1, 65535, &port)) return LS_EXIT_USAGE; break;
        case O_PAR: if (!cli_parse_int(cmd, "--parallel", optarg, 1, 1024, &par)) return LS_EXIT_USAGE; break;
        case 'c': if (!cli_parse_int(cmd, "--ctx-size", optarg, 2, 1 << 24, &ctx)) return LS_EXIT_USAGE; break;
        case O_KVMEM:
            if (!parse_size(optarg, &p.kv_mem))
                return cli_usage_error(cmd, "invalid value '%s' for --kv-mem (a size like 512M or 2G)", optarg);
            break;
        case 't': if (!cli_parse_int(cmd, "--threads", optarg, 1, 256, &threads)) return LS_EXIT_USAGE; break;
        case O_SPEC: spec = optarg; break;
        case O_DMAX: if (!cli_parse_int(cmd, "--draft-max", optarg, 1, 64, &dmax)) return LS_EXIT_USAGE; break;
        case O_PMIN: if (!cli_parse_float(cmd, "--draft-p-min", optarg, 0.0, 1.0, &p_min)) return LS_EXIT_USAGE; break;
        case O_LOOKUP: if (!cli_parse_int(cmd, "--draft-lookup", optarg, 0, 16, &dlookup)) return LS_EXIT_USAGE; break;
        case O_DMIN: if (!cli_parse_int(cmd, "--draft-min", optarg, 0, 64, &dmin)) return LS_EXIT_USAGE; break;
        case O_DMODEL: p.draft_model_path = optarg; break;
        case O_DLAYERS: if (!cli_parse_int(cmd, "--draft-layers", optarg, 1, 4096, &dlayers)) return LS_EXIT_USAGE; break;
        case O_KEY: p.api_key = optarg; break;
        case O_MAXQ: if (!cli_parse_int(cmd, "--max-queue", optarg, 0, 1 << 20, &maxq)) return LS_EXIT_USAGE; break;
        case O_TIMEOUT: if (!cli_parse_int(cmd, "--timeout", optarg, 1, 86400, &timeout)) return LS_EXIT_USAGE; break;
        case O_MAXBODY: if (!cli_parse_int(cmd, "--max-body", optarg, 256, 1LL << 30, &maxbody)) return LS_EXIT_USAGE; break;
        case O_MAXTOK: if (!cli_parse_int(cmd, "--max-tokens", optarg, 1, 1 << 24, &maxtok)) return LS_EXIT_USAGE; break;
        case O_ALIAS:
            p.model_alias = optarg; /* one model: the last --alias */
            if (n_m == 0 && first_alias) two_aliases = "(the first)";
            if (n_m > 0 && mods[n_m - 1].alias) two_aliases = mods[n_m - 1].path;
            if (n_m == 0) first_alias = optarg;
            else mods[n_m - 1].alias = optarg;
            break;
        case O_MDIR: p.models_dir = optarg; break;
        case O_MMAX: if (!cli_parse_int(cmd, "--models-max", optarg, 0, 1024, &mmax)) return LS_EXIT_USAGE; break;
        case O_MMEM:
            if (!parse_size(optarg, &p.models_memory))
                return cli_usage_error(cmd, "invalid value '%s' for --models-memory (a size like 512M or 8G)", optarg);
            break;
        case O_INEXACT: p.allow_inexact = true; break;
        case O_NOPROBE: p.no_probe = true; break;
        case O_KERNELS: kernels = optarg; break;
        case O_DEVICE: p.device = optarg; break;
        case O_MAXCONN: if (!cli_parse_int(cmd, "--max-connections", optarg, 1, 1 << 20, &maxconn)) return LS_EXIT_USAGE; break;
        case O_HTIMEOUT: if (!cli_parse_int(cmd, "--header-timeout", optarg, 1, 3600, &htimeout)) return LS_EXIT_USAGE; break;
        case O_BTIMEOUT: if (!cli_parse_int(cmd, "--body-timeout", optarg, 1, 86400, &btimeout)) return LS_EXIT_USAGE; break;
        case O_CORS:
            if (!*optarg || strpbrk(optarg, "\r\n ,"))
                return cli_usage_error(cmd, "--cors-origin '%s' must be one origin (https://host[:port]) or *", optarg);
            p.cors_origin = optarg;
            break;
        case O_REASON:
            if (!strcmp(optarg, "none")) p.reasoning_format = 0;
            else if (!strcmp(optarg, "deepseek")) p.reasoning_format = 1;
            else return cli_usage_error(cmd, "--reasoning-format '%s' must be none or deepseek", optarg);
            break;
        case O_TMPLFILE: p.chat_template_file = optarg; break;
        case O_NOPROGRESS: progress = false; break;
        case O_CACHEDIR:
            if (!*optarg) return cli_usage_error(cmd, "--cache-dir is empty");
            p.cache_dir = optarg;
            break;
        case O_CACHEMAX:
            if (!parse_size(optarg, &p.cache_dir_max))
                return cli_usage_error(cmd, "invalid value '%s' for --cache-dir-max (a size like 512M or 2G)", optarg);
            break;
        case 'h': fputs(help, stdout); return 0;
        case ':': return cli_usage_error(cmd, "flag %s needs a value", argv[optind - 1]);
        default: return cli_usage_error(cmd, "unknown flag '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    if (p.cache_dir_max && !p.cache_dir) return cli_usage_error(cmd, "--cache-dir-max needs --cache-dir DIR");
    if (n_m > 0) p.model_path = mods[0].path;
    const bool router = n_m > 1 || p.models_dir;
    if (router) { /* several models: each named, each loaded on first use */
        if (first_alias && n_m > 0 && mods[0].alias) two_aliases = mods[0].path;
        if (two_aliases) return cli_usage_error(cmd, "two --alias for -m '%s'", two_aliases);
        if (first_alias && n_m == 0) return cli_usage_error(cmd, "--alias names a -m model, and there is none");
        if (first_alias) mods[0].alias = first_alias;
        if (p.chat_template_file)
            return cli_usage_error(cmd, "--chat-template-file applies to one model: not with several models");
        for (int i = 0; i < n_m; i++)
            if (access(mods[i].path, R_OK) != 0) return cli_usage_error(cmd, "cannot read model file '%s'", mods[i].path);
        p.models = mods;
        p.n_models = n_m;
        p.models_max = (int)mmax;
    }
    ls_err err;
    if (ls_spec_kind_from_name(spec, &p.spec.kind, &err)) return cli_usage_error(cmd, "%s", err.msg);
    if (p.draft_model_path && p.spec.kind != LS_SPEC_DRAFT && p.spec.kind != LS_SPEC_MTP)
        return cli_usage_error(cmd, "--draft-model needs --spec draft or --spec mtp");
    if (p.spec.kind == LS_SPEC_DRAFT && !p.draft_model_path) return cli_usage_error(cmd, "--spec draft needs --draft-model PATH");
    if (dlookup < 0) dlookup = p.spec.kind == LS_SPEC_MTP ? 2 : 0;
    if (dlookup && (p.spec.kind == LS_SPEC_OFF || p.spec.kind == LS_SPEC_NGRAM))
        return cli_usage_error(cmd, "--draft-lookup applies to --spec mtp, draft and layerskip (--spec ngram always "
                                    "looks up)");
    if (dlookup > p.spec.ngram_max)
        return cli_usage_error(cmd, "--draft-lookup %lld exceeds the longest n-gram (%d)", dlookup, p.spec.ngram_max);
    if (p.draft_model_path && access(p.draft_model_path, R_OK) != 0)
        return cli_usage_error(cmd, "cannot read draft model file '%s'", p.draft_model_path);
    if (dmin > dmax) return cli_usage_error(cmd, "--draft-min %lld exceeds --draft-max %lld", dmin, dmax);
    if (strcmp(kernels, "auto") && strcmp(kernels, "wide") && strcmp(kernels, "narrow"))
        return cli_usage_error(cmd, "no kernel family '%s' in this build (available: auto, wide, narrow)", kernels);
    p.kernels = kernels;
    if (p.api_key && !*p.api_key) return cli_usage_error(cmd, "--api-key is empty");
    if (p.chat_template_file && access(p.chat_template_file, R_OK) != 0)
        return cli_usage_error(cmd, "cannot read chat template file '%s'", p.chat_template_file);
    p.progress = progress && isatty(STDERR_FILENO); /* never into a log file */
    if (!router && access(p.model_path, R_OK) != 0)
        return cli_usage_error(cmd, "cannot read model file '%s'%s", p.model_path,
                               strcmp(p.model_path, LS_DEFAULT_MODEL) ? "" : " (run `make model` to fetch it)");
    if (threads == 0) threads = cli_default_threads();
    p.port = (int)port;
    p.n_parallel = (int)par;
    p.n_ctx = (int)ctx;
    p.n_threads = (int)threads;
    p.max_queue = (int)maxq;
    p.timeout_s = (int)timeout;
    p.max_body = (size_t)maxbody;
    p.max_tokens = (int)maxtok;
    p.max_connections = (int)maxconn;
    p.header_timeout_s = (int)htimeout;
    p.body_timeout_s = (int)btimeout;
    p.spec.draft_max = (int32_t)dmax;
    p.spec.draft_min = (int32_t)dmin;
    p.spec.p_min = (float)p_min;
    p.spec.lookup_min = (int32_t)dlookup;
    p.spec.skip_first = (int32_t)dlayers;
    char memo_dir[4096];
    p.probe_memo_dir = cli_cache_dir(memo_dir, sizeof memo_dir);
    int rc = ls_server_run(&p, &err);
    if (rc) {
        fprintf(stderr, "lockstep serve: %s\n", err.msg);
        /* a bad flag, address or model file: the caller's input (exit 2) */
        return err.code == LS_E_INVALID || err.code == LS_E_IO || err.code == LS_E_FORMAT ||
                       err.code == LS_E_UNSUPPORTED
                   ? LS_EXIT_USAGE
                   : 1;
    }
    return 0;
}
