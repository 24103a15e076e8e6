// SPDX-License-Identifier: GPL-2.0
/*
 * rereg-check: ibv_rereg_mr through the public libibverbs API, on one
 * device, with RC QPs connected to each other over the device's own GID
 * (loopback). Each check prints "PASS name" or "FAIL name: why"; the exit
 * status is the number of failures (0: all passed).
 *
 *   rereg-check -d DEVICE [-g GID_INDEX] [-v]
 *   rereg-check -l          (the names of the checks, in order)
 *
 * One target region is registered again, step by step: its rights alone
 * (revoking remote write, granting remote read), its PD alone, and its
 * translation alone (another buffer); its keys must stay. After each step a peer QP's RDMA Write or
 * Read must find exactly the new rules: refused bytes never land, granted
 * ones do. A QP whose request is refused moves to the error state, so each
 * refusal is tried on a fresh pair of QPs. Last, a region of pages mapped
 * read-only, pinned only for reading, must not be given a right that
 * writes.
 */
#define _GNU_SOURCE
#include "common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

const char prog_name[] = "rereg-check";

#define LEN 4096		/* bytes of each buffer */
#define XFER 256		/* bytes per Write or Read */

static const char *const checks[] = {
	"access_revokes_remote_write",
	"access_grants_remote_read",
	"pd_moves_region",
	"translation_moves_region",
	"write_right_needs_writable_pages",
};

static struct rdma_dev dev;
static struct ibv_pd *pd1, *pd2;
static struct ibv_cq *cq;
static uint8_t *src, *t1, *t2;
static struct ibv_mr *src1, *src2;	/* the source buffer, in pd1 and pd2 */

/* A connected pair in PD; returns the sending QP, *B the other. */
static struct ibv_qp *pair(struct ibv_pd *pd, struct ibv_qp **b)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		  IBV_ACCESS_REMOTE_READ;
	struct ibv_qp *qa = ibv_create_qp(pd, &a);
	int rc;

	*b = ibv_create_qp(pd, &a);
	if (!qa || !*b)
		die("ibv_create_qp: %s", strerror(errno));
	if ((rc = connect_loopback(&dev, qa, *b, acc)))
		die("connecting QPs %u and %u: %s", qa->qp_num, (*b)->qp_num,
		    strerror(rc));
	return qa;
}

/* OP (Write or Read) of XFER bytes between LOCAL (of region LMR) and
 * REMOTE under RKEY, on a fresh pair in PD: the completion's status, or -1
 * if none came within 10 s. */
static int transfer(struct ibv_pd *pd, enum ibv_wr_opcode op, uint8_t *local,
		    struct ibv_mr *lmr, uint8_t *remote, uint32_t rkey)
{
	struct ibv_qp *b, *a = pair(pd, &b);
	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = XFER,
			       .lkey = lmr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = (uintptr_t)remote, .rkey = rkey },
	}, *bad;
	struct ibv_wc wc;
	double until = now_s() + 10;
	int status = -1;

	if (ibv_post_send(a, &wr, &bad))
		die("ibv_post_send: %s", strerror(errno));
	/* Only this QP's completion counts: a late one of an earlier pair
	 * (its QP destroyed) is passed over. */
	while (status < 0 && poll_until(cq, &wc, until, 1000, 100000) == 1)
		if (wc.qp_num == a->qp_num)
			status = wc.status;
	vmsg("%s of %d bytes under rkey %#x: status %d",
	     op == IBV_WR_RDMA_READ ? "Read" : "Write", XFER, rkey, status);
	if (ibv_destroy_qp(a) || ibv_destroy_qp(b))
		die("ibv_destroy_qp: %s", strerror(errno));
	return status;
}

/* Whether the first XFER bytes of P are all V. */
static bool all(const uint8_t *p, uint8_t v)
{
	for (int i = 0; i < XFER; i++)
		if (p[i] != v)
			return false;
	return true;
}

static const char *status_name(int s)
{
	return s < 0 ? "no completion within 10 s" : ibv_wc_status_str(s);
}

/* The keys of the target region when it was registered. */
static uint32_t lkey0, rkey0;

/* The region is registered again in place: its keys stay. */
static bool same_keys(const struct ibv_mr *mr)
{
	if (mr->lkey == lkey0 && mr->rkey == rkey0)
		return true;
	vmsg("keys %#x/%#x, registered as %#x/%#x", mr->lkey, mr->rkey, lkey0,
	     rkey0);
	return false;
}

/* ibv_rereg_mr, with errno as the kernel's answer when it fails. */
static int rereg(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr,
		 int access)
{
	errno = 0;
	int rc = ibv_rereg_mr(mr, flags, pd, addr, addr ? LEN : 0, access);

	if (rc)
		vmsg("ibv_rereg_mr(flags %#x, access %#x): %d, %s", flags,
		     access, rc, strerror(errno));
	return rc ? (errno ? errno : EIO) : 0;
}

int main(int argc, char **argv)
{
	const int lw = IBV_ACCESS_LOCAL_WRITE, rw = IBV_ACCESS_REMOTE_WRITE,
		  rr = IBV_ACCESS_REMOTE_READ;
	const char *name = NULL;
	struct ibv_mr *mr, *ro_mr;
	void *ro;
	int gid, rc, s;

	check_tool_args(argc, argv, checks, sizeof(checks) / sizeof(*checks),
			&name, &gid);
	open_device(&dev, name, 1, gid, NULL);
	pd1 = ibv_alloc_pd(dev.ctx);
	pd2 = ibv_alloc_pd(dev.ctx);
	cq = ibv_create_cq(dev.ctx, 16, NULL, NULL, 0);
	if (!pd1 || !pd2 || !cq || posix_memalign((void **)&src, LEN, LEN) ||
	    posix_memalign((void **)&t1, LEN, LEN) ||
	    posix_memalign((void **)&t2, LEN, LEN))
		die("setting up: %s", strerror(errno));
	memset(t1, 0, LEN);
	memset(t2, 0, LEN);
	src1 = ibv_reg_mr(pd1, src, LEN, lw);
	src2 = ibv_reg_mr(pd2, src, LEN, lw);
	mr = ibv_reg_mr(pd1, t1, LEN, lw | rw);
	if (!src1 || !src2 || !mr)
		die("ibv_reg_mr: %s", strerror(errno));
	lkey0 = mr->lkey;
	rkey0 = mr->rkey;

	/* access_revokes_remote_write: a Write lands, then after the region
	 * drops REMOTE_WRITE the next one is refused and lands nothing. */
	memset(src, 0x11, LEN);
	if ((s = transfer(pd1, IBV_WR_RDMA_WRITE, src, src1, t1, mr->rkey)))
		check_result(checks[0], "the Write before: %s", status_name(s));
	else if (!all(t1, 0x11))
		check_result(checks[0], "the Write before did not land");
	else if ((rc = rereg(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, lw)))
		check_result(checks[0], "ibv_rereg_mr to LOCAL_WRITE: %s",
			     strerror(rc));
	else if (!same_keys(mr))
		check_result(checks[0], "the keys changed");
	else if (memset(src, 0x22, LEN),
		 (s = transfer(pd1, IBV_WR_RDMA_WRITE, src, src1, t1,
			       mr->rkey)) != IBV_WC_REM_ACCESS_ERR)
		check_result(checks[0], "the Write after: %s, want %s",
			     status_name(s),
			     ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	else if (!all(t1, 0x11))
		check_result(checks[0], "bytes of the refused Write landed");
	else
		check_result(checks[0], NULL);

	/* access_grants_remote_read: refused without REMOTE_READ, answered
	 * with the region's bytes once it is granted. */
	memset(src, 0, LEN);
	if ((s = transfer(pd1, IBV_WR_RDMA_READ, src, src1, t1, mr->rkey)) !=
	    IBV_WC_REM_ACCESS_ERR)
		check_result(checks[1], "the Read before: %s, want %s",
			     status_name(s),
			     ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	else if ((rc = rereg(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL,
			     lw | rr)))
		check_result(checks[1], "ibv_rereg_mr to add REMOTE_READ: %s",
			     strerror(rc));
	else if ((s = transfer(pd1, IBV_WR_RDMA_READ, src, src1, t1,
			       mr->rkey)))
		check_result(checks[1], "the Read after: %s", status_name(s));
	else if (!all(src, 0x11))
		check_result(checks[1], "the Read after brought other bytes");
	else
		check_result(checks[1], NULL);

	/* pd_moves_region: moved to pd2 (its rights unchanged), the region
	 * is out of pd1's reach, remotely (a Read through pd1's QP) and
	 * locally (pd1's QP naming it as its source), and within pd2's. */
	memset(src, 0, LEN);
	if ((rc = rereg(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0)))
		check_result(checks[2], "ibv_rereg_mr to pd2: %s", strerror(rc));
	else if (!same_keys(mr))
		check_result(checks[2], "the keys changed");
	else if ((s = transfer(pd1, IBV_WR_RDMA_READ, src, src1, t1,
			       mr->rkey)) != IBV_WC_REM_ACCESS_ERR)
		check_result(checks[2], "a Read through pd1: %s, want %s",
			     status_name(s),
			     ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	else if (!all(src, 0))
		check_result(checks[2], "the refused Read brought bytes");
	else if ((s = transfer(pd1, IBV_WR_RDMA_WRITE, t1, mr, t2,
			       src2->rkey)) != IBV_WC_LOC_PROT_ERR)
		check_result(checks[2], "pd1's QP sending from it: %s, want %s",
			     status_name(s),
			     ibv_wc_status_str(IBV_WC_LOC_PROT_ERR));
	else if ((s = transfer(pd2, IBV_WR_RDMA_READ, src, src2, t1,
			       mr->rkey)))
		check_result(checks[2], "a Read through pd2: %s",
			     status_name(s));
	else if (!all(src, 0x11))
		check_result(checks[2], "the Read through pd2 brought other bytes");
	else
		check_result(checks[2], NULL);

	/* translation_moves_region: given REMOTE_WRITE again, then a new
	 * translation (alone), the same key reaches t2 at t2's address; t1
	 * is out of it. */
	memset(src, 0x44, LEN);
	if ((rc = rereg(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, lw | rw)))
		check_result(checks[3], "ibv_rereg_mr to add REMOTE_WRITE: %s",
			     strerror(rc));
	else if ((rc = rereg(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, t2, 0)))
		check_result(checks[3], "ibv_rereg_mr to another buffer: %s",
			     strerror(rc));
	else if (!same_keys(mr))
		check_result(checks[3], "the keys changed");
	else if ((s = transfer(pd2, IBV_WR_RDMA_WRITE, src, src2, t2,
			       mr->rkey)))
		check_result(checks[3], "a Write to the new buffer: %s",
			     status_name(s));
	else if (!all(t2, 0x44))
		check_result(checks[3], "the Write to the new buffer did not land");
	else if (!all(t1, 0x11))
		check_result(checks[3], "the old buffer changed");
	else if ((s = transfer(pd2, IBV_WR_RDMA_WRITE, src, src2, t1,
			       mr->rkey)) != IBV_WC_REM_ACCESS_ERR)
		check_result(checks[3], "a Write to the old buffer: %s, want %s",
			     status_name(s),
			     ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
	else if (!all(t1, 0x11))
		check_result(checks[3], "bytes of the Write to the old buffer landed");
	else
		check_result(checks[3], NULL);

	/* write_right_needs_writable_pages: pages mapped read-only are pinned
	 * only for reading (they may be the shared zero page); no right that
	 * writes may be given to them: EACCES for new rights alone, and
	 * pinning them again for writing fails (EFAULT from the core). */
	ro = mmap(NULL, LEN, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (ro == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	ro_mr = ibv_reg_mr(pd1, ro, LEN, rr);
	if (!ro_mr)
		check_result(checks[4], "registering read-only pages for "
			     "REMOTE_READ: %s", strerror(errno));
	else if ((rc = rereg(ro_mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL,
			     lw | rw)) != EACCES)
		check_result(checks[4], "ibv_rereg_mr to LOCAL_WRITE | "
			     "REMOTE_WRITE: %s, want %s",
			     rc ? strerror(rc) : "granted", strerror(EACCES));
	else if ((rc = rereg(ro_mr, IBV_REREG_MR_CHANGE_ACCESS |
			     IBV_REREG_MR_CHANGE_TRANSLATION, NULL, ro,
			     lw | rw)) != EFAULT && rc != EACCES)
		check_result(checks[4], "ibv_rereg_mr to LOCAL_WRITE | "
			     "REMOTE_WRITE with the same pages again: %s, want "
			     "%s or %s",
			     rc ? strerror(rc) : "granted", strerror(EFAULT),
			     strerror(EACCES));
	else if ((s = transfer(pd1, IBV_WR_RDMA_READ, src, src1, ro,
			       ro_mr->rkey)))
		check_result(checks[4], "a Read of the region after: %s",
			     status_name(s));
	else if (!all(src, 0))
		check_result(checks[4], "the Read brought other bytes");
	else
		check_result(checks[4], NULL);

	if ((ro_mr && ibv_dereg_mr(ro_mr)) || ibv_dereg_mr(mr) ||
	    ibv_dereg_mr(src1) || ibv_dereg_mr(src2) || ibv_destroy_cq(cq) ||
	    ibv_dealloc_pd(pd1) || ibv_dealloc_pd(pd2))
		die("tearing down: %s", strerror(errno));
	ibv_close_device(dev.ctx);
	return check_failures;
}
