/* tokenize.c - `lockstep tokenize`: token ids of a text. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static const char *tok_help =
    "usage: lockstep tokenize [-m MODEL] [--json] [--no-special] [--add-special] TEXT\n"
    "\n"
    "  -m, --model PATH   GGUF model (default " LS_DEFAULT_MODEL ")\n"
    "      --json         one JSON object {\"tokens\": [...], \"pieces\": [...]}; a piece that is not\n"
    "                     whole UTF-8 characters is the array of its byte values\n"
    "      --no-special   treat special-token text like <|im_start|> as plain text\n"
    "      --add-special  add BOS/EOS as the model's flags say\n"
    "  -h, --help         this help\n";

/* A piece for --json: a string when its bytes are whole UTF-8 characters without NUL, else
 * the array of its byte values (a token may hold part of a character; llama-server's
 * /tokenize with_pieces writes such pieces the same way), so the output is always JSON. */
static cJSON *piece_json(const unsigned char *b, size_t n) {
    bool text = true;
    for (size_t i = 0; i < n && text;) {
        size_t k = b[i] ? ls_utf8_valid_len(b + i, n - i) : 0;
        if (k == 0) text = false;
        i += k;
    }
    if (text) return cJSON_CreateString((const char *)b);
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(b[i]));
    return a;
}

int cli_tokenize(int argc, char **argv) {
    const char *cmd = "tokenize", *model_path = LS_DEFAULT_MODEL;
    bool json = false, parse_special = true, add_special = false;
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"json", no_argument, 0, 'j'},
        {"no-special", no_argument, 0, 'S'},  {"add-special", no_argument, 0, 'A'},
        {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":m:h", opts, NULL)) != -1) {
        switch (o) {
        case 'm': model_path = optarg; break;
        case 'j': json = true; break;
        case 'S': parse_special = false; break;
        case 'A': add_special = true; break;
        case 'h': fputs(tok_help, stdout); return 0;
        case ':': return cli_usage_error(cmd, "flag %s needs a value", argv[optind - 1]);
        default: return cli_usage_error(cmd, "unknown flag '%s'", argv[optind - 1]);
        }
    }
    if (optind != argc - 1) return cli_usage_error(cmd, "give exactly one TEXT argument");
    const char *text = argv[optind];
    if (access(model_path, R_OK) != 0) return cli_usage_error(cmd, "cannot read model file '%s'", model_path);
    ls_err err;
    ls_model_params mp = LS_MODEL_PARAMS_INIT;
    mp.path = model_path;
    mp.load = LS_MODEL_LOAD_META; /* the tokenizer only: no weight is read */
    ls_model *m = ls_model_load(&mp, &err);
    if (!m) {
        fprintf(stderr, "lockstep tokenize: cannot load '%s': %s\n", model_path, err.msg);
        return LS_EXIT_USAGE;
    }
    size_t len = strlen(text), n = 0, cap = len + 8;
    int32_t *ids = malloc(cap * sizeof *ids);
    int rc = 1;
    if (!ids || ls_model_tokenize(m, text, len, add_special, parse_special, ids, cap, &n, &err)) {
        fprintf(stderr, "lockstep tokenize: %s\n", ids ? err.msg : "out of memory");
        goto out;
    }
    char buf[512];
    if (json) {
        cJSON *o2 = cJSON_CreateObject();
        cJSON *a = cJSON_AddArrayToObject(o2, "tokens");
        cJSON *p = cJSON_AddArrayToObject(o2, "pieces");
        for (size_t i = 0; i < n; i++) {
            cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
            size_t b = ls_model_token_bytes(m, ids[i], true, buf, sizeof buf - 1);
            if (b > sizeof buf - 1) b = sizeof buf - 1;
            buf[b] = '\0';
            cJSON_AddItemToArray(p, piece_json((const unsigned char *)buf, b));
        }
        char *s = cJSON_PrintUnformatted(o2);
        if (s) puts(s);
        free(s);
        cJSON_Delete(o2);
    } else {
        for (size_t i = 0; i < n; i++) {
            size_t b = ls_model_token_bytes(m, ids[i], true, buf, sizeof buf);
            printf("%6d  '%.*s'\n", ids[i], (int)(b < sizeof buf ? b : sizeof buf), buf);
        }
        printf("%zu tokens\n", n);
    }
    rc = 0;
out:
    free(ids);
    ls_model_free(m);
    return rc;
}
