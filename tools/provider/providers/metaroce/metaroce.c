// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * MetaRoCE: the libibverbs provider (libmetaroce-rdmav<PABI>.so).
 *
 * The kernel module (metaroce.ko) does the whole transport. This provider
 * only connects libibverbs to it, and every verb but polling a CQ is a
 * uverbs system call:
 *
 *  - post_send, post_recv and req_notify_cq use the generic POST_SEND /
 *    POST_RECV / REQ_NOTIFY_CQ commands;
 *  - poll_cq (and the extended CQ's polling) reads the CQ's completion ring,
 *    which the kernel fills and this provider mmap()s from the device's
 *    file, when the context offers METAROCE_UCTX_CQ_RING and the environment
 *    variable METAROCE_NO_RINGS is unset, empty or "0"; otherwise it uses
 *    POLL_CQ. "Completion queues" below gives the details;
 *  - the control path uses the generic ibv_cmd_* helpers. Driver data is
 *    carried by ALLOC_CONTEXT (struct metaroce_alloc_ucontext_resp, kernel
 *    to user), by CREATE_CQ and CREATE_CQ_EX when they ask for a ring
 *    (struct metaroce_create_cq_cmd down, struct metaroce_cq_ring_resp up)
 *    and by RESIZE_CQ of a ring CQ (struct metaroce_cq_ring_resp up). Every
 *    other call carries none in either direction, and the kernel refuses a
 *    request that does.
 *
 * The ABI is uapi/rdma/metaroce-abi.h of the metaroce tree; Documentation/
 * abi.md there says how this file is built into rdma-core and installed.
 */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <infiniband/driver.h>
#include <rdma/metaroce-abi.h>
#include <util/compiler.h>

struct metaroce_device {
	struct verbs_device vdev;
};

struct metaroce_context {
	struct verbs_context vctx;
	uint32_t flags;			/* enum metaroce_ucontext_flags */
	uint32_t max_inline_data;
	uint32_t max_paths;
	/* CREATE_CQ asks for a completion ring: the context offers
	 * METAROCE_UCTX_CQ_RING and METAROCE_NO_RINGS does not say no. */
	bool cq_ring;
	/* A ring could not be mapped and that was logged (once). */
	bool ring_map_warned;
};

/* ALLOC_CONTEXT's response: the core part, then the driver's. */
struct metaroce_get_context_resp {
	struct ib_uverbs_get_context_resp ibv_resp;
	struct metaroce_alloc_ucontext_resp drv;
};
static_assert(offsetof(struct metaroce_get_context_resp, drv) ==
		      sizeof(struct ib_uverbs_get_context_resp),
	      "padding between the core and the driver response");
static_assert(sizeof(struct metaroce_get_context_resp) ==
		      sizeof(struct ib_uverbs_get_context_resp) +
			      sizeof(struct metaroce_alloc_ucontext_resp),
	      "padding after the driver response");

/* The libibverbs objects are allocated whole by the provider; the verbs_*
 * wrappers are what libibverbs itself may look into (ibv_qp_to_qp_ex reads
 * verbs_qp.comp_mask, for one). */
struct metaroce_cq {
	struct verbs_cq vcq;
	/* Held by poll_cq, resize_cq and across ibv_start_poll ..
	 * ibv_end_poll; `cur` is the completion the read_* calls answer
	 * from. */
	pthread_mutex_t lock;
	struct ibv_wc cur;
	/* The kernel gave the CQ a completion ring (set at creation). */
	bool has_ring;
	/* The ring's mapping, under `lock`. NULL if has_ring is false or a
	 * resize could not map the new ring (see metaroce_resize_cq). */
	void *ring;
	size_t ring_len;
	struct metaroce_cq_ring_hdr *hdr;	/* at byte 0 of ring */
	/* nslots of them; written only by metaroce_cq_drop_qp */
	struct metaroce_cqe *cqes;
	uint32_t nslots;			/* a power of two */
	uint32_t cons;		/* next to read; free running from 0 */
	uint32_t avail;		/* known ready at cons (extended polling) */
};

struct metaroce_qp {
	struct verbs_qp vqp;
	/* The ibv_wr_* batch (QPs made with send_ops_flags): the work
	 * requests built between ibv_wr_start and ibv_wr_complete, posted
	 * with one POST_SEND. `lock` is held from start to complete/abort. */
	pthread_mutex_t lock;
	struct ibv_send_wr *wrs;	/* max_wr of them */
	struct ibv_sge *sges;		/* max_sge per request */
	uint8_t *inl;			/* max_inline bytes per request */
	struct ibv_send_wr *cur;	/* the one the set_* calls fill */
	uint32_t nwr, max_wr, max_sge, max_inline;
	int err;			/* the batch's first error */
};

static inline struct metaroce_context *to_mctx(struct ibv_context *ibctx)
{
	return container_of(ibctx, struct metaroce_context, vctx.context);
}

static inline struct metaroce_cq *to_mcq(struct ibv_cq *ibcq)
{
	return container_of(ibcq, struct metaroce_cq, vcq.cq);
}

static inline struct metaroce_qp *to_mqp(struct ibv_qp *ibqp)
{
	return container_of(ibqp, struct metaroce_qp, vqp.qp);
}

static inline struct metaroce_cq *ex_to_mcq(struct ibv_cq_ex *ibcq)
{
	return container_of(ibcq, struct metaroce_cq, vcq.cq_ex);
}

static inline struct metaroce_qp *ex_to_mqp(struct ibv_qp_ex *ibqp)
{
	return container_of(ibqp, struct metaroce_qp, vqp.qp_ex);
}

/* Device and port */

static int metaroce_query_device_ex(struct ibv_context *context,
				    const struct ibv_query_device_ex_input *input,
				    struct ibv_device_attr_ex *attr,
				    size_t attr_size)
{
	struct ib_uverbs_ex_query_device_resp resp;
	size_t resp_size = sizeof(resp);
	uint64_t fw;
	int ret;

	ret = ibv_cmd_query_device_any(context, input, attr, attr_size, &resp,
				       &resp_size);
	if (ret)
		return ret;

	fw = resp.base.fw_ver;
	snprintf(attr->orig_attr.fw_ver, sizeof(attr->orig_attr.fw_ver),
		 "%u.%u.%u", (unsigned int)(fw >> 32) & 0xffff,
		 (unsigned int)(fw >> 16) & 0xffff, (unsigned int)fw & 0xffff);
	return 0;
}

static int metaroce_query_port(struct ibv_context *context, uint8_t port,
			       struct ibv_port_attr *attr)
{
	struct ibv_query_port cmd = {};

	return ibv_cmd_query_port(context, port, attr, &cmd, sizeof(cmd));
}

/* Protection domains and memory regions */

static struct ibv_pd *metaroce_alloc_pd(struct ibv_context *context)
{
	struct ibv_alloc_pd cmd = {};
	struct ib_uverbs_alloc_pd_resp resp = {};
	struct ibv_pd *pd;
	int ret;

	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return NULL;

	ret = ibv_cmd_alloc_pd(context, pd, &cmd, sizeof(cmd), &resp,
			       sizeof(resp));
	if (ret) {
		free(pd);
		errno = ret;
		return NULL;
	}
	return pd;
}

static int metaroce_dealloc_pd(struct ibv_pd *pd)
{
	int ret;

	ret = ibv_cmd_dealloc_pd(pd);
	if (ret)
		return ret;
	free(pd);
	return 0;
}

static struct ibv_mr *metaroce_reg_mr(struct ibv_pd *pd, void *addr,
				      size_t length, uint64_t hca_va,
				      int access)
{
	struct ibv_reg_mr cmd = {};
	struct ib_uverbs_reg_mr_resp resp = {};
	struct verbs_mr *vmr;
	int ret;

	vmr = calloc(1, sizeof(*vmr));
	if (!vmr)
		return NULL;

	ret = ibv_cmd_reg_mr(pd, addr, length, hca_va, access, vmr, &cmd,
			     sizeof(cmd), &resp, sizeof(resp));
	if (ret) {
		free(vmr);
		errno = ret;
		return NULL;
	}
	return &vmr->ibv_mr;
}

/* In place: the kernel keeps the region's keys (verbs.md, rereg_mr).
 * ibv_rereg_mr takes no iova, so a new translation is reached at its own
 * address (as mlx5 does): a region registered with another iova (or zero
 * based) is addressed from its new buffer's address afterwards. */
static int metaroce_rereg_mr(struct verbs_mr *vmr, int flags,
			     struct ibv_pd *pd, void *addr, size_t length,
			     int access)
{
	struct ibv_rereg_mr cmd = {};
	struct ib_uverbs_rereg_mr_resp resp = {};
	int ret;

	ret = ibv_cmd_rereg_mr(vmr, flags, addr, length, (uintptr_t)addr,
			       access, pd, &cmd, sizeof(cmd), &resp,
			       sizeof(resp));
	if (ret)
		errno = ret;
	return ret;
}

static int metaroce_dereg_mr(struct verbs_mr *vmr)
{
	int ret;

	ret = ibv_cmd_dereg_mr(vmr);
	if (ret)
		return ret;
	free(vmr);
	return 0;
}

/*
 * Completion queues.
 *
 * When the context offers METAROCE_UCTX_CQ_RING (and METAROCE_NO_RINGS does
 * not forbid it), CREATE_CQ asks for a completion ring: the kernel writes
 * each completion into a slot of a ring mapped into this process and then
 * advances hdr->prod; polling reads the slots from `cons` up to prod with no
 * system call and hands back the new `cons`. A CQ without a ring (older
 * context, METAROCE_NO_RINGS, or a module loaded with cq_ring=0) is polled
 * with POLL_CQ. ibv_req_notify_cq stays a system call either way.
 *
 * Memory ordering (uapi/rdma/metaroce-abi.h): the kernel stores the entries,
 * then prod with release; we load prod with acquire before reading entries,
 * and store cons with release after them, so the kernel does not reuse a
 * slot we are still reading. `cons` is private to the provider and only
 * published; it is never read back from the shared page.
 *
 * `lock` serialises the pollers of one CQ, resize_cq, the clean-up of
 * destroy_qp (metaroce_cq_drop_qp), and ibv_start_poll .. ibv_end_poll (held
 * across). Whenever it is free, hdr->cons equals `cons`: RESIZE_CQ relies on
 * that to know which entries are unread.
 *
 * If the ring a CREATE_CQ returned cannot be mapped (mmap refuses, e.g. with
 * EPERM under the READ_IMPLIES_EXEC personality, since the kernel refuses
 * executable mappings of it), that CQ is destroyed and created again without
 * a ring, and polled with POLL_CQ.
 */

/* CREATE_CQ, CREATE_CQ_EX and RESIZE_CQ with driver data: the core part,
 * then the driver's, with no padding between or after (asserted below). */
struct metaroce_create_cq {
	struct ibv_create_cq ibv_cmd;
	struct metaroce_create_cq_cmd drv;
};

struct metaroce_create_cq_resp {
	struct ib_uverbs_create_cq_resp ibv_resp;
	struct metaroce_cq_ring_resp drv;
};

struct metaroce_create_cq_ex {
	struct ibv_create_cq_ex ibv_cmd;
	struct metaroce_create_cq_cmd drv;
};

struct metaroce_create_cq_ex_resp {
	struct ib_uverbs_ex_create_cq_resp ibv_resp;
	struct metaroce_cq_ring_resp drv;
};

struct metaroce_resize_cq_resp {
	struct ib_uverbs_resize_cq_resp ibv_resp;
	struct metaroce_cq_ring_resp drv;
};

#define metaroce_check_layout(type, core)                                      \
	static_assert(offsetof(struct type, drv) ==                            \
				      sizeof(((struct type *)0)->core) &&      \
			      sizeof(struct type) ==                           \
				      sizeof(((struct type *)0)->core) +       \
					      sizeof(((struct type *)0)->drv), \
		      #type ": padding around the driver data")
metaroce_check_layout(metaroce_create_cq, ibv_cmd);
metaroce_check_layout(metaroce_create_cq_resp, ibv_resp);
metaroce_check_layout(metaroce_create_cq_ex, ibv_cmd);
metaroce_check_layout(metaroce_create_cq_ex_resp, ibv_resp);
metaroce_check_layout(metaroce_resize_cq_resp, ibv_resp);

/* The ring's layout as this file reads it. */
static_assert(offsetof(struct metaroce_cq_ring_hdr, cons) == 128,
	      "cons is not on its own cache line");
static_assert(sizeof(struct metaroce_cqe) == 64, "a ring slot is 64 bytes");
static_assert(offsetof(struct metaroce_cqe, port_num) ==
		      offsetof(struct ib_uverbs_wc, port_num),
	      "a ring entry does not begin as a struct ib_uverbs_wc");

/* Tells the kernel the slots before `cons` are free again. */
static void metaroce_ring_publish(struct metaroce_cq *cq)
{
	__atomic_store_n(&cq->hdr->cons, cq->cons, __ATOMIC_RELEASE);
}

/*
 * Maps the ring RESP describes into CQ and starts reading it at index 0.
 * The caller holds `lock`, or no one else sees the CQ yet. Returns 0 or an
 * errno; on error CQ keeps no mapping.
 */
static int metaroce_cq_map_ring(struct metaroce_cq *cq,
				const struct metaroce_cq_ring_resp *resp)
{
	struct ibv_context *context = cq->vcq.cq.context;
	uint64_t need = (uint64_t)resp->entries_offset +
			(uint64_t)resp->nslots * sizeof(struct metaroce_cqe);
	void *ring;

	cq->ring = NULL;
	/* A response this provider cannot read safely: an ABI mismatch. */
	if (!resp->nslots || (resp->nslots & (resp->nslots - 1)) ||
	    resp->entries_offset < sizeof(struct metaroce_cq_ring_hdr) ||
	    resp->entries_offset % __alignof__(struct metaroce_cqe) ||
	    need > resp->mmap_len || (off_t)resp->mmap_offset < 0) {
		verbs_err(&to_mctx(context)->vctx,
			  "bad CQ ring: %u slots from byte %u of %u at offset 0x%llx\n",
			  resp->nslots, resp->entries_offset, resp->mmap_len,
			  (unsigned long long)resp->mmap_offset);
		return EPROTO;
	}
	ring = mmap(NULL, resp->mmap_len, PROT_READ | PROT_WRITE, MAP_SHARED,
		    context->cmd_fd, (off_t)resp->mmap_offset);
	if (ring == MAP_FAILED)
		return errno ? errno : ENOMEM;

	cq->ring = ring;
	cq->ring_len = resp->mmap_len;
	cq->hdr = ring;
	/* entries_offset is a multiple of the entries' alignment (above) */
	cq->cqes = (void *)((uint8_t *)ring + resp->entries_offset);
	cq->nslots = resp->nslots;
	cq->cons = 0;
	cq->avail = 0;
	/* The kernel starts it at 0 too; saying so keeps "hdr->cons equals
	 * cons when `lock` is free" true from the first moment. */
	metaroce_ring_publish(cq);
	return 0;
}

static void metaroce_cq_unmap_ring(struct metaroce_cq *cq)
{
	if (cq->ring)
		munmap(cq->ring, cq->ring_len);
	cq->ring = NULL;
}

/*
 * Completions ready after `cons`: prod - cons, but never more than the ring
 * holds. The kernel does not let it exceed the CQ's size; a larger value
 * means this process wrote over the header, and reading at most nslots
 * slots keeps us inside the mapping.
 */
static uint32_t metaroce_ring_ready(struct metaroce_cq *cq)
{
	uint32_t prod = __atomic_load_n(&cq->hdr->prod, __ATOMIC_ACQUIRE);
	uint32_t n = prod - cq->cons;

	return n > cq->nslots ? cq->nslots : n;
}

/* Takes the completion at `cons` (which the caller knows is ready) into WC,
 * converting it as ibv_cmd_poll_cq converts a struct ib_uverbs_wc. */
static void metaroce_ring_take(struct metaroce_cq *cq, struct ibv_wc *wc)
{
	const struct metaroce_cqe *e = &cq->cqes[cq->cons & (cq->nslots - 1)];

	wc->wr_id = e->wr_id;
	wc->status = e->status;
	wc->opcode = e->opcode;
	wc->vendor_err = e->vendor_err;
	wc->byte_len = e->byte_len;
	/* imm_data (already big endian) or invalidated_rkey: same bits */
	wc->imm_data = (__force __be32)e->ex;
	wc->qp_num = e->qp_num;
	wc->src_qp = e->src_qp;
	wc->wc_flags = e->wc_flags;
	wc->pkey_index = e->pkey_index;
	wc->slid = e->slid;
	wc->sl = e->sl;
	wc->dlid_path_bits = e->dlid_path_bits;
	cq->cons++;
}

static int metaroce_poll_cq(struct ibv_cq *ibcq, int ne, struct ibv_wc *wc)
{
	struct metaroce_cq *cq = to_mcq(ibcq);
	uint32_t n, i;

	if (!cq->has_ring)
		return ibv_cmd_poll_cq(ibcq, ne, wc);
	if (ne <= 0)
		return 0;

	pthread_mutex_lock(&cq->lock);
	if (!cq->ring) {
		/* Its ring was lost in a resize (metaroce_resize_cq). */
		pthread_mutex_unlock(&cq->lock);
		errno = EIO;
		return -1;
	}
	n = metaroce_ring_ready(cq);
	if (n > (uint32_t)ne)
		n = (uint32_t)ne;
	for (i = 0; i < n; i++)
		metaroce_ring_take(cq, &wc[i]);
	if (n)
		metaroce_ring_publish(cq);
	pthread_mutex_unlock(&cq->lock);
	return (int)n;
}

/*
 * CREATE_CQ_EX (EX, for ibv_create_cq_ex) or CREATE_CQ (for ibv_create_cq:
 * ATTR then carries only its cqe, channel and comp_vector) of CQ, asking
 * for a completion ring if RING. *DRV receives the driver part of the
 * answer; its flags are 0 when no ring was asked for. Returns 0 or an
 * errno.
 */
static int metaroce_cq_cmd(struct ibv_context *context,
			   const struct ibv_cq_init_attr_ex *attr, bool ex,
			   bool ring, struct metaroce_cq *cq,
			   struct metaroce_cq_ring_resp *drv)
{
	/* With no ring to ask for, no driver data either way. */
	uint32_t flags = ring ? METAROCE_CQ_RING : 0;
	int ret;

	if (ex) {
		struct metaroce_create_cq_ex cmd = { .drv.flags = flags };
		struct metaroce_create_cq_ex_resp resp = {};

		/* The kernel refuses creation flags it does not have. */
		ret = ibv_cmd_create_cq_ex(
			context, attr, NULL, &cq->vcq, &cmd.ibv_cmd,
			ring ? sizeof(cmd) : sizeof(cmd.ibv_cmd), &resp.ibv_resp,
			ring ? sizeof(resp) : sizeof(resp.ibv_resp), 0);
		*drv = resp.drv;
	} else {
		struct metaroce_create_cq cmd = { .drv.flags = flags };
		struct metaroce_create_cq_resp resp = {};

		ret = ibv_cmd_create_cq(
			context, (int)attr->cqe, attr->channel,
			(int)attr->comp_vector, &cq->vcq.cq, &cmd.ibv_cmd,
			ring ? sizeof(cmd) : sizeof(cmd.ibv_cmd), &resp.ibv_resp,
			ring ? sizeof(resp) : sizeof(resp.ibv_resp));
		*drv = resp.drv;
	}
	return ret;
}

/*
 * Allocates and creates a CQ (metaroce_cq_cmd says what ATTR and EX are),
 * with a ring when the context offers them and the kernel gives one. A ring
 * that cannot be mapped is given up: that CQ is destroyed and created again
 * without asking for one, to be polled with POLL_CQ. Returns the CQ, or
 * NULL with errno set.
 */
static struct metaroce_cq *
metaroce_cq_create(struct ibv_context *context,
		   const struct ibv_cq_init_attr_ex *attr, bool ex)
{
	struct metaroce_context *ctx = to_mctx(context);
	struct metaroce_cq_ring_resp drv;
	struct metaroce_cq *cq;
	int ret;

	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return NULL;

	ret = metaroce_cq_cmd(context, attr, ex, ctx->cq_ring, cq, &drv);
	if (ret)
		goto err;
	if (drv.flags & METAROCE_CQ_RING) {
		ret = metaroce_cq_map_ring(cq, &drv);
		if (!ret) {
			cq->has_ring = true;
		} else {
			if (!__atomic_exchange_n(&ctx->ring_map_warned, true,
						 __ATOMIC_RELAXED))
				verbs_warn(&ctx->vctx,
					   "cannot map a CQ ring (%s): such CQs are created again without one and polled with POLL_CQ\n",
					   strerror(ret));
			/* No QP uses the CQ yet, so this does not fail in
			 * practice; if it did, a second kernel CQ would carry
			 * the same user handle: fail instead. */
			if (ibv_cmd_destroy_cq(&cq->vcq.cq))
				goto err;
			ret = metaroce_cq_cmd(context, attr, ex, false, cq, &drv);
			if (ret)
				goto err;
		}
	}
	pthread_mutex_init(&cq->lock, NULL);
	return cq;

err:
	free(cq);
	errno = ret;
	return NULL;
}

static struct ibv_cq *metaroce_create_cq(struct ibv_context *context, int cqe,
					 struct ibv_comp_channel *channel,
					 int comp_vector)
{
	/* What metaroce_cq_cmd reads for a CREATE_CQ. */
	struct ibv_cq_init_attr_ex attr = {
		.cqe = (uint32_t)cqe,
		.channel = channel,
		.comp_vector = (uint32_t)comp_vector,
	};
	struct metaroce_cq *cq = metaroce_cq_create(context, &attr, false);

	return cq ? &cq->vcq.cq : NULL;
}

/*
 * The extended CQ (ibv_create_cq_ex): the ibv_start_poll / ibv_next_poll /
 * ibv_end_poll iterator, over the ring or over POLL_CQ. Each step takes
 * one completion into `cur`; the ibv_wc_read_* calls answer from it. A
 * ring CQ's `cons` is published at ibv_end_poll. Every field a struct
 * ibv_wc has can be asked for (IBV_WC_STANDARD_FLAGS); what the kernel has
 * not got (completion timestamps, flow tags, ...) is refused with
 * EOPNOTSUPP.
 */

/* One completion into `cur`: 0, ENOENT when there is none, or an errno.
 * The caller holds `lock`. */
static int metaroce_cq_step(struct metaroce_cq *cq)
{
	if (cq->has_ring) {
		if (!cq->ring)
			return EIO;	/* lost in a resize */
		if (!cq->avail)
			cq->avail = metaroce_ring_ready(cq);
		if (!cq->avail)
			return ENOENT;
		metaroce_ring_take(cq, &cq->cur);
		cq->avail--;
	} else {
		int n = ibv_cmd_poll_cq(&cq->vcq.cq, 1, &cq->cur);

		if (n < 0)
			return errno ? errno : EIO;
		if (n == 0)
			return ENOENT;
	}
	cq->vcq.cq_ex.wr_id = cq->cur.wr_id;
	cq->vcq.cq_ex.status = cq->cur.status;
	return 0;
}

static int metaroce_start_poll(struct ibv_cq_ex *ibcq,
			       struct ibv_poll_cq_attr *attr)
{
	struct metaroce_cq *cq = ex_to_mcq(ibcq);
	int ret;

	if (attr->comp_mask)
		return EINVAL;
	pthread_mutex_lock(&cq->lock);
	/* `avail` counted from where the last batch left `cons`;
	 * ibv_poll_cq may have moved it since. */
	cq->avail = 0;
	ret = metaroce_cq_step(cq);
	/* On any error the caller does not call ibv_end_poll; nothing was
	 * taken, so there is no `cons` to publish. */
	if (ret)
		pthread_mutex_unlock(&cq->lock);
	return ret;
}

static int metaroce_next_poll(struct ibv_cq_ex *ibcq)
{
	return metaroce_cq_step(ex_to_mcq(ibcq));
}

static void metaroce_end_poll(struct ibv_cq_ex *ibcq)
{
	struct metaroce_cq *cq = ex_to_mcq(ibcq);

	/* ibv_start_poll succeeded, so a ring CQ has its ring and took at
	 * least one completion. */
	if (cq->has_ring)
		metaroce_ring_publish(cq);
	pthread_mutex_unlock(&cq->lock);
}

static enum ibv_wc_opcode metaroce_read_opcode(struct ibv_cq_ex *ibcq)
{
	return ex_to_mcq(ibcq)->cur.opcode;
}

static uint32_t metaroce_read_vendor_err(struct ibv_cq_ex *ibcq)
{
	return ex_to_mcq(ibcq)->cur.vendor_err;
}

static unsigned int metaroce_read_wc_flags(struct ibv_cq_ex *ibcq)
{
	return ex_to_mcq(ibcq)->cur.wc_flags;
}

static uint32_t metaroce_read_byte_len(struct ibv_cq_ex *ibcq)
{
	return ex_to_mcq(ibcq)->cur.byte_len;
}

static __be32 metaroce_read_imm_data(struct ibv_cq_ex *ibcq)
{
	return ex_to_mcq(ibcq)->cur.imm_data;
}

static uint32_t metaroce_read_qp_num(struct ibv_cq_ex *ibcq)
{
	return ex_to_mcq(ibcq)->cur.qp_num;
}

static uint32_t metaroce_read_src_qp(struct ibv_cq_ex *ibcq)
{
	return ex_to_mcq(ibcq)->cur.src_qp;
}

static uint32_t metaroce_read_slid(struct ibv_cq_ex *ibcq)
{
	return ex_to_mcq(ibcq)->cur.slid;
}

static uint8_t metaroce_read_sl(struct ibv_cq_ex *ibcq)
{
	return ex_to_mcq(ibcq)->cur.sl;
}

static uint8_t metaroce_read_dlid_path_bits(struct ibv_cq_ex *ibcq)
{
	return ex_to_mcq(ibcq)->cur.dlid_path_bits;
}

static struct ibv_cq_ex *metaroce_create_cq_ex(struct ibv_context *context,
					       struct ibv_cq_init_attr_ex *attr)
{
	struct metaroce_cq *cq;
	struct ibv_cq_ex *ex;

	/* A parent domain, or a field no struct ibv_wc carries. */
	if (attr->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS ||
	    attr->wc_flags & ~(uint64_t)IBV_WC_STANDARD_FLAGS) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	cq = metaroce_cq_create(context, attr, true);
	if (!cq)
		return NULL;
	ex = &cq->vcq.cq_ex;
	ex->start_poll = metaroce_start_poll;
	ex->next_poll = metaroce_next_poll;
	ex->end_poll = metaroce_end_poll;
	ex->read_opcode = metaroce_read_opcode;
	ex->read_vendor_err = metaroce_read_vendor_err;
	ex->read_wc_flags = metaroce_read_wc_flags;
	/* Only what was asked for, as libibverbs' readers expect. */
	if (attr->wc_flags & IBV_WC_EX_WITH_BYTE_LEN)
		ex->read_byte_len = metaroce_read_byte_len;
	if (attr->wc_flags & IBV_WC_EX_WITH_IMM)
		ex->read_imm_data = metaroce_read_imm_data;
	if (attr->wc_flags & IBV_WC_EX_WITH_QP_NUM)
		ex->read_qp_num = metaroce_read_qp_num;
	if (attr->wc_flags & IBV_WC_EX_WITH_SRC_QP)
		ex->read_src_qp = metaroce_read_src_qp;
	if (attr->wc_flags & IBV_WC_EX_WITH_SLID)
		ex->read_slid = metaroce_read_slid;
	if (attr->wc_flags & IBV_WC_EX_WITH_SL)
		ex->read_sl = metaroce_read_sl;
	if (attr->wc_flags & IBV_WC_EX_WITH_DLID_PATH_BITS)
		ex->read_dlid_path_bits = metaroce_read_dlid_path_bits;
	return ex;
}

/*
 * RESIZE_CQ of a ring CQ gets a new ring: the kernel copies the unread
 * completions (from the `cons` we published) to its slots 0, 1, ... and sets
 * prod to their count, and the old mapping is stale. If the new ring cannot
 * be mapped, the kernel's CQ lives on but this process cannot read it: the
 * CQ is left without a ring, its polls fail with EIO (completions may be
 * waiting that we cannot return, so "none" would be a lie), and a later
 * resize_cq that maps its new ring makes it usable again. ibv_destroy_cq
 * works in either state.
 */
static int metaroce_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct metaroce_cq *cq = to_mcq(ibcq);
	struct ibv_resize_cq cmd = {};
	struct metaroce_resize_cq_resp resp = {};
	int ret;

	if (!cq->has_ring)
		return ibv_cmd_resize_cq(ibcq, cqe, &cmd, sizeof(cmd),
					 &resp.ibv_resp, sizeof(resp.ibv_resp));

	pthread_mutex_lock(&cq->lock);
	ret = ibv_cmd_resize_cq(ibcq, cqe, &cmd, sizeof(cmd), &resp.ibv_resp,
				sizeof(resp));
	/* On failure the old ring stands: the kernel refused before its
	 * swap. (Its one failure after the swap, uverbs unable to write the
	 * answer, cannot happen with `resp` on this stack.) */
	if (ret)
		goto out;
	metaroce_cq_unmap_ring(cq);
	if (!(resp.drv.flags & METAROCE_CQ_RING)) {
		/* The ABI gives a ring CQ a new ring. */
		verbs_err(&to_mctx(ibcq->context)->vctx,
			  "RESIZE_CQ of a ring CQ returned no ring (flags 0x%x)\n",
			  resp.drv.flags);
		ret = EPROTO;
		goto out;
	}
	ret = metaroce_cq_map_ring(cq, &resp.drv);
out:
	pthread_mutex_unlock(&cq->lock);
	return ret;
}

static int metaroce_destroy_cq(struct ibv_cq *ibcq)
{
	struct metaroce_cq *cq = to_mcq(ibcq);
	int ret;

	ret = ibv_cmd_destroy_cq(ibcq);
	if (ret)
		return ret;
	metaroce_cq_unmap_ring(cq);
	pthread_mutex_destroy(&cq->lock);
	free(cq);
	return 0;
}

/*
 * Removes the completions of the destroyed QP QPN from CQ's ring, for
 * destroy_qp: applications expect none after ibv_destroy_qp, and QP numbers
 * are reused. The kernel purges them itself from a CQ without a ring, but
 * leaves a ring's slots to us. A CQ that lost its ring in a resize is
 * skipped (its polls fail anyway).
 *
 * As mlx5 does (__mlx5_cq_clean): walk the unread entries from the newest
 * down to `cons`, drop QPN's and move each kept one up over the dropped
 * ones, then advance `cons` past the freed slots. This is safe because the
 * kernel never writes an unread slot (those between the `cons` we published
 * and prod) and writes no completion of the QP once DESTROY_QP has
 * returned: completions of other QPs that arrive meanwhile land at or after
 * the prod we read, which the walk does not touch. Publishing `cons` (with
 * release) after the copies hands the freed slots back to the kernel.
 */
static void metaroce_cq_drop_qp(struct ibv_cq *ibcq, uint32_t qpn)
{
	struct metaroce_cq *cq;
	uint32_t n, i, pos, mask, nfreed = 0;

	if (!ibcq || !to_mcq(ibcq)->has_ring)
		return;
	cq = to_mcq(ibcq);
	pthread_mutex_lock(&cq->lock);
	if (!cq->ring)
		goto out;
	n = metaroce_ring_ready(cq);	/* prod - cons, at most nslots */
	mask = cq->nslots - 1;
	/* Positions cons + n - 1 down to cons, counted (indices wrap). */
	for (i = n; i > 0; i--) {
		pos = cq->cons + i - 1;
		if (cq->cqes[pos & mask].qp_num == qpn)
			nfreed++;
		else if (nfreed)
			cq->cqes[(pos + nfreed) & mask] = cq->cqes[pos & mask];
	}
	if (nfreed) {
		cq->cons += nfreed;
		metaroce_ring_publish(cq);
	}
	cq->avail = 0;
out:
	pthread_mutex_unlock(&cq->lock);
}

/* Queue pairs */

static struct ibv_qp *metaroce_create_qp(struct ibv_pd *pd,
					 struct ibv_qp_init_attr *attr)
{
	struct ibv_create_qp cmd = {};
	struct ib_uverbs_create_qp_resp resp = {};
	struct metaroce_qp *qp;
	int ret;

	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;

	ret = ibv_cmd_create_qp(pd, &qp->vqp.qp, attr, &cmd, sizeof(cmd),
				&resp, sizeof(resp));
	if (ret) {
		free(qp);
		errno = ret;
		return NULL;
	}
	pthread_mutex_init(&qp->lock, NULL);
	return &qp->vqp.qp;
}

/*
 * The ibv_wr_* send API (a QP made by ibv_create_qp_ex with send_ops_flags).
 * Each ibv_wr_<op> call starts a work request in the batch from the QP's
 * wr_id and wr_flags; the set_* calls fill its buffers; ibv_wr_complete
 * posts the batch with one POST_SEND, as ibv_post_send would have. A batch
 * longer than the send queue, too many SGEs or too much inline data, or a
 * set_* call with no request to fill, fail here, at ibv_wr_complete, with
 * nothing posted. The kernel then checks every request as for
 * ibv_post_send, and queues those before the first it refuses (a send
 * queue without room for all, an lkey it does not know): ibv_wr_post(3)
 * wants none posted then. This is a deviation (Documentation/verbs.md).
 */

static void metaroce_wr_fail(struct metaroce_qp *qp, int err)
{
	if (!qp->err)
		qp->err = err;
}

/* A new request of the batch with opcode OP, or NULL (batch full). */
static struct ibv_send_wr *metaroce_wr_new(struct ibv_qp_ex *ibqp,
					   enum ibv_wr_opcode op)
{
	struct metaroce_qp *qp = ex_to_mqp(ibqp);
	struct ibv_send_wr *wr;

	qp->cur = NULL;
	if (qp->nwr >= qp->max_wr) {
		metaroce_wr_fail(qp, ENOMEM);
		return NULL;
	}
	wr = &qp->wrs[qp->nwr];
	memset(wr, 0, sizeof(*wr));
	wr->wr_id = ibqp->wr_id;
	wr->send_flags = ibqp->wr_flags;
	wr->opcode = op;
	wr->sg_list = &qp->sges[(size_t)qp->nwr * qp->max_sge];
	if (qp->nwr)
		qp->wrs[qp->nwr - 1].next = wr;
	qp->nwr++;
	qp->cur = wr;
	return wr;
}

static void metaroce_wr_send(struct ibv_qp_ex *ibqp)
{
	metaroce_wr_new(ibqp, IBV_WR_SEND);
}

static void metaroce_wr_send_imm(struct ibv_qp_ex *ibqp, __be32 imm_data)
{
	struct ibv_send_wr *wr = metaroce_wr_new(ibqp, IBV_WR_SEND_WITH_IMM);

	if (wr)
		wr->imm_data = imm_data;
}

static void metaroce_wr_remote(struct ibv_qp_ex *ibqp, enum ibv_wr_opcode op,
			       uint32_t rkey, uint64_t remote_addr,
			       __be32 imm_data)
{
	struct ibv_send_wr *wr = metaroce_wr_new(ibqp, op);

	if (!wr)
		return;
	wr->wr.rdma.rkey = rkey;
	wr->wr.rdma.remote_addr = remote_addr;
	wr->imm_data = imm_data;
}

static void metaroce_wr_rdma_write(struct ibv_qp_ex *ibqp, uint32_t rkey,
				   uint64_t remote_addr)
{
	metaroce_wr_remote(ibqp, IBV_WR_RDMA_WRITE, rkey, remote_addr, 0);
}

static void metaroce_wr_rdma_write_imm(struct ibv_qp_ex *ibqp, uint32_t rkey,
				       uint64_t remote_addr, __be32 imm_data)
{
	metaroce_wr_remote(ibqp, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, remote_addr,
			   imm_data);
}

static void metaroce_wr_rdma_read(struct ibv_qp_ex *ibqp, uint32_t rkey,
				  uint64_t remote_addr)
{
	metaroce_wr_remote(ibqp, IBV_WR_RDMA_READ, rkey, remote_addr, 0);
}

static void metaroce_wr_atomic(struct ibv_qp_ex *ibqp, enum ibv_wr_opcode op,
			       uint32_t rkey, uint64_t remote_addr,
			       uint64_t compare_add, uint64_t swap)
{
	struct ibv_send_wr *wr = metaroce_wr_new(ibqp, op);

	if (!wr)
		return;
	wr->wr.atomic.rkey = rkey;
	wr->wr.atomic.remote_addr = remote_addr;
	wr->wr.atomic.compare_add = compare_add;
	wr->wr.atomic.swap = swap;
}

static void metaroce_wr_atomic_cmp_swp(struct ibv_qp_ex *ibqp, uint32_t rkey,
				       uint64_t remote_addr, uint64_t compare,
				       uint64_t swap)
{
	metaroce_wr_atomic(ibqp, IBV_WR_ATOMIC_CMP_AND_SWP, rkey, remote_addr,
			   compare, swap);
}

static void metaroce_wr_atomic_fetch_add(struct ibv_qp_ex *ibqp,
					 uint32_t rkey, uint64_t remote_addr,
					 uint64_t add)
{
	metaroce_wr_atomic(ibqp, IBV_WR_ATOMIC_FETCH_AND_ADD, rkey,
			   remote_addr, add, 0);
}

/* A UD request's destination (UD QPs only; the kernel checks the AH's PD). */
static void metaroce_wr_set_ud_addr(struct ibv_qp_ex *ibqp, struct ibv_ah *ah,
				    uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct metaroce_qp *qp = ex_to_mqp(ibqp);

	if (!qp->cur) {
		metaroce_wr_fail(qp, EINVAL);
		return;
	}
	qp->cur->wr.ud.ah = ah;
	qp->cur->wr.ud.remote_qpn = remote_qpn;
	qp->cur->wr.ud.remote_qkey = remote_qkey;
}

static void metaroce_wr_set_sge_list(struct ibv_qp_ex *ibqp, size_t num_sge,
				     const struct ibv_sge *sg_list)
{
	struct metaroce_qp *qp = ex_to_mqp(ibqp);

	if (!qp->cur) {
		metaroce_wr_fail(qp, EINVAL);
		return;
	}
	if (num_sge > qp->max_sge) {
		metaroce_wr_fail(qp, EINVAL);
		return;
	}
	if (num_sge)
		memcpy(qp->cur->sg_list, sg_list, num_sge * sizeof(*sg_list));
	qp->cur->num_sge = (int)num_sge;
	/* Registered buffers after all: no longer the inline data an earlier
	 * set_inline_data call gave (unless wr_flags asked for inline). */
	qp->cur->send_flags = (qp->cur->send_flags & ~IBV_SEND_INLINE) |
			      (ibqp->wr_flags & IBV_SEND_INLINE);
}

static void metaroce_wr_set_sge(struct ibv_qp_ex *ibqp, uint32_t lkey,
				uint64_t addr, uint32_t length)
{
	struct ibv_sge sge = { .addr = addr, .length = length, .lkey = lkey };

	metaroce_wr_set_sge_list(ibqp, 1, &sge);
}

/* Inline data is copied now (the caller may reuse its buffers at once)
 * into the request's slot, which the kernel copies at POST_SEND. */
static void metaroce_wr_set_inline_data_list(struct ibv_qp_ex *ibqp,
					     size_t num_buf,
					     const struct ibv_data_buf *buf_list)
{
	struct metaroce_qp *qp = ex_to_mqp(ibqp);
	size_t total = 0;
	uint8_t *dst;

	if (!qp->cur) {
		metaroce_wr_fail(qp, EINVAL);
		return;
	}
	for (size_t i = 0; i < num_buf; i++) {
		if (buf_list[i].length > qp->max_inline - total) {
			metaroce_wr_fail(qp, EINVAL);
			return;
		}
		total += buf_list[i].length;
	}
	if (!qp->inl && qp->max_inline) {
		qp->inl = calloc(qp->max_wr, qp->max_inline);
		if (!qp->inl) {
			metaroce_wr_fail(qp, ENOMEM);
			return;
		}
	}
	dst = qp->inl + (size_t)(qp->cur - qp->wrs) * qp->max_inline;
	total = 0;
	for (size_t i = 0; i < num_buf; i++) {
		memcpy(dst + total, buf_list[i].addr, buf_list[i].length);
		total += buf_list[i].length;
	}
	qp->cur->sg_list[0] = (struct ibv_sge){
		.addr = (uintptr_t)dst, .length = (uint32_t)total };
	qp->cur->num_sge = total ? 1 : 0;
	qp->cur->send_flags |= IBV_SEND_INLINE;
}

static void metaroce_wr_set_inline_data(struct ibv_qp_ex *ibqp, void *addr,
					size_t length)
{
	struct ibv_data_buf buf = { .addr = addr, .length = length };

	metaroce_wr_set_inline_data_list(ibqp, 1, &buf);
}

static void metaroce_wr_start(struct ibv_qp_ex *ibqp)
{
	struct metaroce_qp *qp = ex_to_mqp(ibqp);

	pthread_mutex_lock(&qp->lock);
	qp->nwr = 0;
	qp->cur = NULL;
	qp->err = 0;
}

static int metaroce_wr_complete(struct ibv_qp_ex *ibqp)
{
	struct metaroce_qp *qp = ex_to_mqp(ibqp);
	struct ibv_send_wr *bad = NULL;
	int ret = qp->err;

	/* A UD request without wr_set_ud_addr has no address handle, which
	 * ibv_cmd_post_send would follow. */
	for (unsigned int i = 0; !ret && ibqp->qp_base.qp_type == IBV_QPT_UD &&
				 i < qp->nwr; i++)
		if (!qp->wrs[i].wr.ud.ah)
			ret = EINVAL;
	if (!ret && qp->nwr)
		ret = ibv_cmd_post_send(&qp->vqp.qp, qp->wrs, &bad);
	qp->nwr = 0;
	qp->cur = NULL;
	pthread_mutex_unlock(&qp->lock);
	return ret;
}

static void metaroce_wr_abort(struct ibv_qp_ex *ibqp)
{
	struct metaroce_qp *qp = ex_to_mqp(ibqp);

	qp->nwr = 0;
	qp->cur = NULL;
	pthread_mutex_unlock(&qp->lock);
}

/* The operations ibv_wr_* offers here: every RC operation the kernel has. */
#define METAROCE_SEND_OPS                                                      \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |      \
	 IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |                  \
	 IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |        \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

static int metaroce_setup_qp_ex(struct metaroce_qp *qp,
				const struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp_ex *ex = &qp->vqp.qp_ex;
	uint64_t ops = attr->send_ops_flags;

	/* What the kernel granted (it writes the caps back). */
	qp->max_wr = attr->cap.max_send_wr;
	qp->max_sge = attr->cap.max_send_sge ? attr->cap.max_send_sge : 1;
	qp->max_inline = attr->cap.max_inline_data;
	qp->wrs = calloc(qp->max_wr ? qp->max_wr : 1, sizeof(*qp->wrs));
	qp->sges = calloc((size_t)(qp->max_wr ? qp->max_wr : 1) * qp->max_sge,
			  sizeof(*qp->sges));
	if (!qp->wrs || !qp->sges)
		return ENOMEM;
	qp->vqp.comp_mask |= VERBS_QP_EX;
	ex->wr_start = metaroce_wr_start;
	ex->wr_complete = metaroce_wr_complete;
	ex->wr_abort = metaroce_wr_abort;
	/* The builders asked for, as libibverbs' users expect. */
	if (ops & IBV_QP_EX_WITH_SEND)
		ex->wr_send = metaroce_wr_send;
	if (ops & IBV_QP_EX_WITH_SEND_WITH_IMM)
		ex->wr_send_imm = metaroce_wr_send_imm;
	if (ops & IBV_QP_EX_WITH_RDMA_WRITE)
		ex->wr_rdma_write = metaroce_wr_rdma_write;
	if (ops & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)
		ex->wr_rdma_write_imm = metaroce_wr_rdma_write_imm;
	if (ops & IBV_QP_EX_WITH_RDMA_READ)
		ex->wr_rdma_read = metaroce_wr_rdma_read;
	if (ops & IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP)
		ex->wr_atomic_cmp_swp = metaroce_wr_atomic_cmp_swp;
	if (ops & IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)
		ex->wr_atomic_fetch_add = metaroce_wr_atomic_fetch_add;
	ex->wr_set_sge = metaroce_wr_set_sge;
	ex->wr_set_sge_list = metaroce_wr_set_sge_list;
	ex->wr_set_inline_data = metaroce_wr_set_inline_data;
	ex->wr_set_inline_data_list = metaroce_wr_set_inline_data_list;
	if (attr->qp_type == IBV_QPT_UD)
		ex->wr_set_ud_addr = metaroce_wr_set_ud_addr;
	return 0;
}

static void metaroce_free_qp(struct metaroce_qp *qp)
{
	pthread_mutex_destroy(&qp->lock);
	free(qp->wrs);
	free(qp->sges);
	free(qp->inl);
	free(qp);
}

static struct ibv_qp *metaroce_create_qp_ex(struct ibv_context *context,
					    struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_create_qp cmd = {};
	struct ib_uverbs_create_qp_resp resp = {};
	bool ops = attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	struct metaroce_qp *qp;
	int ret;

	/* No XRC, creation flags, RSS or TSO; only the operations above. */
	if (attr->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD |
					  IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ||
	    (ops && attr->send_ops_flags & ~(uint64_t)METAROCE_SEND_OPS)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD)) {
		errno = EINVAL;
		return NULL;
	}
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;

	ret = ibv_cmd_create_qp_ex(context, &qp->vqp, attr, &cmd, sizeof(cmd),
				   &resp, sizeof(resp));
	if (ret) {
		free(qp);
		errno = ret;
		return NULL;
	}
	pthread_mutex_init(&qp->lock, NULL);
	if (ops) {
		ret = metaroce_setup_qp_ex(qp, attr);
		if (ret) {
			ibv_cmd_destroy_qp(&qp->vqp.qp);
			metaroce_free_qp(qp);
			errno = ret;
			return NULL;
		}
	}
	return &qp->vqp.qp;
}

static int metaroce_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
			     int attr_mask, struct ibv_qp_init_attr *init_attr)
{
	struct ibv_query_qp cmd = {};

	return ibv_cmd_query_qp(qp, attr, attr_mask, init_attr, &cmd,
				sizeof(cmd));
}

static int metaroce_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
			      int attr_mask)
{
	struct ibv_modify_qp cmd = {};

	return ibv_cmd_modify_qp(qp, attr, attr_mask, &cmd, sizeof(cmd));
}

static int metaroce_destroy_qp(struct ibv_qp *ibqp)
{
	uint32_t qpn = ibqp->qp_num;
	int ret;

	ret = ibv_cmd_destroy_qp(ibqp);
	if (ret)
		return ret;
	/* A QP with an SRQ has a recv_cq too. */
	metaroce_cq_drop_qp(ibqp->send_cq, qpn);
	if (ibqp->recv_cq != ibqp->send_cq)
		metaroce_cq_drop_qp(ibqp->recv_cq, qpn);
	metaroce_free_qp(to_mqp(ibqp));
	return 0;
}

/* Shared receive queues: the receives are posted with a system call each
 * chain, as for a QP's (POST_SRQ_RECV); the SRQ is the kernel's alone. */

static struct ibv_srq *metaroce_create_srq(struct ibv_pd *pd,
					   struct ibv_srq_init_attr *attr)
{
	struct ibv_create_srq cmd = {};
	struct ib_uverbs_create_srq_resp resp = {};
	struct verbs_srq *srq;
	int ret;

	srq = calloc(1, sizeof(*srq));
	if (!srq)
		return NULL;

	ret = ibv_cmd_create_srq(pd, &srq->srq, attr, &cmd, sizeof(cmd),
				 &resp, sizeof(resp));
	if (ret) {
		free(srq);
		errno = ret;
		return NULL;
	}
	return &srq->srq;
}

static int metaroce_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr,
			       int attr_mask)
{
	struct ibv_modify_srq cmd = {};

	return ibv_cmd_modify_srq(srq, attr, attr_mask, &cmd, sizeof(cmd));
}

static int metaroce_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct ibv_query_srq cmd = {};

	return ibv_cmd_query_srq(srq, attr, &cmd, sizeof(cmd));
}

static int metaroce_destroy_srq(struct ibv_srq *ibsrq)
{
	int ret;

	ret = ibv_cmd_destroy_srq(ibsrq);
	if (ret)
		return ret;
	free(container_of(ibsrq, struct verbs_srq, srq));
	return 0;
}

/* Address handles: the kernel resolves the destination MAC (RoCE), so the
 * attributes go down as they are. */

static struct ibv_ah *metaroce_create_ah(struct ibv_pd *pd,
					 struct ibv_ah_attr *attr)
{
	struct ib_uverbs_create_ah_resp resp = {};
	struct ibv_ah *ah;
	int ret;

	ah = calloc(1, sizeof(*ah));
	if (!ah)
		return NULL;

	ret = ibv_cmd_create_ah(pd, ah, attr, &resp, sizeof(resp));
	if (ret) {
		free(ah);
		errno = ret;
		return NULL;
	}
	return ah;
}

static int metaroce_destroy_ah(struct ibv_ah *ah)
{
	int ret;

	ret = ibv_cmd_destroy_ah(ah);
	if (ret)
		return ret;
	free(ah);
	return 0;
}

/* Context */

static void metaroce_free_context(struct ibv_context *ibctx)
{
	struct metaroce_context *ctx = to_mctx(ibctx);

	verbs_uninit_context(&ctx->vctx);
	free(ctx);
}

static const struct verbs_context_ops metaroce_ctx_ops = {
	.alloc_pd = metaroce_alloc_pd,
	.attach_mcast = ibv_cmd_attach_mcast,
	.create_ah = metaroce_create_ah,
	.create_cq = metaroce_create_cq,
	.create_cq_ex = metaroce_create_cq_ex,
	.create_qp = metaroce_create_qp,
	.create_qp_ex = metaroce_create_qp_ex,
	.create_srq = metaroce_create_srq,
	.dealloc_pd = metaroce_dealloc_pd,
	.dereg_mr = metaroce_dereg_mr,
	.destroy_ah = metaroce_destroy_ah,
	.destroy_cq = metaroce_destroy_cq,
	.destroy_qp = metaroce_destroy_qp,
	.destroy_srq = metaroce_destroy_srq,
	.detach_mcast = ibv_cmd_detach_mcast,
	.free_context = metaroce_free_context,
	.modify_qp = metaroce_modify_qp,
	.modify_srq = metaroce_modify_srq,
	/* The data path: one system call each, but poll_cq of a ring CQ. */
	.poll_cq = metaroce_poll_cq,
	.post_recv = ibv_cmd_post_recv,
	.post_send = ibv_cmd_post_send,
	.post_srq_recv = ibv_cmd_post_srq_recv,
	.req_notify_cq = ibv_cmd_req_notify_cq,
	.query_device_ex = metaroce_query_device_ex,
	.query_port = metaroce_query_port,
	.query_qp = metaroce_query_qp,
	.query_srq = metaroce_query_srq,
	.reg_mr = metaroce_reg_mr,
	.rereg_mr = metaroce_rereg_mr,
	.resize_cq = metaroce_resize_cq,
};

/*
 * verbs_err() reaches stderr only when VERBS_LOG_LEVEL and VERBS_LOG_FILE
 * say so; a context that cannot be opened is worth saying always.
 */
#define metaroce_refuse(ctx, fmt, ...)                                         \
	do {                                                                   \
		fprintf(stderr, "metaroce: %s: " fmt "\n",                     \
			(ctx)->vctx.context.device->name, ##__VA_ARGS__);      \
		verbs_err(&(ctx)->vctx, fmt "\n", ##__VA_ARGS__);              \
	} while (0)

/* Whether the environment variable NAME is set to something other than ""
 * or "0". */
static bool metaroce_env_set(const char *name)
{
	const char *v = getenv(name);

	return v && *v && strcmp(v, "0") != 0;
}

static struct verbs_context *metaroce_alloc_context(struct ibv_device *ibdev,
						    int cmd_fd,
						    void *private_data)
{
	struct ibv_get_context cmd = {};
	struct metaroce_get_context_resp resp = {};
	struct metaroce_context *ctx;
	int err;

	ctx = verbs_init_and_alloc_context(ibdev, cmd_fd, ctx, vctx,
					   RDMA_DRIVER_UNKNOWN);
	if (!ctx)
		return NULL;

	err = ibv_cmd_get_context(&ctx->vctx, &cmd, sizeof(cmd), NULL,
				  &resp.ibv_resp, sizeof(resp));
	if (err)
		goto fail;

	if (resp.drv.abi_version != METAROCE_UVERBS_ABI_VERSION) {
		metaroce_refuse(ctx,
				"the kernel speaks MetaRoCE user ABI %u, this provider %u: build the provider (scripts/build-rdma-core.sh) from the same metaroce tree as the module",
				resp.drv.abi_version,
				METAROCE_UVERBS_ABI_VERSION);
		err = EPROTONOSUPPORT;
		goto fail;
	}
	if (!(resp.drv.flags & METAROCE_UCTX_SYSCALL_QUEUES)) {
		metaroce_refuse(ctx,
				"the kernel does not offer system-call queues (context flags 0x%x), the only data path this provider has",
				resp.drv.flags);
		err = EOPNOTSUPP;
		goto fail;
	}

	ctx->flags = resp.drv.flags;
	ctx->max_inline_data = resp.drv.max_inline_data;
	ctx->max_paths = resp.drv.max_paths;
	ctx->cq_ring = (resp.drv.flags & METAROCE_UCTX_CQ_RING) &&
		       !metaroce_env_set("METAROCE_NO_RINGS");
	verbs_set_ops(&ctx->vctx, &metaroce_ctx_ops);
	return &ctx->vctx;

fail:
	verbs_uninit_context(&ctx->vctx);
	free(ctx);
	errno = err;
	return NULL;
}

/* Device matching */

/*
 * Which kernel devices are ours. libibverbs (init.c) first offers a device
 * to the providers whose match table names its netlink driver_id; ours has
 * none, since the module reports RDMA_DRIVER_UNKNOWN (it must not take
 * rxe's id). Every provider's match_device() is then called for each device
 * not yet claimed. We claim exactly those that
 *  - have no driver_id (rxe and siw report RDMA_DRIVER_RXE/_SIW, so they are
 *    never ours even if someone rewrites their node_desc), and
 *  - whose node_desc begins with "metaroce", the description the module
 *    gives each device.
 * libibverbs then checks the device's uverbs ABI version against
 * match_{min,max}_abi_version.
 */
static bool metaroce_match_device(struct verbs_sysfs_dev *sysfs_dev)
{
	static const char want[] = METAROCE_NODE_DESC;
	char desc[128];

	if (sysfs_dev->driver_id != RDMA_DRIVER_UNKNOWN)
		return false;
	if (ibv_read_ibdev_sysfs_file(desc, sizeof(desc), sysfs_dev,
				      "node_desc") <= 0)
		return false;
	return strncmp(desc, want, sizeof(want) - 1) == 0;
}

/* Empty, but not NULL: libibverbs walks every provider's table when it
 * matches a device by driver_id. */
static const struct verbs_match_ent metaroce_match_table[] = {
	{},
};

static struct verbs_device *
metaroce_alloc_device(struct verbs_sysfs_dev *sysfs_dev)
{
	struct metaroce_device *dev;

	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return NULL;
	return &dev->vdev;
}

static void metaroce_uninit_device(struct verbs_device *vdev)
{
	free(container_of(vdev, struct metaroce_device, vdev));
}

static const struct verbs_device_ops metaroce_dev_ops = {
	.name = "metaroce",
	.match_min_abi_version = METAROCE_UVERBS_ABI_VERSION,
	.match_max_abi_version = METAROCE_UVERBS_ABI_VERSION,
	.match_table = metaroce_match_table,
	.match_device = metaroce_match_device,
	.alloc_device = metaroce_alloc_device,
	.uninit_device = metaroce_uninit_device,
	.alloc_context = metaroce_alloc_context,
};
PROVIDER_DRIVER(metaroce, metaroce_dev_ops);
