/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The simulated node's shared state: preparing a state dir, injecting
 * faults, and reporting them.  The layout of node.state and the event
 * protocol are in simstate.h; the simulator library maps the same file.
 */
#include "sim/simnode.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/fileio.h"
#include "nvml/nvml_abi.h"
#include "sim/driverroot.h"
#include "sim/profile.h"
#include "sim/simstate.h"

#define PROFILE_MAX (4u << 20)

int64_t sim_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

const char *sim_default_state_dir(const char *profile_name, char *buf, size_t len)
{
	const char *rt = getenv("XDG_RUNTIME_DIR");

	if (!rt || !*rt)
		rt = "/tmp";
	snprintf(buf, len, "%s/gpuop-sim-%u/%s", rt, (unsigned int)getuid(), profile_name);
	return buf;
}

static int state_path(const char *state_dir, const char *file, char *out, size_t len,
		      struct gpuop_error *err)
{
	if ((size_t)snprintf(out, len, "%s/%s", state_dir, file) >= len)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "state dir path too long: %s",
				 state_dir);
	return 0;
}

struct sim_shared *sim_state_map(const char *state_dir, struct gpuop_error *err)
{
	char path[PATH_MAX];
	_cleanup_close_ int fd = -1;
	struct stat st;

	if (state_path(state_dir, SIM_STATE_FILE, path, sizeof(path), err) < 0)
		return NULL;
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT) {
			error_set(err, GPUOP_ERR_ERRNO, ENOENT,
				  "simulated node %s is not prepared (no %s)", state_dir,
				  SIM_STATE_FILE);
			return NULL;
		}
		error_errno(err, errno, "opening %s", path);
		return NULL;
	}
	if (fstat(fd, &st) < 0) {
		error_errno(err, errno, "stat %s", path);
		return NULL;
	}
	if ((size_t)st.st_size != sizeof(struct sim_shared)) {
		error_set(err, GPUOP_ERR_GENERIC, 0,
			  "%s: %lld bytes, expected %zu (written by another gpuop version? "
			  "remove the state dir)",
			  path, (long long)st.st_size, sizeof(struct sim_shared));
		return NULL;
	}
	struct sim_shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (sh == MAP_FAILED) {
		error_errno(err, errno, "mapping %s", path);
		return NULL;
	}
	if (sh->magic != SIM_STATE_MAGIC || sh->version != SIM_STATE_VERSION ||
	    sh->size != sizeof(*sh) || sh->ngpus == 0 || sh->ngpus > SIM_MAX_GPUS ||
	    memchr(sh->profile, '\0', sizeof(sh->profile)) == NULL) {
		munmap(sh, sizeof(*sh));
		error_set(err, GPUOP_ERR_GENERIC, 0,
			  "%s: bad header (not a gpuop simulator state file of version %u)", path,
			  SIM_STATE_VERSION);
		return NULL;
	}
	return sh;
}

void sim_state_unmap(struct sim_shared *sh)
{
	if (sh)
		munmap(sh, sizeof(*sh));
}

/* Writers serialise on an flock of node.state itself. */
static int state_lock(const char *state_dir, struct gpuop_error *err)
{
	char path[PATH_MAX];

	if (state_path(state_dir, SIM_STATE_FILE, path, sizeof(path), err) < 0)
		return -1;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return error_set(err, GPUOP_ERR_ERRNO, ENOENT,
					 "simulated node %s is not prepared (no %s)", state_dir,
					 SIM_STATE_FILE);
		return error_errno(err, errno, "opening %s", path);
	}
	while (flock(fd, LOCK_EX) < 0) {
		if (errno != EINTR) {
			int e = errno;
			close(fd);
			return error_errno(err, e, "locking %s", path);
		}
	}
	return fd;
}

static void futex_wake_all(uint32_t *word)
{
	syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int create_state(const char *state_dir, const struct sim_profile *p, struct gpuop_error *err)
{
	char path[PATH_MAX];
	_cleanup_free_ struct sim_shared *sh = calloc(1, sizeof(*sh));

	if (!sh)
		return error_errno(err, ENOMEM, "allocating the node state");
	if (state_path(state_dir, SIM_STATE_FILE, path, sizeof(path), err) < 0)
		return -1;
	sh->magic = SIM_STATE_MAGIC;
	sh->version = SIM_STATE_VERSION;
	sh->size = sizeof(*sh);
	snprintf(sh->profile, sizeof(sh->profile), "%s", p->name);
	sh->created_us = sim_now_us();
	sh->ngpus = (uint32_t)p->ngpus;
	return atomic_write_file(path, sh, sizeof(*sh), 0644, err);
}

/* Check an existing node.state against the profile; 0 when it matches,
 * 1 when there is none, -1 on a mismatch or a broken file. */
static int check_state(const char *state_dir, const struct sim_profile *p, const char *profile_path,
		       struct gpuop_error *err)
{
	struct sim_shared *sh = sim_state_map(state_dir, err);

	if (!sh)
		return error_is(err, GPUOP_ERR_ERRNO, ENOENT) ? 1 : -1;
	int r = 0;
	if (strcmp(sh->profile, p->name) != 0)
		r = error_set(err, GPUOP_ERR_GENERIC, 0,
			      "state dir %s was prepared for profile \"%s\", not \"%s\" (%s); "
			      "remove it or use another GPUOP_SIM_STATE",
			      state_dir, sh->profile, p->name, profile_path);
	else if (sh->ngpus != p->ngpus)
		r = error_set(err, GPUOP_ERR_GENERIC, 0,
			      "state dir %s holds %u GPUs but %s now has %zu; remove the state dir",
			      state_dir, sh->ngpus, profile_path, p->ngpus);
	sim_state_unmap(sh);
	return r;
}

static int build_driver_root(const char *state_dir, const struct sim_profile *p,
			     const char *sim_lib_path, struct gpuop_error *err)
{
	struct sim_dr_gpu gpus[SIM_MAX_GPUS];
	char cuda[16];

	for (size_t i = 0; i < p->ngpus; i++) {
		gpus[i] = (struct sim_dr_gpu){
			.minor = p->gpus[i].minor,
			.bus_id = p->gpus[i].bus_id,
			.name = p->model.name,
			.uuid = p->gpus[i].uuid,
			.memory_mib = p->model.memory_mib,
			.mig_capable = p->model.mig_capable,
		};
	}
	snprintf(cuda, sizeof(cuda), "%d.%d",
		 NVML_CUDA_DRIVER_VERSION_MAJOR(p->cuda_driver_version),
		 NVML_CUDA_DRIVER_VERSION_MINOR(p->cuda_driver_version));
	struct sim_dr_spec spec = {
		.driver_version = p->driver_version,
		.sim_lib_path = sim_lib_path,
		.gpus = gpus,
		.ngpus = p->ngpus,
		.cuda_version = cuda,
	};
	return sim_driverroot_build(state_dir, &spec, err);
}

/* The state dir is written by whoever runs gpuop, often root, and often
 * under /tmp.  It must be ours and not writable by others, its parent must
 * be ours or root's (and not writable by others unless sticky, like /tmp),
 * and the trees we build in it must be real directories: otherwise another
 * user could pre-create it, or plant a symlink, and have us write driver
 * files wherever they point. */
static int check_dir(const char *path, bool is_parent, bool may_be_absent, struct gpuop_error *err)
{
	struct stat st;
	uid_t me = geteuid();

	if (lstat(path, &st) < 0) {
		if (errno == ENOENT && may_be_absent)
			return 0;
		return error_errno(err, errno, "checking %s", path);
	}
	if (!S_ISDIR(st.st_mode))
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "%s is not a directory (a symlink or a file): refusing to use it "
				 "for a simulated node",
				 path);
	if (st.st_uid != me && !(is_parent && st.st_uid == 0))
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "%s belongs to uid %u, not to us (uid %u): refusing to use it for "
				 "a simulated node; remove it or set GPUOP_SIM_STATE",
				 path, (unsigned int)st.st_uid, (unsigned int)me);
	if ((st.st_mode & 0022) && !(is_parent && (st.st_mode & S_ISVTX)))
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "%s is writable by other users (mode %04o): refusing to use it "
				 "for a simulated node",
				 path, (unsigned int)(st.st_mode & 07777));
	return 0;
}

static int check_state_dir_safe(const char *state_dir, struct gpuop_error *err)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s", state_dir);
	char *slash = strrchr(path, '/');
	if (slash && slash != path) {
		*slash = '\0';
		if (check_dir(path, true, false, err) < 0)
			return -1;
	}
	if (check_dir(state_dir, false, false, err) < 0)
		return -1;
	static const char *const subdirs[] = {"driver-root", "dev"};
	for (size_t i = 0; i < ARRAY_SIZE(subdirs); i++) {
		if (state_path(state_dir, subdirs[i], path, sizeof(path), err) < 0 ||
		    check_dir(path, false, true, err) < 0)
			return -1;
	}
	return 0;
}

/* What a prepared tree depends on: the profile's bytes, the library copied
 * into it (path, size, mtime), and whether we could make device nodes. */
static void prepared_stamp(const struct buf *profile, const char *lib, char *out, size_t len)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */
	struct stat st = {0};

	for (size_t i = 0; i < profile->len; i++)
		h = (h ^ (unsigned char)profile->data[i]) * 1099511628211ULL;
	if (lib)
		stat(lib, &st);
	snprintf(out, len, "v1 profile=%016llx lib=%s size=%lld mtime=%lld.%09ld euid=%u\n",
		 (unsigned long long)h, lib ? lib : "-", (long long)st.st_size,
		 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec, (unsigned)geteuid());
}

int sim_prepare(const char *state_dir, const char *profile_path, const char *sim_lib_path,
		struct gpuop_error *err)
{
	_cleanup_free_ struct sim_profile *p = calloc(1, sizeof(*p));
	_cleanup_buf_ struct buf raw;
	_cleanup_close_ int dirfd = -1;
	char path[PATH_MAX];

	buf_init(&raw, PROFILE_MAX);
	if (!p)
		return error_errno(err, ENOMEM, "allocating a profile");
	if (!profile_path || !*profile_path)
		return error_set(err, GPUOP_ERR_USAGE, 0,
				 "preparing %s: no machine profile given (set GPUOP_SIM_PROFILE)",
				 state_dir);
	if (sim_profile_load(profile_path, p, err) < 0 ||
	    buf_read_file(&raw, profile_path, err) < 0)
		return error_wrap(err, "preparing simulated node %s", state_dir);
	if (mkdir_p(state_dir, 0755, err) < 0)
		return error_wrap(err, "preparing simulated node");
	if (check_state_dir_safe(state_dir, err) < 0)
		return -1;

	/* One preparer at a time; readers never need this lock. */
	dirfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return error_errno(err, errno, "opening %s", state_dir);
	while (flock(dirfd, LOCK_EX) < 0)
		if (errno != EINTR)
			return error_errno(err, errno, "locking %s", state_dir);

	int r = check_state(state_dir, p, profile_path, err);
	if (r < 0)
		return -1;
	if (r > 0 && create_state(state_dir, p, err) < 0)
		return error_wrap(err, "preparing simulated node %s", state_dir);

	/* Every gpuop --simulate run prepares the node; rebuilding a driver
	 * root of a thousand files each time would dominate its start-up, so
	 * a stamp records what the tree was built from. */
	char stamp[PATH_MAX + 256], old[PATH_MAX + 256] = "";
	prepared_stamp(&raw, sim_lib_path, stamp, sizeof(stamp));
	if (state_path(state_dir, SIM_PREPARED_STAMP, path, sizeof(path), err) < 0)
		return -1;
	_cleanup_fclose_ FILE *f = r == 0 ? fopen(path, "re") : NULL;
	if (f && fgets(old, sizeof(old), f) && strcmp(old, stamp) == 0)
		return 0;
	if (f && unlink(path) < 0 && errno != ENOENT)
		return error_errno(err, errno, "removing %s", path);

	if (state_path(state_dir, SIM_PROFILE_COPY, path, sizeof(path), err) < 0 ||
	    atomic_write_file(path, raw.data ? raw.data : "", raw.len, 0644, err) < 0)
		return error_wrap(err, "preparing simulated node %s", state_dir);
	if (build_driver_root(state_dir, p, sim_lib_path, err) < 0)
		return error_wrap(err, "preparing simulated node %s", state_dir);
	if (state_path(state_dir, SIM_PREPARED_STAMP, path, sizeof(path), err) < 0 ||
	    atomic_write_file(path, stamp, strlen(stamp), 0644, err) < 0)
		return error_wrap(err, "preparing simulated node %s", state_dir);
	return 0;
}

/* ---- fault injection ---------------------------------------------------- */

enum fault_arg { ARG_NONE, ARG_XID, ARG_TEMP };

struct fault_ctx {
	struct sim_shared *sh;
	unsigned int gpu;
	long arg;
};

static void post_event(struct sim_shared *sh, unsigned int gpu, uint64_t type, uint64_t data)
{
	uint32_t n = __atomic_load_n(&sh->seq, __ATOMIC_RELAXED);
	struct sim_shared_event *e = &sh->ring[n % SIM_EVENT_RING];

	__atomic_store_n(&e->seq, 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&e->gpu, gpu, __ATOMIC_RELAXED);
	__atomic_store_n(&e->type, type, __ATOMIC_RELAXED);
	__atomic_store_n(&e->data, data, __ATOMIC_RELAXED);
	__atomic_store_n(&e->time_us, sim_now_us(), __ATOMIC_RELAXED);
	__atomic_store_n(&e->seq, n + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&sh->seq, n + 1, __ATOMIC_RELEASE);
}

static void do_xid(struct fault_ctx *c)
{
	struct sim_shared_gpu *g = &c->sh->gpu[c->gpu];

	__atomic_store_n(&g->last_xid, (uint32_t)c->arg, __ATOMIC_RELAXED);
	__atomic_add_fetch(&g->xid_count, 1, __ATOMIC_RELAXED);
	post_event(c->sh, c->gpu, nvmlEventTypeXidCriticalError, (uint64_t)c->arg);
}

static void do_ecc_dbe(struct fault_ctx *c)
{
	__atomic_add_fetch(&c->sh->gpu[c->gpu].ecc_dbe, 1, __ATOMIC_RELAXED);
	post_event(c->sh, c->gpu, nvmlEventTypeDoubleBitEccError, 0);
}

static void do_ecc_sbe(struct fault_ctx *c)
{
	__atomic_add_fetch(&c->sh->gpu[c->gpu].ecc_sbe, 1, __ATOMIC_RELAXED);
	post_event(c->sh, c->gpu, nvmlEventTypeSingleBitEccError, 0);
}

static void do_lost(struct fault_ctx *c)
{
	__atomic_store_n(&c->sh->gpu[c->gpu].lost, 1, __ATOMIC_RELAXED);
}

static void do_recover(struct fault_ctx *c)
{
	__atomic_store_n(&c->sh->gpu[c->gpu].lost, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&c->sh->gpu[c->gpu].temp_override_set, 0, __ATOMIC_RELAXED);
}

static void do_temp(struct fault_ctx *c)
{
	__atomic_store_n(&c->sh->gpu[c->gpu].temp_override, (int32_t)c->arg, __ATOMIC_RELAXED);
	__atomic_store_n(&c->sh->gpu[c->gpu].temp_override_set, 1, __ATOMIC_RELAXED);
}

static void do_unload(struct fault_ctx *c)
{
	__atomic_store_n(&c->sh->driver_unloaded, 1, __ATOMIC_RELAXED);
}

static void do_load(struct fault_ctx *c)
{
	__atomic_store_n(&c->sh->driver_unloaded, 0, __ATOMIC_RELAXED);
}

/* The faults `gpuop sim inject` knows.  per_gpu: applied to one GPU, or to
 * every GPU for gpu == -1 when all_ok; node-wide faults ignore gpu. */
static const struct fault {
	const char *name;
	enum fault_arg arg;
	bool per_gpu;
	bool all_ok;
	void (*apply)(struct fault_ctx *c);
	const char *help;
} faults[] = {
	{"xid", ARG_XID, true, false, do_xid, "xid N: XidCriticalError event with data N"},
	{"ecc-dbe", ARG_NONE, true, true, do_ecc_dbe, "DoubleBitEccError event, DBE counters +1"},
	{"ecc-sbe", ARG_NONE, true, true, do_ecc_sbe, "SingleBitEccError event, SBE counters +1"},
	{"gpu-lost", ARG_NONE, true, true, do_lost, "queries answer GPU_IS_LOST"},
	{"recover", ARG_NONE, true, true, do_recover, "clear gpu-lost and temp"},
	{"temp", ARG_TEMP, true, true, do_temp, "temp C: pin the temperature at C"},
	{"driver-unload", ARG_NONE, false, true, do_unload, "NVML answers DRIVER_NOT_LOADED"},
	{"driver-load", ARG_NONE, false, true, do_load, "undo driver-unload"},
};

static int parse_arg(const struct fault *f, const char *arg, long *out, struct gpuop_error *err)
{
	long lo = 0, hi = 0;
	char *end;

	if (f->arg == ARG_NONE) {
		if (arg && *arg)
			return error_set(err, GPUOP_ERR_USAGE, 0,
					 "fault %s takes no argument (got \"%s\")", f->name, arg);
		return 0;
	}
	if (f->arg == ARG_XID) {
		lo = 1;
		hi = 65535;
	} else {
		lo = -40;
		hi = 200;
	}
	if (!arg || !*arg)
		return error_set(err, GPUOP_ERR_USAGE, 0, "fault %s needs an argument: %s", f->name,
				 f->help);
	errno = 0;
	long v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v < lo || v > hi)
		return error_set(err, GPUOP_ERR_USAGE, 0,
				 "fault %s: \"%s\" is not an integer in [%ld, %ld]", f->name, arg,
				 lo, hi);
	*out = v;
	return 0;
}

int sim_inject(const char *state_dir, int gpu, const char *fault, const char *arg,
	       struct gpuop_error *err)
{
	const struct fault *f = NULL;
	char known[256] = "";
	long value = 0;

	for (size_t i = 0; i < ARRAY_SIZE(faults); i++) {
		size_t kl = strlen(known);
		if (fault && strcmp(fault, faults[i].name) == 0)
			f = &faults[i];
		snprintf(known + kl, sizeof(known) - kl, "%s%s", i ? ", " : "", faults[i].name);
	}
	if (!f)
		return error_set(err, GPUOP_ERR_USAGE, 0, "unknown fault \"%s\" (known: %s)",
				 fault ? fault : "", known);
	if (parse_arg(f, arg, &value, err) < 0)
		return -1;
	if (f->per_gpu && gpu < 0 && !f->all_ok)
		return error_set(err, GPUOP_ERR_USAGE, 0, "fault %s needs a GPU index", f->name);
	if (gpu < -1)
		return error_set(err, GPUOP_ERR_USAGE, 0,
				 "GPU index %d: expected >= 0, or -1 for all", gpu);

	int lockfd = state_lock(state_dir, err);
	if (lockfd < 0)
		return -1;
	struct sim_shared *sh = sim_state_map(state_dir, err);
	if (!sh) {
		close(lockfd);
		return -1;
	}
	int r = 0;
	/* Read once: the file is shared, and sim_state_map checked this value. */
	const unsigned int ngpus = __atomic_load_n(&sh->ngpus, __ATOMIC_RELAXED);
	if (f->per_gpu && gpu >= (int)ngpus) {
		r = error_set(err, GPUOP_ERR_USAGE, 0,
			      "GPU index %d out of range: simulated node %s has %u GPUs (0-%u)",
			      gpu, state_dir, ngpus, ngpus - 1);
	} else {
		struct fault_ctx c = {.sh = sh, .arg = value};
		unsigned int first = gpu < 0 ? 0 : (unsigned int)gpu;
		unsigned int last = !f->per_gpu ? 0 : gpu < 0 ? ngpus - 1 : (unsigned int)gpu;
		for (c.gpu = first; c.gpu <= last; c.gpu++)
			f->apply(&c);
		/* Wake every waiter in every process: new events, or a state change
		 * (driver-unload) that a blocked nvmlEventSetWait must notice. */
		__atomic_add_fetch(&sh->changes, 1, __ATOMIC_RELEASE);
		futex_wake_all(&sh->changes);
	}
	sim_state_unmap(sh);
	close(lockfd);
	return r;
}

json_t *sim_status(const char *state_dir, struct gpuop_error *err)
{
	struct sim_shared *sh = sim_state_map(state_dir, err);

	if (!sh)
		return NULL;
	json_t *gpus = json_array();
	unsigned int ngpus = __atomic_load_n(&sh->ngpus, __ATOMIC_RELAXED);
	if (ngpus > SIM_MAX_GPUS) /* changed since sim_state_map checked it */
		ngpus = SIM_MAX_GPUS;
	for (unsigned int i = 0; gpus && i < ngpus; i++) {
		const struct sim_shared_gpu *g = &sh->gpu[i];
		json_t *temp =
			__atomic_load_n(&g->temp_override_set, __ATOMIC_RELAXED)
				? json_integer(__atomic_load_n(&g->temp_override, __ATOMIC_RELAXED))
				: json_null();
		json_array_append_new(
			gpus,
			json_pack("{s:I, s:b, s:o, s:I, s:I, s:I, s:I}", "index", (json_int_t)i,
				  "lost", (int)__atomic_load_n(&g->lost, __ATOMIC_RELAXED),
				  "temp_override", temp, "ecc_sbe",
				  (json_int_t)__atomic_load_n(&g->ecc_sbe, __ATOMIC_RELAXED),
				  "ecc_dbe",
				  (json_int_t)__atomic_load_n(&g->ecc_dbe, __ATOMIC_RELAXED),
				  "last_xid",
				  (json_int_t)__atomic_load_n(&g->last_xid, __ATOMIC_RELAXED),
				  "xid_count",
				  (json_int_t)__atomic_load_n(&g->xid_count, __ATOMIC_RELAXED)));
	}
	json_t *st =
		gpus ? json_pack("{s:s, s:b, s:o, s:I}", "profile", sh->profile, "driver_loaded",
				 !__atomic_load_n(&sh->driver_unloaded, __ATOMIC_RELAXED), "gpus",
				 gpus, "events",
				 (json_int_t)__atomic_load_n(&sh->seq, __ATOMIC_ACQUIRE))
		     : NULL;
	sim_state_unmap(sh);
	if (!st) {
		error_set(err, GPUOP_ERR_GENERIC, 0, "building the status of %s: out of memory",
			  state_dir);
		return NULL;
	}
	return st;
}
