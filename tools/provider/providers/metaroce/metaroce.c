// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * MetaRoCE: the libibverbs provider (libmetaroce-rdmav<PABI>.so).
 *
 * The kernel module (metaroce.ko) does the whole transport. This provider
 * only connects libibverbs to it, and every verb is a uverbs system call:
 *
 *  - the data path (post_send, post_recv, poll_cq, req_notify_cq) uses the
 *    generic POST_SEND / POST_RECV / POLL_CQ / REQ_NOTIFY_CQ commands; no
 *    queue is shared with the kernel and nothing is mmap()ed;
 *  - the control path uses the generic ibv_cmd_* helpers. Only ALLOC_CONTEXT
 *    carries driver data (struct metaroce_alloc_ucontext_resp, kernel to
 *    user); every create call carries none in either direction, and the
 *    kernel refuses a request that does.
 *
 * The ABI is uapi/rdma/metaroce-abi.h of the metaroce tree; Documentation/
 * abi.md there says how this file is built into rdma-core and installed.
 */
#include <config.h>

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/driver.h>
#include <rdma/metaroce-abi.h>

struct metaroce_device {
	struct verbs_device vdev;
};

struct metaroce_context {
	struct verbs_context vctx;
	uint32_t flags;			/* enum metaroce_ucontext_flags */
	uint32_t max_inline_data;
	uint32_t max_paths;
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
};

struct metaroce_qp {
	struct verbs_qp vqp;
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

static int metaroce_dereg_mr(struct verbs_mr *vmr)
{
	int ret;

	ret = ibv_cmd_dereg_mr(vmr);
	if (ret)
		return ret;
	free(vmr);
	return 0;
}

/* Completion queues */

static struct ibv_cq *metaroce_create_cq(struct ibv_context *context, int cqe,
					 struct ibv_comp_channel *channel,
					 int comp_vector)
{
	struct ibv_create_cq cmd = {};
	struct ib_uverbs_create_cq_resp resp = {};
	struct metaroce_cq *cq;
	int ret;

	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return NULL;

	ret = ibv_cmd_create_cq(context, cqe, channel, comp_vector,
				&cq->vcq.cq, &cmd, sizeof(cmd), &resp,
				sizeof(resp));
	if (ret) {
		free(cq);
		errno = ret;
		return NULL;
	}
	return &cq->vcq.cq;
}

static int metaroce_resize_cq(struct ibv_cq *cq, int cqe)
{
	struct ibv_resize_cq cmd = {};
	struct ib_uverbs_resize_cq_resp resp = {};

	return ibv_cmd_resize_cq(cq, cqe, &cmd, sizeof(cmd), &resp,
				 sizeof(resp));
}

static int metaroce_destroy_cq(struct ibv_cq *ibcq)
{
	int ret;

	ret = ibv_cmd_destroy_cq(ibcq);
	if (ret)
		return ret;
	free(to_mcq(ibcq));
	return 0;
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
	int ret;

	ret = ibv_cmd_destroy_qp(ibqp);
	if (ret)
		return ret;
	free(to_mqp(ibqp));
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
	.create_ah = metaroce_create_ah,
	.create_cq = metaroce_create_cq,
	.create_qp = metaroce_create_qp,
	.dealloc_pd = metaroce_dealloc_pd,
	.dereg_mr = metaroce_dereg_mr,
	.destroy_ah = metaroce_destroy_ah,
	.destroy_cq = metaroce_destroy_cq,
	.destroy_qp = metaroce_destroy_qp,
	.free_context = metaroce_free_context,
	.modify_qp = metaroce_modify_qp,
	/* The data path: one system call each. */
	.poll_cq = ibv_cmd_poll_cq,
	.post_recv = ibv_cmd_post_recv,
	.post_send = ibv_cmd_post_send,
	.req_notify_cq = ibv_cmd_req_notify_cq,
	.query_device_ex = metaroce_query_device_ex,
	.query_port = metaroce_query_port,
	.query_qp = metaroce_query_qp,
	.reg_mr = metaroce_reg_mr,
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
