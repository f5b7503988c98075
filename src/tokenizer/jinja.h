/* jinja.h - a Jinja2 interpreter for chat templates (tokenizer.chat_template).
 *
 * It renders as transformers' apply_chat_template does: jinja2's
 * ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks on, the
 * loopcontrols extension (break / continue), keep_trailing_newline off, `tojson` as
 * json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...), and
 * the globals raise_exception(msg), strftime_now(fmt), range, namespace and dict.
 * jinja.c's header lists the statements, filters, tests and methods it knows; a
 * template that uses anything else fails to parse or render with an error naming it.
 *
 * The template is file input: parsing is depth-bounded and rendering is
 * work-bounded (LS_JINJA_MAX_* in jinja.c), and every failure is a status with a
 * message naming the line -- never a crash, a hang or an exit. */
#ifndef LS_TOKENIZER_JINJA_H
#define LS_TOKENIZER_JINJA_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "util/err.h"

typedef struct ls_jinja ls_jinja;

/* Parses len bytes of template source (valid UTF-8).  Bad syntax or an unsupported
 * construct: LS_E_INVALID naming the line.  Caller owns *out (ls_jinja_free). */
ls_status ls_jinja_parse(const char *src, size_t len, ls_jinja **out, ls_err *err);
void ls_jinja_free(ls_jinja *t);

/* Renders with the members of the JSON object vars as the template's variables
 * (NULL: none).  A JSON number that is integral and within +-2^53 is a Python int,
 * any other a float.  *out (NUL-terminated, *out_len bytes; out_len may be NULL) is
 * the caller's to free().  raise_exception, an undefined value used as a value, a
 * type error, or a limit reached: LS_E_INVALID with the reason and line. */
ls_status ls_jinja_render(const ls_jinja *t, const cJSON *vars, char **out, size_t *out_len, ls_err *err);

/* ls_jinja_parse + ls_jinja_render with vars given as JSON text (tests, ctypes). */
ls_status ls_jinja_render_json(const char *src, size_t len, const char *vars_json, char **out, ls_err *err);

#endif
