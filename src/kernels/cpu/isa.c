/* isa.c - instruction-set detection (CPUID + XGETBV) and LOCKSTEP_ISA. */
#include <cpuid.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels/cpu/internal.h"

static uint64_t ls_xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* Asks Linux for the use of AMX tile data (needed before the first tile instruction, or
 * it faults); true when granted. */
static bool ls_amx_permit(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
    return false;
#endif
}

/* Bitmask of supported ls_isa values (bit i = isa i).  Pure function of the CPU. */
static unsigned ls_isa_mask(void) {
    unsigned mask = 1u << LS_ISA_SCALAR;
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return mask;
    bool osxsave = c & (1u << 27), avx = c & (1u << 28), fma = c & (1u << 12), f16c = c & (1u << 29);
    if (!osxsave || !avx) return mask;
    uint64_t xcr0 = ls_xgetbv0();
    if ((xcr0 & 0x6) != 0x6) return mask; /* OS does not save XMM/YMM state */
    if (__get_cpuid_max(0, NULL) < 7) return mask;
    __cpuid_count(7, 0, a, b, c, d);
    bool avx2 = b & (1u << 5);
    if (avx2 && fma && f16c) mask |= 1u << LS_ISA_AVX2;
    if ((mask & (1u << LS_ISA_AVX2)) && __get_cpuid_max(0, NULL) >= 7) {
        unsigned a1, b1, c1, d1;
        __cpuid_count(7, 1, a1, b1, c1, d1);
        if (a1 & (1u << 4)) mask |= 1u << LS_ISA_AVXVNNI; /* AVX-VNNI: vpdpbusd on ymm (VEX) */
    }
    bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
    bool vnni = c & (1u << 11);
    bool zmm_os = (xcr0 & 0xe6) == 0xe6; /* opmask, ZMM_Hi256, Hi16_ZMM */
    if ((mask & (1u << LS_ISA_AVX2)) && f && dq && bw && vl && vnni && zmm_os) mask |= 1u << LS_ISA_AVX512;
    /* AMX: AMX-TILE and AMX-INT8 (CPUID 7.0 EDX bits 24, 25), the OS saving tile state
     * (XCR0 bits 17, 18), and Linux's permission for this process to use it (arch_prctl
     * ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA, kernel 5.16 on; granted once for every
     * thread of the process).  The level runs the AVX-512 kernels besides, so needs them. */
    bool amx = (d & (1u << 24)) && (d & (1u << 25)) && (xcr0 & (3u << 17)) == (3u << 17);
    if ((mask & (1u << LS_ISA_AVX512)) && amx && ls_amx_permit()) mask |= 1u << LS_ISA_AMX;
    return mask;
}

/* LOCKSTEP_CPU_HIDE=amx (or avx512, avxvnni, avx2) makes this process see a CPU without
 * AMX (without AVX-512 and AMX; without AVX-VNNI, AVX-512 and AMX; without AVX2 and all
 * above), as if it ran on an older machine: for tests of the paths
 * such a CPU takes, including that nothing there touches a hidden instruction set (a
 * kernel table lookup for one asserts).  Returns the bits to clear; an unknown value
 * hides nothing here, and ls_isa_from_env reports it. */
static unsigned ls_isa_hidden(void) {
    const char *h = getenv("LOCKSTEP_CPU_HIDE");
    if (!h || !*h) return 0; /* unset or empty: hide nothing (as LOCKSTEP_ISA) */
    const unsigned amx = 1u << LS_ISA_AMX, z = (1u << LS_ISA_AVX512) | amx;
    if (strcmp(h, "amx") == 0) return amx;
    if (strcmp(h, "avx512") == 0) return z;
    if (strcmp(h, "avxvnni") == 0) return (1u << LS_ISA_AVXVNNI) | z;
    if (strcmp(h, "avx2") == 0) return (1u << LS_ISA_AVX2) | (1u << LS_ISA_AVXVNNI) | z;
    return 0;
}

/* The CPU's answer never changes, so it is computed once (a cache, not a switch). */
static unsigned ls_isa_mask_cached(void) {
    static _Atomic unsigned cached; /* 0 = not yet computed; bit 31 marks "computed" */
    unsigned m = cached;
    if (!m) {
        m = (ls_isa_mask() & ~ls_isa_hidden()) | 0x80000000u;
        cached = m;
    }
    return m;
}

bool ls_isa_supported(ls_isa isa) {
    if ((unsigned)isa >= LS_ISA_COUNT) return false;
    return (ls_isa_mask_cached() >> isa) & 1u;
}

ls_isa ls_isa_best(void) {
    unsigned m = ls_isa_mask_cached();
    /* AMX is chosen only by LOCKSTEP_ISA=amx: on the one AMX Xeon measured it was not yet
     * faster than the AVX-512 level (docs/benchmarks.md, "The AMX level"). */
    if (m & (1u << LS_ISA_AVX512)) return LS_ISA_AVX512;
    if (m & (1u << LS_ISA_AVXVNNI)) return LS_ISA_AVXVNNI;
    if (m & (1u << LS_ISA_AVX2)) return LS_ISA_AVX2;
    return LS_ISA_SCALAR;
}

const char *ls_isa_name(ls_isa isa) {
    switch (isa) {
    case LS_ISA_SCALAR: return "scalar";
    case LS_ISA_AVX2: return "avx2";
    case LS_ISA_AVXVNNI: return "avxvnni";
    case LS_ISA_AVX512: return "avx512";
    case LS_ISA_AMX: return "amx";
    case LS_ISA_AUTO: return "auto";
    }
    return "unknown";
}

static const char *ls_isa_needs(ls_isa isa) {
    switch (isa) {
    case LS_ISA_AVX2: return "AVX2, FMA and F16C with OS support for YMM state";
    case LS_ISA_AVXVNNI: return "AVX2, FMA, F16C and AVX-VNNI (CPUID 7.1 EAX bit 4) with OS support for YMM state";
    case LS_ISA_AVX512: return "AVX-512 F/BW/VL/DQ/VNNI with OS support for ZMM state";
    case LS_ISA_AMX: return "the AVX-512 level plus AMX-TILE and AMX-INT8 with OS support for tile state and the "
                            "kernel's permission (arch_prctl)";
    default: return "nothing";
    }
}

ls_status ls_isa_from_name(const char *name, ls_isa *out, ls_err *err) {
    static const ls_isa all[] = {LS_ISA_SCALAR, LS_ISA_AVX2, LS_ISA_AVXVNNI, LS_ISA_AVX512, LS_ISA_AMX};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (name && strcmp(name, ls_isa_name(all[i])) == 0) {
            if (!ls_isa_supported(all[i]))
                return ls_err_set(err, LS_E_UNSUPPORTED,
                                  "LOCKSTEP_ISA=%s but this CPU lacks %s (%s); best available is %s", name,
                                  all[i] == LS_ISA_AMX      ? "AMX"
                                  : all[i] == LS_ISA_AVX512 ? "AVX-512"
                                  : all[i] == LS_ISA_AVXVNNI ? "AVX-VNNI"
                                                             : "AVX2",
                                  ls_isa_needs(all[i]),
                                  ls_isa_name(ls_isa_best()));
            *out = all[i];
            return LS_OK;
        }
    }
    return ls_err_set(err, LS_E_INVALID, "unknown instruction set '%s' (valid: scalar, avx2, avxvnni, avx512, amx)",
                      name ? name : "(null)");
}

ls_status ls_isa_from_env(ls_isa *out, ls_err *err) {
    const char *h = getenv("LOCKSTEP_CPU_HIDE");
    if (h && *h && strcmp(h, "amx") != 0 && strcmp(h, "avx512") != 0 && strcmp(h, "avxvnni") != 0 &&
        strcmp(h, "avx2") != 0)
        return ls_err_set(err, LS_E_INVALID, "LOCKSTEP_CPU_HIDE='%s': expected amx, avx512, avxvnni or avx2", h);
    const char *v = getenv("LOCKSTEP_ISA");
    if (!v || !*v) {
        *out = ls_isa_best();
        return LS_OK;
    }
    return ls_isa_from_name(v, out, err);
}
