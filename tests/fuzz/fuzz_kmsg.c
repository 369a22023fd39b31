/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the kernel-log scanner and Xid line parser, and
 * for must-gather's text redaction (both read arbitrary log bytes).
 * Contract: a parsed Xid is in range with NUL-terminated, control-free
 * strings; the scan's counts are consistent; redaction never grows a
 * value without bound and never leaves a PEM header it was given.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "doctor/gather.h"
#include "doctor/kmsg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data;
	struct kmsg_xid x;
	if (kmsg_parse_xid(text, size, &x) == 1) {
		if (x.xid > KMSG_XID_MAX || memchr(x.pci, 0, sizeof(x.pci)) == NULL ||
		    memchr(x.detail, 0, sizeof(x.detail)) == NULL)
			abort();
		for (const char *p = x.detail; *p; p++)
			if ((unsigned char)*p < 0x20)
				abort();
	}
	struct kmsg_scan s;
	kmsg_scan_text(text, size, &s);
	if (s.xid_total > s.nvrm_lines || s.nvrm_lines > s.lines || s.nkept > KMSG_KEEP)
		abort();

	struct buf out;
	struct gpuop_error err;
	/* must-gather's bound: each redaction turns at least one byte into
	 * the mark, so this size always suffices */
	buf_init(&out, size * (sizeof(GATHER_REDACTED) + 1) + 4096);
	int n = gather_redact_text(text, size, &out, &err);
	if (n < 0)
		abort();
	if (memmem(text, size, "-----BEGIN ", 11) && out.data &&
	    memmem(out.data, out.len, "-----BEGIN ", 11))
		abort();
	buf_free(&out);

	/* The same bytes as an API document (JSON strings that hold JSON are
	 * redacted as JSON, recursively). */
	json_t *doc = json_loadb(text, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	if (doc) {
		gather_redact_json(doc);
		char *dump = json_dumps(doc, JSON_ENCODE_ANY | JSON_COMPACT);
		if (!dump)
			abort();
		free(dump);
		json_decref(doc);
	}
	return 0;
}
