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
 *
 * Struct layouts and protocols: /work/shared/notes/nvml.md and pynvml.py 13.615.71.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

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

typedef struct {
    int present;
    char uuid[96], name[96];
    val_t mem_total, mem_used, mem_reserved;
    unsigned gi, ci;
} mig_t;

typedef struct {
    int present, lost, handle_err;
    char uuid[96], name[96];
    val_t mem_total, mem_used, mem_reserved, util_gpu, util_mem, temp, power_mw, mig, procutil;
    val_t compute_err, graphics_err;
    unsigned mig_max;
    mig_t migs[MAX_MIG];
} gpu_t;

typedef struct { int gpu, mig, graphics; unsigned pid; unsigned long long mem; } proc_t;

enum { TS_ABS, TS_BUSY, TS_ONCE };
typedef struct {
    int gpu; unsigned pid, sm, mem, enc, dec, jpg, ofa;
    int ts_kind; unsigned long long ts, delta, frozen;
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
        }
        if (idx < 0) idx = S.ngpus;
        if (idx >= MAX_GPUS) return;
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
            else if (!strcmp(k, "type")) q.graphics = !strcmp(v, "graphics");
        }
        S.procs[S.nprocs++] = q;
    } else if (!strcmp(word, "sample")) {
        sample_t s;
        if (S.nsamples >= MAX_SAMPLES) return;
        memset(&s, 0, sizeof s);
        s.ts_kind = TS_BUSY;
        while (next_kv(&p, &k, &v)) {
            if (!strcmp(k, "gpu")) s.gpu = atoi(v);
            else if (!strcmp(k, "pid")) s.pid = (unsigned)strtoul(v, NULL, 0);
            else if (!strcmp(k, "sm")) s.sm = (unsigned)atoi(v);
            else if (!strcmp(k, "mem")) s.mem = (unsigned)atoi(v);
            else if (!strcmp(k, "enc")) s.enc = (unsigned)atoi(v);
            else if (!strcmp(k, "dec")) s.dec = (unsigned)atoi(v);
            else if (!strcmp(k, "jpg")) s.jpg = (unsigned)atoi(v);
            else if (!strcmp(k, "ofa")) s.ofa = (unsigned)atoi(v);
            else if (!strcmp(k, "ts")) {
                if (!strcmp(v, "busy")) s.ts_kind = TS_BUSY;
                else if (!strncmp(v, "busy-", 5)) { s.ts_kind = TS_BUSY; s.delta = strtoull(v + 5, NULL, 10); }
                else if (!strcmp(v, "once")) s.ts_kind = TS_ONCE;
                else { s.ts_kind = TS_ABS; s.ts = strtoull(v, NULL, 10); }
            }
        }
        S.samples[S.nsamples++] = s;
    }
}

/* Parse the scenario again when the file changed (inode, size or mtime). */
static void refresh(void) {
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
    while (fgets(line, sizeof line, f)) parse_line(line);
    fclose(f);
    last_st = st;
    loaded = 1;
}

/* ---- handles: opaque pointers that encode (epoch, gpu, MIG slot) -------------------- */

#define HBASE 0x6e76000000000000ULL

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

#define RESOLVE(h) gpu_t *g; mig_t *m; int gidx, midx; \
    int rc_ = resolve(h, &g, &m, &gidx, &midx); if (rc_) return rc_; (void)gidx; (void)midx;

static int put_val(val_t x, unsigned *out) { if (x.err) return x.err; *out = (unsigned)x.v; return OK; }

static int mig_on(gpu_t *g) { return !g->mig.err && g->mig.v == 1; }

/* ---- initialisation and system ------------------------------------------------------ */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned flags) {
    (void)flags;
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
    if (index >= MAX_MIG || !g->migs[index].present) return NOT_FOUND;
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

/* On a MIG-enabled GPU the parent lists every process (with its instance IDs); a MIG
 * device handle lists the processes of that instance. */
static int procs_of(gpu_t *g, int gidx, int midx, int graphics, proc_t **out, int max) {
    int n = 0, i;
    (void)g;
    for (i = 0; i < S.nprocs; i++) {
        proc_t *q = &S.procs[i];
        if (q->gpu != gidx || q->graphics != graphics) continue;
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
    e = graphics ? g->graphics_err : g->compute_err;
    if (e.err) return e.err;
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
#ifndef NO_V3
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t h, unsigned *c, proc_v2_t *p) { return running(h, 0, c, p, 3); }
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t h, unsigned *c, proc_v2_t *p) { return running(h, 1, c, p, 3); }
#endif

/* ---- per-process utilization samples ------------------------------------------------ */

static unsigned long long now_us(void) {
    struct timespec ts;
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
    default:
        return s->ts;
    }
}

/* Collect the samples of one GPU newer than `last`; returns their number (all of them
 * when out is NULL: the size a caller must allocate). */
static int collect(int gidx, unsigned long long last, sample_t **out, unsigned long long *ts_out,
                   int *total) {
    unsigned long long now = now_us();
    int n = 0, i;
    *total = 0;
    for (i = 0; i < S.nsamples; i++) {
        sample_t *s = &S.samples[i];
        unsigned long long t;
        if (s->gpu != gidx) continue;
        (*total)++;
        if (s->ts_kind == TS_ONCE && !s->frozen && !out) {
            n++;  /* counted; its time is fixed when it is served */
            continue;
        }
        t = sample_ts(s, now, last);
        if (t <= last) continue;
        if (out) { out[n] = s; ts_out[n] = t; }
        n++;
    }
    return n;
}

static sample_t *sbuf[MAX_SAMPLES];
static unsigned long long tsbuf[MAX_SAMPLES];

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
        n = collect(gidx, lastSeen, NULL, NULL, &total);
        if (!n) return NOT_FOUND;
        *count = (unsigned)total;
        return INSUFFICIENT_SIZE;
    }
    n = collect(gidx, lastSeen, sbuf, tsbuf, &total);
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
        n = collect(gidx, info->lastSeenTimeStamp, NULL, NULL, &total);
        if (!n) return NOT_FOUND;
        info->processSamplesCount = (unsigned)total;
        return INSUFFICIENT_SIZE;
    }
    n = collect(gidx, info->lastSeenTimeStamp, sbuf, tsbuf, &total);
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
