/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for src/base: error chains, the logger, capped buffers, atomic
 * file writes (including writes that really fail: read-only directory, full
 * disk), and the JSON/YAML loaders.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/cleanup.h"
#include "base/error.h"
#include "base/fileio.h"
#include "base/jsonload.h"
#include "base/log.h"

/* ---- helpers --------------------------------------------------------------- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP || flag == FTW_D)
		return rmdir(path) < 0 ? 0 : 0;
	unlink(path);
	return 0;
}

/* Per-test temporary directory: state is its path. */
static int tmpdir_setup(void **state)
{
	char *d = strdup("/tmp/gpuop-test-base-XXXXXX");
	if (!d || !mkdtemp(d)) {
		free(d);
		return -1;
	}
	*state = d;
	return 0;
}

static int tmpdir_teardown(void **state)
{
	char *d = *state;
	/* A test may have left the directory read-only for others. */
	chmod(d, 0700);
	nftw(d, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(d);
	return 0;
}

static void write_plain(const char *path, const char *content)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(content, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

/* Whole small file, or "" when it cannot be read. */
static void read_plain(const char *path, char *out, size_t sz)
{
	out[0] = '\0';
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, out, sz - 1);
	out[n > 0 ? n : 0] = '\0';
	close(fd);
}

/* Files an atomic write leaves behind when it fails to clean up. */
static int count_temps(const char *dir)
{
	_cleanup_closedir_ DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;
	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (strstr(e->d_name, ".tmp"))
			n++;
	return n;
}

static void path_join(char *out, size_t sz, const char *dir, const char *name)
{
	int n = snprintf(out, sz, "%s/%s", dir, name);
	assert_true(n > 0 && (size_t)n < sz);
}

/* ---- error ----------------------------------------------------------------- */

static void test_error_chain(void **state)
{
	(void)state;
	static const struct {
		const char *root;
		const char *wraps[4]; /* innermost first, NULL-terminated */
		const char *want;
	} rows[] = {
		{"truncated header (12 bytes, need 16)",
		 {"reading /run/nvidia/driver/etc/ld.so.cache", "cdi generate", NULL},
		 "cdi generate: reading /run/nvidia/driver/etc/ld.so.cache: truncated header (12 "
		 "bytes, need 16)"},
		{"bad", {NULL}, "bad"},
		{"x", {"a", "b", "c", NULL}, "c: b: a: x"},
		{"", {"outer", NULL}, "outer: "},
	};

	for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
		struct gpuop_error err;
		assert_int_equal(error_set(&err, GPUOP_ERR_HTTP, 503, "%s", rows[i].root), -1);
		for (size_t w = 0; rows[i].wraps[w]; w++)
			assert_int_equal(error_wrap(&err, "%s", rows[i].wraps[w]), -1);
		assert_string_equal(err.msg, rows[i].want);
		/* Wrapping adds words, never changes the cause. */
		assert_true(error_is(&err, GPUOP_ERR_HTTP, 503));
	}

	struct gpuop_error err;
	error_clear(&err);
	assert_int_equal(err.domain, GPUOP_ERR_NONE);
	assert_string_equal(err.msg, "");
	error_wrap(&err, "context");
	assert_int_equal(err.domain, GPUOP_ERR_GENERIC);
}

static void test_error_overflow_keeps_root_cause(void **state)
{
	(void)state;
	static const char root[] = "ROOT CAUSE: NVML_ERROR_GPU_IS_LOST on GPU-0000";
	char prefix[300];
	struct gpuop_error err;

	memset(prefix, 'p', sizeof(prefix) - 1);
	prefix[sizeof(prefix) - 1] = '\0';
	error_set(&err, GPUOP_ERR_NVML, 15, "%s", root);
	for (int i = 0; i < 20; i++) {
		error_wrap(&err, "layer %d %s", i, prefix);
		size_t len = strlen(err.msg);
		assert_true(len < GPUOP_ERROR_MSG_MAX);
		assert_true(len >= strlen(root));
		assert_string_equal(err.msg + len - strlen(root), root);
		/* the outermost context survives too */
		char head[16];
		snprintf(head, sizeof(head), "layer %d ", i);
		assert_int_equal(strncmp(err.msg, head, strlen(head)), 0);
	}
	assert_non_null(strstr(err.msg, "...: "));
	assert_true(error_is(&err, GPUOP_ERR_NVML, 15));

	/* A single prefix longer than the whole message. */
	char huge[3000];
	memset(huge, 'h', sizeof(huge) - 1);
	huge[sizeof(huge) - 1] = '\0';
	error_set(&err, GPUOP_ERR_GENERIC, 0, "%s", root);
	error_wrap(&err, "%s", huge);
	size_t len = strlen(err.msg);
	assert_true(len < GPUOP_ERROR_MSG_MAX);
	assert_string_equal(err.msg + len - strlen(root), root);
}

static void test_error_errno(void **state)
{
	(void)state;
	static const struct {
		int errnum;
		const char *want;
	} rows[] = {
		{ENOENT, "opening /etc/gpuop/config.yaml: No such file or directory"},
		{EACCES, "opening /etc/gpuop/config.yaml: Permission denied"},
		{ENOSPC, "opening /etc/gpuop/config.yaml: No space left on device"},
	};
	for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
		struct gpuop_error err;
		assert_int_equal(error_errno(&err, rows[i].errnum, "opening %s", "/etc/gpuop/config.yaml"),
				 -1);
		assert_string_equal(err.msg, rows[i].want);
		assert_true(error_is(&err, GPUOP_ERR_ERRNO, rows[i].errnum));
	}
	assert_string_equal(errno_name(EROFS), "Read-only file system");
	assert_non_null(errno_name(99999));
}

/* ---- logger ------------------------------------------------------------------ */

struct log_pipe {
	int rd, wr;
};

static void log_pipe_open(struct log_pipe *p, enum log_level level, enum log_format format)
{
	int fds[2];
	assert_int_equal(pipe2(fds, O_CLOEXEC | O_NONBLOCK), 0);
	p->rd = fds[0];
	p->wr = fds[1];
	log_set_fd(p->wr);
	log_setup(level, format);
}

static void log_pipe_close(struct log_pipe *p)
{
	log_set_fd(2);
	log_setup(LOG_INFO, LOG_TEXT);
	close(p->rd);
	close(p->wr);
}

/* Read what one log_emit wrote: exactly one line. */
static void log_pipe_line(struct log_pipe *p, char *out, size_t sz)
{
	ssize_t n = read(p->rd, out, sz - 1);
	assert_true(n > 0);
	out[n] = '\0';
	assert_int_equal(out[n - 1], '\n');
	assert_ptr_equal(strchr(out, '\n'), out + n - 1);
}

static void log_pipe_expect_nothing(struct log_pipe *p)
{
	char c;
	assert_int_equal(read(p->rd, &c, 1), -1);
	assert_int_equal(errno, EAGAIN);
}

/* "2026-11-29T19:40:10.123Z": UTC with milliseconds. */
static void assert_timestamp(const char *s)
{
	static const char shape[] = "0000-00-00T00:00:00.000Z";
	for (size_t i = 0; i < sizeof(shape) - 1; i++) {
		if (shape[i] == '0')
			assert_true(s[i] >= '0' && s[i] <= '9');
		else
			assert_int_equal(s[i], shape[i]);
	}
}

struct log_row {
	enum log_level level;
	const char *comp, *msg;
	const char *k1, *v1, *k2, *v2; /* k1 == NULL: no context */
	const char *text;              /* expected text line after the timestamp */
	const char *json;              /* expected JSON line after {"ts":"...", */
};

static const struct log_row log_rows[] = {
	{LOG_INFO, "exporter", "listening", "addr", ":9400", NULL, NULL,
	 " info  exporter: listening addr=:9400\n",
	 "\"level\":\"info\",\"component\":\"exporter\",\"msg\":\"listening\",\"addr\":\":9400\"}\n"},
	{LOG_WARN, "plugin", "device unhealthy", "uuid", "GPU-1", "reason", "xid 79",
	 " warn  plugin: device unhealthy uuid=GPU-1 reason=\"xid 79\"\n",
	 "\"level\":\"warn\",\"component\":\"plugin\",\"msg\":\"device unhealthy\",\"uuid\":\"GPU-1\","
	 "\"reason\":\"xid 79\"}\n"},
	{LOG_ERROR, "cdi", "write failed", "err", "say \"hi\"", "sel", "a=b",
	 " error cdi: write failed err=\"say \\\"hi\\\"\" sel=\"a=b\"\n",
	 "\"level\":\"error\",\"component\":\"cdi\",\"msg\":\"write failed\",\"err\":\"say "
	 "\\\"hi\\\"\",\"sel\":\"a=b\"}\n"},
	{LOG_DEBUG, "x", "two\nlines", "empty", "", "tab", "a\tb",
	 " debug x: two\\nlines empty=\"\" tab=\"a\\tb\"\n",
	 "\"level\":\"debug\",\"component\":\"x\",\"msg\":\"two\\nlines\",\"empty\":\"\",\"tab\":"
	 "\"a\\tb\"}\n"},
	{LOG_INFO, NULL, "no component", NULL, NULL, NULL, NULL, " info  no component\n",
	 "\"level\":\"info\",\"msg\":\"no component\"}\n"},
	{LOG_INFO, "c", "ctl", "v", "\x01\\", "utf8", "caf\xc3\xa9",
	 " info  c: ctl v=\"\\x01\\\\\" utf8=caf\xc3\xa9\n",
	 "\"level\":\"info\",\"component\":\"c\",\"msg\":\"ctl\",\"v\":\"\\u0001\\\\\",\"utf8\":"
	 "\"caf\xc3\xa9\"}\n"},
	/* Invalid UTF-8 must not make the JSON line invalid. */
	{LOG_INFO, "c", "bad", "v", "a\xff", NULL, NULL, " info  c: bad v=a\\xff\n",
	 "\"level\":\"info\",\"component\":\"c\",\"msg\":\"bad\",\"v\":\"a\\ufffd\"}\n"},
	/* A NULL value ends the list (reading further would be undefined). */
	{LOG_INFO, "c", "null", "k", NULL, NULL, NULL, " info  c: null k=(null)\n",
	 "\"level\":\"info\",\"component\":\"c\",\"msg\":\"null\",\"k\":null}\n"},
};

static void emit_row(const struct log_row *r)
{
	if (r->k1 && r->k2)
		log_emit(r->level, r->comp, r->msg, r->k1, r->v1, r->k2, r->v2, NULL);
	else if (r->k1)
		log_emit(r->level, r->comp, r->msg, r->k1, r->v1, NULL);
	else
		log_emit(r->level, r->comp, r->msg, NULL);
}

static void test_log_text(void **state)
{
	(void)state;
	struct log_pipe p;
	char line[16384];

	log_pipe_open(&p, LOG_DEBUG, LOG_TEXT);
	for (size_t i = 0; i < ARRAY_SIZE(log_rows); i++) {
		errno = EXDEV;
		emit_row(&log_rows[i]);
		assert_int_equal(errno, EXDEV); /* logging never clobbers errno */
		log_pipe_line(&p, line, sizeof(line));
		assert_timestamp(line);
		assert_string_equal(line + 24, log_rows[i].text);
	}
	log_pipe_close(&p);
}

static void test_log_json(void **state)
{
	(void)state;
	struct log_pipe p;
	char line[16384];

	log_pipe_open(&p, LOG_DEBUG, LOG_JSON);
	for (size_t i = 0; i < ARRAY_SIZE(log_rows); i++) {
		const struct log_row *r = &log_rows[i];
		emit_row(r);
		log_pipe_line(&p, line, sizeof(line));
		assert_memory_equal(line, "{\"ts\":\"", 7);
		assert_timestamp(line + 7);
		assert_memory_equal(line + 31, "\",", 2);
		assert_string_equal(line + 33, r->json);

		/* And a JSON parser reads back what was logged. */
		json_error_t je;
		_cleanup_json_ json_t *j = json_loads(line, 0, &je);
		assert_non_null(j);
		assert_string_equal(json_string_value(json_object_get(j, "msg")), r->msg);
		if (r->comp)
			assert_string_equal(json_string_value(json_object_get(j, "component")),
					    r->comp);
		else
			assert_null(json_object_get(j, "component"));
		if (r->k1 && r->v1 && !strchr(r->v1, '\xff'))
			assert_string_equal(json_string_value(json_object_get(j, r->k1)), r->v1);
		if (r->k2)
			assert_string_equal(json_string_value(json_object_get(j, r->k2)), r->v2);
	}
	log_pipe_close(&p);
}

static void test_log_level_filter(void **state)
{
	(void)state;
	struct log_pipe p;
	char line[1024];

	log_pipe_open(&p, LOG_WARN, LOG_TEXT);
	assert_false(log_enabled(LOG_INFO));
	assert_true(log_enabled(LOG_ERROR));
	log_debug("c", "dropped", NULL);
	log_info("c", "dropped", "k", "v", NULL);
	log_pipe_expect_nothing(&p);
	log_warn("c", "kept", NULL);
	log_pipe_line(&p, line, sizeof(line));
	assert_string_equal(line + 24, " warn  c: kept\n");
	log_error("c", "kept too", NULL);
	log_pipe_line(&p, line, sizeof(line));
	assert_string_equal(line + 24, " error c: kept too\n");
	log_pipe_close(&p);

	static const struct {
		const char *s;
		int want; /* -1: rejected */
	} levels[] = {{"debug", LOG_DEBUG}, {"info", LOG_INFO}, {"warn", LOG_WARN},
		      {"error", LOG_ERROR}, {"INFO", -1},      {"", -1},
		      {"verbose", -1},      {"info ", -1}};
	for (size_t i = 0; i < ARRAY_SIZE(levels); i++) {
		enum log_level l = LOG_DEBUG;
		int r = log_level_parse(levels[i].s, &l);
		assert_int_equal(r, levels[i].want < 0 ? -1 : 0);
		if (levels[i].want >= 0)
			assert_int_equal(l, levels[i].want);
	}
	enum log_format f;
	assert_int_equal(log_format_parse("json", &f), 0);
	assert_int_equal(f, LOG_JSON);
	assert_int_equal(log_format_parse("text", &f), 0);
	assert_int_equal(f, LOG_TEXT);
	assert_int_equal(log_format_parse("yaml", &f), -1);
}

static void test_log_long_line_truncated(void **state)
{
	(void)state;
	struct log_pipe p;
	static char big[20000];
	static char line[65536];

	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';

	log_pipe_open(&p, LOG_INFO, LOG_JSON);
	log_info("c", "big", "first", "ok", "blob", big, "after", "lost", NULL);
	log_pipe_line(&p, line, sizeof(line));
	assert_true(strlen(line) <= 8192);
	json_error_t je;
	_cleanup_json_ json_t *j = json_loads(line, 0, &je);
	assert_non_null(j);
	assert_true(json_is_true(json_object_get(j, "truncated")));
	assert_string_equal(json_string_value(json_object_get(j, "first")), "ok");
	const char *blob = json_string_value(json_object_get(j, "blob"));
	assert_non_null(blob);
	assert_string_equal(blob + strlen(blob) - 3, "...");
	assert_null(json_object_get(j, "after"));

	log_setup(LOG_INFO, LOG_TEXT);
	log_info("c", big, "k", "v", NULL);
	log_pipe_line(&p, line, sizeof(line));
	assert_true(strlen(line) <= 8192);
	assert_string_equal(line + strlen(line) - 19, "... truncated=true\n");
	log_pipe_close(&p);
}

#define LOG_THREADS 4
#define LOG_LINES_PER_THREAD 300

static void *log_thread(void *arg)
{
	char id[16], val[600];
	snprintf(id, sizeof(id), "%d", (int)(intptr_t)arg);
	memset(val, 'a' + (int)(intptr_t)arg, sizeof(val) - 1);
	val[sizeof(val) - 1] = '\0';
	for (int i = 0; i < LOG_LINES_PER_THREAD; i++)
		log_info("thread", "line", "id", id, "payload", val, NULL);
	return NULL;
}

/* Lines from several threads never interleave. */
static void test_log_threads(void **state)
{
	char path[PATH_MAX];
	pthread_t th[LOG_THREADS];

	path_join(path, sizeof(path), *state, "log");
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	log_set_fd(fd);
	log_setup(LOG_INFO, LOG_JSON);
	for (intptr_t i = 0; i < LOG_THREADS; i++)
		assert_int_equal(pthread_create(&th[i], NULL, log_thread, (void *)i), 0);
	for (int i = 0; i < LOG_THREADS; i++)
		pthread_join(th[i], NULL);
	log_set_fd(2);
	log_setup(LOG_INFO, LOG_TEXT);
	close(fd);

	_cleanup_fclose_ FILE *f = fopen(path, "r");
	assert_non_null(f);
	char line[2048];
	int n = 0;
	while (fgets(line, sizeof(line), f)) {
		json_error_t je;
		_cleanup_json_ json_t *j = json_loads(line, 0, &je);
		assert_non_null(j);
		const char *id = json_string_value(json_object_get(j, "id"));
		const char *payload = json_string_value(json_object_get(j, "payload"));
		assert_non_null(id);
		assert_non_null(payload);
		assert_int_equal(strlen(payload), 599);
		assert_int_equal(payload[0], 'a' + (id[0] - '0'));
		assert_int_equal(payload[598], payload[0]);
		n++;
	}
	assert_int_equal(n, LOG_THREADS * LOG_LINES_PER_THREAD);
}

/* ---- buf --------------------------------------------------------------------- */

static void test_buf_cap(void **state)
{
	(void)state;
	_cleanup_buf_ struct buf b;
	struct gpuop_error err;

	buf_init(&b, 10);
	assert_null(b.data);
	assert_int_equal(buf_append(&b, "", 0, &err), 0);
	assert_non_null(b.data);
	assert_string_equal(b.data, "");
	assert_int_equal(buf_puts(&b, "0123456", &err), 0);
	assert_int_equal(buf_append(&b, "789", 3, &err), 0);
	assert_int_equal(b.len, 10);
	assert_string_equal(b.data, "0123456789");
	assert_true(b.cap <= 11);

	/* One byte over the cap: refused, content unchanged, message names it. */
	assert_int_equal(buf_append(&b, "x", 1, &err), -1);
	assert_true(error_is(&err, GPUOP_ERR_ERRNO, E2BIG));
	assert_non_null(strstr(err.msg, "limit of 10 bytes"));
	assert_int_equal(b.len, 10);
	assert_string_equal(b.data, "0123456789");
	assert_int_equal(buf_printf(&b, &err, "%d", 1), -1);
	assert_string_equal(b.data, "0123456789");
	/* An absurd length cannot wrap around the check. */
	assert_int_equal(buf_append(&b, "x", SIZE_MAX, &err), -1);

	buf_reset(&b);
	assert_int_equal(b.len, 0);
	assert_string_equal(b.data, "");
	assert_int_equal(buf_printf(&b, &err, "%s-%d", "abc", 42), 0);
	assert_string_equal(b.data, "abc-42");
	/* printf that would overflow leaves what was there. */
	assert_int_equal(buf_printf(&b, &err, "%s", "12345"), -1);
	assert_string_equal(b.data, "abc-42");
	assert_int_equal(b.len, 6);
	assert_int_equal(buf_printf(&b, &err, "%s", "1234"), 0);
	assert_string_equal(b.data, "abc-421234");

	char *s = buf_steal(&b);
	assert_string_equal(s, "abc-421234");
	free(s);
	assert_null(b.data);
	assert_int_equal(b.len, 0);
	s = buf_steal(&b);
	assert_string_equal(s, "");
	free(s);
}

static void test_buf_printf_growth(void **state)
{
	(void)state;
	_cleanup_buf_ struct buf b;
	struct gpuop_error err;
	char chunk[1001];

	memset(chunk, 'z', 1000);
	chunk[1000] = '\0';
	buf_init(&b, 1 << 20);
	for (int i = 0; i < 100; i++)
		assert_int_equal(buf_printf(&b, &err, "%04d:%s;", i, chunk), 0);
	assert_int_equal(b.len, 100 * 1006);
	assert_int_equal(strlen(b.data), b.len);
	assert_memory_equal(b.data + 1006 * 57, "0057:zzz", 8);
	assert_true(b.cap > b.len);
	assert_true(b.cap <= (1 << 20) + 1);

	/* Growth never allocates past max + 1. */
	_cleanup_buf_ struct buf c;
	buf_init(&c, 100);
	assert_int_equal(buf_printf(&c, &err, "%0100d", 7), 0);
	assert_int_equal(c.len, 100);
	assert_true(c.cap <= 101);
}

static void test_buf_read_file(void **state)
{
	const char *dir = *state;
	char path[PATH_MAX];
	_cleanup_buf_ struct buf b;
	struct gpuop_error err;

	path_join(path, sizeof(path), dir, "f");
	write_plain(path, "0123456789");

	static const struct {
		size_t max;
		int rc;
	} rows[] = {{100, 0}, {10, 0}, {9, -1}, {0, -1}};
	for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
		buf_init(&b, rows[i].max);
		assert_int_equal(buf_read_file(&b, path, &err), rows[i].rc);
		if (rows[i].rc == 0) {
			assert_string_equal(b.data, "0123456789");
			assert_int_equal(b.len, 10);
		} else {
			assert_true(error_is(&err, GPUOP_ERR_ERRNO, E2BIG));
			assert_non_null(strstr(err.msg, path));
			assert_int_equal(b.len, 0);
		}
		buf_free(&b);
	}

	/* Reading replaces the previous content. */
	buf_init(&b, 100);
	assert_int_equal(buf_puts(&b, "old", &err), 0);
	assert_int_equal(buf_read_file(&b, path, &err), 0);
	assert_string_equal(b.data, "0123456789");
	buf_free(&b);

	/* proc files report size 0 and still read whole, or fail on the cap. */
	buf_init(&b, 1 << 20);
	assert_int_equal(buf_read_file(&b, "/proc/self/status", &err), 0);
	assert_true(b.len > 0);
	assert_non_null(strstr(b.data, "Name:"));
	assert_int_equal(strlen(b.data), b.len);
	buf_free(&b);
	buf_init(&b, 16);
	assert_int_equal(buf_read_file(&b, "/proc/self/status", &err), -1);
	assert_true(error_is(&err, GPUOP_ERR_ERRNO, E2BIG));
	assert_non_null(strstr(err.msg, "/proc/self/status"));
	assert_non_null(strstr(err.msg, "limit of 16 bytes"));
	buf_free(&b);

	/* Errors name the path. */
	buf_init(&b, 100);
	path_join(path, sizeof(path), dir, "missing");
	assert_int_equal(buf_read_file(&b, path, &err), -1);
	assert_true(error_is(&err, GPUOP_ERR_ERRNO, ENOENT));
	assert_non_null(strstr(err.msg, path));
	assert_int_equal(buf_read_file(&b, dir, &err), -1);
	assert_true(error_is(&err, GPUOP_ERR_ERRNO, EISDIR));
	assert_non_null(strstr(err.msg, dir));
}

/* ---- atomic writes: success ---------------------------------------------------- */

static void test_atomic_write_success(void **state)
{
	const char *dir = *state;
	char path[PATH_MAX], got[256];
	struct stat st;
	struct gpuop_error err;

	path_join(path, sizeof(path), dir, "spec.yaml");
	mode_t old_umask = umask(077);
	assert_int_equal(atomic_write_file(path, "first\n", 6, 0644, &err), 0);
	umask(old_umask);
	read_plain(path, got, sizeof(got));
	assert_string_equal(got, "first\n");
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0644); /* exact mode, umask ignored */

	assert_int_equal(atomic_write_file(path, "second", 6, 0600, &err), 0);
	read_plain(path, got, sizeof(got));
	assert_string_equal(got, "second");
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);

	assert_int_equal(atomic_write_file(path, NULL, 0, 0640, &err), 0);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_size, 0);
	assert_int_equal(count_temps(dir), 0);

	/* A relative name goes into the current directory. */
	char cwd[PATH_MAX];
	assert_non_null(getcwd(cwd, sizeof(cwd)));
	assert_int_equal(chdir(dir), 0);
	assert_int_equal(atomic_write_file("rel", "r", 1, 0644, &err), 0);
	assert_int_equal(chdir(cwd), 0);
	path_join(path, sizeof(path), dir, "rel");
	read_plain(path, got, sizeof(got));
	assert_string_equal(got, "r");
	assert_int_equal(count_temps(dir), 0);
}

/* Failures that need no privilege: rename over a directory, missing dir. */
static void test_atomic_write_plain_failures(void **state)
{
	const char *dir = *state;
	char path[PATH_MAX], sub[PATH_MAX], inner[PATH_MAX];
	struct gpuop_error err;

	path_join(path, sizeof(path), dir, "adir");
	assert_int_equal(mkdir(path, 0755), 0);
	path_join(inner, sizeof(inner), path, "keep");
	write_plain(inner, "x");
	assert_int_equal(atomic_write_file(path, "data", 4, 0644, &err), -1);
	assert_non_null(strstr(err.msg, path));
	assert_non_null(strstr(err.msg, "renaming temporary file"));
	assert_int_equal(count_temps(dir), 0);

	path_join(sub, sizeof(sub), dir, "nodir/file");
	assert_int_equal(atomic_write_file(sub, "data", 4, 0644, &err), -1);
	assert_true(error_is(&err, GPUOP_ERR_ERRNO, ENOENT));
	assert_non_null(strstr(err.msg, sub));
	assert_non_null(strstr(err.msg, "creating temporary file"));

	path_join(sub, sizeof(sub), dir, "trailing/");
	assert_int_equal(atomic_write_file(sub, "data", 4, 0644, &err), -1);
	assert_non_null(strstr(err.msg, sub));
}

/* ---- atomic writes that really fail ------------------------------------------ */

/*
 * Each failure runs in a forked child that sets up the obstacle (a private
 * mount namespace with a read-only bind mount or a tiny tmpfs, a dropped uid,
 * a file size limit) so the test process itself is never affected.  The
 * child reports through a pipe; the parent asserts.
 */
struct child_report {
	int setup_ok; /* 0: the mechanism is not available here; why says so */
	char why[256];
	int rc;
	int domain, code;
	char msg[GPUOP_ERROR_MSG_MAX];
	char content[256]; /* the target after the failed write, seen by the child */
	int temps;         /* temp files left behind, seen by the child */
};

struct child_job {
	const char *dir;
	const char *target;
	size_t newlen;
	int (*setup)(const struct child_job *job, struct child_report *r);
};

static int write_file_raw(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, s, strlen(s));
	close(fd);
	return n == (ssize_t)strlen(s) ? 0 : -1;
}

static int deny_setgroups_and_map(uid_t uid, gid_t gid)
{
	char map[64];
	if (write_file_raw("/proc/self/setgroups", "deny") < 0)
		return -1;
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
	if (write_file_raw("/proc/self/uid_map", map) < 0)
		return -1;
	snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid);
	return write_file_raw("/proc/self/gid_map", map);
}

/* A mount namespace of our own, with propagation to the host cut. */
static int enter_private_mount_ns(struct child_report *r)
{
	uid_t uid = geteuid();
	gid_t gid = getegid();

	if (unshare(CLONE_NEWNS) < 0) {
		int e = errno;
		/* Unprivileged: a user namespace grants mount rights inside it. */
		if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0 || deny_setgroups_and_map(uid, gid) < 0) {
			snprintf(r->why, sizeof(r->why),
				 "no private mount namespace (unshare: %s; with a user namespace: %s)",
				 strerror(e), strerror(errno));
			return -1;
		}
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		snprintf(r->why, sizeof(r->why), "making / private: %s", strerror(errno));
		return -1;
	}
	return 0;
}

static int setup_readonly_bind(const struct child_job *job, struct child_report *r)
{
	char probe[PATH_MAX];

	if (enter_private_mount_ns(r) < 0)
		return -1;
	if (mount(job->dir, job->dir, NULL, MS_BIND, NULL) < 0 ||
	    mount(NULL, job->dir, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL) < 0) {
		snprintf(r->why, sizeof(r->why), "read-only bind mount: %s", strerror(errno));
		return -1;
	}
	snprintf(probe, sizeof(probe), "%s/probe", job->dir);
	if (open(probe, O_WRONLY | O_CREAT | O_CLOEXEC, 0600) >= 0 || errno != EROFS) {
		snprintf(r->why, sizeof(r->why), "the bind mount did not become read-only");
		return -1;
	}
	return 0;
}

static int setup_drop_uid(const struct child_job *job, struct child_report *r)
{
	if (geteuid() != 0) {
		snprintf(r->why, sizeof(r->why), "not root: cannot switch to uid 65534");
		return -1;
	}
	if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0) {
		snprintf(r->why, sizeof(r->why), "switching to uid/gid 65534: %s", strerror(errno));
		return -1;
	}
	if (access(job->dir, W_OK) == 0) {
		snprintf(r->why, sizeof(r->why), "uid 65534 can still write %s", job->dir);
		return -1;
	}
	return 0;
}

static int setup_tiny_tmpfs(const struct child_job *job, struct child_report *r)
{
	if (enter_private_mount_ns(r) < 0)
		return -1;
	if (mount("tmpfs", job->dir, "tmpfs", 0, "size=64k,mode=0755") < 0) {
		snprintf(r->why, sizeof(r->why), "mounting a 64 KiB tmpfs: %s", strerror(errno));
		return -1;
	}
	/* The old file lives on the small filesystem too. */
	if (write_file_raw(job->target, "old content\n") < 0) {
		snprintf(r->why, sizeof(r->why), "writing the old file on tmpfs: %s",
			 strerror(errno));
		return -1;
	}
	return 0;
}

static int setup_fsize_limit(const struct child_job *job, struct child_report *r)
{
	(void)job;
	struct rlimit rl = {.rlim_cur = 4096, .rlim_max = 4096};

	/* Without this the kernel kills the writer instead of failing write(). */
	signal(SIGXFSZ, SIG_IGN);
	if (setrlimit(RLIMIT_FSIZE, &rl) < 0) {
		snprintf(r->why, sizeof(r->why), "setrlimit(RLIMIT_FSIZE): %s", strerror(errno));
		return -1;
	}
	return 0;
}

static void child_main(const struct child_job *job, int wfd)
{
	static struct child_report r;
	struct gpuop_error err;

	memset(&r, 0, sizeof(r));
	if (job->setup(job, &r) == 0) {
		r.setup_ok = 1;
		char *data = malloc(job->newlen);
		if (data) {
			memset(data, 'N', job->newlen);
			error_clear(&err);
			r.rc = atomic_write_file(job->target, data, job->newlen, 0644, &err);
			free(data);
			r.domain = (int)err.domain;
			r.code = err.code;
			snprintf(r.msg, sizeof(r.msg), "%s", err.msg);
		} else {
			r.rc = 99;
		}
		read_plain(job->target, r.content, sizeof(r.content));
		r.temps = count_temps(job->dir);
	}
	const char *p = (const char *)&r;
	size_t left = sizeof(r);
	while (left > 0) {
		ssize_t w = write(wfd, p, left);
		if (w <= 0)
			_exit(3);
		p += w;
		left -= (size_t)w;
	}
	_exit(0);
}

static void run_child(const struct child_job *job, struct child_report *r)
{
	int fds[2];
	assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		child_main(job, fds[1]);
	}
	close(fds[1]);
	char *p = (char *)r;
	size_t got = 0;
	while (got < sizeof(*r)) {
		ssize_t n = read(fds[0], p + got, sizeof(*r) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fds[0]);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(got, sizeof(*r));
}

struct failure_row {
	const char *what;
	int (*setup)(const struct child_job *job, struct child_report *r);
	size_t newlen;
	int want_errno;
	const char *want_step;
	bool old_file_in_parent; /* the old file is on the host fs: parent checks it too */
};

static const struct failure_row failure_rows[] = {
	{"read-only bind mount", setup_readonly_bind, 100, EROFS, "creating temporary file", true},
	{"directory not writable by uid 65534", setup_drop_uid, 100, EACCES,
	 "creating temporary file", true},
	{"disk full (64 KiB tmpfs)", setup_tiny_tmpfs, 1 << 20, ENOSPC, "writing temporary file",
	 false},
	{"file size limit (RLIMIT_FSIZE)", setup_fsize_limit, 1 << 16, EFBIG,
	 "writing temporary file", true},
};

static void run_failure_row(const char *dir, const struct failure_row *row)
{
	char target[PATH_MAX], got[256];
	struct child_report r;

	path_join(target, sizeof(target), dir, "validation-ready");
	write_plain(target, "old content\n");
	/* Others may traverse (the uid-drop case needs it) but not write. */
	assert_int_equal(chmod(dir, 0755), 0);
	assert_int_equal(chmod(target, 0644), 0);

	struct child_job job = {.dir = dir, .target = target, .newlen = row->newlen,
				.setup = row->setup};
	run_child(&job, &r);
	if (!r.setup_ok) {
		print_message("[  SKIP    ] %s: %s\n", row->what, r.why);
		skip();
	}
	print_message("[  INFO    ] %s: %s\n", row->what, r.msg);
	assert_int_equal(r.rc, -1);
	assert_int_equal(r.domain, GPUOP_ERR_ERRNO);
	assert_int_equal(r.code, row->want_errno);
	assert_non_null(strstr(r.msg, target));
	assert_non_null(strstr(r.msg, row->want_step));
	assert_non_null(strstr(r.msg, strerror(row->want_errno)));
	assert_string_equal(r.content, "old content\n");
	assert_int_equal(r.temps, 0);
	if (row->old_file_in_parent) {
		read_plain(target, got, sizeof(got));
		assert_string_equal(got, "old content\n");
		assert_int_equal(count_temps(dir), 0);
	}
}

static void test_atomic_write_readonly_bind(void **state)
{
	run_failure_row(*state, &failure_rows[0]);
}

static void test_atomic_write_readonly_uid(void **state)
{
	run_failure_row(*state, &failure_rows[1]);
}

static void test_atomic_write_disk_full(void **state)
{
	run_failure_row(*state, &failure_rows[2]);
}

static void test_atomic_write_fsize_limit(void **state)
{
	run_failure_row(*state, &failure_rows[3]);
}

static void test_mkdir_p(void **state)
{
	const char *dir = *state;
	char path[PATH_MAX], file[PATH_MAX];
	struct stat st;
	struct gpuop_error err;

	path_join(path, sizeof(path), dir, "a/b//c/");
	assert_int_equal(mkdir_p(path, 0755, &err), 0);
	path_join(path, sizeof(path), dir, "a/b/c");
	assert_int_equal(stat(path, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(mkdir_p(path, 0755, &err), 0); /* exists: fine */
	assert_int_equal(mkdir_p("/", 0755, &err), 0);

	path_join(file, sizeof(file), dir, "a/file");
	write_plain(file, "x");
	path_join(path, sizeof(path), dir, "a/file/sub");
	assert_int_equal(mkdir_p(path, 0755, &err), -1);
	assert_true(error_is(&err, GPUOP_ERR_ERRNO, ENOTDIR));
	assert_non_null(strstr(err.msg, file));
	assert_int_equal(mkdir_p(file, 0755, &err), -1);
	assert_true(error_is(&err, GPUOP_ERR_ERRNO, ENOTDIR));
	assert_int_equal(mkdir_p("", 0755, &err), -1);
}

/* ---- JSON / YAML ------------------------------------------------------------- */

enum loader { L_JSON, L_YAML };

static json_t *load(enum loader l, const char *doc, struct gpuop_error *err)
{
	if (l == L_JSON)
		return json_load_buffer(doc, strlen(doc), "t.json", err);
	return yaml_load_buffer(doc, strlen(doc), "t.yaml", err);
}

static void test_load_errors(void **state)
{
	(void)state;
	static const struct {
		enum loader l;
		const char *doc;
		const char *prefix; /* name:line:col: */
		const char *text;   /* part of the rest */
	} rows[] = {
		{L_YAML, "a: 1\nb: [1, 2\nc: 3\n", "t.yaml:3:2: ", "did not find expected ',' or ']'"},
		{L_YAML, "a: 1\n  b: 2\n", "t.yaml:2:4: ", "mapping values are not allowed in this context"},
		{L_YAML, "a: b: c\n", "t.yaml:1:5: ", "mapping values are not allowed"},
		{L_YAML, "key: \"unterminated\n", "t.yaml:2:1: ",
		 "found unexpected end of stream (while scanning a quoted scalar at line 1 column 6)"},
		{L_YAML, "\t- x\n", "t.yaml:1:1: ", "cannot start any token"},
		{L_YAML, "a:\n  - x\n  y: 2\n", "t.yaml:3:3: ", "did not find expected '-' indicator"},
		{L_YAML, "ok: 1\nx: \xff\n", "t.yaml:2:4: ", "invalid leading UTF-8 octet"},
		{L_YAML, "a: 1\nb: 2\na: 3\n", "t.yaml:3:1: ", "duplicate key 'a' (first defined on line 1)"},
		{L_YAML, "a: 1\nb:\n  c: 1\n  c: 2\n", "t.yaml:4:3: ",
		 "duplicate key 'c' (first defined on line 3)"},
		{L_YAML, "{a: 1, b: 2, a: 3}", "t.yaml:1:14: ", "duplicate key 'a'"},
		{L_YAML, "a: 1\n---\nb: 2\n", "t.yaml:2:1: ", "a second YAML document"},
		{L_YAML, "? [a]\n: 1\n", "t.yaml:1:3: ", "mapping keys must be scalars, found a sequence"},
		{L_YAML, "? {a: 1}\n: 1\n", "t.yaml:1:3: ", "mapping keys must be scalars, found a mapping"},
		{L_YAML, "x: *nope\n", "t.yaml:1:4: ", "alias *nope refers to no anchor"},
		{L_YAML, "&a [*a]", "t.yaml:1:5: ", "alias *a refers to no anchor"},
		{L_YAML, "a: 9223372036854775808\n", "t.yaml:1:4: ", "out of range"},
		{L_YAML, "a: 0x8000000000000000\n", "t.yaml:1:4: ", "out of range"},
		{L_YAML, "a: 1e999\n", "t.yaml:1:4: ", "out of range"},
		{L_YAML, "a: .inf\n", "t.yaml:1:4: ", "JSON has no infinity or NaN"},
		{L_YAML, "a: !!int x\n", "t.yaml:1:4: ", "'x' is not a valid !!int"},
		{L_YAML, "a: !!bool yes\n", "t.yaml:1:4: ", "not a valid !!bool"},
		{L_YAML, "a: \"nul\\0\"\n", "t.yaml:1:4: ", "NUL character"},
		{L_YAML, "k: &k [1]\n*k : 1\n", "t.yaml:2:1: ", "must refer to a string"},
		{L_JSON, "{\"a\":1,}", "t.json:1:8: ", "string or '}' expected"},
		{L_JSON, "{\n  \"a\": 1\n  \"b\": 2\n}", "t.json:3:3: ", "'}' expected near '\"b\"'"},
		{L_JSON, "{\"a\":1,\"a\":2}", "t.json:1:8: ", "duplicate object key"},
		{L_JSON, "[1,\n tru]", "t.json:2:2: ", "invalid token near 'tru'"},
		{L_JSON, "[1,2", "t.json:1:4: ", "']' expected near end of file"},
		{L_JSON, "", "t.json:1:1: ", "near end of file"},
	};

	for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
		struct gpuop_error err;
		error_clear(&err);
		json_t *j = load(rows[i].l, rows[i].doc, &err);
		if (j)
			print_message("row %zu loaded unexpectedly\n", i);
		assert_null(j);
		assert_int_equal(err.domain, GPUOP_ERR_PARSE);
		if (strncmp(err.msg, rows[i].prefix, strlen(rows[i].prefix)) != 0 ||
		    !strstr(err.msg, rows[i].text))
			print_message("row %zu: got \"%s\"\n", i, err.msg);
		assert_memory_equal(err.msg, rows[i].prefix, strlen(rows[i].prefix));
		assert_non_null(strstr(err.msg, rows[i].text));
	}
}

static void assert_loads_as(enum loader l, const char *doc, const char *want_json)
{
	struct gpuop_error err;
	json_error_t je;
	_cleanup_json_ json_t *got = load(l, doc, &err);
	_cleanup_json_ json_t *want = json_loads(want_json, JSON_DECODE_ANY, &je);

	if (!got)
		print_message("\"%s\": %s\n", doc, err.msg);
	assert_non_null(got);
	assert_non_null(want);
	if (!json_equal(got, want)) {
		_cleanup_free_ char *s = json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY);
		print_message("\"%s\": got %s, want %s\n", doc, s, want_json);
	}
	/* json_equal keeps integer and real apart, so 3 != 3.0 here. */
	assert_true(json_equal(got, want));
}

static void test_yaml_typing(void **state)
{
	(void)state;
	static const struct {
		const char *yaml;
		const char *json;
	} rows[] = {
		{"v: ~", "{\"v\":null}"},
		{"v: null", "{\"v\":null}"},
		{"v: NULL", "{\"v\":null}"},
		{"v:", "{\"v\":null}"},
		{"v: true", "{\"v\":true}"},
		{"v: False", "{\"v\":false}"},
		{"v: TRUE", "{\"v\":true}"},
		{"v: yes", "{\"v\":\"yes\"}"}, /* YAML 1.1 booleans are strings in 1.2 */
		{"v: on", "{\"v\":\"on\"}"},
		{"v: 42", "{\"v\":42}"},
		{"v: -12", "{\"v\":-12}"},
		{"v: +3", "{\"v\":3}"},
		{"v: 007", "{\"v\":7}"},
		{"v: 0x1F", "{\"v\":31}"},
		{"v: 0o17", "{\"v\":15}"},
		{"v: 9223372036854775807", "{\"v\":9223372036854775807}"},
		{"v: -9223372036854775808", "{\"v\":-9223372036854775808}"},
		{"v: 0x", "{\"v\":\"0x\"}"},
		{"v: 0o8", "{\"v\":\"0o8\"}"},
		{"v: -0x10", "{\"v\":\"-0x10\"}"},
		{"v: 1_000", "{\"v\":\"1_000\"}"},
		{"v: 1.5", "{\"v\":1.5}"},
		{"v: .5", "{\"v\":0.5}"},
		{"v: -1.5E-2", "{\"v\":-0.015}"},
		{"v: 1e3", "{\"v\":1000.0}"},
		{"v: 1.", "{\"v\":1.0}"},
		{"v: 1.2.3", "{\"v\":\"1.2.3\"}"},
		{"v: \"true\"", "{\"v\":\"true\"}"},
		{"v: '12'", "{\"v\":\"12\"}"},
		{"v: '~'", "{\"v\":\"~\"}"},
		{"v: \"\"", "{\"v\":\"\"}"},
		{"v: !!str 12", "{\"v\":\"12\"}"},
		{"v: !!float 3", "{\"v\":3.0}"},
		{"v: !!int \"7\"", "{\"v\":7}"},
		{"v: ! 12", "{\"v\":\"12\"}"},
		{"v: \"tab\\there \\u00e9\"", "{\"v\":\"tab\\there \\u00e9\"}"},
		{"v: |\n  a\n  b\n", "{\"v\":\"a\\nb\\n\"}"},
		{"v: >-\n  a\n  b\n", "{\"v\":\"a b\"}"},
		{"1: one\ntrue: yes\nnull: x", "{\"1\":\"one\",\"true\":\"yes\",\"null\":\"x\"}"},
		{"# comment\na: 1 # trailing\n", "{\"a\":1}"},
		{"a:\n  b:\n    - 1\n    - {c: d}\n  e: []\n", "{\"a\":{\"b\":[1,{\"c\":\"d\"}],\"e\":[]}}"},
		{"- 1\n- two\n- [3, {}]\n", "[1,\"two\",[3,{}]]"},
		{"plain scalar", "\"plain scalar\""},
		{"", "null"},
		{"---\n...\n", "null"},
		{"{\"json\": [1, 2.5, true, null, \"s\"]}", "{\"json\":[1,2.5,true,null,\"s\"]}"},
		{"base: &b {x: 1, y: [2]}\nuse: *b\nlist: [*b, *b]\n",
		 "{\"base\":{\"x\":1,\"y\":[2]},\"use\":{\"x\":1,\"y\":[2]},\"list\":[{\"x\":1,\"y\":[2]},"
		 "{\"x\":1,\"y\":[2]}]}"},
		{"a: &s hello\nb: *s\n", "{\"a\":\"hello\",\"b\":\"hello\"}"},
		{"a: &n 5\nb: *n\n", "{\"a\":5,\"b\":5}"},
		{"- &a [1]\n- &a 2\n- *a\n", "[[1],2,2]"}, /* a redefined anchor wins */
		{"k: &k name\n*k : 1\n", "{\"k\":\"name\",\"name\":1}"},
		{"&key a: 1\nb: *key\n", "{\"a\":1,\"b\":\"a\"}"},
		{"x: {a: 1}\ny: {a: 2}\n", "{\"x\":{\"a\":1},\"y\":{\"a\":2}}"}, /* same key, other maps */
	};
	for (size_t i = 0; i < ARRAY_SIZE(rows); i++)
		assert_loads_as(L_YAML, rows[i].yaml, rows[i].json);

	/* Aliases are copies: changing one does not change the other. */
	struct gpuop_error err;
	static const char doc[] = "a: &x {n: 1}\nb: *x\n";
	_cleanup_json_ json_t *j = yaml_load_buffer(doc, strlen(doc), "t.yaml", &err);
	assert_non_null(j);
	json_object_set_new(json_object_get(j, "b"), "n", json_integer(2));
	assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "a"), "n")), 1);
}

static void test_yaml_billion_laughs(void **state)
{
	(void)state;
	static const char doc[] = "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
				  "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
				  "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
				  "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
				  "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
				  "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\n"
				  "g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"
				  "h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]\n"
				  "i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]\n";
	struct gpuop_error err;
	json_t *j = yaml_load_buffer(doc, strlen(doc), "lol.yaml", &err);
	assert_null(j);
	assert_int_equal(err.domain, GPUOP_ERR_PARSE);
	assert_memory_equal(err.msg, "lol.yaml:", 9);
	assert_non_null(strstr(err.msg, "aliases expand to more than 100000 nodes"));

	/* Honest reuse well under the bound still loads. */
	static const char ok[] = "a: &a [1,2,3,4,5,6,7,8,9]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
				 "c: [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n";
	j = yaml_load_buffer(ok, strlen(ok), "ok.yaml", &err);
	assert_non_null(j);
	assert_int_equal(json_array_size(json_object_get(j, "c")), 9);
	json_decref(j);
}

static size_t append_repeat(char *out, size_t room, const char *s, int times)
{
	size_t n = 0, l = strlen(s);
	for (int i = 0; i < times; i++) {
		assert_true(n + l < room);
		memcpy(out + n, s, l + 1);
		n += l;
	}
	return n;
}

static void test_deep_nesting(void **state)
{
	(void)state;
	static char doc[200001];
	struct gpuop_error err;

	memset(doc, '[', sizeof(doc) - 1);
	doc[sizeof(doc) - 1] = '\0';
	assert_null(yaml_load_buffer(doc, strlen(doc), "deep.yaml", &err));
	assert_string_equal(err.msg, "deep.yaml:1:513: nesting deeper than 512 levels");
	assert_null(json_load_buffer(doc, strlen(doc), "deep.json", &err));
	assert_memory_equal(err.msg, "deep.json:", 10);

	/* Aliases cannot build depth past the bound either: a 300-level anchor
	 * copied under 250 more levels would nest 556 deep. */
	static char chain[8192];
	size_t n = 0;
	n += append_repeat(chain + n, sizeof(chain) - n, "a0: &a0 ", 1);
	n += append_repeat(chain + n, sizeof(chain) - n, "[", 300);
	n += append_repeat(chain + n, sizeof(chain) - n, "]", 300);
	n += append_repeat(chain + n, sizeof(chain) - n, "\nb: &b [[[[*a0]]]]\nc: [*b, *b]\n", 1);
	_cleanup_json_ json_t *j = yaml_load_buffer(chain, n, "chain.yaml", &err);
	if (!j)
		print_message("%s\n", err.msg);
	assert_non_null(j);
	n += append_repeat(chain + n, sizeof(chain) - n, "x: ", 1);
	n += append_repeat(chain + n, sizeof(chain) - n, "[", 250);
	n += append_repeat(chain + n, sizeof(chain) - n, "*b", 1);
	n += append_repeat(chain + n, sizeof(chain) - n, "]", 250);
	n += append_repeat(chain + n, sizeof(chain) - n, "\n", 1);
	assert_null(yaml_load_buffer(chain, n, "chain.yaml", &err));
	assert_non_null(strstr(err.msg, "alias *b nests deeper than 512 levels"));
}

static void test_doc_load_file(void **state)
{
	const char *dir = *state;
	char path[PATH_MAX];
	struct gpuop_error err;
	static const struct {
		const char *name;
		const char *content;
		const char *want;    /* compact JSON, or NULL for an error */
		const char *errtext; /* after "<path>" */
	} rows[] = {
		{"c.json", "{\"a\": [1, 2]}", "{\"a\":[1,2]}", NULL},
		{"c.yaml", "a:\n  - 1\n  - 2\n", "{\"a\":[1,2]}", NULL},
		{"c.YML", "a: [1, 2]\n", "{\"a\":[1,2]}", NULL},
		{"c.conf", "{\"a\": [1, 2]}", "{\"a\":[1,2]}", NULL}, /* JSON read as YAML */
		{"noext", "a: 1\n", "{\"a\":1}", NULL},
		{"bad.json", "a: 1\n", NULL, ":1:1: "},
		{"bad.yaml", "a: 1\nb: [\n", NULL, ":3:1: "},
		{"big.yaml", "a: 0123456789012345678901234567890123456789012345678901234567890123\n", NULL,
		 ": file is larger than the limit of 64 bytes"},
	};

	for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
		path_join(path, sizeof(path), dir, rows[i].name);
		write_plain(path, rows[i].content);
		_cleanup_json_ json_t *j = doc_load_file(path, 64, &err);
		if (rows[i].want) {
			if (!j)
				print_message("%s: %s\n", rows[i].name, err.msg);
			assert_non_null(j);
			_cleanup_free_ char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
			assert_string_equal(s, rows[i].want);
		} else {
			char want[PATH_MAX + 128];
			assert_null(j);
			snprintf(want, sizeof(want), "%s%s", path, rows[i].errtext);
			if (strncmp(err.msg, want, strlen(want)) != 0)
				print_message("%s: got \"%s\"\n", rows[i].name, err.msg);
			assert_memory_equal(err.msg, want, strlen(want));
		}
	}
	path_join(path, sizeof(path), dir, "missing.yaml");
	assert_null(doc_load_file(path, 64, &err));
	assert_true(error_is(&err, GPUOP_ERR_ERRNO, ENOENT));
	assert_non_null(strstr(err.msg, path));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_error_chain),
		cmocka_unit_test(test_error_overflow_keeps_root_cause),
		cmocka_unit_test(test_error_errno),
		cmocka_unit_test(test_log_text),
		cmocka_unit_test(test_log_json),
		cmocka_unit_test(test_log_level_filter),
		cmocka_unit_test(test_log_long_line_truncated),
		cmocka_unit_test_setup_teardown(test_log_threads, tmpdir_setup, tmpdir_teardown),
		cmocka_unit_test(test_buf_cap),
		cmocka_unit_test(test_buf_printf_growth),
		cmocka_unit_test_setup_teardown(test_buf_read_file, tmpdir_setup, tmpdir_teardown),
		cmocka_unit_test_setup_teardown(test_atomic_write_success, tmpdir_setup, tmpdir_teardown),
		cmocka_unit_test_setup_teardown(test_atomic_write_plain_failures, tmpdir_setup,
						tmpdir_teardown),
		cmocka_unit_test_setup_teardown(test_atomic_write_readonly_bind, tmpdir_setup,
						tmpdir_teardown),
		cmocka_unit_test_setup_teardown(test_atomic_write_readonly_uid, tmpdir_setup,
						tmpdir_teardown),
		cmocka_unit_test_setup_teardown(test_atomic_write_disk_full, tmpdir_setup,
						tmpdir_teardown),
		cmocka_unit_test_setup_teardown(test_atomic_write_fsize_limit, tmpdir_setup,
						tmpdir_teardown),
		cmocka_unit_test_setup_teardown(test_mkdir_p, tmpdir_setup, tmpdir_teardown),
		cmocka_unit_test(test_load_errors),
		cmocka_unit_test(test_yaml_typing),
		cmocka_unit_test(test_yaml_billion_laughs),
		cmocka_unit_test(test_deep_nesting),
		cmocka_unit_test_setup_teardown(test_doc_load_file, tmpdir_setup, tmpdir_teardown),
	};
	return cmocka_run_group_tests_name("base", tests, NULL, NULL);
}
