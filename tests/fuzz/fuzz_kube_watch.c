/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the watch-stream decoder.  The first byte picks a
 * chunk size, so the same stream is cut at different places; the line cap
 * is small so the cap is reached.  Besides "no crash, no leak, no UB" it
 * checks the decoder's contract: every event it hands out has an object,
 * a refusal is a parse error that names a byte offset inside the input,
 * and the same input fed whole gives the same events and outcome.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kube.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct tally {
	unsigned events;
	unsigned long long sum; /* of types and resourceVersion lengths */
};

static int on_event(const struct kube_watch_event *ev, void *ud, struct gpuop_error *err)
{
	(void)err;
	struct tally *t = ud;
	if (!json_is_object(ev->object) || !ev->resource_version || ev->type > KUBE_ERROR)
		abort();
	t->events++;
	t->sum += (unsigned)ev->type * 1000003ULL + strlen(ev->resource_version);
	return 0;
}

static int run(const char *p, size_t n, size_t chunk, struct tally *t, struct gpuop_error *err)
{
	struct kube_watch_decoder *d = kube_watch_decoder_new(512);
	if (!d)
		abort();
	int rc = 0;
	for (size_t off = 0; off < n && rc == 0; off += chunk)
		rc = kube_watch_decoder_feed(d, p + off, n - off < chunk ? n - off : chunk,
					     on_event, t, err);
	kube_watch_decoder_free(d);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t chunk = (size_t)data[0] % 64 + 1;
	const char *p = (const char *)data + 1;
	size_t n = size - 1;

	struct tally a = {0}, b = {0};
	struct gpuop_error ea = {0}, eb = {0};
	int ra = run(p, n, chunk, &a, &ea);
	int rb = run(p, n, n ? n : 1, &b, &eb);
	if (ra != rb || a.events != b.events || a.sum != b.sum)
		abort();
	if (ra < 0) {
		unsigned long long off;
		if (ea.domain != GPUOP_ERR_PARSE ||
		    sscanf(ea.msg, "watch stream: byte %llu:", &off) != 1 || off > n ||
		    strcmp(ea.msg, eb.msg) != 0)
			abort();
	}
	return 0;
}
