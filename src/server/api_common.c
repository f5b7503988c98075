/* api_common.c - what the request adapters (api_responses.c, api_messages.c) share: key
 * checks that refuse unknown fields by name, and exact copies into the chat body. */
#include <stdio.h>
#include <string.h>

#include "server/server_impl.h"

bool ls_srv_in_list(const char *k, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(k, list[i])) return true;
    return false;
}

ls_status ls_srv_keys_in(const cJSON *o, const char *const *allowed, const char *path, ls_err *err) {
    const cJSON *v;
    cJSON_ArrayForEach(v, o) {
        if (cJSON_IsNull(v) || ls_srv_in_list(v->string, allowed)) continue;
        return ls_srv_error(err, LS_E_INVALID, "unsupported parameter '%s.%.60s': lockstep does not implement it (it is "
                                               "refused rather than ignored)", path, v->string);
    }
    return LS_OK;
}

cJSON *ls_srv_dup_exact(const cJSON *v) {
    if (!cJSON_IsNumber(v)) return cJSON_Duplicate(v, true);
    char b[40];
    snprintf(b, sizeof b, "%.17g", v->valuedouble);
    return cJSON_CreateRaw(b);
}

const cJSON *ls_srv_get(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return v && !cJSON_IsNull(v) ? v : NULL;
}
