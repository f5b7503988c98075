/* verdict.c - how `run` and `probe` print the parity probe's verdict. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const char *axis_label(ls_axis a, const ls_engine_info *ei, char *buf, size_t cap) {
    switch (a) {
    case LS_AXIS_BATCH_MIX: return "batch mix";
    case LS_AXIS_CHUNKED_PREFILL: return "chunked prefill";
    case LS_AXIS_PREFIX_CACHE: return "prefix cache";
    case LS_AXIS_BLOCK_VS_CHAIN: return "block vs chain";
    case LS_AXIS_THREADS: snprintf(buf, cap, "%d vs 1 threads", ei->n_threads); return buf;
    case LS_AXIS_ISA:
        if (strncmp(ei->device, "cpu", 3)) snprintf(buf, cap, "%.80s vs the CPU's scalar", ei->device);
        else snprintf(buf, cap, "%s vs scalar", ls_isa_name(ei->isa));
        return buf;
    default: return "?";
    }
}

void cli_print_verdict(const ls_probe_result *r, const ls_engine_info *ei) {
    char passed[512] = "", skipped[512] = "", lb[128];
    for (int a = 0; a < LS_AXIS_COUNT; a++) {
        const char *l = axis_label((ls_axis)a, ei, lb, sizeof lb);
        if (r->axis[a] == LS_AXIS_PASSED)
            snprintf(passed + strlen(passed), sizeof passed - strlen(passed), "%s%s", passed[0] ? ", " : "", l);
        else if (r->axis[a] == LS_AXIS_NOT_CHECKED)
            snprintf(skipped + strlen(skipped), sizeof skipped - strlen(skipped), "%s%s: %s", skipped[0] ? "; " : "", l,
                     r->why_not[a]);
    }
    char rows[64];
    if (r->memoized) snprintf(rows, sizeof rows, "memoized");
    else snprintf(rows, sizeof rows, "%d draws, %d logits rows", r->draws, r->n_rows);
    switch (r->verdict) {
    case LS_VERDICT_VERIFIED:
    case LS_VERDICT_SCOPED:
        fprintf(stderr, "parity: %s (%s byte-identical: %s; %.0f ms)\n", ls_verdict_name(r->verdict), rows, passed,
                r->ms);
        if (r->verdict == LS_VERDICT_SCOPED)
            fprintf(stderr, "parity: family %s failed and was withdrawn for rows that need parity (they run %s): %s\n",
                    r->kernels_before, r->kernels_after, r->detail);
        break;
    case LS_VERDICT_FAILED:
        fprintf(stderr, "parity: FAILED (%s; %s)\n", r->detail, rows);
        break;
    case LS_VERDICT_UNPROBED: fprintf(stderr, "parity: skipped (--no-probe)\n"); return;
    }
    if (skipped[0]) fprintf(stderr, "parity: not checked: %s\n", skipped);
}
