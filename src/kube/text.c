/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GET of a body that is not a JSON object: pods/log answers text/plain.
 * The path is the caller's (query string included), so limitBytes and
 * tailLines bound what the server sends; out's cap bounds what we keep.
 */
#include <string.h>

#include "kube/internal.h"
#include "kube/kube.h"

int kube_get_text(struct kube_client *c, const char *path, struct buf *out, struct gpuop_error *err)
{
	struct kube_response r = {0};
	int rc = 0;

	/* What an error names: the path without its query string. */
	char what[512];
	size_t n = strcspn(path, "?");
	snprintf(what, sizeof(what), "%.*s", (int)(n < sizeof(what) ? n : sizeof(what) - 1), path);

	if (kube_request(c, "GET", path, NULL, NULL, 0, &r, err) < 0) {
		rc = error_wrap(err, "get %s", what);
	} else if (r.status < 200 || r.status >= 300) {
		rc = kube_status_error(err, "get", what, r.status, r.body.data, r.body.len);
		if (r.status == 401)
			error_wrap(err, "API server %s", kube_client_config(c)->server);
	} else if (buf_append(out, r.body.data ? r.body.data : "", r.body.len, err) < 0) {
		rc = error_wrap(err, "get %s", what);
	}
	kube_response_free(&r);
	return rc < 0 ? -1 : 0;
}
