/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for kube_config_parse.  Besides "no crash, no leak, no
 * UB" it checks the contract: an accepted kubeconfig names an http(s)
 * server without a trailing slash and resolves relative paths under the
 * base directory; a refused one names the file and leaves nothing to free.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kube.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_path(const char *p)
{
	if (p[0] && p[0] != '/')
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct kube_config cfg;
	struct gpuop_error err;

	error_clear(&err);
	/* The first byte picks --context or not, so both paths get fuzzed. */
	const char *context = size > 0 && (data[0] & 1) ? "ctx" : NULL;
	if (kube_config_parse(&cfg, (const char *)data, size, "fuzz.yaml", "/base", context, &err) == 0) {
		size_t n = strlen(cfg.server);
		if (!n || cfg.server[n - 1] == '/' || strncmp(cfg.server, "http", 4) != 0)
			abort();
		check_path(cfg.token_file);
		check_path(cfg.ca_file);
		check_path(cfg.cert_file);
		check_path(cfg.key_file);
		if (!cfg.ns[0] || !cfg.context[0])
			abort();
		kube_config_free(&cfg);
	} else {
		if (!strstr(err.msg, "fuzz.yaml"))
			abort();
		if (cfg.token || cfg.ca_pem || cfg.cert_pem || cfg.key_pem)
			abort();
	}
	return 0;
}
