/* router.h - several models in one server (router mode, as llama-server names it): the
 * models a server may serve, loaded on first use within a budget (--models-max,
 * --models-memory), the least recently used idle one unloaded to make room.
 *
 * Each loaded model is a `server` of its own (its model, engine, engine thread, probe
 * verdict, slots and counters: ls_srv_model_open in server.c); the server that listens
 * (the front) holds the router, and http.c hands a request for model X to X's server.
 * A model is in use from the moment a request picks it (ls_srv_router_pick) until MHD
 * reports the request over (ls_srv_router_release), and while any job of it is alive
 * (server.n_jobs): only a model in use by nobody is unloaded. */
#ifndef LS_SERVER_ROUTER_H
#define LS_SERVER_ROUTER_H

#include <microhttpd.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/server.h"

typedef struct server server;
typedef struct ls_srv_router ls_srv_router;
typedef struct ls_srv_rmodel ls_srv_rmodel;

/* The router of p's models (p->models, p->n_models; p outlives it): NULL with err set when
 * a model's file cannot be read, two share a name, or one alone exceeds --models-memory. */
ls_srv_router *ls_srv_router_create(const ls_server_params *p, ls_err *err);
/* Unloads every model (the server has stopped: nothing is in flight) and frees r. */
void ls_srv_router_free(ls_srv_router *r);

/* The model server for a request to url on c (its body cn_body, len bytes, names the model
 * in "model"; a GET names it in ?model=), loaded first if it is not (concurrent requests
 * for a model being loaded wait for that load).  0 with *out and *held set (release *held
 * with ls_srv_router_release when the request is over), or the HTTP status of a refusal
 * with msg set: 400 (no model named where several are served, or not a string), 404
 * (no such model; msg lists those there are), 503 (it failed to load, its parity probe
 * failed, or no room within --timeout). */
unsigned ls_srv_router_pick(ls_srv_router *r, struct MHD_Connection *c, const char *body, size_t len,
                            server **out, ls_srv_rmodel **held, char *msg, size_t cap);
void ls_srv_router_release(ls_srv_router *r, ls_srv_rmodel *m);

/* GET /models and GET /v1/models (every model with its status and parity verdict),
 * GET /health (per model), POST /models/load and POST /models/unload {"model": NAME}. */
enum MHD_Result ls_srv_router_models(server *s, struct MHD_Connection *c);
enum MHD_Result ls_srv_router_health(server *s, struct MHD_Connection *c);
enum MHD_Result ls_srv_router_load(server *s, struct MHD_Connection *c, const char *body, size_t len, bool load);

/* Shutdown: requests in flight over every loaded model; cut: cancel them all now. */
int ls_srv_router_live(ls_srv_router *r, bool cut);

#endif
