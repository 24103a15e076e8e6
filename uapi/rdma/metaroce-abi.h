/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR BSD-2-Clause) */
/*
 * MetaRoCE user-space ABI: what the kernel module (metaroce.ko) and the
 * user-space provider (libmetaroce-rdmav*.so) exchange through the uverbs
 * driver-private data ("udata") of the create calls.
 *
 * Data path: system calls. Work requests go to the kernel with the generic
 * uverbs POST_SEND / POST_RECV commands and completions come back with
 * POLL_CQ; no queue is shared with user space and nothing is mmap()ed.
 * Documentation/abi.md gives the reasons and the measured costs.
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
};

/* ALLOC_CONTEXT: the request carries no driver data. */
struct metaroce_alloc_ucontext_resp {
	__u32 abi_version;	/* METAROCE_UVERBS_ABI_VERSION */
	__u32 flags;		/* enum metaroce_ucontext_flags */
	__u32 max_inline_data;	/* bytes a send may carry inline */
	__u32 max_paths;	/* paths (UDP source ports) per connection */
};

/*
 * Every other call: no driver data in either direction. The kernel refuses
 * (EINVAL) a request that carries any in ALLOC_CONTEXT, ALLOC_PD, CREATE_CQ,
 * RESIZE_CQ, CREATE_QP, MODIFY_QP, CREATE_SRQ, MODIFY_SRQ, REG_MR, REREG_MR,
 * CREATE_AH and QUERY_DEVICE, and writes none back.
 */

#endif /* METAROCE_ABI_USER_H */
