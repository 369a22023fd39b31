/* SPDX-License-Identifier: Apache-2.0 */
/* Running the doctor's table and presenting what it found (doctor.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "doctor/doctor.h"

static const char *const status_names[] = {"ok", "warn", "FAIL", "not checked"};

/* How every DOC_SKIP finding starts (doc_set callers and doctor_run). */
#define SKIP_PREFIX "not checked: "

const char *doc_status_name(enum doc_status s)
{
	return (unsigned)s < sizeof(status_names) / sizeof(status_names[0]) ? status_names[s] : "?";
}

int doctor_run(const struct doc_input *in, struct doc_report *rep, struct gpuop_error *err)
{
	memset(rep, 0, sizeof(*rep));
	rep->first_fail = -1;
	rep->rows = calloc(doc_checks_len, sizeof(*rep->rows));
	if (!rep->rows)
		return error_errno(err, ENOMEM, "doctor");
	for (size_t i = 0; i < doc_checks_len; i++) {
		const struct doc_check *c = &doc_checks[i];
		if (c->pod_only && !in->pod_ref[0])
			continue;
		struct doc_row *row = &rep->rows[rep->n++];
		row->check = c;
		/* A layer above a failed one would only echo it.  Pod rows stand
		 * on the cluster, not on this node: they always run. */
		if (rep->first_fail >= 0 && !c->pod_only) {
			doc_set(&row->res, DOC_SKIP, NULL, "not checked: the %s layer below failed",
				rep->rows[rep->first_fail].check->layer);
			continue;
		}
		c->run(in, &row->res);
		if (row->res.status == DOC_FAIL && !row->res.fix[0])
			snprintf(row->res.fix, sizeof(row->res.fix), "%s", c->fix);
		if (row->res.status == DOC_FAIL && rep->first_fail < 0)
			rep->first_fail = (int)(rep->n - 1);
		rep->warnings += row->res.status == DOC_WARN;
	}
	if (in->pod_ref[0] && (!in->api || !in->pod))
		snprintf(rep->pod_unchecked, sizeof(rep->pod_unchecked), "%s",
			 !in->api ? in->api_error : in->pod_error);
	return 0;
}

void doctor_report_free(struct doc_report *rep)
{
	free(rep->rows);
	rep->rows = NULL;
	rep->n = 0;
}

static json_t *row_json(const struct doc_row *row)
{
	json_t *ev = json_array();
	for (size_t i = 0; i < row->res.nevidence; i++)
		json_array_append_new(ev, json_string(row->res.evidence[i]));
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:o}", "layer", row->check->layer, "check",
			      row->check->name, "symptom", row->check->symptom, "status",
			      row->res.status == DOC_SKIP ? "not-checked"
			      : row->res.status == DOC_FAIL ? "fail"
							    : doc_status_name(row->res.status),
			      "finding", row->res.finding, "evidence", ev);
	if (o && (row->res.status == DOC_FAIL || row->res.status == DOC_WARN))
		json_object_set_new(o, "fix", json_string(row->res.fix));
	if (o && row->res.status != DOC_OK && row->res.status != DOC_SKIP)
		json_object_set_new(o, "command", json_string(row->check->command));
	return o;
}

json_t *doctor_report_json(const struct doc_report *rep, const struct doc_input *in)
{
	json_t *rows = json_array();
	for (size_t i = 0; i < rep->n; i++)
		json_array_append_new(rows, row_json(&rep->rows[i]));
	json_t *diag = rep->first_fail >= 0 ? row_json(&rep->rows[rep->first_fail]) : json_null();
	const char *verdict = rep->first_fail >= 0    ? "failed"
			      : rep->pod_unchecked[0] ? "pod-not-checked"
						      : "healthy";
	json_t *o =
		json_pack("{s:s, s:o, s:o}", "verdict", verdict, "diagnosis", diag, "rows", rows);
	if (o && rep->first_fail < 0 && rep->pod_unchecked[0])
		json_object_set_new(o, "pod_not_checked", json_string(rep->pod_unchecked));
	if (o && in->simulated)
		json_object_set_new(o, "simulated", json_string(in->sim_profile));
	if (o && in->pod_ref[0])
		json_object_set_new(o, "pod", json_string(in->pod_ref));
	if (o && in->node_name[0])
		json_object_set_new(o, "node", json_string(in->node_name));
	return o;
}

void doctor_report_text(const struct doc_report *rep, const struct doc_input *in, FILE *out)
{
	if (in->simulated)
		fprintf(out, "Simulated node: %s\n", in->sim_profile);
	fprintf(out, "%-14s %-17s %-12s %s\n", "LAYER", "CHECK", "STATUS", "FINDING");
	for (size_t i = 0; i < rep->n; i++) {
		const struct doc_row *row = &rep->rows[i];
		/* The STATUS column already says "not checked": the finding
		 * column gives only the reason, not the words twice. */
		const char *finding = row->res.finding;
		if (row->res.status == DOC_SKIP && strncmp(finding, SKIP_PREFIX, strlen(SKIP_PREFIX)) == 0)
			finding += strlen(SKIP_PREFIX);
		fprintf(out, "%-14s %-17s %-12s %s\n", row->check->layer, row->check->name,
			doc_status_name(row->res.status), finding);
	}
	fputc('\n', out);
	if (rep->first_fail < 0 && rep->pod_unchecked[0]) {
		/* The pod was what the user asked about: a typo in its name must
		 * not read as "healthy". */
		fprintf(out,
			"Verdict: no layer of this node fails, but the pod was not checked: %s.\n",
			rep->pod_unchecked);
		fprintf(out, "  Fix:      check the namespace and name (kubectl get pods -A | grep "
			     "NAME) "
			     "and that the API server is reachable\n");
		return;
	}
	if (rep->first_fail < 0) {
		size_t skipped = 0;
		for (size_t i = 0; i < rep->n; i++)
			skipped += rep->rows[i].res.status == DOC_SKIP;
		/* Honest about its reach: "healthy" covers what was checked. */
		if (skipped)
			fprintf(out, "Verdict: healthy as far as checked (%zu of %zu checks could not run: "
				     "see \"not checked\" above)%s",
				skipped, rep->n, rep->warnings ? ", with warnings:\n" : ".\n");
		else
			fprintf(out, "Verdict: healthy%s", rep->warnings ? " with warnings:\n" : ".\n");
		for (size_t i = 0; i < rep->n; i++) {
			const struct doc_row *row = &rep->rows[i];
			if (row->res.status != DOC_WARN)
				continue;
			fprintf(out, "  %s/%s: %s\n    fix: %s\n", row->check->layer, row->check->name,
				row->res.finding, row->res.fix);
		}
		return;
	}
	const struct doc_row *d = &rep->rows[rep->first_fail];
	fprintf(out, "Diagnosis: the %s layer fails (%s).\n", d->check->layer, d->check->name);
	fprintf(out, "  Symptom:  %s\n", d->check->symptom);
	fprintf(out, "  Wrong:    %s\n", d->res.finding);
	if (d->res.nevidence) {
		fprintf(out, "  Evidence:\n");
		for (size_t i = 0; i < d->res.nevidence; i++)
			fprintf(out, "    - %s\n", d->res.evidence[i]);
	}
	fprintf(out, "  Fix:      %s\n", d->res.fix);
	fprintf(out, "  Look closer: %s\n", d->check->command);
	/* Pod rows run whatever the node says: list their other failures too. */
	for (size_t i = (size_t)rep->first_fail + 1; i < rep->n; i++) {
		const struct doc_row *row = &rep->rows[i];
		if (row->res.status != DOC_FAIL)
			continue;
		fprintf(out, "\nAlso failing: %s/%s: %s\n", row->check->layer, row->check->name,
			row->res.finding);
		for (size_t j = 0; j < row->res.nevidence; j++)
			fprintf(out, "    - %s\n", row->res.evidence[j]);
		fprintf(out, "  Fix:      %s\n", row->res.fix);
	}
}
