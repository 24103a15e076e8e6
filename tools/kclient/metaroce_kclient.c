// SPDX-License-Identifier: GPL-2.0
/*
 * metaroce_kclient: an in-kernel verbs consumer, for testing.
 *
 * Loaded with dev=NAME, it registers as an RDMA client (ib_register_client,
 * as kernel consumers do; the core offers it only devices that have every
 * mandatory kernel verb) and, when offered that device, does on it what
 * kernel consumers (storage and file-system transports) do: a PD from ib_alloc_pd() (which
 * needs the driver's get_dma_mr), a CQ from ib_alloc_cq(), two RC QPs from
 * ib_create_qp(), connected to each other through the device's own IPv4 GID
 * (loopback), buffers mapped with ib_dma_map_single() and named by the PD's
 * local_dma_lkey. It then sends ITERS messages of varying sizes from one QP to
 * the other (two SGEs each, with immediate data, and an inline one every
 * fourth), checks every completion and every byte, and tears everything
 * down. A PD asking for an unsafe global rkey (remote access to all kernel
 * memory) must be refused. With fast=1 it then tests fast registration as
 * NVMe-oF and iSER use it: a region from ib_alloc_mr() mapped over four
 * pages with ib_map_mr_sg() (five are refused), registered with a REG_MR
 * work request, written by the peer QP's RDMA Write across a page boundary,
 * invalidated with LOCAL_INV, registered again under a new key, invalidated
 * by the peer's Send with Invalidate (the receive says so), and a Write by
 * the invalidated key refused (REM_ACCESS_ERR). Before that, a REG_MR must
 * complete while other QPs on the same connection hold every slot of its
 * message table with Sends that wait for ever (a local operation needs no
 * slot: full_table()).
 * The module loads only if all of it passed (insmod fails with EIO and
 * the kernel log says what went wrong otherwise), and unloads at once.
 */

#include <linux/module.h>
#include <linux/slab.h>
#include <linux/jiffies.h>
#include <linux/delay.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_cache.h>
#include <linux/scatterlist.h>

static char *dev = "";
module_param(dev, charp, 0444);
MODULE_PARM_DESC(dev, "the RDMA device to test");
static int iters = 32;
module_param(iters, int, 0444);
MODULE_PARM_DESC(iters, "messages to send (default 32)");
static int fast;
module_param(fast, int, 0444);
MODULE_PARM_DESC(fast, "also test fast registration and invalidation (default 0)");

#define BUF_SIZE (64 * 1024)
#define INLINE_SIZE 64

static u8 pattern(int iter, u32 off)
{
	return (u8)(iter * 131 + off * 7 + (off >> 8));
}

static int find_ipv4_gid(struct ib_device *ibdev)
{
	const struct ib_gid_attr *attr;
	int i, len = ibdev->port_data[1].immutable.gid_tbl_len;

	for (i = 0; i < len; i++) {
		attr = rdma_get_gid_attr(ibdev, 1, i);
		if (IS_ERR(attr))
			continue;
		if (attr->gid_type == IB_GID_TYPE_ROCE_UDP_ENCAP &&
		    ipv6_addr_v4mapped((struct in6_addr *)attr->gid.raw)) {
			rdma_put_gid_attr(attr);
			return i;
		}
		rdma_put_gid_attr(attr);
	}
	return -ENOENT;
}

static int connect_qp(struct ib_qp *qp, u32 dest, int gid_index)
{
	struct ib_qp_attr a = {};
	union ib_gid gid;
	int ret;

	ret = rdma_query_gid(qp->device, 1, gid_index, &gid);
	if (ret)
		return ret;
	a.qp_state = IB_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qp_access_flags = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE;
	ret = ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT |
			   IB_QP_ACCESS_FLAGS);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTR;
	a.path_mtu = IB_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.type = RDMA_AH_ATTR_TYPE_ROCE;
	rdma_ah_set_port_num(&a.ah_attr, 1);
	rdma_ah_set_grh(&a.ah_attr, &gid, 0, gid_index, 64, 0);
	ret = ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_AV | IB_QP_PATH_MTU |
			   IB_QP_DEST_QPN | IB_QP_RQ_PSN |
			   IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_MIN_RNR_TIMER);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	return ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_TIMEOUT | IB_QP_RETRY_CNT |
			    IB_QP_RNR_RETRY | IB_QP_SQ_PSN |
			    IB_QP_MAX_QP_RD_ATOMIC);
}

/* Polls until @want completions arrived (10 s at most) into @wc. */
static int poll(struct ib_cq *cq, struct ib_wc *wc, int want)
{
	unsigned long end = jiffies + 10 * HZ;
	int got = 0, n;

	while (got < want) {
		n = ib_poll_cq(cq, want - got, wc + got);
		if (n < 0)
			return n;
		got += n;
		if (got < want) {
			if (time_after(jiffies, end))
				return -ETIMEDOUT;
			usleep_range(100, 200);
		}
	}
	return 0;
}

struct ctx {
	struct ib_device *ibdev;
	struct ib_pd *pd;
	struct ib_cq *cq;
	struct ib_qp *qa, *qb;
	u8 *src, *dst;
	u64 src_dma, dst_dma;
	size_t verified;
};

static int one_message(struct ctx *c, int i)
{
	static const u32 sizes[] = { 1, 100, 1024, 1025, 4096, 9000, 32768, BUF_SIZE };
	bool inl = i % 4 == 3;
	u32 len = inl ? INLINE_SIZE : sizes[i % ARRAY_SIZE(sizes)];
	u32 first = len / 3, off;
	struct ib_sge rs = {
		.addr = c->dst_dma, .length = BUF_SIZE, .lkey = c->pd->local_dma_lkey,
	};
	struct ib_recv_wr rwr = { .wr_id = 1000 + i, .sg_list = &rs, .num_sge = 1 };
	struct ib_sge ss[2] = {
		{ .addr = c->src_dma, .length = first, .lkey = c->pd->local_dma_lkey },
		{ .addr = c->src_dma + first, .length = len - first,
		  .lkey = c->pd->local_dma_lkey },
	};
	struct ib_send_wr swr = {
		.wr_id = 2000 + i, .sg_list = ss, .num_sge = 2,
		.opcode = IB_WR_SEND_WITH_IMM, .send_flags = IB_SEND_SIGNALED,
		.ex.imm_data = cpu_to_be32(0x5eed0000 + i),
	};
	const struct ib_recv_wr *bad_r;
	const struct ib_send_wr *bad_s;
	struct ib_wc wc[2], *rwc = NULL, *swc = NULL;
	int ret, k;

	if (inl)
		swr.send_flags |= IB_SEND_INLINE;
	for (off = 0; off < len; off++)
		c->src[off] = pattern(i, off);
	memset(c->dst, 0, BUF_SIZE);
	ret = ib_post_recv(c->qb, &rwr, &bad_r);
	if (ret) {
		pr_err("metaroce_kclient: message %d: post_recv: %d\n", i, ret);
		return ret;
	}
	ret = ib_post_send(c->qa, &swr, &bad_s);
	if (ret) {
		pr_err("metaroce_kclient: message %d: post_send: %d\n", i, ret);
		return ret;
	}
	ret = poll(c->cq, wc, 2);
	if (ret) {
		pr_err("metaroce_kclient: message %d: poll: %d\n", i, ret);
		return ret;
	}
	for (k = 0; k < 2; k++) {
		if (wc[k].status != IB_WC_SUCCESS) {
			pr_err("metaroce_kclient: message %d: wr_id %llu status %s\n", i,
			       wc[k].wr_id, ib_wc_status_msg(wc[k].status));
			return -EIO;
		}
		if (wc[k].qp == c->qb)
			rwc = &wc[k];
		else
			swc = &wc[k];
	}
	if (!rwc || !swc || swc->wr_id != swr.wr_id || swc->opcode != IB_WC_SEND ||
	    rwc->wr_id != rwr.wr_id || rwc->opcode != IB_WC_RECV ||
	    rwc->byte_len != len || !(rwc->wc_flags & IB_WC_WITH_IMM) ||
	    rwc->ex.imm_data != swr.ex.imm_data) {
		pr_err("metaroce_kclient: message %d (%u bytes%s): wrong completions\n",
		       i, len, inl ? ", inline" : "");
		return -EIO;
	}
	for (off = 0; off < len; off++) {
		if (c->dst[off] != pattern(i, off)) {
			pr_err("metaroce_kclient: message %d: byte %u is %#x, want %#x\n",
			       i, off, c->dst[off], pattern(i, off));
			return -EIO;
		}
	}
	if (c->dst[len] != 0) {
		pr_err("metaroce_kclient: message %d: written past its end\n", i);
		return -EIO;
	}
	c->verified += len;
	return 0;
}

/* Posts @wr on @qp and polls @n completions into @wc (0 on success). */
static int post_poll(struct ctx *c, struct ib_qp *qp, const struct ib_send_wr *wr,
		     struct ib_wc *wc, int n, const char *what)
{
	const struct ib_send_wr *bad;
	int ret = ib_post_send(qp, wr, &bad);

	if (!ret)
		ret = poll(c->cq, wc, n);
	if (ret)
		pr_err("metaroce_kclient: fast: %s: %d\n", what, ret);
	return ret;
}

static bool wc_is(const struct ib_wc *wc, enum ib_wc_opcode op,
		  enum ib_wc_status status, const char *what)
{
	if (wc->status == status && (status != IB_WC_SUCCESS || wc->opcode == op))
		return true;
	pr_err("metaroce_kclient: fast: %s: opcode %d status %s\n", what, wc->opcode,
	       ib_wc_status_msg(wc->status));
	return false;
}

/* REG_MR of @mr on QP B under key @key (a fresh one in its block). */
static int reg_mr(struct ctx *c, struct ib_mr *mr, u8 key)
{
	struct ib_reg_wr reg = {
		.wr = { .wr_id = 50, .opcode = IB_WR_REG_MR, .send_flags = IB_SEND_SIGNALED },
		.mr = mr,
		.access = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE,
	};
	struct ib_wc wc;
	int ret;

	ib_update_fast_reg_key(mr, key);
	reg.key = mr->rkey;
	ret = post_poll(c, c->qb, &reg.wr, &wc, 1, "REG_MR");
	if (ret)
		return ret;
	return wc_is(&wc, IB_WC_REG_MR, IB_WC_SUCCESS, "REG_MR") ? 0 : -EIO;
}

/* An RDMA Write of @len bytes of src from QP A at @off of @mr's range. */
static int write_to(struct ctx *c, struct ib_mr *mr, u32 off, u32 len,
		    enum ib_wc_status want)
{
	struct ib_sge sge = {
		.addr = c->src_dma, .length = len, .lkey = c->pd->local_dma_lkey,
	};
	struct ib_rdma_wr w = {
		.wr = { .wr_id = 51, .opcode = IB_WR_RDMA_WRITE, .sg_list = &sge,
			.num_sge = 1, .send_flags = IB_SEND_SIGNALED },
		.remote_addr = mr->iova + off,
		.rkey = mr->rkey,
	};
	struct ib_wc wc;
	int ret = post_poll(c, c->qa, &w.wr, &wc, 1, "RDMA Write");

	if (ret)
		return ret;
	return wc_is(&wc, IB_WC_RDMA_WRITE, want, "RDMA Write") ? 0 : -EIO;
}

/* Fast registration and invalidation, local and remote (see the top). */
static int fast_reg(struct ctx *c)
{
	/* The region: 3 pages' worth starting 100 bytes into dst (4 pages). */
	const u32 start = 100, size = 3 * PAGE_SIZE, off = PAGE_SIZE - 96, len = 5000;
	struct scatterlist sg;
	struct ib_mr *mr;
	struct ib_sge rs = {
		.addr = c->dst_dma + 8 * PAGE_SIZE, .length = 64,
		.lkey = c->pd->local_dma_lkey,
	};
	struct ib_recv_wr rwr = { .wr_id = 60, .sg_list = &rs, .num_sge = 1 };
	struct ib_sge ss = { .addr = c->src_dma, .length = 16, .lkey = c->pd->local_dma_lkey };
	struct ib_send_wr inv = {
		.wr_id = 61, .opcode = IB_WR_LOCAL_INV, .send_flags = IB_SEND_SIGNALED,
	};
	struct ib_send_wr sinv = {
		.wr_id = 62, .opcode = IB_WR_SEND_WITH_INV, .sg_list = &ss, .num_sge = 1,
		.send_flags = IB_SEND_SIGNALED,
	};
	const struct ib_recv_wr *bad_r;
	struct ib_wc wc[2], *rwc;
	int ret, n;
	u32 i;

	if (!(c->ibdev->attrs.device_cap_flags & IB_DEVICE_MEM_MGT_EXTENSIONS)) {
		pr_err("metaroce_kclient: fast: no IB_DEVICE_MEM_MGT_EXTENSIONS\n");
		return -EOPNOTSUPP;
	}
	mr = ib_alloc_mr(c->pd, IB_MR_TYPE_MEM_REG, 4);
	if (IS_ERR(mr)) {
		pr_err("metaroce_kclient: fast: ib_alloc_mr: %ld\n", PTR_ERR(mr));
		return PTR_ERR(mr);
	}
	ret = -EIO;
	/* Five pages do not fit a region made for four. */
	sg_init_one(&sg, c->dst, 4 * PAGE_SIZE + 1);
	sg_dma_address(&sg) = c->dst_dma;
	sg_dma_len(&sg) = 4 * PAGE_SIZE + 1;
	n = ib_map_mr_sg(mr, &sg, 1, NULL, PAGE_SIZE);
	if (n == 1) {
		pr_err("metaroce_kclient: fast: five pages mapped into a region of four\n");
		goto out;
	}
	sg_init_one(&sg, c->dst + start, size);
	sg_dma_address(&sg) = c->dst_dma + start;
	sg_dma_len(&sg) = size;
	n = ib_map_mr_sg(mr, &sg, 1, NULL, PAGE_SIZE);
	if (n != 1 || mr->length != size) {
		pr_err("metaroce_kclient: fast: ib_map_mr_sg: %d, length %llu\n", n, mr->length);
		goto out;
	}
	memset(c->dst, 0, BUF_SIZE);
	for (i = 0; i < len; i++)
		c->src[i] = pattern(77, i);
	/* Registered: the peer's Write starts in the region's second page and
	 * crosses into its third. */
	ret = reg_mr(c, mr, ib_inc_rkey(mr->rkey));
	if (!ret)
		ret = write_to(c, mr, off, len, IB_WC_SUCCESS);
	if (ret)
		goto out;
	for (i = 0; i < len; i++) {
		if (c->dst[start + off + i] != pattern(77, i)) {
			pr_err("metaroce_kclient: fast: byte %u of the Write is wrong\n", i);
			ret = -EIO;
			goto out;
		}
	}
	if (c->dst[start + off - 1] || c->dst[start + off + len]) {
		pr_err("metaroce_kclient: fast: the Write spilled out of its range\n");
		ret = -EIO;
		goto out;
	}
	c->verified += len;
	/* LOCAL_INV makes it free: registering it again under a new key works. */
	inv.ex.invalidate_rkey = mr->rkey;
	ret = post_poll(c, c->qb, &inv, wc, 1, "LOCAL_INV");
	if (ret)
		goto out;
	ret = -EIO;
	if (!wc_is(wc, IB_WC_LOCAL_INV, IB_WC_SUCCESS, "LOCAL_INV"))
		goto out;
	ret = reg_mr(c, mr, ib_inc_rkey(mr->rkey));
	if (ret)
		goto out;
	/* The peer's Send with Invalidate: the receive reports the key. */
	ret = ib_post_recv(c->qb, &rwr, &bad_r);
	sinv.ex.invalidate_rkey = mr->rkey;
	if (!ret)
		ret = post_poll(c, c->qa, &sinv, wc, 2, "SEND_WITH_INV");
	if (ret)
		goto out;
	ret = -EIO;
	rwc = wc[0].qp == c->qb ? &wc[0] : &wc[1];
	if (!wc_is(&wc[0], wc[0].opcode, IB_WC_SUCCESS, "SEND_WITH_INV") ||
	    !wc_is(&wc[1], wc[1].opcode, IB_WC_SUCCESS, "SEND_WITH_INV") ||
	    rwc->opcode != IB_WC_RECV || !(rwc->wc_flags & IB_WC_WITH_INVALIDATE) ||
	    rwc->ex.invalidate_rkey != mr->rkey) {
		pr_err("metaroce_kclient: fast: the receive does not report the invalidation\n");
		goto out;
	}
	/* Invalidated: the peer's next Write by that key is refused. */
	ret = write_to(c, mr, off, 8, IB_WC_REM_ACCESS_ERR);
	if (!ret)
		pr_info("metaroce_kclient: fast registration, LOCAL_INV and SEND_WITH_INV passed on %s\n",
			dev);
out:
	ib_dereg_mr(mr);
	return ret;
}

/* Sender and receiver QPs of full_table(): 5 x 64 Sends, more than the
 * connection's 256 message slots. */
#define FILLERS 5
#define FILLER_SENDS 64

/*
 * A local operation needs no message slot: REG_MR on QP B completes while
 * other QPs to the same host (this device's own address, so the same
 * connection) hold every slot of its message table with Sends that wait for
 * ever (their receivers post no receive, and rnr_retry 7 never gives up).
 */
static int full_table(struct ctx *c, int gid_index)
{
	struct ib_qp_init_attr init = {
		.qp_type = IB_QPT_RC,
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.cap = { .max_send_wr = FILLER_SENDS, .max_recv_wr = 1, .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	struct ib_qp *qp[2 * FILLERS] = {};
	struct ib_sge ss = { .addr = c->src_dma, .length = 8, .lkey = c->pd->local_dma_lkey };
	struct ib_send_wr swr = { .wr_id = 70, .opcode = IB_WR_SEND, .sg_list = &ss,
				  .num_sge = 1 };
	struct ib_send_wr probe = { .wr_id = 71, .opcode = IB_WR_SEND, .sg_list = &ss,
				    .num_sge = 1, .send_flags = IB_SEND_SIGNALED };
	struct ib_sge rs = { .addr = c->dst_dma, .length = 64, .lkey = c->pd->local_dma_lkey };
	struct ib_recv_wr rwr = { .wr_id = 72, .sg_list = &rs, .num_sge = 1 };
	const struct ib_recv_wr *bad_r;
	const struct ib_send_wr *bad;
	struct ib_wc wc[2];
	bool probing = false;
	struct ib_mr *mr = NULL;
	struct scatterlist sg;
	struct ib_cq *cq;
	unsigned long t0;
	int i, k, ret = 0;

	cq = ib_alloc_cq(c->ibdev, NULL, 2 * FILLERS * FILLER_SENDS + 16, 0, IB_POLL_DIRECT);
	if (IS_ERR(cq)) {
		pr_err("metaroce_kclient: full: ib_alloc_cq: %ld\n", PTR_ERR(cq));
		return PTR_ERR(cq);
	}
	init.send_cq = cq;
	init.recv_cq = cq;
	for (i = 0; i < 2 * FILLERS && !ret; i++) {
		qp[i] = ib_create_qp(c->pd, &init);
		if (IS_ERR(qp[i])) {
			ret = PTR_ERR(qp[i]);
			qp[i] = NULL;
		}
	}
	for (i = 0; i < FILLERS && !ret; i++) {
		ret = connect_qp(qp[2 * i], qp[2 * i + 1]->qp_num, gid_index);
		if (!ret)
			ret = connect_qp(qp[2 * i + 1], qp[2 * i]->qp_num, gid_index);
	}
	for (i = 0; i < FILLERS && !ret; i++)
		for (k = 0; k < FILLER_SENDS && !ret; k++)
			ret = ib_post_send(qp[2 * i], &swr, &bad);
	if (ret) {
		pr_err("metaroce_kclient: full: setting up the filling QPs: %d\n", ret);
		goto out;
	}
	/* The connection's worker takes them in meanwhile. */
	msleep(500);
	/* Proof that the table is full: A's Send to B (a receive waits for it)
	 * does not complete, as it has no slot. */
	ret = ib_post_recv(c->qb, &rwr, &bad_r);
	if (!ret)
		ret = ib_post_send(c->qa, &probe, &bad);
	if (ret) {
		pr_err("metaroce_kclient: full: posting the probe: %d\n", ret);
		goto out;
	}
	probing = true;
	msleep(100);
	if (ib_poll_cq(c->cq, 2, wc) != 0) {
		pr_err("metaroce_kclient: full: the message table was not full\n");
		ret = -EIO;
		goto out;
	}
	mr = ib_alloc_mr(c->pd, IB_MR_TYPE_MEM_REG, 1);
	if (IS_ERR(mr)) {
		ret = PTR_ERR(mr);
		mr = NULL;
		pr_err("metaroce_kclient: full: ib_alloc_mr: %d\n", ret);
		goto out;
	}
	sg_init_one(&sg, c->dst, PAGE_SIZE);
	sg_dma_address(&sg) = c->dst_dma;
	sg_dma_len(&sg) = PAGE_SIZE;
	if (ib_map_mr_sg(mr, &sg, 1, NULL, PAGE_SIZE) != 1) {
		pr_err("metaroce_kclient: full: ib_map_mr_sg failed\n");
		ret = -EIO;
		goto out;
	}
	t0 = jiffies;
	/* (A REG_MR held back until a slot frees times out in reg_mr's poll.) */
	ret = reg_mr(c, mr, ib_inc_rkey(mr->rkey));
	if (ret)
		pr_err("metaroce_kclient: full: REG_MR beside a full message table: %d\n", ret);
	else
		pr_info("metaroce_kclient: REG_MR completed in %u ms beside %d waiting Sends on %s\n",
			jiffies_to_msecs(jiffies - t0), FILLERS * FILLER_SENDS, dev);
out:
	if (mr)
		ib_dereg_mr(mr);
	for (i = 2 * FILLERS - 1; i >= 0; i--)
		if (qp[i])
			ib_destroy_qp(qp[i]);
	ib_free_cq(cq);
	/* With the slots free again, the probe goes through. */
	if (probing) {
		k = poll(c->cq, wc, 2);
		if (!ret && (k || wc[0].status != IB_WC_SUCCESS ||
			     wc[1].status != IB_WC_SUCCESS)) {
			pr_err("metaroce_kclient: full: the probe Send after the table emptied: %d\n",
			       k);
			ret = k ? k : -EIO;
		}
	}
	return ret;
}

/* A PD whose global rkey would open all kernel memory to peers: refused. */
static int global_rkey_refused(struct ib_device *ibdev)
{
	struct ib_pd *pd = ib_alloc_pd(ibdev, IB_PD_UNSAFE_GLOBAL_RKEY);

	if (IS_ERR(pd))
		return 0;
	ib_dealloc_pd(pd);
	pr_err("metaroce_kclient: a PD with a global rkey was granted\n");
	return -EPERM;
}

static int run(struct ctx *c)
{
	struct ib_qp_init_attr init = {
		.qp_type = IB_QPT_RC,
		.sq_sig_type = IB_SIGNAL_ALL_WR,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2,
			 .max_recv_sge = 1, .max_inline_data = INLINE_SIZE },
	};
	int gid_index, i, ret;

	ret = global_rkey_refused(c->ibdev);
	if (ret)
		return ret;
	c->pd = ib_alloc_pd(c->ibdev, 0);
	if (IS_ERR(c->pd)) {
		ret = PTR_ERR(c->pd);
		c->pd = NULL;
		pr_err("metaroce_kclient: ib_alloc_pd: %d\n", ret);
		return ret;
	}
	c->cq = ib_alloc_cq(c->ibdev, NULL, 16, 0, IB_POLL_DIRECT);
	if (IS_ERR(c->cq)) {
		ret = PTR_ERR(c->cq);
		c->cq = NULL;
		pr_err("metaroce_kclient: ib_alloc_cq: %d\n", ret);
		return ret;
	}
	init.send_cq = c->cq;
	init.recv_cq = c->cq;
	c->qa = ib_create_qp(c->pd, &init);
	if (IS_ERR(c->qa)) {
		ret = PTR_ERR(c->qa);
		c->qa = NULL;
		pr_err("metaroce_kclient: ib_create_qp: %d\n", ret);
		return ret;
	}
	c->qb = ib_create_qp(c->pd, &init);
	if (IS_ERR(c->qb)) {
		ret = PTR_ERR(c->qb);
		c->qb = NULL;
		pr_err("metaroce_kclient: ib_create_qp: %d\n", ret);
		return ret;
	}
	gid_index = find_ipv4_gid(c->ibdev);
	if (gid_index < 0) {
		pr_err("metaroce_kclient: %s has no IPv4 RoCE v2 GID\n", dev);
		return gid_index;
	}
	ret = connect_qp(c->qa, c->qb->qp_num, gid_index);
	if (!ret)
		ret = connect_qp(c->qb, c->qa->qp_num, gid_index);
	if (ret) {
		pr_err("metaroce_kclient: connecting the QPs: %d\n", ret);
		return ret;
	}
	c->src = kmalloc(BUF_SIZE, GFP_KERNEL);
	c->dst = kmalloc(BUF_SIZE + 1, GFP_KERNEL);
	if (!c->src || !c->dst)
		return -ENOMEM;
	c->src_dma = ib_dma_map_single(c->ibdev, c->src, BUF_SIZE, DMA_TO_DEVICE);
	c->dst_dma = ib_dma_map_single(c->ibdev, c->dst, BUF_SIZE + 1, DMA_FROM_DEVICE);
	for (i = 0; i < iters; i++) {
		ret = one_message(c, i);
		if (ret)
			break;
	}
	if (!ret && fast)
		ret = full_table(c, gid_index);
	if (!ret && fast)
		ret = fast_reg(c);
	ib_dma_unmap_single(c->ibdev, c->src_dma, BUF_SIZE, DMA_TO_DEVICE);
	ib_dma_unmap_single(c->ibdev, c->dst_dma, BUF_SIZE + 1, DMA_FROM_DEVICE);
	return ret;
}

static int result = -ENODEV;
static int verified_iters;
static size_t verified_bytes;

static int kclient_add(struct ib_device *ibdev)
{
	struct ctx c = { .ibdev = ibdev };

	if (strcmp(dev_name(&ibdev->dev), dev))
		return -EOPNOTSUPP;
	result = run(&c);
	if (c.qb)
		ib_destroy_qp(c.qb);
	if (c.qa)
		ib_destroy_qp(c.qa);
	if (c.cq)
		ib_free_cq(c.cq);
	if (c.pd)
		ib_dealloc_pd(c.pd);
	kfree(c.src);
	kfree(c.dst);
	verified_bytes = c.verified;
	verified_iters = iters;
	/* Nothing to keep: the client is unregistered right after. */
	return -EOPNOTSUPP;
}

static void kclient_remove(struct ib_device *ibdev, void *client_data)
{
}

static struct ib_client kclient = {
	.name = "metaroce_kclient",
	.add = kclient_add,
	.remove = kclient_remove,
};

static int __init kclient_init(void)
{
	int ret = ib_register_client(&kclient);

	if (ret)
		return ret;
	ib_unregister_client(&kclient);
	if (result == -ENODEV) {
		pr_err("metaroce_kclient: FAIL: the core did not offer '%s' to kernel clients\n",
		       dev);
		return -ENODEV;
	}
	if (result) {
		pr_err("metaroce_kclient: FAIL on %s: %d\n", dev, result);
		return -EIO;
	}
	pr_info("metaroce_kclient: PASS on %s: %d messages, %zu bytes verified\n",
		dev, verified_iters, verified_bytes);
	return 0;
}

static void __exit kclient_exit(void)
{
}

module_init(kclient_init);
module_exit(kclient_exit);
MODULE_DESCRIPTION("In-kernel verbs consumer for testing MetaRoCE");
MODULE_LICENSE("GPL");
