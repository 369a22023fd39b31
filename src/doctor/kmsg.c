/* SPDX-License-Identifier: Apache-2.0 */
/* Kernel log scanning: NVRM lines and Xid reports (kmsg.h). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "doctor/kmsg.h"

#define KMSG_LINE_MAX 4096

static const char *find(const char *s, size_t len, const char *needle)
{
	size_t n = strlen(needle);
	for (size_t i = 0; i + n <= len; i++)
		if (memcmp(s + i, needle, n) == 0)
			return s + i;
	return NULL;
}

bool kmsg_is_nvidia_line(const char *line, size_t len)
{
	return find(line, len, "NVRM:") || find(line, len, "nvidia-modeset") ||
	       find(line, len, "nvidia-nvlink") || find(line, len, "nvidia: ") ||
	       find(line, len, "nvidia-uvm");
}

static bool is_bus_char(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') ||
	       c == ':' || c == '.';
}

/* Copy [s, s+n) into dst (size dsz) with control characters as '?', so a
 * log line cannot put escape sequences on the user's terminal. */
static void copy_clean(char *dst, size_t dsz, const char *s, size_t n)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 1 < dsz; i++) {
		unsigned char c = (unsigned char)s[i];
		dst[o++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
	}
	dst[o] = '\0';
}

/* Skip one ", key=value" field the driver adds before its message. */
static size_t skip_field(const char *p, size_t n, const char *key)
{
	size_t k = strlen(key);
	if (n < k || memcmp(p, key, k) != 0)
		return 0;
	size_t i = k;
	while (i < n && p[i] != ',')
		i++;
	if (i < n && p[i] == ',')
		i++;
	while (i < n && p[i] == ' ')
		i++;
	return i;
}

int kmsg_parse_xid(const char *line, size_t len, struct kmsg_xid *out)
{
	static const char tag[] = "NVRM: Xid (";
	const char *p = find(line, len, tag);
	if (!p)
		return 0;
	const char *end = line + len;
	p += sizeof(tag) - 1;
	if ((size_t)(end - p) >= 4 && memcmp(p, "PCI:", 4) == 0)
		p += 4;
	const char *bus = p;
	while (p < end && is_bus_char(*p))
		p++;
	size_t buslen = (size_t)(p - bus);
	if (buslen == 0 || buslen >= sizeof(out->pci) || end - p < 3 || memcmp(p, "): ", 3) != 0)
		return 0;
	p += 3;
	/* The number, range-checked by hand: a log line is not NUL-terminated. */
	unsigned long v = 0;
	const char *digits = p;
	while (p < end && *p >= '0' && *p <= '9') {
		v = v * 10 + (unsigned long)(*p - '0');
		if (v > KMSG_XID_MAX)
			return 0;
		p++;
	}
	if (p == digits || (p < end && *p != ',' && *p != ' ' && *p != '\n' && *p != '\r'))
		return 0;
	memset(out, 0, sizeof(*out));
	copy_clean(out->pci, sizeof(out->pci), bus, buslen);
	out->xid = (unsigned int)v;
	if (p < end && *p == ',')
		p++;
	while (p < end && *p == ' ')
		p++;
	p += skip_field(p, (size_t)(end - p), "pid=");
	p += skip_field(p, (size_t)(end - p), "name=");
	size_t n = (size_t)(end - p);
	while (n && (p[n - 1] == '\n' || p[n - 1] == '\r' || p[n - 1] == ' '))
		n--;
	copy_clean(out->detail, sizeof(out->detail), p, n);
	return 1;
}

static void scan_line(const char *s, size_t n, struct kmsg_scan *out)
{
	struct kmsg_xid x;

	out->lines++;
	if (!kmsg_is_nvidia_line(s, n))
		return;
	out->nvrm_lines++;
	if (kmsg_parse_xid(s, n, &x) != 1)
		return;
	out->xid_total++;
	if (out->nkept == KMSG_KEEP) {
		memmove(&out->kept[0], &out->kept[1], sizeof(out->kept[0]) * (KMSG_KEEP - 1));
		out->nkept--;
	}
	out->kept[out->nkept++] = x;
}

/* Calls fn for each line (without its newline), long lines in pieces. */
static void each_line(const char *text, size_t len, void (*fn)(const char *, size_t, void *),
		      void *ud)
{
	size_t start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i == len || text[i] == '\n' || i - start == KMSG_LINE_MAX) {
			if (i > start)
				fn(text + start, i - start, ud);
			start = (i < len && text[i] == '\n') ? i + 1 : i;
		}
	}
}

static void scan_cb(const char *s, size_t n, void *ud)
{
	scan_line(s, n, ud);
}

void kmsg_scan_text(const char *text, size_t len, struct kmsg_scan *out)
{
	memset(out, 0, sizeof(*out));
	each_line(text, len, scan_cb, out);
}

struct collect_ctx {
	struct buf *nvrm;
	bool full;
};

static void collect_cb(const char *s, size_t n, void *ud)
{
	struct collect_ctx *c = ud;
	struct gpuop_error e;
	if (c->full || !kmsg_is_nvidia_line(s, n))
		return;
	if (buf_append(c->nvrm, s, n, &e) < 0 || buf_append(c->nvrm, "\n", 1, &e) < 0)
		c->full = true; /* the cap is reached: keep what fits */
}

int kmsg_scan_file(const char *path, size_t max_bytes, struct kmsg_scan *out, struct buf *nvrm,
		   struct gpuop_error *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;

	memset(out, 0, sizeof(*out));
	if (fd < 0)
		return error_errno(err, errno, "kernel log %s", path);
	if (fstat(fd, &st) < 0)
		return error_errno(err, errno, "kernel log %s", path);
	if (!S_ISREG(st.st_mode))
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "kernel log %s: not a regular file (save `dmesg` output to a file "
				 "and pass it with --kernel-log)",
				 path);
	off_t from = st.st_size > (off_t)max_bytes ? st.st_size - (off_t)max_bytes : 0;
	size_t want = (size_t)(st.st_size - from);
	_cleanup_free_ char *data = malloc(want + 1);
	if (!data)
		return error_errno(err, ENOMEM, "kernel log %s", path);
	size_t got = 0;
	while (got < want) {
		ssize_t r = pread(fd, data + got, want - got, from + (off_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return error_errno(err, errno, "reading kernel log %s", path);
		if (r == 0)
			break; /* truncated while we read: scan what we have */
		got += (size_t)r;
	}
	size_t skip = 0;
	if (from > 0) /* started mid-line: drop the partial first line */
		while (skip < got && data[skip++] != '\n')
			;
	kmsg_scan_text(data + skip, got - skip, out);
	if (nvrm) {
		struct collect_ctx c = {.nvrm = nvrm};
		each_line(data + skip, got - skip, collect_cb, &c);
	}
	return 0;
}
