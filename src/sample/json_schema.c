/* json_schema.c - JSON Schema -> GBNF (see json_schema.h).
 *
 * Every sub-schema becomes a rule; primitives share fixed rules (string, number, ...),
 * each value rule ends with `ws` (none, one space, or a newline and up to 20 spaces or
 * tabs: bounded, so a model cannot pad forever).  Objects list their properties in
 * the schema's order, each optional one may be left out, required ones may not; arrays
 * give prefixItems in order, then items, within minItems..maxItems.  What is generated
 * is always valid under the schema (a subset of it: e.g. property order is fixed), with
 * one documented gap: additional properties' keys are any string, so they can repeat a
 * named key. */
#include "sample/json_schema.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

#define JSON_PRIMS \
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n" \
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n" \
    "string ::= \"\\\"\" char* \"\\\"\" ws\n" \
    "integer ::= \"-\"? (\"0\" | [1-9] [0-9]*) ws\n" \
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]*) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)? ws\n" \
    "boolean ::= (\"true\" | \"false\") ws\n" \
    "null ::= \"null\" ws\n" \
    "value ::= object | array | string | number | boolean | null\n" \
    "object ::= \"{\" ws (string \":\" ws value (\",\" ws string \":\" ws value)*)? \"}\" ws\n" \
    "array ::= \"[\" ws (value (\",\" ws value)*)? \"]\" ws\n"

const char *ls_json_object_gbnf(void) { return "root ::= object\n" JSON_PRIMS; }

typedef struct {
    char *ref;
    uint32_t hash;
    int id;
} refmemo;

typedef struct {
    char *p;
    size_t len, cap;
} sbuf;

static bool sbuf_append(sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1024;
        while (nc < b->len + n + 1) nc *= 2;
        char *q = realloc(b->p, nc);
        if (!q) return false;
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
    return true;
}

/* What one schema may ask for.  Each is far above what a real response format or tool
 * needs, and they keep the GBNF made from any schema inside a 1 MiB request body within
 * grammar.c's limits and quick to compile (test_grammar: test_limits_named_and_fast):
 * counts expand into one rule per item or character, so they are bounded; so are the
 * nesting (each level is a recursion here), the rules, the GBNF's size, and the values of
 * one enum / alternatives of one anyOf, which the matcher keeps as parallel stacks. */
#define MAX_DEPTH 64          /* schemas inside one another */
#define MAX_COUNT 4096        /* minItems, maxItems, minLength, maxLength */
#define MAX_ALTERNATIVES 4096 /* values of one enum, schemas of one anyOf/oneOf, types of one type list */
#define MAX_PROPERTIES 1024   /* properties (and required names) of one object: checked pairwise */
#define MAX_REFS 1024         /* distinct $ref targets: each is looked up in a list */
#define MAX_SCHEMA_RULES 16384
#define MAX_GBNF_BYTES ((size_t)4 << 20)

typedef struct {
    sbuf out;
    const cJSON *root;
    ls_err *err;
    bool failed;
    int n_rules;
    refmemo *refs;
    int n_refs;
} conv;

__attribute__((format(printf, 2, 3))) static void emit(conv *c, const char *fmt, ...) {
    if (c->failed) return;
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    char *p = small;
    if ((size_t)n >= sizeof small) {
        if (!(p = malloc((size_t)n + 1))) goto nomem;
        va_start(ap, fmt);
        vsnprintf(p, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    if (c->out.len + (size_t)n > MAX_GBNF_BYTES) {
        if (p != small) free(p);
        c->failed = true;
        ls_err_set(c->err, LS_E_INVALID, "json_schema: the grammar it converts to is over the limit of %zu bytes",
                   MAX_GBNF_BYTES);
        return;
    }
    if (!sbuf_append(&c->out, p, (size_t)n)) {
        if (p != small) free(p);
        goto nomem;
    }
    if (p != small) free(p);
    return;
nomem:
    c->failed = true;
    ls_err_set(c->err, LS_E_NOMEM, "out of memory converting the JSON schema");
}

__attribute__((format(printf, 3, 4))) static int fail(conv *c, const char *path, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ls_err_set(c->err, LS_E_UNSUPPORTED, "JSON schema at %s: %s", path[0] ? path : "/", msg);
    return -1;
}

/* Whether s is well-formed UTF-8 (RFC 3629). */
static bool utf8_ok(const unsigned char *s) {
    while (*s) {
        unsigned char b = *s;
        int n = b < 0x80 ? 0 : b >= 0xC2 && b <= 0xDF ? 1 : (b & 0xF0) == 0xE0 ? 2 : b >= 0xF0 && b <= 0xF4 ? 3 : -1;
        if (n < 0) return false;
        uint32_t cp = n == 0 ? b : n == 1 ? (b & 0x1Fu) : n == 2 ? (b & 0x0Fu) : (b & 0x07u);
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (s[i] & 0x3Fu);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return false;
        s += n + 1;
    }
    return true;
}

/* s as a GBNF literal (quotes included). */
static void emit_lit(conv *c, const char *s) {
    if (!utf8_ok((const unsigned char *)s)) {
        if (!c->failed) {
            c->failed = true;
            ls_err_set(c->err, LS_E_INVALID, "JSON schema: a string in it is not valid UTF-8");
        }
        return;
    }
    emit(c, "\"");
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t run = 0; /* characters that need no escape: appended at once */
        while (p[run] >= 0x20 && p[run] != '"' && p[run] != '\\') run++;
        if (run) {
            emit(c, "%.*s", (int)run, (const char *)p);
            p += run;
            continue;
        }
        if (*p == '"') emit(c, "\\\"");
        else if (*p == '\\') emit(c, "\\\\");
        else if (*p == '\n') emit(c, "\\n");
        else if (*p == '\r') emit(c, "\\r");
        else if (*p == '\t') emit(c, "\\t");
        else emit(c, "\\x%02X", *p);
        p++;
    }
    emit(c, "\"");
}

/* v as a grammar: scalars as their compact JSON text, arrays and objects element by
 * element with ws where JSON allows it (what the generic rules allow there too). */
static void emit_json_lit(conv *c, const cJSON *v) {
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        bool obj = cJSON_IsObject(v), first = true;
        emit(c, obj ? "\"{\" ws" : "\"[\" ws");
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            if (!first) emit(c, " \",\" ws");
            first = false;
            emit(c, " ");
            if (obj) {
                cJSON *ks = cJSON_CreateString(e->string);
                emit_json_lit(c, ks);
                cJSON_Delete(ks);
                emit(c, " \":\" ws ");
            }
            emit_json_lit(c, e);
        }
        emit(c, obj ? " \"}\" ws" : " \"]\" ws");
        return;
    }
    char *t = v ? cJSON_PrintUnformatted(v) : NULL;
    if (!t) {
        c->failed = true;
        ls_err_set(c->err, LS_E_NOMEM, "out of memory converting the JSON schema");
        return;
    }
    emit_lit(c, t);
    emit(c, " ws");
    free(t);
}

static const char *const ANNOTATIONS[] = {"title", "description", "$schema", "$id", "$comment", "default",
                                          "examples", "$defs", "definitions", NULL};
static const char *const KEYWORDS[] = {"type", "properties", "required", "additionalProperties", "items",
                                       "prefixItems", "minItems", "maxItems", "enum", "const", "anyOf", "oneOf",
                                       "$ref", "minLength", "maxLength", NULL};

static bool in_list(const char *k, const char *const *l) {
    for (int i = 0; l[i]; i++)
        if (!strcmp(k, l[i])) return true;
    return false;
}

static int gen(conv *c, const cJSON *s, const char *path, int depth);

/* A limit passed: LS_E_INVALID (a schema past a limit is refused, not unsupported). */
__attribute__((format(printf, 3, 4))) static int over(conv *c, const char *path, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ls_err_set(c->err, LS_E_INVALID, "json_schema: %s (at %.200s)", msg, path[0] ? path : "/");
    return -1;
}

/* Reserves k rule numbers; -1 past MAX_SCHEMA_RULES (the error set). */
static int new_rules(conv *c, int k, const char *path) {
    if (c->n_rules > MAX_SCHEMA_RULES - k)
        return over(c, path, "the schema needs more than the limit of %d grammar rules", MAX_SCHEMA_RULES);
    int id = c->n_rules;
    c->n_rules += k;
    return id;
}

static int new_rule(conv *c) { return c->n_rules++; }

static void sub_path(char *out, size_t cap, const char *path, const char *a, const char *b) {
    snprintf(out, cap, "%s/%s%s%s", path, a, b ? "/" : "", b ? b : "");
}

/* A non-negative integer keyword, or -1 when absent. */
static long long count_kw(conv *c, const cJSON *s, const char *k, const char *path) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, k);
    if (!v) return -1;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble)) {
        fail(c, path, "'%s' must be a non-negative integer", k);
        return -2;
    }
    if (v->valuedouble > MAX_COUNT) {
        over(c, path, "'%s' %.0f is over the limit of %d", k, v->valuedouble > 1e15 ? 1e15 : v->valuedouble, MAX_COUNT);
        return -2;
    }
    return (long long)v->valuedouble;
}

static int gen_string(conv *c, const cJSON *s, const char *path) {
    long long mn = count_kw(c, s, "minLength", path), mx = count_kw(c, s, "maxLength", path);
    if (mn < -1 || mx < -1) return -1;
    if (mn < 0 && mx < 0) return -2; /* the shared rule */
    if (mn < 0) mn = 0;
    if (mx >= 0 && mx < mn) return fail(c, path, "maxLength %lld is below minLength %lld", mx, mn);
    int id = new_rule(c);
    if (mx >= 0) emit(c, "r%d ::= \"\\\"\" char{%lld,%lld} \"\\\"\" ws\n", id, mn, mx);
    else emit(c, "r%d ::= \"\\\"\" char{%lld,} \"\\\"\" ws\n", id, mn);
    return id;
}

static const char *prim_name(int v) {
    return v == -2 ? "string" : v == -3 ? "integer" : v == -4 ? "number" : v == -5 ? "boolean" : v == -6 ? "null" : v == -7 ? "object" : v == -8 ? "array" : "value";
}

/* The rule name of gen's result r into buf. */
static const char *rname(int r, char *buf, size_t cap) {
    if (r >= 0) snprintf(buf, cap, "r%d", r);
    else snprintf(buf, cap, "%s", prim_name(r));
    return buf;
}

static int gen_object(conv *c, const cJSON *s, const char *path, int depth) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties"),
                *req = cJSON_GetObjectItemCaseSensitive(s, "required"),
                *add = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return fail(c, path, "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return fail(c, path, "'required' must be a list of property names");
    const cJSON *r;
    cJSON_ArrayForEach(r, req) {
        if (!cJSON_IsString(r)) return fail(c, path, "'required' must be a list of property names");
        if (!cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            return fail(c, path, "required property '%.60s' is not in 'properties'", r->valuestring);
    }
    int n = props ? cJSON_GetArraySize(props) : 0;
    if (n > MAX_PROPERTIES) return over(c, path, "'properties' has %d entries, over the limit of %d", n, MAX_PROPERTIES);
    if (cJSON_GetArraySize(req) > MAX_PROPERTIES)
        return over(c, path, "'required' has %d entries, over the limit of %d", cJSON_GetArraySize(req), MAX_PROPERTIES);
    int *kv = calloc((size_t)n + 1, sizeof *kv);
    bool *must = calloc((size_t)n + 1, sizeof *must);
    if (!kv || !must) {
        free(kv);
        free(must);
        c->failed = true;
        return ls_err_set(c->err, LS_E_NOMEM, "out of memory converting the JSON schema"), -1;
    }
    int i = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, props) {
        char sp[512];
        sub_path(sp, sizeof sp, path, "properties", p->string);
        int vid = gen(c, p, sp, depth + 1);
        if (vid == -1) break;
        cJSON_ArrayForEach(r, req) if (!strcmp(r->valuestring, p->string)) must[i] = true;
        kv[i] = new_rule(c);
        cJSON *ks = cJSON_CreateString(p->string);
        char *key = ks ? cJSON_PrintUnformatted(ks) : NULL;
        cJSON_Delete(ks);
        if (!key) {
            c->failed = true;
            ls_err_set(c->err, LS_E_NOMEM, "out of memory converting the JSON schema");
            break;
        }
        emit(c, "r%d ::= ", kv[i]);
        emit_lit(c, key);
        free(key);
        char b[24];
        emit(c, " ws \":\" ws %s\n", rname(vid, b, sizeof b));
        i++;
    }
    /* additional properties: none (false, absent), any (true), or a schema */
    char addv[32] = "";
    if (!c->failed && add && !cJSON_IsFalse(add)) {
        if (cJSON_IsTrue(add)) {
            snprintf(addv, sizeof addv, "value");
        } else if (cJSON_IsObject(add)) {
            char sp[512];
            snprintf(sp, sizeof sp, "%s/additionalProperties", path);
            int aid = gen(c, add, sp, depth + 1);
            if (aid != -1) rname(aid, addv, sizeof addv);
        } else {
            fail(c, path, "'additionalProperties' must be true, false or a schema");
        }
    }
    int id = -1;
    if (!c->failed) {
        /* F_k: properties k.. with none emitted yet; R_k: after at least one */
        int base = new_rules(c, 2 * (n + 1), path);
        for (int k = 0; k < n && base >= 0; k++) {
            int F = base + 2 * k, R = F + 1, F1 = F + 2, R1 = F + 3;
            if (must[k]) {
                emit(c, "r%d ::= r%d r%d\n", F, kv[k], R1);
                emit(c, "r%d ::= \",\" ws r%d r%d\n", R, kv[k], R1);
            } else {
                emit(c, "r%d ::= r%d r%d | r%d\n", F, kv[k], R1, F1);
                emit(c, "r%d ::= \",\" ws r%d r%d | r%d\n", R, kv[k], R1, R1);
            }
        }
        int F = base + 2 * n, R = F + 1;
        if (base < 0) {
        } else if (addv[0]) {
            emit(c, "r%d ::= (string \":\" ws %s (\",\" ws string \":\" ws %s)*)?\n", F, addv, addv);
            emit(c, "r%d ::= (\",\" ws string \":\" ws %s)*\n", R, addv);
        } else {
            emit(c, "r%d ::= \"\"\nr%d ::= \"\"\n", F, R);
        }
        id = new_rule(c);
        emit(c, "r%d ::= \"{\" ws r%d \"}\" ws\n", id, base);
    }
    free(kv);
    free(must);
    return c->failed ? -1 : id;
}

static int gen_array(conv *c, const cJSON *s, const char *path, int depth) {
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(s, "prefixItems"), *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    if (pre && !cJSON_IsArray(pre)) return fail(c, path, "'prefixItems' must be a list of schemas");
    if (items && cJSON_IsArray(items))
        return fail(c, path, "'items' as a list (draft 4 tuples) is not supported: use 'prefixItems'");
    long long mn = count_kw(c, s, "minItems", path), mx = count_kw(c, s, "maxItems", path);
    if (mn < -1 || mx < -1) return -1;
    if (mn < 0) mn = 0;
    int m = pre ? cJSON_GetArraySize(pre) : 0;
    int item = -9; /* value */
    bool no_more = items && cJSON_IsFalse(items);
    if (items && !cJSON_IsBool(items)) {
        char sp[512];
        snprintf(sp, sizeof sp, "%s/items", path);
        if ((item = gen(c, items, sp, depth + 1)) == -1) return -1;
    }
    if (no_more && (mx < 0 || mx > m)) mx = m;
    if (mx >= 0 && mx < mn) return fail(c, path, "maxItems %lld is below minItems %lld (or the prefixItems allowed)", mx, mn);
    int K = (int)(mn > m ? mn : m);
    if (mx >= 0 && K > mx) K = (int)mx;
    int *el = calloc((size_t)K + 1, sizeof *el);
    if (!el) {
        c->failed = true;
        return ls_err_set(c->err, LS_E_NOMEM, "out of memory converting the JSON schema"), -1;
    }
    for (int i = 0; i < K && !c->failed; i++) {
        if (i < m) {
            char sp[512], ix[16];
            snprintf(ix, sizeof ix, "%d", i);
            sub_path(sp, sizeof sp, path, "prefixItems", ix);
            el[i] = gen(c, cJSON_GetArrayItem(pre, i), sp, depth + 1);
        } else {
            el[i] = item;
        }
    }
    int id = -1;
    if (!c->failed) {
        char a[24], b[24];
        int base = new_rules(c, 2 * (K + 1), path);
        for (int i = 0; i < K && base >= 0; i++) {
            int F = base + 2 * i, R = F + 1, R1 = F + 3;
            rname(el[i], a, sizeof a);
            if (i < mn) {
                emit(c, "r%d ::= %s r%d\n", F, a, R1);
                emit(c, "r%d ::= \",\" ws %s r%d\n", R, a, R1);
            } else {
                emit(c, "r%d ::= %s r%d | \"\"\n", F, a, R1);
                emit(c, "r%d ::= \",\" ws %s r%d | \"\"\n", R, a, R1);
            }
        }
        int F = base + 2 * K, R = F + 1;
        long long more = mx < 0 ? -1 : mx - K; /* items past K: unbounded, or up to `more` */
        rname(item, b, sizeof b);
        if (base < 0) {
        } else if (more == 0) {
            emit(c, "r%d ::= \"\"\nr%d ::= \"\"\n", F, R);
        } else if (more < 0) {
            emit(c, "r%d ::= (%s (\",\" ws %s)*)?\n", F, b, b);
            emit(c, "r%d ::= (\",\" ws %s)*\n", R, b);
        } else {
            emit(c, "r%d ::= (%s (\",\" ws %s){0,%lld})?\n", F, b, b, more - 1);
            emit(c, "r%d ::= (\",\" ws %s){0,%lld}\n", R, b, more);
        }
        id = new_rule(c);
        emit(c, "r%d ::= \"[\" ws r%d \"]\" ws\n", id, base);
    }
    free(el);
    return c->failed ? -1 : id;
}

static int gen_type(conv *c, const cJSON *s, const char *t, const char *path, int depth) {
    if (!strcmp(t, "string")) return gen_string(c, s, path);
    if (!strcmp(t, "integer")) return -3;
    if (!strcmp(t, "number")) return -4;
    if (!strcmp(t, "boolean")) return -5;
    if (!strcmp(t, "null")) return -6;
    if (!strcmp(t, "object")) return gen_object(c, s, path, depth);
    if (!strcmp(t, "array")) return gen_array(c, s, path, depth);
    return fail(c, path, "unknown type '%.40s' (expected object, array, string, number, integer, boolean or null)", t);
}

static int alternatives(conv *c, const cJSON *list, const char *kw, const char *path, int depth) {
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0) return fail(c, path, "'%s' must be a non-empty list", kw);
    if (cJSON_GetArraySize(list) > MAX_ALTERNATIVES)
        return over(c, path, "'%s' has %d schemas, over the limit of %d", kw, cJSON_GetArraySize(list), MAX_ALTERNATIVES);
    int n = cJSON_GetArraySize(list), *alt = calloc((size_t)n, sizeof *alt);
    if (!alt) {
        c->failed = true;
        return ls_err_set(c->err, LS_E_NOMEM, "out of memory converting the JSON schema"), -1;
    }
    int i = 0;
    const cJSON *a;
    cJSON_ArrayForEach(a, list) {
        char sp[512], ix[16];
        snprintf(ix, sizeof ix, "%d", i);
        sub_path(sp, sizeof sp, path, kw, ix);
        if ((alt[i++] = gen(c, a, sp, depth + 1)) == -1) break;
    }
    int id = -1;
    if (!c->failed) {
        id = new_rule(c);
        emit(c, "r%d ::= ", id);
        char b[24];
        for (i = 0; i < n; i++) emit(c, "%s%s", i ? " | " : "", rname(alt[i], b, sizeof b));
        emit(c, "\n");
    }
    free(alt);
    return c->failed ? -1 : id;
}

static uint32_t str_hash(const char *s) {
    uint32_t h = 2166136261u;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

static int gen_ref(conv *c, const char *ref, const char *path, int depth) {
    uint32_t h = str_hash(ref);
    for (int i = 0; i < c->n_refs; i++)
        if (c->refs[i].hash == h && !strcmp(c->refs[i].ref, ref)) return c->refs[i].id;
    if (c->n_refs >= MAX_REFS)
        return over(c, path, "the schema uses more than the limit of %d distinct '$ref' targets", MAX_REFS);
    const char *name = NULL, *defs = NULL;
    if (!strncmp(ref, "#/$defs/", 8)) defs = "$defs", name = ref + 8;
    else if (!strncmp(ref, "#/definitions/", 14)) defs = "definitions", name = ref + 14;
    else return fail(c, path, "'$ref' '%.80s' is not supported (only #/$defs/NAME and #/definitions/NAME)", ref);
    const cJSON *target = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c->root, defs), name);
    if (!target) return fail(c, path, "'$ref' '%.80s' names no schema in %s", ref, defs);
    refmemo *rm = realloc(c->refs, (size_t)(c->n_refs + 1) * sizeof *rm);
    char *dup = rm ? malloc(strlen(ref) + 1) : NULL;
    if (rm) c->refs = rm;
    if (!dup) {
        c->failed = true;
        return ls_err_set(c->err, LS_E_NOMEM, "out of memory converting the JSON schema"), -1;
    }
    strcpy(dup, ref);
    int id = new_rule(c); /* named before its body: recursive schemas refer to it */
    c->refs[c->n_refs++] = (refmemo){dup, h, id};
    char sp[512];
    snprintf(sp, sizeof sp, "/%s/%s", defs, name);
    int body = gen(c, target, sp, depth + 1);
    if (body == -1) return -1;
    char b[24];
    emit(c, "r%d ::= %s\n", id, rname(body, b, sizeof b));
    return id;
}

/* The rule for schema s: >= 0 a generated rule r<N>, <= -2 a shared one (prim_name),
 * -1 on error (c->err set). */
static int gen(conv *c, const cJSON *s, const char *path, int depth) {
    if (c->failed) return -1;
    if (depth > MAX_DEPTH) return over(c, path, "the schema nests deeper than the limit of %d levels", MAX_DEPTH);
    if (c->n_rules > MAX_SCHEMA_RULES)
        return over(c, path, "the schema needs more than the limit of %d grammar rules", MAX_SCHEMA_RULES);
    if (cJSON_IsTrue(s)) return -9;
    if (cJSON_IsFalse(s)) return fail(c, path, "the schema 'false' allows nothing");
    if (!cJSON_IsObject(s)) return fail(c, path, "a schema must be an object or a boolean");
    const cJSON *k;
    cJSON_ArrayForEach(k, s) {
        if (in_list(k->string, ANNOTATIONS)) continue;
        if (!in_list(k->string, KEYWORDS))
            return fail(c, path, "keyword '%.60s' is not supported (docs/server.md lists the supported ones)", k->string);
    }
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (ref) {
        if (!cJSON_IsString(ref)) return fail(c, path, "'$ref' must be a string");
        cJSON_ArrayForEach(k, s) if (strcmp(k->string, "$ref") && !in_list(k->string, ANNOTATIONS))
            return fail(c, path, "keyword '%.60s' beside '$ref' is not supported", k->string);
        return gen_ref(c, ref->valuestring, path, depth);
    }
    const cJSON *cst = cJSON_GetObjectItemCaseSensitive(s, "const"), *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (cst) {
        int id = new_rule(c);
        emit(c, "r%d ::= ", id);
        emit_json_lit(c, cst);
        emit(c, "\n");
        return c->failed ? -1 : id;
    }
    if (en) {
        if (!cJSON_IsArray(en) || cJSON_GetArraySize(en) == 0) return fail(c, path, "'enum' must be a non-empty list");
        if (cJSON_GetArraySize(en) > MAX_ALTERNATIVES)
            return over(c, path, "'enum' has %d values, over the limit of %d", cJSON_GetArraySize(en), MAX_ALTERNATIVES);
        int id = new_rule(c);
        emit(c, "r%d ::= ", id);
        const cJSON *v;
        bool first = true;
        cJSON_ArrayForEach(v, en) {
            emit(c, first ? "" : " | ");
            emit_json_lit(c, v);
            first = false;
        }
        emit(c, "\n");
        return c->failed ? -1 : id;
    }
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    if (!any) any = cJSON_GetObjectItemCaseSensitive(s, "oneOf");
    if (any) {
        if (cJSON_GetObjectItemCaseSensitive(s, "type"))
            return fail(c, path, "'type' beside 'anyOf'/'oneOf' is not supported (put it in each alternative)");
        return alternatives(c, any, cJSON_GetObjectItemCaseSensitive(s, "anyOf") ? "anyOf" : "oneOf", path, depth);
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (!t) {
        if (cJSON_GetObjectItemCaseSensitive(s, "properties") || cJSON_GetObjectItemCaseSensitive(s, "additionalProperties") ||
            cJSON_GetObjectItemCaseSensitive(s, "required"))
            return gen_object(c, s, path, depth);
        if (cJSON_GetObjectItemCaseSensitive(s, "items") || cJSON_GetObjectItemCaseSensitive(s, "prefixItems"))
            return gen_array(c, s, path, depth);
        if (cJSON_GetObjectItemCaseSensitive(s, "minLength") || cJSON_GetObjectItemCaseSensitive(s, "maxLength"))
            return gen_string(c, s, path);
        return -9;
    }
    if (cJSON_IsString(t)) return gen_type(c, s, t->valuestring, path, depth);
    if (!cJSON_IsArray(t) || cJSON_GetArraySize(t) == 0) return fail(c, path, "'type' must be a string or a non-empty list");
    if (cJSON_GetArraySize(t) > MAX_ALTERNATIVES)
        return over(c, path, "'type' lists %d types, over the limit of %d", cJSON_GetArraySize(t), MAX_ALTERNATIVES);
    int n = cJSON_GetArraySize(t), *alt = calloc((size_t)n, sizeof *alt), i = 0;
    if (!alt) {
        c->failed = true;
        return ls_err_set(c->err, LS_E_NOMEM, "out of memory converting the JSON schema"), -1;
    }
    const cJSON *ty;
    cJSON_ArrayForEach(ty, t) {
        if (!cJSON_IsString(ty)) {
            free(alt);
            return fail(c, path, "'type' must be a string or a list of strings");
        }
        if ((alt[i++] = gen_type(c, s, ty->valuestring, path, depth)) == -1) break;
    }
    int id = -1;
    if (!c->failed) {
        id = new_rule(c);
        emit(c, "r%d ::= ", id);
        char b[24];
        for (i = 0; i < n; i++) emit(c, "%s%s", i ? " | " : "", rname(alt[i], b, sizeof b));
        emit(c, "\n");
    }
    free(alt);
    return c->failed ? -1 : id;
}

char *ls_json_schema_to_gbnf_node(const void *schema, ls_err *err) {
    conv c = {.root = schema, .err = err};
    int r = gen(&c, schema, "", 0);
    if (r != -1 && !c.failed) {
        char b[24];
        emit(&c, "root ::= %s\n" JSON_PRIMS, rname(r, b, sizeof b));
    }
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
    free(c.refs);
    if (c.failed || r == -1) {
        free(c.out.p);
        return NULL;
    }
    return c.out.p;
}

char *ls_json_schema_to_gbnf(const char *text, size_t len, ls_err *err) {
    cJSON *j = cJSON_ParseWithLength(text, len);
    if (!j) {
        ls_err_set(err, LS_E_INVALID, "the JSON schema is not valid JSON");
        return NULL;
    }
    char *g = ls_json_schema_to_gbnf_node(j, err);
    cJSON_Delete(j);
    return g;
}
