/*
 * nvml-mock.c: a stand-in libnvidia-ml.so.1 for oci-nvidia-hook's tests.
 *
 * integration/simhost builds it with
 *   cc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1 -o libnvidia-ml.so.<ver> nvml-mock.c
 * and installs it where the real library lives, so it is found exactly as the
 * real one is. It exports the NVML entry points below with NVML's real
 * signatures, types, struct layouts and return codes (nvml.h of the 535
 * branch; checked against the bindings of nvml-wrapper-sys 0.10).
 *
 * The GPUs it reports come from "nvml-mock.conf" in the directory of this
 * library: the directory of its real path first (symlinks resolved), then
 * the directory it was loaded by. Never from the environment. The file is
 * read by the nvmlInit call that takes the reference count from 0 to 1. A
 * missing or invalid file makes that call fail with
 * NVML_ERROR_DRIVER_NOT_LOADED, like the real library on a host without the
 * kernel module; nvmlMockLastError() then says why. Every load of the
 * library appends its pid to "nvml-mock.loads" there, if that file exists.
 *
 * ---------------------------------------------------------------- conf format
 * One record a line; '#' starts a comment; tokens are separated by blanks;
 * a value may be double-quoted to hold blanks ("NVIDIA H100 80GB HBM3").
 *
 *   system driver=535.261.03 cuda=12020 [nvml=12.535.261.03]        (required)
 *   init [delay_ms=N] [error=N]
 *       every nvmlInit* call first sleeps N ms, then returns error N (an
 *       nvmlReturn_t, e.g. 9 DRIVER_NOT_LOADED, 4 NO_PERMISSION, 999 UNKNOWN)
 *       when N is not 0. The init line is honoured even if later lines are bad.
 *   gpu <index> uuid=GPU-... bus=0000:18:00.0 minor=N
 *       [name="..."] [brand=nvidia] [arch=hopper] [cc=9.0]
 *       [mig=enabled|disabled|unsupported] [max_mig=7]
 *       [pci_id=0x233010de] [subsys=0x16c110de]
 *   mig <gpu-index> <mig-index> uuid=MIG-... gi=N ci=N [profile=3g.40gb]
 *
 * GPU indices must be 0..n-1 (NVML order); MIG indices 0..k-1 per GPU, the
 * GPU must have mig=enabled, and k <= max_mig. brand is one of NVIDIA's
 * names as libnvidia-container spells them (unknown quadro tesla nvs grid
 * geforce titan vapps vpc vcs vws cloudgaming quadrortx nvidiartx nvidia
 * geforcertx titanrtx) or a number; arch is kepler maxwell pascal volta turing
 * ampere ada hopper blackwell or a number. Defaults: name "NVIDIA H100 80GB
 * HBM3", brand nvidia, arch hopper, cc 9.0, mig unsupported, max_mig 7 when
 * enabled, H100 SXM5 PCI ids.
 *
 * ------------------------------------------------------------------ behaviour
 * - Every call but nvmlErrorString and nvmlMockLastError returns
 *   NVML_ERROR_UNINITIALIZED before nvmlInit / after the last nvmlShutdown.
 * - nvmlDeviceGetPciInfo_v3: busId "%08X:%02X:%02X.%X" and busIdLegacy
 *   "%04X:%02X:%02X.%X", upper-case hex as NVML gives them (the proc tree
 *   says 0000:18:00.0): consumers must compare bus ids numerically.
 * - nvmlDeviceGetHandleByPciBusId_v2 takes domain:bus:device.function,
 *   domain:bus:device or bus:device.function, hex, any case and width.
 * - nvmlDeviceGetHandleByUUID finds GPUs and MIG devices.
 * - MIG: nvmlDeviceGetMaxMigDeviceCount is the maximum (max_mig, 7 on H100)
 *   when MIG is enabled and 0 otherwise, not the number of live MIG devices:
 *   nvmlDeviceGetMigDeviceHandleByIndex answers NVML_ERROR_NOT_FOUND for
 *   indices below the maximum that hold no MIG device, as NVML documents.
 * - A MIG handle answers UUID, name ("<gpu name> MIG <profile>"), brand,
 *   architecture, compute capability and PCI info (its parent's), GPU and
 *   compute instance ids; index, minor number, MIG mode and the MIG
 *   enumeration calls answer NVML_ERROR_NOT_SUPPORTED: use the parent.
 * - A GPU handle answers NVML_ERROR_NOT_SUPPORTED for the instance ids and
 *   NVML_ERROR_INVALID_ARGUMENT for nvmlDeviceGetDeviceHandleFromMigDeviceHandle.
 * - nvmlInitWithFlags ignores its flags.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------ NVML's types */
typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t;
typedef unsigned int nvmlBrandType_t;         /* enum nvmlBrandType_enum */
typedef unsigned int nvmlDeviceArchitecture_t;

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
typedef struct nvmlPciInfo_st {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE]; /* "0000:18:00.0" */
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;    /* device id << 16 | vendor id */
  unsigned int pciSubSystemId; /* subsystem id << 16 | subsystem vendor */
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];          /* "00000000:18:00.0" */
} nvmlPciInfo_t;
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");

#define NVML_DEVICE_MIG_DISABLE 0
#define NVML_DEVICE_MIG_ENABLE 1

/* ------------------------------------------------------------ mock state */
#define MAX_GPUS 64
#define MAX_MIG 8 /* per GPU; H100/A100 have 7 */

struct nvmlDevice_st {
  int is_mig;
  unsigned index;               /* GPU: NVML index; MIG: index under parent */
  struct nvmlDevice_st *parent; /* MIG only */
  char uuid[96], name[96], profile[32];
  unsigned minor, domain, bus, dev, fn, pci_id, subsys;
  unsigned brand, arch;
  int cc_major, cc_minor;
  int mig_mode; /* -1 unsupported, 0 disabled, 1 enabled */
  unsigned max_mig, nmig, gi, ci;
  struct nvmlDevice_st *mig[MAX_MIG];
  int defined;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_refs; /* nvmlInit reference count */
static struct nvmlDevice_st g_gpu[MAX_GPUS], g_mig[MAX_GPUS * MAX_MIG];
static unsigned g_ngpus, g_nmigs;
static char g_driver[80], g_nvml[80];
static int g_cuda;
static char g_error[512]; /* why the last nvmlInit failed */

static const char *const BRANDS[] = {
  "unknown", "quadro", "tesla", "nvs", "grid", "geforce", "titan", "vapps", "vpc", "vcs",
  "vws", "cloudgaming", "quadrortx", "nvidiartx", "nvidia", "geforcertx", "titanrtx"};
static const char *const ARCHS[] = {
  "", "", "kepler", "maxwell", "pascal", "volta", "turing", "ampere", "ada", "hopper",
  "blackwell"};

static int initialized(void) { return __atomic_load_n(&g_refs, __ATOMIC_ACQUIRE) > 0; }

/* Is h one of our handles? */
static int valid(nvmlDevice_t h) {
  if (h >= g_gpu && h < g_gpu + g_ngpus) return 1;
  return h >= g_mig && h < g_mig + g_nmigs;
}

#define CHECK_INIT() do { if (!initialized()) return NVML_ERROR_UNINITIALIZED; } while (0)
#define CHECK_DEV(h, out)                                                       \
  do {                                                                          \
    CHECK_INIT();                                                               \
    if (!valid(h) || !(out)) return NVML_ERROR_INVALID_ARGUMENT;                \
  } while (0)

static nvmlReturn_t copy_str(char *dst, unsigned len, const char *src) {
  if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
  if (strlen(src) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
  memcpy(dst, src, strlen(src) + 1);
  return NVML_SUCCESS;
}

/* ------------------------------------------------------------ conf reading */
static int fail(const char *path, int line, const char *fmt, const char *arg) {
  int n = line ? snprintf(g_error, sizeof g_error, "%s:%d: ", path, line)
               : snprintf(g_error, sizeof g_error, "%s: ", path);
  if (n < 0 || (size_t)n >= sizeof g_error) n = 0;
  snprintf(g_error + n, sizeof g_error - n, fmt, arg);
  return -1;
}

/* Next token of *p: a bare word, key=value or key="quoted value". Writes the
 * key (or word) to key and the value to val (empty if none). 0 at the end. */
static int token(char **p, char *key, size_t ksz, char *val, size_t vsz) {
  char *s = *p;
  size_t k = 0, v = 0;
  while (*s == ' ' || *s == '\t') s++;
  if (!*s || *s == '#') return 0;
  while (*s && *s != '=' && *s != ' ' && *s != '\t' && k + 1 < ksz) key[k++] = *s++;
  key[k] = val[0] = 0;
  if (*s == '=') {
    s++;
    if (*s == '"') {
      for (s++; *s && *s != '"' && v + 1 < vsz; ) val[v++] = *s++;
      if (*s != '"') return -1;
      s++;
    } else {
      while (*s && *s != ' ' && *s != '\t' && v + 1 < vsz) val[v++] = *s++;
    }
    val[v] = 0;
  }
  if (*s && *s != ' ' && *s != '\t') return -1; /* too long or junk after a quote */
  *p = s;
  return 1;
}

static int parse_uint(const char *s, unsigned *out) {
  char *end;
  unsigned long v;
  if (!*s || *s == '-') return -1;
  errno = 0;
  v = strtoul(s, &end, 0);
  if (errno || *end || v > UINT_MAX) return -1;
  *out = (unsigned)v;
  return 0;
}

static int parse_name(const char *s, const char *const *names, unsigned n, unsigned *out) {
  for (unsigned i = 0; i < n; i++)
    if (names[i][0] && !strcasecmp(s, names[i])) { *out = i; return 0; }
  return parse_uint(s, out);
}

/* "0000:18:00.0", "00000000:18:00.0", "18:00.0", "0:18:0" -> numbers. */
static int parse_bus(const char *s, unsigned *d, unsigned *b, unsigned *v, unsigned *f) {
  unsigned x[4];
  char tail;
  int n;
  *d = *f = 0;
  if ((n = sscanf(s, "%x:%x:%x.%x%c", &x[0], &x[1], &x[2], &x[3], &tail)) == 4) {
    *d = x[0], *b = x[1], *v = x[2], *f = x[3];
  } else if (n == 3 && sscanf(s, "%x:%x:%x%c", &x[0], &x[1], &x[2], &tail) == 3) {
    *d = x[0], *b = x[1], *v = x[2];
  } else if (sscanf(s, "%x:%x.%x%c", &x[0], &x[1], &x[2], &tail) == 3) {
    *b = x[0], *v = x[1], *f = x[2];
  } else {
    return -1;
  }
  return (*b > 0xff || *v > 0x1f || *f > 7) ? -1 : 0;
}

static int uuid_taken(const char *uuid) {
  for (unsigned i = 0; i < MAX_GPUS; i++)
    if (g_gpu[i].defined && !strcmp(g_gpu[i].uuid, uuid)) return 1;
  for (unsigned i = 0; i < g_nmigs; i++)
    if (!strcmp(g_mig[i].uuid, uuid)) return 1;
  return 0;
}

static int parse_gpu(char *rest, const char *path, int ln) {
  char key[32], val[128];
  unsigned idx;
  int t, have = 0;
  if (token(&rest, key, sizeof key, val, sizeof val) != 1 || val[0] || parse_uint(key, &idx))
    return fail(path, ln, "%s", "gpu needs an index first");
  if (idx >= MAX_GPUS) return fail(path, ln, "%s", "gpu index out of range");
  struct nvmlDevice_st *g = &g_gpu[idx];
  if (g->defined) return fail(path, ln, "%s", "gpu index given twice");
  *g = (struct nvmlDevice_st){.index = idx, .brand = 14, .arch = 9, .cc_major = 9,
                              .mig_mode = -1, .pci_id = 0x233010de, .subsys = 0x16c110de};
  strcpy(g->name, "NVIDIA H100 80GB HBM3");
  while ((t = token(&rest, key, sizeof key, val, sizeof val)) == 1) {
    int bad = 0;
    if (!strcmp(key, "uuid")) {
      bad = strncmp(val, "GPU-", 4) || strlen(val) >= sizeof g->uuid || uuid_taken(val);
      if (!bad) strcpy(g->uuid, val), have |= 1;
    } else if (!strcmp(key, "bus")) {
      bad = parse_bus(val, &g->domain, &g->bus, &g->dev, &g->fn);
      have |= bad ? 0 : 2;
    } else if (!strcmp(key, "minor")) {
      bad = parse_uint(val, &g->minor) || g->minor > 253; /* 254, 255: modeset, ctl */
      have |= bad ? 0 : 4;
    } else if (!strcmp(key, "name")) {
      bad = !val[0] || strlen(val) >= sizeof g->name;
      if (!bad) strcpy(g->name, val);
    } else if (!strcmp(key, "brand")) {
      bad = parse_name(val, BRANDS, sizeof BRANDS / sizeof *BRANDS, &g->brand);
    } else if (!strcmp(key, "arch")) {
      bad = parse_name(val, ARCHS, sizeof ARCHS / sizeof *ARCHS, &g->arch);
    } else if (!strcmp(key, "cc")) {
      char tail;
      bad = sscanf(val, "%d.%d%c", &g->cc_major, &g->cc_minor, &tail) != 2;
    } else if (!strcmp(key, "mig")) {
      g->mig_mode = !strcmp(val, "enabled") ? 1 : !strcmp(val, "disabled") ? 0
                  : !strcmp(val, "unsupported") ? -1 : -2;
      bad = g->mig_mode == -2;
    } else if (!strcmp(key, "max_mig")) {
      bad = parse_uint(val, &g->max_mig) || g->max_mig > MAX_MIG;
    } else if (!strcmp(key, "pci_id")) {
      bad = parse_uint(val, &g->pci_id);
    } else if (!strcmp(key, "subsys")) {
      bad = parse_uint(val, &g->subsys);
    } else {
      return fail(path, ln, "unknown gpu key '%s'", key);
    }
    if (bad) return fail(path, ln, "bad value for gpu key '%s'", key);
  }
  if (t < 0) return fail(path, ln, "%s", "malformed token");
  if (have != 7) return fail(path, ln, "%s", "gpu needs uuid=, bus= and minor=");
  if (g->mig_mode == 1 && !g->max_mig) g->max_mig = 7;
  if (g->mig_mode != 1) g->max_mig = 0;
  for (unsigned i = 0; i < MAX_GPUS; i++) {
    struct nvmlDevice_st *o = &g_gpu[i];
    if (i == idx || !o->defined) continue;
    if (o->minor == g->minor) return fail(path, ln, "%s", "minor given twice");
    if (o->domain == g->domain && o->bus == g->bus && o->dev == g->dev && o->fn == g->fn)
      return fail(path, ln, "%s", "bus id given twice");
  }
  g->defined = 1;
  return 0;
}

static int parse_mig(char *rest, const char *path, int ln) {
  char key[32], val[128], k2[32];
  unsigned gi_idx, idx;
  int t, have = 0;
  if (token(&rest, key, sizeof key, val, sizeof val) != 1 || val[0] || parse_uint(key, &gi_idx) ||
      token(&rest, k2, sizeof k2, val, sizeof val) != 1 || val[0] || parse_uint(k2, &idx))
    return fail(path, ln, "%s", "mig needs <gpu-index> <mig-index> first");
  if (gi_idx >= MAX_GPUS || !g_gpu[gi_idx].defined)
    return fail(path, ln, "%s", "mig names an undefined gpu (gpu lines come first)");
  struct nvmlDevice_st *g = &g_gpu[gi_idx];
  if (g->mig_mode != 1) return fail(path, ln, "%s", "mig on a gpu without mig=enabled");
  if (idx != g->nmig || idx >= g->max_mig)
    return fail(path, ln, "%s", "mig indices must run 0,1,... up to max_mig-1");
  struct nvmlDevice_st *m = &g_mig[g_nmigs];
  *m = (struct nvmlDevice_st){.is_mig = 1, .index = idx, .parent = g};
  while ((t = token(&rest, key, sizeof key, val, sizeof val)) == 1) {
    int bad = 0;
    if (!strcmp(key, "uuid")) {
      bad = strncmp(val, "MIG-", 4) || strlen(val) >= sizeof m->uuid || uuid_taken(val);
      if (!bad) strcpy(m->uuid, val), have |= 1;
    } else if (!strcmp(key, "gi")) {
      bad = parse_uint(val, &m->gi);
      have |= bad ? 0 : 2;
    } else if (!strcmp(key, "ci")) {
      bad = parse_uint(val, &m->ci);
      have |= bad ? 0 : 4;
    } else if (!strcmp(key, "profile")) {
      bad = !val[0] || strlen(val) >= sizeof m->profile;
      if (!bad) strcpy(m->profile, val);
    } else {
      return fail(path, ln, "unknown mig key '%s'", key);
    }
    if (bad) return fail(path, ln, "bad value for mig key '%s'", key);
  }
  if (t < 0) return fail(path, ln, "%s", "malformed token");
  if (have != 7) return fail(path, ln, "%s", "mig needs uuid=, gi= and ci=");
  for (unsigned i = 0; i < g->nmig; i++)
    if (g->mig[i]->gi == m->gi && g->mig[i]->ci == m->ci)
      return fail(path, ln, "%s", "gi/ci pair given twice on this gpu");
  snprintf(m->name, sizeof m->name, "%s MIG %s", g->name, m->profile[0] ? m->profile : "1g");
  g->mig[g->nmig++] = m;
  g_nmigs++;
  return 0;
}

/* Reads the conf into the globals; 0 or -1 with g_error set. The init line
 * is only checked here: init_line() applies it. */
static int load_conf(const char *path) {
  FILE *f = fopen(path, "re");
  char line[1024], key[32], val[128];
  int ln = 0, have_system = 0, rc = 0;
  if (!f) return fail(path, 0, "cannot open: %s", strerror(errno));
  memset(g_gpu, 0, sizeof g_gpu);
  g_ngpus = g_nmigs = 0;
  g_driver[0] = g_nvml[0] = 0;
  g_cuda = 0;
  while (rc == 0 && fgets(line, sizeof line, f)) {
    char *p = line;
    ln++;
    if (!strchr(line, '\n') && !feof(f)) { rc = fail(path, ln, "%s", "line too long"); break; }
    line[strcspn(line, "\r\n")] = 0;
    int t = token(&p, key, sizeof key, val, sizeof val);
    if (t == 0) continue;
    if (t < 0 || val[0]) { rc = fail(path, ln, "%s", "a line starts with its kind"); break; }
    if (!strcmp(key, "gpu")) { rc = parse_gpu(p, path, ln); continue; }
    if (!strcmp(key, "mig")) { rc = parse_mig(p, path, ln); continue; }
    int sys = !strcmp(key, "system");
    if (!sys && strcmp(key, "init")) { rc = fail(path, ln, "unknown line kind '%s'", key); break; }
    while (rc == 0 && (t = token(&p, key, sizeof key, val, sizeof val)) == 1) {
      unsigned u;
      if (sys && !strcmp(key, "driver") && val[0] && strlen(val) < sizeof g_driver)
        strcpy(g_driver, val), have_system |= 1;
      else if (sys && !strcmp(key, "nvml") && val[0] && strlen(val) < sizeof g_nvml)
        strcpy(g_nvml, val);
      else if (sys && !strcmp(key, "cuda") && !parse_uint(val, &u) && u <= INT_MAX)
        g_cuda = (int)u, have_system |= 2;
      else if (!sys && (!strcmp(key, "delay_ms") || !strcmp(key, "error")) && !parse_uint(val, &u))
        continue;
      else
        rc = fail(path, ln, "bad key or value '%s'", key);
    }
    if (rc == 0 && t < 0) rc = fail(path, ln, "%s", "malformed token");
  }
  fclose(f);
  if (rc) return rc;
  if (have_system != 3) return fail(path, 0, "%s", "no 'system driver=... cuda=...' line");
  while (g_ngpus < MAX_GPUS && g_gpu[g_ngpus].defined) g_ngpus++;
  for (unsigned i = g_ngpus; i < MAX_GPUS; i++)
    if (g_gpu[i].defined) return fail(path, 0, "%s", "gpu indices must run 0,1,... without gaps");
  if (!g_nvml[0]) snprintf(g_nvml, sizeof g_nvml, "12.%s", g_driver);
  return 0;
}

/* The conf beside this library: its real directory, then the loaded one. */
static int conf_path(char *out, size_t size, int which) {
  Dl_info info;
  char buf[PATH_MAX], *slash;
  if (!dladdr((void *)&conf_path, &info) || !info.dli_fname) return -1;
  if (which == 0) {
    if (!realpath(info.dli_fname, buf)) return -1;
  } else if (snprintf(buf, sizeof buf, "%s", info.dli_fname) >= (int)sizeof buf) {
    return -1;
  }
  if (!(slash = strrchr(buf, '/'))) return -1;
  *slash = 0;
  return snprintf(out, size, "%s/nvml-mock.conf", buf) >= (int)size ? -1 : 0;
}

/* Every load of this library, init or not, appends its pid to
 * "nvml-mock.loads" beside it (its real directory) when that file exists:
 * tests create it to check that the hook never loaded NVML at all. */
__attribute__((constructor)) static void record_load(void) {
  char path[PATH_MAX + 32], *slash;
  if (conf_path(path, sizeof path, 0) != 0 || !(slash = strrchr(path, '/'))) return;
  if (snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "nvml-mock.loads") >=
      (int)(sizeof path - (size_t)(slash + 1 - path)))
    return;
  int fd = open(path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  dprintf(fd, "%d\n", (int)getpid());
  close(fd);
}

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Reads only the init line, so that init delay/error apply even to a conf
 * that is otherwise broken or about to be read under the lock. */
static void init_line(const char *path, unsigned *delay_ms, unsigned *init_error) {
  FILE *f = fopen(path, "re");
  char line[1024], key[32], val[128];
  if (!f) return;
  while (fgets(line, sizeof line, f)) {
    char *p = line;
    line[strcspn(line, "\r\n")] = 0;
    if (token(&p, key, sizeof key, val, sizeof val) != 1 || strcmp(key, "init") || val[0])
      continue;
    while (token(&p, key, sizeof key, val, sizeof val) == 1) {
      unsigned u;
      if (parse_uint(val, &u)) continue;
      if (!strcmp(key, "delay_ms")) *delay_ms = u;
      if (!strcmp(key, "error")) *init_error = u;
    }
  }
  fclose(f);
}

/* ------------------------------------------------------------ init/shutdown */
static nvmlReturn_t do_init(void) {
  char path[PATH_MAX + 32] = "", alt[PATH_MAX + 32] = "";
  unsigned delay_ms = 0, init_error = 0;
  FILE *probe = NULL;
  /* The real directory's conf, else the loaded directory's; when neither
   * opens, the first candidate, so that the error names the expected path. */
  int have = conf_path(path, sizeof path, 0) == 0;
  if (!have || !(probe = fopen(path, "re"))) {
    if (conf_path(alt, sizeof alt, 1) == 0 && ((probe = fopen(alt, "re")) || !have))
      strcpy(path, alt);
  }
  if (probe) fclose(probe);
  init_line(path, &delay_ms, &init_error);
  if (delay_ms) sleep_ms(delay_ms); /* outside the lock, like a slow driver */
  if (init_error) {
    snprintf(g_error, sizeof g_error, "%s: init error=%u", path, init_error);
    return (nvmlReturn_t)init_error;
  }
  pthread_mutex_lock(&g_lock);
  nvmlReturn_t rc = NVML_SUCCESS;
  if (g_refs == 0) {
    if (!path[0]) {
      snprintf(g_error, sizeof g_error, "cannot locate nvml-mock.conf beside the library");
      rc = NVML_ERROR_DRIVER_NOT_LOADED;
    } else if (load_conf(path) != 0) {
      g_ngpus = g_nmigs = 0;
      rc = NVML_ERROR_DRIVER_NOT_LOADED;
    } else {
      g_error[0] = 0;
    }
  }
  if (rc == NVML_SUCCESS) __atomic_add_fetch(&g_refs, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return do_init(); }
EXPORT nvmlReturn_t nvmlInit(void) { return do_init(); }
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return do_init(); }

EXPORT nvmlReturn_t nvmlShutdown(void) {
  nvmlReturn_t rc = NVML_SUCCESS;
  pthread_mutex_lock(&g_lock);
  if (g_refs == 0) rc = NVML_ERROR_UNINITIALIZED;
  else __atomic_sub_fetch(&g_refs, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&g_lock);
  return rc;
}

/* Not NVML: why the last nvmlInit failed ("" after a success). */
EXPORT const char *nvmlMockLastError(void) { return g_error; }

EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
  switch ((int)result) {
  case 0: return "Success";
  case 1: return "Uninitialized";
  case 2: return "Invalid Argument";
  case 3: return "Not Supported";
  case 4: return "Insufficient Permissions";
  case 5: return "Already Initialized";
  case 6: return "Not Found";
  case 7: return "Insufficient Size";
  case 8: return "Insufficient External Power";
  case 9: return "Driver Not Loaded";
  case 10: return "Timeout";
  case 11: return "Interrupt Request Issue";
  case 12: return "NVML Shared Library Not Found";
  case 13: return "Function Not Found";
  case 14: return "Corrupted infoROM";
  case 15: return "GPU is lost";
  case 16: return "GPU requires restart";
  case 17: return "The operating system has blocked the request.";
  case 18: return "RM has detected an NVML/RM version mismatch.";
  case 19: return "In use by another client";
  case 20: return "Insufficient Memory";
  case 21: return "No data";
  default: return "Unknown Error";
  }
}

/* ------------------------------------------------------------ system */
EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
  CHECK_INIT();
  return copy_str(version, length, g_driver);
}
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
  CHECK_INIT();
  return copy_str(version, length, g_nvml);
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
  CHECK_INIT();
  if (!cudaDriverVersion) return NVML_ERROR_INVALID_ARGUMENT;
  *cudaDriverVersion = g_cuda;
  return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
  return nvmlSystemGetCudaDriverVersion_v2(cudaDriverVersion);
}

/* ------------------------------------------------------------ handles */
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
  CHECK_INIT();
  if (!deviceCount) return NVML_ERROR_INVALID_ARGUMENT;
  *deviceCount = g_ngpus;
  return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) {
  return nvmlDeviceGetCount_v2(deviceCount);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
  CHECK_INIT();
  if (!device || index >= g_ngpus) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &g_gpu[index];
  return NVML_SUCCESS;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
  return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
  CHECK_INIT();
  if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned i = 0; i < g_ngpus; i++)
    if (!strcmp(g_gpu[i].uuid, uuid)) { *device = &g_gpu[i]; return NVML_SUCCESS; }
  for (unsigned i = 0; i < g_nmigs; i++)
    if (!strcmp(g_mig[i].uuid, uuid)) { *device = &g_mig[i]; return NVML_SUCCESS; }
  return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) {
  unsigned d, b, v, f;
  CHECK_INIT();
  if (!pciBusId || !device || parse_bus(pciBusId, &d, &b, &v, &f)) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned i = 0; i < g_ngpus; i++) {
    struct nvmlDevice_st *g = &g_gpu[i];
    if (g->domain == d && g->bus == b && g->dev == v && g->fn == f) {
      *device = g;
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device) {
  return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* ------------------------------------------------------------ device queries */
/* The physical GPU behind a handle (itself, or a MIG device's parent). */
static struct nvmlDevice_st *gpu_of(nvmlDevice_t h) { return h->is_mig ? h->parent : h; }

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
  CHECK_DEV(device, uuid);
  return copy_str(uuid, length, device->uuid);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
  CHECK_DEV(device, name);
  return copy_str(name, length, device->name);
}

EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type) {
  CHECK_DEV(device, type);
  *type = gpu_of(device)->brand;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch) {
  CHECK_DEV(device, arch);
  *arch = gpu_of(device)->arch;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
  CHECK_DEV(device, major);
  if (!minor) return NVML_ERROR_INVALID_ARGUMENT;
  *major = gpu_of(device)->cc_major;
  *minor = gpu_of(device)->cc_minor;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
  CHECK_DEV(device, minorNumber);
  if (device->is_mig) return NVML_ERROR_NOT_SUPPORTED;
  *minorNumber = device->minor;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
  CHECK_DEV(device, index);
  if (device->is_mig) return NVML_ERROR_NOT_SUPPORTED;
  *index = device->index;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
  CHECK_DEV(device, pci);
  const struct nvmlDevice_st *g = gpu_of(device);
  memset(pci, 0, sizeof *pci);
  snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X",
           g->domain & 0xffff, g->bus, g->dev, g->fn);
  snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", g->domain, g->bus, g->dev, g->fn);
  pci->domain = g->domain;
  pci->bus = g->bus;
  pci->device = g->dev;
  pci->pciDeviceId = g->pci_id;
  pci->pciSubSystemId = g->subsys;
  return NVML_SUCCESS;
}

/* ------------------------------------------------------------ MIG */
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                         unsigned int *pendingMode) {
  CHECK_DEV(device, currentMode);
  if (!pendingMode) return NVML_ERROR_INVALID_ARGUMENT;
  if (device->is_mig || device->mig_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
  *currentMode = *pendingMode = device->mig_mode ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
  CHECK_DEV(device, count);
  if (device->is_mig) return NVML_ERROR_NOT_SUPPORTED;
  *count = device->mig_mode == 1 ? device->max_mig : 0;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *migDevice) {
  CHECK_DEV(device, migDevice);
  if (device->is_mig || device->mig_mode < 0) return NVML_ERROR_NOT_SUPPORTED;
  if (index >= device->max_mig) return NVML_ERROR_INVALID_ARGUMENT;
  if (index >= device->nmig) return NVML_ERROR_NOT_FOUND;
  *migDevice = device->mig[index];
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
  CHECK_DEV(device, isMigDevice);
  *isMigDevice = device->is_mig ? 1 : 0;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                                 nvmlDevice_t *device) {
  CHECK_DEV(migDevice, device);
  if (!migDevice->is_mig) return NVML_ERROR_INVALID_ARGUMENT;
  *device = migDevice->parent;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
  CHECK_DEV(device, id);
  if (!device->is_mig) return NVML_ERROR_NOT_SUPPORTED;
  *id = device->gi;
  return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
  CHECK_DEV(device, id);
  if (!device->is_mig) return NVML_ERROR_NOT_SUPPORTED;
  *id = device->ci;
  return NVML_SUCCESS;
}
