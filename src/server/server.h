/* server.h - `lockstep serve`: the batched engine behind OpenAI's HTTP API
 * (libmicrohttpd + cJSON).  A client of lockstep.h like the CLI.  See docs/server.md. */
#ifndef LS_SERVER_SERVER_H
#define LS_SERVER_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lockstep.h"

/* One model of a server that serves several (router mode). */
typedef struct {
    const char *path;          /* its GGUF file (a split model's first shard) */
    const char *alias;         /* the name requests use in "model" */
} ls_server_model;

typedef struct {
    const char *model_path;
    const char *model_alias;   /* the "model" name in responses (default: the file name) */
    const char *host;          /* default 127.0.0.1 */
    int port;                  /* default 8080 */
    int n_parallel;            /* sequences decoded together (default 8) */
    int n_ctx;                 /* per sequence (default min(trained, 4096)) */
    int64_t kv_mem;            /* bytes of KV cache (default: n_ctx x n_parallel positions) */
    int n_threads;
    const char *api_key;       /* NULL: no authentication */
    int max_queue;             /* requests waiting beyond n_parallel before 503 (default 64) */
    int timeout_s;             /* idle connection timeout, and the shutdown grace period (default 30) */
    size_t max_body;           /* bytes (default 1 MiB) */
    int max_tokens;            /* cap on a request's max_tokens (default 4096) */
    int max_messages;          /* default 256 */
    ls_spec_params spec;       /* kind LS_SPEC_OFF: no speculation */
    const char *draft_model_path;
    bool allow_inexact;
    bool no_probe;
    const char *probe_memo_dir; /* lockstep's cache directory: the probe's verdicts and the model file's
                                 * hash (ls_model_params.cache_dir) are kept there; NULL: none */
    const char *kernels;       /* "auto", "wide", "narrow" */
    const char *device;        /* "cpu" (NULL) or "cuda" */
    int max_connections;       /* open connections beyond this get 503 (default 8192) */
    int header_timeout_s;      /* a request head must arrive within this (default 10) */
    int body_timeout_s;        /* a request body must arrive within this of its head (default 60) */
    const char *cors_origin;   /* NULL: no CORS headers; "*" or one origin */
    int reasoning_format;      /* LS_SRV_REASONING_*: 1 (deepseek) splits think blocks out of chat replies */
    const char *chat_template_file; /* NULL: the model file's template; else a Jinja template file */
    bool progress;             /* say on stderr that the startup probe runs, and how long it took */
    const char *cache_dir;     /* the persistent prefix cache's directory (--cache-dir); NULL: none */
    int64_t cache_dir_max;     /* bytes its block files may take (--cache-dir-max); 0 = 1 GiB */
    /* Router mode (n_models > 0 or models_dir; model_path and model_alias are then unused):
     * the models the server may serve, each loaded on first use (router.h).  A model's alias
     * NULL: its file name without .gguf (and without a split model's -00001-of-0000N). */
    const ls_server_model *models;
    int n_models;
    int models_max;            /* at most this many loaded at once (0: no limit) */
    int64_t models_memory;     /* bytes: loaded models' files together at most this (0: no limit) */
    const char *models_dir;    /* router mode also: every *.gguf here (a split model by its first shard) */
} ls_server_params;

/* Loads the model file (a bad one fails here, before anything listens), binds,
 * creates the engine (GET /health answers 503 meanwhile), probes, serves until
 * SIGINT or SIGTERM, drains in-flight requests within timeout_s (what is left ends
 * "cancelled"), and returns 0; or returns non-zero with err set when it cannot start. */
int ls_server_run(const ls_server_params *p, ls_err *err);

#endif
