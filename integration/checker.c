/*
 * checker: runs INSIDE a test container and prints what the container sees,
 * one fact per line, for tests/runtimes.rs to parse. Every line is
 *
 *     KIND SUBJECT [key=value ...] [msg=free text to the end of the line]
 *
 * where `msg=` and `line=`, when present, are the last field and run to the
 * end of the line (they may hold spaces). Lines:
 *
 *   node PATH TYPE MAJ:MIN mode=0666 open=ok|ERRNO   every /dev/nvidia... and /dev/dxg, a
 *                                       Jetson's /dev/nvmap, nvhost-* and nvgpu/igpu0/, and
 *                                       /dev/nvidia-caps/ entry, and of
 *                                       /dev/nvidia-caps-imex-channels/,
 *                                       /dev/infiniband/, /dev/gdrdrv,
 *                                       /dev/dri/{card,renderD}*, by-path/ (TYPE c, b,
 *                                       d, f, l, s, p; MAJ:MIN "-" unless a
 *                                       device). Opening a node whose number
 *                                       no driver serves gives ENXIO when the
 *                                       device cgroup allows it, EPERM when it
 *                                       denies it (see shared/TESTBED.md).
 *   devnull /dev/null open=ok           the runtime's own device rules hold
 *   file PATH size=N ro=0|1 nosuid=0|1 nodev=0|1 noexec=0|1
 *   link PATH target=TARGET             NVIDIA files in the library and binary
 *                                       directories (statvfs flags say how the
 *                                       file's mount is mounted)
 *   cuda /abs/libcuda.so.N dlopen=ok rc=0 version=12020
 *   cuda libcuda.so.1 dlopen=error msg=...  (dlopen of the SONAME goes through
 *                                       the image's loader and ld.so.cache)
 *   nvml PATH dlopen=ok init_rc=9       nvmlInit_v2's answer (9: no driver)
 *   ldcache /etc/ld.so.cache size=N libc.so.6=yes libcuda.so.1=yes ...
 *                                       [copied=/out/ld.so.cache]
 *   ldconf PATH line=TEXT               each line of each ld.so.conf.d file
 *   procnv PATH ...                     /proc/driver/nvidia as the container
 *                                       sees it (ModifyDeviceFiles from params)
 *   mount POINT fstype=T opts=O         mountinfo entries naming nvidia/cuda
 *   checker done                        the last line: output is complete
 *
 * Built on the host with gcc, dynamically linked against glibc, so that its
 * dlopen() goes through the container's ld-linux and /etc/ld.so.cache.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* The errno's symbolic name (ENXIO), which is stable across libc versions,
 * unlike strerror's text. strerrorname_np is glibc 2.32's; before it (the
 * Debian 11 root the fixtures are also built in) the names the checks
 * compare come from this table. */
static const char *errno_name(int err)
{
	static char buf[32];
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 32)
	const char *name = strerrorname_np(err);
	if (name)
		return name;
#else
	static const struct { int err; const char *name; } names[] = {
		{EPERM, "EPERM"}, {ENOENT, "ENOENT"}, {EIO, "EIO"},
		{ENXIO, "ENXIO"}, {EACCES, "EACCES"}, {EBUSY, "EBUSY"},
		{EEXIST, "EEXIST"}, {ENODEV, "ENODEV"}, {ENOTDIR, "ENOTDIR"},
		{EISDIR, "EISDIR"}, {EINVAL, "EINVAL"}, {ENOSYS, "ENOSYS"},
		{ELOOP, "ELOOP"}, {EROFS, "EROFS"}, {EAGAIN, "EAGAIN"},
		{ENOTSUP, "ENOTSUP"}, {EXDEV, "EXDEV"}, {ENOSPC, "ENOSPC"},
	};
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
		if (names[i].err == err)
			return names[i].name;
#endif
	snprintf(buf, sizeof buf, "E%d", err);
	return buf;
}

static char type_letter(mode_t mode)
{
	if (S_ISCHR(mode)) return 'c';
	if (S_ISBLK(mode)) return 'b';
	if (S_ISDIR(mode)) return 'd';
	if (S_ISREG(mode)) return 'f';
	if (S_ISLNK(mode)) return 'l';
	if (S_ISSOCK(mode)) return 's';
	if (S_ISFIFO(mode)) return 'p';
	return '?';
}

/* Prints `node PATH ...` for one /dev entry and opens it when it is a device:
 * that open is the device cgroup's verdict. */
static void report_node(const char *path)
{
	struct stat st;
	if (lstat(path, &st) != 0) {
		printf("node %s ? - open=%s\n", path, errno_name(errno));
		return;
	}
	char numbers[32] = "-";
	if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))
		snprintf(numbers, sizeof numbers, "%u:%u", major(st.st_rdev), minor(st.st_rdev));
	printf("node %s %c %s mode=%04o", path, type_letter(st.st_mode), numbers,
	       (unsigned)(st.st_mode & 07777));
	if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
		/* Read-only nodes (the MIG caps, 0444) are opened read-only, as
		 * CUDA does: the permission check then passes and the device
		 * cgroup alone decides, which is what ENXIO/EPERM report. */
		int access = (st.st_mode & 0222) ? O_RDWR : O_RDONLY;
		int fd = open(path, access | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
		if (fd >= 0) {
			printf(" open=ok");
			close(fd);
		} else {
			printf(" open=%s", errno_name(errno));
		}
	}
	printf("\n");
}

static int matches_any(const char *name, const char *const *patterns)
{
	for (; *patterns; patterns++)
		if (fnmatch(*patterns, name, 0) == 0)
			return 1;
	return 0;
}

/* Every entry of DIR whose name matches one of PATTERNS (NULL-terminated),
 * in sorted order, through report(). */
static void for_each_match(const char *dir, const char *const *patterns,
			   void (*report)(const char *))
{
	struct dirent **names;
	int n = scandir(dir, &names, NULL, alphasort);
	if (n < 0)
		return;
	for (int i = 0; i < n; i++) {
		const char *name = names[i]->d_name;
		int dots = strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
		if (!dots && matches_any(name, patterns)) {
			char path[PATH_MAX];
			snprintf(path, sizeof path, "%s/%s", dir, name);
			report(path);
		}
		free(names[i]);
	}
	free(names);
}

static void report_devices(void)
{
	static const char *const nvidia[] = {"nvidia*", NULL}, *const all[] = {"*", NULL};
	for_each_match("/dev", nvidia, report_node);
	for_each_match("/dev/nvidia-caps", all, report_node);
	/* The devices beyond the GPU: IMEX channels, RDMA, GDRCopy, DRM. */
	/* dxg: a WSL2 host's one node, through which Windows' driver serves every GPU. */
	static const char *const gdr[] = {"gdrdrv", "dxg", NULL}, *const dri[] = {"card*", "renderD*", "by-path", NULL};
	for_each_match("/dev/nvidia-caps-imex-channels", all, report_node);
	for_each_match("/dev/infiniband", all, report_node);
	for_each_match("/dev", gdr, report_node);
	for_each_match("/dev/dri", dri, report_node);
	for_each_match("/dev/dri/by-path", all, report_node);
	/* A Jetson's nodes, as its CSV files list them (tests/jetson.rs). */
	static const char *const tegra[] = {"nvmap", "nvhost-*", NULL};
	for_each_match("/dev", tegra, report_node);
	for_each_match("/dev/nvgpu/igpu0", all, report_node);

	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (fd >= 0) {
		printf("devnull /dev/null open=ok\n");
		close(fd);
	} else {
		printf("devnull /dev/null open=%s\n", errno_name(errno));
	}
}

/* `file` or `link` for one injected library or binary, with its mount's
 * flags: injected files must be read-only, nosuid and nodev. */
static void report_file(const char *path)
{
	struct stat st;
	if (lstat(path, &st) != 0)
		return;
	if (S_ISLNK(st.st_mode)) {
		char target[PATH_MAX];
		ssize_t len = readlink(path, target, sizeof target - 1);
		target[len < 0 ? 0 : len] = '\0';
		printf("link %s target=%s\n", path, target);
		return;
	}
	struct statvfs vfs;
	if (statvfs(path, &vfs) != 0) {
		printf("file %s size=%lld statvfs=%s\n", path, (long long)st.st_size,
		       errno_name(errno));
		return;
	}
	printf("file %s size=%lld ro=%d nosuid=%d nodev=%d noexec=%d\n", path,
	       (long long)st.st_size, !!(vfs.f_flag & ST_RDONLY), !!(vfs.f_flag & ST_NOSUID),
	       !!(vfs.f_flag & ST_NODEV), !!(vfs.f_flag & ST_NOEXEC));
}

/* Every file of one WSL2 driver store directory. */
static void report_wsl_store(const char *dir)
{
	static const char *const all[] = {"*", NULL};
	for_each_match(dir, all, report_file);
}

static void report_files(void)
{
	static const char *const lib_dirs[] = {"/usr/lib/x86_64-linux-gnu", "/usr/lib64",
					       "/lib/x86_64-linux-gnu"};
	static const char *const libs[] = {"libcuda*", "libnv*", "lib*_nvidia*", NULL};
	static const char *const bins[] = {"nvidia-*", "nv-*", NULL};
	for (size_t d = 0; d < sizeof lib_dirs / sizeof *lib_dirs; d++) {
		/* Skip a directory that is a link to another (merged /usr). */
		char real[PATH_MAX];
		if (realpath(lib_dirs[d], real) && strcmp(real, lib_dirs[d]) != 0)
			continue;
		for_each_match(lib_dirs[d], libs, report_file);
	}
	for_each_match("/usr/bin", bins, report_file);
	/* Graphics, display and OpenCL files beyond the libraries; the GBM
	 * backend link; our application profile; the gated devices' files. */
	static const char *const nv[] = {"*nvidia*", NULL}, *const all[] = {"*", NULL};
	static const char *const beyond[] = {
		"/usr/lib/xorg/modules/drivers", "/usr/lib/xorg/modules/extensions",
		"/usr/share/egl/egl_external_platform.d", "/etc/OpenCL/vendors",
		"/usr/lib/x86_64-linux-gnu/gbm", "/usr/lib64/gbm"};
	for (size_t d = 0; d < sizeof beyond / sizeof *beyond; d++)
		for_each_match(beyond[d], nv, report_file);
	for_each_match("/etc/nvidia/nvidia-application-profiles-rc.d", all, report_file);
	static const char *const udev[] = {"udev", NULL}, *const cufile[] = {"cufile.json", NULL};
	for_each_match("/run", udev, report_file);
	for_each_match("/etc", cufile, report_file);
	for_each_match("/run/nvidia-fabricmanager", all, report_file);
	/* A WSL2 host's files, mounted at their own paths: /usr/lib/wsl/lib and
	 * each driver store below /usr/lib/wsl/drivers. */
	for_each_match("/usr/lib/wsl/lib", all, report_file);
	for_each_match("/usr/lib/wsl/drivers", all, report_wsl_store);
	/* A Jetson's files, at the paths its CSV files list (L4T's nvidia/
	 * library directory, CUDA's tree, the release file). */
	for_each_match("/usr/lib/x86_64-linux-gnu/nvidia", all, report_file);
	for_each_match("/usr/local/cuda/bin", all, report_file);
	static const char *const release[] = {"nv_tegra_release", NULL};
	for_each_match("/etc", release, report_file);
}

/* The loaded object's real path, from the link map dlopen made. */
static const char *loaded_path(void *handle)
{
	struct link_map *map = NULL;
	if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || !map || !map->l_name)
		return "?";
	return map->l_name;
}

/* dlerror's text on one line (it has no newlines, but be sure). */
static const char *one_line(const char *text)
{
	static char buf[1024];
	snprintf(buf, sizeof buf, "%s", text ? text : "(no dlerror)");
	for (char *p = buf; *p; p++)
		if (*p == '\n')
			*p = ' ';
	return buf;
}

static void report_cuda(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		printf("cuda libcuda.so.1 dlopen=error msg=%s\n", one_line(dlerror()));
		return;
	}
	int (*get_version)(int *) = (int (*)(int *))dlsym(lib, "cuDriverGetVersion");
	if (!get_version) {
		printf("cuda %s dlopen=ok dlsym=error msg=%s\n", loaded_path(lib), one_line(dlerror()));
		return;
	}
	int version = 0;
	int rc = get_version(&version);
	printf("cuda %s dlopen=ok rc=%d version=%d\n", loaded_path(lib), rc, version);
	/* Left loaded: unloading libcuda at exit is not what applications do. */
}

static void report_nvml(void)
{
	void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		printf("nvml libnvidia-ml.so.1 dlopen=error msg=%s\n", one_line(dlerror()));
		return;
	}
	int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
	if (!init) {
		printf("nvml %s dlopen=ok dlsym=error msg=%s\n", loaded_path(lib), one_line(dlerror()));
		return;
	}
	/* Without a kernel driver this returns 9 (NVML_ERROR_DRIVER_NOT_LOADED). */
	printf("nvml %s dlopen=ok init_rc=%d\n", loaded_path(lib), init());
}

/* Whether the cache's string table holds SONAME as a whole NUL-terminated
 * string or as the last component of a path: enough to tell that an entry
 * for it was written. (glibc's ldconfig stores a string that is a suffix of
 * another only once, so the key "libc.so.6" may live inside the value
 * "/lib/x86_64-linux-gnu/libc.so.6".) */
static int cache_names(const char *cache, size_t len, const char *soname)
{
	size_t n = strlen(soname) + 1; /* with its NUL */
	for (const char *p = cache; p + n <= cache + len; p++) {
		p = memmem(p, (size_t)(cache + len - p), soname, n);
		if (!p)
			return 0;
		if (p == cache || p[-1] == '\0' || p[-1] == '/')
			return 1;
	}
	return 0;
}

/* The test may bind-mount a directory at /out: a copy of the cache there
 * lets the host list it with glibc's own `ldconfig -p -C`. The copy is made
 * from inside because the hook may mount its cache over the image's. */
static const char *copy_to_out(const char *data, size_t len)
{
	static const char *const copy = "/out/ld.so.cache";
	struct stat st;
	if (stat("/out", &st) != 0 || !S_ISDIR(st.st_mode))
		return NULL;
	FILE *f = fopen(copy, "wb");
	if (!f)
		return "error";
	size_t written = fwrite(data, 1, len, f);
	if (fclose(f) != 0 || written != len)
		return "error";
	return copy;
}

static void report_ldcache(void)
{
	const char *path = "/etc/ld.so.cache";
	FILE *f = fopen(path, "rb");
	if (!f) {
		printf("ldcache %s open=%s\n", path, errno_name(errno));
		return;
	}
	static char buf[8 << 20];
	size_t len = fread(buf, 1, sizeof buf, f);
	fclose(f);
	printf("ldcache %s size=%zu libc.so.6=%s libcuda.so.1=%s libnvidia-ml.so.1=%s", path, len,
	       cache_names(buf, len, "libc.so.6") ? "yes" : "no",
	       cache_names(buf, len, "libcuda.so.1") ? "yes" : "no",
	       cache_names(buf, len, "libnvidia-ml.so.1") ? "yes" : "no");
	const char *copy = copy_to_out(buf, len);
	if (copy)
		printf(" copied=%s", copy);
	printf("\n");
}

static void report_ldconf_file(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	char line[1024];
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		printf("ldconf %s line=%s\n", path, line);
	}
	fclose(f);
}

static void report_procnv(void)
{
	struct stat st;
	if (stat("/proc/driver/nvidia", &st) != 0)
		return;
	printf("procnv /proc/driver/nvidia present=yes\n");
	FILE *f = fopen("/proc/driver/nvidia/params", "r");
	if (!f)
		return;
	char line[256];
	while (fgets(line, sizeof line, f)) {
		unsigned value;
		if (sscanf(line, "ModifyDeviceFiles: %u", &value) == 1)
			printf("procnv /proc/driver/nvidia/params ModifyDeviceFiles=%u\n", value);
	}
	fclose(f);
}

/* Mounts whose mount point names NVIDIA files: how the hook mounted them. */
static void report_mounts(void)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	if (!f)
		return;
	char line[4096];
	while (fgets(line, sizeof line, f)) {
		char point[PATH_MAX], opts[1024], fstype[256];
		/* id parent maj:min root POINT OPTS [optional fields] - FSTYPE ... */
		if (sscanf(line, "%*s %*s %*s %*s %4095s %1023s", point, opts) != 2)
			continue;
		const char *sep = strstr(line, " - ");
		if (!sep || sscanf(sep + 3, "%255s", fstype) != 1)
			continue;
		if (strstr(point, "nvidia") || strstr(point, "cuda") || strstr(point, "libnv"))
			printf("mount %s fstype=%s opts=%s\n", point, fstype, opts);
	}
	fclose(f);
}

int main(void)
{
	/* Line-buffered so that the lines interleave sanely with nvidia-smi's
	 * output when stdout is a pipe. */
	setvbuf(stdout, NULL, _IOLBF, 0);
	report_devices();
	report_files();
	report_ldcache();
	static const char *const conf[] = {"*.conf", NULL};
	for_each_match("/etc/ld.so.conf.d", conf, report_ldconf_file);
	report_procnv();
	report_mounts();
	report_cuda();
	report_nvml();
	printf("checker done\n");
	return 0;
}
