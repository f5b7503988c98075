/* json_schema.h - JSON Schema to GBNF (grammar.h), for response_format json_schema,
 * llama-server's json_schema field and tool calls.
 *
 * Supported: type (object, array, string, number, integer, boolean, null, or a list of
 * them), properties, required (the others may be omitted; properties come in the order
 * the schema lists them), additionalProperties (false, true, or a schema; default
 * false), items, prefixItems, minItems, maxItems, enum, const, anyOf, oneOf (as anyOf),
 * $ref to #/$defs/... and #/definitions/..., minLength, maxLength, and the annotations
 * title, description, $schema, $id, $comment, default, examples, strict.  Any other
 * keyword is an error naming it (LS_E_UNSUPPORTED), never silently ignored.  A schema
 * past a size limit (json_schema.c: 64 levels, counts of 4,096, ...) is LS_E_INVALID
 * with a message naming the limit. */
#ifndef LS_SAMPLE_JSON_SCHEMA_H
#define LS_SAMPLE_JSON_SCHEMA_H

#include <stddef.h>

#include "lockstep.h"

/* ls_json_schema_to_gbnf, ls_json_object_gbnf: lockstep.h. */
/* The same from a parsed cJSON node (const cJSON *; void * keeps cJSON out of this header). */
char *ls_json_schema_to_gbnf_node(const void *schema, ls_err *err);

#endif
