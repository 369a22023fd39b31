/* SPDX-License-Identifier: Apache-2.0 */
/* must-gather's archive writer and redaction (gather.h). */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <zlib.h>

#include "base/cleanup.h"
#include "base/fileio.h"
#include "doctor/gather.h"

/* ------------------------------------------------------------ redaction */

static bool has_ci(const char *s, size_t len, const char *needle)
{
	size_t n = strlen(needle);
	for (size_t i = 0; i + n <= len; i++)
		if (strncasecmp(s + i, needle, n) == 0)
			return true;
	return false;
}

bool gather_secret_name(const char *name, size_t len)
{
	static const char *const words[] = {"token",  "password", "passwd", "secret",
					    "credential", "private", "apikey", "api_key",
					    "api-key", "authorization", "key-data", "key_data",
					    "keydata"};
	while (len && name[0] == '-') { /* "--token": a command-line flag */
		name++;
		len--;
	}
	for (size_t i = 0; i < ARRAY_SIZE(words); i++)
		if (has_ci(name, len, words[i]))
			return true;
	/* "auth" on its own or as the last word ("auth", "basic_auth"): the
	 * base64 user:password of a registry login in containerd's config and
	 * in .dockerconfigjson.  Not "author" or "oauth2" in the middle. */
	if (len >= 4 && strncasecmp(name + len - 4, "auth", 4) == 0 &&
	    (len == 4 || name[len - 5] == '-' || name[len - 5] == '_' || name[len - 5] == '.'))
		return true;
	/* "client-key", "ssh_key", "AWS_ACCESS_KEY", "accessKey"; but neither
	 * "key" itself nor words that merely end in it ("monkey"). */
	if (len <= 3 || strncasecmp(name + len - 3, "key", 3) != 0)
		return false;
	char before = name[len - 4];
	return before == '-' || before == '_' || before == '.' ||
	       (name[len - 3] == 'K' && islower((unsigned char)before));
}

static bool ident_char(char c)
{
	return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.';
}

static bool b64url_char(char c)
{
	return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '=' || c == '+' || c == '/';
}

static const char *memmem_s(const char *h, size_t hl, const char *n)
{
	return memmem(h, hl, n, strlen(n));
}

/* At in[i], a PEM block: its length up to the closing dashes, else 0. */
static size_t pem_len(const char *in, size_t len, size_t i)
{
	if (len - i < 11 || memcmp(in + i, "-----BEGIN ", 11) != 0)
		return 0;
	const char *end = memmem_s(in + i, len - i, "-----END ");
	if (!end)
		return len - i; /* unterminated: everything after it may be key material */
	size_t j = (size_t)(end - in) + 9;
	const char *close = memmem_s(in + j, len - j, "-----");
	return close ? (size_t)(close - in) + 5 - i : len - i;
}

/* At in[i], a base64-encoded PEM block ("LS0tLS1CRUdJTi" is "-----BEGIN"
 * in base64): a key under a field name nobody would call secret. */
static size_t pem64_len(const char *in, size_t len, size_t i)
{
	static const char tag[] = "LS0tLS1CRUdJTi";
	if (len - i < sizeof(tag) - 1 || memcmp(in + i, tag, sizeof(tag) - 1) != 0 ||
	    (i && b64url_char(in[i - 1])))
		return 0;
	size_t j = i;
	/* "\n" escapes too: a JSON string of wrapped base64 */
	while (j < len && (b64url_char(in[j]) || (in[j] == '\\' && j + 1 < len && in[j + 1] == 'n')))
		j += in[j] == '\\' ? 2 : 1;
	return j - i;
}

/* At in[i], a JWT (eyJ....): its length, else 0. */
static size_t jwt_len(const char *in, size_t len, size_t i)
{
	if (len - i < 20 || memcmp(in + i, "eyJ", 3) != 0 || (i && b64url_char(in[i - 1])))
		return 0;
	size_t j = i, dots = 0;
	while (j < len && (b64url_char(in[j]) || in[j] == '.'))
		dots += in[j++] == '.';
	return dots >= 2 && j - i >= 20 ? j - i : 0;
}

/* A secret that is recognisable by its shape alone, wherever it stands. */
static size_t shape_len(const char *in, size_t len, size_t i)
{
	size_t n;
	if ((n = pem_len(in, len, i)) || (n = pem64_len(in, len, i)) || (n = jwt_len(in, len, i)))
		return n;
	return 0;
}

/* At in[i], "://user:password@": the offsets of the password, so a proxy
 * or registry URL keeps its user and host.  Returns false when there is
 * no password in the URL. */
static bool url_password(const char *in, size_t len, size_t i, size_t *from, size_t *to)
{
	if (len - i < 3 || memcmp(in + i, "://", 3) != 0)
		return false;
	size_t colon = 0;
	for (size_t j = i + 3; j < len; j++) {
		char c = in[j];
		if (c == '@') {
			if (!colon || j == colon + 1)
				return false;
			*from = colon + 1;
			*to = j;
			return true;
		}
		if (c == '/' || c == '?' || c == '#' || c == '"' || c == '\'' || isspace((unsigned char)c))
			return false;
		if (c == ':' && !colon)
			colon = j;
	}
	return false;
}

/* Column of in[i] on its line (indentation and a list's "- " count).  A
 * line start further back than 4 KiB is taken as column 0: it only makes
 * a block scalar's redaction reach further, and keeps this linear. */
static size_t indent_of_line(const char *in, size_t i)
{
	size_t b = i;
	while (b && in[b - 1] != '\n') {
		if (i - b >= 4096)
			return 0;
		b--;
	}
	size_t n = 0;
	while (b + n < i && (in[b + n] == ' ' || in[b + n] == '\t' || in[b + n] == '-'))
		n++;
	return n;
}

/* After a YAML block scalar indicator ("|", ">-") at in[v]: the end of the
 * block, i.e. of every following line indented deeper than `indent` (blank
 * lines inside included). */
static size_t yaml_block_end(const char *in, size_t len, size_t v, size_t indent)
{
	size_t k = v;
	while (k < len && in[k] != '\n')
		k++;
	while (k < len) {
		size_t l = k + 1, sp = 0;
		while (l + sp < len && in[l + sp] == ' ')
			sp++;
		if (l + sp >= len) {
			k = len;
			break;
		}
		if (in[l + sp] != '\n' && sp <= indent)
			break;
		k = l + sp;
		while (k < len && in[k] != '\n')
			k++;
	}
	return k;
}

/* At a ',' inside an unquoted value: does a new `key:` or `"key"` follow?
 * Then the value ended; otherwise the comma is part of it. */
static bool comma_ends_value(const char *in, size_t len, size_t k)
{
	size_t j = k + 1;
	while (j < len && (in[j] == ' ' || in[j] == '\t'))
		j++;
	if (j >= len || in[j] == '\n' || in[j] == '\r' || in[j] == '"' || in[j] == '\'' || in[j] == '{')
		return true;
	size_t s = j;
	while (j < len && ident_char(in[j]))
		j++;
	if (j == s)
		return false;
	while (j < len && (in[j] == ' ' || in[j] == '\t'))
		j++;
	return j < len && (in[j] == ':' || in[j] == '=');
}

/* Copy in[s, v) (the name and its separator) then the mark. */
static int put_redacted(struct buf *out, const char *in, size_t s, size_t v, struct gpuop_error *err)
{
	if (buf_append(out, in + s, v - s, err) < 0 || buf_puts(out, GATHER_REDACTED, err) < 0)
		return -1;
	return 0;
}

/* The end of a value starting at in[v]: quoted (to the closing quote, or
 * the line's end), a YAML block scalar, or plain (to the line's end, a
 * '}' or ';', or a ',' before the next key).  *keep is 1 when the
 * opening quote is kept, so the result stays readable.  key: where the
 * value's name starts (a block scalar ends where the indentation does). */
static size_t value_end(const char *in, size_t len, size_t v, size_t key, size_t *keep)
{
	*keep = 0;
	if (v < len && (in[v] == '"' || in[v] == '\'')) {
		char q = in[v];
		size_t k = v + 1;
		while (k < len && in[k] != '\n') {
			if (q == '"' && in[k] == '\\' && k + 1 < len) {
				k += 2;
				continue;
			}
			if (in[k] == q) {
				if (q == '\'' && k + 1 < len && in[k + 1] == '\'') { /* YAML '' */
					k += 2;
					continue;
				}
				break;
			}
			k++;
		}
		*keep = 1;
		return k;
	}
	if (v < len && (in[v] == '|' || in[v] == '>'))
		return yaml_block_end(in, len, v, indent_of_line(in, key));
	size_t k = v;
	while (k < len && in[k] != '\n' && in[k] != '\r' && in[k] != '}' && in[k] != ';' &&
	       !(in[k] == ',' && comma_ends_value(in, len, k)))
		k++;
	return k;
}

int gather_redact_text(const char *in, size_t len, struct buf *out, struct gpuop_error *err)
{
	int count = 0;
	size_t i = 0;
	/* A `name: API_TOKEN` was seen: its `value:` is the secret (env lists
	 * in YAML and in JSON that a log or an annotation carries). */
	bool pending_value = false;

	buf_reset(out);
	if (buf_append(out, "", 0, err) < 0)
		return -1;
	while (i < len) {
		size_t n, from, to;
		if ((n = shape_len(in, len, i))) {
			if (buf_puts(out, GATHER_REDACTED, err) < 0)
				return -1;
			i += n;
			count++;
			continue;
		}
		if (url_password(in, len, i, &from, &to)) {
			if (put_redacted(out, in, i, from, err) < 0)
				return -1;
			i = to;
			count++;
			continue;
		}
		if (len - i > 7 && strncasecmp(in + i, "bearer ", 7) == 0 &&
		    (i == 0 || !ident_char(in[i - 1]))) {
			size_t j = i + 7;
			while (j < len && in[j] == ' ')
				j++;
			size_t start = j;
			while (j < len && !isspace((unsigned char)in[j]) && in[j] != '"' && in[j] != '\'' &&
			       in[j] != ',')
				j++;
			if (j > start) {
				if (put_redacted(out, in, i, i + 7, err) < 0)
					return -1;
				i = j;
				count++;
				continue;
			}
		}
		if (in[i] == '}')
			pending_value = false;
		/* name [quote] [spaces] (: or =) value, or --flag value */
		if (ident_char(in[i]) && (i == 0 || !ident_char(in[i - 1]))) {
			size_t s = i, e = i;
			/* A name ends where a secret's shape begins: "x-----BEGIN"
			 * must not hide the block inside a word. */
			while (e < len && ident_char(in[e]) && (e == s || !shape_len(in, len, e)))
				e++;
			size_t j = e;
			if (j < len && (in[j] == '"' || in[j] == '\''))
				j++;
			while (j < len && (in[j] == ' ' || in[j] == '\t'))
				j++;
			bool secret = gather_secret_name(in + s, e - s);
			bool sep = j < len && (in[j] == ':' || in[j] == '=');
			bool is_name = e - s == 4 && strncmp(in + s, "name", 4) == 0;
			bool is_value = e - s == 5 && strncmp(in + s, "value", 5) == 0;
			if (sep && (secret || (is_value && pending_value))) {
				j++;
				while (j < len && (in[j] == ' ' || in[j] == '\t'))
					j++;
				size_t keep, k = value_end(in, len, j, s, &keep);
				if (k > j + keep) {
					if (put_redacted(out, in, s, j + keep, err) < 0)
						return -1;
					i = k;
					count++;
					pending_value = false;
					continue;
				}
			} else if (sep && is_name) {
				j++;
				while (j < len && (in[j] == ' ' || in[j] == '\t' || in[j] == '"' || in[j] == '\''))
					j++;
				size_t v = j;
				while (j < len && ident_char(in[j]))
					j++;
				pending_value = j > v && gather_secret_name(in + v, j - v);
			} else if (secret && in[s] == '-' && e < len && in[e] == ' ') {
				/* "--password hunter2": the next word is the value */
				size_t v = e;
				while (v < len && in[v] == ' ')
					v++;
				size_t k = v;
				while (k < len && !isspace((unsigned char)in[k]) && in[k] != '"' && in[k] != '\'')
					k++;
				if (k > v && in[v] != '-') {
					if (put_redacted(out, in, s, v, err) < 0)
						return -1;
					i = k;
					count++;
					continue;
				}
			}
			if (buf_append(out, in + s, e - s, err) < 0)
				return -1;
			i = e;
			continue;
		}
		if (buf_append(out, in + i, 1, err) < 0)
			return -1;
		i++;
	}
	return count;
}

static size_t redact_walk(json_t *v, int depth);

/* Room for the redacted copy of len bytes: each redaction can turn one
 * byte into GATHER_REDACTED. */
#define REDACT_CAP(len) ((len) * (sizeof(GATHER_REDACTED) + 1) + 4096)

static size_t redact_string(json_t *s, int depth)
{
	struct buf b;
	struct gpuop_error e;
	const char *v = json_string_value(s);
	size_t len = json_string_length(s);

	/* A string that is itself JSON (kubectl's last-applied-configuration
	 * annotation repeats the whole object, env values included): redact
	 * it as JSON, field by field. */
	size_t lead = 0;
	while (lead < len && isspace((unsigned char)v[lead]))
		lead++;
	if (lead < len && (v[lead] == '{' || v[lead] == '[')) {
		json_t *doc = json_loadb(v, len, JSON_DECODE_ANY, NULL);
		if (doc) {
			size_t n = redact_walk(doc, depth + 1);
			char *text = n ? json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
			json_decref(doc);
			if (n) {
				json_string_set(s, text ? text : GATHER_REDACTED);
				free(text);
			}
			return n;
		}
	}
	buf_init(&b, REDACT_CAP(len));
	int n = gather_redact_text(v, len, &b, &e);
	if (n > 0)
		json_string_setn(s, b.data, b.len);
	else if (n < 0)
		json_string_set(s, GATHER_REDACTED); /* could not tell: keep nothing */
	buf_free(&b);
	return n < 0 ? 1 : (size_t)n;
}

static size_t redact_env(json_t *env)
{
	size_t i, n = 0;
	json_t *e;
	json_array_foreach(env, i, e)
	{
		const char *name = json_string_value(json_object_get(e, "name"));
		json_t *val = json_object_get(e, "value");
		if (name && json_is_string(val) && gather_secret_name(name, strlen(name)) &&
		    strcmp(json_string_value(val), GATHER_REDACTED) != 0) {
			json_string_set(val, GATHER_REDACTED);
			n++;
		}
	}
	return n;
}

/* Is this array element a flag whose value is the next element
 * (["--token", "abc"])?  "--token=abc" is the text redactor's. */
static bool secret_flag(const json_t *x)
{
	const char *f = json_string_value(x);
	return f && f[0] == '-' && !strchr(f, '=') && gather_secret_name(f, strlen(f));
}

static size_t redact_walk(json_t *v, int depth)
{
	size_t n = 0;
	if (depth > 256)
		return 0;
	if (json_is_string(v))
		return redact_string(v, depth);
	if (json_is_array(v)) {
		size_t i;
		json_t *x;
		bool after_flag = false;
		json_array_foreach(v, i, x)
		{
			if (after_flag && json_is_string(x) && json_string_value(x)[0] != '-') {
				json_string_set(x, GATHER_REDACTED);
				n++;
				after_flag = false;
				continue;
			}
			after_flag = secret_flag(x);
			n += redact_walk(x, depth + 1);
		}
		return n;
	}
	if (!json_is_object(v))
		return 0;
	const char *kind = json_string_value(json_object_get(v, "kind"));
	if (kind && strcmp(kind, "Secret") == 0) {
		static const char *const maps[] = {"data", "stringData"};
		for (size_t m = 0; m < ARRAY_SIZE(maps); m++) {
			const char *k;
			json_t *x;
			json_object_foreach(json_object_get(v, maps[m]), k, x)
			{
				json_object_set_new(json_object_get(v, maps[m]), k, json_string(GATHER_REDACTED));
				n++;
			}
		}
		json_t *ann = json_object_get(json_object_get(v, "metadata"), "annotations");
		if (json_object_get(ann, "kubectl.kubernetes.io/last-applied-configuration")) {
			json_object_set_new(ann, "kubectl.kubernetes.io/last-applied-configuration",
					    json_string(GATHER_REDACTED));
			n++;
		}
	}
	const char *k;
	json_t *x;
	json_object_foreach(v, k, x)
	{
		bool secret = gather_secret_name(k, strlen(k));
		if (secret && json_is_string(x) && strcmp(json_string_value(x), GATHER_REDACTED) != 0) {
			json_string_set(x, GATHER_REDACTED);
			n++;
			continue;
		}
		if (secret && json_is_array(x)) { /* "tokens": ["...", ...] */
			size_t i;
			json_t *y;
			json_array_foreach(x, i, y) if (json_is_string(y) &&
							 strcmp(json_string_value(y), GATHER_REDACTED) != 0)
			{
				json_string_set(y, GATHER_REDACTED);
				n++;
			}
		}
		if (strcmp(k, "env") == 0 && json_is_array(x))
			n += redact_env(x);
		n += redact_walk(x, depth + 1);
	}
	return n;
}

size_t gather_redact_json(json_t *doc)
{
	return redact_walk(doc, 0);
}

/* ------------------------------------------------------------- tar.gz */

struct gather_tar {
	struct atomic_file file; /* the archive's temp file until finish renames it */
	z_stream z;
	bool z_ready;
	unsigned char out[64 * 1024];
	time_t now;
};

static int tar_write(struct gather_tar *t, const void *data, size_t len, int flush,
		     struct gpuop_error *err)
{
	t->z.next_in = (Bytef *)data;
	t->z.avail_in = (uInt)len;
	do {
		t->z.next_out = t->out;
		t->z.avail_out = sizeof(t->out);
		int rc = deflate(&t->z, flush);
		if (rc == Z_STREAM_ERROR)
			return error_set(err, GPUOP_ERR_GENERIC, rc, "%s: gzip: %s", t->file.path,
					 t->z.msg ? t->z.msg : "stream error");
		size_t have = sizeof(t->out) - t->z.avail_out;
		for (size_t off = 0; off < have;) {
			ssize_t w = write(t->file.fd, t->out + off, have - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0)
				return error_errno(err, errno, "writing %s", t->file.tmp);
			off += (size_t)w;
		}
	} while (t->z.avail_out == 0 || (flush == Z_FINISH && t->z.avail_in > 0));
	return 0;
}

static int tar_feed(struct gather_tar *t, const void *data, size_t len, struct gpuop_error *err)
{
	/* zlib takes uInt lengths: feed large members in pieces. */
	const char *p = data;
	while (len) {
		size_t n = len > (1u << 30) ? (1u << 30) : len;
		if (tar_write(t, p, n, Z_NO_FLUSH, err) < 0)
			return -1;
		p += n;
		len -= n;
	}
	return 0;
}

int gather_tar_open(const char *path, struct gather_tar **out, struct gpuop_error *err)
{
	_cleanup_free_ struct gather_tar *t = calloc(1, sizeof(*t));
	if (!t)
		return error_errno(err, ENOMEM, "%s", path);
	if (atomic_file_open(&t->file, path, err) < 0)
		return -1;
	if (deflateInit2(&t->z, 6, Z_DEFLATED, 15 + 16 /* gzip header */, 8, Z_DEFAULT_STRATEGY) !=
	    Z_OK) {
		atomic_file_abort(&t->file);
		return error_set(err, GPUOP_ERR_GENERIC, 0, "%s: gzip: cannot initialise zlib", path);
	}
	t->z_ready = true;
	t->now = time(NULL);
	*out = TAKE_PTR(t);
	return 0;
}

static void octal(char *field, size_t width, unsigned long long v)
{
	/* width-1 digits, zero-padded, then NUL */
	snprintf(field, width, "%0*llo", (int)width - 1, v);
}

/* Where a ustar name longer than 100 bytes is split into prefix and
 * name: a '/' with at most 155 bytes before it and 1..100 after.  NULL
 * when there is none. */
static const char *ustar_cut(const char *name)
{
	const char *cut = NULL;
	for (const char *p = name; *p; p++)
		if (*p == '/' && (size_t)(p - name) <= 155 && p[1] && strlen(p + 1) <= 100) {
			cut = p;
			break; /* the first fits: the longest name part, the shortest prefix */
		}
	return cut;
}

int gather_tar_check_name(const char *name, struct gpuop_error *err)
{
	size_t nlen = strlen(name);
	if (nlen == 0 || name[0] == '/')
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "archive member \"%s\": expected a relative path", name);
	/* ".." as a path component would let extraction escape the archive's
	 * folder; "a..b" is just a name. */
	for (const char *p = name; *p;) {
		size_t n = strcspn(p, "/");
		if (n == 2 && p[0] == '.' && p[1] == '.')
			return error_set(err, GPUOP_ERR_GENERIC, 0,
					 "archive member \"%s\": \"..\" in a relative path", name);
		p += n + (p[n] == '/');
	}
	if (nlen > 100 && !ustar_cut(name))
		return error_set(err, GPUOP_ERR_GENERIC, 0,
				 "archive member \"%s\": name too long for ustar (at most 100 bytes "
				 "after the last 155-byte folder prefix)",
				 name);
	return 0;
}

int gather_tar_add(struct gather_tar *t, const char *name, const void *data, size_t len,
		   struct gpuop_error *err)
{
	unsigned char h[512] = {0};
	size_t nlen = strlen(name);
	const char *base = name;
	size_t plen = 0;

	if (gather_tar_check_name(name, err) < 0)
		return -1;
	if (nlen > 100) {
		const char *cut = ustar_cut(name);
		plen = (size_t)(cut - name);
		base = cut + 1;
	}
	if (len > 077777777777ull)
		return error_set(err, GPUOP_ERR_GENERIC, 0, "archive member %s: larger than 8 GiB", name);
	memcpy(h, base, strlen(base));
	octal((char *)h + 100, 8, 0644);
	octal((char *)h + 108, 8, 0);
	octal((char *)h + 116, 8, 0);
	octal((char *)h + 124, 12, len);
	octal((char *)h + 136, 12, (unsigned long long)t->now);
	memset(h + 148, ' ', 8);
	h[156] = '0';
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	memcpy(h + 265, "root", 4);
	memcpy(h + 297, "root", 4);
	if (plen)
		memcpy(h + 345, name, plen);
	unsigned int sum = 0;
	for (size_t i = 0; i < sizeof(h); i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	h[155] = ' ';
	static const unsigned char zeros[512];
	if (tar_feed(t, h, sizeof(h), err) < 0 || tar_feed(t, data, len, err) < 0 ||
	    tar_feed(t, zeros, (512 - len % 512) % 512, err) < 0)
		return error_wrap(err, "archive member %s", name);
	return 0;
}

void gather_tar_abort(struct gather_tar *t)
{
	if (!t)
		return;
	if (t->z_ready)
		deflateEnd(&t->z);
	atomic_file_abort(&t->file);
	free(t);
}

int gather_tar_finish(struct gather_tar *t, struct gpuop_error *err)
{
	static const unsigned char zeros[1024];
	if (tar_feed(t, zeros, sizeof(zeros), err) < 0 || tar_write(t, NULL, 0, Z_FINISH, err) < 0)
		goto fail;
	/* 0600: the archive holds a node's logs and config, redacted or not. */
	if (atomic_file_commit(&t->file, 0600, err) < 0)
		goto fail;
	deflateEnd(&t->z);
	free(t);
	return 0;
fail:
	gather_tar_abort(t);
	return -1;
}
