/* probe: the one part of oci-nvidia-hook that loads driver code, for the
 * static (musl) binary that ships, which cannot load the host's glibc
 * libraries itself.
 *
 *   probe cuda LIBCUDA        cuDriverGetVersion of that libcuda
 *   probe nvml LIBNVML        the GPUs and MIG devices NVML reports
 *   probe nvml-count LIBNVML  NVML's device count
 *
 * It prints one JSON value on stdout, in the form serde gives the Rust side's
 * `Result<T, String>` (src/probe.rs): {"Ok":...} or {"Err":"why"}, and exits
 * 0 either way; anything else is a failed query.
 *
 * It is built by integration/zigbuild against glibc 2.17's symbol set (so it
 * runs wherever the driver does), embedded in the binary, and executed from a
 * memfd by a forked child (src/sys/probe.rs) with an empty environment, from
 * "/", with stdout on the pipe the parent reads with a size and time bound.
 * So no variable of a runtime's (LD_PRELOAD, LD_LIBRARY_PATH, ...) reaches
 * its loader, and nothing is loaded but the library named on its command line
 * (a host path found in the driver root) and that library's own dependencies.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;

enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  UUID_SIZE = 96, /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */
};

/* One JSON string: quotes, backslashes and control characters escaped. */
static void json_string(const char *s) {
  putchar('"');
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      printf("\\%c", c);
    else if (c < 0x20)
      printf("\\u%04x", c);
    else
      putchar(c);
  }
  putchar('"');
}

static int fail(const char *what, const char *detail) {
  char message[1024];
  snprintf(message, sizeof message, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
  fputs("{\"Err\":", stdout);
  json_string(message);
  fputs("}\n", stdout);
  return 0;
}

static void *load(const char *path) {
  /* RTLD_NOW: a library missing a dependency fails here, not mid-call. */
  return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

static int cuda(const char *path) {
  char what[512];
  void *lib = load(path);
  if (!lib) {
    snprintf(what, sizeof what, "cannot load %s", path);
    return fail(what, dlerror());
  }
  int (*get)(int *) = (int (*)(int *))dlsym(lib, "cuDriverGetVersion");
  if (!get) {
    snprintf(what, sizeof what, "%s has no cuDriverGetVersion", path);
    return fail(what, dlerror());
  }
  int version = 0;
  int status = get(&version);
  if (status != 0) {
    snprintf(what, sizeof what, "cuDriverGetVersion returned CUresult %d", status);
    return fail(what, NULL);
  }
  if (version <= 0) {
    snprintf(what, sizeof what, "cuDriverGetVersion reported %d", version);
    return fail(what, NULL);
  }
  printf("{\"Ok\":%d}\n", version);
  return 0;
}

/* The NVML entry points used, resolved once. */
static struct {
  nvmlReturn_t (*init)(void);
  const char *(*error_string)(nvmlReturn_t);
  nvmlReturn_t (*count)(unsigned *);
  nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t *);
  nvmlReturn_t (*uuid)(nvmlDevice_t, char *, unsigned);
  nvmlReturn_t (*brand)(nvmlDevice_t, int *);
  nvmlReturn_t (*cc)(nvmlDevice_t, int *, int *);
  nvmlReturn_t (*mig_mode)(nvmlDevice_t, unsigned *, unsigned *);
  nvmlReturn_t (*max_migs)(nvmlDevice_t, unsigned *);
  nvmlReturn_t (*mig_by_index)(nvmlDevice_t, unsigned, nvmlDevice_t *);
  nvmlReturn_t (*gi)(nvmlDevice_t, unsigned *);
  nvmlReturn_t (*ci)(nvmlDevice_t, unsigned *);
} nvml;

/* NVML's error in the words the in-process query (src/nvml.rs) uses. */
static int nvml_fail(const char *call, nvmlReturn_t rc) {
  if (rc == NVML_ERROR_DRIVER_NOT_LOADED)
    return fail("driver not loaded", NULL);
  if (rc == NVML_ERROR_NO_PERMISSION)
    return fail("no permission to use the GPUs", NULL);
  char what[256];
  snprintf(what, sizeof what, "%s returned %d", call, rc);
  return fail(what, nvml.error_string ? nvml.error_string(rc) : NULL);
}

/* Resolves NVML symbol `name` into `*slot`; prints the failure and returns
 * 0 when the library lacks it. */
static int nvml_symbol(void *lib, const char *path, const char *name, void **slot) {
  *slot = dlsym(lib, name);
  if (*slot)
    return 1;
  char what[640];
  snprintf(what, sizeof what, "cannot load libnvidia-ml: no symbol %s in %s", name, path);
  fail(what, NULL);
  return 0;
}

/* Loads NVML from `path` and initialises it; 1 when ready, else 0 with the
 * failure printed. `full` asks for every symbol `nvml` holds. */
static int nvml_open(const char *path, int full) {
  void *lib = load(path);
  if (!lib) {
    fail("cannot load libnvidia-ml", dlerror());
    return 0;
  }
  *(void **)&nvml.error_string = dlsym(lib, "nvmlErrorString");
  if (!nvml_symbol(lib, path, "nvmlInit_v2", (void **)&nvml.init) ||
      !nvml_symbol(lib, path, "nvmlDeviceGetCount_v2", (void **)&nvml.count))
    return 0;
  if (full && (!nvml_symbol(lib, path, "nvmlDeviceGetHandleByIndex_v2", (void **)&nvml.by_index) ||
               !nvml_symbol(lib, path, "nvmlDeviceGetUUID", (void **)&nvml.uuid) ||
               !nvml_symbol(lib, path, "nvmlDeviceGetBrand", (void **)&nvml.brand) ||
               !nvml_symbol(lib, path, "nvmlDeviceGetCudaComputeCapability", (void **)&nvml.cc) ||
               !nvml_symbol(lib, path, "nvmlDeviceGetMigMode", (void **)&nvml.mig_mode) ||
               !nvml_symbol(lib, path, "nvmlDeviceGetMaxMigDeviceCount", (void **)&nvml.max_migs) ||
               !nvml_symbol(lib, path, "nvmlDeviceGetMigDeviceHandleByIndex",
                            (void **)&nvml.mig_by_index) ||
               !nvml_symbol(lib, path, "nvmlDeviceGetGpuInstanceId", (void **)&nvml.gi) ||
               !nvml_symbol(lib, path, "nvmlDeviceGetComputeInstanceId", (void **)&nvml.ci)))
    return 0;
  nvmlReturn_t rc = nvml.init();
  if (rc != NVML_SUCCESS) {
    nvml_fail("nvmlInit_v2", rc);
    return 0;
  }
  return 1;
}

static int nvml_count(const char *path) {
  if (!nvml_open(path, 0))
    return 0;
  unsigned count = 0;
  nvmlReturn_t rc = nvml.count(&count);
  if (rc != NVML_SUCCESS)
    return nvml_fail("nvmlDeviceGetCount_v2", rc);
  printf("{\"Ok\":%u}\n", count);
  return 0;
}

/* nvml-wrapper's names of NVML's brands, lower case (src/nvml.rs). */
static const char *brand_name(int brand) {
  static const char *names[] = {"unknown", "quadro", "tesla", "nvs", "grid", "geforce",
                                "titan", "vapps", "vpc", "vcs", "vws", "cloudgaming",
                                "quadrortx", "nvidiartx", "nvidia", "geforcertx", "titanrtx"};
  if (brand >= 0 && brand < (int)(sizeof names / sizeof names[0]))
    return names[brand];
  return "unknown";
}

/* The report is built in a buffer and printed only when whole, so that a
 * failure half-way prints one {"Err":...} and nothing else. */
static char report[1 << 20];
static size_t used;

static void add(const char *format, ...) __attribute__((format(printf, 1, 2)));

static void add(const char *format, ...) {
  va_list args;
  va_start(args, format);
  if (used < sizeof report) {
    int n = vsnprintf(report + used, sizeof report - used, format, args);
    used += n > 0 ? (size_t)n : 0;
  }
  va_end(args);
}

/* The UUID of `device` (a GPU or MIG device: `kind`) into `uuid`, checked
 * to print as a JSON string as it is; 0 with the failure printed if not. */
static int uuid_of(nvmlDevice_t device, char uuid[UUID_SIZE], const char *kind) {
  nvmlReturn_t rc = nvml.uuid(device, uuid, UUID_SIZE);
  if (rc != NVML_SUCCESS) {
    nvml_fail("nvmlDeviceGetUUID", rc);
    return 0;
  }
  uuid[UUID_SIZE - 1] = 0;
  if (strpbrk(uuid, "\"\\")) {
    char what[64];
    snprintf(what, sizeof what, "NVML gave a %s UUID with a quote or backslash", kind);
    fail(what, NULL);
    return 0;
  }
  return 1;
}

static int nvml_report(const char *path) {
  if (!nvml_open(path, 1))
    return 0;
  unsigned count = 0;
  nvmlReturn_t rc = nvml.count(&count);
  if (rc != NVML_SUCCESS)
    return nvml_fail("nvmlDeviceGetCount_v2", rc);
  add("{\"Ok\":{\"gpus\":[");
  for (unsigned i = 0; i < count; i++) {
    nvmlDevice_t device;
    char uuid[UUID_SIZE] = {0};
    int brand = 0, major = 0, minor = 0;
    unsigned current = 0, pending = 0;
    if ((rc = nvml.by_index(i, &device)) != NVML_SUCCESS)
      return nvml_fail("nvmlDeviceGetHandleByIndex_v2", rc);
    if ((rc = nvml.cc(device, &major, &minor)) != NVML_SUCCESS)
      return nvml_fail("nvmlDeviceGetCudaComputeCapability", rc);
    rc = nvml.mig_mode(device, &current, &pending);
    if (rc == NVML_ERROR_NOT_SUPPORTED)
      current = 0;
    else if (rc != NVML_SUCCESS)
      return nvml_fail("nvmlDeviceGetMigMode", rc);
    int mig_enabled = current == 1;
    add("%s{\"migs\":[", i ? "," : "");
    if (mig_enabled) {
      unsigned slots = 0, listed = 0;
      if ((rc = nvml.max_migs(device, &slots)) != NVML_SUCCESS)
        return nvml_fail("nvmlDeviceGetMaxMigDeviceCount", rc);
      for (unsigned m = 0; m < slots; m++) {
        nvmlDevice_t mig;
        char mig_uuid[UUID_SIZE] = {0};
        unsigned gi = 0, ci = 0;
        rc = nvml.mig_by_index(device, m, &mig);
        /* Slots without an instance are absent, not errors. */
        if (rc == NVML_ERROR_NOT_FOUND)
          continue;
        if (rc != NVML_SUCCESS)
          return nvml_fail("nvmlDeviceGetMigDeviceHandleByIndex", rc);
        if ((rc = nvml.gi(mig, &gi)) != NVML_SUCCESS)
          return nvml_fail("nvmlDeviceGetGpuInstanceId", rc);
        if ((rc = nvml.ci(mig, &ci)) != NVML_SUCCESS)
          return nvml_fail("nvmlDeviceGetComputeInstanceId", rc);
        if (!uuid_of(mig, mig_uuid, "MIG"))
          return 0;
        add("%s{\"index\":%u,\"uuid\":\"%s\",\"gpu_instance\":%u,\"compute_instance\":%u}",
            listed++ ? "," : "", m, mig_uuid, gi, ci);
      }
    }
    if (!uuid_of(device, uuid, "GPU"))
      return 0;
    if ((rc = nvml.brand(device, &brand)) != NVML_SUCCESS)
      return nvml_fail("nvmlDeviceGetBrand", rc);
    add("],\"uuid\":\"%s\",\"brand\":\"%s\",\"compute_capability\":{\"major\":%d,\"minor\":%d},"
        "\"mig_enabled\":%s}",
        uuid, brand_name(brand), major, minor, mig_enabled ? "true" : "false");
  }
  add("]}}\n");
  if (used >= sizeof report)
    return fail("NVML's report exceeds the probe's buffer", NULL);
  fwrite(report, 1, used, stdout);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3)
    return 2;
  if (!strcmp(argv[1], "cuda"))
    return cuda(argv[2]);
  if (!strcmp(argv[1], "nvml"))
    return nvml_report(argv[2]);
  if (!strcmp(argv[1], "nvml-count"))
    return nvml_count(argv[2]);
  return 2;
}
