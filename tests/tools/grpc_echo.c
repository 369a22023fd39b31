/* SPDX-License-Identifier: Apache-2.0 */
/*
 * grpc_echo: a small program around src/grpc for tests that need a real
 * process on one end and a real gRPC stack (Python grpcio) on the other.
 *
 *   grpc_echo serve SOCKET
 *       Serve the device-plugin API with two fixed devices until SIGTERM:
 *       GetDevicePluginOptions; ListAndWatch (the list, then after 100 ms
 *       the same list with the second device Unhealthy; stays open);
 *       Allocate (NVIDIA_VISIBLE_DEVICES per container; INVALID_ARGUMENT
 *       naming unknown IDs); GetPreferredAllocation (the first N available);
 *       PreStartContainer (answers after 2 s, for deadline tests).
 *       Prints "listening SOCKET" once it accepts connections.
 *   grpc_echo register SOCKET RESOURCE ENDPOINT [TIMEOUT_MS]
 *       Call /v1beta1.Registration/Register with grpc_unary.  Prints
 *       "status=N message=..." and exits 0 on OK, 1 otherwise.
 *   grpc_echo frames METHOD [DEVICE_ID...]
 *       Write to stdout the bytes a client sends for one unary call (preface,
 *       SETTINGS, HEADERS, DATA), with an AllocateRequest of the given IDs or
 *       an Empty message: seeds for the fuzz_grpc_server corpus.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "grpc/grpc.h"

static const struct {
	const char *id;
	int64_t numa;
} devices[] = {
	{"GPU-0b7a2c5e-1111-2222-3333-444455556666", 0},
	{"GPU-9f3d8e21-aaaa-bbbb-cccc-ddddeeeeffff", 1},
};
#define NDEV (sizeof(devices) / sizeof(devices[0]))

static struct loop *g_loop;
static struct grpc_server *g_server;

static void send_list(struct grpc_call *c, bool second_unhealthy)
{
	V1beta1__Device dev[NDEV];
	V1beta1__Device *pdev[NDEV];
	V1beta1__TopologyInfo topo[NDEV];
	V1beta1__NUMANode node[NDEV];
	V1beta1__NUMANode *pnode[NDEV];
	V1beta1__ListAndWatchResponse r = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;

	for (size_t i = 0; i < NDEV; i++) {
		v1beta1__device__init(&dev[i]);
		v1beta1__topology_info__init(&topo[i]);
		v1beta1__numanode__init(&node[i]);
		node[i].id = devices[i].numa;
		pnode[i] = &node[i];
		topo[i].n_nodes = 1;
		topo[i].nodes = &pnode[i];
		dev[i].id = (char *)devices[i].id;
		dev[i].health = (char *)(second_unhealthy && i == 1 ? "Unhealthy" : "Healthy");
		dev[i].topology = &topo[i];
		pdev[i] = &dev[i];
	}
	r.n_devices = NDEV;
	r.devices = pdev;
	uint8_t out[1024];
	size_t n = v1beta1__list_and_watch_response__get_packed_size(&r);
	if (n > sizeof(out))
		abort();
	v1beta1__list_and_watch_response__pack(&r, out);
	grpc_call_send(c, out, n);
}

static void options(struct grpc_call *c, const uint8_t *msg, size_t len, void *ud)
{
	(void)msg;
	(void)len;
	(void)ud;
	V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
	o.get_preferred_allocation_available = 1;
	uint8_t out[16];
	grpc_call_send(c, out, v1beta1__device_plugin_options__pack(&o, out));
	grpc_call_finish(c, GRPC_STATUS_OK, NULL);
}

/* ListAndWatch: one pending update per stream, cancelled if the stream ends. */
struct watch {
	struct grpc_call *call;
	struct loop_timer *timer;
};

static void watch_update(struct loop *l, struct loop_timer *t, void *ud)
{
	struct watch *w = ud;
	(void)l;
	(void)t;
	w->timer = NULL;
	send_list(w->call, true);
}

static void watch_closed(struct grpc_call *c, void *ud)
{
	struct watch *w = ud;
	(void)c;
	if (w->timer)
		loop_cancel_timer(g_loop, w->timer);
	free(w);
}

static void list_and_watch(struct grpc_call *c, const uint8_t *msg, size_t len, void *ud)
{
	(void)msg;
	(void)len;
	(void)ud;
	struct watch *w = calloc(1, sizeof(*w));
	if (!w) {
		grpc_call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	w->call = c;
	grpc_call_on_close(c, watch_closed, w);
	send_list(c, false);
	w->timer = loop_add_timer(g_loop, 100, 0, watch_update, w);
}

static bool known(const char *id)
{
	for (size_t i = 0; i < NDEV; i++)
		if (strcmp(devices[i].id, id) == 0)
			return true;
	return false;
}

static void allocate(struct grpc_call *c, const uint8_t *msg, size_t len, void *ud)
{
	(void)ud;
	V1beta1__AllocateRequest *req = v1beta1__allocate_request__unpack(NULL, len, msg);
	if (!req) {
		grpc_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "malformed AllocateRequest");
		return;
	}
	size_t n = req->n_container_requests;
	V1beta1__ContainerAllocateResponse *cr = calloc(n ? n : 1, sizeof(*cr));
	V1beta1__ContainerAllocateResponse **pcr = calloc(n ? n : 1, sizeof(*pcr));
	V1beta1__ContainerAllocateResponse__EnvsEntry *env = calloc(n ? n : 1, sizeof(*env));
	V1beta1__ContainerAllocateResponse__EnvsEntry **penv = calloc(n ? n : 1, sizeof(*penv));
	char **vals = calloc(n ? n : 1, sizeof(*vals));
	char bad[512] = "";
	for (size_t i = 0; i < n; i++) {
		V1beta1__ContainerAllocateRequest *q = req->container_requests[i];
		size_t vl = 1;
		for (size_t j = 0; j < q->n_devices_ids; j++)
			vl += strlen(q->devices_ids[j]) + 1;
		vals[i] = calloc(1, vl);
		for (size_t j = 0; j < q->n_devices_ids; j++) {
			if (!known(q->devices_ids[j]) &&
			    strlen(bad) + strlen(q->devices_ids[j]) + 8 < sizeof(bad))
				snprintf(bad + strlen(bad), sizeof(bad) - strlen(bad), "%s\"%s\"",
					 bad[0] ? ", " : "", q->devices_ids[j]);
			if (j)
				strcat(vals[i], ",");
			strcat(vals[i], q->devices_ids[j]);
		}
		v1beta1__container_allocate_response__init(&cr[i]);
		v1beta1__container_allocate_response__envs_entry__init(&env[i]);
		env[i].key = (char *)"NVIDIA_VISIBLE_DEVICES";
		env[i].value = vals[i];
		penv[i] = &env[i];
		cr[i].n_envs = 1;
		cr[i].envs = &penv[i];
		pcr[i] = &cr[i];
	}
	if (bad[0]) {
		char m[700];
		/* Spaces, quotes, a percent sign and non-ASCII: what grpc-message
		 * encoding has to carry intact. */
		snprintf(m, sizeof(m),
			 "unknown device IDs: %s \xe2\x80\x94 100%% of requests must name known "
			 "GPUs",
			 bad);
		grpc_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, m);
	} else {
		V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
		resp.n_container_responses = n;
		resp.container_responses = pcr;
		size_t sz = v1beta1__allocate_response__get_packed_size(&resp);
		uint8_t *out = malloc(sz ? sz : 1);
		v1beta1__allocate_response__pack(&resp, out);
		grpc_call_send(c, out, sz);
		grpc_call_finish(c, GRPC_STATUS_OK, NULL);
		free(out);
	}
	for (size_t i = 0; i < n; i++)
		free(vals[i]);
	free(vals);
	free(cr);
	free(pcr);
	free(env);
	free(penv);
	v1beta1__allocate_request__free_unpacked(req, NULL);
}

static void preferred(struct grpc_call *c, const uint8_t *msg, size_t len, void *ud)
{
	(void)ud;
	V1beta1__PreferredAllocationRequest *req =
		v1beta1__preferred_allocation_request__unpack(NULL, len, msg);
	if (!req) {
		grpc_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT,
				 "malformed PreferredAllocationRequest");
		return;
	}
	size_t n = req->n_container_requests;
	V1beta1__ContainerPreferredAllocationResponse *cr = calloc(n ? n : 1, sizeof(*cr));
	V1beta1__ContainerPreferredAllocationResponse **pcr = calloc(n ? n : 1, sizeof(*pcr));
	for (size_t i = 0; i < n; i++) {
		V1beta1__ContainerPreferredAllocationRequest *q = req->container_requests[i];
		v1beta1__container_preferred_allocation_response__init(&cr[i]);
		size_t want = q->allocation_size > 0 ? (size_t)q->allocation_size : 0;
		cr[i].n_deviceids =
			want < q->n_available_deviceids ? want : q->n_available_deviceids;
		cr[i].deviceids = q->available_deviceids;
		pcr[i] = &cr[i];
	}
	V1beta1__PreferredAllocationResponse resp = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
	resp.n_container_responses = n;
	resp.container_responses = pcr;
	size_t sz = v1beta1__preferred_allocation_response__get_packed_size(&resp);
	uint8_t *out = malloc(sz ? sz : 1);
	v1beta1__preferred_allocation_response__pack(&resp, out);
	grpc_call_send(c, out, sz);
	grpc_call_finish(c, GRPC_STATUS_OK, NULL);
	free(out);
	free(cr);
	free(pcr);
	v1beta1__preferred_allocation_request__free_unpacked(req, NULL);
}

struct late {
	struct grpc_call *call;
	struct loop_timer *timer;
};

static void late_answer(struct loop *l, struct loop_timer *t, void *ud)
{
	struct late *x = ud;
	(void)l;
	(void)t;
	x->timer = NULL;
	grpc_call_send(x->call, NULL, 0); /* an empty PreStartContainerResponse */
	grpc_call_finish(x->call, GRPC_STATUS_OK, NULL);
	free(x);
}

static void late_closed(struct grpc_call *c, void *ud)
{
	struct late *x = ud;
	(void)c;
	if (x->timer)
		loop_cancel_timer(g_loop, x->timer);
	free(x);
}

static void prestart(struct grpc_call *c, const uint8_t *msg, size_t len, void *ud)
{
	(void)msg;
	(void)len;
	(void)ud;
	struct late *x = calloc(1, sizeof(*x));
	if (!x) {
		grpc_call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
		return;
	}
	x->call = c;
	grpc_call_on_close(c, late_closed, x);
	x->timer = loop_add_timer(g_loop, 2000, 0, late_answer, x);
}

static const struct grpc_method methods[] = {
	{"/v1beta1.DevicePlugin/GetDevicePluginOptions", false, options, NULL},
	{"/v1beta1.DevicePlugin/ListAndWatch", true, list_and_watch, NULL},
	{"/v1beta1.DevicePlugin/Allocate", false, allocate, NULL},
	{"/v1beta1.DevicePlugin/GetPreferredAllocation", false, preferred, NULL},
	{"/v1beta1.DevicePlugin/PreStartContainer", false, prestart, NULL},
};

static void on_signal(struct loop *l, int fd, uint32_t events, void *ud)
{
	struct signalfd_siginfo si;
	(void)events;
	(void)ud;
	if (read(fd, &si, sizeof(si)) != (ssize_t)sizeof(si))
		return;
	grpc_server_shutdown(g_server);
	loop_stop(l);
}

static int serve(const char *path)
{
	struct gpuop_error err = {0};
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigprocmask(SIG_BLOCK, &set, NULL);
	int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	g_loop = loop_new(&err);
	if (!g_loop || sfd < 0 || loop_add_fd(g_loop, sfd, LOOP_IN, on_signal, NULL, &err) < 0) {
		fprintf(stderr, "grpc_echo: %s\n", err.msg);
		return 1;
	}
	g_server =
		grpc_server_new(g_loop, methods, sizeof(methods) / sizeof(methods[0]), NULL, &err);
	if (!g_server || grpc_server_listen(g_server, path, 0, &err) < 0) {
		fprintf(stderr, "grpc_echo: %s\n", err.msg);
		return 1;
	}
	printf("listening %s\n", path);
	fflush(stdout);
	int rc = loop_run(g_loop, &err) < 0 ? 1 : 0;
	grpc_server_free(g_server);
	loop_free(g_loop);
	close(sfd);
	return rc;
}

static int do_register(const char *sock, const char *resource, const char *endpoint,
		       const char *tmo)
{
	struct gpuop_error err = {0};
	struct grpc_result r;
	V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
	V1beta1__DevicePluginOptions opt = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
	char *end;
	long ms = 5000;

	if (tmo) {
		errno = 0;
		ms = strtol(tmo, &end, 10);
		if (errno || *end || ms <= 0 || ms > 600000) {
			fprintf(stderr, "grpc_echo: TIMEOUT_MS: expected 1..600000, got %s\n", tmo);
			return 2;
		}
	}
	opt.get_preferred_allocation_available = 1;
	req.version = (char *)"v1beta1";
	req.endpoint = (char *)endpoint;
	req.resource_name = (char *)resource;
	req.options = &opt;
	uint8_t buf[1024];
	if (v1beta1__register_request__get_packed_size(&req) > sizeof(buf))
		return 2;
	size_t n = v1beta1__register_request__pack(&req, buf);
	struct buf resp;
	buf_init(&resp, 1 << 20);
	int rc = grpc_unary(sock, "/v1beta1.Registration/Register", buf, n, (int)ms, 0, &resp, &r,
			    &err);
	buf_free(&resp);
	printf("status=%d message=%s\n", r.status, r.message);
	if (rc < 0)
		fprintf(stderr, "grpc_echo: %s\n", err.msg);
	return rc < 0 ? 1 : 0;
}

static ssize_t frames_read(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len,
			   uint32_t *flags, nghttp2_data_source *src, void *ud)
{
	struct buf *b = src->ptr;
	(void)s;
	(void)id;
	(void)ud;
	if (len < b->len)
		abort();
	memcpy(buf, b->data, b->len);
	*flags |= NGHTTP2_DATA_FLAG_EOF;
	return (ssize_t)b->len;
}

static int frames(const char *method, int nids, char **ids)
{
	struct gpuop_error err = {0};
	struct buf body;
	uint8_t msg[4096];
	size_t mlen = 0;

	if (nids > 0) {
		V1beta1__ContainerAllocateRequest cq = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
		V1beta1__ContainerAllocateRequest *pcq = &cq;
		V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
		cq.n_devices_ids = (size_t)nids;
		cq.devices_ids = ids;
		req.n_container_requests = 1;
		req.container_requests = &pcq;
		if (v1beta1__allocate_request__get_packed_size(&req) > sizeof(msg))
			return 2;
		mlen = v1beta1__allocate_request__pack(&req, msg);
	}
	buf_init(&body, sizeof(msg) + 5);
	uint8_t prefix[5] = {0, (uint8_t)(mlen >> 24), (uint8_t)(mlen >> 16), (uint8_t)(mlen >> 8),
			     (uint8_t)mlen};
	if (buf_append(&body, prefix, 5, &err) < 0 || buf_append(&body, msg, mlen, &err) < 0)
		return 1;

	nghttp2_session_callbacks *cb;
	nghttp2_session *s;
	nghttp2_session_callbacks_new(&cb);
	nghttp2_session_client_new(&s, cb, NULL);
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP2_NV_FLAG_NONE}
	nghttp2_nv nva[] = {NV(":method", "POST"),
			    NV(":scheme", "http"),
			    NV(":path", method),
			    NV(":authority", "localhost"),
			    NV("content-type", "application/grpc"),
			    NV("te", "trailers"),
			    NV("grpc-timeout", "1S")};
#undef NV
	nghttp2_data_provider prd = {.source.ptr = &body, .read_callback = frames_read};
	nghttp2_submit_settings(s, NGHTTP2_FLAG_NONE, NULL, 0);
	nghttp2_submit_request(s, NULL, nva, sizeof(nva) / sizeof(nva[0]), &prd, NULL);
	const uint8_t *data;
	ssize_t n;
	while ((n = nghttp2_session_mem_send(s, &data)) > 0)
		fwrite(data, 1, (size_t)n, stdout);
	nghttp2_session_del(s);
	nghttp2_session_callbacks_del(cb);
	buf_free(&body);
	return n < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "serve") == 0)
		return serve(argv[2]);
	if ((argc == 5 || argc == 6) && strcmp(argv[1], "register") == 0)
		return do_register(argv[2], argv[3], argv[4], argc == 6 ? argv[5] : NULL);
	if (argc >= 3 && strcmp(argv[1], "frames") == 0)
		return frames(argv[2], argc - 3, argv + 3);
	fprintf(stderr, "usage: grpc_echo serve SOCKET\n"
			"       grpc_echo register SOCKET RESOURCE ENDPOINT [TIMEOUT_MS]\n"
			"       grpc_echo frames METHOD [DEVICE_ID...] > seed\n");
	return 2;
}
