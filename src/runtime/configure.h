/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Container runtime configuration for GPUs: containerd (plain, K3s, RKE2,
 * k0s) and CRI-O.
 *
 * gpuop has no runtime wrapper binary: devices reach containers through
 * CDI.  What it writes is
 *  - CDI switched on where the runtime needs it (containerd config v1/v2,
 *    i.e. containerd 1.x: enable_cdi and cdi_spec_dirs in the CRI plugin;
 *    containerd 2.x (v3) and CRI-O have CDI on by default, so only on
 *    request there);
 *  - a runtime handler "nvidia" that is plain runc (containerd: runtime_type
 *    io.containerd.runc.v2 with the options of the existing runc runtime;
 *    CRI-O: runtime_type "oci" with the default runtime's binary), so pods
 *    and RuntimeClasses that say runtimeClassName: nvidia keep working;
 *  - optionally that handler as the default.
 *
 * Everything goes into a drop-in file that carries GPUOP_DROPIN_MARKER on
 * its first line.  containerd before 2.1 replaces a whole plugin table per
 * imported file, so the containerd drop-in holds the complete CRI plugin
 * table copied from the main file and then changed; the main file only
 * gains the drop-in's directory glob in its top-level `imports` (edited in
 * place: comments and layout stay).  CRI-O and k0s read their drop-in
 * directories themselves, so their main files are only read.
 *
 * Work is planned first (every file's old and new content in memory), then
 * applied; a malformed input stops the plan, so nothing is written.  Each
 * write is atomic.  A main file is copied to <file>.gpuop-backup before its
 * first change; unconfigure puts it back byte for byte when the file is
 * still what configure made of it, and otherwise removes only the import
 * it added (keeping the backup and saying so).  Running configure twice
 * changes nothing the second time.
 */
#ifndef GPUOP_RUNTIME_CONFIGURE_H
#define GPUOP_RUNTIME_CONFIGURE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/buf.h"
#include "base/error.h"

#define GPUOP_DROPIN_MARKER "# Written by gpuop runtime configure."
#define GPUOP_BACKUP_SUFFIX ".gpuop-backup"
#define RUNTIME_HANDLER_DEFAULT "nvidia"

enum runtime_kind { RUNTIME_CONTAINERD, RUNTIME_CRIO };
enum runtime_preset { PRESET_NONE, PRESET_K3S, PRESET_RKE2, PRESET_K0S };
enum restart_mode { RESTART_NONE, RESTART_SIGNAL, RESTART_SYSTEMD };

struct runtime_opts {
	enum runtime_kind runtime;
	enum runtime_preset preset;
	const char *root;         /* prefix of every default path; NULL = "/" */
	const char *config;       /* main file; NULL = the default of runtime/preset */
	const char *drop_in;      /* NULL = default */
	const char *socket;       /* NULL = default */
	const char *handler;      /* NULL = "nvidia" */
	const char *restart_unit; /* systemd unit; NULL = default */
	bool set_as_default;
	bool cdi_enabled;
	enum restart_mode restart;
};

/* The files and endpoints in effect, defaults resolved. */
struct runtime_paths {
	char config[PATH_MAX];  /* "" when there is none (k0s) */
	char drop_in[PATH_MAX];
	char socket[PATH_MAX];
	char unit[128];
	/* K3s/RKE2: the generated config.toml the .tmpl starts from when no
	 * .tmpl exists yet; "" otherwise. */
	char generated[PATH_MAX];
	bool edit_main; /* the main file gets our import */
	/* The drop-in as the runtime sees it (without --root's prefix): what
	 * goes into `imports`. */
	char drop_in_seen[PATH_MAX];
};

enum change_kind { CHANGE_WRITE, CHANGE_REMOVE };

struct file_change {
	char path[PATH_MAX];
	enum change_kind kind;
	char *old_text; /* NULL: the file does not exist */
	size_t old_len;
	char *new_text; /* CHANGE_WRITE only */
	size_t new_len;
	mode_t mode;
	const char *why; /* "drop-in", "imports", "backup", "restore", ... */
};

#define RUNTIME_PLAN_MAX 6

struct runtime_plan {
	struct runtime_paths paths;
	int version;         /* containerd config version; 0 for CRI-O */
	char cri_plugin[64]; /* containerd CRI plugin key; "" for CRI-O */
	char runtime_path[PATH_MAX]; /* CRI-O: binary of the nvidia handler */
	bool cdi_written;
	struct file_change change[RUNTIME_PLAN_MAX]; /* in the order they are applied */
	size_t n;
	char note[512]; /* something the user should know, or "" */
};

/* Names for the command line (tables in configure.c). */
int runtime_kind_parse(const char *s, enum runtime_kind *out);
int runtime_preset_parse(const char *s, enum runtime_preset *out);
int restart_mode_parse(const char *s, enum restart_mode *out);
const char *runtime_kind_name(enum runtime_kind k);
const char *runtime_preset_name(enum runtime_preset p);
const char *restart_mode_name(enum restart_mode m);

/* Combinations that make no sense fail with domain GPUOP_ERR_USAGE
 * (CRI-O with a containerd preset; --restart-mode signal for containerd,
 * which has no configuration reload). */
int runtime_opts_check(const struct runtime_opts *o, struct gpuop_error *err);

int runtime_resolve_paths(const struct runtime_opts *o, struct runtime_paths *out,
			  struct gpuop_error *err);

/* Plan the changes; the plan owns its texts (runtime_plan_free). */
int runtime_plan_configure(const struct runtime_opts *o, struct runtime_plan *plan,
			   struct gpuop_error *err);
int runtime_plan_unconfigure(const struct runtime_opts *o, struct runtime_plan *plan,
			     struct gpuop_error *err);
void runtime_plan_free(struct runtime_plan *plan);

/* Carry the plan out: directories created as needed, each file written
 * atomically (new files 0644, existing ones keep their mode). */
int runtime_plan_apply(const struct runtime_plan *plan, struct gpuop_error *err);

/* A unified diff of every change ("--- PATH", "+++ PATH", hunks with three
 * lines of context; /dev/null for a created or removed file). */
int runtime_plan_diff(const struct runtime_plan *plan, struct buf *out, struct gpuop_error *err);

/* Make the runtime read its new configuration: nothing, `systemctl restart
 * <unit>`, or (CRI-O) SIGHUP to the process serving the socket, found with
 * SO_PEERCRED.  *what says what was done. */
int runtime_restart(const struct runtime_opts *o, const struct runtime_paths *paths, char *what,
		    size_t whatsz, struct gpuop_error *err);

#endif
