/* tools.h - tool calling for the chat endpoint: rendering tools, earlier calls and their
 * results into plain messages for the chat template, and parsing calls out of the
 * generated text (tools.c says which formats).  Pure (cJSON and strings only), so the
 * request fuzzer and the unit test link it alone. */
#ifndef LS_SERVER_TOOLS_H
#define LS_SERVER_TOOLS_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

#include "lockstep.h"

typedef enum { LS_TOOLS_GENERIC = 0, LS_TOOLS_HERMES = 1 } ls_srv_tool_format;

/* JSON as Python's json.dumps(x, ensure_ascii=False) writes it (templates' tojson); free(). */
char *ls_srv_pyjson(const cJSON *v);
/* Checks a request's `tools` (each {"type": "function", "function": {"name", ...}}; an
 * empty list is no tools). */
ls_status ls_srv_tools_check(const cJSON *tools, ls_err *err);
/* The tool of that name in tools, or NULL. */
const cJSON *ls_srv_tool_named(const cJSON *tools, const char *name);
/* The conversation (messages, with roles tool and assistant tool_calls) as plain
 * messages in the format; tools NULL: no tools offered (earlier calls and results are
 * still written).  default_system: the template's own system prompt (hermes writes it
 * when the conversation has none), or NULL.  *out and its texts (*texts, n_out of them)
 * are the caller's to free (free each text, then both arrays), also on error. */
ls_status ls_srv_tools_messages(const cJSON *msgs, const cJSON *tools, ls_srv_tool_format fmt, const char *default_system,
                                ls_chat_msg **out, char ***texts, int *n_out, ls_err *err);
/* The JSON Schema a constrained tool reply must follow (a new cJSON), or NULL when the
 * reply is not constrained (hermes with "auto").  name: the one function allowed
 * (tool_choice named), or NULL for any of tools; required: a call must be made.
 *   generic: {"tool_call": {"name": <const>, "arguments": <its parameters>}}, and with
 *            "auto" also {"response": <string>} (llama.cpp constrains generic replies always);
 *   hermes:  {"name": <const>, "arguments": <its parameters>}, which the caller wraps in
 *            "<tool_call>\n" ... "\n</tool_call>". */
cJSON *ls_srv_tools_schema(const cJSON *tools, ls_srv_tool_format fmt, bool required, const char *name);

/* The GBNF of that constraint into *out (malloc'd; NULL when unconstrained), checked to
 * compile: hermes wraps the JSON in "<tool_call>\n" ... "\n</tool_call>".  An error (a
 * parameters schema the converter refuses) names it: LS_E_INVALID. */
ls_status ls_srv_tools_gbnf(const cJSON *tools, ls_srv_tool_format fmt, bool required, const char *name, char **out,
                            ls_err *err);

/* The generated text split into *content (malloc'd, or NULL when the reply is calls
 * only) and *calls (a cJSON array of {"id", "type": "function", "function": {"name",
 * "arguments": JSON text}}, or NULL when there are none).  Text that does not parse as
 * calls is content.  LS_E_NOMEM only. */
ls_status ls_srv_tools_parse(const char *text, size_t len, ls_srv_tool_format fmt, const char *id_prefix,
                             char **content, cJSON **calls);

#endif
