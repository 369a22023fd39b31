/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Collectors that fill struct doc_input (doctor.h) from the node and the
 * API.  None fails: an input that cannot be read is recorded with the
 * reason, and the rows that need it say "not checked: <reason>".
 * Paths are absolute; host_root NULL or "/" is this machine.
 */
#ifndef GPUOP_DOCTOR_COLLECT_H
#define GPUOP_DOCTOR_COLLECT_H

#include "doctor/doctor.h"

/* The end of a kernel log the doctor reads: recent lines matter. */
#define DOC_KMSG_MAX_BYTES (8u << 20)

struct kube_client;

void doc_collect_pci(struct doc_input *in, const char *host_root);
void doc_collect_host(struct doc_input *in, const char *host_root);
void doc_collect_kmsg(struct doc_input *in, const char *path);
/* Needs in->node (NVML) first: the spec is judged against the GPUs. */
void doc_collect_cdi(struct doc_input *in, const char *spec_path, const char *driver_root,
		     const char *dev_root);
void doc_collect_runtime(struct doc_input *in, const char *host_root);
void doc_collect_plugin(struct doc_input *in, const char *plugin_dir, const char *podres_socket,
			int timeout_ms);
void doc_collect_validations(struct doc_input *in, const char *dir);
/* Nodes, this node's events, RuntimeClasses, and with pod_ref ("ns/name")
 * the pod and its events. */
void doc_collect_api(struct doc_input *in, struct kube_client *c, const char *node_name,
		     const char *pod_ref);

/* Drop the JSON documents the input holds (sim_status and the API's). */
void doc_input_release(struct doc_input *in);

#endif
