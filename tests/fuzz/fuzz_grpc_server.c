/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the server side of src/grpc: the input is what a
 * client sends on a connection (the HTTP/2 client preface is prepended when
 * the input lacks it, so the fuzzer spends its time on frames).  It runs
 * through a memory-driven server connection, the same code a socket
 * connection runs, into handlers that decode the request with the
 * generated protobuf-c code and answer, as the device plugin does.  Then
 * the server shuts down (GOAWAY path) and is freed.
 *
 * Checks: no crash, leak or UB; the server always writes its SETTINGS
 * first; output stays within the sink's cap; the connection count returns
 * to zero.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "deviceplugin/v1beta1/api.pb-c.h"
#include "grpc/grpc.h"
#include "grpc/grpc_mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void options(struct grpc_call *c, const uint8_t *msg, size_t len, void *ud)
{
	(void)ud;
	V1beta1__Empty *e = v1beta1__empty__unpack(NULL, len, msg);
	if (!e) {
		grpc_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, "expected Empty");
		return;
	}
	v1beta1__empty__free_unpacked(e, NULL);
	V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
	uint8_t out[16];
	o.get_preferred_allocation_available = 1;
	grpc_call_send(c, out, v1beta1__device_plugin_options__pack(&o, out));
	grpc_call_finish(c, GRPC_STATUS_OK, NULL);
}

/* Echo each container's IDs back as an env var: exercises repeated strings
 * on both the decode and the encode side. */
static void allocate(struct grpc_call *c, const uint8_t *msg, size_t len, void *ud)
{
	(void)ud;
	V1beta1__AllocateRequest *req = v1beta1__allocate_request__unpack(NULL, len, msg);
	if (!req) {
		grpc_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT,
				 "malformed AllocateRequest \xe2\x9c\x97 100%");
		return;
	}
	V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
	size_t n = req->n_container_requests > 64 ? 64 : req->n_container_requests;
	V1beta1__ContainerAllocateResponse cr[64];
	V1beta1__ContainerAllocateResponse *pcr[64];
	V1beta1__CDIDevice cdi[64];
	V1beta1__CDIDevice *pcdi[64];
	for (size_t i = 0; i < n; i++) {
		v1beta1__container_allocate_response__init(&cr[i]);
		v1beta1__cdidevice__init(&cdi[i]);
		V1beta1__ContainerAllocateRequest *q = req->container_requests[i];
		cdi[i].name = q->n_devices_ids ? q->devices_ids[0] : (char *)"";
		pcdi[i] = &cdi[i];
		cr[i].n_cdi_devices = 1;
		cr[i].cdi_devices = &pcdi[i];
		pcr[i] = &cr[i];
	}
	resp.n_container_responses = n;
	resp.container_responses = pcr;
	size_t sz = v1beta1__allocate_response__get_packed_size(&resp);
	uint8_t *out = malloc(sz ? sz : 1);
	if (out) {
		v1beta1__allocate_response__pack(&resp, out);
		if (grpc_call_send(c, out, sz) == 0)
			grpc_call_finish(c, GRPC_STATUS_OK, NULL);
		else
			grpc_call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, "response too large");
		free(out);
	} else {
		grpc_call_finish(c, GRPC_STATUS_RESOURCE_EXHAUSTED, NULL);
	}
	v1beta1__allocate_request__free_unpacked(req, NULL);
}

/* A watch: two lists, then the stream stays open until the peer or the
 * shutdown ends it. */
static void list_and_watch(struct grpc_call *c, const uint8_t *msg, size_t len, void *ud)
{
	(void)msg;
	(void)len;
	(void)ud;
	V1beta1__Device d = V1BETA1__DEVICE__INIT;
	V1beta1__Device *pd = &d;
	V1beta1__ListAndWatchResponse r = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
	d.id = (char *)"GPU-0";
	d.health = (char *)"Healthy";
	r.n_devices = 1;
	r.devices = &pd;
	uint8_t out[64];
	size_t n = v1beta1__list_and_watch_response__pack(&r, out);
	grpc_call_send(c, out, n);
	grpc_call_send(c, out, n);
}

static void preferred(struct grpc_call *c, const uint8_t *msg, size_t len, void *ud)
{
	(void)ud;
	V1beta1__PreferredAllocationRequest *req =
		v1beta1__preferred_allocation_request__unpack(NULL, len, msg);
	if (!req) {
		grpc_call_finish(c, GRPC_STATUS_INVALID_ARGUMENT, NULL);
		return;
	}
	v1beta1__preferred_allocation_request__free_unpacked(req, NULL);
	grpc_call_send(c, NULL, 0);
	grpc_call_finish(c, GRPC_STATUS_OK, NULL);
}

static const struct grpc_method methods[] = {
	{"/v1beta1.DevicePlugin/GetDevicePluginOptions", false, options, NULL},
	{"/v1beta1.DevicePlugin/Allocate", false, allocate, NULL},
	{"/v1beta1.DevicePlugin/ListAndWatch", true, list_and_watch, NULL},
	{"/v1beta1.DevicePlugin/GetPreferredAllocation", false, preferred, NULL},
};

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct gpuop_error err;
	struct buf sink;
	/* Small caps so size limits are reachable by the fuzzer. */
	struct grpc_server_opts opts = {.max_message = 4096, .max_streams = 8, .max_conns = 1};

	struct loop *l = loop_new(&err);
	if (!l)
		abort();
	struct grpc_server *s =
		grpc_server_new(l, methods, sizeof(methods) / sizeof(methods[0]), &opts, &err);
	if (!s)
		abort();
	buf_init(&sink, 256 * 1024);
	struct grpc_conn *c = grpc_server_attach_memory(s, &sink, &err);
	if (!c)
		abort();
	/* A server frame header is 9 bytes; its first frame is SETTINGS (4). */
	if (sink.len < 9 || (uint8_t)sink.data[3] != 4)
		abort();

	const size_t plen = sizeof(preface) - 1;
	int rc = 0;
	if (size < plen || memcmp(data, preface, plen) != 0)
		rc = grpc_conn_feed(c, (const uint8_t *)preface, plen);
	/* Two reads, split where the first byte says: frames that straddle
	 * reads are how real sockets deliver them. */
	size_t cut = size ? (size_t)data[0] * size / 256 : 0;
	if (rc == 0)
		rc = grpc_conn_feed(c, data, cut);
	if (rc == 0)
		rc = grpc_conn_feed(c, data + cut, size - cut);
	if (rc < 0 && grpc_server_connections(s) != 0)
		abort();

	grpc_server_shutdown(s);
	if (grpc_server_connections(s) != 0)
		abort();
	if (sink.len > sink.max)
		abort();
	grpc_server_free(s);
	loop_free(l);
	buf_free(&sink);
	return 0;
}
