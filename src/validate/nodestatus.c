/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The layers' verdict on the Node object: the condition
 * GPUInfrastructureReady, and the startup taint gpuop.io/gpu-not-ready
 * taken away once every layer is ready.  Nodes can join a cluster with the
 * taint (kubelet --register-with-taints) so no GPU pod lands on them before
 * the stack below it works; NVIDIA's stack has no such gate.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "base/cleanup.h"
#include "kube/kube.h"
#include "validate/internal.h"

static void rfc3339_now(char *buf, size_t len)
{
	time_t t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* The condition's current status on the node ("True", "False", ...), or "". */
static const char *current_status(json_t *node)
{
	json_t *conds = json_object_get(json_object_get(node, "status"), "conditions");
	size_t i;
	json_t *c;

	json_array_foreach(conds, i, c)
	{
		const char *type = json_string_value(json_object_get(c, "type"));
		if (type && strcmp(type, VALIDATE_CONDITION_TYPE) == 0) {
			const char *st = json_string_value(json_object_get(c, "status"));
			return st ? st : "";
		}
	}
	return "";
}

static int drop_taint(json_t *obj, void *ud, struct gpuop_error *err)
{
	(void)ud;
	(void)err;
	json_t *spec = json_object_get(obj, "spec");
	json_t *taints = json_object_get(spec, "taints");
	bool changed = false;

	if (!json_is_array(taints))
		return 1;
	for (size_t i = json_array_size(taints); i-- > 0;) {
		json_t *t = json_array_get(taints, i);
		const char *key = json_string_value(json_object_get(t, "key"));
		const char *effect = json_string_value(json_object_get(t, "effect"));
		if (key && strcmp(key, VALIDATE_TAINT_KEY) == 0 && effect &&
		    strcmp(effect, VALIDATE_TAINT_EFFECT) == 0) {
			json_array_remove(taints, i);
			changed = true;
		}
	}
	return changed ? 0 : 1;
}

int validate_node_status(struct kube_client *c, const char *node_name,
			 const struct validate_result res[VALIDATE_NLAYERS], struct gpuop_error *err)
{
	_cleanup_json_ json_t *node = NULL;
	_cleanup_json_ json_t *patch = NULL;
	const struct validate_result *low = NULL;
	char now[32], message[1024 + 512 + 32];

	for (size_t i = 0; i < VALIDATE_NLAYERS && !low; i++)
		if (!validate_state_ready(res[i].state))
			low = &res[i];
	if (kube_get(c, &KUBE_NODES, NULL, node_name, &node, err) < 0)
		return error_wrap(err, "node condition %s", VALIDATE_CONDITION_TYPE);

	const char *status = low ? "False" : "True";
	const char *reason = low ? validate_layer_reason(low->layer) : "AllLayersReady";
	if (low)
		snprintf(message, sizeof(message), "%s: %s%s%s", validate_layer_name(low->layer),
			 low->detail, low->fix[0] ? ". Fix: " : "", low->fix);
	else
		snprintf(message, sizeof(message), "driver, toolkit, cuda and plugin validated");
	rfc3339_now(now, sizeof(now));

	json_t *cond = json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", VALIDATE_CONDITION_TYPE,
				 "status", status, "reason", reason, "message", message,
				 "lastHeartbeatTime", now);
	if (!cond)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "building the node condition");
	/* Kubernetes' convention: the transition time moves only when the
	 * status does, so `kubectl describe` tells how long it has been so.
	 * Left out, a strategic merge keeps the one on the node. */
	if (strcmp(current_status(node), status) != 0)
		json_object_set_new(cond, "lastTransitionTime", json_string(now));
	/* Strategic merge: conditions merge by "type", the node's other
	 * conditions (kubelet's Ready, ...) are untouched. */
	patch = json_pack("{s:{s:[o]}}", "status", "conditions", cond);
	if (!patch)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "building the node condition patch");
	if (kube_patch(c, &KUBE_NODES, NULL, node_name, KUBE_PATCH_STRATEGIC, patch, "status", NULL,
		       err) < 0)
		return error_wrap(err, "setting condition %s on node %s", VALIDATE_CONDITION_TYPE,
				  node_name);
	if (low)
		return 0;
	if (kube_update_retry(c, &KUBE_NODES, NULL, node_name, NULL, drop_taint, NULL, NULL, err) < 0)
		return error_wrap(err, "removing taint %s:%s from node %s", VALIDATE_TAINT_KEY,
				  VALIDATE_TAINT_EFFECT, node_name);
	return 0;
}
