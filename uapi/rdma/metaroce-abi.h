/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR BSD-2-Clause) */
/*
 * MetaRoCE user-space ABI: what the kernel module (metaroce.ko) and the
 * user-space provider (libmetaroce-rdmav*.so) exchange through the uverbs
 * driver-private data ("udata") of the create calls.
 *
 * Data path: work requests go to the kernel with the generic uverbs
 * POST_SEND / POST_RECV commands. Completions come back through a completion
 * ring shared with user space (mmap()ed on the device's file) when the
 * context offers METAROCE_UCTX_CQ_RING and the provider asks for one at
 * CREATE_CQ; otherwise with POLL_CQ. Documentation/abi.md gives the layout,
 * the reasons and the measured costs.
 *
 * Versioning: METAROCE_UVERBS_ABI_VERSION is the device's uverbs ABI version
 * (reported by the kernel, checked by libibverbs against the provider's
 * range). A change that an old provider could misread bumps it; additions
 * that an old provider may ignore set a bit in metaroce_alloc_ucontext_resp.flags.
 */
#ifndef METAROCE_ABI_USER_H
#define METAROCE_ABI_USER_H

#include <linux/types.h>

#define METAROCE_UVERBS_ABI_VERSION 1

/* The node description every MetaRoCE device reports (sysfs node_desc);
 * the provider matches devices on it. */
#define METAROCE_NODE_DESC "metaroce"

enum metaroce_ucontext_flags {
	/* Work requests and completions travel by system call. */
	METAROCE_UCTX_SYSCALL_QUEUES = 1 << 0,
	/* CREATE_CQ may ask for a completion ring (struct metaroce_create_cq_cmd). */
	METAROCE_UCTX_CQ_RING = 1 << 1,
};

/* ALLOC_CONTEXT: the request carries no driver data. */
struct metaroce_alloc_ucontext_resp {
	__u32 abi_version;	/* METAROCE_UVERBS_ABI_VERSION */
	__u32 flags;		/* enum metaroce_ucontext_flags */
	__u32 max_inline_data;	/* bytes a send may carry inline */
	__u32 max_paths;	/* paths (UDP source ports) per connection */
};

enum metaroce_cq_flags {
	/* The CQ's completions are written to a ring mapped into user space. */
	METAROCE_CQ_RING = 1 << 0,
};

/*
 * CREATE_CQ (and CREATE_CQ_EX) request: either no driver data (a CQ polled
 * with POLL_CQ) or this. Unknown flags, a non-zero `reserved` or non-zero
 * bytes after it are refused (EINVAL).
 */
struct metaroce_create_cq_cmd {
	__u32 flags;		/* enum metaroce_cq_flags */
	__u32 reserved;		/* zero */
};

/*
 * CREATE_CQ response to a request with METAROCE_CQ_RING, and RESIZE_CQ
 * response of a ring CQ (which needs room for it: EINVAL otherwise). Without
 * METAROCE_CQ_RING in `flags` (the module was loaded with cq_ring=0) the CQ
 * has no ring and is polled with POLL_CQ.
 *
 * The ring is `mmap_len` bytes at `mmap_offset` of the device's file, mapped
 * shared (MAP_SHARED, PROT_READ | PROT_WRITE, never PROT_EXEC): a struct
 * metaroce_cq_ring_hdr, then `nslots` struct metaroce_cqe from byte
 * `entries_offset`. Completion number i (counting from 0 since the ring was
 * created or resized) is in slot i & (nslots - 1). At most `cqe` (the CQ's
 * size, as the core reports it) are unread at a time: one that finds the
 * CQ full is dropped and the CQ's IBV_EVENT_CQ_ERR raised, as without a ring.
 * After a RESIZE_CQ the old mapping is stale: unmap it and map the new one.
 */
struct metaroce_cq_ring_resp {
	__u32 flags;		/* enum metaroce_cq_flags */
	__u32 nslots;		/* a power of two, at least the CQ's cqe */
	__aligned_u64 mmap_offset;
	__u32 mmap_len;
	__u32 entries_offset;
};

/*
 * The ring's header. Both indices run free (they wrap at 2^32). The kernel
 * writes `prod` (store-release, after the entries) and reads `cons`
 * (load-acquire) as a count only: it keeps its own `prod`, and a `cons`
 * that is not between that `prod` minus the CQ's size and `prod` makes the
 * CQ full (and a resize fail). User space reads `prod` (load-acquire), then
 * the entries, then stores `cons` (store-release); the kernel never writes
 * it.
 */
struct metaroce_cq_ring_hdr {
	__u32 prod;
	__u32 reserved0[31];	/* `cons` on its own cache line (128 bytes) */
	__u32 cons;
	__u32 reserved1[31];
};

/* One completion, as POLL_CQ would return it (struct ib_uverbs_wc). */
struct metaroce_cqe {
	__aligned_u64 wr_id;
	__u32 status;
	__u32 opcode;
	__u32 vendor_err;
	__u32 byte_len;
	__u32 ex;		/* imm_data (big endian) or invalidate_rkey */
	__u32 qp_num;
	__u32 src_qp;
	__u32 wc_flags;
	__u16 pkey_index;
	__u16 slid;
	__u8 sl;
	__u8 dlid_path_bits;
	__u8 port_num;
	__u8 reserved0;
	__u32 reserved1[4];	/* 64 bytes a slot */
};

/*
 * Every other call: no driver data in either direction (RESIZE_CQ: none
 * in the request; a ring CQ's answer is above). The kernel refuses (EINVAL)
 * a request that carries any in ALLOC_CONTEXT, ALLOC_PD, RESIZE_CQ,
 * CREATE_QP, MODIFY_QP, CREATE_SRQ, MODIFY_SRQ, REG_MR, REREG_MR, CREATE_AH
 * and QUERY_DEVICE, and writes none back otherwise.
 */

#endif /* METAROCE_ABI_USER_H */
