/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The running device plugin: one gRPC server per resource on
 * <plugin-dir>/nvidia-<name>.sock, registered with kubelet, kept registered
 * and kept truthful.
 *
 * Threads:
 *   - the loop thread does everything that touches plugin state: gRPC
 *     calls, inotify, signals (signalfd), NVML probes, health decisions;
 *   - the event thread blocks in nvmlEventSetWait and hands each event to
 *     the loop (queue + loop_wake), so an XID reaches kubelet in
 *     milliseconds, not at the next 5 s poll;
 *   - the registrar thread makes the blocking Register call: kubelet dials
 *     our socket and calls GetDevicePluginOptions *before* it answers
 *     Register, so the loop must keep serving meanwhile.
 *
 * Registration protocol (kubelet's plugin/v1beta1/handler.go): serve first,
 * then Register.  A new kubelet wipes the directory and creates a fresh
 * kubelet.sock; inotify sees either our socket deleted or kubelet.sock
 * created, and we re-serve what is missing and register again at once.  A
 * kubelet.sock that appears late (bottlerocket#4250) only causes a
 * registration, never a restart of healthy servers.  Without kubelet.sock we
 * wait for inotify: no polling, no exit.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/fileio.h"
#include "base/log.h"
#include "base/loop.h"
#include "deviceplugin/deviceplugin.h"
#include "deviceplugin/v1beta1/api.pb-c.h"
#include "grpc/grpc.h"
#include "gpu/watch.h"
#include "nvml/nvml.h"

#define COMP DP_COMP
#define PROBE_MS 1000           /* how often NVML is asked whether devices answer */
#define NVML_RETRY_MS 2000      /* failOnInitError=false: retry NVML this often */
#define REGISTER_TIMEOUT_MS 5000
/* A restarting kubelet creates kubelet.sock (bind) a moment before it
 * listens, so the first Register after the inotify event can be refused:
 * retry soon, then back off to RETRY_MAX_MS for a kubelet that stays away. */
#define RETRY_MIN_MS 20
#define RETRY_MAX_MS 30000
#define QUEUE_LEN 1024

/* ---- messages from the worker threads to the loop ---- */

enum msg_kind { MSG_EVENT, MSG_WAIT_ERROR, MSG_REGISTERED };

struct msg {
	enum msg_kind kind;
	int gpu, mig;
	unsigned long long type, data;
	int rc;            /* NVML rc, or 0/-1 for Register */
	unsigned int gen;  /* MSG_REGISTERED: which attempt */
	size_t srv;
	uint64_t took_ms;
	char text[512];
};

struct queue {
	pthread_mutex_t mu;
	struct msg v[QUEUE_LEN];
	size_t head, len;
	unsigned long dropped;
};

struct job {
	size_t srv;
	unsigned int gen;
	uint8_t *req;
	size_t len;
};

struct dp_plugin;

/* One resource: its server and its registration. */
struct srv {
	struct dp_plugin *p;
	char name[DP_NAME_MAX];
	size_t id;   /* stable index into p->srvs */
	size_t res;  /* index into p->res.v */
	struct grpc_server *server;
	struct grpc_method methods[5];
	struct grpc_call **streams;
	size_t nstreams, capstreams;
	uint64_t sent_sig; /* health signature last streamed */
	bool registered, in_flight, again, ever_registered;
	unsigned int gen;
	uint64_t trigger_ms;
	unsigned int backoff_ms;
	struct loop_timer *retry;
	bool removed;
};

struct dp_plugin {
	const struct dp_run_opts *o;
	struct dp_config cfg;
	struct loop *loop;
	struct nvml *nvml;
	struct gpu_node *node;
	struct dp_resources res;
	struct dp_unit *units; /* per GPU, then its MIG devices: see unit_base */
	size_t *unit_base;
	size_t nunits;
	char *mig_minors;
	struct srv **srvs;
	size_t nsrvs;
	char kubelet_sock[PATH_MAX + 32];
	int inotify_fd, inotify_wd, signal_fd;
	bool waiting_logged;
	struct loop_timer *probe, *nvml_retry;
	struct queue q;
	struct gpu_watch *watch; /* NVML events */
	/* registrar thread */
	pthread_t reg_thread;
	bool reg_running;
	pthread_mutex_t reg_mu;
	pthread_cond_t reg_cv;
	struct job *jobs;
	size_t njobs;
	bool reg_stop;
};

static void post(struct dp_plugin *p, const struct msg *m)
{
	pthread_mutex_lock(&p->q.mu);
	if (p->q.len == QUEUE_LEN) {
		p->q.head = (p->q.head + 1) % QUEUE_LEN;
		p->q.len--;
		p->q.dropped++;
	}
	p->q.v[(p->q.head + p->q.len) % QUEUE_LEN] = *m;
	p->q.len++;
	pthread_mutex_unlock(&p->q.mu);
	loop_wake(p->loop);
}

/* ---- health ---- */

static struct dp_unit *unit_of(struct dp_plugin *p, int gpu, int mig)
{
	if (!p->units || gpu < 0 || (size_t)gpu >= p->node->ngpus)
		return NULL;
	return &p->units[p->unit_base[gpu] + (mig < 0 ? 0 : 1 + (size_t)mig)];
}

static bool dev_healthy(void *ud, const struct dp_device *d)
{
	struct dp_plugin *p = ud;
	struct dp_unit *g = unit_of(p, d->gpu, -1), *m = unit_of(p, d->gpu, d->mig);
	return (!g || g->healthy) && (!m || m->healthy);
}

static const char *unit_uuid(struct dp_plugin *p, int gpu, int mig)
{
	const struct gpu_dev *g = &p->node->gpus[gpu];
	return mig < 0 ? g->uuid : g->mig[mig].uuid;
}

/* Build the unit table for the current node, keeping the health of every
 * device (by UUID) from the previous table. */
static int units_build(struct dp_plugin *p, struct dp_unit *old, size_t *old_base,
		       struct gpu_node *old_node, struct gpuop_error *err)
{
	size_t n = 0;
	struct gpu_node *node = p->node;

	free(p->unit_base);
	p->unit_base = calloc(node->ngpus + 1, sizeof(*p->unit_base));
	if (!p->unit_base)
		return error_errno(err, ENOMEM, "health table");
	for (size_t g = 0; g < node->ngpus; g++) {
		p->unit_base[g] = n;
		n += 1 + node->gpus[g].nmig;
	}
	p->units = calloc(n + 1, sizeof(*p->units));
	if (!p->units)
		return error_errno(err, ENOMEM, "health table");
	p->nunits = n;
	for (size_t g = 0; g < node->ngpus; g++)
		for (int m = -1; m < (int)node->gpus[g].nmig; m++) {
			struct dp_unit *u = unit_of(p, (int)g, m);
			const char *uuid = unit_uuid(p, (int)g, m);
			dp_unit_init(u);
			for (size_t og = 0; old && *uuid && og < old_node->ngpus; og++)
				for (int om = -1; om < (int)old_node->gpus[og].nmig; om++) {
					const struct gpu_dev *d = &old_node->gpus[og];
					if (strcmp(om < 0 ? d->uuid : d->mig[om].uuid, uuid) == 0)
						*u = old[old_base[og] + (om < 0 ? 0 : 1 + (size_t)om)];
				}
		}
	return 0;
}

/* ---- ListAndWatch ---- */

static const struct dp_resource *srv_res(const struct srv *s)
{
	return &s->p->res.v[s->res];
}

static uint64_t health_sig(struct srv *s)
{
	const struct dp_resource *r = srv_res(s);
	uint64_t h = 1469598103934665603ull ^ r->ndevs;
	for (size_t i = 0; i < r->ndevs; i++) {
		h ^= dev_healthy(s->p, &r->devs[i]) ? 0x9e3779b97f4a7c15ull : 0x7f4a7c159e3779b9ull;
		h = (h << 7 | h >> 57) * 1099511628211ull;
	}
	return h;
}

static int send_msg(struct grpc_call *call, const ProtobufCMessage *m)
{
	size_t len = protobuf_c_message_get_packed_size(m);
	_cleanup_free_ uint8_t *b = malloc(len ? len : 1);
	if (!b)
		return -1;
	protobuf_c_message_pack(m, b);
	return grpc_call_send(call, b, len);
}

static int send_list(struct srv *s, struct grpc_call *call)
{
	const struct dp_resource *r = srv_res(s);
	_cleanup_free_ V1beta1__Device *devs = calloc(r->ndevs + 1, sizeof(*devs));
	_cleanup_free_ V1beta1__Device **pdevs = calloc(r->ndevs + 1, sizeof(*pdevs));
	_cleanup_free_ V1beta1__TopologyInfo *topo = calloc(r->ndevs + 1, sizeof(*topo));
	_cleanup_free_ V1beta1__NUMANode *numa = calloc(r->ndevs + 1, sizeof(*numa));
	_cleanup_free_ V1beta1__NUMANode **pnuma = calloc(r->ndevs + 1, sizeof(*pnuma));
	V1beta1__ListAndWatchResponse resp = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;

	if (!devs || !pdevs || !topo || !numa || !pnuma)
		return -1;
	for (size_t i = 0; i < r->ndevs; i++) {
		const struct dp_device *d = &r->devs[i];
		v1beta1__device__init(&devs[i]);
		devs[i].id = (char *)d->id;
		devs[i].health = dev_healthy(s->p, d) ? DP_HEALTHY : DP_UNHEALTHY;
		if (d->numa >= 0) {
			v1beta1__topology_info__init(&topo[i]);
			v1beta1__numanode__init(&numa[i]);
			numa[i].id = d->numa;
			pnuma[i] = &numa[i];
			topo[i].n_nodes = 1;
			topo[i].nodes = &pnuma[i];
			devs[i].topology = &topo[i];
		}
		pdevs[i] = &devs[i];
	}
	resp.n_devices = r->ndevs;
	resp.devices = pdevs;
	return send_msg(call, &resp.base);
}

static void stream_remove(struct srv *s, struct grpc_call *call)
{
	for (size_t i = 0; i < s->nstreams; i++)
		if (s->streams[i] == call) {
			s->streams[i] = s->streams[--s->nstreams];
			return;
		}
}

static void on_stream_close(struct grpc_call *call, void *ud)
{
	stream_remove(ud, call);
}

/* Send the full list to every open stream (kubelet rebuilds its view from
 * each message, so a partial list would drop devices). */
static void broadcast(struct srv *s, bool force)
{
	uint64_t sig = health_sig(s);
	if (!force && sig == s->sent_sig)
		return;
	s->sent_sig = sig;
	for (size_t i = s->nstreams; i-- > 0;) {
		struct grpc_call *c = s->streams[i];
		if (send_list(s, c) < 0) {
			stream_remove(s, c);
			grpc_call_finish(c, GRPC_STATUS_INTERNAL, "cannot send the device list");
		}
	}
}

static void broadcast_all(struct dp_plugin *p, bool force)
{
	for (size_t i = 0; i < p->nsrvs; i++)
		if (!p->srvs[i]->removed)
			broadcast(p->srvs[i], force);
}

/* ---- gRPC handlers ---- */

static void h_options(struct grpc_call *call, const uint8_t *msg, size_t len, void *ud)
{
	V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
	(void)msg, (void)len, (void)ud;
	o.pre_start_required = 0;
	o.get_preferred_allocation_available = 1;
	send_msg(call, &o.base);
	grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

static void h_list_and_watch(struct grpc_call *call, const uint8_t *msg, size_t len, void *ud)
{
	struct srv *s = ud;
	(void)msg, (void)len;
	if (s->nstreams == s->capstreams) {
		size_t nc = s->capstreams ? s->capstreams * 2 : 4;
		struct grpc_call **nv = realloc(s->streams, nc * sizeof(*nv));
		if (!nv) {
			grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
			return;
		}
		s->streams = nv;
		s->capstreams = nc;
	}
	if (send_list(s, call) < 0) {
		grpc_call_finish(call, GRPC_STATUS_INTERNAL, "cannot send the device list");
		return;
	}
	s->streams[s->nstreams++] = call;
	grpc_call_on_close(call, on_stream_close, s);
}

static struct dp_alloc_env alloc_env(struct dp_plugin *p)
{
	return (struct dp_alloc_env){.node = p->node,
				     .cfg = &p->cfg,
				     .dev_root = p->o->dev_root ? p->o->dev_root : "/",
				     .mig_minors = p->mig_minors,
				     .healthy = dev_healthy,
				     .ud = p};
}

static void h_allocate(struct grpc_call *call, const uint8_t *msg, size_t len, void *ud)
{
	struct srv *s = ud;
	struct dp_plugin *p = s->p;
	V1beta1__AllocateRequest *req = v1beta1__allocate_request__unpack(NULL, len, msg);
	struct gpuop_error e = {0};

	if (!req) {
		grpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT, "cannot decode AllocateRequest");
		return;
	}
	size_t n = req->n_container_requests;
	struct dp_alloc_env env = alloc_env(p);
	struct dp_alloc *allocs = calloc(n + 1, sizeof(*allocs));
	V1beta1__ContainerAllocateResponse *cr = calloc(n + 1, sizeof(*cr));
	V1beta1__ContainerAllocateResponse **pcr = calloc(n + 1, sizeof(*pcr));
	size_t done = 0;
	int rc = allocs && cr && pcr ? 0 : -1;

	if (rc < 0)
		error_errno(&e, ENOMEM, "allocate");
	for (size_t i = 0; rc == 0 && i < n; i++) {
		V1beta1__ContainerAllocateRequest *c = req->container_requests[i];
		rc = dp_allocate(&env, srv_res(s), (const char *const *)c->devices_ids,
				 c->n_devices_ids, &allocs[i], &e);
		if (rc == 0)
			done++;
	}
	/* The response borrows the strings of allocs[]. */
	size_t total_env = 0, total_ann = 0, total_cdi = 0, total_spec = 0;
	for (size_t i = 0; i < done; i++) {
		total_env += allocs[i].nenvs;
		total_ann += allocs[i].nannotations;
		total_cdi += allocs[i].ncdi;
		total_spec += allocs[i].nspecs;
	}
	V1beta1__ContainerAllocateResponse__EnvsEntry *ee = calloc(total_env + 1, sizeof(*ee));
	V1beta1__ContainerAllocateResponse__EnvsEntry **pee = calloc(total_env + 1, sizeof(*pee));
	V1beta1__ContainerAllocateResponse__AnnotationsEntry *ae = calloc(total_ann + 1, sizeof(*ae));
	V1beta1__ContainerAllocateResponse__AnnotationsEntry **pae =
		calloc(total_ann + 1, sizeof(*pae));
	V1beta1__CDIDevice *cd = calloc(total_cdi + 1, sizeof(*cd));
	V1beta1__CDIDevice **pcd = calloc(total_cdi + 1, sizeof(*pcd));
	V1beta1__DeviceSpec *ds = calloc(total_spec + 1, sizeof(*ds));
	V1beta1__DeviceSpec **pds = calloc(total_spec + 1, sizeof(*pds));
	if (rc == 0 && (!ee || !pee || !ae || !pae || !cd || !pcd || !ds || !pds))
		rc = error_errno(&e, ENOMEM, "allocate");
	if (rc == 0) {
		size_t ie = 0, ia = 0, ic = 0, is = 0;
		V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
		for (size_t i = 0; i < n; i++) {
			struct dp_alloc *a = &allocs[i];
			v1beta1__container_allocate_response__init(&cr[i]);
			cr[i].envs = &pee[ie];
			cr[i].annotations = &pae[ia];
			cr[i].cdi_devices = &pcd[ic];
			cr[i].devices = &pds[is];
			for (size_t k = 0; k < a->nenvs; k++, ie++) {
				v1beta1__container_allocate_response__envs_entry__init(&ee[ie]);
				ee[ie].key = a->envs[k].key;
				ee[ie].value = a->envs[k].value;
				pee[ie] = &ee[ie];
			}
			for (size_t k = 0; k < a->nannotations; k++, ia++) {
				v1beta1__container_allocate_response__annotations_entry__init(&ae[ia]);
				ae[ia].key = a->annotations[k].key;
				ae[ia].value = a->annotations[k].value;
				pae[ia] = &ae[ia];
			}
			for (size_t k = 0; k < a->ncdi; k++, ic++) {
				v1beta1__cdidevice__init(&cd[ic]);
				cd[ic].name = a->cdi[k];
				pcd[ic] = &cd[ic];
			}
			for (size_t k = 0; k < a->nspecs; k++, is++) {
				v1beta1__device_spec__init(&ds[is]);
				ds[is].container_path = a->specs[k].container_path;
				ds[is].host_path = a->specs[k].host_path;
				ds[is].permissions = a->specs[k].permissions;
				pds[is] = &ds[is];
			}
			cr[i].n_envs = a->nenvs;
			cr[i].n_annotations = a->nannotations;
			cr[i].n_cdi_devices = a->ncdi;
			cr[i].n_devices = a->nspecs;
			pcr[i] = &cr[i];
		}
		resp.n_container_responses = n;
		resp.container_responses = pcr;
		if (send_msg(call, &resp.base) < 0)
			grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED,
					 "AllocateResponse too large");
		else
			grpc_call_finish(call, GRPC_STATUS_OK, NULL);
	} else {
		log_warn(COMP, "Allocate refused", "resource", srv_res(s)->resource, "error", e.msg,
			 NULL);
		grpc_call_finish(call, e.domain == GPUOP_ERR_GRPC ? (enum grpc_status)e.code
								  : GRPC_STATUS_INTERNAL,
				 e.msg);
	}
	for (size_t i = 0; allocs && i < done; i++)
		dp_alloc_free(&allocs[i]);
	free(ee), free(pee), free(ae), free(pae), free(cd), free(pcd), free(ds), free(pds);
	free(allocs), free(cr), free(pcr);
	v1beta1__allocate_request__free_unpacked(req, NULL);
}

static void h_preferred(struct grpc_call *call, const uint8_t *msg, size_t len, void *ud)
{
	struct srv *s = ud;
	V1beta1__PreferredAllocationRequest *req =
		v1beta1__preferred_allocation_request__unpack(NULL, len, msg);

	if (!req) {
		grpc_call_finish(call, GRPC_STATUS_INVALID_ARGUMENT,
				 "cannot decode PreferredAllocationRequest");
		return;
	}
	size_t n = req->n_container_requests;
	struct dp_alloc_env env = alloc_env(s->p);
	V1beta1__ContainerPreferredAllocationResponse *cr = calloc(n + 1, sizeof(*cr));
	V1beta1__ContainerPreferredAllocationResponse **pcr = calloc(n + 1, sizeof(*pcr));
	const char ***ids = calloc(n + 1, sizeof(*ids));
	bool ok = cr && pcr && ids;

	for (size_t i = 0; ok && i < n; i++) {
		V1beta1__ContainerPreferredAllocationRequest *c = req->container_requests[i];
		size_t size = c->allocation_size > 0 ? (size_t)c->allocation_size : 0;
		size_t cap = c->n_available_deviceids + c->n_must_include_deviceids + 1;
		if (!(ids[i] = calloc(cap, sizeof(*ids[i])))) {
			ok = false;
			break;
		}
		if (size > cap)
			size = cap - 1;
		size_t k = dp_preferred(&env, srv_res(s), (const char *const *)c->available_deviceids,
					c->n_available_deviceids,
					(const char *const *)c->must_include_deviceids,
					c->n_must_include_deviceids, size, ids[i]);
		v1beta1__container_preferred_allocation_response__init(&cr[i]);
		cr[i].n_deviceids = k;
		cr[i].deviceids = (char **)ids[i];
		pcr[i] = &cr[i];
	}
	if (ok) {
		V1beta1__PreferredAllocationResponse resp = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
		resp.n_container_responses = n;
		resp.container_responses = pcr;
		send_msg(call, &resp.base);
		grpc_call_finish(call, GRPC_STATUS_OK, NULL);
	} else {
		grpc_call_finish(call, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
	}
	for (size_t i = 0; ids && i < n; i++)
		free(ids[i]);
	free(ids), free(cr), free(pcr);
	v1beta1__preferred_allocation_request__free_unpacked(req, NULL);
}

static void h_prestart(struct grpc_call *call, const uint8_t *msg, size_t len, void *ud)
{
	V1beta1__PreStartContainerResponse r = V1BETA1__PRE_START_CONTAINER_RESPONSE__INIT;
	(void)msg, (void)len, (void)ud;
	send_msg(call, &r.base);
	grpc_call_finish(call, GRPC_STATUS_OK, NULL);
}

/* ---- serving and registration ---- */

static void srv_socket_path(const struct srv *s, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s", s->p->cfg.plugin_dir, srv_res(s)->socket_name);
}

static void srv_stop(struct srv *s)
{
	if (s->server) {
		grpc_server_shutdown(s->server);
		grpc_server_free(s->server);
		s->server = NULL;
	}
	s->nstreams = 0;
	s->registered = false;
}

static int srv_serve(struct srv *s, struct gpuop_error *err)
{
	char path[PATH_MAX + 128];
	static const char *const paths[] = {
		"/v1beta1.DevicePlugin/GetDevicePluginOptions", "/v1beta1.DevicePlugin/ListAndWatch",
		"/v1beta1.DevicePlugin/GetPreferredAllocation", "/v1beta1.DevicePlugin/Allocate",
		"/v1beta1.DevicePlugin/PreStartContainer"};
	static const grpc_handler handlers[] = {h_options, h_list_and_watch, h_preferred,
						h_allocate, h_prestart};

	srv_stop(s);
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++)
		s->methods[i] = (struct grpc_method){paths[i], handlers[i] == h_list_and_watch,
						     handlers[i], s};
	srv_socket_path(s, path, sizeof(path));
	if (!(s->server = grpc_server_new(s->p->loop, s->methods, ARRAY_SIZE(paths), NULL, err)))
		return error_wrap(err, "serving %s", srv_res(s)->resource);
	if (grpc_server_listen(s->server, path, 0, err) < 0) {
		grpc_server_free(s->server);
		s->server = NULL;
		return error_wrap(err, "serving %s", srv_res(s)->resource);
	}
	s->sent_sig = health_sig(s);
	return 0;
}

static bool kubelet_present(struct dp_plugin *p)
{
	struct stat st;
	return stat(p->kubelet_sock, &st) == 0;
}

static void srv_register(struct srv *s);

static void on_retry(struct loop *l, struct loop_timer *t, void *ud)
{
	struct srv *s = ud;
	(void)l, (void)t;
	s->retry = NULL;
	srv_register(s);
}

/* Queue a Register call for the registrar thread.  Packing happens here:
 * the config and names belong to the loop thread. */
static void srv_register(struct srv *s)
{
	struct dp_plugin *p = s->p;
	const struct dp_resource *r = srv_res(s);

	if (s->removed || !s->server)
		return;
	if (s->in_flight) {
		s->again = true; /* the answer in flight may be from a kubelet now gone */
		return;
	}
	if (!kubelet_present(p)) {
		if (!p->waiting_logged)
			log_info(COMP, "waiting for kubelet", "socket", p->kubelet_sock, NULL);
		p->waiting_logged = true;
		return; /* inotify on the directory wakes us when it appears */
	}
	if (s->retry) {
		loop_cancel_timer(p->loop, s->retry);
		s->retry = NULL;
	}
	V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
	V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
	opts.get_preferred_allocation_available = 1;
	req.version = "v1beta1";
	req.endpoint = (char *)r->socket_name;
	req.resource_name = (char *)r->resource;
	req.options = &opts;
	size_t len = v1beta1__register_request__get_packed_size(&req);
	uint8_t *b = malloc(len ? len : 1);
	if (!b)
		return;
	v1beta1__register_request__pack(&req, b);

	pthread_mutex_lock(&p->reg_mu);
	struct job *nj = realloc(p->jobs, (p->njobs + 1) * sizeof(*nj));
	if (!nj) {
		pthread_mutex_unlock(&p->reg_mu);
		free(b);
		return;
	}
	p->jobs = nj;
	p->jobs[p->njobs++] = (struct job){s->id, ++s->gen, b, len};
	s->in_flight = true;
	pthread_cond_signal(&p->reg_cv);
	pthread_mutex_unlock(&p->reg_mu);
}

static void *registrar(void *arg)
{
	struct dp_plugin *p = arg;

	pthread_mutex_lock(&p->reg_mu);
	for (;;) {
		while (!p->reg_stop && p->njobs == 0)
			pthread_cond_wait(&p->reg_cv, &p->reg_mu);
		if (p->reg_stop)
			break;
		struct job j = p->jobs[0];
		memmove(p->jobs, p->jobs + 1, (p->njobs - 1) * sizeof(*p->jobs));
		p->njobs--;
		pthread_mutex_unlock(&p->reg_mu);

		struct msg m = {.kind = MSG_REGISTERED, .srv = j.srv, .gen = j.gen};
		struct gpuop_error e = {0};
		struct grpc_result res = {0};
		_cleanup_buf_ struct buf resp;
		uint64_t t0 = loop_now_ms();
		buf_init(&resp, 4096);
		m.rc = grpc_unary(p->kubelet_sock, "/v1beta1.Registration/Register", j.req, j.len,
				  REGISTER_TIMEOUT_MS, 4096, &resp, &res, &e);
		m.took_ms = loop_now_ms() - t0;
		if (m.rc < 0)
			snprintf(m.text, sizeof(m.text), "%s", e.msg);
		free(j.req);
		post(p, &m);
		pthread_mutex_lock(&p->reg_mu);
	}
	pthread_mutex_unlock(&p->reg_mu);
	return NULL;
}

static void status_update(struct dp_plugin *p)
{
	struct dp_status *st = p->o->status;
	size_t resources = 0, registered = 0, devices = 0, healthy = 0;

	if (!st)
		return;
	for (size_t i = 0; i < p->nsrvs; i++) {
		struct srv *s = p->srvs[i];
		if (s->removed)
			continue;
		resources++;
		registered += s->registered;
		const struct dp_resource *r = srv_res(s);
		devices += r->ndevs;
		for (size_t d = 0; d < r->ndevs; d++)
			healthy += dev_healthy(p, &r->devs[d]);
	}
	pthread_mutex_lock(&st->mu);
	st->running = true;
	st->resources = resources;
	st->registered = registered;
	st->devices = devices;
	st->healthy = healthy;
	snprintf(st->plugin_dir, sizeof(st->plugin_dir), "%s", p->cfg.plugin_dir);
	pthread_mutex_unlock(&st->mu);
}

static void on_registered(struct dp_plugin *p, const struct msg *m)
{
	if (m->srv >= p->nsrvs)
		return;
	struct srv *s = p->srvs[m->srv];
	char took[32], call[32];

	if (m->gen != s->gen || s->removed)
		return;
	s->in_flight = false;
	if (s->again) {
		s->again = false;
		srv_register(s);
		return;
	}
	snprintf(took, sizeof(took), "%llu", (unsigned long long)(loop_now_ms() - s->trigger_ms));
	snprintf(call, sizeof(call), "%llu", (unsigned long long)m->took_ms);
	if (m->rc == 0) {
		char ndev[32];
		snprintf(ndev, sizeof(ndev), "%zu", srv_res(s)->ndevs);
		log_info(COMP, s->ever_registered ? "re-registered with kubelet" : "registered with kubelet",
			 "resource", srv_res(s)->resource, "endpoint", srv_res(s)->socket_name,
			 "devices", ndev, "took_ms", took, "register_ms", call, NULL);
		s->registered = s->ever_registered = true;
		s->backoff_ms = 0;
		p->waiting_logged = false;
		status_update(p);
		return;
	}
	s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : RETRY_MIN_MS;
	if (s->backoff_ms > RETRY_MAX_MS)
		s->backoff_ms = RETRY_MAX_MS;
	char retry[32];
	snprintf(retry, sizeof(retry), "%u", s->backoff_ms);
	log_warn(COMP, "registration failed; retrying", "resource", srv_res(s)->resource, "error",
		 m->text, "retry_ms", retry, NULL);
	if (!s->retry)
		s->retry = loop_add_timer(p->loop, s->backoff_ms, 0, on_retry, s);
}

/* Make sure srv is served (its socket file exists) and registered. */
static void srv_ensure(struct srv *s, bool kubelet_new, const char *why)
{
	char path[PATH_MAX + 128];
	struct stat st;
	struct gpuop_error e = {0};

	srv_socket_path(s, path, sizeof(path));
	bool missing = stat(path, &st) < 0;
	if (!missing && !kubelet_new && s->server)
		return;
	s->trigger_ms = loop_now_ms();
	if (missing || !s->server) {
		if (srv_serve(s, &e) < 0) {
			log_error(COMP, "cannot serve", "resource", srv_res(s)->resource, "error",
				  e.msg, NULL);
			return;
		}
		if (s->ever_registered)
			log_info(COMP, "socket re-created", "socket", path, "why", why, NULL);
	}
	s->registered = false;
	s->backoff_ms = 0;
	srv_register(s);
}

/* ---- inotify on the plugin dir ---- */

static void watch_dir(struct dp_plugin *p)
{
	if (p->inotify_wd >= 0)
		return;
	p->inotify_wd = inotify_add_watch(p->inotify_fd, p->cfg.plugin_dir,
					  IN_CREATE | IN_MOVED_TO | IN_DELETE | IN_MOVED_FROM |
						  IN_DELETE_SELF | IN_MOVE_SELF);
}

static void on_inotify(struct loop *l, int fd, uint32_t events, void *ud)
{
	struct dp_plugin *p = ud;
	char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
	bool kubelet_new = false, dir_gone = false;
	_cleanup_free_ bool *gone = calloc(p->nsrvs + 1, sizeof(*gone));
	(void)l, (void)events;

	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf));
		if (n <= 0)
			break;
		for (char *q = buf; q < buf + n;) {
			const struct inotify_event *ev = (const struct inotify_event *)q;
			q += sizeof(*ev) + ev->len;
			if (ev->mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF)) {
				dir_gone = true;
				continue;
			}
			if (!ev->len)
				continue;
			if ((ev->mask & (IN_CREATE | IN_MOVED_TO)) &&
			    strcmp(ev->name, DP_KUBELET_SOCKET) == 0)
				kubelet_new = true;
			if (ev->mask & (IN_DELETE | IN_MOVED_FROM))
				for (size_t i = 0; gone && i < p->nsrvs; i++)
					if (!p->srvs[i]->removed &&
					    strcmp(ev->name, srv_res(p->srvs[i])->socket_name) == 0)
						gone[i] = true;
		}
	}
	if (dir_gone) {
		/* kubelet removed and re-created the directory itself. */
		inotify_rm_watch(p->inotify_fd, p->inotify_wd);
		p->inotify_wd = -1;
		struct gpuop_error e;
		if (mkdir_p(p->cfg.plugin_dir, 0755, &e) == 0)
			watch_dir(p);
	}
	if (kubelet_new)
		log_info(COMP, "kubelet.sock created: kubelet (re)started", NULL);
	for (size_t i = 0; i < p->nsrvs; i++) {
		struct srv *s = p->srvs[i];
		if (s->removed)
			continue;
		if (kubelet_new || dir_gone || (gone && gone[i]))
			srv_ensure(s, kubelet_new,
				   kubelet_new ? "kubelet restarted" : "socket removed");
	}
}

/* ---- NVML events (on a gpu_watch thread, handed to the loop) ---- */

/* On the watch thread: p->node stays put while the watch runs (every
 * rescan stops the watch before it swaps the node). */
static void on_nvml_event(void *ud, size_t gpu, const nvmlEventData_t *ev)
{
	struct dp_plugin *p = ud;
	const struct gpu_dev *d = &p->node->gpus[gpu];
	struct msg m = {.kind = MSG_EVENT, .gpu = (int)gpu, .mig = -1, .rc = NVML_SUCCESS,
			.type = ev->eventType, .data = ev->eventData};

	/* A MIG device's own event names its instances. */
	if (ev->gpuInstanceId != NVML_INSTANCE_ID_UNATTRIBUTED)
		for (size_t k = 0; k < d->nmig; k++)
			if (d->mig[k].gi_id == ev->gpuInstanceId &&
			    (ev->computeInstanceId == NVML_INSTANCE_ID_UNATTRIBUTED ||
			     d->mig[k].ci_id == ev->computeInstanceId))
				m.mig = (int)k;
	post(p, &m);
}

static void on_nvml_wait_error(void *ud, int rc, const char *msg)
{
	struct msg m = {.kind = MSG_WAIT_ERROR, .gpu = -1, .mig = -1, .rc = rc};

	snprintf(m.text, sizeof(m.text), "%s", msg);
	post(ud, &m);
}

static void events_stop(struct dp_plugin *p)
{
	gpu_watch_stop(p->watch);
	p->watch = NULL;
}

static void events_start(struct dp_plugin *p)
{
	struct gpuop_error e;

	if (!p->nvml || !p->node)
		return;
	_cleanup_free_ nvmlDevice_t *h = calloc(p->node->ngpus + 1, sizeof(*h));
	for (size_t g = 0; h && g < p->node->ngpus; g++)
		h[g] = p->node->gpus[g].handle; /* a lost one registers when rearmed */
	struct gpu_watch_opts wo = {
		.nvml = p->nvml,
		.handles = h,
		.n = p->node->ngpus,
		.types = nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError |
			 nvmlEventTypeSingleBitEccError,
		.on_event = on_nvml_event,
		.on_error = on_nvml_wait_error,
		.ud = p,
		.component = COMP,
	};
	if (!h || !(p->watch = gpu_watch_start(&wo, &e)))
		log_error(COMP, "cannot watch NVML events; health comes from probes only", NULL);
}

/* ---- health changes ---- */

static void log_unit(struct dp_plugin *p, int gpu, int mig)
{
	struct dp_unit *u = unit_of(p, gpu, mig);
	char idx[32], xid[32];

	if (mig < 0)
		snprintf(idx, sizeof(idx), "%d", gpu);
	else
		snprintf(idx, sizeof(idx), "%d:%u", gpu, p->node->gpus[gpu].mig[mig].index);
	const char *uuid = unit_uuid(p, gpu, mig);
	if (u->healthy) {
		log_info(COMP, "device healthy again", "device", idx, "uuid", uuid, NULL);
		return;
	}
	snprintf(xid, sizeof(xid), "%llu", u->xid);
	if (u->cause == DP_CAUSE_XID)
		log_error(COMP, "device unhealthy", "device", idx, "uuid", uuid, "reason", u->reason,
			  "xid", xid, NULL);
	else
		log_error(COMP, "device unhealthy", "device", idx, "uuid", uuid, "reason", u->reason,
			  NULL);
}

static void on_event(struct dp_plugin *p, const struct msg *m)
{
	char gpu[16], data[32];
	uint64_t now = loop_now_ms();
	bool changed = false;

	if (m->gpu < 0 || !p->node || (size_t)m->gpu >= p->node->ngpus)
		return;
	snprintf(gpu, sizeof(gpu), "%d", m->gpu);
	snprintf(data, sizeof(data), "%llu", m->data);
	if (!(m->type & nvmlEventTypeXidCriticalError)) {
		/* ECC events come with their own XID (48, 63, 94, ...): logged only. */
		log_warn(COMP, "ECC event", "gpu", gpu,
			 "kind", m->type & nvmlEventTypeDoubleBitEccError ? "double-bit" : "single-bit",
			 NULL);
		return;
	}
	if (!dp_xid_is_critical(&p->cfg, m->data)) {
		log_info(COMP, "XID ignored by the health policy", "gpu", gpu, "xid", data,
			 "meaning", dp_xid_meaning(m->data), NULL);
		return;
	}
	if (m->mig >= 0) {
		if (dp_unit_on_xid(unit_of(p, m->gpu, m->mig), &p->cfg, m->data, now)) {
			log_unit(p, m->gpu, m->mig);
			changed = true;
		}
	} else {
		/* Unattributed: the whole GPU, and each of its MIG devices. */
		for (int k = -1; k < (int)p->node->gpus[m->gpu].nmig; k++)
			if (dp_unit_on_xid(unit_of(p, m->gpu, k), &p->cfg, m->data, now)) {
				log_unit(p, m->gpu, k);
				changed = true;
			}
	}
	if (changed)
		broadcast_all(p, false);
}

/* Ask NVML whether each GPU answers; recover or fail devices accordingly. */
static void probe_all(struct dp_plugin *p, const char *why)
{
	struct gpuop_error e;
	uint64_t now = loop_now_ms();
	bool changed = false;

	if (!p->node || !p->units)
		return;
	for (size_t g = 0; g < p->node->ngpus; g++) {
		const struct gpu_dev *d = &p->node->gpus[g];
		unsigned int t;
		int rc = d->handle ? NVML_CALL(p->nvml, &e, nvmlDeviceGetTemperature, d->handle,
					       NVML_TEMPERATURE_GPU, &t)
				   : NVML_ERROR_GPU_IS_LOST;
		if (nvml_absent(rc))
			rc = NVML_SUCCESS;
		for (int k = -1; k < (int)d->nmig; k++) {
			/* A MIG device is reached through its parent: only the
			 * parent's answer says anything; lost marks the parent. */
			if (k >= 0 && rc != NVML_SUCCESS)
				continue;
			struct dp_unit *u = unit_of(p, (int)g, k);
			bool was_gone = !u->healthy && u->cause != DP_CAUSE_XID;
			if (dp_unit_on_probe(u, &p->cfg, rc, why, now)) {
				log_unit(p, (int)g, k);
				changed = true;
				if (k < 0 && was_gone && u->healthy)
					gpu_watch_rearm(p->watch);
			}
		}
	}
	if (changed)
		broadcast_all(p, false);
}

static void on_probe(struct loop *l, struct loop_timer *t, void *ud)
{
	struct dp_plugin *p = ud;
	(void)l, (void)t;
	probe_all(p, "GPU does not answer");
	watch_dir(p);
	status_update(p);
}

static void reload(struct dp_plugin *p);

/* Embedded: the host writes DP_CTL_RELOAD (its SIGHUP, or a change it saw
 * in the GPUs) or DP_CTL_STOP. */
static void on_stop_fd(struct loop *l, int fd, uint32_t events, void *ud)
{
	struct dp_plugin *p = ud;
	char cmd[16];
	ssize_t n = read(fd, cmd, sizeof(cmd));
	(void)events;

	for (ssize_t i = 0; i < n; i++) {
		if (cmd[i] == DP_CTL_RELOAD) {
			log_info(COMP, "reloading the configuration and rescanning the GPUs", NULL);
			reload(p);
		} else {
			log_info(COMP, "stopping", NULL);
			loop_stop(l);
			return;
		}
	}
	if (n == 0) { /* the host's end is gone */
		loop_stop(l);
	}
}

static void on_wake(struct loop *l, void *ud)
{
	struct dp_plugin *p = ud;
	struct msg m;
	(void)l;

	for (;;) {
		pthread_mutex_lock(&p->q.mu);
		if (!p->q.len) {
			pthread_mutex_unlock(&p->q.mu);
			break;
		}
		m = p->q.v[p->q.head];
		p->q.head = (p->q.head + 1) % QUEUE_LEN;
		p->q.len--;
		pthread_mutex_unlock(&p->q.mu);
		switch (m.kind) {
		case MSG_EVENT:
			on_event(p, &m);
			break;
		case MSG_WAIT_ERROR: {
			/* NVIDIA marks every device unhealthy here; a failed wait
			 * says little about the GPUs, so ask each one. */
			char why[600];
			snprintf(why, sizeof(why), "event wait failed (%s) and the GPU does not "
						   "answer", m.text);
			log_warn(COMP, "NVML event wait failed; probing every GPU", "error", m.text,
				 NULL);
			probe_all(p, why);
			break;
		}
		case MSG_REGISTERED:
			on_registered(p, &m);
			break;
		}
	}
}

/* ---- devices: snapshot, resources, servers ---- */

static void read_mig_minors(struct dp_plugin *p)
{
	static const char rel[] = "/proc/driver/nvidia-caps/mig-minors";
	const char *root = p->o->driver_root ? p->o->driver_root : "/";
	char path[PATH_MAX + 64];
	_cleanup_buf_ struct buf b;
	struct gpuop_error e;

	free(p->mig_minors);
	p->mig_minors = NULL;
	buf_init(&b, 256 * 1024);
	snprintf(path, sizeof(path), "%s%s", strcmp(root, "/") == 0 ? "" : root, rel);
	if (buf_read_file(&b, path, &e) == 0 || buf_read_file(&b, rel, &e) == 0)
		p->mig_minors = buf_steal(&b);
}

static struct srv *srv_by_name(struct dp_plugin *p, const char *name)
{
	for (size_t i = 0; i < p->nsrvs; i++)
		if (!p->srvs[i]->removed && strcmp(p->srvs[i]->name, name) == 0)
			return p->srvs[i];
	return NULL;
}

/*
 * (Re)build everything from a fresh snapshot: health units (kept by UUID),
 * resources, and servers.  Resources that stay keep their server and
 * registration, and their streams get the new list; resources that went
 * away (MIG reconfigured, #240) stop serving; new ones serve and register.
 */
static int devices_sync(struct dp_plugin *p, struct gpuop_error *err)
{
	struct gpu_node *node = NULL;
	struct dp_resources res = {0};

	if (!p->nvml) {
		if (p->o->open_nvml(p->o->open_ud, &p->nvml, err) < 0)
			return -1;
	}
	if (gpu_node_snapshot(p->nvml, &node, err) < 0)
		return -1;
	if (dp_resources_build(node, &p->cfg, &res, err) < 0) {
		gpu_node_free(node);
		return -1;
	}
	events_stop(p);
	struct gpu_node *old_node = p->node;
	struct dp_unit *old_units = p->units;
	size_t *old_base = p->unit_base;
	p->unit_base = NULL;
	p->node = node;
	p->units = NULL;
	if (units_build(p, old_units, old_base, old_node, err) < 0) {
		/* Keep serving what we had, with its health and its events. */
		free(p->units);
		free(p->unit_base);
		p->units = old_units;
		p->unit_base = old_base;
		p->node = old_node;
		gpu_node_free(node);
		dp_resources_free(&res);
		events_start(p);
		return -1;
	}
	free(old_units);
	free(old_base);
	gpu_node_free(old_node);
	dp_resources_free(&p->res);
	p->res = res;
	read_mig_minors(p);

	for (size_t i = 0; i < p->nsrvs; i++) {
		struct srv *s = p->srvs[i];
		size_t k;
		if (s->removed)
			continue;
		for (k = 0; k < p->res.n; k++)
			if (strcmp(p->res.v[k].name, s->name) == 0)
				break;
		if (k == p->res.n) {
			log_info(COMP, "resource gone; no longer served", "resource", s->name, NULL);
			srv_stop(s);
			if (s->retry)
				loop_cancel_timer(p->loop, s->retry);
			s->retry = NULL;
			s->removed = true;
			continue;
		}
		s->res = k;
		broadcast(s, true);
	}
	for (size_t k = 0; k < p->res.n; k++) {
		if (srv_by_name(p, p->res.v[k].name))
			continue;
		struct srv **nv = realloc(p->srvs, (p->nsrvs + 1) * sizeof(*nv));
		struct srv *s = calloc(1, sizeof(*s));
		if (!nv || !s) {
			free(s);
			if (nv)
				p->srvs = nv;
			return error_errno(err, ENOMEM, "servers");
		}
		p->srvs = nv;
		s->p = p;
		s->id = p->nsrvs;
		s->res = k;
		snprintf(s->name, sizeof(s->name), "%s", p->res.v[k].name);
		p->srvs[p->nsrvs++] = s;
		srv_ensure(s, false, "start");
	}
	if (p->res.n == 0)
		log_warn(COMP, "no devices found to advertise; waiting (SIGHUP rescans)", NULL);
	for (size_t g = 0; p->cfg.mig_strategy != DP_MIG_NONE && g < p->node->ngpus; g++)
		if (p->node->gpus[g].mig_enabled && p->node->gpus[g].nmig == 0) {
			char idx[16];
			snprintf(idx, sizeof(idx), "%zu", g);
			/* #767: such a GPU is neither a whole GPU nor MIG devices. */
			log_warn(COMP, "GPU has MIG enabled but no MIG devices: it offers nothing "
				       "until a MIG layout is applied", "gpu", idx, NULL);
		}
	for (size_t k = 0; k < p->res.n; k++) {
		char n[32];
		snprintf(n, sizeof(n), "%zu", p->res.v[k].ndevs);
		log_info(COMP, "advertising", "resource", p->res.v[k].resource, "devices", n,
			 "socket", p->res.v[k].socket_name, NULL);
	}
	events_start(p);
	probe_all(p, "GPU does not answer");
	return 0;
}

static void on_nvml_retry(struct loop *l, struct loop_timer *t, void *ud)
{
	struct dp_plugin *p = ud;
	struct gpuop_error e = {0};
	(void)l;

	if (devices_sync(p, &e) < 0)
		return; /* logged once when it first failed; keep trying */
	log_info(COMP, "NVML available", "driver", p->node->driver_version, NULL);
	loop_cancel_timer(p->loop, t);
	p->nvml_retry = NULL;
}

static void reload(struct dp_plugin *p)
{
	struct dp_config c;
	struct gpuop_error e = {0};

	if (dp_config_load(&c, p->o->config_file, p->o->env, p->o->ovr, p->o->novr, &e) < 0) {
		log_error(COMP, "config reload failed; keeping the running configuration", "error",
			  e.msg, NULL);
		return;
	}
	if (strcmp(c.plugin_dir, p->cfg.plugin_dir) != 0) {
		log_warn(COMP, "plugin dir changes need a restart; keeping the old one", "dir",
			 p->cfg.plugin_dir, NULL);
		snprintf(c.plugin_dir, sizeof(c.plugin_dir), "%s", p->cfg.plugin_dir);
	}
	struct dp_config old = p->cfg;
	p->cfg = c;
	if (devices_sync(p, &e) < 0) {
		p->cfg = old;
		log_error(COMP, "reload failed; keeping the running configuration", "error", e.msg,
			  NULL);
		return;
	}
	log_info(COMP, "configuration reloaded", "file",
		 c.config_file[0] ? c.config_file : "(none)", NULL);
}

static void on_signal(struct loop *l, int fd, uint32_t events, void *ud)
{
	struct dp_plugin *p = ud;
	struct signalfd_siginfo si;
	(void)events;

	while (read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		if (si.ssi_signo == SIGHUP) {
			log_info(COMP, "SIGHUP: reloading the configuration", NULL);
			reload(p);
		} else {
			log_info(COMP, "stopping", NULL);
			loop_stop(l);
		}
	}
}

static void plugin_free(struct dp_plugin *p)
{
	events_stop(p);
	/* Shut every server down first: their sockets go, kubelet sees the
	 * streams end and marks the devices unhealthy until we are back, and a
	 * Register in flight fails at once (kubelet cannot dial us back)
	 * instead of holding the join below for its whole timeout. */
	for (size_t i = 0; i < p->nsrvs; i++)
		srv_stop(p->srvs[i]);
	if (p->reg_running) {
		pthread_mutex_lock(&p->reg_mu);
		p->reg_stop = true;
		pthread_cond_signal(&p->reg_cv);
		pthread_mutex_unlock(&p->reg_mu);
		pthread_join(p->reg_thread, NULL);
	}
	for (size_t i = 0; i < p->njobs; i++)
		free(p->jobs[i].req);
	free(p->jobs);
	for (size_t i = 0; i < p->nsrvs; i++) {
		free(p->srvs[i]->streams);
		free(p->srvs[i]);
	}
	free(p->srvs);
	if (p->inotify_fd >= 0)
		close(p->inotify_fd);
	if (p->signal_fd >= 0)
		close(p->signal_fd);
	if (p->loop)
		loop_free(p->loop);
	dp_resources_free(&p->res);
	free(p->units);
	free(p->unit_base);
	free(p->mig_minors);
	gpu_node_free(p->node);
	if (p->nvml)
		nvml_close(p->nvml);
	pthread_mutex_destroy(&p->q.mu);
	pthread_mutex_destroy(&p->reg_mu);
	pthread_cond_destroy(&p->reg_cv);
}

int dp_run(const struct dp_run_opts *o, struct gpuop_error *err)
{
	/* On the heap: the event queue makes this struct large, and calloc'd
	 * pages cost memory only once the queue reaches them. */
	struct dp_plugin *p = calloc(1, sizeof(*p));
	sigset_t mask;
	int rc = -1;

	if (!p)
		return error_errno(err, ENOMEM, "starting the device plugin");
	p->o = o;
	p->inotify_fd = p->inotify_wd = p->signal_fd = -1;

	pthread_mutex_init(&p->q.mu, NULL);
	pthread_mutex_init(&p->reg_mu, NULL);
	pthread_cond_init(&p->reg_cv, NULL);
	if (dp_config_load(&p->cfg, o->config_file, o->env, o->ovr, o->novr, err) < 0)
		goto out;
	snprintf(p->kubelet_sock, sizeof(p->kubelet_sock), "%s/%s", p->cfg.plugin_dir,
		 DP_KUBELET_SOCKET);

	if (!(p->loop = loop_new(err)))
		goto out;
	if (o->embedded) {
		/* The host process owns the signals; it stops us through stop_fd. */
		if (loop_add_fd(p->loop, o->stop_fd, LOOP_IN, on_stop_fd, p, err) < 0)
			goto out;
	} else {
		/* Signals arrive through a signalfd on the loop; blocked before
		 * any thread starts so the workers inherit the mask. */
		sigemptyset(&mask);
		sigaddset(&mask, SIGTERM);
		sigaddset(&mask, SIGINT);
		sigaddset(&mask, SIGHUP);
		sigaddset(&mask, SIGPIPE);
		pthread_sigmask(SIG_BLOCK, &mask, NULL);
		sigdelset(&mask, SIGPIPE);
		if ((p->signal_fd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
			error_errno(err, errno, "signalfd");
			goto out;
		}
		if (loop_add_fd(p->loop, p->signal_fd, LOOP_IN, on_signal, p, err) < 0)
			goto out;
	}
	if (loop_set_wake(p->loop, on_wake, p, err) < 0)
		goto out;
	if (mkdir_p(p->cfg.plugin_dir, 0755, err) < 0) {
		error_wrap(err, "plugin dir");
		goto out;
	}
	if ((p->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0) {
		error_errno(err, errno, "inotify");
		goto out;
	}
	watch_dir(p);
	if (p->inotify_wd < 0) {
		error_errno(err, errno, "watching %s", p->cfg.plugin_dir);
		goto out;
	}
	if (loop_add_fd(p->loop, p->inotify_fd, LOOP_IN, on_inotify, p, err) < 0)
		goto out;
	if (pthread_create(&p->reg_thread, NULL, registrar, p) != 0) {
		error_errno(err, errno, "registration thread");
		goto out;
	}
	p->reg_running = true;

	if (devices_sync(p, err) < 0) {
		if (p->cfg.fail_on_init_error || err->domain != GPUOP_ERR_NVML)
			goto out;
		/* failOnInitError=false: wait for the driver (#414: the plugin
		 * can start before the driver after a reboot). */
		log_error(COMP, "NVML unavailable; retrying until the driver is ready", "error",
			  err->msg, NULL);
		error_clear(err);
		p->nvml_retry = loop_add_timer(p->loop, NVML_RETRY_MS, NVML_RETRY_MS, on_nvml_retry,
					      p);
	}
	p->probe = loop_add_timer(p->loop, PROBE_MS, PROBE_MS, on_probe, p);
	status_update(p);
	log_info(COMP, "running", "plugin_dir", p->cfg.plugin_dir, "config",
		 p->cfg.config_file[0] ? p->cfg.config_file : "(none)", NULL);
	rc = loop_run(p->loop, err);
out:
	/* The signals stay blocked: a second SIGTERM during cleanup must not
	 * kill the process before its sockets are gone. */
	plugin_free(p);
	free(p);
	return rc;
}
