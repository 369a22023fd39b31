/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Interned, reference-counted strings for informer caches.  5,000 GPU nodes
 * carry the same few hundred label keys and values; each is stored once and
 * items hold pointers to it.  A chained hash table keyed by FNV-1a; the
 * informer's lock serialises every call (project/release run under it).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kube.h"
#include "kube/objects.h"

struct pool_entry {
	struct pool_entry *next;
	uint32_t hash;
	uint32_t refs;
	char s[];
};

struct kube_strpool {
	struct pool_entry **buckets;
	size_t nbuckets; /* a power of two */
	size_t count;
	size_t bytes; /* entries + bucket array, for stats and the bench */
};

static uint32_t fnv1a(const char *s, size_t *len)
{
	uint32_t h = 2166136261u;
	const unsigned char *p = (const unsigned char *)s;
	for (; *p; p++) {
		h ^= *p;
		h *= 16777619u;
	}
	*len = (size_t)(p - (const unsigned char *)s);
	return h;
}

struct kube_strpool *kube_strpool_new(void)
{
	struct kube_strpool *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->nbuckets = 64;
	p->buckets = calloc(p->nbuckets, sizeof(*p->buckets));
	if (!p->buckets) {
		free(p);
		return NULL;
	}
	p->bytes = sizeof(*p) + p->nbuckets * sizeof(*p->buckets);
	return p;
}

void kube_strpool_free(struct kube_strpool *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nbuckets; i++) {
		struct pool_entry *e = p->buckets[i];
		while (e) {
			struct pool_entry *next = e->next;
			free(e);
			e = next;
		}
	}
	free(p->buckets);
	free(p);
}

/* Doubling keeps chains short; a failed grow only costs speed. */
static void grow(struct kube_strpool *p)
{
	size_t n = p->nbuckets * 2;
	struct pool_entry **b = calloc(n, sizeof(*b));
	if (!b)
		return;
	for (size_t i = 0; i < p->nbuckets; i++) {
		struct pool_entry *e = p->buckets[i];
		while (e) {
			struct pool_entry *next = e->next;
			size_t j = e->hash & (n - 1);
			e->next = b[j];
			b[j] = e;
			e = next;
		}
	}
	free(p->buckets);
	p->bytes += (n - p->nbuckets) * sizeof(*b);
	p->buckets = b;
	p->nbuckets = n;
}

const char *kube_strpool_intern(struct kube_strpool *p, const char *s)
{
	if (!s)
		s = "";
	size_t len;
	uint32_t h = fnv1a(s, &len);
	for (struct pool_entry *e = p->buckets[h & (p->nbuckets - 1)]; e; e = e->next) {
		if (e->hash == h && strcmp(e->s, s) == 0) {
			/* Saturate rather than wrap: a string pinned forever is
			 * better than one freed while still in use. */
			if (e->refs < UINT32_MAX)
				e->refs++;
			return e->s;
		}
	}
	struct pool_entry *e = malloc(sizeof(*e) + len + 1);
	if (!e)
		return NULL;
	e->hash = h;
	e->refs = 1;
	memcpy(e->s, s, len + 1);
	size_t i = h & (p->nbuckets - 1);
	e->next = p->buckets[i];
	p->buckets[i] = e;
	p->count++;
	p->bytes += sizeof(*e) + len + 1;
	if (p->count > p->nbuckets)
		grow(p);
	return e->s;
}

static struct pool_entry **find_slot(const struct kube_strpool *p, const char *s)
{
	size_t len;
	uint32_t h = fnv1a(s, &len);
	struct pool_entry **slot = &p->buckets[h & (p->nbuckets - 1)];
	/* Compare pointers, not text: only a pointer the pool handed out may
	 * be released, and a stray one must not drop someone else's ref. */
	for (; *slot; slot = &(*slot)->next)
		if ((*slot)->s == s)
			return slot;
	return NULL;
}

void kube_strpool_release(struct kube_strpool *p, const char *s)
{
	if (!p || !s)
		return;
	struct pool_entry **slot = find_slot(p, s);
	if (!slot)
		return;
	struct pool_entry *e = *slot;
	if (e->refs == UINT32_MAX)
		return;
	if (--e->refs > 0)
		return;
	*slot = e->next;
	p->count--;
	p->bytes -= sizeof(*e) + strlen(e->s) + 1;
	free(e);
}

size_t kube_strpool_bytes(const struct kube_strpool *p)
{
	return p ? p->bytes : 0;
}

size_t kube_strpool_count(const struct kube_strpool *p)
{
	return p ? p->count : 0;
}

unsigned kube_strpool_refs(const struct kube_strpool *p, const char *s)
{
	if (!p || !s)
		return 0;
	struct pool_entry **slot = find_slot(p, s);
	return slot ? (*slot)->refs : 0;
}
