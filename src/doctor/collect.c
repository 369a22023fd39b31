/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Filling struct doc_input from the node and the API.  Every collector
 * records why its input is unavailable instead of failing: the doctor is
 * run on broken nodes, and "could not read X because Y" is a finding.
 */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "doctor/collect.h"
#include "grpc/grpc.h"
#include "host/pci.h"
#include "host/system.h"
#include "kube/kube.h"
#include "podresources/v1/api.pb-c.h"
#include "runtime/configure.h"
#include "validate/validate.h"

#define PODRES_METHOD "/v1.PodResourcesLister/GetAllocatableResources"

void doc_input_release(struct doc_input *in)
{
	json_t **owned[] = {&in->sim_status, &in->node_obj, &in->node_events, &in->nodes,
			    &in->runtime_classes, &in->pod, &in->pod_events};
	for (size_t i = 0; i < ARRAY_SIZE(owned); i++) {
		json_decref(*owned[i]);
		*owned[i] = NULL;
	}
}

void doc_collect_pci(struct doc_input *in, const char *host_root)
{
	struct pci_scan s;
	struct gpuop_error e;
	size_t o = 0;

	if (pci_scan_nvidia(host_root, &s, &e) < 0) {
		snprintf(in->pci_error, sizeof(in->pci_error), "%s", e.msg);
		return;
	}
	in->pci_checked = true;
	in->pci_gpus = s.ngpus;
	for (size_t i = 0; i < s.n; i++) {
		const struct pci_func *f = &s.funcs[i];
		if (f->kind == PCI_GPU_OTHER || !f->driver[0] || strcmp(f->driver, "nvidia") == 0)
			continue;
		in->pci_other_driver++;
		if (o < sizeof(in->pci_drivers))
			o += (size_t)snprintf(in->pci_drivers + o, sizeof(in->pci_drivers) - o,
					      "%s%s bound to %s", o ? ", " : "", f->bdf, f->driver);
	}
	pci_scan_free(&s);
}

void doc_collect_host(struct doc_input *in, const char *host_root)
{
	struct host_facts f;
	struct gpuop_error e;

	if (host_facts_read(host_root, &f, &e) < 0) {
		snprintf(in->host_error, sizeof(in->host_error), "%s", e.msg);
		return;
	}
	in->host_checked = true;
	in->nvidia_loaded = f.nvidia.loaded ? TRI_YES : TRI_NO;
	in->nouveau_loaded = f.nouveau.loaded ? TRI_YES : TRI_NO;
	in->secure_boot = f.secure_boot;
	in->kernel_headers = f.kernel.headers;
	snprintf(in->kernel_release, sizeof(in->kernel_release), "%s", f.kernel.release);
	snprintf(in->module_version, sizeof(in->module_version), "%s",
		 f.driver_version[0] ? f.driver_version : f.nvidia.version);
}

void doc_collect_kmsg(struct doc_input *in, const char *path)
{
	struct gpuop_error e;

	snprintf(in->kmsg_path, sizeof(in->kmsg_path), "%s", path);
	if (kmsg_scan_file(path, DOC_KMSG_MAX_BYTES, &in->kmsg, NULL, &e) < 0) {
		snprintf(in->kmsg_error, sizeof(in->kmsg_error), "%s", e.msg);
		return;
	}
	in->kmsg_checked = true;
}

void doc_collect_cdi(struct doc_input *in, const char *spec_path, const char *driver_root,
		     const char *dev_root)
{
	struct stat st;

	snprintf(in->cdi_spec, sizeof(in->cdi_spec), "%s", spec_path);
	in->cdi_missing = stat(spec_path, &st) < 0 && errno == ENOENT;
	if (!in->node)
		return;
	struct toolkit_opts o = {
		.driver_root = driver_root, .dev_root = dev_root, .spec_path = in->cdi_spec};
	toolkit_check(in->node, &o, &in->cdi);
	in->cdi_checked = true;
}

static bool exists(const char *path)
{
	struct stat st;
	return path[0] && stat(path, &st) == 0;
}

/* One runtime: 1 when it has configuration below the root (in->runtime
 * filled), 0 when it has none. */
static int runtime_one(struct doc_input *in, const char *host_root, enum runtime_kind kind)
{
	struct runtime_opts o = {.runtime = kind, .root = host_root};
	struct runtime_paths p;
	struct runtime_plan plan = {0};
	struct gpuop_error e;
	struct doc_runtime *rt = &in->runtime;

	if (runtime_resolve_paths(&o, &p, &e) < 0 || (!exists(p.config) && !exists(p.drop_in)))
		return 0;
	snprintf(rt->runtime, sizeof(rt->runtime), "%s", runtime_kind_name(kind));
	snprintf(rt->config, sizeof(rt->config), "%s", exists(p.drop_in) ? p.drop_in : p.config);
	/* Configured means `gpuop runtime configure` would change nothing. */
	if (runtime_plan_configure(&o, &plan, &e) < 0) {
		rt->state = DOC_RT_UNREADABLE;
		snprintf(rt->detail, sizeof(rt->detail), "%s", e.msg);
		return 1;
	}
	if (plan.n == 0) {
		rt->state = DOC_RT_CONFIGURED;
		snprintf(rt->detail, sizeof(rt->detail), "runtime handler \"nvidia\" and CDI enabled");
	} else {
		rt->state = DOC_RT_NOT_CONFIGURED;
		size_t off = (size_t)snprintf(rt->detail, sizeof(rt->detail),
					      "`gpuop runtime configure` would change");
		for (size_t i = 0; i < plan.n && off < sizeof(rt->detail); i++)
			off += (size_t)snprintf(rt->detail + off, sizeof(rt->detail) - off, " %s (%s)",
						plan.change[i].path, plan.change[i].why);
		snprintf(rt->config, sizeof(rt->config), "%s", p.config[0] ? p.config : p.drop_in);
	}
	runtime_plan_free(&plan);
	return 1;
}

void doc_collect_runtime(struct doc_input *in, const char *host_root)
{
	static const enum runtime_kind kinds[] = {RUNTIME_CONTAINERD, RUNTIME_CRIO};
	for (size_t i = 0; i < ARRAY_SIZE(kinds); i++)
		if (runtime_one(in, host_root, kinds[i]))
			return;
	in->runtime.state = DOC_RT_UNKNOWN;
	snprintf(in->runtime.detail, sizeof(in->runtime.detail),
		 "no containerd or CRI-O configuration below %s", host_root ? host_root : "/");
}

static void podresources(struct doc_plugin *p, int timeout_ms)
{
	struct gpuop_error e;
	_cleanup_buf_ struct buf resp;
	V1__AllocatableResourcesRequest req = V1__ALLOCATABLE_RESOURCES_REQUEST__INIT;
	uint8_t reqbuf[16];
	size_t reqlen = v1__allocatable_resources_request__pack(&req, reqbuf);

	buf_init(&resp, 16u << 20);
	if (!exists(p->podres_socket)) {
		snprintf(p->podres_error, sizeof(p->podres_error), "no socket %s", p->podres_socket);
		return;
	}
	if (grpc_unary(p->podres_socket, PODRES_METHOD, reqbuf, reqlen, timeout_ms, 16u << 20, &resp,
		       NULL, &e) < 0) {
		snprintf(p->podres_error, sizeof(p->podres_error), "%s", e.msg);
		return;
	}
	V1__AllocatableResourcesResponse *r = v1__allocatable_resources_response__unpack(
		NULL, resp.len, (const uint8_t *)(resp.data ? resp.data : ""));
	if (!r) {
		snprintf(p->podres_error, sizeof(p->podres_error),
			 "%s: AllocatableResourcesResponse does not decode", p->podres_socket);
		return;
	}
	p->podres_checked = true;
	/* Count devices per nvidia.com resource, in the order kubelet gives. */
	struct {
		const char *name;
		size_t n;
	} per[16];
	size_t nper = 0;
	for (size_t i = 0; i < r->n_devices; i++) {
		const char *name = r->devices[i]->resource_name;
		if (!name || strncmp(name, "nvidia.com/", 11) != 0)
			continue;
		p->podres_gpu_devices += r->devices[i]->n_device_ids;
		size_t j;
		for (j = 0; j < nper && strcmp(per[j].name, name) != 0; j++)
			;
		if (j == nper && nper < ARRAY_SIZE(per))
			per[nper++] = (typeof(per[0])){name, 0};
		if (j < nper)
			per[j].n += r->devices[i]->n_device_ids;
	}
	size_t off = 0;
	for (size_t j = 0; j < nper && off < sizeof(p->podres_resources); j++)
		off += (size_t)snprintf(p->podres_resources + off, sizeof(p->podres_resources) - off,
					"%s%s=%zu", j ? ", " : "", per[j].name, per[j].n);
	v1__allocatable_resources_response__free_unpacked(r, NULL);
}

void doc_collect_plugin(struct doc_input *in, const char *plugin_dir, const char *podres_socket,
			int timeout_ms)
{
	struct doc_plugin *p = &in->plugin;
	char path[PATH_MAX + 32];

	snprintf(p->dir, sizeof(p->dir), "%s", plugin_dir);
	snprintf(p->podres_socket, sizeof(p->podres_socket), "%s", podres_socket);
	_cleanup_closedir_ DIR *d = opendir(plugin_dir);
	if (!d)
		return;
	p->dir_exists = true;
	snprintf(path, sizeof(path), "%s/kubelet.sock", plugin_dir);
	p->kubelet_sock = exists(path);
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);
		if (strncmp(de->d_name, "nvidia-", 7) != 0 || n < 5 ||
		    strcmp(de->d_name + n - 5, ".sock") != 0)
			continue;
		if (p->nsockets < ARRAY_SIZE(p->sockets))
			snprintf(p->sockets[p->nsockets], sizeof(p->sockets[0]), "%s", de->d_name);
		p->nsockets++;
	}
	if (p->kubelet_sock && p->nsockets)
		podresources(p, timeout_ms);
}

void doc_collect_validations(struct doc_input *in, const char *dir)
{
	struct doc_validations *v = &in->validations;
	struct stat st;

	snprintf(v->dir, sizeof(v->dir), "%s", dir);
	v->exists = stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
	for (int l = 0; v->exists && l < VALIDATE_NLAYERS && v->n < DOC_MARKERS_MAX; l++)
		if (validate_marker_present(dir, (enum validate_layer)l))
			snprintf(v->ready[v->n++], sizeof(v->ready[0]), "%s-ready",
				 validate_layer_name((enum validate_layer)l));
}

/* Events about one object, newest last.  The field selector narrows it on
 * a real API server; the filter below keeps it right where one is ignored. */
static json_t *events_for(struct kube_client *c, const char *ns, const char *kind, const char *name,
			  struct gpuop_error *err)
{
	char sel[600];
	json_t *items = NULL;
	snprintf(sel, sizeof(sel), "involvedObject.kind=%s,involvedObject.name=%s", kind, name);
	struct kube_list_opts lo = {.field_selector = sel};
	if (kube_list(c, &KUBE_EVENTS, ns, &lo, &items, NULL, 0, err) < 0)
		return NULL;
	json_t *out = json_array();
	size_t i;
	json_t *ev;
	json_array_foreach(items, i, ev)
	{
		json_t *io = json_object_get(ev, "involvedObject");
		const char *k = json_string_value(json_object_get(io, "kind"));
		const char *n = json_string_value(json_object_get(io, "name"));
		if (k && n && strcmp(k, kind) == 0 && strcmp(n, name) == 0)
			json_array_append(out, ev);
	}
	json_decref(items);
	return out;
}

void doc_collect_api(struct doc_input *in, struct kube_client *c, const char *node_name,
		     const char *pod_ref)
{
	struct gpuop_error e;

	in->api = true;
	snprintf(in->node_name, sizeof(in->node_name), "%s", node_name);
	if (kube_list(c, &KUBE_NODES, NULL, NULL, &in->nodes, NULL, 0, &e) < 0) {
		in->api = false;
		snprintf(in->api_error, sizeof(in->api_error), "the API could not be read: %s", e.msg);
		return;
	}
	size_t i;
	json_t *n;
	json_array_foreach(in->nodes, i, n)
	{
		const char *name = json_string_value(json_object_get(json_object_get(n, "metadata"), "name"));
		if (name && strcmp(name, node_name) == 0)
			in->node_obj = json_incref(n);
	}
	if (in->node_obj)
		in->node_events = events_for(c, NULL, "Node", node_name, &e);
	if (kube_list(c, &KUBE_RUNTIMECLASSES, NULL, NULL, &in->runtime_classes, NULL, 0, &e) < 0)
		in->runtime_classes = NULL;
	if (!pod_ref || !*pod_ref)
		return;
	char ns[256], name[256];
	const char *slash = strchr(pod_ref, '/');
	snprintf(ns, sizeof(ns), "%.*s", slash ? (int)(slash - pod_ref) : 7,
		 slash ? pod_ref : "default");
	snprintf(name, sizeof(name), "%s", slash ? slash + 1 : pod_ref);
	if (kube_get(c, &KUBE_PODS, ns, name, &in->pod, &e) < 0) {
		in->pod = NULL;
		snprintf(in->pod_error, sizeof(in->pod_error), "pod %s/%s: %s", ns, name, e.msg);
		return;
	}
	in->pod_events = events_for(c, ns, "Pod", name, &e);
}
