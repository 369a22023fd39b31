/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the exporter's request path: what a request's
 * method, URL and Accept-Encoding turn into (route, status, gzip), the
 * /health answer, and the --listen parser.  libmicrohttpd parses the wire
 * format itself; everything it hands to our handler, and every decision
 * taken on it, is here.
 *
 * Input: "METHOD\nURL\nACCEPT-ENCODING\nLISTEN" (missing parts are NULL);
 * the first 8 bytes also seed the /health clock values.  Besides "no
 * crash, no UB" it checks the contract: 405 exactly for other methods,
 * gzip only for /metrics and only when the header accepts it, health is
 * 200 or 503 with one '\n'-terminated line.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exporter/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Split the input at '\n' into up to four NUL-terminated parts. */
static size_t split(char *buf, char **parts, size_t max)
{
	size_t n = 0;
	char *p = buf;

	while (n < max) {
		parts[n++] = p;
		char *nl = strchr(p, '\n');
		if (!nl)
			break;
		*nl = '\0';
		p = nl + 1;
	}
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 64 * 1024)
		return 0;
	char *buf = malloc(size + 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0'; /* MHD hands us NUL-terminated strings; an embedded NUL ends one */

	char *parts[4] = {NULL, NULL, NULL, NULL};
	size_t n = split(buf, parts, 4);
	const char *method = parts[0], *url = n > 1 ? parts[1] : NULL;
	const char *ae = n > 2 ? parts[2] : NULL, *listen = n > 3 ? parts[3] : NULL;

	struct exp_http_decision d;
	exp_http_decide(method, url, ae, &d);
	bool known = method && (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0);
	if (known != (d.status != 405) || (d.status == 405) != (d.route == EXP_ROUTE_NONE))
		abort();
	if (d.head && (!method || strcmp(method, "HEAD") != 0))
		abort();
	if (d.gzip && (d.route != EXP_ROUTE_METRICS || !exp_http_accepts_gzip(ae)))
		abort();
	if (d.route == EXP_ROUTE_METRICS &&
	    (strncmp(url, "/metrics", 8) != 0 || (url[8] != '\0' && url[8] != '?')))
		abort();
	if (d.status == 200 && d.route != EXP_ROUTE_METRICS && d.route != EXP_ROUTE_HEALTH &&
	    d.route != EXP_ROUTE_INDEX)
		abort();

	uint64_t v[3] = {0, 0, 0};
	for (size_t i = 0; i < size && i < 24; i++)
		v[i / 8] = (v[i / 8] << 8) | data[i];
	char text[256];
	unsigned int st = exp_http_health(v[0], v[1], v[2] % (7ULL * 24 * 3600 * 1000), ae, text,
					  sizeof(text));
	size_t tl = strnlen(text, sizeof(text));
	if ((st != 200 && st != 503) || tl == sizeof(text) || tl == 0 ||
	    (tl < sizeof(text) - 1 && text[tl - 1] != '\n') || (st == 200) != (strcmp(text, "ok\n") == 0))
		abort();

	if (listen) {
		struct exp_listen l;
		struct gpuop_error err;
		if (exp_listen_parse(listen, &l, &err) == 0) {
			if (l.port > 65535 || strlen(l.host) >= sizeof(l.host) || strchr(l.host, ']'))
				abort();
		} else if (err.domain != GPUOP_ERR_USAGE) {
			abort();
		}
	}
	free(buf);
	return 0;
}
