/* SPDX-License-Identifier: Apache-2.0 */
/*
 * GetPreferredAllocation.
 *
 * Whole GPUs: the set with the best sum of pair scores, a pair scoring 100
 * per NVLink between the two plus its PCI common ancestor (go-gpuallocator's
 * values).  Instead of go-gpuallocator's search over partitions of all GPUs
 * (combinatorial, "seconds" in #460), the best set is found directly: a
 * depth-first walk over the combinations of the free slots with the pair
 * matrix computed once from the GPU model (no NVML call per request).  For
 * 8 GPUs that is at most 70 sets.  Past a bound it falls back to greedy.
 *
 * Replicas and MIG devices: greedy per physical GPU; distributed takes the
 * GPU with the fewest replicas already allocated, packed the most; ties go
 * to the GPU picked least in this call, then to kubelet's order.
 *
 * An unhealthy or unknown ID is never returned (#2038: one lost GPU made
 * every aligned request fail); the answer is advisory, so when there are
 * not enough devices we return fewer rather than an error.
 */
#include <stdlib.h>
#include <string.h>

#include "base/cleanup.h"
#include "deviceplugin/deviceplugin.h"

#define EXHAUSTIVE_MAX 200000ull

/* go-gpuallocator's scores per nvmlGpuTopologyLevel_t. */
static const struct {
	int level;
	unsigned int score;
} ancestor_scores[] = {
	{NVML_TOPOLOGY_INTERNAL, 60}, {NVML_TOPOLOGY_SINGLE, 50}, {NVML_TOPOLOGY_MULTIPLE, 40},
	{NVML_TOPOLOGY_HOSTBRIDGE, 30}, {NVML_TOPOLOGY_NODE, 20}, {NVML_TOPOLOGY_SYSTEM, 10},
};

unsigned int dp_pair_score(const struct gpu_node *node, size_t a, size_t b)
{
	if (!node->topo || a >= node->ngpus || b >= node->ngpus || a == b)
		return 0;
	const struct gpu_pair *p = gpu_pair_at(node, a, b);
	unsigned int s = 100 * p->nvlinks;
	for (size_t i = 0; i < ARRAY_SIZE(ancestor_scores); i++)
		if (ancestor_scores[i].level == p->level)
			s += ancestor_scores[i].score;
	return s;
}

struct pick {
	const char *id;
	const struct dp_device *dev;
};

/* Valid, healthy, de-duplicated entries of ids[]. */
static size_t filter(const struct dp_alloc_env *env, const struct dp_resource *res,
		     const char *const *ids, size_t n, struct pick *out, size_t have)
{
	size_t k = have;
	for (size_t i = 0; i < n; i++) {
		const struct dp_device *d = dp_resource_find(res, ids[i]);
		if (!d || (env->healthy && !env->healthy(env->ud, d)))
			continue;
		bool dup = false;
		for (size_t j = 0; j < k && !dup; j++)
			dup = out[j].dev == d;
		if (!dup)
			out[k++] = (struct pick){ids[i], d};
	}
	return k;
}

struct search {
	const unsigned int *score; /* m x m over cand, plus must sums */
	const unsigned int *must_gain; /* per cand: sum of scores to the must set */
	size_t m, need;
	size_t cur[64], best[64];
	unsigned long long best_score;
	bool found;
};

static void dfs(struct search *s, size_t start, size_t depth, unsigned long long acc)
{
	if (depth == s->need) {
		if (!s->found || acc > s->best_score) {
			s->found = true;
			s->best_score = acc;
			memcpy(s->best, s->cur, sizeof(s->cur[0]) * depth);
		}
		return;
	}
	for (size_t i = start; i + (s->need - depth) <= s->m; i++) {
		unsigned long long add = s->must_gain[i];
		for (size_t j = 0; j < depth; j++)
			add += s->score[s->cur[j] * s->m + i];
		s->cur[depth] = i;
		dfs(s, i + 1, depth + 1, acc + add);
	}
}

static unsigned long long choose(size_t m, size_t k)
{
	unsigned long long r = 1;
	for (size_t i = 1; i <= k; i++) {
		r = r * (m - k + i) / i;
		if (r > EXHAUSTIVE_MAX)
			return r;
	}
	return r;
}

/* Whole GPUs: picks[0..nmust) are fixed; choose `need` of picks[nmust..n). */
static size_t best_set(const struct gpu_node *node, struct pick *picks, size_t nmust, size_t n,
		       size_t need, const char **out)
{
	size_t m = n - nmust, k = 0;
	_cleanup_free_ unsigned int *score = calloc(m * m + 1, sizeof(*score));
	_cleanup_free_ unsigned int *gain = calloc(m + 1, sizeof(*gain));

	for (size_t i = 0; i < nmust; i++)
		out[k++] = picks[i].id;
	if (!score || !gain || need == 0)
		return k;
	struct pick *cand = picks + nmust;
	for (size_t i = 0; i < m; i++) {
		for (size_t j = 0; j < m; j++)
			score[i * m + j] = dp_pair_score(node, (size_t)cand[i].dev->gpu,
							 (size_t)cand[j].dev->gpu);
		for (size_t j = 0; j < nmust; j++)
			gain[i] += dp_pair_score(node, (size_t)cand[i].dev->gpu,
						 (size_t)picks[j].dev->gpu);
	}
	if (need < 64 && choose(m, need) <= EXHAUSTIVE_MAX) {
		struct search s = {.score = score, .must_gain = gain, .m = m, .need = need};
		dfs(&s, 0, 0, 0);
		for (size_t i = 0; i < need; i++)
			out[k++] = cand[s.best[i]].id;
		return k;
	}
	/* Greedy: add the candidate that gains most against what is chosen. */
	_cleanup_free_ bool *used = calloc(m, sizeof(*used));
	_cleanup_free_ size_t *chosen = calloc(need, sizeof(*chosen));
	if (!used || !chosen)
		return k;
	for (size_t c = 0; c < need; c++) {
		size_t bi = m;
		unsigned long long bs = 0;
		for (size_t i = 0; i < m; i++) {
			if (used[i])
				continue;
			unsigned long long g = gain[i];
			for (size_t j = 0; j < c; j++)
				g += score[chosen[j] * m + i];
			if (bi == m || g > bs) {
				bi = i;
				bs = g;
			}
		}
		used[bi] = true;
		chosen[c] = bi;
		out[k++] = cand[bi].id;
	}
	return k;
}

/* Replicas and MIG: greedy over physical GPUs. */
static size_t greedy(const struct dp_alloc_env *env, const struct dp_resource *res,
		     struct pick *picks, size_t nmust, size_t n, size_t size, const char **out)
{
	size_t ngpus = env->node->ngpus, k = 0;
	_cleanup_free_ long *allocated = calloc(ngpus + 1, sizeof(*allocated));
	_cleanup_free_ long *picked = calloc(ngpus + 1, sizeof(*picked));
	_cleanup_free_ bool *used = calloc(n + 1, sizeof(*used));

	if (!allocated || !picked || !used)
		return 0;
	/* allocated = advertised on that GPU - offered as available now */
	for (size_t i = 0; i < res->ndevs; i++)
		allocated[res->devs[i].gpu]++;
	for (size_t i = 0; i < n; i++)
		allocated[picks[i].dev->gpu]--;
	for (size_t i = 0; i < nmust && k < size; i++) {
		used[i] = true;
		out[k++] = picks[i].id;
		allocated[picks[i].dev->gpu]++;
		picked[picks[i].dev->gpu]++;
	}
	while (k < size) {
		size_t bi = n;
		for (size_t i = nmust; i < n; i++) {
			if (used[i])
				continue;
			if (bi == n) {
				bi = i;
				continue;
			}
			int g = picks[i].dev->gpu, b = picks[bi].dev->gpu;
			long d = allocated[g] - allocated[b];
			if (env->cfg->share_policy == DP_SHARE_PACKED)
				d = -d;
			if (d < 0 || (d == 0 && picked[g] < picked[b]))
				bi = i;
		}
		if (bi == n)
			break;
		used[bi] = true;
		out[k++] = picks[bi].id;
		allocated[picks[bi].dev->gpu]++;
		picked[picks[bi].dev->gpu]++;
	}
	return k;
}

size_t dp_preferred(const struct dp_alloc_env *env, const struct dp_resource *res,
		    const char *const *avail, size_t navail, const char *const *must,
		    size_t nmust, size_t size, const char **out)
{
	_cleanup_free_ struct pick *picks = calloc(navail + nmust + 1, sizeof(*picks));

	if (!picks || size == 0)
		return 0;
	size_t nm = filter(env, res, must, nmust, picks, 0);
	size_t n = filter(env, res, avail, navail, picks, nm);
	if (nm >= size || n <= size) {
		size_t k = 0;
		/* Never more than asked for, even when must_include (which kubelet
		 * keeps within the size) has more. */
		for (size_t i = 0; i < n && k < size; i++)
			out[k++] = picks[i].id;
		return k;
	}
	if (res->replicas > 1 || res->mig)
		return greedy(env, res, picks, nm, n, size, out);
	return best_set(env->node, picks, nm, n, size - nm, out);
}
