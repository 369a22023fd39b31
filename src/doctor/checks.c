/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The doctor's rows, bottom-up.  Each function reads only struct doc_input
 * (filled beforehand) and writes one struct doc_result: status, a one-line
 * finding, evidence lines, and the fix when it knows a better one than the
 * row's.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/cleanup.h"
#include "deviceplugin/deviceplugin.h"
#include "doctor/doctor.h"
#include "host/system.h"

#define GPU_RESOURCE "nvidia.com/gpu"

void doc_set(struct doc_result *r, enum doc_status s, const char *fix, const char *fmt, ...)
{
	va_list ap;

	r->status = s;
	va_start(ap, fmt);
	vsnprintf(r->finding, sizeof(r->finding), fmt, ap);
	va_end(ap);
	if (fix)
		snprintf(r->fix, sizeof(r->fix), "%s", fix);
}

void doc_evidence(struct doc_result *r, const char *fmt, ...)
{
	va_list ap;

	if (r->nevidence >= DOC_EVIDENCE_MAX)
		return;
	va_start(ap, fmt);
	vsnprintf(r->evidence[r->nevidence++], sizeof(r->evidence[0]), fmt, ap);
	va_end(ap);
}

long long doc_quantity(const json_t *q)
{
	if (json_is_integer(q))
		return json_integer_value(q) >= 0 ? json_integer_value(q) : -1;
	if (!json_is_string(q))
		return -1;
	const char *s = json_string_value(q);
	long long v = 0;
	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > 1000000)
			return -1;
		v = v * 10 + (*s - '0');
	}
	return v;
}

static const char *str_at(const json_t *obj, const char *path)
{
	/* "a.b.c" through nested objects; NULL when absent or not a string. */
	char key[128];
	const json_t *cur = obj;
	while (cur && *path) {
		const char *dot = strchr(path, '.');
		size_t n = dot ? (size_t)(dot - path) : strlen(path);
		if (n >= sizeof(key))
			return NULL;
		memcpy(key, path, n);
		key[n] = '\0';
		cur = json_object_get(cur, key);
		path += n + (dot ? 1 : 0);
	}
	return json_is_string(cur) ? json_string_value(cur) : NULL;
}

static const json_t *obj_at(const json_t *obj, const char *a, const char *b)
{
	const json_t *o = json_object_get(obj, a);
	return b ? json_object_get(o, b) : o;
}

/* nvidia.com/gpu a node can hand out (allocatable; capacity when absent). */
static long long node_gpus(const json_t *node)
{
	const json_t *st = json_object_get(node, "status");
	long long v = doc_quantity(obj_at(st, "allocatable", GPU_RESOURCE));
	if (v < 0)
		v = doc_quantity(obj_at(st, "capacity", GPU_RESOURCE));
	return v;
}

/* ------------------------------------------------------------- hardware */

static void check_pci(const struct doc_input *in, struct doc_result *r)
{
	if (in->simulated) {
		size_t n = in->node ? in->node->ngpus : json_array_size(json_object_get(in->sim_status, "gpus"));
		doc_set(r, DOC_OK, NULL, "%zu NVIDIA GPUs on the simulated PCI bus (profile %s)", n,
			in->sim_profile);
		return;
	}
	if (!in->pci_checked) {
		doc_set(r, DOC_SKIP, NULL, "not checked: %s", in->pci_error);
		return;
	}
	if (in->pci_gpus == 0) {
		doc_set(r, DOC_FAIL, NULL, "no NVIDIA display or 3D controller on the PCI bus");
		doc_evidence(r, "PCI scan found no function with vendor 0x10de and class 0x03xx");
		return;
	}
	if (in->pci_other_driver) {
		doc_set(r, DOC_WARN,
			"a GPU bound to vfio-pci is reserved for a VM; unbind it or drop it from the "
			"passthrough configuration to use it here",
			"%zu NVIDIA GPUs on PCI, %zu bound to another driver", in->pci_gpus,
			in->pci_other_driver);
		doc_evidence(r, "%s", in->pci_drivers);
		return;
	}
	doc_set(r, DOC_OK, NULL, "%zu NVIDIA GPUs on PCI", in->pci_gpus);
}

/* --------------------------------------------------------------- kernel */

static void check_module(const struct doc_input *in, struct doc_result *r)
{
	if (in->simulated) {
		json_t *loaded = json_object_get(in->sim_status, "driver_loaded");
		if (json_is_false(loaded)) {
			doc_set(r, DOC_FAIL, NULL, "the nvidia kernel module is not loaded");
			doc_evidence(r, "simulated node %s: driver unloaded", in->sim_profile);
			if (in->nvml_error[0])
				doc_evidence(r, "NVML: %s", in->nvml_error);
			return;
		}
		doc_set(r, DOC_OK, NULL, "nvidia kernel module loaded (simulated)%s%s",
			in->module_version[0] ? ", version " : "", in->module_version);
		return;
	}
	if (!in->host_checked) {
		doc_set(r, DOC_SKIP, NULL, "not checked: %s", in->host_error);
		return;
	}
	if (in->nouveau_loaded == TRI_YES) {
		doc_set(r, DOC_FAIL,
			"blacklist nouveau (modprobe.d: blacklist nouveau, options nouveau "
			"modeset=0), rebuild the initramfs and reboot",
			"the nouveau driver is loaded and holds the GPUs");
		doc_evidence(r, "/sys/module/nouveau exists");
		return;
	}
	if (in->nvidia_loaded == TRI_NO) {
		doc_set(r, DOC_FAIL, NULL, "the nvidia kernel module is not loaded");
		doc_evidence(r, "/sys/module/nvidia is absent");
		if (in->secure_boot == TRI_YES)
			doc_evidence(r, "Secure Boot is on: an unsigned nvidia module is refused "
					"(sign it, or use precompiled signed drivers)");
		if (in->kernel_headers == TRI_NO)
			doc_evidence(r, "no kernel headers for %s: a driver container cannot build "
					"the module (install linux-headers-%s or make the package "
					"repositories reachable)",
				     in->kernel_release, in->kernel_release);
		if (in->nvml_error[0])
			doc_evidence(r, "NVML: %s", in->nvml_error);
		return;
	}
	doc_set(r, in->nvidia_loaded == TRI_YES ? DOC_OK : DOC_SKIP, NULL,
		in->nvidia_loaded == TRI_YES ? "nvidia kernel module loaded%s%s"
					     : "not checked: module state unknown%s%s",
		in->module_version[0] ? ", version " : "", in->module_version);
}

/* --------------------------------------------------------------- driver */

static void kmsg_evidence(const struct doc_input *in, struct doc_result *r, size_t max)
{
	if (in->kmsg_checked && in->kmsg.nkept) {
		size_t from = in->kmsg.nkept > max ? in->kmsg.nkept - max : 0;
		for (size_t i = from; i < in->kmsg.nkept; i++) {
			const struct kmsg_xid *x = &in->kmsg.kept[i];
			doc_evidence(r, "%s: Xid %u on PCI %s: %s (%s)", in->kmsg_path, x->xid, x->pci,
				     dp_xid_meaning(x->xid), x->detail);
		}
	}
	size_t i;
	json_t *g;
	json_array_foreach(json_object_get(in->sim_status, "gpus"), i, g)
	{
		json_int_t xid = json_integer_value(json_object_get(g, "last_xid"));
		if (xid > 0)
			doc_evidence(r, "simulated kernel log: GPU %zu: Xid %lld (%lld so far): %s", i,
				     (long long)xid,
				     (long long)json_integer_value(json_object_get(g, "xid_count")),
				     dp_xid_meaning((unsigned long long)xid));
	}
}

static void check_nvml(const struct doc_input *in, struct doc_result *r)
{
	if (!in->node) {
		doc_set(r, DOC_FAIL, NULL, "NVML cannot talk to the driver: %s", in->nvml_error);
		kmsg_evidence(in, r, 4);
		return;
	}
	char cuda[16] = "unknown";
	if (in->node->cuda_driver_version > 0)
		snprintf(cuda, sizeof(cuda), "%d.%d", in->node->cuda_driver_version / 1000,
			 (in->node->cuda_driver_version % 1000) / 10);
	if (in->node->ngpus == 0) {
		doc_set(r, DOC_FAIL, "see the hardware row: the driver sees no GPU",
			"NVML works (driver %s) but reports no GPU", in->node->driver_version);
		return;
	}
	doc_set(r, DOC_OK, NULL, "driver %s, CUDA %s, %zu GPUs", in->node->driver_version, cuda,
		in->node->ngpus);
}

static void check_health(const struct doc_input *in, struct doc_result *r)
{
	if (!in->node) {
		doc_set(r, DOC_SKIP, NULL, "not checked: NVML unavailable");
		return;
	}
	size_t bad = 0;
	for (size_t i = 0; i < in->node->ngpus; i++) {
		const struct gpu_dev *d = &in->node->gpus[i];
		if (d->status == GPU_OK)
			continue;
		/* A lost GPU may no longer tell its UUID or bus id. */
		char id[GPU_STR + 4] = "";
		if (d->uuid[0] || d->bus_id[0])
			snprintf(id, sizeof(id), " (%s)", d->uuid[0] ? d->uuid : d->bus_id);
		if (bad++ == 0)
			doc_set(r, DOC_FAIL, NULL, "GPU %u%s %s", d->index, id,
				d->status == GPU_LOST ? "is lost: it no longer answers the driver"
						      : "answers errors");
		doc_evidence(r, "GPU %u%s: %s", d->index, id, d->status_reason);
	}
	if (bad) {
		if (bad > 1)
			doc_set(r, DOC_FAIL, NULL, "%zu of %zu GPUs unhealthy", bad, in->node->ngpus);
		kmsg_evidence(in, r, 4);
		return;
	}
	/* Every GPU answers; Xids in the log are worth a warning when they are
	 * the hardware's (an application's own faults are not the node's). */
	size_t hw = 0;
	for (size_t i = 0; in->kmsg_checked && i < in->kmsg.nkept; i++)
		hw += dp_xid_kind(in->kmsg.kept[i].xid) != DP_XID_APP;
	if (hw) {
		doc_set(r, DOC_WARN,
			"every GPU answers now; if Xids recur, drain the node and reset the GPU "
			"(nvidia-smi -r) or reboot, and collect `gpuop must-gather` for support",
			"all %zu GPUs answer, but the kernel log has %zu hardware Xid reports",
			in->node->ngpus, hw);
		kmsg_evidence(in, r, 4);
		return;
	}
	doc_set(r, DOC_OK, NULL, "all %zu GPUs answer%s", in->node->ngpus,
		in->kmsg_checked ? ", no hardware Xid in the kernel log" : "");
}

static void check_count(const struct doc_input *in, struct doc_result *r)
{
	if (!in->node) {
		doc_set(r, DOC_SKIP, NULL, "not checked: NVML unavailable");
		return;
	}
	size_t n = in->node->ngpus, mig = 0, pending = 0;
	for (size_t i = 0; i < n; i++) {
		mig += in->node->gpus[i].nmig;
		pending += in->node->gpus[i].mig_pending;
	}
	if (!in->simulated && in->pci_checked && in->pci_gpus != n) {
		doc_set(r, DOC_FAIL,
			"a GPU missing from NVML usually fell off the bus (Xid 79) or failed to "
			"initialise: check the kernel log, reset or reboot; if it persists, the "
			"GPU needs service",
			"%zu NVIDIA GPUs on PCI but NVML sees %zu", in->pci_gpus, n);
		kmsg_evidence(in, r, 4);
		return;
	}
	if (pending) {
		doc_set(r, DOC_WARN,
			"reset the GPUs (drain first) so the MIG mode change takes effect, or let "
			"gpuop mig apply do it",
			"%zu GPUs have a MIG mode change pending", pending);
		return;
	}
	doc_set(r, DOC_OK, NULL, "%zu GPUs%s, %zu MIG devices", n,
		in->simulated ? "" : (in->pci_checked ? " on PCI and in NVML" : " in NVML"), mig);
}

/* -------------------------------------------------------------- toolkit */

static void check_cdi(const struct doc_input *in, struct doc_result *r)
{
	if (!in->cdi_checked) {
		doc_set(r, DOC_SKIP, NULL, "not checked: NVML unavailable, the spec cannot be "
					   "compared with the GPUs");
		return;
	}
	if (in->cdi_missing) {
		/* The command to run, exactly: on a simulated node the spec goes
		 * into the simulated node's state, which only --simulate finds. */
		char fix[DOC_TEXT];
		snprintf(fix, sizeof(fix),
			 "run `gpuop %s%s%scdi generate` to write %s (in a cluster the toolkit "
			 "DaemonSet writes it: read its pod's log if it did not)",
			 in->simulated ? "--simulate " : "", in->simulated ? in->sim_profile : "",
			 in->simulated ? " " : "", in->cdi_spec);
		doc_set(r, DOC_FAIL, fix, "no CDI spec at %s: the runtime cannot inject the GPUs",
			in->cdi_spec);
		doc_evidence(r, "%s", in->cdi.problem);
		return;
	}
	if (!in->cdi.ready) {
		doc_set(r, DOC_FAIL, NULL, "the CDI spec %s is not usable", in->cdi_spec);
		doc_evidence(r, "%s", in->cdi.problem);
		return;
	}
	doc_set(r, DOC_OK, NULL, "CDI spec %s: %zu devices for %zu GPUs, valid", in->cdi_spec,
		in->cdi.ndevices, in->cdi.ngpus);
}

static void check_runtime(const struct doc_input *in, struct doc_result *r)
{
	const struct doc_runtime *rt = &in->runtime;
	switch (rt->state) {
	case DOC_RT_UNKNOWN:
		doc_set(r, DOC_SKIP, NULL, "not checked: %s", rt->detail);
		return;
	case DOC_RT_UNREADABLE:
		doc_set(r, DOC_FAIL, "fix the file's syntax; the runtime will not start with it",
			"%s configuration %s cannot be read", rt->runtime, rt->config);
		doc_evidence(r, "%s", rt->detail);
		return;
	case DOC_RT_NOT_CONFIGURED: {
		char fix[DOC_TEXT];
		snprintf(fix, sizeof(fix),
			 "gpuop runtime configure --runtime %s (adds the nvidia handler and CDI), then "
			 "restart %s",
			 strcmp(rt->runtime, "cri-o") == 0 ? "crio" : rt->runtime, rt->runtime);
		doc_set(r, DOC_FAIL, fix, "%s has no runtime handler \"nvidia\"", rt->runtime);
		doc_evidence(r, "%s: %s", rt->config, rt->detail);
		return;
	}
	case DOC_RT_CONFIGURED:
		doc_set(r, DOC_OK, NULL, "%s: %s (%s)", rt->runtime, rt->detail, rt->config);
		return;
	}
}

/* -------------------------------------------------------- device plugin */

static void check_kubelet(const struct doc_input *in, struct doc_result *r)
{
	const struct doc_plugin *p = &in->plugin;
	if (!p->dir_exists) {
		doc_set(r, DOC_SKIP, NULL,
			"not checked: no device-plugin directory %s (not a Kubernetes node? "
			"--plugin-dir names another)",
			p->dir);
		return;
	}
	if (!p->kubelet_sock) {
		doc_set(r, DOC_FAIL,
			"start kubelet (systemctl status kubelet; journalctl -u kubelet); the device "
			"plugin re-registers by itself when kubelet.sock appears",
			"kubelet is not serving the device-plugin API: no kubelet.sock in %s", p->dir);
		doc_evidence(r, "%s/kubelet.sock: absent", p->dir);
		return;
	}
	doc_set(r, DOC_OK, NULL, "kubelet.sock present in %s", p->dir);
}

static void check_registration(const struct doc_input *in, struct doc_result *r)
{
	const struct doc_plugin *p = &in->plugin;
	if (!p->dir_exists || !p->kubelet_sock) {
		doc_set(r, DOC_SKIP, NULL, "not checked: no kubelet");
		return;
	}
	if (p->nsockets == 0) {
		doc_set(r, DOC_FAIL,
			"start the device plugin (gpuop device-plugin, or check its DaemonSet pod "
			"and the nvidia.com/gpu.deploy.device-plugin node label)",
			"no GPU device plugin is serving in %s", p->dir);
		doc_evidence(r, "no nvidia-*.sock next to kubelet.sock in %s", p->dir);
		return;
	}
	if (!p->podres_checked) {
		doc_set(r, DOC_SKIP, NULL,
			"not checked: plugin socket %s is there, but kubelet's PodResources API "
			"could not be asked (%s)",
			p->sockets[0], p->podres_error);
		return;
	}
	if (p->podres_gpu_devices == 0) {
		doc_set(r, DOC_FAIL,
			"restart the device plugin so it registers again, and read its log for a "
			"rejected Register call; kubelet's log says why it refused",
			"the device plugin serves %s, but kubelet has no nvidia.com device to "
			"allocate: the plugin is not registered",
			p->sockets[0]);
		doc_evidence(r, "kubelet PodResources GetAllocatableResources (%s): no nvidia.com "
				"resource",
			     p->podres_socket);
		return;
	}
	doc_set(r, DOC_OK, NULL, "registered with kubelet: %s", p->podres_resources);
}

/* -------------------------------------------------------------- kubelet */

static void node_warning_events(const struct doc_input *in, struct doc_result *r)
{
	size_t i;
	json_t *ev;
	json_array_foreach(in->node_events, i, ev)
	{
		const char *type = str_at(ev, "type");
		if (type && strcmp(type, "Warning") == 0)
			doc_evidence(r, "event %s: %s", str_at(ev, "reason") ? str_at(ev, "reason") : "?",
				     str_at(ev, "message") ? str_at(ev, "message") : "");
	}
}

static void check_node_capacity(const struct doc_input *in, struct doc_result *r)
{
	if (!in->api) {
		doc_set(r, DOC_SKIP, NULL, "not checked: %s", in->api_error);
		return;
	}
	if (!in->node_obj) {
		doc_set(r, DOC_SKIP, NULL, "not checked: node %s not found in the API (--node NAME)",
			in->node_name);
		return;
	}
	long long alloc = node_gpus(in->node_obj);
	if (alloc <= 0) {
		doc_set(r, DOC_FAIL,
			"the device plugin has not registered on this node: see the device plugin "
			"rows, then `kubectl describe node` for kubelet's view",
			"node %s shows no nvidia.com/gpu in its allocatable resources", in->node_name);
		node_warning_events(in, r);
		return;
	}
	if (in->node && (size_t)alloc != in->node->ngpus) {
		size_t mig = 0;
		for (size_t i = 0; i < in->node->ngpus; i++)
			mig += in->node->gpus[i].mig_enabled;
		if (!mig) {
			doc_set(r, DOC_WARN,
				"unhealthy GPUs are withheld by the device plugin: see the GPU health "
				"row; a MIG or sharing config changes the count too",
				"node %s allocates %lld nvidia.com/gpu, NVML sees %zu GPUs", in->node_name,
				alloc, in->node->ngpus);
			node_warning_events(in, r);
			return;
		}
	}
	doc_set(r, DOC_OK, NULL, "node %s allocates %lld nvidia.com/gpu", in->node_name, alloc);
}

static void check_validations(const struct doc_input *in, struct doc_result *r)
{
	const struct doc_validations *v = &in->validations;
	if (!v->exists) {
		doc_set(r, DOC_SKIP, NULL, "not checked: no validation markers in %s (gpuop validate "
					   "has not run here)",
			v->dir);
		return;
	}
	char list[DOC_TEXT] = "";
	size_t o = 0;
	for (size_t i = 0; i < v->n && o < sizeof(list); i++)
		o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s", i ? ", " : "", v->ready[i]);
	if (v->n == 0) {
		doc_set(r, DOC_WARN,
			"the validator waits on a lower layer: the rows below say which; then "
			"`gpuop validate all` rechecks",
			"no layer has been validated yet (%s is empty)", v->dir);
		return;
	}
	doc_set(r, DOC_OK, NULL, "validated: %s", list);
}

/* ------------------------------------------------------------- workload */

/* "12.4" -> 12040 (CUDA's integer form), -1 when not a version. */
static int cuda_version(const char *s)
{
	int major = 0, minor = 0, n = 0;
	for (; *s >= '0' && *s <= '9' && n < 4; s++, n++)
		major = major * 10 + (*s - '0');
	if (!n)
		return -1;
	if (*s == '.') {
		s++;
		for (n = 0; *s >= '0' && *s <= '9' && n < 3; s++, n++)
			minor = minor * 10 + (*s - '0');
	}
	return major * 1000 + minor * 10;
}

/* The CUDA version a pod's image says it needs: NVIDIA's CUDA images set
 * NVIDIA_REQUIRE_CUDA="cuda>=12.4 ..." and CUDA_VERSION=12.4.1. */
static int pod_cuda_requirement(const json_t *pod, char *from, size_t len)
{
	const json_t *cs = json_object_get(json_object_get(pod, "spec"), "containers");
	size_t i, j;
	json_t *c, *e;
	int best = -1;
	json_array_foreach(cs, i, c)
	{
		json_array_foreach(json_object_get(c, "env"), j, e)
		{
			const char *name = str_at(e, "name"), *val = str_at(e, "value");
			if (!name || !val)
				continue;
			int v = -1;
			if (strcmp(name, "NVIDIA_REQUIRE_CUDA") == 0) {
				const char *ge = strstr(val, "cuda>=");
				v = ge ? cuda_version(ge + 6) : -1;
			} else if (strcmp(name, "CUDA_VERSION") == 0) {
				v = cuda_version(val);
			}
			if (v > best) {
				best = v;
				snprintf(from, len, "container %s: %s=%s", str_at(c, "name"), name, val);
			}
		}
	}
	return best;
}

static void check_cuda(const struct doc_input *in, struct doc_result *r)
{
	if (!in->node || in->node->cuda_driver_version <= 0) {
		doc_set(r, DOC_SKIP, NULL, "not checked: the driver's CUDA version is unknown");
		return;
	}
	int have = in->node->cuda_driver_version;
	char from[DOC_TEXT] = "";
	int need = in->pod ? pod_cuda_requirement(in->pod, from, sizeof(from)) : -1;
	if (need > have) {
		doc_set(r, DOC_FAIL,
			"upgrade the driver (ClusterPolicy driver.version) or use an image built for "
			"an older CUDA; CUDA forward compatibility packages help only on data-centre "
			"GPUs",
			"the pod needs CUDA %d.%d, the driver supports up to %d.%d", need / 1000,
			(need % 1000) / 10, have / 1000, (have % 1000) / 10);
		doc_evidence(r, "%s", from);
		doc_evidence(r, "driver %s supports CUDA %d.%d", in->node->driver_version, have / 1000,
			     (have % 1000) / 10);
		return;
	}
	if (need > 0)
		doc_set(r, DOC_OK, NULL, "the pod needs CUDA %d.%d, the driver supports %d.%d",
			need / 1000, (need % 1000) / 10, have / 1000, (have % 1000) / 10);
	else
		doc_set(r, DOC_OK, NULL, "the driver supports CUDA up to %d.%d", have / 1000,
			(have % 1000) / 10);
}

/* ------------------------------------------------------------------ pod */

static bool pod_missing(const struct doc_input *in, struct doc_result *r)
{
	if (!in->api) {
		doc_set(r, DOC_SKIP, NULL, "not checked: %s", in->api_error);
		return true;
	}
	if (!in->pod) {
		doc_set(r, DOC_SKIP, NULL, "not checked: %s", in->pod_error);
		return true;
	}
	return false;
}

/* GPUs a pod needs on one node: the sum over its containers, or the
 * largest init container if that is more (init containers run one by one). */
static long long pod_gpus(const json_t *pod)
{
	const json_t *spec = json_object_get(pod, "spec");
	long long sum = 0, init = 0;
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(spec, "containers"), i, c)
	{
		long long v = doc_quantity(obj_at(json_object_get(c, "resources"), "limits", GPU_RESOURCE));
		if (v < 0)
			v = doc_quantity(obj_at(json_object_get(c, "resources"), "requests", GPU_RESOURCE));
		sum += v > 0 ? v : 0;
	}
	json_array_foreach(json_object_get(spec, "initContainers"), i, c)
	{
		long long v = doc_quantity(obj_at(json_object_get(c, "resources"), "limits", GPU_RESOURCE));
		init = v > init ? v : init;
	}
	return sum > init ? sum : init;
}

static void check_pod_limits(const struct doc_input *in, struct doc_result *r)
{
	if (pod_missing(in, r))
		return;
	size_t i, bad = 0, with = 0;
	json_t *c;
	json_array_foreach(json_object_get(json_object_get(in->pod, "spec"), "containers"), i, c)
	{
		const json_t *res = json_object_get(c, "resources");
		long long req = doc_quantity(obj_at(res, "requests", GPU_RESOURCE));
		long long lim = doc_quantity(obj_at(res, "limits", GPU_RESOURCE));
		if (req < 0 && lim < 0)
			continue;
		with++;
		if (lim < 0 || (req >= 0 && req != lim)) {
			bad++;
			doc_evidence(r, "container %s: requests %s=%lld, limits %s", str_at(c, "name"),
				     GPU_RESOURCE, req, lim < 0 ? "none" : "differ");
		}
	}
	if (bad) {
		doc_set(r, DOC_FAIL,
			"put nvidia.com/gpu under resources.limits (requests may be left out; "
			"they default to the limit): GPUs cannot be overcommitted",
			"%zu container%s ask for GPUs in requests but not in limits", bad,
			bad == 1 ? "" : "s");
		return;
	}
	if (!with) {
		doc_set(r, DOC_WARN,
			"add resources.limits: nvidia.com/gpu: 1; without it the pod gets no GPU "
			"(or every GPU, when the image sets NVIDIA_VISIBLE_DEVICES=all)",
			"pod %s asks for no nvidia.com/gpu", in->pod_ref);
		return;
	}
	doc_set(r, DOC_OK, NULL, "pod %s asks for %lld nvidia.com/gpu in limits", in->pod_ref,
		pod_gpus(in->pod));
}

static void check_pod_runtimeclass(const struct doc_input *in, struct doc_result *r)
{
	if (pod_missing(in, r))
		return;
	const char *rc = str_at(in->pod, "spec.runtimeClassName");
	if (!rc) {
		doc_set(r, DOC_OK, NULL, "no runtimeClassName: devices come through CDI");
		return;
	}
	bool found = false;
	size_t i;
	json_t *o;
	json_array_foreach(in->runtime_classes, i, o)
	{
		const char *name = str_at(o, "metadata.name");
		if (name && strcmp(name, rc) == 0) {
			found = true;
			if (in->runtime.state == DOC_RT_NOT_CONFIGURED) {
				doc_set(r, DOC_FAIL,
					"remove runtimeClassName from the pod (CDI injects the GPU "
					"without it), or run gpuop runtime configure on the node",
					"RuntimeClass %s exists, but the node's %s has no handler %s", rc,
					in->runtime.runtime, str_at(o, "handler") ? str_at(o, "handler") : rc);
				doc_evidence(r, "pod spec.runtimeClassName: %s", rc);
				return;
			}
		}
	}
	if (!found && in->runtime_classes) {
		doc_set(r, DOC_FAIL,
			"remove runtimeClassName: nvidia from the pod: with CDI the GPU is injected "
			"by the default runtime and no RuntimeClass is needed (or create the "
			"RuntimeClass with handler nvidia)",
			"the pod asks for runtimeClassName: %s, but no RuntimeClass %s exists", rc, rc);
		doc_evidence(r, "pod spec.runtimeClassName: %s", rc);
		doc_evidence(r, "RuntimeClasses in the cluster: %zu, none named %s",
			     json_array_size(in->runtime_classes), rc);
		return;
	}
	if (!found) {
		doc_set(r, DOC_SKIP, NULL, "not checked: RuntimeClasses could not be listed");
		return;
	}
	doc_set(r, DOC_WARN,
		"with CDI, runtimeClassName: nvidia is not needed; drop it so the pod runs on "
		"any GPU node",
		"the pod asks for RuntimeClass %s (it exists)", rc);
}

static bool is_gpu_node(const json_t *node)
{
	const json_t *labels = obj_at(node, "metadata", "labels");
	const json_t *p = json_object_get(labels, "nvidia.com/gpu.present");
	return node_gpus(node) > 0 || (json_is_string(p) && strcmp(json_string_value(p), "true") == 0);
}

static void check_pod_capacity(const struct doc_input *in, struct doc_result *r)
{
	if (pod_missing(in, r))
		return;
	long long want = pod_gpus(in->pod), most = 0;
	const char *where = "";
	size_t i, ngpu = 0;
	json_t *n;
	json_array_foreach(in->nodes, i, n)
	{
		long long v = node_gpus(n);
		if (v > 0)
			ngpu++;
		if (v > most) {
			most = v;
			where = str_at(n, "metadata.name");
		}
	}
	if (want <= 0) {
		doc_set(r, DOC_OK, NULL, "the pod needs no GPU");
		return;
	}
	if (!ngpu) {
		doc_set(r, DOC_FAIL,
			"no node offers nvidia.com/gpu: fix the node rows first (driver, device "
			"plugin) or add GPU nodes",
			"the pod needs %lld GPUs, but no node in the cluster has any", want);
		doc_evidence(r, "%zu nodes listed, none with nvidia.com/gpu allocatable",
			     json_array_size(in->nodes));
		return;
	}
	if (want > most) {
		doc_set(r, DOC_FAIL,
			"ask for at most as many GPUs as one node has (split the job across pods), "
			"or add a node with more GPUs",
			"the pod needs %lld GPUs on one node; the largest GPU node has %lld", want,
			most);
		doc_evidence(r, "node %s: nvidia.com/gpu allocatable %lld", where ? where : "?", most);
		return;
	}
	doc_set(r, DOC_OK, NULL, "the pod needs %lld GPUs; node %s has %lld", want,
		where ? where : "?", most);
}

static bool tolerates(const json_t *tols, const json_t *taint)
{
	const char *key = str_at(taint, "key"), *val = str_at(taint, "value"),
		   *eff = str_at(taint, "effect");
	size_t i;
	json_t *t;
	json_array_foreach(tols, i, t)
	{
		const char *tk = str_at(t, "key"), *op = str_at(t, "operator"), *tv = str_at(t, "value"),
			   *te = str_at(t, "effect");
		if (te && *te && (!eff || strcmp(te, eff) != 0))
			continue;
		bool exists = op && strcmp(op, "Exists") == 0;
		if (!tk || !*tk) {
			if (exists)
				return true; /* empty key with Exists tolerates everything */
			continue;
		}
		if (!key || strcmp(tk, key) != 0)
			continue;
		if (exists || strcmp(tv ? tv : "", val ? val : "") == 0)
			return true;
	}
	return false;
}

/* Taints of the node the pod does not tolerate (NoSchedule/NoExecute),
 * written into buf; returns how many. */
static size_t untolerated(const json_t *pod, const json_t *node, char *buf, size_t len)
{
	const json_t *tols = obj_at(pod, "spec", "tolerations");
	size_t i, n = 0, o = 0;
	json_t *t;
	buf[0] = '\0';
	json_array_foreach(obj_at(node, "spec", "taints"), i, t)
	{
		const char *eff = str_at(t, "effect");
		if (!eff || strcmp(eff, "PreferNoSchedule") == 0 || tolerates(tols, t))
			continue;
		n++;
		if (o < len)
			o += (size_t)snprintf(buf + o, len - o, "%s%s%s%s:%s", o ? ", " : "",
					      str_at(t, "key") ? str_at(t, "key") : "",
					      str_at(t, "value") ? "=" : "",
					      str_at(t, "value") ? str_at(t, "value") : "", eff);
	}
	return n;
}

static void check_pod_taints(const struct doc_input *in, struct doc_result *r)
{
	if (pod_missing(in, r))
		return;
	if (pod_gpus(in->pod) <= 0) {
		doc_set(r, DOC_OK, NULL, "the pod needs no GPU node");
		return;
	}
	size_t i, gpu = 0, ok = 0;
	json_t *n;
	char taints[DOC_TEXT];
	json_array_foreach(in->nodes, i, n)
	{
		if (!is_gpu_node(n))
			continue;
		gpu++;
		if (untolerated(in->pod, n, taints, sizeof(taints)) == 0)
			ok++;
		else
			doc_evidence(r, "node %s: taint %s not tolerated", str_at(n, "metadata.name"),
				     taints);
	}
	if (gpu && !ok) {
		doc_set(r, DOC_FAIL,
			"add a toleration for the GPU nodes' taint to the pod, e.g. "
			"tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]",
			"the pod tolerates the taints of none of the %zu GPU nodes", gpu);
		return;
	}
	r->nevidence = 0;
	doc_set(r, DOC_OK, NULL, "%zu of %zu GPU nodes' taints are tolerated", ok, gpu);
}

static bool selector_matches(const json_t *sel, const json_t *node)
{
	const json_t *labels = obj_at(node, "metadata", "labels");
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)sel, k, v)
	{
		const json_t *have = json_object_get(labels, k);
		if (!json_is_string(have) || !json_is_string(v) ||
		    strcmp(json_string_value(have), json_string_value(v)) != 0)
			return false;
	}
	return true;
}

static void check_pod_selector(const struct doc_input *in, struct doc_result *r)
{
	if (pod_missing(in, r))
		return;
	const json_t *sel = obj_at(in->pod, "spec", "nodeSelector");
	if (!json_object_size(sel)) {
		doc_set(r, DOC_OK, NULL, "no nodeSelector");
		return;
	}
	size_t i, gpu = 0, match = 0;
	json_t *n;
	json_array_foreach(in->nodes, i, n)
	{
		if (!is_gpu_node(n))
			continue;
		gpu++;
		match += selector_matches(sel, n);
	}
	_cleanup_free_ char *s = json_dumps(sel, JSON_COMPACT | JSON_SORT_KEYS);
	if (!match) {
		doc_set(r, DOC_FAIL,
			"fix the pod's nodeSelector to labels the GPU nodes carry (kubectl get nodes "
			"-l nvidia.com/gpu.present=true --show-labels), or label the node",
			"the pod's nodeSelector matches none of the %zu GPU nodes", gpu);
		doc_evidence(r, "nodeSelector %s", s ? s : "?");
		return;
	}
	doc_set(r, DOC_OK, NULL, "nodeSelector %s matches %zu GPU nodes", s ? s : "?", match);
}

static void check_pod_events(const struct doc_input *in, struct doc_result *r)
{
	if (pod_missing(in, r))
		return;
	size_t i, n = 0;
	json_t *ev;
	const char *phase = str_at(in->pod, "status.phase");
	json_array_foreach(in->pod_events, i, ev)
	{
		const char *type = str_at(ev, "type");
		if (!type || strcmp(type, "Warning") != 0)
			continue;
		n++;
		doc_evidence(r, "event %s: %s", str_at(ev, "reason") ? str_at(ev, "reason") : "?",
			     str_at(ev, "message") ? str_at(ev, "message") : "");
	}
	if (n) {
		doc_set(r, DOC_FAIL,
			"the events name the cause: FailedScheduling is capacity, taints or "
			"selectors (rows above); FailedCreatePodSandBox with \"no runtime for "
			"nvidia\" is the runtime row",
			"pod %s (%s) has %zu warning events", in->pod_ref, phase ? phase : "?", n);
		return;
	}
	doc_set(r, DOC_OK, NULL, "pod %s is %s, no warning events", in->pod_ref,
		phase ? phase : "in an unknown phase");
}

/* Bottom-up.  The symptom column is NVIDIA's matrix; `command` is where to
 * look closer. */
const struct doc_check doc_checks[] = {
	{"hardware", "pci", "No NVIDIA PCI device",
	 "check the instance type, that PCI passthrough gives the VM the GPU, and that the "
	 "GPU is seated and powered (lspci -d 10de:)",
	 "gpuop preflight", false, check_pci},
	{"kernel", "module", "Driver pod stuck in init",
	 "load the driver: modprobe nvidia, or read the driver pod's logs (kernel headers, "
	 "package repositories, Secure Boot signing)",
	 "gpuop preflight", false, check_module},
	{"driver", "nvml", "nvidia-smi fails",
	 "check the kernel log for NVRM and Xid lines; reload the driver or reboot after a "
	 "driver upgrade",
	 "gpuop info", false, check_nvml},
	{"driver", "gpu-health", "nvidia-smi fails, GPU lost",
	 "drain the node, reset the GPU (nvidia-smi -r) or reboot; an Xid 79 that recurs means "
	 "the GPU, its power or its slot needs service",
	 "gpuop node --once", false, check_health},
	{"driver", "gpu-count", "Wrong number of GPUs",
	 "compare lspci, nvidia-smi -L and the MIG configuration; reset or reboot for a GPU "
	 "missing from NVML",
	 "gpuop info", false, check_count},
	{"toolkit", "cdi-spec", "CDI device not found / No runtime for nvidia",
	 "regenerate it: gpuop cdi generate (the toolkit DaemonSet does it on its own)",
	 "gpuop cdi validate", false, check_cdi},
	{"runtime", "runtime-config", "No runtime for nvidia",
	 "gpuop runtime configure --runtime containerd|crio", "gpuop runtime configure --dry-run",
	 false, check_runtime},
	{"device plugin", "kubelet", "Node shows no nvidia.com/gpu",
	 "start kubelet; the device plugin registers again by itself", "gpuop node --once", false,
	 check_kubelet},
	{"device plugin", "registration", "Node shows no nvidia.com/gpu",
	 "restart the device plugin and read its log", "gpuop device-plugin", false,
	 check_registration},
	{"kubelet", "node-capacity", "Node shows no nvidia.com/gpu / Wrong number of GPUs",
	 "kubectl describe node: capacity, allocatable and events", "kubectl describe node",
	 false, check_node_capacity},
	{"validation", "markers", "Validator repeatedly fails",
	 "the lowest layer that fails above is what the validator waits for",
	 "gpuop validate all", false, check_validations},
	{"workload", "cuda", "CUDA test fails", "match the image's CUDA to the driver",
	 "gpuop info", false, check_cuda},
	{"pod", "pod-limits", "Pod remains Pending / no GPU in the pod",
	 "put nvidia.com/gpu in resources.limits", "gpuop doctor --pod NS/NAME", true,
	 check_pod_limits},
	{"pod", "pod-runtimeclass", "No runtime for nvidia",
	 "remove runtimeClassName: nvidia (CDI needs none)", "gpuop doctor --pod NS/NAME", true,
	 check_pod_runtimeclass},
	{"pod", "pod-capacity", "Pod remains Pending",
	 "ask for no more GPUs than one node has", "gpuop doctor --pod NS/NAME", true,
	 check_pod_capacity},
	{"pod", "pod-taints", "Pod remains Pending", "tolerate the GPU nodes' taints",
	 "gpuop doctor --pod NS/NAME", true, check_pod_taints},
	{"pod", "pod-selector", "Pod remains Pending", "fix the nodeSelector",
	 "gpuop doctor --pod NS/NAME", true, check_pod_selector},
	{"pod", "pod-events", "Pod remains Pending", "read the pod's events",
	 "kubectl describe pod", true, check_pod_events},
};
const size_t doc_checks_len = ARRAY_SIZE(doc_checks);
