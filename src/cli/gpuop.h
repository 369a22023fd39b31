/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What every subcommand gets from main: the global options, and the one way
 * to reach NVML (the real driver, or the simulator under --simulate).
 *
 * A subcommand is `int cmd_<name>(ctx, argc, argv, err)` in cmd_<name>.c
 * plus one row in main.c's command table.  It returns the exit code (0 ok,
 * 1 failure, 2 usage); on non-zero, main prints err as one line.
 */
#ifndef GPUOP_CLI_GPUOP_H
#define GPUOP_CLI_GPUOP_H

#include <limits.h>
#include <stdbool.h>

#include "base/error.h"
#include "nvml/nvml.h"

#define EXIT_USAGE 2

struct gpuop_ctx {
	const char *command;     /* "info" */
	const char *simulate;    /* --simulate / $GPUOP_SIMULATE: profile name or path */
	const char *driver_root; /* --driver-root / $NVIDIA_DRIVER_ROOT, NULL = "/" */
	const char *dev_root;    /* --dev-root / $NVIDIA_DEV_ROOT, NULL = "/" */
	bool no_simulate_hint;   /* the caller falls back to a simulation itself */
	const char *kubeconfig;  /* --kubeconfig (NULL: $KUBECONFIG, in-cluster, ~/.kube/config) */
	const char *kube_context; /* --context */

	/* Filled by ctx_simulate_setup(). */
	bool simulated;
	char sim_profile_name[64];
	char sim_profile_path[PATH_MAX];
	char sim_lib[PATH_MAX];
	char sim_state[PATH_MAX];
	char sim_driver_root[PATH_MAX];
};

/* Resolve --simulate: find the profile and the simulator library, choose
 * the state dir, export GPUOP_SIM_PROFILE/GPUOP_SIM_STATE for the library
 * (and for child processes), prepare the node, and point the driver and
 * dev roots at it unless the user chose them.  No-op without --simulate. */
int ctx_simulate_setup(struct gpuop_ctx *ctx, struct gpuop_error *err);

/* Open NVML for a command: the simulator under --simulate, else the real
 * library (driver root honoured).  Errors explain what was looked for and,
 * when no driver is present, suggest --simulate. */
int ctx_open_nvml(struct gpuop_ctx *ctx, struct nvml **out, struct gpuop_error *err);

/* Where the node's CDI spec and the validation markers live: the host's
 * /var/run/cdi/nvidia.yaml and /run/nvidia/validations, or, on a simulated
 * node, the same paths inside its state dir, so fake devices never reach
 * this machine's real CDI registry.  Call after ctx_simulate_setup(). */
void ctx_cdi_spec_path(const struct gpuop_ctx *ctx, char *buf, size_t len);
void ctx_validations_dir(const struct gpuop_ctx *ctx, char *buf, size_t len);
/* NFD's features file for discovery's labels: the host's
 * /etc/kubernetes/node-feature-discovery/features.d/gfd, or the same path
 * inside a simulated node's state dir. */
void ctx_features_path(const struct gpuop_ctx *ctx, char *buf, size_t len);
/* A simulated node's DMI product name (its profile's "machine"), "" if none. */
void ctx_sim_machine(const struct gpuop_ctx *ctx, char *buf, size_t len);

/* The driver and dev roots in effect ("/" when unset). */
const char *ctx_driver_root(const struct gpuop_ctx *ctx);
const char *ctx_dev_root(const struct gpuop_ctx *ctx);

struct kube_client;
struct kube_client_opts;
/* A Kubernetes API client from --kubeconfig/--context, $KUBECONFIG, the
 * in-cluster service account, or ~/.kube/config, in that order.  Errors say
 * which were tried.  opts NULL = the client's defaults (diagnostic commands
 * pass short timeouts and few retries).  Free with kube_client_free(). */
int ctx_kube_client(const struct gpuop_ctx *ctx, const struct kube_client_opts *opts,
		    struct kube_client **out, struct gpuop_error *err);

/* This node's name for roles that label or inspect it: `opt` (a --node
 * value) if set, else $NODE_NAME (the downward API), else the hostname. */
const char *ctx_node_name(const char *opt, char *buf, size_t len);

/* Profiles available to --simulate, one name per entry (caller frees each
 * and the array); for help texts and errors. */
int sim_profile_names(char ***names, size_t *count, struct gpuop_error *err);
const char *sim_profile_dir(void);

/* The exit code for a failed command: 2 for usage errors, else 1. */
static inline int exit_code_for(const struct gpuop_error *err)
{
	return err->domain == GPUOP_ERR_USAGE ? EXIT_USAGE : 1;
}

/* After getopt_long returned '?': name the option it did not know (a
 * short option's letter, or the long option as typed).  Returns EXIT_USAGE. */
int unknown_option(struct gpuop_error *err, char **argv);

/* After getopt_long returned ':' (an option string starting with ':'
 * tells a missing value apart from an unknown option): "<option> needs a
 * value".  Returns EXIT_USAGE. */
int missing_value(struct gpuop_error *err, char **argv);

/* Usage error helper: fills err (domain USAGE) and returns EXIT_USAGE. */
int usage_error(struct gpuop_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int cmd_info(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_node(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_sim(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_cdi(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
/* gpuop cdi validate|list|audit, called by cmd_cdi's dispatcher (argv[0] is the verb). */
int cmd_cdi_validate(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_cdi_list(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_cdi_audit(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_cdi_hook(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_runtime(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_device_plugin(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_exporter(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_toolkit(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_discover(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_detect(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_validate(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_preflight(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_doctor(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_must_gather(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);
int cmd_baseline(struct gpuop_ctx *ctx, int argc, char **argv, struct gpuop_error *err);

#endif
