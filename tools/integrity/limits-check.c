// SPDX-License-Identifier: GPL-2.0
/*
 * limits-check: a device holds no more PDs, CQs and SRQs than
 * ibv_query_device says (max_pd, max_cq, max_srq), and the room of one that
 * is destroyed comes back. Public libibverbs API only, one process, one
 * device with nothing else on it. Each check prints "PASS name", "FAIL
 * name: why" or "SKIP name: why" (a maximum above what this tool creates);
 * the exit status is the number of failures.
 *
 *   limits-check -d DEVICE [-g GID_INDEX] [-v]
 *   limits-check -l          (the names of the checks, in order)
 *
 * For each kind: objects are created until one is refused, at most the
 * maximum plus one. The refusal must come with ENOMEM, after at least the
 * maximum less SLACK (objects the kernel itself may hold on the device) and
 * before the maximum is passed; then one is destroyed, and one more must be
 * created in its place; then all go.
 */
#define _GNU_SOURCE
#include "common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char prog_name[] = "limits-check";

#define MOST (1 << 16)		/* the largest maximum this tool exhausts */
#define SLACK 64

enum kind { PD, CQ, SRQ, NKINDS };

static const char *const checks[NKINDS] = {
	"pd_limit",
	"cq_limit",
	"srq_limit",
};

static struct rdma_dev dev;
static struct ibv_pd *srq_pd;	/* the SRQs' PD */

static void *create(enum kind k)
{
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 1, .max_sge = 1 } };

	switch (k) {
	case PD: return ibv_alloc_pd(dev.ctx);
	case CQ: return ibv_create_cq(dev.ctx, 1, NULL, NULL, 0);
	case SRQ: return ibv_create_srq(srq_pd, &sa);
	default: return NULL;
	}
}

static int destroy(enum kind k, void *o)
{
	switch (k) {
	case PD: return ibv_dealloc_pd(o);
	case CQ: return ibv_destroy_cq(o);
	case SRQ: return ibv_destroy_srq(o);
	default: return EINVAL;
	}
}

/* Exhausts kind K (its maximum MAX); NULL, or what was wrong. */
static const char *exhaust(enum kind k, int max, char *why, size_t len)
{
	void **objs = calloc((size_t)max + 1, sizeof(*objs));
	const char *bad = NULL;
	int n = 0, err = 0;
	double t0 = now_s();

	if (!objs)
		die("calloc: %s", strerror(errno));
	while (n <= max) {
		errno = 0;
		objs[n] = create(k);
		if (!objs[n]) {
			err = errno;
			break;
		}
		n++;
	}
	/* A note (selftests show "# " lines): how long the kind took. */
	printf("# %s: %d created in %.1f s, then %s\n", checks[k], n,
	       now_s() - t0, err ? strerror(err) : "none refused");
	if (n > max) {
		snprintf(why, len, "%d created, the maximum is %d", n, max);
		bad = why;
	} else if (err != ENOMEM) {
		snprintf(why, len, "refused after %d of %d with %s, want ENOMEM",
			 n, max, strerror(err));
		bad = why;
	} else if (n < max - SLACK) {
		snprintf(why, len, "refused after %d, the maximum is %d", n, max);
		bad = why;
	} else if (n > 0) {
		if (destroy(k, objs[n - 1]))
			die("destroying: %s", strerror(errno));
		objs[n - 1] = create(k);
		if (!objs[n - 1]) {
			snprintf(why, len, "none created after one of %d was "
				 "destroyed: %s", n, strerror(errno));
			bad = why;
			n--;
		} else if ((objs[n] = create(k))) {
			snprintf(why, len, "%d created after one was destroyed "
				 "and made again", n + 1);
			bad = why;
			n++;
		}
	}
	while (n > 0)
		if (destroy(k, objs[--n]))
			die("destroying: %s", strerror(errno));
	free(objs);
	return bad;
}

int main(int argc, char **argv)
{
	struct ibv_device_attr da;
	const char *name = NULL, *why;
	char buf[256];
	int gid, max[NKINDS];

	check_tool_args(argc, argv, checks, sizeof(checks) / sizeof(*checks),
			&name, &gid);
	open_device(&dev, name, 1, gid, &da);
	max[PD] = da.max_pd;
	max[CQ] = da.max_cq;
	max[SRQ] = da.max_srq;
	for (int k = 0; k < NKINDS; k++) {
		if (max[k] > MOST) {
			printf("SKIP %s: the device holds %d (more than the %d "
			       "this tool creates)\n", checks[k], max[k], MOST);
			continue;
		}
		if (k == SRQ) {
			/* One PD less for the SRQs' own. */
			srq_pd = ibv_alloc_pd(dev.ctx);
			if (!srq_pd)
				die("ibv_alloc_pd: %s", strerror(errno));
		}
		if (max[k] < 1) {
			printf("SKIP %s: the device has none\n", checks[k]);
			continue;
		}
		why = exhaust(k, max[k], buf, sizeof(buf));
		if (why)
			check_result(checks[k], "%s", why);
		else
			check_result(checks[k], NULL);
	}
	if (srq_pd && ibv_dealloc_pd(srq_pd))
		die("ibv_dealloc_pd: %s", strerror(errno));
	ibv_close_device(dev.ctx);
	return check_failures;
}
