/*
 * A test double of the NVIDIA Management Library (libnvidia-ml.so.1) for cgstat's tests.
 *
 * It implements the subset the unmodified pynvml module calls on cgstat's paths, driven by
 * a scenario file named in $NVML_DOUBLE_SCENARIO (format: tests/nvml/README.md). The file is
 * parsed again whenever its inode, size or mtime changes, checked on every call, so a test
 * can change the world between two ticks of a running process.
 *
 * Build variants leave symbols out, as old drivers do (a missing symbol is what a real old
 * driver gives: dlsym fails and pynvml raises FunctionNotFound):
 *   -DNO_V3     no nvmlDevice{Compute,Graphics}RunningProcesses_v3 (drivers < 510)
 *   -DNO_V2     no ..._v2 (drivers 430/440: only the unversioned 16-byte struct)
 *   -DNO_PUI    no nvmlDeviceGetProcessesUtilizationInfo (drivers < 550)
 *   -DNO_MEMV2  no nvmlDeviceGetMemoryInfo_v2 (drivers < 510)
 *   -DNO_CER    no nvmlDeviceGetCurrentClocksEventReasons (drivers < 535: only ...ThrottleReasons)
 *   -DNO_MPS3   no nvmlDeviceGetMPSComputeRunningProcesses_v3 (drivers < 510: only _v2)
 *   -DNO_GPM    no nvmlGpm* (drivers < 520)
 *   -DPROC_V3_32  the _v3 process lists fill a 32-byte struct (usedGpuCcProtectedMemory after
 *               the instance IDs) and nvmlDeviceGetConfComputeMemSizeInfo exists: drivers 535.43-535.86
 *   -DSCENARIO_ONCE  the scenario parsed at the first call only, never checked again: for
 *               benches that take the double's own per-call stat() out of what they measure
 *
 * $NVML_DOUBLE_LOG, when set, names a file each device call and event wait appends one
 * line to ("<function>" or "nvmlEventSetWait_v2 timeout=<ms>"): how tests check what is
 * called how often.
 *
 * $NVML_DOUBLE_INIT_MARK, when set, names a file nvmlInitWithFlags creates, as Debian's real
 * libnvidia-ml run as root creates /dev/nvidiactl: how tests prove no init happened.
 *
 * Struct layouts and protocols: /work/shared/notes/nvml.md and pynvml.py 13.615.71.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;

enum {
    OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, NO_PERMISSION = 4,
    NOT_FOUND = 6, INSUFFICIENT_SIZE = 7, DRIVER_NOT_LOADED = 9, LIBRARY_NOT_FOUND = 12,
    FUNCTION_NOT_FOUND = 13, GPU_IS_LOST = 15, ARGUMENT_VERSION_MISMATCH = 25, UNKNOWN = 999
};

#define MAX_GPUS 16
#define MAX_MIG 8
#define MAX_PROCS 4096
#define MAX_SAMPLES 4096
#define NA_ULL 0xFFFFFFFFFFFFFFFFULL

/* a value from the scenario: a number, or an error code the call returns instead */
typedef struct { unsigned long long v; int err; } val_t;

#define GPM_IDS 64  /* GPM metric ids the double knows (NVML_GPM_METRIC_* below 64) */

typedef struct { double v[GPM_IDS]; int err[GPM_IDS]; } gpm_vals_t;

typedef struct {
    int present;
    char uuid[96], name[96];
    val_t mem_total, mem_used, mem_reserved;
    unsigned gi, ci;
    gpm_vals_t gpm;
} mig_t;

typedef struct {
    int present, lost, handle_err;
    char uuid[96], name[96];
    val_t mem_total, mem_used, mem_reserved, util_gpu, util_mem, temp, power_mw, mig, procutil;
    val_t compute_err, graphics_err, mps_err;
    int mig_empty;             /* what an empty MIG slot answers (default NOT_FOUND) */
    int parent_list;           /* what a MIG GPU's own process lists answer (nvml.h: privileged) */
    unsigned util_rows;        /* pad each utilization answer to this many rows with PID 0, timestamp 0 ones */
    int field_type;            /* nvmlValueType_t the field values come in (default 3: unsigned long long) */
    /* device health: numbers, or an error the call returns */
    val_t sm_clock, mem_clock, sm_clock_max, mem_clock_max, reasons, viol_power, viol_thermal,
          energy_mj, power_limit_mw, mem_temp, pcie_tx_kbs, pcie_rx_kbs, pcie_tx_bytes, pcie_rx_bytes,
          replay, nvlink_tx_kib, nvlink_rx_kib, enc, dec, ecc_cor, ecc_unc, remap_cor, remap_unc,
          remap_pending, remap_failure, retired_sbe, retired_dbe, retired_pending, compute_mode,
          persistence, minor, events, gpm, serial_err, pci_err;
    char serial[96], bus_id[96];
    gpm_vals_t gpmv;
    unsigned mig_max;
    mig_t migs[MAX_MIG];
} gpu_t;

enum { K_COMPUTE, K_GRAPHICS, K_MPS };
typedef struct { int gpu, mig, graphics; unsigned pid; unsigned long long mem; } proc_t;  /* graphics: K_* */

#define MAX_XIDS 1024
typedef struct { int gpu, id, alias, foreign; unsigned gi, ci; unsigned long long code; } xid_t;

enum { TS_ABS, TS_BUSY, TS_ONCE, TS_PERIODIC, TS_AHEAD };
typedef struct {
    int gpu; unsigned pid, sm, mem, enc, dec, jpg, ofa;
    int ts_kind; unsigned long long ts, delta, frozen;
    int stale;  /* served whatever lastSeen says (a driver ignoring it, nvtop #110) */
    /* ts=periodic: the driver's ring buffer of one sample every `period` µs, busy for the
     * first `busy` µs of every `cycle` µs, the last `depth` periods kept */
    unsigned long long period, cycle, busy, depth;
} sample_t;

static struct {
    int init_code, count_err;
    int epoch, stale_code;
    char driver[80];
    gpu_t gpus[MAX_GPUS];
    int ngpus;
    proc_t procs[MAX_PROCS];
    int nprocs;
    sample_t samples[MAX_SAMPLES];
    int nsamples;
    val_t cuda;
    xid_t xids[MAX_XIDS];
    int nxids;
    unsigned long long fake_now;  /* `clock now=<µs>`: the time every call sees (0: the real clock) */
    char sleep_fn[96];            /* `sleep fn=<function> ms=<n>`: that call sleeps first (a hung driver) */
    unsigned sleep_ms;
} S;

static struct stat last_st;
static int loaded;        /* a scenario has been parsed */
static int initialised;   /* nvmlInit refcount */

/* ---- scenario parsing ---------------------------------------------------------------- */

static int err_word(const char *s) {
    if (!strcmp(s, "unsupported")) return NOT_SUPPORTED;
    if (!strcmp(s, "notfound")) return NOT_FOUND;
    if (!strcmp(s, "noperm")) return NO_PERMISSION;
    if (!strcmp(s, "lost")) return GPU_IS_LOST;
    if (!strcmp(s, "unknown")) return UNKNOWN;
    if (!strcmp(s, "driver_not_loaded")) return DRIVER_NOT_LOADED;
    if (!strcmp(s, "invalid")) return INVALID_ARGUMENT;
    if (s[0] == '!') return atoi(s + 1);
    return 0;
}

static val_t parse_val(const char *s) {
    val_t r = {0, 0};
    if (!strcmp(s, "NA")) { r.v = NA_ULL; return r; }
    r.err = err_word(s);
    if (!r.err) r.v = strtoull(s, NULL, 0);
    return r;
}

static val_t V(unsigned long long v) { val_t r = {v, 0}; return r; }

/* next token "key=value" or "key=\"quoted value\"" of a line; returns 0 at the end */
static int next_kv(char **p, char **key, char **value) {
    char *s = *p;
    while (*s == ' ' || *s == '\t') s++;
    if (!*s || *s == '#' || *s == '\n') return 0;
    *key = s;
    while (*s && *s != '=' && *s != ' ' && *s != '\t' && *s != '\n') s++;
    if (*s != '=') { if (*s) *s++ = 0; *value = (char *)""; *p = s; return 1; }
    *s++ = 0;
    if (*s == '"') {
        *value = ++s;
        while (*s && *s != '"') s++;
    } else {
        *value = s;
        while (*s && *s != ' ' && *s != '\t' && *s != '\n') s++;
    }
    if (*s) *s++ = 0;
    *p = s;
    return 1;
}

static void copy(char *dst, const char *src) { snprintf(dst, 96, "%s", src); }

#define F(name) {#name, offsetof(gpu_t, name)}
static const struct { const char *key; size_t off; } GPU_VALS[] = {
    F(sm_clock), F(mem_clock), F(sm_clock_max), F(mem_clock_max), F(reasons), F(viol_power),
    F(viol_thermal), F(energy_mj), F(power_limit_mw), F(mem_temp), F(pcie_tx_kbs), F(pcie_rx_kbs),
    F(pcie_tx_bytes), F(pcie_rx_bytes), F(replay), F(nvlink_tx_kib), F(nvlink_rx_kib), F(enc), F(dec),
    F(ecc_cor), F(ecc_unc), F(remap_cor), F(remap_unc), F(remap_pending), F(remap_failure),
    F(retired_sbe), F(retired_dbe), F(retired_pending), F(compute_mode), F(persistence), F(minor),
    F(events), F(gpm), {"mps", offsetof(gpu_t, mps_err)}, {"serial_err", offsetof(gpu_t, serial_err)},
    {"pci_err", offsetof(gpu_t, pci_err)},
};
#undef F

/* gpm_<id>=<value or error>: a GPM metric's value over any two samples */
static int gpm_kv(gpm_vals_t *g, const char *k, const char *v) {
    int id;
    if (strncmp(k, "gpm_", 4)) return 0;
    id = atoi(k + 4);
    if (id <= 0 || id >= GPM_IDS) return 1;
    g->err[id] = err_word(v);
    if (!g->err[id]) g->v[id] = strtod(v, NULL);
    return 1;
}

static int gpu_kv(gpu_t *g, const char *k, const char *v) {
    size_t i;
    for (i = 0; i < sizeof GPU_VALS / sizeof GPU_VALS[0]; i++)
        if (!strcmp(k, GPU_VALS[i].key)) { *(val_t *)((char *)g + GPU_VALS[i].off) = parse_val(v); return 1; }
    if (!strcmp(k, "serial")) { copy(g->serial, v); return 1; }
    if (!strcmp(k, "bus_id")) { copy(g->bus_id, v); return 1; }
    return gpm_kv(&g->gpmv, k, v);
}

static void parse_line(char *line) {
    char *p = line, *word, *k, *v;
    while (*p == ' ' || *p == '\t') p++;
    if (!*p || *p == '#' || *p == '\n') return;
    word = p;
    while (*p && *p != ' ' && *p != '\t' && *p != '\n') p++;
    if (*p) *p++ = 0;

    if (!strcmp(word, "init")) {
        if (next_kv(&p, &k, &v)) S.init_code = !strcmp(k, "ok") ? 0 : err_word(k);
    } else if (!strcmp(word, "driver")) {
        if (next_kv(&p, &k, &v)) snprintf(S.driver, sizeof S.driver, "%s", k);
    } else if (!strcmp(word, "count")) {
        if (next_kv(&p, &k, &v)) S.count_err = err_word(k);
    } else if (!strcmp(word, "epoch")) {
        while (next_kv(&p, &k, &v)) {
            if (!strcmp(k, "n")) S.epoch = atoi(v);
            else if (!strcmp(k, "stale")) S.stale_code = err_word(v);
        }
    } else if (!strcmp(word, "gpu")) {
        gpu_t g;
        int idx = -1;
        memset(&g, 0, sizeof g);
        g.present = 1;
        g.mem_total = V(80ULL << 30);
        g.mig = V(0);
        g.mig_max = 7;
        g.persistence = V(1);  /* on, as datacenter hosts run it (nvidia-persistenced) */
        g.mig_empty = NOT_FOUND;
        g.field_type = 3;
        while (next_kv(&p, &k, &v)) {
            if (!strcmp(k, "index")) idx = atoi(v);
            else if (!strcmp(k, "uuid")) copy(g.uuid, v);
            else if (!strcmp(k, "name")) copy(g.name, v);
            else if (!strcmp(k, "mem_total")) g.mem_total = parse_val(v);
            else if (!strcmp(k, "mem_used")) g.mem_used = parse_val(v);
            else if (!strcmp(k, "mem_reserved")) g.mem_reserved = parse_val(v);
            else if (!strcmp(k, "util_gpu")) g.util_gpu = parse_val(v);
            else if (!strcmp(k, "util_mem")) g.util_mem = parse_val(v);
            else if (!strcmp(k, "temp")) g.temp = parse_val(v);
            else if (!strcmp(k, "power_mw")) g.power_mw = parse_val(v);
            else if (!strcmp(k, "mig")) g.mig = parse_val(v);
            else if (!strcmp(k, "mig_max")) g.mig_max = (unsigned)atoi(v);
            else if (!strcmp(k, "procutil")) g.procutil = parse_val(v);
            else if (!strcmp(k, "compute")) g.compute_err = parse_val(v);
            else if (!strcmp(k, "graphics")) g.graphics_err = parse_val(v);
            else if (!strcmp(k, "lost")) g.lost = atoi(v);
            else if (!strcmp(k, "handle")) g.handle_err = err_word(v);
            else if (!strcmp(k, "mig_empty")) g.mig_empty = err_word(v);
            else if (!strcmp(k, "parent_list")) g.parent_list = err_word(v);
            else if (!strcmp(k, "util_rows")) g.util_rows = (unsigned)atoi(v);
            else if (!strcmp(k, "field_type")) g.field_type = atoi(v);
            else gpu_kv(&g, k, v);
        }
        if (idx < 0) idx = S.ngpus;
        if (idx >= MAX_GPUS) return;
        if (!g.serial[0]) snprintf(g.serial, 96, "13200000000%02d", idx);
        if (!g.bus_id[0]) snprintf(g.bus_id, 96, "00000000:%02X:00.0", 0x10 + idx);
        if (!g.minor.v && !g.minor.err) g.minor.v = (unsigned)idx;
        if (!g.uuid[0]) snprintf(g.uuid, 96, "GPU-00000000-0000-0000-0000-%012d", idx);
        if (!g.name[0]) copy(g.name, "NVIDIA Double");
        S.gpus[idx] = g;
        if (idx + 1 > S.ngpus) S.ngpus = idx + 1;
    } else if (!strcmp(word, "mig")) {
        mig_t m;
        int gpu = 0, idx = 0;
        memset(&m, 0, sizeof m);
        m.present = 1;
        m.mem_total = V(10ULL << 30);
        while (next_kv(&p, &k, &v)) {
            if (!strcmp(k, "gpu")) gpu = atoi(v);
            else if (!strcmp(k, "index")) idx = atoi(v);
            else if (!strcmp(k, "uuid")) copy(m.uuid, v);
            else if (!strcmp(k, "name")) copy(m.name, v);
            else if (!strcmp(k, "mem_total")) m.mem_total = parse_val(v);
            else if (!strcmp(k, "mem_used")) m.mem_used = parse_val(v);
            else if (!strcmp(k, "mem_reserved")) m.mem_reserved = parse_val(v);
            else if (!strcmp(k, "gi")) m.gi = (unsigned)atoi(v);
            else if (!strcmp(k, "ci")) m.ci = (unsigned)atoi(v);
            else gpm_kv(&m.gpm, k, v);
        }
        if (gpu < 0 || gpu >= MAX_GPUS || idx < 0 || idx >= MAX_MIG) return;
        if (!m.uuid[0]) snprintf(m.uuid, 96, "MIG-00000000-0000-0000-%04d-%012d", gpu, idx);
        if (!m.name[0]) copy(m.name, "NVIDIA Double MIG 1g.10gb");
        S.gpus[gpu].migs[idx] = m;
    } else if (!strcmp(word, "proc")) {
        proc_t q = {0, -1, 0, 0, 0};
        if (S.nprocs >= MAX_PROCS) return;
        while (next_kv(&p, &k, &v)) {
            if (!strcmp(k, "gpu")) q.gpu = atoi(v);
            else if (!strcmp(k, "mig")) q.mig = atoi(v);
            else if (!strcmp(k, "pid")) q.pid = (unsigned)strtoul(v, NULL, 0);
            else if (!strcmp(k, "mem")) q.mem = parse_val(v).v;
            else if (!strcmp(k, "type")) q.graphics = !strcmp(v, "graphics") ? K_GRAPHICS : !strcmp(v, "mps") ? K_MPS : K_COMPUTE;
        }
        S.procs[S.nprocs++] = q;
    } else if (!strcmp(word, "cuda")) {
        if (next_kv(&p, &k, &v)) S.cuda = parse_val(k);
    } else if (!strcmp(word, "xid")) {
        xid_t x = {0, 0, 0, 0, 0xFFFFFFFFu, 0xFFFFFFFFu, 0};
        if (S.nxids >= MAX_XIDS) return;
        x.id = S.nxids + 1;
        while (next_kv(&p, &k, &v)) {
            if (!strcmp(k, "gpu")) x.gpu = atoi(v);
            else if (!strcmp(k, "code")) x.code = strtoull(v, NULL, 0);
            else if (!strcmp(k, "id")) x.id = atoi(v);
            else if (!strcmp(k, "alias")) x.alias = atoi(v);
            else if (!strcmp(k, "foreign")) x.foreign = atoi(v);
            else if (!strcmp(k, "gi")) x.gi = (unsigned)atoi(v);
            else if (!strcmp(k, "ci")) x.ci = (unsigned)atoi(v);
        }
        S.xids[S.nxids++] = x;
    } else if (!strcmp(word, "sleep")) {
        while (next_kv(&p, &k, &v)) {
            if (!strcmp(k, "fn")) snprintf(S.sleep_fn, sizeof S.sleep_fn, "%s", v);
            else if (!strcmp(k, "ms")) S.sleep_ms = (unsigned)atoi(v);
        }
    } else if (!strcmp(word, "clock")) {
        while (next_kv(&p, &k, &v))
            if (!strcmp(k, "now")) S.fake_now = strtoull(v, NULL, 10);
    } else if (!strcmp(word, "sample")) {
        sample_t s;
        if (S.nsamples >= MAX_SAMPLES) return;
        memset(&s, 0, sizeof s);
        s.ts_kind = TS_BUSY;
        s.period = 166667;
        s.depth = 4096;
        while (next_kv(&p, &k, &v)) {
            if (!strcmp(k, "gpu")) s.gpu = atoi(v);
            else if (!strcmp(k, "pid")) s.pid = (unsigned)strtoul(v, NULL, 0);
            else if (!strcmp(k, "sm")) s.sm = (unsigned)atoi(v);
            else if (!strcmp(k, "mem")) s.mem = (unsigned)atoi(v);
            else if (!strcmp(k, "enc")) s.enc = (unsigned)atoi(v);
            else if (!strcmp(k, "dec")) s.dec = (unsigned)atoi(v);
            else if (!strcmp(k, "jpg")) s.jpg = (unsigned)atoi(v);
            else if (!strcmp(k, "ofa")) s.ofa = (unsigned)atoi(v);
            else if (!strcmp(k, "period")) s.period = strtoull(v, NULL, 10);
            else if (!strcmp(k, "cycle")) s.cycle = strtoull(v, NULL, 10);
            else if (!strcmp(k, "busy")) s.busy = strtoull(v, NULL, 10);
            else if (!strcmp(k, "depth")) s.depth = strtoull(v, NULL, 10);
            else if (!strcmp(k, "stale")) s.stale = atoi(v);
            else if (!strcmp(k, "ts")) {
                if (!strcmp(v, "busy")) s.ts_kind = TS_BUSY;
                else if (!strncmp(v, "busy-", 5)) { s.ts_kind = TS_BUSY; s.delta = strtoull(v + 5, NULL, 10); }
                else if (!strcmp(v, "once")) s.ts_kind = TS_ONCE;
                else if (!strcmp(v, "periodic")) s.ts_kind = TS_PERIODIC;
                else if (!strncmp(v, "ahead+", 6)) { s.ts_kind = TS_AHEAD; s.delta = strtoull(v + 6, NULL, 10); }
                else { s.ts_kind = TS_ABS; s.ts = strtoull(v, NULL, 10); }
            }
        }
        if (!s.period) s.period = 1;
        if (!s.cycle) s.cycle = s.period;
        if (!s.busy || s.busy > s.cycle) s.busy = s.cycle;
        S.samples[S.nsamples++] = s;
    }
}

/* Parse the scenario again when the file changed (inode, size or mtime). */
static void refresh(void) {
#ifdef SCENARIO_ONCE
    if (loaded) return;
#endif
    const char *path = getenv("NVML_DOUBLE_SCENARIO");
    struct stat st;
    FILE *f;
    char line[1024];
    if (!path || stat(path, &st) != 0) {
        if (!loaded) { memset(&S, 0, sizeof S); S.init_code = DRIVER_NOT_LOADED; loaded = 1; }
        return;
    }
    if (loaded && st.st_ino == last_st.st_ino && st.st_size == last_st.st_size &&
        st.st_mtim.tv_sec == last_st.st_mtim.tv_sec && st.st_mtim.tv_nsec == last_st.st_mtim.tv_nsec)
        return;
    f = fopen(path, "r");
    if (!f) return;
    memset(&S, 0, sizeof S);
    S.stale_code = GPU_IS_LOST;
    snprintf(S.driver, sizeof S.driver, "550.54.15");
    S.cuda.v = 12040;
    while (fgets(line, sizeof line, f)) parse_line(line);
    fclose(f);
    last_st = st;
    loaded = 1;
}

/* ---- handles: opaque pointers that encode (epoch, gpu, MIG slot) -------------------- */

#define HBASE 0x6e76000000000000ULL
#define HALIAS 0x0000010000000000ULL

static nvmlDevice_t make_handle(int gpu, int mig) {
    return (nvmlDevice_t)(uintptr_t)(HBASE | ((unsigned long long)(S.epoch & 0xffff) << 16) |
                                     ((unsigned long long)(mig + 1) << 8) | (unsigned)gpu);
}

/* Resolve a handle; returns OK or the error every call on it gives. */
static int resolve(nvmlDevice_t h, gpu_t **g, mig_t **m, int *gpu_index, int *mig_index) {
    unsigned long long x = (unsigned long long)(uintptr_t)h;
    int gi, mi;
    refresh();
    if (!initialised) return UNINITIALIZED;
    x &= ~HALIAS;  /* another pointer value for the same device (an event's handle) */
    if ((x & 0xffff000000000000ULL) != HBASE) return INVALID_ARGUMENT;
    if ((int)((x >> 16) & 0xffff) != (S.epoch & 0xffff)) return S.stale_code;
    gi = (int)(x & 0xff);
    mi = (int)((x >> 8) & 0xff) - 1;
    if (gi >= S.ngpus || !S.gpus[gi].present) return INVALID_ARGUMENT;
    *g = &S.gpus[gi];
    if ((*g)->lost) return GPU_IS_LOST;
    *m = NULL;
    if (mi >= 0) {
        if (mi >= MAX_MIG || !(*g)->migs[mi].present) return INVALID_ARGUMENT;
        *m = &(*g)->migs[mi];
    }
    if (gpu_index) *gpu_index = gi;
    if (mig_index) *mig_index = mi;
    return OK;
}

static void log_call(const char *what, long arg, int with_arg) {
    const char *path = getenv("NVML_DOUBLE_LOG");
    FILE *f;
    if (!path || !(f = fopen(path, "a"))) return;
    if (with_arg) fprintf(f, "%s timeout=%ld\n", what, arg);
    else fprintf(f, "%s\n", what);
    fclose(f);
}

#define RESOLVE(h) gpu_t *g; mig_t *m; int gidx, midx; \
    int rc_; log_call(__func__, 0, 0); rc_ = resolve(h, &g, &m, &gidx, &midx); maybe_sleep(__func__); \
    (void)gidx; (void)midx; if (rc_) return rc_;

/* `sleep fn=<name> ms=<n>`: that call blocks first, as calls did for tens of seconds under
 * ECC error storms (DCGM #313) */
static void maybe_sleep(const char *fn) {
    struct timespec ts;
    if (!S.sleep_ms || strcmp(fn, S.sleep_fn)) return;
    ts.tv_sec = S.sleep_ms / 1000;
    ts.tv_nsec = (long)(S.sleep_ms % 1000) * 1000000L;
    while (nanosleep(&ts, &ts) != 0) {}
}

static int put_val(val_t x, unsigned *out) { if (x.err) return x.err; *out = (unsigned)x.v; return OK; }

static int mig_on(gpu_t *g) { return !g->mig.err && g->mig.v == 1; }

/* ---- initialisation and system ------------------------------------------------------ */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned flags) {
    const char *mark = getenv("NVML_DOUBLE_INIT_MARK");
    (void)flags;
    if (mark) {  /* what Debian's libnvidia-ml does as root: a device node made */
        FILE *f = fopen(mark, "a");
        if (f) fclose(f);
    }
    refresh();
    if (S.init_code) return S.init_code;
    initialised++;
    return OK;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
    if (!initialised) return UNINITIALIZED;
    initialised--;
    return OK;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case OK: return "Success";
    case UNINITIALIZED: return "Uninitialized";
    case INVALID_ARGUMENT: return "Invalid Argument";
    case NOT_SUPPORTED: return "Not Supported";
    case NO_PERMISSION: return "Insufficient Permissions";
    case NOT_FOUND: return "Not Found";
    case INSUFFICIENT_SIZE: return "Insufficient Size";
    case DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case GPU_IS_LOST: return "GPU is lost";
    case ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
    }
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned length) {
    refresh();
    if (!initialised) return UNINITIALIZED;
    if (strlen(S.driver) + 1 > length) return INSUFFICIENT_SIZE;
    strcpy(version, S.driver);
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *count) {
    refresh();
    if (!initialised) return UNINITIALIZED;
    if (S.count_err) return S.count_err;
    *count = (unsigned)S.ngpus;
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_t *device) {
    refresh();
    if (!initialised) return UNINITIALIZED;
    if (index >= (unsigned)S.ngpus || !S.gpus[index].present) return INVALID_ARGUMENT;
    if (S.gpus[index].lost) return GPU_IS_LOST;
    if (S.gpus[index].handle_err) return S.gpus[index].handle_err;
    *device = make_handle((int)index, -1);
    return OK;
}

/* ---- identity and gauges ------------------------------------------------------------- */

static int put_str(const char *s, char *buf, unsigned length) {
    if (strlen(s) + 1 > length) return INSUFFICIENT_SIZE;
    strcpy(buf, s);
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char *uuid, unsigned length) {
    RESOLVE(h);
    return put_str(m ? m->uuid : g->uuid, uuid, length);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char *name, unsigned length) {
    RESOLVE(h);
    return put_str(m ? m->name : g->name, name, length);
}

typedef struct { unsigned long long total, free, used; } mem_v1_t;
typedef struct { unsigned version; unsigned long long total, reserved, free, used; } mem_v2_t;

static int memory_of(gpu_t *g, mig_t *m, unsigned long long *t, unsigned long long *r,
                     unsigned long long *u) {
    val_t vt = m ? m->mem_total : g->mem_total, vr = m ? m->mem_reserved : g->mem_reserved,
          vu = m ? m->mem_used : g->mem_used;
    if (vt.err) return vt.err;
    if (vr.err) return vr.err;
    if (vu.err) return vu.err;
    *t = vt.v; *r = vr.v; *u = vu.v;
    return OK;
}

/* v1 `used` includes the reserved memory, as on drivers >= 510 (gpustat #141) */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t h, mem_v1_t *mem) {
    unsigned long long t, r, u;
    int rc;
    RESOLVE(h);
    if ((rc = memory_of(g, m, &t, &r, &u))) return rc;
    mem->total = t;
    mem->used = u + r;
    mem->free = t - u - r;
    return OK;
}

#ifndef NO_MEMV2
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t h, mem_v2_t *mem) {
    unsigned long long t, r, u;
    int rc;
    RESOLVE(h);
    if (mem->version != 0x02000028) return ARGUMENT_VERSION_MISMATCH;
    if ((rc = memory_of(g, m, &t, &r, &u))) return rc;
    mem->total = t;
    mem->reserved = r;
    mem->used = u;
    mem->free = t - u - r;
    return OK;
}
#endif

typedef struct { unsigned gpu, memory; } util_t;

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t h, util_t *u) {
    int rc;
    RESOLVE(h);
    if (m || mig_on(g)) return NOT_SUPPORTED;
    if ((rc = put_val(g->util_gpu, &u->gpu))) return rc;
    return put_val(g->util_mem, &u->memory);
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t h, int sensor, unsigned *temp) {
    RESOLVE(h);
    if (m) return NOT_SUPPORTED;
    if (sensor != 0) return INVALID_ARGUMENT;
    return put_val(g->temp, temp);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t h, unsigned *mw) {
    RESOLVE(h);
    if (m) return NOT_SUPPORTED;
    return put_val(g->power_mw, mw);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t h, unsigned *current, unsigned *pending) {
    int rc;
    RESOLVE(h);
    if (m) return NOT_SUPPORTED;
    if ((rc = put_val(g->mig, current))) return rc;
    *pending = *current;
    return OK;
}

/* ---- MIG ---------------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t h, unsigned *count) {
    RESOLVE(h);
    if (m) return NOT_SUPPORTED;
    if (g->mig.err) return g->mig.err;
    *count = mig_on(g) ? g->mig_max : 0;
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t h, unsigned index, nvmlDevice_t *mig) {
    RESOLVE(h);
    if (m) return INVALID_ARGUMENT;
    if (!mig_on(g)) return INVALID_ARGUMENT;
    if (index >= MAX_MIG || !g->migs[index].present) return g->mig_empty;
    *mig = make_handle(gidx, (int)index);
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t h, unsigned *is_mig) {
    RESOLVE(h);
    *is_mig = m != NULL;
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t h, nvmlDevice_t *parent) {
    RESOLVE(h);
    if (!m) return INVALID_ARGUMENT;
    *parent = make_handle(gidx, -1);
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t h, unsigned *id) {
    RESOLVE(h);
    if (!m) return INVALID_ARGUMENT;
    *id = m->gi;
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t h, unsigned *id) {
    RESOLVE(h);
    if (!m) return INVALID_ARGUMENT;
    *id = m->ci;
    return OK;
}

/* ---- running processes -------------------------------------------------------------- */

typedef struct { unsigned pid; unsigned long long usedGpuMemory; } proc_v1_t;  /* 16 bytes */
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId; } proc_v2_t;  /* 24 */
typedef struct { unsigned pid; unsigned long long usedGpuMemory; unsigned gpuInstanceId, computeInstanceId;
                 unsigned long long usedGpuCcProtectedMemory; } proc_v3_32_t;  /* 32: drivers 535.43-535.86 */

/* On a MIG-enabled GPU the parent lists every process (with its instance IDs); a MIG
 * device handle lists the processes of that instance. */
static int procs_of(gpu_t *g, int gidx, int midx, int graphics, proc_t **out, int max) {
    int n = 0, i;
    (void)g;
    for (i = 0; i < S.nprocs; i++) {
        proc_t *q = &S.procs[i];
        if (q->gpu != gidx || q->graphics != graphics) continue;  /* graphics: the K_* kind */
        if (midx >= 0 && q->mig != midx) continue;
        if (out && n < max) out[n] = q;
        n++;
    }
    return n;
}

static proc_t *scratch[MAX_PROCS];

static int running(nvmlDevice_t h, int graphics, unsigned *count, void *buf, int ver) {
    int n, i, rc;
    val_t e;
    RESOLVE(h);
    e = graphics == K_MPS ? g->mps_err : graphics ? g->graphics_err : g->compute_err;
    if (e.err) return e.err;
    if (!m && mig_on(g) && g->parent_list) return g->parent_list;
    if (!count) return INVALID_ARGUMENT;
    n = procs_of(g, gidx, midx, graphics, scratch, MAX_PROCS);
    if (n == 0) { *count = 0; return OK; }
    if (*count < (unsigned)n || !buf) { *count = (unsigned)n; return INSUFFICIENT_SIZE; }
    for (i = 0; i < n; i++) {
        proc_t *q = scratch[i];
        if (ver == 1) {
            proc_v1_t *o = (proc_v1_t *)buf + i;
            o->pid = q->pid;
            o->usedGpuMemory = q->mem;
        } else if (ver == 332) {
            proc_v3_32_t *o = (proc_v3_32_t *)buf + i;
            o->pid = q->pid;
            o->usedGpuMemory = q->mem;
            o->gpuInstanceId = o->computeInstanceId = 0xFFFFFFFFu;
            o->usedGpuCcProtectedMemory = 0;
        } else {
            proc_v2_t *o = (proc_v2_t *)buf + i;
            o->pid = q->pid;
            o->usedGpuMemory = q->mem;
            if (q->mig >= 0 && q->mig < MAX_MIG) {
                o->gpuInstanceId = g->migs[q->mig].gi;
                o->computeInstanceId = g->migs[q->mig].ci;
            } else {
                o->gpuInstanceId = o->computeInstanceId = 0xFFFFFFFFu;
            }
        }
    }
    *count = (unsigned)n;
    rc = OK;
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t h, unsigned *c, proc_v1_t *p) { return running(h, 0, c, p, 1); }
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t h, unsigned *c, proc_v1_t *p) { return running(h, 1, c, p, 1); }
#ifndef NO_V2
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t h, unsigned *c, proc_v2_t *p) { return running(h, 0, c, p, 2); }
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t h, unsigned *c, proc_v2_t *p) { return running(h, 1, c, p, 2); }
#endif
#ifdef PROC_V3_32
#define V3_STRUCT 332
typedef struct { unsigned version; unsigned long long protectedMemSizeKib, unprotectedMemSizeKib; } cc_mem_t;
EXPORT nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t h, cc_mem_t *m_) { RESOLVE(h); (void)m_; return NOT_SUPPORTED; }
#else
#define V3_STRUCT 3
#endif
#ifndef NO_V3
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned *c, proc_v2_t *p) { return running(h, 0, c, p, V3_STRUCT); }
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t h, unsigned *c, proc_v2_t *p) { return running(h, 1, c, p, V3_STRUCT); }
#endif

/* ---- per-process utilization samples ------------------------------------------------ */

static unsigned long long now_us(void) {
    struct timespec ts;
    if (S.fake_now) return S.fake_now;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
}

/* The timestamp a sample has at this call: `busy` samples are always new (now, and never
 * older than lastSeen + 1, as a real running process keeps producing samples); `once`
 * ones take the time of the first call that serves them and keep it. */
static unsigned long long sample_ts(sample_t *s, unsigned long long now, unsigned long long last) {
    unsigned long long t;
    switch (s->ts_kind) {
    case TS_BUSY:
        t = now - s->delta;
        if (!s->delta && t <= last) t = last + 1;
        return t;
    case TS_ONCE:
        if (!s->frozen) s->frozen = now > last ? now : last + 1;
        return s->frozen;
    case TS_AHEAD:
        return now + s->delta;
    default:
        return s->ts;
    }
}

static sample_t **sbuf;
static unsigned long long *tsbuf;
static int scap;

static void put(int n, sample_t *s, unsigned long long t) {
    if (n >= scap) {
        scap = scap ? scap * 2 : 1024;
        sbuf = realloc(sbuf, sizeof *sbuf * (size_t)scap);
        tsbuf = realloc(tsbuf, sizeof *tsbuf * (size_t)scap);
        if (!sbuf || !tsbuf) abort();
    }
    sbuf[n] = s;
    tsbuf[n] = t;
}

/* Collect the samples of one GPU newer than `last` (into sbuf/tsbuf when `fill`); returns
 * their number. `total`: what the sizing call answers (every statement of the GPU, and
 * every periodic sample the buffer holds). */
static int collect(int gidx, unsigned long long last, int fill, int *total) {
    unsigned long long now = now_us();
    int n = 0, i;
    *total = 0;
    for (i = 0; i < S.nsamples; i++) {
        sample_t *s = &S.samples[i];
        unsigned long long t;
        if (s->gpu != gidx) continue;
        if (s->ts_kind == TS_PERIODIC) {
            /* the periods k*period the buffer still holds, newer than last, busy ones only */
            unsigned long long kept = s->depth * s->period, from, k;
            from = now > kept ? now - kept : 0;
            if (last > from) from = last;
            for (k = from / s->period + 1; k * s->period <= now; k++) {
                t = k * s->period;
                if (t % s->cycle >= s->busy) continue;
                (*total)++;
                if (fill) put(n, s, t);
                n++;
            }
            continue;
        }
        (*total)++;
        if (s->ts_kind == TS_ONCE && !s->frozen && !fill) {
            n++;  /* counted; its time is fixed when it is served */
            continue;
        }
        t = sample_ts(s, now, last);
        if (t <= last && !s->stale) continue;
        if (fill) put(n, s, t);
        n++;
    }
    /* util_rows: the answer padded with PID 0, timestamp 0 rows (nvtop #110: 100 rows for 3 processes) */
    if (n && gidx >= 0 && gidx < S.ngpus) {
        static sample_t zero;
        while ((unsigned)n < S.gpus[gidx].util_rows) {
            if (fill) put(n, &zero, 0);
            n++;
            (*total)++;
        }
        if ((unsigned)*total < S.gpus[gidx].util_rows) *total = (int)S.gpus[gidx].util_rows;
    }
    return n;
}

static int util_allowed(gpu_t *g, mig_t *m) {
    if (m || mig_on(g)) return NOT_SUPPORTED;
    if (g->procutil.err) return g->procutil.err;
    return OK;
}

typedef struct { unsigned pid; unsigned long long timeStamp; unsigned smUtil, memUtil, encUtil, decUtil; } sample_v1_t;  /* 32 */

EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t h, sample_v1_t *utilization,
                                                   unsigned *count, unsigned long long lastSeen) {
    int rc, n, total, i;
    RESOLVE(h);
    if ((rc = util_allowed(g, m))) return rc;
    if (!count) return INVALID_ARGUMENT;
    if (!utilization) {
        n = collect(gidx, lastSeen, 0, &total);
        if (!n) return NOT_FOUND;
        *count = (unsigned)total;
        return INSUFFICIENT_SIZE;
    }
    n = collect(gidx, lastSeen, 1, &total);
    if (!n) return NOT_FOUND;
    if (*count < (unsigned)n) { *count = (unsigned)total; return INSUFFICIENT_SIZE; }
    for (i = 0; i < n; i++) {
        utilization[i].pid = sbuf[i]->pid;
        utilization[i].timeStamp = tsbuf[i];
        utilization[i].smUtil = sbuf[i]->sm;
        utilization[i].memUtil = sbuf[i]->mem;
        utilization[i].encUtil = sbuf[i]->enc;
        utilization[i].decUtil = sbuf[i]->dec;
    }
    *count = (unsigned)n;
    return OK;
}

#ifndef NO_PUI
typedef struct { unsigned long long timeStamp; unsigned pid, smUtil, memUtil, encUtil, decUtil, jpgUtil, ofaUtil; } pui_sample_t;  /* 40 */
typedef struct { unsigned version, processSamplesCount; unsigned long long lastSeenTimeStamp; pui_sample_t *procUtilArray; } pui_t;

EXPORT nvmlReturn_t nvmlDeviceGetProcessesUtilizationInfo(nvmlDevice_t h, pui_t *info) {
    int rc, n, total, i;
    unsigned long long newest;
    RESOLVE(h);
    if (!info) return INVALID_ARGUMENT;
    if (info->version != 0x01000018) return ARGUMENT_VERSION_MISMATCH;
    if ((rc = util_allowed(g, m))) return rc;
    if (!info->procUtilArray) {
        n = collect(gidx, info->lastSeenTimeStamp, 0, &total);
        if (!n) return NOT_FOUND;
        info->processSamplesCount = (unsigned)total;
        return INSUFFICIENT_SIZE;
    }
    n = collect(gidx, info->lastSeenTimeStamp, 1, &total);
    if (!n) return NOT_FOUND;
    if (info->processSamplesCount < (unsigned)n) { info->processSamplesCount = (unsigned)total; return INSUFFICIENT_SIZE; }
    newest = info->lastSeenTimeStamp;
    for (i = 0; i < n; i++) {
        pui_sample_t *o = &info->procUtilArray[i];
        o->timeStamp = tsbuf[i];
        o->pid = sbuf[i]->pid;
        o->smUtil = sbuf[i]->sm;
        o->memUtil = sbuf[i]->mem;
        o->encUtil = sbuf[i]->enc;
        o->decUtil = sbuf[i]->dec;
        o->jpgUtil = sbuf[i]->jpg;
        o->ofaUtil = sbuf[i]->ofa;
        if (tsbuf[i] > newest) newest = tsbuf[i];
    }
    info->processSamplesCount = (unsigned)n;
    info->lastSeenTimeStamp = newest;
    return OK;
}
#endif

/* ---- MPS clients --------------------------------------------------------------------- */

/* Clients of an MPS server (proc ... type=mps): listed only by this call, never by the
 * compute list, which holds the server. */
EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t h, unsigned *c, proc_v2_t *p) { return running(h, K_MPS, c, p, 2); }
#ifndef NO_MPS3
EXPORT nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t h, unsigned *c, proc_v2_t *p) { return running(h, K_MPS, c, p, 3); }
#endif

/* ---- device health: clocks, reasons, violations, energy, errors, identity ------------- */

/* The device-health calls answer NOT_SUPPORTED on MIG device handles, as real boards do
 * for most of them (the parent GPU answers for the whole board). */
#define WHOLE_GPU() if (m) return NOT_SUPPORTED;

static int put_ull(val_t x, unsigned long long *out) { if (x.err) return x.err; *out = x.v; return OK; }

/* a whole-GPU call with one unsigned int out: the scenario's value of `field`, or its error */
#define UINT_GETTER(name, field) \
    EXPORT nvmlReturn_t name(nvmlDevice_t h, unsigned *out) { RESOLVE(h); WHOLE_GPU(); return put_val(g->field, out); }

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t h, int type, unsigned *mhz) {
    RESOLVE(h);
    WHOLE_GPU();
    if (type == 0 || type == 1) return put_val(g->sm_clock, mhz);  /* graphics, SM */
    if (type == 2) return put_val(g->mem_clock, mhz);
    return INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t h, int type, unsigned *mhz) {
    RESOLVE(h);
    WHOLE_GPU();
    if (type == 0 || type == 1) return put_val(g->sm_clock_max, mhz);
    if (type == 2) return put_val(g->mem_clock_max, mhz);
    return INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t h, unsigned long long *r) {
    RESOLVE(h);
    WHOLE_GPU();
    return put_ull(g->reasons, r);
}

#ifndef NO_CER
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t h, unsigned long long *r) {
    RESOLVE(h);
    WHOLE_GPU();
    return put_ull(g->reasons, r);
}
#endif

typedef struct { unsigned long long referenceTime, violationTime; } violation_t;

EXPORT nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t h, int policy, violation_t *out) {
    val_t x;
    RESOLVE(h);
    WHOLE_GPU();
    if (policy == 0) x = g->viol_power;
    else if (policy == 1) x = g->viol_thermal;
    else return NOT_SUPPORTED;
    if (x.err) return x.err;
    out->referenceTime = now_us();
    out->violationTime = x.v;  /* ns */
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t h, unsigned long long *mj) {
    RESOLVE(h);
    WHOLE_GPU();
    return put_ull(g->energy_mj, mj);
}

UINT_GETTER(nvmlDeviceGetEnforcedPowerLimit, power_limit_mw)

EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t h, int counter, unsigned *kbs) {
    RESOLVE(h);
    WHOLE_GPU();
    if (counter == 0) return put_val(g->pcie_tx_kbs, kbs);
    if (counter == 1) return put_val(g->pcie_rx_kbs, kbs);
    return INVALID_ARGUMENT;
}

UINT_GETTER(nvmlDeviceGetPcieReplayCounter, replay)

EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t h, unsigned *util, unsigned *period_us) {
    RESOLVE(h);
    WHOLE_GPU();
    *period_us = 167000;
    return put_val(g->enc, util);
}

EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t h, unsigned *util, unsigned *period_us) {
    RESOLVE(h);
    WHOLE_GPU();
    *period_us = 167000;
    return put_val(g->dec, util);
}

/* errorType 0 corrected, 1 uncorrected; the volatile and aggregate counters are the same here */
EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t h, int type, int counter, unsigned long long *n) {
    RESOLVE(h);
    WHOLE_GPU();
    if (counter != 0 && counter != 1) return INVALID_ARGUMENT;
    if (type == 0) return put_ull(g->ecc_cor, n);
    if (type == 1) return put_ull(g->ecc_unc, n);
    return INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t h, unsigned *cor, unsigned *unc, unsigned *pending,
                                              unsigned *failure) {
    int rc;
    RESOLVE(h);
    WHOLE_GPU();
    if ((rc = put_val(g->remap_cor, cor)) || (rc = put_val(g->remap_unc, unc)) ||
        (rc = put_val(g->remap_pending, pending)) || (rc = put_val(g->remap_failure, failure)))
        return rc;
    return OK;
}

/* cause 0: multiple single-bit errors, 1: a double-bit error; NVML's two-call protocol */
EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t h, int cause, unsigned *count, unsigned long long *addresses) {
    val_t x;
    unsigned i, n;
    RESOLVE(h);
    WHOLE_GPU();
    if (cause == 0) x = g->retired_sbe;
    else if (cause == 1) x = g->retired_dbe;
    else return INVALID_ARGUMENT;
    if (x.err) return x.err;
    n = (unsigned)x.v;
    if (n == 0) { *count = 0; return OK; }
    if (!addresses || *count < n) { *count = n; return INSUFFICIENT_SIZE; }
    for (i = 0; i < n; i++) addresses[i] = 0x100000ULL * (i + 1) + (unsigned long long)cause;
    *count = n;
    return OK;
}

UINT_GETTER(nvmlDeviceGetRetiredPagesPendingStatus, retired_pending)

UINT_GETTER(nvmlDeviceGetComputeMode, compute_mode)

UINT_GETTER(nvmlDeviceGetPersistenceMode, persistence)

UINT_GETTER(nvmlDeviceGetMinorNumber, minor)

typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} pci_v3_t;

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, pci_v3_t *pci) {
    RESOLVE(h);
    WHOLE_GPU();
    if (g->pci_err.err) return g->pci_err.err;
    memset(pci, 0, sizeof *pci);
    memcpy(pci->busId, g->bus_id, sizeof pci->busId - 1);
    memcpy(pci->busIdLegacy, g->bus_id + 4, sizeof pci->busIdLegacy - 1);
    pci->bus = (unsigned)(0x10 + gidx);
    pci->pciDeviceId = 0x233010de;
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t h, char *serial, unsigned length) {
    RESOLVE(h);
    WHOLE_GPU();
    if (g->serial_err.err) return g->serial_err.err;
    return put_str(g->serial, serial, length);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    refresh();
    if (!initialised) return UNINITIALIZED;
    if (S.cuda.err) return S.cuda.err;
    *version = (int)S.cuda.v;
    return OK;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) { return nvmlSystemGetCudaDriverVersion(version); }

/* Field values: the ids cgstat asks for; any other id answers NOT_SUPPORTED in its slot. */
typedef union { double d; unsigned ui; unsigned long ul; unsigned long long ull; long long sll; int si; } value_t;
typedef struct {
    unsigned fieldId, scopeId;
    long long timestamp, latencyUsec;
    unsigned valueType;
    int nvmlReturn;
    value_t value;
} field_t;  /* 40 bytes */

static val_t *field_of(gpu_t *g, unsigned id) {
    switch (id) {
    case 3: return &g->ecc_cor;          /* NVML_FI_DEV_ECC_SBE_VOL_TOTAL */
    case 4: return &g->ecc_unc;          /* NVML_FI_DEV_ECC_DBE_VOL_TOTAL */
    case 82: return &g->mem_temp;        /* NVML_FI_DEV_MEMORY_TEMP */
    case 94: return &g->replay;          /* NVML_FI_DEV_PCIE_REPLAY_COUNTER */
    case 138: return &g->nvlink_tx_kib;  /* NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX (KiB) */
    case 139: return &g->nvlink_rx_kib;  /* NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX (KiB) */
    case 197: return &g->pcie_tx_bytes;  /* NVML_FI_DEV_PCIE_COUNT_TX_BYTES */
    case 198: return &g->pcie_rx_bytes;  /* NVML_FI_DEV_PCIE_COUNT_RX_BYTES */
    default: return NULL;
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t h, int count, field_t *values) {
    int i;
    unsigned long long now = now_us();
    RESOLVE(h);
    WHOLE_GPU();
    if (count < 0 || (count && !values)) return INVALID_ARGUMENT;
    for (i = 0; i < count; i++) {
        field_t *f = &values[i];
        val_t *x = field_of(g, f->fieldId);
        f->timestamp = (long long)now;
        f->latencyUsec = 0;
        f->valueType = (unsigned)g->field_type;  /* default NVML_VALUE_TYPE_UNSIGNED_LONG_LONG */
        if (!x) { f->nvmlReturn = NOT_SUPPORTED; continue; }
        f->nvmlReturn = x->err;
        /* the driver writes only the member valueType names: the rest is what was there */
        memset(&f->value, 0xAB, sizeof f->value);
        if (x->err) continue;
        switch (g->field_type) {
        case 0: f->value.d = (double)x->v; break;
        case 1: f->value.ui = (unsigned)x->v; break;
        case 4: f->value.sll = (long long)x->v; break;
        case 5: f->value.si = (int)x->v; break;
        default: f->value.ull = x->v; break;
        }
    }
    return OK;
}

/* ---- XID events ------------------------------------------------------------------- */

/* An event set remembers which `xid` statements (by id) it has delivered, across scenario
 * changes: a test appends XIDs between ticks and each is delivered once. */
#define EV_XID 0x8ULL  /* nvmlEventTypeXidCriticalError */
typedef struct { unsigned long long reg[MAX_GPUS]; unsigned char done[MAX_XIDS + 1]; int freed; } evset_t;
typedef struct { nvmlDevice_t device; unsigned long long eventType, eventData; unsigned gi, ci; } event_t;

EXPORT nvmlReturn_t nvmlEventSetCreate(evset_t **set) {
    refresh();
    if (!initialised) return UNINITIALIZED;
    *set = calloc(1, sizeof **set);
    return *set ? OK : UNKNOWN;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t h, unsigned long long *types) {
    RESOLVE(h);
    WHOLE_GPU();
    if (g->events.err) return g->events.err;
    *types = EV_XID | 0x1ULL | 0x2ULL | 0x4ULL;  /* XID, single/double-bit ECC, P-state */
    return OK;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t h, unsigned long long types, evset_t *set) {
    RESOLVE(h);
    WHOLE_GPU();
    if (!set) return INVALID_ARGUMENT;
    if (g->events.err) return g->events.err;
    set->reg[gidx] |= types;
    return OK;
}

static nvmlReturn_t wait_event(evset_t *set, event_t *data, unsigned timeout_ms) {
    int i;
    log_call("nvmlEventSetWait_v2", (long)timeout_ms, 1);
    refresh();
    if (!initialised) return UNINITIALIZED;
    if (!set || !data) return INVALID_ARGUMENT;
    for (i = 0; i < S.nxids; i++) {
        xid_t *x = &S.xids[i];
        if (x->id <= 0 || x->id > MAX_XIDS || set->done[x->id]) continue;
        if (!x->foreign && (x->gpu < 0 || x->gpu >= S.ngpus || !(set->reg[x->gpu] & EV_XID))) continue;
        set->done[x->id] = 1;
        /* alias: the same device under another pointer value; foreign: a device no handle names */
        data->device = x->foreign ? make_handle(0xEE, -1)
                     : (nvmlDevice_t)((uintptr_t)make_handle(x->gpu, -1) | (x->alias ? HALIAS : 0));
        data->eventType = EV_XID;
        data->eventData = x->code;
        data->gi = x->gi;
        data->ci = x->ci;
        return OK;
    }
    return 10;  /* NVML_ERROR_TIMEOUT: nothing pending (the double never blocks) */
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(evset_t *set, event_t *data, unsigned timeout_ms) { return wait_event(set, data, timeout_ms); }
EXPORT nvmlReturn_t nvmlEventSetWait(evset_t *set, event_t *data, unsigned timeout_ms) { return wait_event(set, data, timeout_ms); }

EXPORT nvmlReturn_t nvmlEventSetFree(evset_t *set) {
    if (!set) return INVALID_ARGUMENT;
    free(set);
    return OK;
}

/* ---- GPM (Hopper and later) ------------------------------------------------------- */

#ifndef NO_GPM
typedef struct { int taken, gpu, gi; unsigned long long seq; } gpm_sample_t;
typedef struct { const char *shortName, *longName, *unit; } metric_info_t;
typedef struct { unsigned metricId; int nvmlReturn; double value; metric_info_t info; } gpm_metric_t;  /* 40 */
typedef struct { unsigned version, numMetrics; gpm_sample_t *sample1, *sample2; gpm_metric_t metrics[477]; } gpm_get_t;
typedef struct { unsigned version, isSupportedDevice; } gpm_support_t;

static unsigned long long gpm_seq;

EXPORT nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t h, gpm_support_t *support) {
    RESOLVE(h);
    if (!support) return INVALID_ARGUMENT;
    if (support->version != 1) return ARGUMENT_VERSION_MISMATCH;
    WHOLE_GPU();
    if (g->gpm.err) return g->gpm.err;
    support->isSupportedDevice = g->gpm.v ? 1 : 0;
    return OK;
}

EXPORT nvmlReturn_t nvmlGpmSampleAlloc(gpm_sample_t **s) {
    if (!s) return INVALID_ARGUMENT;
    *s = calloc(1, sizeof **s);
    return *s ? OK : UNKNOWN;
}

EXPORT nvmlReturn_t nvmlGpmSampleFree(gpm_sample_t *s) {
    if (!s) return INVALID_ARGUMENT;
    free(s);
    return OK;
}

EXPORT nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t h, gpm_sample_t *s) {
    RESOLVE(h);
    WHOLE_GPU();
    if (!s) return INVALID_ARGUMENT;
    if (g->gpm.err) return g->gpm.err;
    if (!g->gpm.v) return NOT_SUPPORTED;
    s->taken = 1; s->gpu = gidx; s->gi = -1; s->seq = ++gpm_seq;
    return OK;
}

EXPORT nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t h, unsigned gi, gpm_sample_t *s) {
    int i;
    RESOLVE(h);
    WHOLE_GPU();
    if (!s) return INVALID_ARGUMENT;
    if (!g->gpm.v || g->gpm.err) return g->gpm.err ? g->gpm.err : NOT_SUPPORTED;
    for (i = 0; i < MAX_MIG; i++) {
        if (g->migs[i].present && g->migs[i].gi == gi) {
            s->taken = 1; s->gpu = gidx; s->gi = (int)gi; s->seq = ++gpm_seq;
            return OK;
        }
    }
    return INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlGpmMetricsGet(gpm_get_t *mg) {
    gpu_t *g;
    gpm_vals_t *vals = NULL;
    unsigned i;
    int k;
    log_call("nvmlGpmMetricsGet", 0, 0);
    refresh();
    if (!initialised) return UNINITIALIZED;
    if (!mg) return INVALID_ARGUMENT;
    if (mg->version != 1) return ARGUMENT_VERSION_MISMATCH;
    if (!mg->sample1 || !mg->sample2 || !mg->sample1->taken || !mg->sample2->taken) return INVALID_ARGUMENT;
    if (mg->sample1->gpu != mg->sample2->gpu || mg->sample1->gi != mg->sample2->gi) return INVALID_ARGUMENT;
    if (mg->sample2->seq <= mg->sample1->seq) return INVALID_ARGUMENT;  /* sample2 must be the later one */
    if (mg->numMetrics > 477) return INVALID_ARGUMENT;
    if (mg->sample1->gpu >= S.ngpus) return INVALID_ARGUMENT;
    g = &S.gpus[mg->sample1->gpu];
    if (mg->sample1->gi < 0) vals = &g->gpmv;
    else for (k = 0; k < MAX_MIG; k++)
        if (g->migs[k].present && (int)g->migs[k].gi == mg->sample1->gi) vals = &g->migs[k].gpm;
    if (!vals) return INVALID_ARGUMENT;
    for (i = 0; i < mg->numMetrics; i++) {
        gpm_metric_t *x = &mg->metrics[i];
        if (x->metricId == 0 || x->metricId >= GPM_IDS) { x->nvmlReturn = NOT_SUPPORTED; continue; }
        x->nvmlReturn = vals->err[x->metricId];
        x->value = x->nvmlReturn ? 0.0 : vals->v[x->metricId];
    }
    return OK;
}
#endif
