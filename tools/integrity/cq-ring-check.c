// SPDX-License-Identifier: GPL-2.0
/*
 * cq-ring-check: completion rings shared with user space
 * (uapi/rdma/metaroce-abi.h: METAROCE_UCTX_CQ_RING, struct
 * metaroce_create_cq_cmd, struct metaroce_cq_ring_resp, struct
 * metaroce_cq_ring_hdr, struct metaroce_cqe), on one device.
 *
 *   cq-ring-check -d DEVICE [-g GID_INDEX] [-r] [-v]
 *   cq-ring-check -l          (the names of the checks, in order)
 *
 * Whether rings are offered is asked of the kernel itself: a second open
 * of the device's file (/dev/infiniband/uverbsN) gets a context of its own
 * by a raw GET_CONTEXT, whose struct metaroce_alloc_ucontext_resp says
 * whether METAROCE_UCTX_CQ_RING is set. On a device that is not MetaRoCE
 * (sysfs node_desc), or whose context does not offer rings (an older
 * module, or one loaded with cq_ring=0), every check prints "SKIP name:
 * why"; with -r (rings are required), or CQ_RING_REQUIRED set in the
 * environment (not empty, not "0"), a context without rings makes every
 * check print "FAIL name: the context offers no CQ ring" instead.
 *
 * The first part writes raw uverbs commands to the device's command file
 * (ibv_context.cmd_fd), as udata-check does, and maps the ring itself:
 *
 * - cmd_unknown_flag_refused: CREATE_CQ with flags 2, and with
 *   METAROCE_CQ_RING | 2: EINVAL;
 * - cmd_reserved_refused: the ring flag with reserved 1: EINVAL;
 * - cmd_short_refused: 4 bytes of driver data: EINVAL;
 * - cmd_tail_refused: the 8-byte command and 8 non-zero bytes: EINVAL;
 * - cmd_zero_tail_accepted: the command and 8 zero bytes: success;
 * - ring_needs_response_room: a ring request with room for the core
 *   response only, and with room for all but 4 bytes of the ring's: EINVAL;
 * - ring_created: a ring CQ of 100: flags METAROCE_CQ_RING, cqe 100, a
 *   power of two of at least 100 slots, entries after the header,
 *   page-aligned offset, a length of whole pages holding all the slots;
 * - mmap_wrong_len: its length less one page, and plus one page: EINVAL;
 * - mmap_private: MAP_PRIVATE: EINVAL;
 * - mmap_exec: PROT_READ | PROT_EXEC: EPERM (SKIP when the device's file
 *   is on a noexec mount: the VFS refuses PROT_EXEC there itself, so the
 *   driver's refusal cannot show);
 * - mmap_bad_offset: its offset plus one page (inside the ring) and plus
 *   1 GiB: EINVAL;
 * - mmap_ok: MAP_SHARED, PROT_READ | PROT_WRITE, exact length: mapped,
 *   every page readable, prod and cons 0;
 * - mprotect_exec: making that mapping executable fails (SKIP on a noexec
 *   mount, as mmap_exec);
 * - mremap_grow: growing it by a page (MREMAP_MAYMOVE) fails;
 * - mmap_after_destroy: after DESTROY_CQ its offset maps no more: EINVAL;
 * - mapping_outlives_cq: the mapping made before stays readable and
 *   writable (no SIGBUS or SIGSEGV), and unmaps.
 *
 * The second part goes through libibverbs: the provider maps each CQ's ring
 * itself, and the ring of a CQ is found as the one new mapping of the
 * device's file in /proc/self/maps (same inode; its offset is the ring's
 * mmap_offset) after ibv_create_cq. Completions are made by flushing
 * receives: an RC QP in INIT takes receives, and moved to the error state
 * completes them with IBV_WC_WR_FLUSH_ERR; a receive posted to a QP in
 * the error state completes so at once.
 *
 * - ring_completions: a CQ of 16, a QP with 8 receives, moved to the error
 *   state: prod becomes 8 and the 8 slots hold the flushes (wr_id, status,
 *   qp_num); ibv_poll_cq returns them in order, then nothing; cons is 8;
 * - poll_cq_syscall_returns_nothing: a raw POLL_CQ of that CQ while the 8
 *   are in its ring returns none (they are for ibv_poll_cq to read);
 * - loopback_data: two RC QPs connected over the device's own GID, each
 *   with a ring CQ: an RDMA Write with immediate of 64 KiB and a Send with
 *   immediate of 32 bytes: wr_id, status, opcode, byte_len, IBV_WC_WITH_IMM,
 *   imm_data and qp_num of the 2 + 2 completions, every byte, prod and cons
 *   of both rings;
 * - ring_fills_to_cqe: a healthy CQ of 8 takes 8 flushes unread: prod 8
 *   and no IBV_EVENT_CQ_ERR within 1 s; a ninth overruns it
 *   (IBV_EVENT_CQ_ERR within 5 s, prod still 8), and the first 8 are polled
 *   in order, then nothing;
 * - cons_ahead_overruns_own_cq: a CQ of 8 with 2 completions read; cons
 *   is set to prod + 1000 and 4 receives are flushed: IBV_EVENT_CQ_ERR for
 *   this CQ within 5 s, prod unchanged and nothing to poll; the CQ of
 *   ring_completions still gets a flush of its QP, and no error event;
 * - cons_behind_overruns_own_cq: the same with cons = prod - 9 (more
 *   unread than the CQ holds);
 * - resize_keeps_unread: a CQ of 8 with 6 completions read and 4 unread
 *   (slots 6, 7, 0, 1) resized to 64: a new ring at a new offset, the old
 *   one unmapped, prod 4, the 4 polled in order; one more arrives after;
 * - resize_too_small: with 4 unread, a resize to 3 fails and to 4
 *   succeeds; the 4 are polled in order;
 * - resize_corrupt_cons_refused: a CQ of 8 with 2 completions read and 3
 *   unread; its cons (read first: the provider's) is set to prod + 1000
 *   and ibv_resize_cq to 16 fails with EINVAL, the old ring still mapped
 *   and prod unchanged; with cons written back the 3 are polled in order;
 * - destroyed_qp_completions_removed: a CQ of 16 shared by two QPs, A and
 *   B, with 4 flushes of each, interleaved (A A B B A A B B: 2 receives
 *   of each flushed by the move to the error state, then 2 posted to each
 *   in it); after ibv_destroy_qp of A, polling returns B's 4 in order and
 *   none of A's; one more of B is polled after them;
 * - req_notify_event: a CQ on a completion channel: no event for a
 *   completion while not armed (0.3 s); armed, the next one brings an
 *   event for it within 5 s.
 *
 * With METAROCE_NO_RINGS set (not empty, not "0") the provider uses no
 * rings, and the second part's checks print SKIP.
 *
 * Each check prints "PASS name", "FAIL name: why" or "SKIP name: why"
 * (and "# " lines for notes); the exit status is the number of failures,
 * or 4 (kselftest's skip) when every check was skipped. Every wait has a
 * deadline. Needs <rdma/ib_user_verbs.h> (linux-libc-dev).
 */
#define _GNU_SOURCE
#include "common.h"
#include "../../uapi/rdma/metaroce-abi.h"

#include <rdma/ib_user_verbs.h>

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

const char prog_name[] = "cq-ring-check";

enum {
	/* raw commands */
	C_UNKNOWN_FLAG, C_RESERVED, C_SHORT, C_TAIL, C_ZERO_TAIL, C_RESP_ROOM,
	C_CREATED, C_WRONG_LEN, C_PRIVATE, C_EXEC, C_BAD_OFFSET, C_MMAP_OK,
	C_MPROTECT, C_MREMAP, C_AFTER_DESTROY, C_OUTLIVES,
	/* through libibverbs */
	C_COMPLETIONS, C_POLL_SYSCALL, C_LOOPBACK, C_FILLS, C_CONS_AHEAD,
	C_CONS_BEHIND, C_RESIZE, C_RESIZE_SMALL, C_RESIZE_CORRUPT,
	C_DESTROYED_QP, C_NOTIFY,
	C_N
};

static const char *const checks[C_N] = {
	[C_UNKNOWN_FLAG] = "cmd_unknown_flag_refused",
	[C_RESERVED] = "cmd_reserved_refused",
	[C_SHORT] = "cmd_short_refused",
	[C_TAIL] = "cmd_tail_refused",
	[C_ZERO_TAIL] = "cmd_zero_tail_accepted",
	[C_RESP_ROOM] = "ring_needs_response_room",
	[C_CREATED] = "ring_created",
	[C_WRONG_LEN] = "mmap_wrong_len",
	[C_PRIVATE] = "mmap_private",
	[C_EXEC] = "mmap_exec",
	[C_BAD_OFFSET] = "mmap_bad_offset",
	[C_MMAP_OK] = "mmap_ok",
	[C_MPROTECT] = "mprotect_exec",
	[C_MREMAP] = "mremap_grow",
	[C_AFTER_DESTROY] = "mmap_after_destroy",
	[C_OUTLIVES] = "mapping_outlives_cq",
	[C_COMPLETIONS] = "ring_completions",
	[C_POLL_SYSCALL] = "poll_cq_syscall_returns_nothing",
	[C_LOOPBACK] = "loopback_data",
	[C_FILLS] = "ring_fills_to_cqe",
	[C_CONS_AHEAD] = "cons_ahead_overruns_own_cq",
	[C_CONS_BEHIND] = "cons_behind_overruns_own_cq",
	[C_RESIZE] = "resize_keeps_unread",
	[C_RESIZE_SMALL] = "resize_too_small",
	[C_RESIZE_CORRUPT] = "resize_corrupt_cons_refused",
	[C_DESTROYED_QP] = "destroyed_qp_completions_removed",
	[C_NOTIFY] = "req_notify_event",
};

#define RAW_CQE 100		/* the raw ring CQ's size: 128 slots, 3 pages */
#define WAIT 5.0		/* seconds for a completion or an event */
#define MAXMAPS 64		/* mappings of the device's file we keep track of */
#define LOOP_LEN 65536		/* the loopback Write */
#define LOOP_MSG 32		/* the loopback Send */
/* Why mmap_exec and mprotect_exec prove nothing on a noexec mount. */
#define NOEXEC_WHY "the device's file is on a noexec mount: the VFS refuses PROT_EXEC itself"

static struct rdma_dev dev;
static size_t page;
static int skipped;
/* Where a ring's slots begin, as ring_created learned it (the provider's
 * rings are read with the same layout). */
static size_t entries_at = sizeof(struct metaroce_cq_ring_hdr);

/* "SKIP NAME: why" on stdout. */
static void __attribute__((format(printf, 2, 3)))
skip(const char *name, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	printf("SKIP %s: %s\n", name, why);
	skipped++;
}

/* ---------- raw uverbs commands ---------- */

/*
 * Writes command CMD with request REQ (LEN bytes, driver data included) to
 * FD, with room for a response of RESP_LEN bytes (the request's `response`
 * points to it): 0 or the errno value.
 */
static int command(int fd, uint32_t cmd, const void *req, size_t len,
		   size_t resp_len)
{
	uint8_t buf[sizeof(struct ib_uverbs_cmd_hdr) + 128];
	struct ib_uverbs_cmd_hdr hdr = { .command = cmd };
	size_t total = sizeof(hdr) + len;
	ssize_t n;

	if (len > 128 || total % 4 || resp_len % 4)
		die("command %u: a request of %zu bytes, a response of %zu",
		    cmd, len, resp_len);
	hdr.in_words = (uint16_t)(total / 4);
	hdr.out_words = (uint16_t)(resp_len / 4);
	memcpy(buf, &hdr, sizeof(hdr));
	memcpy(buf + sizeof(hdr), req, len);
	n = write(fd, buf, total);
	if (n < 0)
		return errno;
	return (size_t)n == total ? 0 : EIO;
}

/* CREATE_CQ's response: the core's, then the ring's. */
struct cq_out {
	uint32_t cq_handle, cqe;
	struct metaroce_cq_ring_resp ring;
};
_Static_assert(offsetof(struct cq_out, ring) ==
	       sizeof(struct ib_uverbs_create_cq_resp),
	       "the driver's response follows the core's");

/*
 * A raw CREATE_CQ of CQE entries with DRV_LEN bytes of driver data DRV and
 * room for OUT_LEN bytes of response in *OUT (filled with 0xee first, so a
 * field the kernel does not write shows): 0 or the errno value.
 */
static int create_cq_raw(uint32_t cqe, const void *drv, size_t drv_len,
			 size_t out_len, struct cq_out *out)
{
	struct ib_uverbs_create_cq c = {
		.response = (uintptr_t)out,
		.cqe = cqe,
		.comp_channel = -1,
	};
	uint8_t req[sizeof(c) + 32];

	if (drv_len > 32)
		die("create_cq_raw: %zu bytes of driver data", drv_len);
	memset(out, 0xee, sizeof(*out));
	memcpy(req, &c, sizeof(c));
	memcpy(req + sizeof(c), drv, drv_len);
	return command(dev.ctx->cmd_fd, IB_USER_VERBS_CMD_CREATE_CQ, req,
		       sizeof(c) + drv_len, out_len);
}

/* A raw ring CREATE_CQ: the command, then DRV_TAIL bytes of TAIL_BYTE. */
static int create_ring_cq(uint32_t flags, uint32_t reserved, size_t tail,
			  uint8_t tail_byte, size_t out_len, struct cq_out *out)
{
	struct metaroce_create_cq_cmd cmd = { .flags = flags,
					      .reserved = reserved };
	uint8_t drv[sizeof(cmd) + 16];

	memcpy(drv, &cmd, sizeof(cmd));
	memset(drv + sizeof(cmd), tail_byte, sizeof(drv) - sizeof(cmd));
	return create_cq_raw(RAW_CQE, drv, sizeof(cmd) + tail, out_len, out);
}

static void destroy_cq_raw(uint32_t handle)
{
	struct ib_uverbs_destroy_cq_resp resp = {};
	struct ib_uverbs_destroy_cq req = {
		.response = (uintptr_t)&resp,
		.cq_handle = handle,
	};
	int rc = command(dev.ctx->cmd_fd, IB_USER_VERBS_CMD_DESTROY_CQ, &req,
			 sizeof(req), sizeof(resp));

	if (rc)
		die("DESTROY_CQ: %s", strerror(rc));
}

/* EXPECT(name, rc, EINVAL) for a CREATE_CQ that must be refused; destroys
 * the CQ if it was not. */
static void refused(const char *name, int rc, const struct cq_out *out)
{
	expect(name, rc, EINVAL);
	if (!rc)
		destroy_cq_raw(out->cq_handle);
}

/* A raw POLL_CQ of the CQ HANDLE for up to 8 completions: how many came
 * (-1 with *ERR set when the call failed). */
static int poll_cq_raw(uint32_t handle, int *err)
{
	union {
		uint8_t b[8 + 8 * sizeof(struct ib_uverbs_wc)];
		uint64_t align;
	} resp;
	struct ib_uverbs_poll_cq req = {
		.response = (uintptr_t)&resp,
		.cq_handle = handle,
		.ne = 8,
	};
	uint32_t count;

	memset(&resp, 0xee, sizeof(resp));
	*err = command(dev.ctx->cmd_fd, IB_USER_VERBS_CMD_POLL_CQ, &req,
		       sizeof(req), sizeof(resp));
	if (*err)
		return -1;
	memcpy(&count, resp.b, 4);
	return (int)count;
}

/*
 * What the device's contexts offer: a raw GET_CONTEXT on a second open of
 * the command file (through /proc/self/fd, so the very device libibverbs
 * opened; closed after) and the flags of its struct
 * metaroce_alloc_ucontext_resp. 0, or the errno value.
 */
static int context_flags(uint32_t *flags)
{
	struct {
		uint32_t async_fd, num_comp_vectors;
		struct metaroce_alloc_ucontext_resp drv;
	} out;
	struct ib_uverbs_get_context req = { .response = (uintptr_t)&out };
	char path[64];
	int fd, rc;

	_Static_assert(offsetof(__typeof__(out), drv) ==
		       sizeof(struct ib_uverbs_get_context_resp),
		       "the driver's response follows the core's");
	snprintf(path, sizeof(path), "/proc/self/fd/%d", dev.ctx->cmd_fd);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return errno;
	memset(&out, 0, sizeof(out));
	rc = command(fd, IB_USER_VERBS_CMD_GET_CONTEXT, &req, sizeof(req),
		     sizeof(out));
	if (!rc) {
		close((int)out.async_fd);
		vmsg("a second context: ABI %u, flags %#x", out.drv.abi_version,
		     out.drv.flags);
		*flags = out.drv.flags;
	}
	close(fd);
	return rc;
}

/* Whether the device says it is MetaRoCE (its sysfs node_desc). */
static bool is_metaroce(char *desc, size_t len)
{
	char path[IBV_SYSFS_PATH_MAX + 16];
	FILE *f;

	snprintf(path, sizeof(path), "%s/node_desc", dev.ctx->device->ibdev_path);
	f = fopen(path, "r");
	desc[0] = 0;
	if (f) {
		if (!fgets(desc, (int)len, f))
			desc[0] = 0;
		fclose(f);
	}
	desc[strcspn(desc, "\n")] = 0;
	return !strcmp(desc, METAROCE_NODE_DESC);
}

/* ---------- reading a mapping without dying of it ---------- */

static sigjmp_buf fault_jmp;
static volatile sig_atomic_t fault_sig;

static void on_fault(int sig)
{
	fault_sig = sig;
	siglongjmp(fault_jmp, 1);
}

/* Reads (and with WRITE, writes back) one word of each page of [P, P+LEN):
 * 0, or the signal that stopped it (SIGBUS, SIGSEGV). */
static int touch(volatile uint8_t *p, size_t len, bool write)
{
	struct sigaction sa = { .sa_handler = on_fault }, old_bus, old_segv;

	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, &old_bus);
	sigaction(SIGSEGV, &sa, &old_segv);
	fault_sig = 0;
	if (!sigsetjmp(fault_jmp, 1)) {
		for (size_t off = 0; off < len; off += page) {
			volatile uint32_t *w =
				(volatile uint32_t *)(p + off + page - 64);
			uint32_t v = *w;

			if (write)
				*w = v;
		}
	}
	sigaction(SIGBUS, &old_bus, NULL);
	sigaction(SIGSEGV, &old_segv, NULL);
	return fault_sig;
}

/* ---------- the raw part ---------- */

static void raw_checks(void)
{
	uint32_t ring = METAROCE_CQ_RING;
	struct cq_out out;
	struct metaroce_cq_ring_resp r;
	const struct metaroce_cq_ring_hdr *h;
	struct statvfs sv;
	size_t full = sizeof(out), len;
	uint64_t off;
	bool have_ring, noexec;
	void *p, *q;
	int rc, rc2;

	/* cmd_unknown_flag_refused: a flag the ABI does not define, alone and
	 * with the ring's. */
	rc = create_ring_cq(2, 0, 0, 0, full, &out);
	if (!rc)
		destroy_cq_raw(out.cq_handle);
	rc2 = create_ring_cq(ring | 2, 0, 0, 0, full, &out);
	if (!rc2)
		destroy_cq_raw(out.cq_handle);
	if (rc != EINVAL || rc2 != EINVAL)
		check_result(checks[C_UNKNOWN_FLAG], "flags 2: %s, flags 3: %s, want EINVAL",
			     rc ? strerror(rc) : "accepted",
			     rc2 ? strerror(rc2) : "accepted");
	else
		check_result(checks[C_UNKNOWN_FLAG], NULL);

	rc = create_ring_cq(ring, 1, 0, 0, full, &out);
	refused(checks[C_RESERVED], rc, &out);

	/* cmd_short_refused: half of the command. */
	rc = create_cq_raw(RAW_CQE, &ring, 4, full, &out);
	refused(checks[C_SHORT], rc, &out);

	rc = create_ring_cq(ring, 0, 8, 0xa5, full, &out);
	refused(checks[C_TAIL], rc, &out);

	rc = create_ring_cq(ring, 0, 8, 0, full, &out);
	expect(checks[C_ZERO_TAIL], rc, 0);
	if (!rc)
		destroy_cq_raw(out.cq_handle);

	/* ring_needs_response_room: room for the core response only, then
	 * for all but the ring response's last 4 bytes. */
	rc = create_ring_cq(ring, 0, 0, 0, sizeof(struct ib_uverbs_create_cq_resp),
			    &out);
	if (!rc)
		destroy_cq_raw(out.cq_handle);
	rc2 = create_ring_cq(ring, 0, 0, 0, full - 4, &out);
	if (!rc2)
		destroy_cq_raw(out.cq_handle);
	if (rc != EINVAL || rc2 != EINVAL)
		check_result(checks[C_RESP_ROOM],
			     "room for the core response: %s; for all but 4 bytes: %s; want EINVAL",
			     rc ? strerror(rc) : "accepted",
			     rc2 ? strerror(rc2) : "accepted");
	else
		check_result(checks[C_RESP_ROOM], NULL);

	/* ring_created */
	rc = create_ring_cq(ring, 0, 0, 0, full, &out);
	r = out.ring;
	have_ring = false;
	if (rc) {
		check_result(checks[C_CREATED], "CREATE_CQ of %u with a ring: %s",
			     RAW_CQE, strerror(rc));
	} else if (r.flags != METAROCE_CQ_RING) {
		check_result(checks[C_CREATED], "response flags %#x, want %#x",
			     r.flags, METAROCE_CQ_RING);
	} else if (out.cqe != RAW_CQE || r.nslots < RAW_CQE ||
		   (r.nslots & (r.nslots - 1))) {
		check_result(checks[C_CREATED], "cqe %u, %u slots for a CQ of %u",
			     out.cqe, r.nslots, RAW_CQE);
	} else if (r.entries_offset < sizeof(struct metaroce_cq_ring_hdr) ||
		   r.entries_offset % 8 || r.mmap_len % page || r.mmap_offset % page ||
		   r.mmap_len < (uint64_t)r.entries_offset +
				(uint64_t)r.nslots * sizeof(struct metaroce_cqe)) {
		check_result(checks[C_CREATED],
			     "%u slots from byte %u of %u bytes at offset %#llx",
			     r.nslots, r.entries_offset, r.mmap_len,
			     (unsigned long long)r.mmap_offset);
	} else {
		check_result(checks[C_CREATED], NULL);
		have_ring = true;
		entries_at = r.entries_offset;
	}
	vmsg("raw ring CQ: handle %u, cqe %u, flags %#x, %u slots from byte %u, %u bytes at offset %#llx",
	     out.cq_handle, out.cqe, r.flags, r.nslots, r.entries_offset,
	     r.mmap_len, (unsigned long long)r.mmap_offset);
	if (!have_ring) {
		for (int c = C_WRONG_LEN; c <= C_OUTLIVES; c++)
			check_result(checks[c], "no ring (%s)", checks[C_CREATED]);
		if (!rc)
			destroy_cq_raw(out.cq_handle);
		return;
	}
	len = r.mmap_len;
	off = r.mmap_offset;
	/* On a noexec mount the VFS refuses PROT_EXEC before the driver is
	 * asked: there mmap_exec and mprotect_exec cannot fail. */
	noexec = !fstatvfs(dev.ctx->cmd_fd, &sv) && (sv.f_flag & ST_NOEXEC);

	/* mmap_wrong_len (a ring of one page has no shorter length to try:
	 * an empty mapping fails whatever the driver does). */
	rc = EINVAL;
	if (len > page) {
		p = mmap(NULL, len - page, PROT_READ | PROT_WRITE, MAP_SHARED,
			 dev.ctx->cmd_fd, (off_t)off);
		rc = p == MAP_FAILED ? errno : 0;
		if (!rc)
			munmap(p, len - page);
	}
	q = mmap(NULL, len + page, PROT_READ | PROT_WRITE, MAP_SHARED,
		 dev.ctx->cmd_fd, (off_t)off);
	rc2 = q == MAP_FAILED ? errno : 0;
	if (!rc2)
		munmap(q, len + page);
	if (rc != EINVAL || rc2 != EINVAL)
		check_result(checks[C_WRONG_LEN], "%zu bytes: %s; %zu bytes: %s; want EINVAL",
			     len - page, rc ? strerror(rc) : "mapped",
			     len + page, rc2 ? strerror(rc2) : "mapped");
	else
		check_result(checks[C_WRONG_LEN], NULL);

	/* mmap_private */
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE,
		 dev.ctx->cmd_fd, (off_t)off);
	rc = p == MAP_FAILED ? errno : 0;
	if (!rc)
		munmap(p, len);
	if (rc != EINVAL)
		check_result(checks[C_PRIVATE], "%s, want EINVAL",
			     rc ? strerror(rc) : "mapped");
	else
		check_result(checks[C_PRIVATE], NULL);

	/* mmap_exec */
	p = mmap(NULL, len, PROT_READ | PROT_EXEC, MAP_SHARED,
		 dev.ctx->cmd_fd, (off_t)off);
	rc = p == MAP_FAILED ? errno : 0;
	if (!rc)
		munmap(p, len);
	if (rc && noexec)
		skip(checks[C_EXEC], NOEXEC_WHY " (%s)", strerror(rc));
	else if (rc != EPERM)
		check_result(checks[C_EXEC], "%s, want EPERM",
			     rc ? strerror(rc) : "mapped");
	else
		check_result(checks[C_EXEC], NULL);

	/* mmap_bad_offset: the ring's second page (inside it, not its start)
	 * and far beyond it. */
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED,
		 dev.ctx->cmd_fd, (off_t)(off + page));
	rc = p == MAP_FAILED ? errno : 0;
	if (!rc)
		munmap(p, len);
	q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED,
		 dev.ctx->cmd_fd, (off_t)(off + (1ull << 30)));
	rc2 = q == MAP_FAILED ? errno : 0;
	if (!rc2)
		munmap(q, len);
	if (rc != EINVAL || rc2 != EINVAL)
		check_result(checks[C_BAD_OFFSET], "offset + 1 page: %s; + 1 GiB: %s; want EINVAL",
			     rc ? strerror(rc) : "mapped",
			     rc2 ? strerror(rc2) : "mapped");
	else
		check_result(checks[C_BAD_OFFSET], NULL);

	/* mmap_ok */
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED,
		 dev.ctx->cmd_fd, (off_t)off);
	rc = p == MAP_FAILED ? errno : 0;
	h = p;
	if (rc) {
		check_result(checks[C_MMAP_OK], "mmap: %s", strerror(rc));
		p = NULL;
	} else if ((rc = touch(p, len, false))) {
		check_result(checks[C_MMAP_OK], "reading it: signal %d", rc);
	} else if (__atomic_load_n(&h->prod, __ATOMIC_ACQUIRE) ||
		   __atomic_load_n(&h->cons, __ATOMIC_ACQUIRE)) {
		check_result(checks[C_MMAP_OK], "prod %u, cons %u in a new ring",
			     h->prod, h->cons);
	} else {
		check_result(checks[C_MMAP_OK], NULL);
	}

	if (!p) {
		check_result(checks[C_MPROTECT], "not mapped (%s)", checks[C_MMAP_OK]);
		check_result(checks[C_MREMAP], "not mapped (%s)", checks[C_MMAP_OK]);
	} else {
		/* mprotect_exec: the mapping may never become executable. */
		if (!mprotect(p, len, PROT_READ | PROT_EXEC)) {
			check_result(checks[C_MPROTECT], "PROT_READ | PROT_EXEC was granted");
			mprotect(p, len, PROT_READ | PROT_WRITE);
		} else if (noexec) {
			skip(checks[C_MPROTECT], NOEXEC_WHY " (%s)", strerror(errno));
		} else {
			vmsg("mprotect PROT_EXEC: %s", strerror(errno));
			check_result(checks[C_MPROTECT], NULL);
		}
		/* mremap_grow: the ring has no more pages to show. */
		q = mremap(p, len, len + page, MREMAP_MAYMOVE);
		if (q != MAP_FAILED) {
			check_result(checks[C_MREMAP], "grown to %zu bytes", len + page);
			/* Its last page is not the ring's: leave it untouched. */
			p = mremap(q, len + page, len, 0);
			if (p == MAP_FAILED)
				die("mremap back: %s", strerror(errno));
		} else {
			vmsg("mremap: %s", strerror(errno));
			check_result(checks[C_MREMAP], NULL);
		}
	}

	/* mmap_after_destroy */
	destroy_cq_raw(out.cq_handle);
	q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED,
		 dev.ctx->cmd_fd, (off_t)off);
	rc = q == MAP_FAILED ? errno : 0;
	if (!rc)
		munmap(q, len);
	if (rc != EINVAL)
		check_result(checks[C_AFTER_DESTROY], "%s, want EINVAL",
			     rc ? strerror(rc) : "mapped");
	else
		check_result(checks[C_AFTER_DESTROY], NULL);

	/* mapping_outlives_cq */
	if (!p) {
		check_result(checks[C_OUTLIVES], "not mapped (%s)", checks[C_MMAP_OK]);
	} else if ((rc = touch(p, len, true))) {
		check_result(checks[C_OUTLIVES], "touching it after DESTROY_CQ: signal %d",
			     rc);
	} else if (munmap(p, len)) {
		check_result(checks[C_OUTLIVES], "munmap: %s", strerror(errno));
	} else {
		check_result(checks[C_OUTLIVES], NULL);
	}
}

/* ---------- finding a CQ's ring ---------- */

struct mapping {
	uintptr_t start;
	size_t len;
	uint64_t off;
};

struct maps {
	int n;
	struct mapping m[MAXMAPS];
};

/* The mappings of the device's command file (its inode) in this process. */
static void read_maps(struct maps *s)
{
	struct stat st;
	char line[512];
	FILE *f;

	if (fstat(dev.ctx->cmd_fd, &st))
		die("fstat of the command file: %s", strerror(errno));
	f = fopen("/proc/self/maps", "r");
	if (!f)
		die("/proc/self/maps: %s", strerror(errno));
	s->n = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long start, end, ino;
		unsigned long long off;
		unsigned int maj, mn;

		if (sscanf(line, "%lx-%lx %*s %llx %x:%x %lu", &start, &end,
			   &off, &maj, &mn, &ino) != 6)
			continue;
		if (ino != st.st_ino || makedev(maj, mn) != st.st_dev)
			continue;
		if (s->n == MAXMAPS)
			die("more than %d mappings of the device's file", MAXMAPS);
		s->m[s->n++] = (struct mapping){ start, end - start, off };
	}
	fclose(f);
}

static bool has_mapping(const struct maps *s, const struct mapping *m)
{
	for (int i = 0; i < s->n; i++)
		if (s->m[i].start == m->start && s->m[i].len == m->len &&
		    s->m[i].off == m->off)
			return true;
	return false;
}

/* The mappings in A that B does not have: how many, the last in *M. */
static int added(const struct maps *a, const struct maps *b, struct mapping *m)
{
	int n = 0;

	for (int i = 0; i < a->n; i++)
		if (!has_mapping(b, &a->m[i])) {
			*m = a->m[i];
			n++;
		}
	return n;
}

/* A CQ's ring, as the provider mapped it. */
struct ring {
	struct metaroce_cq_ring_hdr *hdr;	/* NULL: none found */
	struct mapping m;
	char why[192];				/* why none was found */
};

static uint32_t prod_of(const struct ring *r)
{
	return __atomic_load_n(&r->hdr->prod, __ATOMIC_ACQUIRE);
}

static uint32_t cons_of(const struct ring *r)
{
	return __atomic_load_n(&r->hdr->cons, __ATOMIC_ACQUIRE);
}

/* Waits up to WAIT for ring R's prod to be WANT (flushes are written
 * before the call that makes them returns; a little time is allowed all
 * the same): the prod last seen. */
static uint32_t wait_prod(const struct ring *r, uint32_t want)
{
	double end = now_s() + WAIT;
	uint32_t prod;

	while ((prod = prod_of(r)) != want && now_s() < end)
		usleep(1000);
	return prod;
}

/* Slot I of ring R; only for I below the CQ's size (at most its slots, so
 * slot I is at index I). */
static const struct metaroce_cqe *slot_of(const struct ring *r, uint32_t i)
{
	size_t at = entries_at + (size_t)i * sizeof(struct metaroce_cqe);

	if (at + sizeof(struct metaroce_cqe) > r->m.len)
		die("slot %u is outside a ring of %zu bytes", i, r->m.len);
	return (const void *)((const uint8_t *)r->hdr + at);
}

/* Takes the one mapping of the device's file that AFTER has and BEFORE
 * has not as R's ring. */
static void find_ring(struct ring *r, const struct maps *before,
		      const struct maps *after, const char *what)
{
	int n = added(after, before, &r->m);

	r->hdr = NULL;
	if (n == 1) {
		r->hdr = (void *)r->m.start;
		vmsg("%s: ring of %zu bytes at offset %#llx", what, r->m.len,
		     (unsigned long long)r->m.off);
	} else {
		snprintf(r->why, sizeof(r->why),
			 "%s made %d new mappings of /dev/infiniband/%s, want 1",
			 what, n, dev.ctx->device->dev_name);
	}
}

/* ---------- the libibverbs part ---------- */

/* One region: the loopback's Write source and target, its receives and
 * Send, then the buffers of the receives that are flushed. */
static struct ibv_pd *pd;
static uint8_t *mem;
static struct ibv_mr *mr;
#define FLUSH_BUFS (3 * LOOP_LEN + 4096)
#define MEM_LEN (4 * LOOP_LEN)

/* A CQ of CQE entries (on channel CH, or none) and its ring in *R. */
static struct ibv_cq *ring_cq(int cqe, struct ibv_comp_channel *ch,
			      struct ring *r)
{
	struct maps before, after;
	struct ibv_cq *cq;

	read_maps(&before);
	cq = ibv_create_cq(dev.ctx, cqe, NULL, ch, 0);
	if (!cq)
		die("ibv_create_cq %d: %s", cqe, strerror(errno));
	read_maps(&after);
	find_ring(r, &before, &after, "ibv_create_cq");
	return cq;
}

/* An RC QP whose send and receive completions go to CQ, in INIT; in the
 * error state too with TO_ERR. */
static struct ibv_qp *flush_qp(struct ibv_cq *cq, bool to_err);

static int to_error(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

static struct ibv_qp *flush_qp(struct ibv_cq *cq, bool to_err)
{
	struct ibv_qp_init_attr a = {
		.send_cq = cq, .recv_cq = cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 32,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	int rc;

	if (!qp)
		die("ibv_create_qp: %s", strerror(errno));
	if ((rc = qp_to_init(qp, 1, IBV_ACCESS_LOCAL_WRITE)))
		die("QP %u to INIT: %s", qp->qp_num, strerror(rc));
	if (to_err && (rc = to_error(qp)))
		die("QP %u to ERR: %s", qp->qp_num, strerror(rc));
	return qp;
}

/* Posts N receives of 64 bytes to QP, wr_ids ID, ID+1, ...: 0 or the
 * errno value. */
static int post_recvs(struct ibv_qp *qp, uint64_t id, int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(mem + FLUSH_BUFS +
							   (i % 16) * 64),
				       .length = 64, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = id + (uint64_t)i,
					  .sg_list = &sge, .num_sge = 1 }, *bad;
		int rc = ibv_post_recv(qp, &wr, &bad);

		if (rc)
			return rc;
	}
	return 0;
}

/* Polls N flushed receives of QP from CQ, wr_ids ID, ID+1, ... in order,
 * then (with NONE_AFTER) finds nothing more: NULL, or what was wrong. */
static const char *polled_flushes(struct ibv_cq *cq, struct ibv_qp *qp,
				  uint64_t id, int n, bool none_after,
				  char *why, size_t len)
{
	struct ibv_wc wc;
	int got;

	for (int i = 0; i < n; i++) {
		got = poll_until(cq, &wc, now_s() + WAIT, 1000, 100000);
		if (got < 0) {
			snprintf(why, len, "ibv_poll_cq: %d", got);
			return why;
		}
		if (!got) {
			snprintf(why, len, "completion %d of %d missing", i + 1, n);
			return why;
		}
		if (wc.wr_id != id + (uint64_t)i || wc.status != IBV_WC_WR_FLUSH_ERR ||
		    wc.qp_num != qp->qp_num) {
			snprintf(why, len,
				 "completion %d of %d: wr_id %#llx status %d qp %u, want %#llx %d %u",
				 i + 1, n, (unsigned long long)wc.wr_id, wc.status,
				 wc.qp_num, (unsigned long long)(id + (uint64_t)i),
				 IBV_WC_WR_FLUSH_ERR, qp->qp_num);
			return why;
		}
	}
	if (none_after && (got = ibv_poll_cq(cq, 1, &wc))) {
		snprintf(why, len, "after %d: %s", n,
			 got > 0 ? "one more completion" : "ibv_poll_cq failed");
		return why;
	}
	return NULL;
}

/* Takes the async events that are there without waiting (so that
 * ibv_destroy_cq does not wait for an unacked one). */
static void drain_async(void)
{
	struct pollfd p = { .fd = dev.ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev;

	while (poll(&p, 1, 0) > 0 && !ibv_get_async_event(dev.ctx, &ev)) {
		vmsg("async event %d (late)", ev.event_type);
		ibv_ack_async_event(&ev);
	}
}

/* Waits up to SECS for IBV_EVENT_CQ_ERR of CQ, acking every event; sets
 * *OTHER when one came for the CQ OTHER_CQ. */
static bool cq_err_event(struct ibv_cq *cq, double secs,
			 struct ibv_cq *other_cq, bool *other)
{
	struct pollfd p = { .fd = dev.ctx->async_fd, .events = POLLIN };
	double end = now_s() + secs;

	while (now_s() < end) {
		struct ibv_async_event ev;
		bool hit;

		if (poll(&p, 1, 100) <= 0)
			continue;
		if (ibv_get_async_event(dev.ctx, &ev))
			continue;
		hit = ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == cq;
		if (ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == other_cq)
			*other = true;
		vmsg("async event %d", ev.event_type);
		ibv_ack_async_event(&ev);
		if (hit)
			return true;
	}
	return false;
}

/* The CQ and QP of ring_completions, still used as the healthy neighbour
 * of the corrupted CQs. */
static struct ibv_cq *cq1;
static struct ibv_qp *qp1;
static struct ring ring1;

/* ring_completions and poll_cq_syscall_returns_nothing. */
static void check_completions(void)
{
	const char *why = NULL;
	char buf[256];
	uint32_t prod = 0;
	double end;
	int rc, n = -2, err = 0;

	cq1 = ring_cq(16, NULL, &ring1);
	qp1 = flush_qp(cq1, false);
	if (!ring1.hdr) {
		check_result(checks[C_COMPLETIONS], "%s", ring1.why);
		check_result(checks[C_POLL_SYSCALL], "%s", ring1.why);
		to_error(qp1);
		return;
	}
	if ((rc = post_recvs(qp1, 0x1000, 8)) || (rc = to_error(qp1))) {
		snprintf(buf, sizeof(buf), "posting or moving to ERR: %s",
			 strerror(rc));
		why = buf;
	}
	/* The flushes are written before modify_qp returns; a little time
	 * is allowed all the same. */
	end = now_s() + WAIT;
	while (!why && (prod = prod_of(&ring1)) < 8 && now_s() < end)
		usleep(1000);
	if (!why && prod != 8) {
		snprintf(buf, sizeof(buf), "prod %u after 8 flushes, want 8", prod);
		why = buf;
	}
	for (uint32_t i = 0; !why && i < 8; i++) {
		const struct metaroce_cqe *e = slot_of(&ring1, i);

		if (e->wr_id != 0x1000 + i || e->status != IBV_WC_WR_FLUSH_ERR ||
		    e->qp_num != qp1->qp_num) {
			snprintf(buf, sizeof(buf),
				 "slot %u: wr_id %#llx status %u qp %u",
				 i, (unsigned long long)e->wr_id, e->status,
				 e->qp_num);
			why = buf;
		}
	}
	/* While the 8 wait in the ring, the system call has none. */
	if (!why)
		n = poll_cq_raw(cq1->handle, &err);
	if (!why)
		why = polled_flushes(cq1, qp1, 0x1000, 8, true, buf, sizeof(buf));
	if (!why && (prod_of(&ring1) != 8 || cons_of(&ring1) != 8)) {
		snprintf(buf, sizeof(buf), "prod %u, cons %u after polling 8",
			 prod_of(&ring1), cons_of(&ring1));
		why = buf;
	}
	if (why)
		check_result(checks[C_COMPLETIONS], "%s", why);
	else
		check_result(checks[C_COMPLETIONS], NULL);

	if (n == -2)
		check_result(checks[C_POLL_SYSCALL], "no completions in the ring (%s)",
			     checks[C_COMPLETIONS]);
	else if (n < 0)
		check_result(checks[C_POLL_SYSCALL], "POLL_CQ: %s", strerror(err));
	else if (n)
		check_result(checks[C_POLL_SYSCALL], "POLL_CQ returned %d", n);
	else
		check_result(checks[C_POLL_SYSCALL], NULL);
}

/* One completion of QP from CQ: NULL, or what was wrong with it. */
static const char *loop_wc(struct ibv_cq *cq, struct ibv_qp *qp, uint64_t id,
			   enum ibv_wc_opcode op, uint32_t byte_len, bool imm,
			   uint32_t imm_val, char *why, size_t len)
{
	struct ibv_wc wc;
	int got = poll_until(cq, &wc, now_s() + 10, 1000, 100000);

	if (got != 1) {
		snprintf(why, len, "completion %#llx %s",
			 (unsigned long long)id, got ? "failed" : "missing");
		return why;
	}
	if (wc.wr_id != id || wc.status != IBV_WC_SUCCESS || wc.opcode != op ||
	    wc.qp_num != qp->qp_num ||
	    (byte_len != UINT32_MAX && wc.byte_len != byte_len) ||
	    !!(wc.wc_flags & IBV_WC_WITH_IMM) != imm ||
	    (imm && wc.imm_data != htobe32(imm_val))) {
		snprintf(why, len,
			 "completion wr_id %#llx status %d opcode %d qp %u byte_len %u flags %#x imm %#x; want %#llx 0 %d %u %d %s %#x",
			 (unsigned long long)wc.wr_id, wc.status, wc.opcode,
			 wc.qp_num, wc.byte_len, wc.wc_flags,
			 be32toh(wc.imm_data), (unsigned long long)id, op,
			 qp->qp_num, byte_len == UINT32_MAX ? -1 : (int)byte_len,
			 imm ? "WITH_IMM" : "no imm", imm ? imm_val : 0);
		return why;
	}
	return NULL;
}

/* loopback_data: a Write with immediate and a Send with immediate between
 * two connected QPs, each on a ring CQ. */
static void check_loopback(void)
{
	const uint32_t imm_w = 0x1234abcd, imm_s = 0x5eed0042;
	uint8_t *src = mem, *dst = mem + LOOP_LEN, *rcv = mem + 2 * LOOP_LEN,
		*text = mem + 3 * LOOP_LEN;
	struct ring ra, rb;
	struct ibv_cq *ca = ring_cq(16, NULL, &ra), *cb = ring_cq(16, NULL, &rb);
	struct ibv_qp_init_attr a = {
		.cap = { .max_send_wr = 8, .max_recv_wr = 8,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qa, *qb;
	const char *why = NULL;
	char buf[512];
	int rc;

	a.send_cq = a.recv_cq = ca;
	qa = ibv_create_qp(pd, &a);
	a.send_cq = a.recv_cq = cb;
	qb = ibv_create_qp(pd, &a);
	if (!qa || !qb)
		die("ibv_create_qp: %s", strerror(errno));
	if ((rc = connect_loopback(&dev, qa, qb, IBV_ACCESS_LOCAL_WRITE |
				   IBV_ACCESS_REMOTE_WRITE)))
		die("connecting QPs %u and %u: %s", qa->qp_num, qb->qp_num,
		    strerror(rc));
	for (size_t i = 0; i < LOOP_LEN; i += 8) {
		uint64_t v = mix64(i);

		memcpy(src + i, &v, 8);
		v = ~v;
		memcpy(dst + i, &v, 8);
	}
	for (int i = 0; i < LOOP_MSG; i++)
		text[i] = (uint8_t)(0x40 + i);
	memset(rcv, 0, 2 * 64);

	if (!ra.hdr || !rb.hdr) {
		check_result(checks[C_LOOPBACK], "%s", ra.hdr ? rb.why : ra.why);
		goto out;
	}
	for (int i = 0; i < 2 && !why; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(rcv + i * 64),
				       .length = 64, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 0xb0 + (uint64_t)i,
					  .sg_list = &sge, .num_sge = 1 }, *bad;

		if ((rc = ibv_post_recv(qb, &wr, &bad))) {
			snprintf(buf, sizeof(buf), "ibv_post_recv: %s", strerror(rc));
			why = buf;
		}
	}
	if (!why) {
		struct ibv_sge sw = { .addr = (uintptr_t)src, .length = LOOP_LEN,
				      .lkey = mr->lkey };
		struct ibv_sge ss = { .addr = (uintptr_t)text, .length = LOOP_MSG,
				      .lkey = mr->lkey };
		struct ibv_send_wr wr_send = {
			.wr_id = 0xa1, .sg_list = &ss, .num_sge = 1,
			.opcode = IBV_WR_SEND_WITH_IMM,
			.send_flags = IBV_SEND_SIGNALED,
			.imm_data = htobe32(imm_s),
		};
		struct ibv_send_wr wr_write = {
			.wr_id = 0xa0, .next = &wr_send, .sg_list = &sw,
			.num_sge = 1, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
			.send_flags = IBV_SEND_SIGNALED,
			.imm_data = htobe32(imm_w),
			.wr.rdma = { .remote_addr = (uintptr_t)dst,
				     .rkey = mr->rkey },
		}, *bad;

		if ((rc = ibv_post_send(qa, &wr_write, &bad))) {
			snprintf(buf, sizeof(buf), "ibv_post_send: %s", strerror(rc));
			why = buf;
		}
	}
	if (!why)
		why = loop_wc(ca, qa, 0xa0, IBV_WC_RDMA_WRITE, UINT32_MAX, false,
			      0, buf, sizeof(buf)) ?:
		      loop_wc(ca, qa, 0xa1, IBV_WC_SEND, UINT32_MAX, false, 0,
			      buf, sizeof(buf)) ?:
		      loop_wc(cb, qb, 0xb0, IBV_WC_RECV_RDMA_WITH_IMM, LOOP_LEN,
			      true, imm_w, buf, sizeof(buf)) ?:
		      loop_wc(cb, qb, 0xb1, IBV_WC_RECV, LOOP_MSG, true, imm_s,
			      buf, sizeof(buf));
	if (!why && memcmp(src, dst, LOOP_LEN)) {
		size_t i = 0;

		while (src[i] == dst[i])
			i++;
		snprintf(buf, sizeof(buf), "the Write's byte %zu is %#x, want %#x",
			 i, dst[i], src[i]);
		why = buf;
	}
	if (!why && memcmp(text, rcv + 64, LOOP_MSG)) {
		snprintf(buf, sizeof(buf), "the Send's bytes differ");
		why = buf;
	}
	if (!why && (prod_of(&ra) != 2 || cons_of(&ra) != 2 ||
		     prod_of(&rb) != 2 || cons_of(&rb) != 2)) {
		snprintf(buf, sizeof(buf),
			 "rings after 2 + 2 completions: prod %u cons %u, prod %u cons %u",
			 prod_of(&ra), cons_of(&ra), prod_of(&rb), cons_of(&rb));
		why = buf;
	}
	if (why)
		check_result(checks[C_LOOPBACK], "%s", why);
	else
		check_result(checks[C_LOOPBACK], NULL);
out:
	if (ibv_destroy_qp(qa) || ibv_destroy_qp(qb) || ibv_destroy_cq(ca) ||
	    ibv_destroy_cq(cb))
		die("destroying the loopback QPs and CQs: %s", strerror(errno));
}

/* ring_fills_to_cqe: a CQ of 8 holds 8 unread completions, and the ninth
 * overruns it. */
static void check_fills(void)
{
	struct ring r;
	struct ibv_cq *cq = ring_cq(8, NULL, &r);
	struct ibv_qp *qp = flush_qp(cq, false);
	const char *why;
	uint32_t prod;
	bool other = false;
	char buf[256];
	int rc;

	if (!r.hdr) {
		check_result(checks[C_FILLS], "%s", r.why);
	} else if ((rc = post_recvs(qp, 0x5000, 8)) || (rc = to_error(qp))) {
		check_result(checks[C_FILLS], "posting or moving to ERR: %s",
			     strerror(rc));
	} else if ((prod = wait_prod(&r, 8)) != 8) {
		check_result(checks[C_FILLS], "prod %u after 8 flushes, want 8", prod);
	} else if (cq_err_event(cq, 1, NULL, &other)) {
		check_result(checks[C_FILLS], "IBV_EVENT_CQ_ERR with 8 unread in a CQ of 8");
	} else if ((rc = post_recvs(qp, 0x5008, 1))) {
		check_result(checks[C_FILLS], "ibv_post_recv: %s", strerror(rc));
	} else if (!cq_err_event(cq, WAIT, NULL, &other)) {
		check_result(checks[C_FILLS], "no IBV_EVENT_CQ_ERR within %.0f s of a ninth completion",
			     WAIT);
	} else if (prod_of(&r) != 8 || cons_of(&r) != 0) {
		check_result(checks[C_FILLS], "after the overrun: prod %u, cons %u, want 8 and 0",
			     prod_of(&r), cons_of(&r));
	} else if ((why = polled_flushes(cq, qp, 0x5000, 8, true, buf,
					 sizeof(buf)))) {
		check_result(checks[C_FILLS], "after the overrun: %s", why);
	} else {
		check_result(checks[C_FILLS], NULL);
	}
	drain_async();
	if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq))
		die("destroying the filled QP and CQ: %s", strerror(errno));
}

/*
 * cons_*_overruns_own_cq: a CQ of 8 whose ring's cons is set to BAD(prod)
 * after 2 completions were read: the 4 flushes that follow must overrun
 * it (IBV_EVENT_CQ_ERR, nothing written), and cq1 must go on working.
 */
static void check_cons_overrun(int check, bool ahead)
{
	struct ring r;
	struct ibv_cq *cq = ring_cq(8, NULL, &r);
	struct ibv_qp *qp = flush_qp(cq, true);
	const char *why = NULL;
	uint32_t prod, bad;
	struct ibv_wc wc;
	bool other = false;
	char buf[256];
	int rc;

	if (!r.hdr) {
		check_result(checks[check], "%s", r.why);
		goto out;
	}
	if (!ring1.hdr) {
		check_result(checks[check], "no healthy CQ to compare with (%s)",
			     checks[C_COMPLETIONS]);
		goto out;
	}
	/* The ring works before it is corrupted. */
	if ((rc = post_recvs(qp, 0x2000, 2)))
		snprintf(buf, sizeof(buf), "ibv_post_recv: %s", strerror(rc));
	why = rc ? buf : polled_flushes(cq, qp, 0x2000, 2, true, buf, sizeof(buf));
	if (why) {
		check_result(checks[check], "before corrupting cons: %s", why);
		goto out;
	}
	prod = prod_of(&r);
	bad = ahead ? prod + 1000 : prod - 9;
	__atomic_store_n(&r.hdr->cons, bad, __ATOMIC_RELEASE);
	vmsg("prod %u, cons set to %u", prod, bad);
	if ((rc = post_recvs(qp, 0x2002, 4))) {
		check_result(checks[check], "ibv_post_recv: %s", strerror(rc));
	} else if (!cq_err_event(cq, WAIT, cq1, &other)) {
		check_result(checks[check], "no IBV_EVENT_CQ_ERR within %.0f s of cons %u with prod %u",
			     WAIT, bad, prod);
	} else if (prod_of(&r) != prod) {
		check_result(checks[check], "prod moved from %u to %u past cons %u",
			     prod, prod_of(&r), bad);
	} else if ((rc = poll_until(cq, &wc, now_s() + 0.2, 1000, 100000))) {
		check_result(checks[check], "ibv_poll_cq %s after the overrun",
			     rc > 0 ? "found a completion" : "failed");
	} else if ((rc = post_recvs(qp1, 0x1100, 1))) {
		check_result(checks[check], "ibv_post_recv on the healthy CQ's QP: %s",
			     strerror(rc));
	} else if ((why = polled_flushes(cq1, qp1, 0x1100, 1, true, buf,
					 sizeof(buf)))) {
		check_result(checks[check], "the healthy CQ: %s", why);
	} else if (other) {
		check_result(checks[check], "IBV_EVENT_CQ_ERR for the healthy CQ too");
	} else {
		check_result(checks[check], NULL);
	}
out:
	drain_async();
	if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq))
		die("destroying the overrun QP and CQ: %s", strerror(errno));
}

/* resize_keeps_unread and resize_too_small, on one CQ of 8. */
static void check_resize(void)
{
	struct ring r, r2;
	struct ibv_cq *cq = ring_cq(8, NULL, &r);
	struct ibv_qp *qp = flush_qp(cq, true);
	struct maps before, after;
	const char *why = NULL;
	struct mapping gone;
	char buf[256];
	int rc;

	if (!r.hdr) {
		check_result(checks[C_RESIZE], "%s", r.why);
		check_result(checks[C_RESIZE_SMALL], "%s", r.why);
		goto out;
	}
	/* 6 read, then 4 unread in slots 6, 7, 0 and 1. */
	if ((rc = post_recvs(qp, 0x3000, 6)))
		snprintf(buf, sizeof(buf), "ibv_post_recv: %s", strerror(rc));
	why = rc ? buf : polled_flushes(cq, qp, 0x3000, 6, true, buf, sizeof(buf));
	if (!why && (rc = post_recvs(qp, 0x3100, 4))) {
		snprintf(buf, sizeof(buf), "ibv_post_recv: %s", strerror(rc));
		why = buf;
	}
	if (!why && (prod_of(&r) != 10 || cons_of(&r) != 6)) {
		snprintf(buf, sizeof(buf), "prod %u, cons %u, want 10 and 6",
			 prod_of(&r), cons_of(&r));
		why = buf;
	}
	if (why) {
		check_result(checks[C_RESIZE], "before the resize: %s", why);
		check_result(checks[C_RESIZE_SMALL], "no CQ to resize (%s)",
			     checks[C_RESIZE]);
		goto out;
	}

	read_maps(&before);
	rc = ibv_resize_cq(cq, 64);
	read_maps(&after);
	find_ring(&r2, &before, &after, "ibv_resize_cq");
	if (rc) {
		check_result(checks[C_RESIZE], "ibv_resize_cq to 64 with 4 unread: %s",
			     strerror(rc));
	} else if (!r2.hdr) {
		check_result(checks[C_RESIZE], "%s", r2.why);
	} else if (r2.m.off == r.m.off) {
		check_result(checks[C_RESIZE], "the new ring has the old offset %#llx",
			     (unsigned long long)r.m.off);
	} else if (added(&before, &after, &gone) != 1 || gone.start != r.m.start) {
		check_result(checks[C_RESIZE], "the old ring is still mapped");
	} else if (prod_of(&r2) != 4 || cons_of(&r2) != 0) {
		check_result(checks[C_RESIZE], "new ring: prod %u, cons %u, want 4 and 0",
			     prod_of(&r2), cons_of(&r2));
	} else if ((why = polled_flushes(cq, qp, 0x3100, 4, true, buf,
					 sizeof(buf)))) {
		check_result(checks[C_RESIZE], "after the resize: %s", why);
	} else if ((rc = post_recvs(qp, 0x3200, 1))) {
		check_result(checks[C_RESIZE], "ibv_post_recv: %s", strerror(rc));
	} else if ((why = polled_flushes(cq, qp, 0x3200, 1, true, buf,
					 sizeof(buf)))) {
		check_result(checks[C_RESIZE], "one more after the resize: %s", why);
	} else if (prod_of(&r2) != 5 || cons_of(&r2) != 5) {
		check_result(checks[C_RESIZE], "new ring: prod %u, cons %u, want 5 and 5",
			     prod_of(&r2), cons_of(&r2));
	} else {
		check_result(checks[C_RESIZE], NULL);
	}
	if (rc || !r2.hdr) {
		check_result(checks[C_RESIZE_SMALL], "no resized CQ (%s)",
			     checks[C_RESIZE]);
		goto out;
	}

	/* resize_too_small: 4 unread do not fit in 3, and do in 4. */
	if ((rc = post_recvs(qp, 0x3300, 4))) {
		check_result(checks[C_RESIZE_SMALL], "ibv_post_recv: %s", strerror(rc));
	} else if (!(rc = ibv_resize_cq(cq, 3))) {
		check_result(checks[C_RESIZE_SMALL], "a resize to 3 with 4 unread succeeded");
	} else if ((rc = ibv_resize_cq(cq, 4))) {
		check_result(checks[C_RESIZE_SMALL], "a resize to 4 with 4 unread: %s",
			     strerror(rc));
	} else if ((why = polled_flushes(cq, qp, 0x3300, 4, true, buf,
					 sizeof(buf)))) {
		check_result(checks[C_RESIZE_SMALL], "after the resizes: %s", why);
	} else {
		check_result(checks[C_RESIZE_SMALL], NULL);
	}
out:
	drain_async();
	if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq))
		die("destroying the resized QP and CQ: %s", strerror(errno));
}

/*
 * resize_corrupt_cons_refused: a CQ of 8 with 3 unread whose cons is set
 * to prod + 1000 cannot be resized; with the provider's cons written back
 * the 3 are still there.
 */
static void check_resize_corrupt(void)
{
	struct ring r;
	struct ibv_cq *cq = ring_cq(8, NULL, &r);
	struct ibv_qp *qp = flush_qp(cq, true);
	struct maps before, after;
	const char *why = NULL;
	struct mapping m;
	uint32_t prod = 0, cons, bad;
	char buf[256];
	int rc;

	if (!r.hdr) {
		check_result(checks[C_RESIZE_CORRUPT], "%s", r.why);
		goto out;
	}
	/* 2 read, 3 unread. */
	if ((rc = post_recvs(qp, 0x6000, 2)))
		snprintf(buf, sizeof(buf), "ibv_post_recv: %s", strerror(rc));
	why = rc ? buf : polled_flushes(cq, qp, 0x6000, 2, true, buf, sizeof(buf));
	if (!why && (rc = post_recvs(qp, 0x6002, 3))) {
		snprintf(buf, sizeof(buf), "ibv_post_recv: %s", strerror(rc));
		why = buf;
	}
	if (!why && ((prod = wait_prod(&r, 5)) != 5 || cons_of(&r) != 2)) {
		snprintf(buf, sizeof(buf), "prod %u, cons %u, want 5 and 2",
			 prod, cons_of(&r));
		why = buf;
	}
	if (why) {
		check_result(checks[C_RESIZE_CORRUPT], "before corrupting cons: %s", why);
		goto out;
	}

	/* The provider's cons (it publishes its own on every poll): written
	 * back once the resize is refused. */
	cons = cons_of(&r);
	bad = prod + 1000;
	__atomic_store_n(&r.hdr->cons, bad, __ATOMIC_RELEASE);
	vmsg("prod %u, cons %u set to %u", prod, cons, bad);
	read_maps(&before);
	rc = ibv_resize_cq(cq, 16);
	read_maps(&after);
	if (!rc) {
		/* The old ring is unmapped: nothing to write back. */
		check_result(checks[C_RESIZE_CORRUPT], "ibv_resize_cq to 16 with cons %u and prod %u succeeded",
			     bad, prod);
		goto out;
	}
	if (!has_mapping(&after, &r.m)) {
		check_result(checks[C_RESIZE_CORRUPT], "the refused resize (%s) unmapped the ring",
			     strerror(rc));
		goto out;
	}
	__atomic_store_n(&r.hdr->cons, cons, __ATOMIC_RELEASE);
	if (rc != EINVAL) {
		check_result(checks[C_RESIZE_CORRUPT],
			     "ibv_resize_cq to 16 with cons %u and prod %u: %s, want EINVAL",
			     bad, prod, strerror(rc));
	} else if (added(&after, &before, &m) || added(&before, &after, &m)) {
		check_result(checks[C_RESIZE_CORRUPT], "the refused resize changed the device's mappings");
	} else if (prod_of(&r) != prod) {
		check_result(checks[C_RESIZE_CORRUPT], "the refused resize moved prod from %u to %u",
			     prod, prod_of(&r));
	} else if ((why = polled_flushes(cq, qp, 0x6002, 3, true, buf,
					 sizeof(buf)))) {
		check_result(checks[C_RESIZE_CORRUPT], "with cons %u written back: %s",
			     cons, why);
	} else {
		check_result(checks[C_RESIZE_CORRUPT], NULL);
	}
out:
	drain_async();
	if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq))
		die("destroying the corrupt-resize QP and CQ: %s", strerror(errno));
}

/* Up to 16 completions of a destroyed QP's CQ. */
#define DQP_MAX 16

/*
 * destroyed_qp_completions_removed: QPs A and B on one CQ of 16, 4 flushes
 * of each in the ring (A A B B A A B B); once A is destroyed, only B's 4
 * are polled, in order, and one more of B after them.
 */
static void check_destroyed_qp(void)
{
	struct ring r;
	struct ibv_cq *cq = ring_cq(16, NULL, &r);
	struct ibv_qp *qa = flush_qp(cq, false), *qb = flush_qp(cq, false);
	const uint32_t qpn_a = qa->qp_num, qpn_b = qb->qp_num;
	struct ibv_wc wc[DQP_MAX];
	const char *why;
	char buf[256], order[9];
	uint32_t prod;
	int rc, n = 0, got = 0, of_a = 0, first_a = -1, bad = -1;

	if (!r.hdr) {
		check_result(checks[C_DESTROYED_QP], "%s", r.why);
		goto out;
	}
	/* 2 of each flushed by the move to ERR, then 2 of each posted in it. */
	if ((rc = post_recvs(qa, 0x7000, 2)) || (rc = post_recvs(qb, 0x7100, 2)) ||
	    (rc = to_error(qa)) || (rc = to_error(qb)) ||
	    (rc = post_recvs(qa, 0x7002, 2)) || (rc = post_recvs(qb, 0x7102, 2))) {
		check_result(checks[C_DESTROYED_QP], "posting or moving to ERR: %s",
			     strerror(rc));
		goto out;
	}
	if ((prod = wait_prod(&r, 8)) != 8) {
		check_result(checks[C_DESTROYED_QP], "prod %u after 8 flushes, want 8",
			     prod);
		goto out;
	}
	for (uint32_t i = 0; i < 8; i++) {
		uint32_t q = slot_of(&r, i)->qp_num;

		order[i] = q == qpn_a ? 'A' : q == qpn_b ? 'B' : '?';
	}
	order[8] = 0;
	vmsg("QP A %u, QP B %u; the ring before destroying A: %s", qpn_a, qpn_b,
	     order);

	if (ibv_destroy_qp(qa))
		die("ibv_destroy_qp of QP %u: %s", qpn_a, strerror(errno));
	qa = NULL;
	while (n < DQP_MAX && (got = ibv_poll_cq(cq, DQP_MAX - n, wc + n)) > 0)
		n += got;
	if (got < 0) {
		check_result(checks[C_DESTROYED_QP], "ibv_poll_cq after ibv_destroy_qp: %d",
			     got);
		goto out;
	}
	for (int i = 0; i < n; i++) {
		if (wc[i].qp_num == qpn_a) {
			if (!of_a++)
				first_a = i;
		} else if (bad < 0 && (i >= 4 || wc[i].qp_num != qpn_b ||
				     wc[i].wr_id != 0x7100 + (uint64_t)i ||
				     wc[i].status != IBV_WC_WR_FLUSH_ERR))
			bad = i;
	}
	if (of_a) {
		check_result(checks[C_DESTROYED_QP],
			     "%d completions of the destroyed QP %u polled, the first as %d of %d (wr_id %#llx)",
			     of_a, qpn_a, first_a + 1, n,
			     (unsigned long long)wc[first_a].wr_id);
	} else if (bad >= 0) {
		check_result(checks[C_DESTROYED_QP],
			     "completion %d of %d: wr_id %#llx status %d qp %u, want QP %u's 4 flushes from 0x7100",
			     bad + 1, n, (unsigned long long)wc[bad].wr_id,
			     wc[bad].status, wc[bad].qp_num, qpn_b);
	} else if (n != 4) {
		check_result(checks[C_DESTROYED_QP], "%d completions polled, want QP %u's 4",
			     n, qpn_b);
	} else if ((rc = post_recvs(qb, 0x7104, 1))) {
		check_result(checks[C_DESTROYED_QP], "ibv_post_recv: %s", strerror(rc));
	} else if ((why = polled_flushes(cq, qb, 0x7104, 1, true, buf,
					 sizeof(buf)))) {
		check_result(checks[C_DESTROYED_QP], "one more of QP %u after: %s",
			     qpn_b, why);
	} else {
		check_result(checks[C_DESTROYED_QP], NULL);
	}
out:
	drain_async();
	if ((qa && ibv_destroy_qp(qa)) || ibv_destroy_qp(qb) || ibv_destroy_cq(cq))
		die("destroying the QPs and CQ of %s: %s", checks[C_DESTROYED_QP],
		    strerror(errno));
}

/* Whether a completion event of CQ comes on CH within SECS (acked). */
static bool cq_event(struct ibv_comp_channel *ch, struct ibv_cq *cq,
		     double secs)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct ibv_cq *ev_cq;
	void *ctx;

	if (poll(&p, 1, (int)(secs * 1000)) <= 0)
		return false;
	if (ibv_get_cq_event(ch, &ev_cq, &ctx))
		return false;
	ibv_ack_cq_events(ev_cq, 1);
	return ev_cq == cq;
}

/* req_notify_event */
static void check_notify(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(dev.ctx);
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ring r;
	const char *why;
	char buf[256];
	int rc;

	if (!ch)
		die("ibv_create_comp_channel: %s", strerror(errno));
	cq = ring_cq(8, ch, &r);
	qp = flush_qp(cq, true);
	if (!r.hdr) {
		check_result(checks[C_NOTIFY], "%s", r.why);
	} else if ((rc = post_recvs(qp, 0x4000, 1))) {
		check_result(checks[C_NOTIFY], "ibv_post_recv: %s", strerror(rc));
	} else if ((why = polled_flushes(cq, qp, 0x4000, 1, true, buf,
					 sizeof(buf)))) {
		check_result(checks[C_NOTIFY], "unarmed: %s", why);
	} else if (cq_event(ch, cq, 0.3)) {
		check_result(checks[C_NOTIFY], "an event without ibv_req_notify_cq");
	} else if ((rc = ibv_req_notify_cq(cq, 0))) {
		check_result(checks[C_NOTIFY], "ibv_req_notify_cq: %s", strerror(rc));
	} else if ((rc = post_recvs(qp, 0x4001, 1))) {
		check_result(checks[C_NOTIFY], "ibv_post_recv: %s", strerror(rc));
	} else if (!cq_event(ch, cq, WAIT)) {
		check_result(checks[C_NOTIFY], "no completion event within %.0f s of arming",
			     WAIT);
	} else if ((why = polled_flushes(cq, qp, 0x4001, 1, true, buf,
					 sizeof(buf)))) {
		check_result(checks[C_NOTIFY], "armed: %s", why);
	} else {
		check_result(checks[C_NOTIFY], NULL);
	}
	/* An event not taken would keep ibv_destroy_cq waiting. */
	while (cq_event(ch, cq, 0))
		;
	drain_async();
	if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq) ||
	    ibv_destroy_comp_channel(ch))
		die("destroying the notify QP, CQ and channel: %s", strerror(errno));
}

static void provider_checks(void)
{
	pd = ibv_alloc_pd(dev.ctx);
	mem = aligned_alloc(page, MEM_LEN);
	if (!pd || !mem)
		die("setting up: %s", strerror(errno));
	memset(mem, 0, MEM_LEN);
	mr = ibv_reg_mr(pd, mem, MEM_LEN, IBV_ACCESS_LOCAL_WRITE |
			IBV_ACCESS_REMOTE_WRITE);
	if (!mr)
		die("ibv_reg_mr: %s", strerror(errno));

	check_completions();
	check_loopback();
	check_fills();
	check_cons_overrun(C_CONS_AHEAD, true);
	check_cons_overrun(C_CONS_BEHIND, false);
	check_resize();
	check_resize_corrupt();
	check_destroyed_qp();
	check_notify();

	drain_async();
	if (ibv_destroy_qp(qp1) || ibv_destroy_cq(cq1))
		die("destroying the first QP and CQ: %s", strerror(errno));
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	free(mem);
}

/* Whether the environment variable VAR is set as the provider reads
 * METAROCE_NO_RINGS: set unless unset, empty or "0". */
static bool env_set(const char *var)
{
	const char *v = getenv(var);

	return v && *v && strcmp(v, "0");
}

static void usage(FILE *f)
{
	fprintf(f, "usage: %s -d DEVICE [-g GID_INDEX] [-r] [-v]\n"
		   "       %s -l\n"
		   "  -r  rings are required: a context without them fails every check\n"
		   "      (CQ_RING_REQUIRED=1 in the environment does the same)\n",
		prog_name, prog_name);
}

/* check_tool_args' options, and -r: sets *DEV, *GID (-1 when not given),
 * *REQUIRED and verbose; makes stdout line-buffered. */
static void parse_args(int argc, char **argv, const char **name, int *gid,
		       bool *required)
{
	int c;

	*name = NULL;
	*gid = -1;
	*required = env_set("CQ_RING_REQUIRED");
	while ((c = getopt(argc, argv, "d:g:lrvh")) != -1) {
		switch (c) {
		case 'd': *name = optarg; break;
		case 'g': *gid = atoi(optarg); break;
		case 'r': *required = true; break;
		case 'v': verbose = true; break;
		case 'l':
			for (int i = 0; i < C_N; i++)
				printf("%s\n", checks[i]);
			exit(0);
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); exit(2);
		}
	}
	if (optind < argc) {
		usage(stderr);
		exit(2);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
}

int main(int argc, char **argv)
{
	const char *name;
	char desc[128];
	uint32_t flags = 0;
	bool required;
	int gid, rc;

	parse_args(argc, argv, &name, &gid, &required);
	open_device(&dev, name, 1, gid, NULL);
	page = (size_t)sysconf(_SC_PAGESIZE);

	if (!is_metaroce(desc, sizeof(desc))) {
		for (int c = 0; c < C_N; c++)
			skip(checks[c], "%s is not a MetaRoCE device (node_desc \"%s\")",
			     dev_name(&dev), desc);
	} else if ((rc = context_flags(&flags))) {
		die("GET_CONTEXT on a second file of %s: %s", dev_name(&dev),
		    strerror(rc));
	} else if (!(flags & METAROCE_UCTX_CQ_RING)) {
		/* Required (-r): a module that should offer them does not. */
		for (int c = 0; c < C_N; c++) {
			if (required)
				check_result(checks[c], "the context offers no CQ ring (flags %#x; cq_ring=0?)",
					     flags);
			else
				skip(checks[c], "the context offers no CQ ring (flags %#x; cq_ring=0?)",
				     flags);
		}
	} else {
		raw_checks();
		if (env_set("METAROCE_NO_RINGS")) {
			for (int c = C_COMPLETIONS; c < C_N; c++)
				skip(checks[c], "METAROCE_NO_RINGS is set: the provider uses no rings");
		} else {
			provider_checks();
		}
	}

	ibv_close_device(dev.ctx);
	if (skipped == C_N)
		return 4;
	return check_failures;
}
