// SPDX-License-Identifier: GPL-2.0
/*
 * mr-negative: negative tests of RC verbs semantics for an RDMA device, over
 * the public libibverbs API only.
 *
 *   mr-negative [options]              server
 *   mr-negative [options] SERVER_HOST  client
 *   mr-negative -l                     list the cases
 *
 * Like mr-integrity, the two sides meet over TCP (port 18519, -p). Every case
 * runs on its own fresh CQ and RC QP pair (and its own MRs), so that the error
 * state one case leaves behind cannot touch the next. The client is the
 * requester; the server owns the target memory, checks it byte by byte after
 * the client's operation and reports back over TCP. Both sides print
 *
 *   ok N name
 *   not ok N name: why
 *   # N name: note ...      (something worth knowing that is not a failure)
 *
 * and exit 1 if any case failed (2: bad usage). Every completion is waited for
 * with a deadline (-t, default 10 s); a missing completion is a failure, and
 * an alarm ends the process if a verb or the peer blocks.
 *
 * The cases (the remote target is an MR of 2 pages at offset 1024 of an 8-page
 * allocation; the rest of that allocation is guard: 1024 bytes before, and
 * after it a second, separately registered, remotely writable MR):
 *   1 write_past_mr_end        RDMA Write of 64 B starting at the MR's end:
 *                              IBV_WC_REM_ACCESS_ERR, allocation unchanged
 *   2 write_straddling_mr_end  RDMA Write of 4 MTUs starting 2 MTUs before the
 *                              end (the first packets are in range): the same
 *   3 write_wrong_rkey         RDMA Write with an rkey that is not the MR's:
 *                              the same
 *   4 write_without_remote_write  RDMA Write to an MR registered without
 *                              IBV_ACCESS_REMOTE_WRITE: the same
 *   5 read_without_remote_read RDMA Read (2 MTUs + 100 B) from an MR without
 *                              IBV_ACCESS_REMOTE_READ: IBV_WC_REM_ACCESS_ERR,
 *                              the local buffer unchanged
 *   6 send_wrong_lkey          Send whose SGE has a wrong lkey:
 *                              IBV_WC_LOC_PROT_ERR, nothing arrives at the
 *                              peer (no receive completion, buffer unchanged)
 *   7 post_in_reset_init       ibv_post_send in RESET and in INIT, and
 *                              ibv_post_recv in RESET, return an error; then,
 *                              connected, a valid Send completes and arrives
 *   8 error_state_flush        after an error completion (a Write with a wrong
 *                              rkey) ibv_query_qp says IBV_QPS_ERR, and a
 *                              receive and a send posted then both complete
 *                              with IBV_WC_WR_FLUSH_ERR
 *   9 send_longer_than_recv    a Send of 3 MTUs + 17 B into a receive of
 *                              1.5 MTUs + 3 B: the receiver's completion is
 *                              IBV_WC_LOC_LEN_ERR or the requester's is
 *                              IBV_WC_REM_INV_REQ_ERR (the receive must not
 *                              succeed), and no byte after the receive buffer
 *                              changes
 *  10 dest_qp_above_24_bits    a second QP of the client asks for RTR with
 *                              the server QP's number plus bit 31 as dest_qp:
 *                              ibv_modify_qp must fail (QP numbers have 24
 *                              bits); were it accepted, a Send from it must
 *                              not reach the server QP's receive
 *  11 dereg_mr_with_write_outstanding
 *                              the client posts a 4 MiB RDMA Write and
 *                              deregisters its source MR at once: the Write
 *                              completes (any status) within the deadline,
 *                              nothing outside the server's target changes,
 *                              and a Send on a fresh QP pair afterwards
 *                              (case 12) still works
 *  12 send_after_dereg         a plain 64-byte Send must complete and arrive
 *                              (the connection to the peer still works)
 *  13 dereg_mr_with_read_outstanding
 *                              the client Reads 4 MiB; 30 ms after both sides
 *                              are connected the server deregisters the
 *                              source MR: the Read completes (any status)
 *                              within 30 s, and case 14 still works
 *  14 send_after_read_dereg    as case 12
 *  15 read_without_responder_resources
 *                              the server's QP reaches RTR with
 *                              max_dest_rd_atomic 0 (it answers no Read):
 *                              a 64-byte RDMA Read completes with
 *                              IBV_WC_REM_INV_REQ_ERR, the local buffer
 *                              unchanged
 *  16 reads_beyond_initiator_depth
 *                              max_rd_atomic and max_dest_rd_atomic 1: the
 *                              client posts 8 Reads of 1.5 MTUs at once;
 *                              all 8 complete, in order, with IBV_WC_SUCCESS
 *                              and the bytes of the server's pieces (the
 *                              requester holds 7 back while one is answered)
 *  17 rd_atomic_above_device_max
 *                              ibv_modify_qp to RTR with max_dest_rd_atomic,
 *                              and to RTS with max_rd_atomic, one above what
 *                              ibv_query_device reports must fail; the
 *                              limits themselves are accepted
 *  18 state_transitions_checked
 *                              transitions verbs does not define fail:
 *                              RESET to RTS, INIT to RTS, RTR without a
 *                              destination QP number, RTS back to INIT;
 *                              the defined ones, with their attributes,
 *                              succeed
 *  19 query_qp_nothing_stale   ibv_query_qp with every attribute asked, on
 *                              QPs created with and without sq_sig_all, in
 *                              RESET, INIT and RTR: what an RC QP has no
 *                              value for (Q_Key, P_Key indexes, alternate
 *                              path, address vectors' unused parts, SQ
 *                              draining) reads 0, sq_sig_all reads as
 *                              created, the QP type RC (the kernel hands
 *                              these fields to user space as the driver
 *                              left them: not zeroed, they were old heap)
 *  20 unsupported_qp_type_errno
 *                              ibv_create_qp of a UD and a UC QP either
 *                              succeeds (then the QP is destroyed) or fails
 *                              with an errno user space knows (EOPNOTSUPP,
 *                              EINVAL, ...), never the kernel-internal
 *                              ENOTSUPP (524, "Unknown error 524")
 *  21 fenced_send_after_read   the client Reads 1 MiB of the server's and
 *                              posts a 64-byte Send with IBV_SEND_FENCE;
 *                              the server overwrites the Read's source the
 *                              moment the Send arrives: the Read must hold
 *                              only the bytes from before (the fence keeps
 *                              the Send back until the Read's answer is in)
 *  22 write_imm_without_receive
 *                              an RDMA Write with Immediate to a QP with no
 *                              receive posted, from a QP with rnr_retry 0:
 *                              IBV_WC_RNR_RETRY_EXC_ERR, the target unchanged
 *                              (a Write with Immediate consumes a receive;
 *                              taken without one, its immediate was lost and
 *                              the next Sends matched the wrong receives)
 *  23 cq_overrun_raises_cq_err one more signaled RDMA Write than the
 *                              client's CQ (created with 2 entries) holds,
 *                              none polled: ibv_get_async_event reports
 *                              IBV_EVENT_CQ_ERR for that CQ within the
 *                              deadline (the completion that found the CQ
 *                              full is lost; its consumer must hear so),
 *                              nothing outside the server's MR changes
 *  24 resize_cq_keeps_completions
 *                              a CQ of 2 resized to 8 takes 7 Write
 *                              completions left unpolled for 2 s (no
 *                              IBV_EVENT_CQ_ERR, all 7 in order); then, with
 *                              3 queued (the ring wrapped), a resize to 1
 *                              fails or keeps them, a resize to 16
 *                              succeeds, and the 3 come out in order
 *  25 unsolicited_send_wakes_no_solicited_waiter
 *                              the server's CQ, on a completion channel,
 *                              is armed for solicited completions only; a
 *                              Send without IBV_SEND_SOLICITED arrives (its
 *                              receive completes) and no event comes within
 *                              1 s
 *  26 solicited_send_wakes_the_waiter
 *                              the same CQ and a Send with
 *                              IBV_SEND_SOLICITED: the event comes
 *  27 wr_batch_all_or_nothing  the ibv_wr_* API (a QP from ibv_create_qp_ex):
 *                              one batch of three Writes (an SGE list, an
 *                              inline list overwritten right after it was
 *                              set, one SGE) lands whole, in order; batches
 *                              one request longer than the send queue, with
 *                              one SGE or one inline byte more than granted,
 *                              and an aborted one fail or post nothing:
 *                              no completion, no byte
 *  28 zero_length_skips_rkey   an RDMA Write with Immediate, an RDMA Write
 *                              and an RDMA Read of 0 bytes, all naming
 *                              address 0 under a key that is no region's:
 *                              all succeed (a zero-length operation's key
 *                              and address are not validated, IBA C9-88;
 *                              rsockets sends its credit updates so), the
 *                              Write with Immediate's receive completes
 *                              with its immediate and 0 bytes, nothing of
 *                              the server's changes
 *  29 send_with_inv_not_granted
 *                              a Send with Invalidate naming the key of
 *                              the server's ordinary region (remote write
 *                              granted; a user has no fast registration,
 *                              the only kind a peer may end): refused, the
 *                              sender's completion IBV_WC_REM_INV_REQ_ERR,
 *                              the receive never completes successfully,
 *                              and the region still deregisters
 *  30 uc_read_refused          a UC QP of the client, in RTS, refuses an
 *                              RDMA Read, a compare-and-swap and a
 *                              fetch-and-add at post time (EINVAL) and
 *                              completes nothing (a device without UC QPs
 *                              passes: case 20 covers that)
 *  31 rnr_late_receive         three Sends (64 bytes, three packets and
 *                              a few bytes, 16000 bytes) to a server that
 *                              posts its receives only 300 ms after the
 *                              Sends went out (the client's rnr_retry is 7,
 *                              for ever; the server's min_rnr_timer 12):
 *                              every Send completes with success, and each
 *                              receive, in order, with its Send's bytes
 *                              (refused for want of a receive, a Send is
 *                              sent again after the timer, not failed)
 *  32 read_into_deregistered_mr
 *                              a 4 MiB Read whose own destination MR the
 *                              client deregisters right after posting it
 *                              (valid then, gone before its answer, which
 *                              takes far longer than a system call):
 *                              the Read completes with IBV_WC_LOC_PROT_ERR
 *                              within READ_DEREG_WAIT_S (the module before
 *                              this case: IBV_WC_RETRY_EXC_ERR after the
 *                              QP's patience), and the server's source is
 *                              unchanged
 *
 * Every completion the client waits for (expect_wc) must carry only flags
 * an RC send completion can have (IBV_WC_WITH_IMM, IBV_WC_WITH_INV): a
 * kernel flag copied as it is reads as another one in libibverbs (bit 6 is
 * IBV_WC_TM_DATA_VALID). Checked on successful completions only (verbs
 * leaves wc_flags undefined on errors).
 *
 * Exit status: 0 every case passed, 1 a failure, 2 bad usage.
 */
#define _GNU_SOURCE
#include "common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROG "mr-negative"
const char prog_name[] = PROG;
#define DEFAULT_PORT "18519"
#define PAGE 4096u

/* The remote target: an MR inside a larger allocation (guard around it). */
#define T_ALLOC (8 * PAGE)
#define T_OFF 1024u
#define T_LEN (2 * PAGE)
#define T_END (T_OFF + T_LEN)
#define L_ALLOC (8 * PAGE)	/* the client's local buffer */
#define V_ALLOC (8 * PAGE)	/* a receive buffer */
#define V_OFF 1024u

enum { C_WRITE_PAST = 1, C_WRITE_STRADDLE, C_WRITE_RKEY, C_WRITE_NO_RW,
       C_READ_NO_RR, C_SEND_LKEY, C_POST_STATE, C_FLUSH, C_SEND_LONG,
       C_DEST_HIGH, C_DEREG_BUSY, C_SEND_AFTER, C_DEREG_READ, C_SEND_AFTER2,
       C_READ_NO_RES, C_READ_DEPTH, C_RD_MAX, C_TRANSITIONS, C_QUERY,
       C_QP_TYPES, C_FENCE, C_WRITE_IMM_NO_RECV, C_CQ_OVERRUN,
       C_CQ_RESIZE, C_UNSOLICITED, C_SOLICITED, C_WR_BATCH, C_ZERO_LEN,
       C_SEND_INV, C_UC_READ, C_RNR_LATE, C_READ_LOCAL_DEREG,
       NCASES = C_READ_LOCAL_DEREG };

/* rnr_late_receive: the Sends (offset in the client's buffer, length) and
 * the server's wait before it posts their receives */
#define RNR_RECV 16384u
#define RNR_WAIT_US 300000
static const struct { uint32_t off, len; } rnr_sends[3] = {
	{ 0, 64 }, { 1024, 0 /* three packets and 7 bytes */ }, { 16384, 16000 },
};


/* A QP number no case's server QP has (their numbers are handed out from
 * the bottom of the 24-bit space). */
#define UNUSED_QPN 0xfffff0u

/* reads_beyond_initiator_depth: how many Reads (each of 1.5 MTUs: two
 * packets, the second short, 2 MTUs apart). */
#define DEPTH_READS 8

/* dereg_mr_with_read_outstanding: how long the Read may take to end. */
#define READ_DEREG_WAIT_S 30

/* dereg_mr_with_write_outstanding: the Write's length. */
#define BIG_LEN (4u << 20)

/* fenced_send_after_read: the Read's length (long enough for the Send to
 * overtake its answer without the fence: the module before the fence was
 * caught at byte 1024; short enough to finish within -t under emulation) */
#define FENCE_LEN (1u << 20)

static const char *const case_name[NCASES + 1] = {
	NULL,
	"write_past_mr_end",
	"write_straddling_mr_end",
	"write_wrong_rkey",
	"write_without_remote_write",
	"read_without_remote_read",
	"send_wrong_lkey",
	"post_in_reset_init",
	"error_state_flush",
	"send_longer_than_recv",
	"dest_qp_above_24_bits",
	"dereg_mr_with_write_outstanding",
	"send_after_dereg",
	"dereg_mr_with_read_outstanding",
	"send_after_read_dereg",
	"read_without_responder_resources",
	"reads_beyond_initiator_depth",
	"rd_atomic_above_device_max",
	"state_transitions_checked",
	"query_qp_nothing_stale",
	"unsupported_qp_type_errno",
	"fenced_send_after_read",
	"write_imm_without_receive",
	"cq_overrun_raises_cq_err",
	"resize_cq_keeps_completions",
	"unsolicited_send_wakes_no_solicited_waiter",
	"solicited_send_wakes_the_waiter",
	"wr_batch_all_or_nothing",
	"zero_length_skips_rkey",
	"send_with_inv_not_granted",
	"uc_read_refused",
	"rnr_late_receive",
	"read_into_deregistered_mr",
};

static struct {
	const char *dev_name;
	int ib_port;
	int gid_idx; /* -1: pick one */
	const char *tcp_port;
	int timeout_s;
	uint32_t cases; /* bit N - 1: case N (1..32) */
	const char *server;
} cfg = {
	.ib_port = 1,
	.gid_idx = -1,
	.tcp_port = DEFAULT_PORT,
	.timeout_s = 10,
	.cases = NCASES == 32 ? UINT32_MAX : (1u << NCASES) - 1,
};

/* The device, shared by every case. */
static struct {
	struct rdma_dev dev;
	struct ibv_pd *pd;
	int sock;
	bool is_server;
	uint32_t mtu;		/* enum ibv_mtu both sides support */
	uint32_t mtu_bytes;
	uint64_t seed;
	int cur_case;
} D;

/* ---------- messages ---------- */

/* die() says which case failed. */
static void case_context(FILE *f)
{
	if (D.cur_case)
		fprintf(f, "case %d %s: ", D.cur_case, case_name[D.cur_case]);
}

static const char *wc_name(int s)
{
	static const char *const n[] = {
		"IBV_WC_SUCCESS", "IBV_WC_LOC_LEN_ERR", "IBV_WC_LOC_QP_OP_ERR",
		"IBV_WC_LOC_EEC_OP_ERR", "IBV_WC_LOC_PROT_ERR",
		"IBV_WC_WR_FLUSH_ERR", "IBV_WC_MW_BIND_ERR",
		"IBV_WC_BAD_RESP_ERR", "IBV_WC_LOC_ACCESS_ERR",
		"IBV_WC_REM_INV_REQ_ERR", "IBV_WC_REM_ACCESS_ERR",
		"IBV_WC_REM_OP_ERR", "IBV_WC_RETRY_EXC_ERR",
		"IBV_WC_RNR_RETRY_EXC_ERR", "IBV_WC_LOC_RDD_VIOL_ERR",
		"IBV_WC_REM_INV_RD_REQ_ERR", "IBV_WC_REM_ABORT_ERR",
		"IBV_WC_INV_EECN_ERR", "IBV_WC_INV_EEC_STATE_ERR",
		"IBV_WC_FATAL_ERR", "IBV_WC_RESP_TIMEOUT_ERR",
		"IBV_WC_GENERAL_ERR", "IBV_WC_TM_ERR",
		"IBV_WC_TM_RNDV_INCOMPLETE",
	};
	static char other[32];

	if (s >= 0 && (size_t)s < sizeof(n) / sizeof(*n))
		return n[s];
	snprintf(other, sizeof(other), "status %d", s);
	return other;
}

static const char *qps_name(int s)
{
	static const char *const n[] = {
		"IBV_QPS_RESET", "IBV_QPS_INIT", "IBV_QPS_RTR", "IBV_QPS_RTS",
		"IBV_QPS_SQD", "IBV_QPS_SQE", "IBV_QPS_ERR", "IBV_QPS_UNKNOWN",
	};
	static char other[32];

	if (s >= 0 && (size_t)s < sizeof(n) / sizeof(*n))
		return n[s];
	snprintf(other, sizeof(other), "state %d", s);
	return other;
}

/* What one side found in one case: failure reasons and notes. */
#define TEXT_LEN 960
struct verdict {
	bool fail;
	char why[TEXT_LEN];
	char note[TEXT_LEN];
};

static void append(char *buf, const char *fmt, va_list ap)
{
	size_t used = strlen(buf);

	if (used + 3 >= TEXT_LEN)
		return;
	if (used) {
		strcpy(buf + used, "; ");
		used += 2;
	}
	vsnprintf(buf + used, TEXT_LEN - used, fmt, ap);
}

/* A failure reason (FAIL) or a note for V. */
static void __attribute__((format(printf, 3, 4)))
verdict_add(struct verdict *v, bool fail, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	append(fail ? v->why : v->note, fmt, ap);
	va_end(ap);
	if (fail)
		v->fail = true;
}

#define vfail(v, ...) verdict_add(v, true, __VA_ARGS__)
#define vnote(v, ...) verdict_add(v, false, __VA_ARGS__)

/* ---------- patterns ---------- */

static void fill(uint8_t *buf, size_t len, uint64_t key)
{
	for (size_t i = 0; i < len; i += 8) {
		uint64_t w = mix64(key + i / 8);

		memcpy(buf + i, &w, len - i < 8 ? len - i : 8);
	}
}

static uint64_t key_of(int cas, int what)
{
	return mix64(D.seed ^ ((uint64_t)cas << 32) ^ (uint64_t)what);
}

/* Compare BUF with SNAP over [0, len) except [skip_lo, skip_hi). Returns
 * the number of changed bytes; *first and *last get the first and the last
 * changed offset. */
static size_t changed(const uint8_t *buf, const uint8_t *snap, size_t len,
		      size_t skip_lo, size_t skip_hi, size_t *first,
		      size_t *last)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++) {
		if (i >= skip_lo && i < skip_hi)
			continue;
		if (buf[i] != snap[i]) {
			if (!n)
				*first = i;
			*last = i;
			n++;
		}
	}
	return n;
}

/* ---------- time and completions ---------- */

/* One completion before DEADLINE: 1 got one, 0 none, < 0 ibv_poll_cq failed. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, double deadline)
{
	return poll_until(cq, wc, deadline, 100, 200000);
}

static double deadline(void)
{
	return now_s() + cfg.timeout_s;
}

/* A short wait for completions that should not come. */
static double quiet_deadline(void)
{
	return now_s() + (cfg.timeout_s < 2 ? 0.5 : 1.0);
}

/* ---------- TCP ---------- */

/* One message between the two sides: fixed size, big-endian numbers. */
enum mtype { M_HELLO = 1, M_INFO, M_SYNC, M_DONE, M_RESULT, M_FINAL };
#define NF 8
struct wire {
	uint32_t type, cas, status;
	uint64_t f[NF];
	uint8_t gid[16];
	char why[TEXT_LEN], note[TEXT_LEN];
};
#define MAGIC 0x4d524e47u /* "MRNG" */
#define PROTO_VERSION 2u
#define WIRE_LEN (4 * 4 + 8 * NF + 16 + 2 * TEXT_LEN)

static double peer_deadline(void)
{
	/* the peer's phase may wait for a few completions and quiet windows */
	return now_s() + 4.0 * cfg.timeout_s + 10;
}

static void wire_send(const struct wire *w)
{
	uint8_t buf[WIRE_LEN], *p = buf;

	memset(buf, 0, sizeof(buf));
	put32(&p, MAGIC);
	put32(&p, w->type);
	put32(&p, w->cas);
	put32(&p, w->status);
	for (int i = 0; i < NF; i++)
		put64(&p, w->f[i]);
	memcpy(p, w->gid, 16);
	p += 16;
	memcpy(p, w->why, strnlen(w->why, TEXT_LEN - 1));
	p += TEXT_LEN;
	memcpy(p, w->note, strnlen(w->note, TEXT_LEN - 1));
	if (io_full(D.sock, buf, sizeof(buf), true, peer_deadline()))
		die("sending to the peer: %s", strerror(errno));
}

static void wire_recv(struct wire *w, enum mtype type)
{
	uint8_t buf[WIRE_LEN];
	const uint8_t *p = buf;

	if (io_full(D.sock, buf, sizeof(buf), false, peer_deadline()))
		die("waiting for the peer: %s", strerror(errno));
	if (get32(&p) != MAGIC)
		die("the peer is not " PROG);
	w->type = get32(&p);
	w->cas = get32(&p);
	w->status = get32(&p);
	for (int i = 0; i < NF; i++)
		w->f[i] = get64(&p);
	memcpy(w->gid, p, 16);
	p += 16;
	memcpy(w->why, p, TEXT_LEN);
	w->why[TEXT_LEN - 1] = 0;
	p += TEXT_LEN;
	memcpy(w->note, p, TEXT_LEN);
	w->note[TEXT_LEN - 1] = 0;
	if (w->type != (uint32_t)type || (type != M_HELLO &&
					  w->cas != (uint32_t)D.cur_case))
		die("out of step with the peer (got message %u for case %u, "
		    "want %u for case %d)", w->type, w->cas, type, D.cur_case);
}

/* ---------- device ---------- */

/* The device and its PD. */
static void setup_device(void)
{
	open_device(&D.dev, cfg.dev_name, cfg.ib_port, cfg.gid_idx, NULL);
	D.pd = ibv_alloc_pd(D.dev.ctx);
	if (!D.pd)
		die("ibv_alloc_pd: %s", strerror(errno));
	vmsg("device %s port %d gid %d (%s) active_mtu %d", dev_name(&D.dev),
	     cfg.ib_port, D.dev.gid_idx,
	     inet_ntop(AF_INET6, D.dev.gid.raw, (char[64]){0}, 64),
	     128 << D.dev.port.active_mtu);
}

/* ---------- one case's resources ---------- */

#define NMR 3
struct cs {
	int n;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint32_t psn;
	uint32_t rlen;		/* send_longer_than_recv: the receive's length */
	uint8_t *buf, *snap;	/* the case's main buffer and its copy */
	size_t len;
	struct ibv_mr *mr[NMR];
	struct wire me, peer;	/* M_INFO */
	struct verdict v;
	bool fenced;		/* fenced_send_after_read: the Send came */
	struct ibv_comp_channel *ch; /* the (un)solicited cases' server */
};

static uint8_t *alloc_buf(size_t len)
{
	void *p;

	if (posix_memalign(&p, PAGE, len))
		die("out of memory");
	return p;
}

static struct ibv_mr *reg(void *addr, size_t len, int access)
{
	struct ibv_mr *mr = ibv_reg_mr(D.pd, addr, len, access);

	if (!mr)
		die("ibv_reg_mr(%zu bytes, access 0x%x): %s", len, access,
		    strerror(errno));
	return mr;
}

/* The main buffer of LEN bytes, filled with this case's pattern WHAT, and
 * a copy to compare with later. */
static void make_buf(struct cs *s, size_t len, int what)
{
	s->len = len;
	s->buf = alloc_buf(len);
	s->snap = alloc_buf(len);
	fill(s->buf, len, key_of(s->n, what));
	memcpy(s->snap, s->buf, len);
}

/* A key (lkey or rkey) that none of this case's MRs has. */
static uint32_t wrong_key(const struct cs *s, uint32_t k)
{
	static const uint32_t flip[] = { 0x5a, 0xa5, 0x3c00, 0x1, 0x80000000 };

	for (unsigned f = 0; f < sizeof(flip) / sizeof(*flip); f++) {
		uint32_t w = k ^ flip[f];
		bool taken = false;

		for (int i = 0; i < NMR; i++)
			if (s->mr[i] && (s->mr[i]->lkey == w ||
					 s->mr[i]->rkey == w))
				taken = true;
		if (!taken)
			return w;
	}
	return k ^ 0x12345678;
}

static void cs_create(struct cs *s)
{
	/* cq_overrun_raises_cq_err, resize_cq_keeps_completions: the
	 * client's CQ holds 2 (or what the device rounds that up to) */
	int cqe = !D.is_server && (s->n == C_CQ_OVERRUN ||
				   s->n == C_CQ_RESIZE) ? 2 : 32;

	/* (un)solicited cases: the server waits on a completion channel */
	if (D.is_server && (s->n == C_UNSOLICITED || s->n == C_SOLICITED)) {
		s->ch = ibv_create_comp_channel(D.dev.ctx);
		if (!s->ch)
			die("ibv_create_comp_channel: %s", strerror(errno));
	}
	s->cq = ibv_create_cq(D.dev.ctx, cqe, NULL, s->ch, 0);
	if (!s->cq)
		die("ibv_create_cq: %s", strerror(errno));
	struct ibv_qp_init_attr ia = {
		.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	if (!D.is_server && s->n == C_WR_BATCH) {
		/* wr_batch_all_or_nothing: for the ibv_wr_* calls, with
		 * room for its 64 inline bytes */
		ia.cap.max_inline_data = 64;
		struct ibv_qp_init_attr_ex ax = {
			.send_cq = ia.send_cq, .recv_cq = ia.recv_cq,
			.cap = ia.cap, .qp_type = ia.qp_type, .pd = D.pd,
			.comp_mask = IBV_QP_INIT_ATTR_PD |
				     IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
			.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE,
		};
		s->qp = ibv_create_qp_ex(D.dev.ctx, &ax);
	} else {
		s->qp = ibv_create_qp(D.pd, &ia);
	}
	if (!s->qp)
		die("ibv_create_qp: %s", strerror(errno));
	s->psn = (uint32_t)mix64(D.seed ^ (uint64_t)s->n ^
				 (D.is_server ? 0x5e00 : 0xc100)) & 0xffffff;
}

static void cs_to_init(struct cs *s)
{
	int rc = qp_to_init(s->qp, cfg.ib_port, IBV_ACCESS_LOCAL_WRITE |
			    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);

	if (rc)
		die("QP to INIT: %s", strerror(rc));
}

static void cs_connect(struct cs *s)
{
	const struct wire *p = &s->peer;
	struct qp_info peer = { .qpn = (uint32_t)p->f[0],
				.psn = (uint32_t)p->f[1],
				.lid = (uint32_t)p->f[2] };
	int rc;

	memcpy(peer.gid, p->gid, 16);
	/* read_without_responder_resources: the server answers no Read */
	rc = qp_to_rtr(s->qp, cfg.ib_port, (enum ibv_mtu)D.mtu, &peer,
		       D.dev.gid_idx,
		       D.is_server && s->n == C_READ_NO_RES ? 0 : 1);
	if (rc)
		die("QP to RTR: %s", strerror(rc));
	/* write_imm_without_receive: rnr_retry 0, so that the refusal is
	 * reported at once (RNR_RETRY_EXC_ERR) instead of retried for ever */
	rc = qp_to_rts(s->qp, s->psn,
		       !D.is_server && s->n == C_WRITE_IMM_NO_RECV ? 0 : 7, 1);
	if (rc)
		die("QP to RTS: %s", strerror(rc));
}

static void cs_destroy(struct cs *s)
{
	if (s->qp && ibv_destroy_qp(s->qp))
		msg("warning: ibv_destroy_qp failed");
	for (int i = 0; i < NMR; i++)
		if (s->mr[i] && ibv_dereg_mr(s->mr[i]))
			msg("warning: ibv_dereg_mr failed");
	if (s->cq && ibv_destroy_cq(s->cq))
		msg("warning: ibv_destroy_cq failed");
	if (s->ch && ibv_destroy_comp_channel(s->ch))
		msg("warning: ibv_destroy_comp_channel failed");
	free(s->buf);
	free(s->snap);
}

/* Post one work request with one SGE (LEN 0: none). Returns the errno. */
static int post_send1(struct ibv_qp *qp, uint64_t wr_id,
		      enum ibv_wr_opcode opc, void *addr, uint32_t len,
		      uint32_t lkey, uint64_t raddr, uint32_t rkey,
		      struct ibv_send_wr **bad_out)
{
	struct ibv_sge sg = { (uintptr_t)addr, len, lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id, .sg_list = &sg, .num_sge = len ? 1 : 0,
		.opcode = opc, .send_flags = IBV_SEND_SIGNALED,
	}, *bad = NULL;

	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	int rc = ibv_post_send(qp, &wr, &bad);
	if (bad_out)
		*bad_out = rc && bad == &wr ? bad : NULL;
	return rc;
}

static int post_recv1(struct ibv_qp *qp, uint64_t wr_id, void *addr,
		      uint32_t len, uint32_t lkey, bool *bad_ok)
{
	struct ibv_sge sg = { (uintptr_t)addr, len, lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sg,
				  .num_sge = 1 }, *bad = NULL;

	int rc = ibv_post_recv(qp, &wr, &bad);
	if (bad_ok)
		*bad_ok = bad == &wr;
	return rc;
}

/* Wait for the completion of WR_ID and check its status: WANT, or one of
 * WANT and ALT (-1: no alternative). Returns the status seen, -1 when none
 * came. Other completions on the way are reported as failures. */
static int expect_wc(struct cs *s, uint64_t wr_id, const char *what,
		     int want, int alt)
{
	struct ibv_wc wc;
	double dl = deadline();

	for (;;) {
		int rc = poll_one(s->cq, &wc, dl);

		if (rc < 0) {
			vfail(&s->v, "ibv_poll_cq failed");
			return -1;
		}
		if (rc == 0) {
			vfail(&s->v, "no completion for the %s within %d s "
			      "(want %s)", what, cfg.timeout_s, wc_name(want));
			return -1;
		}
		if (wc.wr_id != wr_id) {
			vfail(&s->v, "unexpected completion wr_id 0x%" PRIx64
			      " status %s while waiting for the %s",
			      wc.wr_id, wc_name(wc.status), what);
			continue;
		}
		if (wc.status == IBV_WC_SUCCESS &&
		    wc.wc_flags & ~(unsigned)(IBV_WC_WITH_IMM | IBV_WC_WITH_INV))
			vfail(&s->v, "%s: completion flags 0x%x: bits an RC "
			      "completion cannot have", what, wc.wc_flags);
		if ((int)wc.status != want && (int)wc.status != alt)
			vfail(&s->v, "%s: completion status %s (vendor_err "
			      "0x%x), want %s%s%s", what, wc_name(wc.status),
			      wc.vendor_err, wc_name(want), alt >= 0 ? " or " : "",
			      alt >= 0 ? wc_name(alt) : "");
		vmsg("case %d: %s: %s", s->n, what, wc_name(wc.status));
		return (int)wc.status;
	}
}

/* Completions that should not come: fail on each within a short window. */
static void expect_quiet(struct cs *s, const char *why)
{
	struct ibv_wc wc;
	double dl = quiet_deadline();

	while (poll_one(s->cq, &wc, dl) == 1)
		vfail(&s->v, "%s: a completion arrived (wr_id 0x%" PRIx64
		      " status %s byte_len %u)", why, wc.wr_id,
		      wc_name(wc.status), wc.byte_len);
}

static int query_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int rc = ibv_query_qp(qp, &a, IBV_QP_STATE, &ia);

	return rc ? -rc : (int)a.qp_state;
}

/* Report the bytes of the main buffer that changed outside [lo, hi). */
static void check_unchanged(struct cs *s, const char *what, size_t lo,
			    size_t hi, size_t mr_lo, size_t mr_hi)
{
	size_t first = 0, last = 0;
	size_t n = changed(s->buf, s->snap, s->len, lo, hi, &first, &last);

	if (!n)
		return;
	char where[96] = "";

	if (mr_lo != mr_hi)
		snprintf(where, sizeof(where), " (the MR is [%zu, %zu); the first "
			 "changed byte is %s)", mr_lo, mr_hi,
			 first < mr_lo ? "before it" : first < mr_hi ?
			 "inside it" : "after it, in the guard");
	vfail(&s->v, "%s: %zu byte(s) changed between offsets %zu and %zu%s, "
	      "the first 0x%02x, want 0x%02x", what, n, first, last, where,
	      s->buf[first], s->snap[first]);
}

/* ---------- the cases: server side ---------- */

/* The target allocation with the MR at T_OFF and the guard MR after it. */
static void server_target(struct cs *s, int access)
{
	make_buf(s, T_ALLOC, 1);
	s->mr[0] = reg(s->buf + T_OFF, T_LEN, access);
	s->mr[1] = reg(s->buf + T_END, T_ALLOC - T_END,
		       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		       IBV_ACCESS_REMOTE_READ);
}

static void server_prepare(struct cs *s)
{
	int full = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		   IBV_ACCESS_REMOTE_READ;
	uint64_t base = 0;
	uint32_t m = D.mtu_bytes;
	uint64_t *f = s->me.f;

	cs_to_init(s);
	/* f[3] address, f[4] length, f[5] rkey of the client's operation */
	switch (s->n) {
	case C_RNR_LATE:
		/* the receives' buffers; no receive posted yet */
		make_buf(s, 3 * RNR_RECV, 1);
		s->mr[0] = reg(s->buf, s->len, IBV_ACCESS_LOCAL_WRITE);
		break;
	case C_WRITE_IMM_NO_RECV:
	case C_CQ_OVERRUN:
	case C_CQ_RESIZE:
	case C_WR_BATCH:
		/* a target it may write (and no receive) */
		server_target(s, full);
		f[3] = (uintptr_t)s->buf + T_OFF + 256;
		f[4] = 512;
		f[5] = s->mr[0]->rkey;
		break;
	case C_WRITE_PAST:
	case C_WRITE_STRADDLE:
	case C_WRITE_RKEY:
	case C_FLUSH:
		server_target(s, full);
		base = (uintptr_t)s->buf;
		f[5] = s->mr[0]->rkey;
		if (s->n == C_WRITE_PAST) {
			f[3] = base + T_END;
			f[4] = 64;
		} else if (s->n == C_WRITE_STRADDLE) {
			f[3] = base + T_END - 2 * m;
			f[4] = 4 * m;
		} else {
			f[3] = base + T_OFF + 256;
			f[4] = 512;
			f[5] = wrong_key(s, s->mr[0]->rkey);
		}
		break;
	case C_WRITE_NO_RW:
		server_target(s, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
		f[3] = (uintptr_t)s->buf + T_OFF + 256;
		f[4] = 512;
		f[5] = s->mr[0]->rkey;
		break;
	case C_READ_NO_RR:
		server_target(s, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		f[3] = (uintptr_t)s->buf + T_OFF + 256;
		f[4] = 2 * m + 100 < T_LEN - 512 ? 2 * m + 100 : T_LEN - 512;
		f[5] = s->mr[0]->rkey;
		break;
	case C_READ_NO_RES:
		server_target(s, full);
		f[3] = (uintptr_t)s->buf + T_OFF + 256;
		f[4] = 64;
		f[5] = s->mr[0]->rkey;
		break;
	case C_READ_DEPTH:
		/* DEPTH_READS pieces of 1.5 MTUs, one after the other */
		make_buf(s, (size_t)DEPTH_READS * 2 * m + PAGE, 1);
		s->mr[0] = reg(s->buf, s->len, full);
		f[3] = (uintptr_t)s->buf;
		f[4] = m + m / 2;
		f[5] = s->mr[0]->rkey;
		break;
	case C_RD_MAX:
	case C_TRANSITIONS:
	case C_QUERY:
	case C_QP_TYPES:
	case C_UC_READ:
		break;
	case C_DEREG_BUSY:
	case C_DEREG_READ:
	case C_READ_LOCAL_DEREG:
		make_buf(s, BIG_LEN + 2 * PAGE, 1);
		s->mr[0] = reg(s->buf + PAGE, BIG_LEN, full);
		f[3] = (uintptr_t)s->buf + PAGE;
		f[4] = BIG_LEN;
		f[5] = s->mr[0]->rkey;
		break;
	case C_FENCE: {
		/* the Read's source, and a receive for the Send after it */
		make_buf(s, FENCE_LEN + V_ALLOC, 1);
		s->mr[0] = reg(s->buf, FENCE_LEN, full);
		s->mr[1] = reg(s->buf + FENCE_LEN, V_ALLOC,
			       IBV_ACCESS_LOCAL_WRITE);
		f[3] = (uintptr_t)s->buf;
		f[4] = FENCE_LEN;
		f[5] = s->mr[0]->rkey;
		int rc = post_recv1(s->qp, 0x200, s->buf + FENCE_LEN, PAGE,
				    s->mr[1]->lkey, NULL);
		if (rc)
			die("ibv_post_recv: %s", strerror(rc));
		break;
	}
	case C_DEST_HIGH:
	case C_SEND_AFTER:
	case C_SEND_AFTER2:
	case C_SEND_LKEY:
	case C_POST_STATE:
	case C_UNSOLICITED:
	case C_SOLICITED:
	case C_ZERO_LEN:
	case C_SEND_INV:
		make_buf(s, V_ALLOC, 2);
		/* send_with_inv_not_granted names the key of an ordinary region
		 * peers may write */
		s->mr[0] = reg(s->buf, s->len,
			       s->n == C_SEND_INV ? full : IBV_ACCESS_LOCAL_WRITE);
		f[5] = s->mr[0]->rkey;
		/* one receive; four for post_in_reset_init, so that sends
		 * wrongly executed later are seen, not stuck in RNR */
		for (int i = 0; i < (s->n == C_POST_STATE ? 4 : 1); i++) {
			int rc = post_recv1(s->qp, 0x100 + i,
					    s->buf + V_OFF + i * PAGE, PAGE,
					    s->mr[0]->lkey, NULL);
			if (rc)
				die("ibv_post_recv: %s", strerror(rc));
		}
		if ((s->n == C_UNSOLICITED || s->n == C_SOLICITED) &&
		    ibv_req_notify_cq(s->cq, 1))
			die("ibv_req_notify_cq(solicited only) failed");
		break;
	case C_SEND_LONG: {
		make_buf(s, V_ALLOC, 2);
		s->mr[0] = reg(s->buf, s->len, IBV_ACCESS_LOCAL_WRITE);
		s->rlen = m + m / 2 + 3;
		int rc = post_recv1(s->qp, 0x900, s->buf + V_OFF, s->rlen,
				    s->mr[0]->lkey, NULL);
		if (rc)
			die("ibv_post_recv: %s", strerror(rc));
		break;
	}
	}
}

/* Wait up to WAIT_S for the case's completion channel: true with the event
 * taken and acknowledged, false if none came. */
static bool channel_event(struct cs *s, double wait_s)
{
	struct pollfd pfd = { .fd = s->ch->fd, .events = POLLIN };
	struct ibv_cq *cq;
	void *ctx;
	int rc;

	do
		rc = poll(&pfd, 1, (int)(wait_s * 1000));
	while (rc < 0 && errno == EINTR);
	if (rc < 0)
		die("poll on the completion channel: %s", strerror(errno));
	if (rc == 0)
		return false;
	if (ibv_get_cq_event(s->ch, &cq, &ctx))
		die("ibv_get_cq_event: %s", strerror(errno));
	ibv_ack_cq_events(cq, 1);
	return true;
}

/* The (un)solicited cases, the server: its CQ was armed for solicited
 * completions before the client's Send. */
static void server_solicited(struct cs *s)
{
	struct ibv_wc wc;
	bool sol = s->n == C_SOLICITED;

	if (sol && !channel_event(s, cfg.timeout_s))
		vfail(&s->v, "no completion event within %d s for a Send with "
		      "IBV_SEND_SOLICITED", cfg.timeout_s);
	int rc = poll_one(s->cq, &wc, deadline());

	if (rc < 0)
		die("ibv_poll_cq failed");
	if (rc == 0) {
		vfail(&s->v, "the Send did not arrive within %d s",
		      cfg.timeout_s);
		return;
	}
	if (wc.status != IBV_WC_SUCCESS)
		vfail(&s->v, "receive completion %s", wc_name(wc.status));
	if (!sol && channel_event(s, 1.0))
		vfail(&s->v, "a Send without IBV_SEND_SOLICITED woke a CQ "
		      "armed for solicited completions only");
}

/* After the client's DONE: look at what arrived, or did not. */
static void server_check(struct cs *s, const struct wire *done)
{
	struct ibv_wc wc;
	uint64_t *res = s->me.f;

	(void)done;
	switch (s->n) {
	case C_WRITE_PAST:
	case C_WRITE_STRADDLE:
	case C_WRITE_RKEY:
	case C_WRITE_NO_RW:
	case C_FLUSH:
		check_unchanged(s, "target allocation", 0, 0, T_OFF, T_END);
		break;
	case C_READ_NO_RR:
	case C_READ_NO_RES:
		check_unchanged(s, "read source", 0, 0, T_OFF, T_END);
		break;
	case C_READ_DEPTH:
		check_unchanged(s, "read source", 0, 0, 0, 0);
		break;
	case C_WRITE_IMM_NO_RECV:
		check_unchanged(s, "target allocation", 0, 0, 0, 0);
		break;
	case C_CQ_OVERRUN:
	case C_CQ_RESIZE:
		check_unchanged(s, "around the target", T_OFF, T_END, 0, 0);
		break;
	case C_SEND_LKEY:
		expect_quiet(s, "the send with a wrong lkey reached the peer");
		check_unchanged(s, "receive buffer", 0, 0, 0, 0);
		break;
	case C_SEND_INV: {
		/* An error completion (the QP failed) is allowed; a receive
		 * completed as if the key had been invalidated is not. */
		while (poll_one(s->cq, &wc, quiet_deadline()) == 1)
			if (wc.status == IBV_WC_SUCCESS)
				vfail(&s->v, "the Send with Invalidate of an "
				      "ordinary region's key completed its "
				      "receive (flags %#x)", wc.wc_flags);
		if (!ibv_dereg_mr(s->mr[0]))
			s->mr[0] = NULL;
		else
			vfail(&s->v, "the region named by the Send with "
			      "Invalidate no longer deregisters");
		break;
	}
	case C_DEST_HIGH:
		expect_quiet(s, "a Send from a QP that named this QP's number "
			     "plus bit 31 reached this QP's receive");
		check_unchanged(s, "receive buffer", 0, 0, 0, 0);
		break;
	case C_FENCE:
		/* server_fence overwrote the source when the Send came */
		if (!s->fenced)
			vfail(&s->v, "the fenced Send did not arrive within "
			      "%d s", cfg.timeout_s);
		break;
	case C_DEREG_READ:
		/* deregistered mid-Read (run_case); the rest is unchanged */
		check_unchanged(s, "guard around the Read source", PAGE,
				PAGE + BIG_LEN, 0, 0);
		break;
	case C_READ_LOCAL_DEREG:
		/* only read: all of it unchanged */
		check_unchanged(s, "the Read source and its guard", 0, 0, 0, 0);
		break;
	case C_DEREG_BUSY:
		/* whatever arrived lies inside the target */
		check_unchanged(s, "guard around the target", PAGE,
				PAGE + BIG_LEN, 0, 0);
		break;
	case C_UNSOLICITED:
	case C_SOLICITED:
		server_solicited(s);
		break;
	case C_ZERO_LEN: {
		int rc = poll_one(s->cq, &wc, deadline());

		if (rc < 0)
			die("ibv_poll_cq failed");
		if (rc == 0)
			vfail(&s->v, "the Write with Immediate of 0 bytes did "
			      "not complete its receive within %d s",
			      cfg.timeout_s);
		else if (wc.status != IBV_WC_SUCCESS ||
			 wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
			 wc.byte_len != 0 || !(wc.wc_flags & IBV_WC_WITH_IMM) ||
			 be32toh(wc.imm_data) != 0x5a5a)
			vfail(&s->v, "receive completion %s, opcode %d, "
			      "byte_len %u, flags %#x, immediate %#x",
			      wc_name(wc.status), wc.opcode, wc.byte_len,
			      wc.wc_flags, be32toh(wc.imm_data));
		check_unchanged(s, "receive buffer", 0, 0, 0, 0);
		break;
	}
	case C_WR_BATCH: {
		/* the three Writes, 64 bytes each of pattern 7, at 256 */
		uint8_t want[3 * 64];

		fill(want, sizeof(want), key_of(s->n, 7));
		if (memcmp(s->buf + T_OFF + 256, want, sizeof(want)))
			vfail(&s->v, "the batch of three Writes did not land "
			      "whole (the target differs from what was sent)");
		check_unchanged(s, "the target outside the batch's bytes",
				T_OFF + 256, T_OFF + 256 + sizeof(want), 0, 0);
		break;
	}
	case C_SEND_AFTER:
	case C_SEND_AFTER2: {
		uint8_t want[64];
		int rc = poll_one(s->cq, &wc, deadline());

		fill(want, 64, key_of(s->n, 5));
		if (rc < 0)
			die("ibv_poll_cq failed");
		if (rc == 0)
			vfail(&s->v, "the Send did not arrive within %d s",
			      cfg.timeout_s);
		else if (wc.status != IBV_WC_SUCCESS || wc.byte_len != 64)
			vfail(&s->v, "receive completion %s, byte_len %u",
			      wc_name(wc.status), wc.byte_len);
		else if (memcmp(s->buf + V_OFF, want, 64))
			vfail(&s->v, "the receive holds other bytes than sent");
		break;
	}
	case C_POST_STATE: {
		/* the valid send carries pattern 13; the rejected ones 11, 12 */
		uint8_t want[3][64];
		bool got_valid = false;
		double dl = deadline();

		for (int i = 0; i < 3; i++)
			fill(want[i], 64, key_of(s->n, 11 + i));
		for (;;) {
			int rc = poll_one(s->cq, &wc, got_valid ?
					  quiet_deadline() : dl);
			if (rc < 0)
				die("ibv_poll_cq failed");
			if (rc == 0)
				break;
			if (wc.status != IBV_WC_SUCCESS) {
				vfail(&s->v, "receive completion status %s",
				      wc_name(wc.status));
				continue;
			}
			uint32_t i = (uint32_t)(wc.wr_id - 0x100);
			const uint8_t *b = s->buf + V_OFF + i * PAGE;

			if (i >= 4 || wc.byte_len != 64) {
				vfail(&s->v, "receive wr_id 0x%" PRIx64
				      " byte_len %u (want 64)", wc.wr_id,
				      wc.byte_len);
				continue;
			}
			if (!memcmp(b, want[2], 64)) {
				got_valid = true;
			} else if (!memcmp(b, want[0], 64) ||
				   !memcmp(b, want[1], 64)) {
				vnote(&s->v, "the send that ibv_post_send "
				      "rejected in %s arrived once the QP was "
				      "connected", memcmp(b, want[0], 64) ?
				      "INIT" : "RESET");
			} else {
				vfail(&s->v, "a receive holds data no send "
				      "carried");
			}
		}
		if (!got_valid)
			vfail(&s->v, "the valid send after RTS did not arrive "
			      "within %d s", cfg.timeout_s);
		break;
	}
	case C_SEND_LONG: {
		int rc = poll_one(s->cq, &wc, deadline());

		res[0] = UINT64_MAX; /* no completion */
		if (rc < 0)
			die("ibv_poll_cq failed");
		if (rc == 1) {
			res[0] = wc.status;
			res[1] = wc.byte_len;
			if (wc.status == IBV_WC_SUCCESS)
				vfail(&s->v, "the receive completed with "
				      "IBV_WC_SUCCESS (byte_len %u) for a "
				      "message longer than it", wc.byte_len);
		} else {
			int qs = query_state(s->qp);

			vnote(&s->v, "the receiver's receive never completed "
			      "(its QP is in %s)", qs < 0 ? "an unknown state" :
			      qps_name(qs));
		}
		/* the receive's own bytes may hold part of the message */
		check_unchanged(s, "receive buffer outside the receive", V_OFF,
				V_OFF + s->rlen, 0, 0);
		break;
	}
	}
}

/* ---------- the cases: client side ---------- */

/* A post that must fail: RC its return, BAD_OK whether bad_wr pointed at
 * the WR; NOBAD collects the names of those that did not set bad_wr. */
static void rejected(struct cs *s, const char *what, int rc, bool bad_ok,
		     char *nobad)
{
	if (!rc) {
		vfail(&s->v, "%s returned 0", what);
		return;
	}
	vmsg("case %d: %s: %s", s->n, what, strerror(rc));
	if (!bad_ok)
		snprintf(nobad + strlen(nobad), 128 - strlen(nobad), "%s%s",
			 *nobad ? ", " : "", what);
}

static void client_prepare(struct cs *s)
{
	struct ibv_send_wr *bad;
	int rc;

	size_t depth = (size_t)DEPTH_READS * 2 * D.mtu_bytes + PAGE;

	make_buf(s, s->n == C_READ_DEPTH && depth > L_ALLOC ? depth : L_ALLOC,
		 3);
	s->mr[0] = reg(s->buf, s->len, IBV_ACCESS_LOCAL_WRITE);
	if (s->n != C_POST_STATE) {
		cs_to_init(s);
		return;
	}
	/* post_in_reset_init: the QP is in RESET now. The rejected sends
	 * carry patterns 11 and 12, the valid one later 13. */
	fill(s->buf, 64, key_of(s->n, 11));
	fill(s->buf + 64, 64, key_of(s->n, 12));
	fill(s->buf + 128, 64, key_of(s->n, 13));
	memcpy(s->snap, s->buf, s->len);
	char nobad[128] = "";
	bool bad_ok;

	rc = post_send1(s->qp, 0x701, IBV_WR_SEND, s->buf, 64,
			s->mr[0]->lkey, 0, 0, &bad);
	rejected(s, "ibv_post_send in RESET", rc, bad != NULL, nobad);
	rc = post_recv1(s->qp, 0x702, s->buf + PAGE, 64, s->mr[0]->lkey,
			&bad_ok);
	rejected(s, "ibv_post_recv in RESET", rc, bad_ok, nobad);
	cs_to_init(s);
	rc = post_send1(s->qp, 0x703, IBV_WR_SEND, s->buf + 64, 64,
			s->mr[0]->lkey, 0, 0, &bad);
	rejected(s, "ibv_post_send in INIT", rc, bad != NULL, nobad);
	if (*nobad)
		vnote(&s->v, "bad_wr not set to the rejected WR by %s", nobad);
}

/* error_state_flush, after the Write with a wrong rkey was posted: any
 * error completion will do; then the QP must be in the error state and
 * flush what is posted. Returns the Write's completion status (-1: none). */
static int client_flush(struct cs *s)
{
	struct verdict keep = s->v;
	struct ibv_wc wc;
	int st, rc, rc2;

	st = expect_wc(s, 0x10, "RDMA Write with a wrong rkey",
		       IBV_WC_REM_ACCESS_ERR, -1);
	if (st < 0)
		return st;
	if (st == IBV_WC_SUCCESS) {
		vfail(&s->v, "no error completion, so no error state to test");
		return st;
	}
	if (st != IBV_WC_REM_ACCESS_ERR) {
		s->v = keep;
		vnote(&s->v, "the error completion was %s, not "
		      "IBV_WC_REM_ACCESS_ERR", wc_name(st));
	}

	double t0 = now_s();
	int qs = query_state(s->qp);

	while (qs != IBV_QPS_ERR && qs >= 0 && now_s() < t0 + 1.0) {
		usleep(10000);
		qs = query_state(s->qp);
	}
	if (qs < 0)
		vfail(&s->v, "ibv_query_qp: %s", strerror(-qs));
	else if (qs != IBV_QPS_ERR)
		vfail(&s->v, "after the error completion ibv_query_qp says %s, "
		      "want IBV_QPS_ERR", qps_name(qs));
	else if (now_s() > t0 + 0.005)
		vnote(&s->v, "the QP reached IBV_QPS_ERR only %.0f ms after "
		      "its error completion was polled",
		      (now_s() - t0) * 1000);

	/* a receive and a send posted now must both be flushed */
	rc = post_recv1(s->qp, 0x81, s->buf + PAGE, 64, s->mr[0]->lkey, NULL);
	if (rc)
		vfail(&s->v, "ibv_post_recv in the error state: %s",
		      strerror(rc));
	rc2 = post_send1(s->qp, 0x82, IBV_WR_SEND, s->buf, 64, s->mr[0]->lkey,
			 0, 0, NULL);
	if (rc2)
		vfail(&s->v, "ibv_post_send in the error state: %s",
		      strerror(rc2));

	bool want_r = !rc, want_s = !rc2;
	double dl = deadline();

	while (want_r || want_s) {
		int p = poll_one(s->cq, &wc, dl);

		if (p <= 0) {
			vfail(&s->v, "no flush completion for the %s within "
			      "%d s", want_r && want_s ? "receive and the send" :
			      want_r ? "receive" : "send", cfg.timeout_s);
			break;
		}
		bool is_r = wc.wr_id == 0x81 && want_r;
		bool is_s = wc.wr_id == 0x82 && want_s;

		if (!is_r && !is_s) {
			vfail(&s->v, "unexpected completion wr_id 0x%" PRIx64
			      " status %s", wc.wr_id, wc_name(wc.status));
			continue;
		}
		if (wc.status != IBV_WC_WR_FLUSH_ERR)
			vfail(&s->v, "the %s posted in the error state "
			      "completed with %s, want IBV_WC_WR_FLUSH_ERR",
			      is_r ? "receive" : "send", wc_name(wc.status));
		if (is_r)
			want_r = false;
		else
			want_s = false;
	}
	return st;
}

/* A scratch QP on the case's CQ, in RESET, for a case to move by hand;
 * PEER gets the server's address, PSN and LID, and QPN as its QP number. */
static struct ibv_qp *scratch_qp(struct cs *s, struct qp_info *peer,
				 uint32_t qpn)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(D.pd, &ia);

	if (!qp)
		die("ibv_create_qp: %s", strerror(errno));
	memset(peer, 0, sizeof(*peer));
	peer->qpn = qpn;
	peer->psn = (uint32_t)s->peer.f[1];
	peer->lid = (uint32_t)s->peer.f[2];
	memcpy(peer->gid, s->peer.gid, 16);
	return qp;
}

/* dest_qp_above_24_bits: a scratch QP names the server QP's number with
 * bit 31 set. Returns the Send's status if one was (wrongly) possible. */
static int client_dest_high(struct cs *s)
{
	struct qp_info peer;
	struct ibv_qp *qp = scratch_qp(s, &peer,
				       (uint32_t)s->peer.f[0] | 0x80000000u);
	int st = -1, rc;

	rc = qp_to_init(qp, cfg.ib_port, IBV_ACCESS_LOCAL_WRITE);
	if (rc)
		die("QP to INIT: %s", strerror(rc));
	rc = qp_to_rtr(qp, cfg.ib_port, (enum ibv_mtu)D.mtu, &peer,
		       D.dev.gid_idx, 1);
	if (!rc) {
		vfail(&s->v, "ibv_modify_qp to RTR accepted dest_qp 0x%08x",
		      peer.qpn);
		fill(s->buf, 64, key_of(s->n, 6));
		if (!qp_to_rts(qp, s->psn, 7, 1) &&
		    !post_send1(qp, 0x11, IBV_WR_SEND, s->buf, 64,
				s->mr[0]->lkey, 0, 0, NULL)) {
			struct ibv_wc wc;

			if (poll_one(s->cq, &wc, deadline()) == 1)
				st = wc.status;
		}
	} else {
		vmsg("case %d: RTR with dest_qp 0x%08x: %s", s->n, peer.qpn,
		     strerror(rc));
	}
	if (ibv_destroy_qp(qp))
		msg("warning: ibv_destroy_qp failed");
	return st;
}

/* dereg_mr_with_write_outstanding: a 4 MiB Write whose source MR goes away
 * right after the post. Any completion status will do; none is a failure. */
static int client_dereg_busy(struct cs *s)
{
	const uint64_t *t = s->peer.f;
	uint8_t *src = alloc_buf(BIG_LEN);
	struct ibv_mr *mr;
	int st, rc;

	memset(src, 0x5a, BIG_LEN);
	mr = reg(src, BIG_LEN, IBV_ACCESS_LOCAL_WRITE);
	rc = post_send1(s->qp, 0x10, IBV_WR_RDMA_WRITE, src, BIG_LEN, mr->lkey,
			t[3], (uint32_t)t[5], NULL);
	if (rc) {
		vfail(&s->v, "ibv_post_send: %s", strerror(rc));
		ibv_dereg_mr(mr);
		free(src);
		return -1;
	}
	rc = ibv_dereg_mr(mr);
	if (rc)
		vnote(&s->v, "ibv_dereg_mr with the Write outstanding: %s",
		      strerror(rc));
	struct ibv_wc wc;
	int p = poll_one(s->cq, &wc, deadline());

	st = -1;
	if (p < 0)
		die("ibv_poll_cq failed");
	if (p == 0) {
		vfail(&s->v, "no completion within %d s for the Write whose "
		      "source MR was deregistered", cfg.timeout_s);
	} else if (wc.wr_id != 0x10) {
		vfail(&s->v, "unexpected completion wr_id 0x%" PRIx64,
		      wc.wr_id);
	} else {
		st = (int)wc.status;
		vmsg("case %d: the Write completed with %s", s->n,
		     wc_name(st));
		if (st != IBV_WC_SUCCESS)
			vnote(&s->v, "the Write completed with %s",
			      wc_name(st));
	}
	if (rc)
		ibv_dereg_mr(mr);
	free(src);
	return st;
}

/* dereg_mr_with_read_outstanding (own false): a 4 MiB Read whose source MR
 * the server deregisters while it streams; any completion status will do.
 * read_into_deregistered_mr (own true): a 4 MiB Read whose own destination
 * MR the client deregisters right after posting it; it must complete with
 * IBV_WC_LOC_PROT_ERR. Either way, none within READ_DEREG_WAIT_S is a
 * failure. Returns the status (-1: none). */
static int client_read_dereg(struct cs *s, bool own)
{
	const uint64_t *t = s->peer.f;
	uint8_t *dst = alloc_buf(BIG_LEN);
	struct ibv_mr *mr = reg(dst, BIG_LEN, IBV_ACCESS_LOCAL_WRITE);
	const char *whose = own ? "destination MR was deregistered" :
				  "source MR the peer deregistered";
	struct ibv_wc wc;
	int st = -1, p, rc;

	rc = post_send1(s->qp, 0x10, IBV_WR_RDMA_READ, dst, BIG_LEN, mr->lkey,
			t[3], (uint32_t)t[5], NULL);
	if (own) {
		if (ibv_dereg_mr(mr))
			/* still registered: its answer may yet land there */
			die("ibv_dereg_mr of the Read's destination failed");
		mr = NULL;
	}
	if (rc) {
		vfail(&s->v, "ibv_post_send: %s", strerror(rc));
	} else {
		p = poll_one(s->cq, &wc, now_s() + READ_DEREG_WAIT_S);
		if (p < 0)
			die("ibv_poll_cq failed");
		if (p == 0) {
			vfail(&s->v, "no completion within %d s for the Read "
			      "whose %s", READ_DEREG_WAIT_S, whose);
		} else {
			st = (int)wc.status;
			vmsg("case %d: the Read completed with %s", s->n,
			     wc_name(st));
			if (!own)
				vnote(&s->v, "the Read completed with %s",
				      wc_name(st));
			else if (wc.wr_id != 0x10 || st != IBV_WC_LOC_PROT_ERR)
				vfail(&s->v, "the Read completed with %s "
				      "(wr_id %#llx), want IBV_WC_LOC_PROT_ERR",
				      wc_name(st),
				      (unsigned long long)wc.wr_id);
		}
	}
	if (mr)
		ibv_dereg_mr(mr);
	free(dst);
	return st;
}

/* reads_beyond_initiator_depth: DEPTH_READS Reads posted at once on a QP
 * that may have one outstanding; every one must complete, in order, with
 * the server's bytes. Returns the worst status (-1: a completion missing). */
static int client_read_depth(struct cs *s)
{
	const uint64_t *t = s->peer.f;
	uint32_t len = (uint32_t)t[4], stride = 2 * D.mtu_bytes;

	memset(s->buf, 0, s->len);
	for (uint32_t i = 0; i < DEPTH_READS; i++) {
		int rc = post_send1(s->qp, 0x40 + i, IBV_WR_RDMA_READ,
				    s->buf + i * stride, len, s->mr[0]->lkey,
				    t[3] + i * stride, (uint32_t)t[5], NULL);

		if (rc) {
			vfail(&s->v, "ibv_post_send of Read %u: %s", i,
			      strerror(rc));
			return -1;
		}
	}
	for (uint32_t i = 0; i < DEPTH_READS; i++) {
		struct ibv_wc wc;
		int p = poll_one(s->cq, &wc, deadline());

		if (p < 0)
			die("ibv_poll_cq failed");
		if (p == 0) {
			vfail(&s->v, "%u of %u Reads completed within %d s", i,
			      DEPTH_READS, cfg.timeout_s);
			return -1;
		}
		if (wc.wr_id != 0x40 + i || wc.status != IBV_WC_SUCCESS) {
			vfail(&s->v, "completion %u: wr_id 0x%" PRIx64 " %s "
			      "(want wr_id 0x%x IBV_WC_SUCCESS)", i, wc.wr_id,
			      wc_name(wc.status), 0x40 + i);
			return wc.status == IBV_WC_SUCCESS ? -1 : (int)wc.status;
		}
	}
	/* the server's buffer holds its pattern 1 from its start */
	uint8_t *want = alloc_buf(len);

	for (uint32_t i = 0; i < DEPTH_READS && !s->v.fail; i++) {
		/* fill()'s pattern goes by 8-byte word; stride is a multiple */
		fill(want, len, key_of(s->n, 1) + (uint64_t)i * stride / 8);
		if (memcmp(s->buf + i * stride, want, len))
			vfail(&s->v, "Read %u brought other bytes than the "
			      "server's", i);
	}
	/* nothing landed between or after the Reads' buffers */
	for (size_t at = 0; at < s->len && !s->v.fail; at++)
		if (at % stride >= len || at >= (size_t)DEPTH_READS * stride)
			if (s->buf[at])
				vfail(&s->v, "byte %zu, outside every Read's "
				      "buffer, changed", at);
	free(want);
	return IBV_WC_SUCCESS;
}

/* rd_atomic_above_device_max: a scratch QP asks for one more Read or
 * atomic in flight than the device says it supports. Returns 0 when both
 * were refused and the limits themselves accepted, else -1. */
static int client_rd_max(struct cs *s)
{
	struct ibv_device_attr da;
	struct qp_info peer;
	struct ibv_qp *qp;
	int rc, st = 0;

	if (ibv_query_device(D.dev.ctx, &da))
		die("ibv_query_device");
	if (da.max_qp_rd_atom >= 255 || da.max_qp_init_rd_atom >= 255) {
		vnote(&s->v, "the device allows 255 (a u8's most): nothing "
		      "above it to ask for");
		return 0;
	}
	/* a QP number the server does not use: the case's own QP is already
	 * the one local QP paired with the server's */
	qp = scratch_qp(s, &peer, UNUSED_QPN);
	rc = qp_to_init(qp, cfg.ib_port, IBV_ACCESS_LOCAL_WRITE |
			IBV_ACCESS_REMOTE_READ);
	if (rc)
		die("QP to INIT: %s", strerror(rc));
	rc = qp_to_rtr(qp, cfg.ib_port, (enum ibv_mtu)D.mtu, &peer,
		       D.dev.gid_idx, (uint8_t)(da.max_qp_rd_atom + 1));
	if (!rc) {
		vfail(&s->v, "RTR accepted max_dest_rd_atomic %d (the device's "
		      "max_qp_rd_atom is %d)", da.max_qp_rd_atom + 1,
		      da.max_qp_rd_atom);
		st = -1;
	} else {
		rc = qp_to_rtr(qp, cfg.ib_port, (enum ibv_mtu)D.mtu, &peer,
			       D.dev.gid_idx, (uint8_t)da.max_qp_rd_atom);
		if (rc) {
			vfail(&s->v, "RTR refused max_dest_rd_atomic %d, the "
			      "device's max_qp_rd_atom: %s",
			      da.max_qp_rd_atom, strerror(rc));
			st = -1;
		}
	}
	if (!st) {
		rc = qp_to_rts(qp, s->psn, 7,
			       (uint8_t)(da.max_qp_init_rd_atom + 1));
		if (!rc) {
			vfail(&s->v, "RTS accepted max_rd_atomic %d (the "
			      "device's max_qp_init_rd_atom is %d)",
			      da.max_qp_init_rd_atom + 1,
			      da.max_qp_init_rd_atom);
			st = -1;
		} else if ((rc = qp_to_rts(qp, s->psn, 7,
					   (uint8_t)da.max_qp_init_rd_atom))) {
			vfail(&s->v, "RTS refused max_rd_atomic %d, the "
			      "device's max_qp_init_rd_atom: %s",
			      da.max_qp_init_rd_atom, strerror(rc));
			st = -1;
		}
	}
	if (ibv_destroy_qp(qp))
		msg("warning: ibv_destroy_qp failed");
	return st;
}

/* state_transitions_checked: one modify_qp that must fail (WANT_OK false)
 * or succeed. Returns 0 when it did as it should. */
static int transition(struct cs *s, struct ibv_qp *qp, const char *what,
		      struct ibv_qp_attr *a, int mask, bool want_ok)
{
	int rc = ibv_modify_qp(qp, a, mask);

	vmsg("case %d: %s: %s", s->n, what, rc ? strerror(rc) : "accepted");
	if (!rc == want_ok)
		return 0;
	if (want_ok)
		vfail(&s->v, "%s refused: %s", what, strerror(rc));
	else
		vfail(&s->v, "%s accepted", what);
	return -1;
}

static int client_transitions(struct cs *s)
{
	struct qp_info peer;
	struct ibv_qp *qp = scratch_qp(s, &peer, UNUSED_QPN);
	struct ibv_qp_attr rts = {
		.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
		.rnr_retry = 7, .sq_psn = s->psn, .max_rd_atomic = 1,
	};
	int rts_mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
		       IBV_QP_MAX_QP_RD_ATOMIC;
	struct ibv_qp_attr init = { .qp_state = IBV_QPS_INIT };
	int bad = 0, rc;

	bad |= transition(s, qp, "RESET to RTS", &rts, rts_mask, false);
	rc = qp_to_init(qp, cfg.ib_port, IBV_ACCESS_LOCAL_WRITE);
	if (rc) {
		vfail(&s->v, "RESET to INIT refused: %s", strerror(rc));
		bad = -1;
		goto out;
	}
	bad |= transition(s, qp, "INIT to RTS", &rts, rts_mask, false);
	{
		struct ibv_qp_attr rtr = {
			.qp_state = IBV_QPS_RTR, .path_mtu = D.mtu,
			.rq_psn = peer.psn, .max_dest_rd_atomic = 1,
			.min_rnr_timer = 12,
		};

		bad |= transition(s, qp, "INIT to RTR without a destination "
				  "QP number", &rtr, IBV_QP_STATE |
				  IBV_QP_PATH_MTU | IBV_QP_RQ_PSN |
				  IBV_QP_MAX_DEST_RD_ATOMIC |
				  IBV_QP_MIN_RNR_TIMER, false);
	}
	rc = qp_to_rtr(qp, cfg.ib_port, (enum ibv_mtu)D.mtu, &peer,
		       D.dev.gid_idx, 1);
	if (rc) {
		vfail(&s->v, "INIT to RTR refused: %s", strerror(rc));
		bad = -1;
		goto out;
	}
	bad |= transition(s, qp, "RTR to RTS", &rts, rts_mask, true);
	bad |= transition(s, qp, "RTS to INIT", &init, IBV_QP_STATE, false);
out:
	if (ibv_destroy_qp(qp))
		msg("warning: ibv_destroy_qp failed");
	return bad ? -1 : 0;
}

/* query_qp_nothing_stale: one ibv_query_qp of QP, created with sq_sig_all
 * SIG_ALL, in state WHAT. Returns 0 when nothing stale was seen. */
static int query_clean(struct cs *s, struct ibv_qp *qp, int sig_all,
		       const char *what)
{
	const int all = IBV_QP_STATE | IBV_QP_CUR_STATE |
		IBV_QP_EN_SQD_ASYNC_NOTIFY | IBV_QP_ACCESS_FLAGS |
		IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_AV |
		IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
		IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
		IBV_QP_ALT_PATH | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN |
		IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_PATH_MIG_STATE |
		IBV_QP_CAP | IBV_QP_DEST_QPN;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	int bad = 0, rc;

	/* Poison: what the call leaves alone must not read as 0 by luck. */
	memset(&a, 0xa5, sizeof(a));
	memset(&ia, 0xa5, sizeof(ia));
	rc = ibv_query_qp(qp, &a, all, &ia);
	if (rc) {
		vfail(&s->v, "%s: ibv_query_qp: %s", what, strerror(rc));
		return -1;
	}
#define STALE(cond, fmt, ...) do { if (cond) { bad = -1; \
	vfail(&s->v, "%s: " fmt, what, __VA_ARGS__); } } while (0)
	STALE(a.qkey, "qkey 0x%x", a.qkey);
	STALE(a.pkey_index || a.alt_pkey_index, "pkey_index %u, alt %u",
	      a.pkey_index, a.alt_pkey_index);
	STALE(a.alt_port_num || a.alt_timeout, "alt_port_num %u alt_timeout %u",
	      a.alt_port_num, a.alt_timeout);
	/* (libibverbs does not copy en_sqd_async_notify back) */
	STALE(a.sq_draining, "sq_draining %u", a.sq_draining);
	/* (is_global may be set: rxe reports every address vector global) */
	STALE(a.alt_ah_attr.dlid || a.alt_ah_attr.sl ||
	      a.alt_ah_attr.src_path_bits || a.alt_ah_attr.static_rate ||
	      a.alt_ah_attr.port_num || a.alt_ah_attr.grh.hop_limit ||
	      a.alt_ah_attr.grh.traffic_class ||
	      a.alt_ah_attr.grh.flow_label || a.alt_ah_attr.grh.sgid_index,
	      "the alternate path's address vector is not zero (dlid 0x%x "
	      "sl %u port %u hop_limit %u)", a.alt_ah_attr.dlid,
	      a.alt_ah_attr.sl, a.alt_ah_attr.port_num,
	      a.alt_ah_attr.grh.hop_limit);
	STALE(a.ah_attr.sl || a.ah_attr.src_path_bits ||
	      a.ah_attr.static_rate, "ah_attr sl %u src_path_bits %u "
	      "static_rate %u", a.ah_attr.sl, a.ah_attr.src_path_bits,
	      a.ah_attr.static_rate);
	STALE(ia.sq_sig_all != sig_all, "sq_sig_all %d, created with %d",
	      ia.sq_sig_all, sig_all);
	STALE(ia.qp_type != IBV_QPT_RC, "qp_type %d", (int)ia.qp_type);
#undef STALE
	vmsg("case %d: %s: query clean: %s", s->n, what, bad ? "no" : "yes");
	return bad;
}

static int client_query(struct cs *s)
{
	int bad = 0;

	for (int sig_all = 0; sig_all <= 1; sig_all++) {
		struct ibv_qp_init_attr ia = {
			.send_cq = s->cq, .recv_cq = s->cq,
			.qp_type = IBV_QPT_RC, .sq_sig_all = sig_all,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4,
				 .max_send_sge = 1, .max_recv_sge = 1 },
		};
		struct ibv_qp *qp = ibv_create_qp(D.pd, &ia);
		struct qp_info peer;
		int rc;

		if (!qp)
			die("ibv_create_qp: %s", strerror(errno));
		memset(&peer, 0, sizeof(peer));
		peer.qpn = UNUSED_QPN;
		peer.psn = (uint32_t)s->peer.f[1];
		peer.lid = (uint32_t)s->peer.f[2];
		memcpy(peer.gid, s->peer.gid, 16);
		bad |= query_clean(s, qp, sig_all, "RESET");
		rc = qp_to_init(qp, cfg.ib_port, IBV_ACCESS_LOCAL_WRITE);
		if (rc) {
			vfail(&s->v, "RESET to INIT refused: %s", strerror(rc));
			bad = -1;
		} else {
			bad |= query_clean(s, qp, sig_all, "INIT");
			rc = qp_to_rtr(qp, cfg.ib_port, (enum ibv_mtu)D.mtu,
				       &peer, D.dev.gid_idx, 1);
			if (rc) {
				vfail(&s->v, "INIT to RTR refused: %s",
				      strerror(rc));
				bad = -1;
			} else {
				bad |= query_clean(s, qp, sig_all, "RTR");
			}
		}
		if (ibv_destroy_qp(qp))
			msg("warning: ibv_destroy_qp failed");
	}
	return bad ? -1 : 0;
}

/* unsupported_qp_type_errno: UD and UC QPs are made or refused with an
 * errno libc can name. */
static int client_qp_types(struct cs *s)
{
	static const struct {
		enum ibv_qp_type type;
		const char *name;
	} types[] = { { IBV_QPT_UD, "UD" }, { IBV_QPT_UC, "UC" } };
	int bad = 0;

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		struct ibv_qp_init_attr ia = {
			.send_cq = s->cq, .recv_cq = s->cq,
			.qp_type = types[i].type,
			.cap = { .max_send_wr = 4, .max_recv_wr = 4,
				 .max_send_sge = 1, .max_recv_sge = 1 },
		};
		struct ibv_qp *qp;

		errno = 0;
		qp = ibv_create_qp(D.pd, &ia);
		if (qp) {
			vmsg("case %d: a %s QP was created", s->n,
			     types[i].name);
			if (ibv_destroy_qp(qp))
				msg("warning: ibv_destroy_qp failed");
			continue;
		}
		vmsg("case %d: a %s QP was refused: %s (errno %d)", s->n,
		     types[i].name, strerror(errno), errno);
		/* 524 is the kernel's ENOTSUPP; libc has no name for it. */
		if (errno == 0 || errno >= 512) {
			vfail(&s->v, "a %s QP was refused with errno %d, "
			      "which user space cannot name", types[i].name,
			      errno);
			bad = -1;
		}
	}
	return bad;
}

/* uc_read_refused: a UC QP, brought to RTS towards a QP number the server
 * does not have, refuses a Read, a compare-and-swap and a fetch-and-add at
 * post time (verbs: UC has none) and accepts nothing of them. A device
 * without UC QPs skips the check (case unsupported_qp_type_errno covers
 * the refusal). Returns 0 or -1 (failed, reported). */
static int client_uc_read(struct cs *s)
{
	static const struct {
		enum ibv_wr_opcode op;
		const char *name;
	} ops[] = { { IBV_WR_RDMA_READ, "RDMA Read" },
		    { IBV_WR_ATOMIC_CMP_AND_SWP, "compare-and-swap" },
		    { IBV_WR_ATOMIC_FETCH_AND_ADD, "fetch-and-add" } };
	struct ibv_qp_init_attr ia = {
		.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_UC,
		.cap = { .max_send_wr = 4, .max_recv_wr = 4,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = (enum ibv_mtu)D.mtu,
		.dest_qp_num = ((uint32_t)s->peer.f[0] + 0x1000) & 0xffffff,
		.rq_psn = (uint32_t)s->peer.f[1],
		.ah_attr = { .port_num = (uint8_t)cfg.ib_port, .is_global = 1,
			     .grh = { .sgid_index = (uint8_t)D.dev.gid_idx,
				      .hop_limit = 64 } },
	};
	struct ibv_qp *qp = ibv_create_qp(D.pd, &ia);
	struct ibv_wc wc;
	int bad = 0, rc;

	if (!qp) {
		vmsg("case %d: no UC QP (%s): nothing to check", s->n,
		     strerror(errno));
		return 0;
	}
	memcpy(a.ah_attr.grh.dgid.raw, s->peer.gid, 16);
	rc = qp_to_init(qp, cfg.ib_port, IBV_ACCESS_LOCAL_WRITE |
			IBV_ACCESS_REMOTE_WRITE);
	if (!rc)
		rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV |
				   IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				   IBV_QP_RQ_PSN);
	if (!rc) {
		memset(&a, 0, sizeof(a));
		a.qp_state = IBV_QPS_RTS;
		a.sq_psn = s->psn;
		rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	}
	if (rc) {
		vfail(&s->v, "a UC QP to RTS: %s", strerror(rc));
		bad = -1;
	}
	for (size_t i = 0; !bad && i < sizeof(ops) / sizeof(ops[0]); i++) {
		struct ibv_sge sg = { (uintptr_t)s->buf, 8, s->mr[0]->lkey };
		struct ibv_send_wr w = {
			.wr_id = 0x20 + i, .sg_list = &sg, .num_sge = 1,
			.opcode = ops[i].op, .send_flags = IBV_SEND_SIGNALED,
		}, *badwr = NULL;

		if (ops[i].op == IBV_WR_RDMA_READ) {
			w.wr.rdma.remote_addr = (uintptr_t)s->buf;
			w.wr.rdma.rkey = s->mr[0]->rkey;
		} else {
			w.wr.atomic.remote_addr = (uintptr_t)s->buf;
			w.wr.atomic.rkey = s->mr[0]->rkey;
		}
		rc = ibv_post_send(qp, &w, &badwr);
		vmsg("case %d: a %s on a UC QP: %s", s->n, ops[i].name,
		     rc ? strerror(rc) : "accepted");
		if (rc != EINVAL) {
			vfail(&s->v, "a %s posted on a UC QP: %s, want %s",
			      ops[i].name, rc ? strerror(rc) : "accepted",
			      strerror(EINVAL));
			bad = -1;
		}
	}
	if (!bad && poll_one(s->cq, &wc, quiet_deadline()) == 1) {
		vfail(&s->v, "a completion (wr_id 0x%llx, %s) after the "
		      "refused posts", (unsigned long long)wc.wr_id,
		      wc_name(wc.status));
		bad = -1;
	}
	if (ibv_destroy_qp(qp))
		msg("warning: ibv_destroy_qp failed");
	return bad;
}

/* N signaled 64-byte Writes to the server's target, wr_ids FIRST on.
 * Returns 0 or -1 (failed, reported). */
static int post_writes(struct cs *s, int n, uint64_t first)
{
	const uint64_t *t = s->peer.f;

	for (int i = 0; i < n; i++) {
		int rc = post_send1(s->qp, first + (uint64_t)i,
				    IBV_WR_RDMA_WRITE, s->buf, 64,
				    s->mr[0]->lkey, t[3], (uint32_t)t[5], NULL);
		if (rc) {
			vfail(&s->v, "ibv_post_send: %s", strerror(rc));
			return -1;
		}
	}
	return 0;
}

/* Wait up to WAIT_S for IBV_EVENT_CQ_ERR on CQ: 1 when it came, 0 if
 * not. Other events (a port's, a GID change) are taken, acknowledged and
 * passed over. The context's async fd is made non-blocking. */
static int cq_err_event(struct ibv_cq *cq, double wait_s)
{
	struct ibv_async_event ev;
	struct ibv_context *ctx = D.dev.ctx;
	double dl = now_s() + wait_s;

	if (fcntl(ctx->async_fd, F_SETFL,
		  fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK) < 0)
		die("fcntl on the async event fd: %s", strerror(errno));
	for (;;) {
		double left = dl - now_s();
		struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };

		if (left <= 0)
			return 0;
		if (poll(&pfd, 1, (int)(left * 1000) + 1) < 0 && errno != EINTR)
			die("poll: %s", strerror(errno));
		if (ibv_get_async_event(ctx, &ev)) {
			if (errno != EAGAIN && errno != EINTR)
				die("ibv_get_async_event: %s", strerror(errno));
			continue;
		}
		bool ours = ev.event_type == IBV_EVENT_CQ_ERR &&
			    ev.element.cq == cq;

		if (!ours)
			vmsg("async event %s passed over",
			     ibv_event_type_str(ev.event_type));
		ibv_ack_async_event(&ev);
		if (ours)
			return 1;
	}
}

/* cq_overrun_raises_cq_err, the client: one Write more than its CQ holds,
 * then wait for the CQ's error event. Returns 0 when it came, -1 if not. */
static int client_cq_overrun(struct cs *s)
{
	int n = s->cq->cqe + 1, st = -1;

	if (n > 8) {
		vnote(&s->v, "the device made the CQ of 2 hold %d", s->cq->cqe);
		return -1;
	}
	if (post_writes(s, n, 0x10))
		return -1;
	if (cq_err_event(s->cq, cfg.timeout_s)) {
		vmsg("case %d: IBV_EVENT_CQ_ERR", s->n);
		st = 0;
	} else {
		vfail(&s->v, "no IBV_EVENT_CQ_ERR within %d s after %d Writes "
		      "into a CQ of %d", cfg.timeout_s, n, s->cq->cqe);
	}
	/* what was kept: informational only (verbs leaves the rest
	 * undefined once the CQ overran) */
	struct ibv_wc wc;
	int kept = 0;

	while (ibv_poll_cq(s->cq, 1, &wc) == 1)
		kept++;
	vmsg("case %d: %d completion(s) kept of %d", s->n, kept, n);
	return st;
}

/* Poll N successful Write completions, wr_ids FIRST on, in order.
 * Returns how many came right. */
static int expect_writes(struct cs *s, int n, uint64_t first)
{
	int ok = 0;

	for (int i = 0; i < n; i++) {
		char what[48];

		snprintf(what, sizeof(what), "Write %d of %d", i + 1, n);
		if (expect_wc(s, first + (uint64_t)i, what, IBV_WC_SUCCESS,
			      -1) == IBV_WC_SUCCESS)
			ok++;
	}
	return ok;
}

/* resize_cq_keeps_completions, the client. Returns 0 when every step held,
 * -1 if not. */
static int client_cq_resize(struct cs *s)
{
	int rc, small;

	/* Grow, then fill past the old size without polling. */
	rc = ibv_resize_cq(s->cq, 8);
	if (rc) {
		vfail(&s->v, "ibv_resize_cq(2 -> 8): %s", strerror(rc));
		return -1;
	}
	if (s->cq->cqe < 8) {
		vfail(&s->v, "ibv_resize_cq(8) left cqe %d", s->cq->cqe);
		return -1;
	}
	if (post_writes(s, 7, 0x10))
		return -1;
	if (cq_err_event(s->cq, 2.0)) {
		vfail(&s->v, "IBV_EVENT_CQ_ERR with 7 completions in a CQ "
		      "resized to %d", s->cq->cqe);
		return -1;
	}
	if (expect_writes(s, 7, 0x10) != 7)
		return -1;

	/* Three queued across the ring's end: shrink below them, then grow.
	 * (Three 64-byte Writes end well within 3 s, even emulated; were one
	 * late, the resize to 1 would be right to succeed and the case fail.) */
	if (post_writes(s, 3, 0x20))
		return -1;
	usleep(3000000);
	small = ibv_resize_cq(s->cq, 1);
	if (!small && s->cq->cqe < 3) {
		vfail(&s->v, "ibv_resize_cq(1) with 3 completions queued "
		      "succeeded with cqe %d", s->cq->cqe);
		return -1;
	}
	vmsg("case %d: resize to 1 with 3 queued: %s (cqe %d)", s->n,
	     small ? strerror(small) : "accepted", s->cq->cqe);
	rc = ibv_resize_cq(s->cq, 16);
	if (rc || s->cq->cqe < 16) {
		vfail(&s->v, "ibv_resize_cq(16) with 3 queued: %s, cqe %d",
		      rc ? strerror(rc) : "ok", s->cq->cqe);
		return -1;
	}
	return expect_writes(s, 3, 0x20) == 3 ? 0 : -1;
}

/* wr_batch_all_or_nothing: a batch of N Writes of 1 byte to the target's
 * byte 1024 on, the last built by SET (SGE list, inline, ...), the others
 * plain (so that a check the provider misses leaves them posted, which the
 * case sees). Returns what ibv_wr_complete (or 0 after ibv_wr_abort)
 * returned. */
static int wr_batch(struct cs *s, struct ibv_qp_ex *x, int n, bool abort,
		    void (*set)(struct cs *s, struct ibv_qp_ex *x))
{
	const uint64_t *t = s->peer.f;

	ibv_wr_start(x);
	for (int i = 0; i < n; i++) {
		x->wr_id = 0x100 + (uint64_t)i;
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(x, (uint32_t)t[5], t[3] + 1024 + (uint64_t)i);
		if (set && i == n - 1)
			set(s, x);
		else
			ibv_wr_set_sge(x, s->mr[0]->lkey,
				       (uintptr_t)s->buf + 4096, 1);
	}
	if (abort) {
		ibv_wr_abort(x);
		return 0;
	}
	return ibv_wr_complete(x);
}

static struct ibv_qp_cap wr_cap;

/* One SGE more than granted, a byte each. */
static void set_too_many_sges(struct cs *s, struct ibv_qp_ex *x)
{
	struct ibv_sge sg[64];
	size_t n = wr_cap.max_send_sge + 1;

	for (size_t i = 0; i < n && i < 64; i++)
		sg[i] = (struct ibv_sge){ (uintptr_t)s->buf + 4096 + i, 1,
					  s->mr[0]->lkey };
	ibv_wr_set_sge_list(x, n < 64 ? n : 64, sg);
}

/* One inline byte more than granted. */
static void set_too_much_inline(struct cs *s, struct ibv_qp_ex *x)
{
	ibv_wr_set_inline_data(x, s->buf + 4096, wr_cap.max_inline_data + 1);
}

/* wr_batch_all_or_nothing, the client. Returns 0 when every step held. */
static int client_wr_batch(struct cs *s)
{
	const uint64_t *t = s->peer.f;
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(s->qp);
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	uint8_t *src = s->buf;
	uint32_t lkey = s->mr[0]->lkey;
	int rc, st = 0;

	if (!x) {
		vfail(&s->v, "ibv_qp_to_qp_ex: NULL for a QP made with "
		      "send_ops_flags");
		return -1;
	}
	rc = ibv_query_qp(s->qp, &a, IBV_QP_CAP, &ia);
	if (rc)
		die("ibv_query_qp: %s", strerror(rc));
	wr_cap = ia.cap;

	/* Three Writes in one batch, 64 bytes each of pattern 7. */
	fill(src, 3 * 64, key_of(s->n, 7));
	struct ibv_sge two[2] = { { (uintptr_t)src, 32, lkey },
				  { (uintptr_t)src + 32, 32, lkey } };
	struct ibv_data_buf inl[2] = { { src + 64, 40 }, { src + 104, 24 } };

	ibv_wr_start(x);
	x->wr_flags = IBV_SEND_SIGNALED;
	x->wr_id = 0x10;
	ibv_wr_rdma_write(x, (uint32_t)t[5], t[3]);
	ibv_wr_set_sge_list(x, 2, two);
	x->wr_id = 0x11;
	ibv_wr_rdma_write(x, (uint32_t)t[5], t[3] + 64);
	ibv_wr_set_inline_data_list(x, 2, inl);
	/* copied when set: this must not reach the target */
	memset(src + 64, 0xa5, 64);
	x->wr_id = 0x12;
	ibv_wr_rdma_write(x, (uint32_t)t[5], t[3] + 128);
	ibv_wr_set_sge(x, lkey, (uintptr_t)src + 128, 64);
	rc = ibv_wr_complete(x);
	if (rc) {
		vfail(&s->v, "ibv_wr_complete of three Writes: %s",
		      strerror(rc));
		return -1;
	}
	for (uint64_t id = 0x10; id <= 0x12; id++)
		if (expect_wc(s, id, "batched Write", IBV_WC_SUCCESS, -1) !=
		    IBV_WC_SUCCESS)
			st = -1;

	/* Batches that must post nothing. */
	rc = wr_batch(s, x, (int)wr_cap.max_send_wr + 1, false, NULL);
	if (!rc)
		vfail(&s->v, "a batch of %u Writes, one more than the send "
		      "queue holds, was accepted", wr_cap.max_send_wr + 1);
	if (wr_cap.max_send_sge < 64 &&
	    !wr_batch(s, x, 2, false, set_too_many_sges))
		vfail(&s->v, "a Write with %u SGEs (%u granted) was accepted",
		      wr_cap.max_send_sge + 1, wr_cap.max_send_sge);
	if (wr_cap.max_inline_data < 4096 &&
	    !wr_batch(s, x, 2, false, set_too_much_inline))
		vfail(&s->v, "a Write with %u inline bytes (%u granted) was "
		      "accepted", wr_cap.max_inline_data + 1,
		      wr_cap.max_inline_data);
	wr_batch(s, x, 2, true, NULL);
	expect_quiet(s, "a refused or aborted batch posted a request");
	return s->v.fail ? -1 : st;
}

/* fenced_send_after_read, the client: a Read of the server's FENCE_LEN
 * bytes, then a fenced Send. Returns the Read's status (-1: none). */
static int client_fence(struct cs *s)
{
	const uint64_t *t = s->peer.f;
	uint8_t *dst = alloc_buf(FENCE_LEN);
	uint8_t *want = alloc_buf(FENCE_LEN);
	struct ibv_mr *mr = reg(dst, FENCE_LEN, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge sg = { (uintptr_t)s->buf, 64, s->mr[0]->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 0x20, .sg_list = &sg, .num_sge = 1,
		.opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED | IBV_SEND_FENCE,
	}, *bad = NULL;
	int st = -1, rc;

	memset(dst, 0, FENCE_LEN);
	fill(want, FENCE_LEN, key_of(s->n, 1));
	rc = post_send1(s->qp, 0x10, IBV_WR_RDMA_READ, dst, FENCE_LEN, mr->lkey,
			t[3], (uint32_t)t[5], NULL);
	if (!rc)
		rc = ibv_post_send(s->qp, &wr, &bad);
	if (rc) {
		vfail(&s->v, "ibv_post_send: %s", strerror(rc));
	} else {
		st = expect_wc(s, 0x10, "RDMA Read", IBV_WC_SUCCESS, -1);
		expect_wc(s, 0x20, "fenced Send", IBV_WC_SUCCESS, -1);
		if (st == IBV_WC_SUCCESS) {
			size_t first = FENCE_LEN;

			for (size_t i = 0; i < FENCE_LEN; i++)
				if (dst[i] != want[i]) {
					first = i;
					break;
				}
			if (first < FENCE_LEN)
				vfail(&s->v, "the Read holds bytes written "
				      "after the fenced Send arrived (first "
				      "at offset %zu of %u)", first, FENCE_LEN);
		}
	}
	ibv_dereg_mr(mr);
	free(dst);
	free(want);
	return st;
}

/* rnr_late_receive: the length of Send I */
static uint32_t rnr_len(int i)
{
	return rnr_sends[i].len ? rnr_sends[i].len : 3 * D.mtu_bytes + 7;
}

/* rnr_late_receive, the server: the client's Sends are on their way and
 * find no receive; post the receives late, then check what they got. */
static void server_rnr_late(struct cs *s)
{
	uint8_t *want = alloc_buf(L_ALLOC);
	struct ibv_wc wc;

	/* the client's buffer, as client_prepare fills it */
	fill(want, L_ALLOC, key_of(s->n, 3));
	usleep(RNR_WAIT_US);
	for (int i = 0; i < 3; i++) {
		int rc = post_recv1(s->qp, 0x300 + (uint64_t)i,
				    s->buf + (size_t)i * RNR_RECV, RNR_RECV,
				    s->mr[0]->lkey, NULL);
		if (rc)
			die("ibv_post_recv: %s", strerror(rc));
	}
	for (int i = 0; i < 3 && !s->v.fail; i++) {
		int rc = poll_one(s->cq, &wc, deadline());
		uint32_t len = rnr_len(i);

		if (rc < 0)
			die("ibv_poll_cq failed");
		if (rc == 0) {
			vfail(&s->v, "receive %d: no completion within %d s", i,
			      cfg.timeout_s);
			break;
		}
		if (wc.status != IBV_WC_SUCCESS || wc.wr_id != 0x300u + i ||
		    wc.byte_len != len) {
			vfail(&s->v, "receive %d: completion wr_id 0x%" PRIx64
			      " %s, %u bytes (want wr_id 0x%x, success, %u "
			      "bytes)", i, wc.wr_id, wc_name(wc.status),
			      wc.byte_len, 0x300 + i, len);
			break;
		}
		if (memcmp(s->buf + (size_t)i * RNR_RECV,
			   want + rnr_sends[i].off, len))
			vfail(&s->v, "receive %d: not the bytes its Send "
			      "carried", i);
	}
	free(want);
}

/* rnr_late_receive, the client: its Sends go out at once and must all
 * complete, successfully, once the server posts its receives. */
static int client_rnr_late(struct cs *s)
{
	int st = IBV_WC_SUCCESS;

	for (int i = 0; i < 3; i++) {
		int rc = post_send1(s->qp, 0x10 + (uint64_t)i, IBV_WR_SEND,
				    s->buf + rnr_sends[i].off, rnr_len(i),
				    s->mr[0]->lkey, 0, 0, NULL);
		if (rc) {
			vfail(&s->v, "ibv_post_send: %s", strerror(rc));
			return -1;
		}
	}
	for (int i = 0; i < 3 && st == IBV_WC_SUCCESS; i++)
		st = expect_wc(s, 0x10 + (uint64_t)i, "Send to a receiver "
			       "that posts late", IBV_WC_SUCCESS, -1);
	return st;
}

/* fenced_send_after_read, the server: the moment the Send arrives, the
 * Read's source gets other bytes (as a program reusing its buffer would). */
static void server_fence(struct cs *s)
{
	struct ibv_wc wc;
	int rc = poll_one(s->cq, &wc, deadline());

	if (rc < 0)
		die("ibv_poll_cq failed");
	if (rc == 0)
		return;
	fill(s->buf, FENCE_LEN, key_of(s->n, 2));
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != 0x200)
		vfail(&s->v, "receive completion %s (wr_id 0x%" PRIx64 ")",
		      wc_name(wc.status), wc.wr_id);
	s->fenced = true;
}

/* The client's operation. Its result goes to the server in DONE (f[0]: the
 * requester's completion status, UINT64_MAX: none). */
static void client_act(struct cs *s)
{
	const uint64_t *t = s->peer.f; /* address, length, rkey at 3, 4, 5 */
	uint64_t *res = s->me.f;
	int st = -1, rc;

	memset(res, 0, sizeof(s->me.f));
	switch (s->n) {
	case C_WRITE_PAST:
	case C_WRITE_STRADDLE:
	case C_WRITE_RKEY:
	case C_WRITE_NO_RW:
	case C_FLUSH:
		rc = post_send1(s->qp, 0x10, IBV_WR_RDMA_WRITE, s->buf,
				(uint32_t)t[4], s->mr[0]->lkey, t[3],
				(uint32_t)t[5], NULL);
		if (rc) {
			vfail(&s->v, "ibv_post_send: %s", strerror(rc));
			break;
		}
		if (s->n == C_FLUSH)
			st = client_flush(s);
		else
			st = expect_wc(s, 0x10, "RDMA Write",
				       IBV_WC_REM_ACCESS_ERR, -1);
		break;
	case C_READ_NO_RR:
	case C_READ_NO_RES:
		memcpy(s->snap, s->buf, s->len);
		rc = post_send1(s->qp, 0x10, IBV_WR_RDMA_READ, s->buf + 1024,
				(uint32_t)t[4], s->mr[0]->lkey, t[3],
				(uint32_t)t[5], NULL);
		if (rc) {
			vfail(&s->v, "ibv_post_send: %s", strerror(rc));
			break;
		}
		if (s->n == C_READ_NO_RR)
			st = expect_wc(s, 0x10, "RDMA Read",
				       IBV_WC_REM_ACCESS_ERR, -1);
		else
			st = expect_wc(s, 0x10, "RDMA Read from a QP with "
				       "max_dest_rd_atomic 0",
				       IBV_WC_REM_INV_REQ_ERR, -1);
		check_unchanged(s, "local read buffer", 0, 0, 0, 0);
		break;
	case C_READ_DEPTH:
		st = client_read_depth(s);
		break;
	case C_RD_MAX:
		st = client_rd_max(s);
		break;
	case C_TRANSITIONS:
		st = client_transitions(s);
		break;
	case C_QUERY:
		st = client_query(s);
		break;
	case C_QP_TYPES:
		st = client_qp_types(s);
		break;
	case C_UC_READ:
		st = client_uc_read(s);
		break;
	case C_RNR_LATE:
		st = client_rnr_late(s);
		break;
	case C_FENCE:
		st = client_fence(s);
		break;
	case C_CQ_OVERRUN:
		st = client_cq_overrun(s);
		break;
	case C_CQ_RESIZE:
		st = client_cq_resize(s);
		break;
	case C_WR_BATCH:
		st = client_wr_batch(s);
		break;
	case C_ZERO_LEN: {
		struct ibv_send_wr w = {
			.wr_id = 0x10, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
			.send_flags = IBV_SEND_SIGNALED,
			.imm_data = htobe32(0x5a5a),
			.wr.rdma = { .remote_addr = 0, .rkey = 0xdeadbeef },
		}, *bad = NULL;

		rc = ibv_post_send(s->qp, &w, &bad);
		if (rc) {
			vfail(&s->v, "ibv_post_send: %s", strerror(rc));
			break;
		}
		st = expect_wc(s, 0x10, "RDMA Write with Immediate of 0 bytes",
			       IBV_WC_SUCCESS, -1);
		if (st != IBV_WC_SUCCESS)
			break;
		/* then a plain Write and a Read, each of 0 bytes */
		static const struct {
			uint64_t id;
			enum ibv_wr_opcode op;
			const char *what;
		} zero[] = {
			{ 0x12, IBV_WR_RDMA_WRITE, "RDMA Write of 0 bytes" },
			{ 0x11, IBV_WR_RDMA_READ, "RDMA Read of 0 bytes" },
		};

		for (size_t i = 0; i < 2 && st == IBV_WC_SUCCESS; i++) {
			rc = post_send1(s->qp, zero[i].id, zero[i].op, NULL, 0,
					0, 0, 0xdeadbeef, NULL);
			if (rc) {
				vfail(&s->v, "ibv_post_send: %s", strerror(rc));
				st = -1;
				break;
			}
			st = expect_wc(s, zero[i].id, zero[i].what,
				       IBV_WC_SUCCESS, -1);
		}
		break;
	}
	case C_WRITE_IMM_NO_RECV:
		rc = post_send1(s->qp, 0x10, IBV_WR_RDMA_WRITE_WITH_IMM, s->buf,
				(uint32_t)t[4], s->mr[0]->lkey, t[3],
				(uint32_t)t[5], NULL);
		if (rc) {
			vfail(&s->v, "ibv_post_send: %s", strerror(rc));
			break;
		}
		st = expect_wc(s, 0x10, "RDMA Write with Immediate and no "
			       "receive posted, rnr_retry 0",
			       IBV_WC_RNR_RETRY_EXC_ERR, -1);
		break;
	case C_SEND_INV: {
		struct ibv_sge sg = { (uintptr_t)s->buf, 64, s->mr[0]->lkey };
		struct ibv_send_wr w = {
			.wr_id = 0x10, .sg_list = &sg, .num_sge = 1,
			.opcode = IBV_WR_SEND_WITH_INV,
			.send_flags = IBV_SEND_SIGNALED,
			.invalidate_rkey = (uint32_t)t[5],
		}, *bad = NULL;

		rc = ibv_post_send(s->qp, &w, &bad);
		if (rc) {
			vfail(&s->v, "ibv_post_send: %s", strerror(rc));
			break;
		}
		st = expect_wc(s, 0x10, "Send with Invalidate of an ordinary "
			       "region's key", IBV_WC_REM_INV_REQ_ERR, -1);
		break;
	}
	case C_SEND_LKEY:
		rc = post_send1(s->qp, 0x10, IBV_WR_SEND, s->buf, 256,
				wrong_key(s, s->mr[0]->lkey), 0, 0, NULL);
		if (rc) {
			vfail(&s->v, "ibv_post_send rejected the wrong lkey "
			      "at once (%s): verbs reports it as a completion "
			      "with IBV_WC_LOC_PROT_ERR", strerror(rc));
			break;
		}
		st = expect_wc(s, 0x10, "Send with a wrong lkey",
			       IBV_WC_LOC_PROT_ERR, -1);
		break;
	case C_POST_STATE: {
		struct ibv_wc wc;

		rc = post_send1(s->qp, 0x704, IBV_WR_SEND, s->buf + 128, 64,
				s->mr[0]->lkey, 0, 0, NULL);
		if (rc) {
			vfail(&s->v, "ibv_post_send in RTS: %s", strerror(rc));
			break;
		}
		/* sends rejected earlier must not complete now */
		double dl = deadline();
		bool seen = false;

		for (;;) {
			int p = poll_one(s->cq, &wc, seen ? quiet_deadline()
							   : dl);
			if (p < 0)
				die("ibv_poll_cq failed");
			if (p == 0)
				break;
			if (wc.wr_id == 0x704 && !seen) {
				seen = true;
				st = wc.status;
				if (wc.status != IBV_WC_SUCCESS)
					vfail(&s->v, "the valid send in RTS "
					      "completed with %s",
					      wc_name(wc.status));
			} else if (wc.wr_id == 0x701 || wc.wr_id == 0x703) {
				vnote(&s->v, "the send that ibv_post_send "
				      "rejected in %s completed later (%s)",
				      wc.wr_id == 0x701 ? "RESET" : "INIT",
				      wc_name(wc.status));
			} else {
				vfail(&s->v, "unexpected completion wr_id "
				      "0x%" PRIx64 " status %s", wc.wr_id,
				      wc_name(wc.status));
			}
		}
		if (!seen)
			vfail(&s->v, "no completion for the valid send in RTS "
			      "within %d s", cfg.timeout_s);
		break;
	}
	case C_DEST_HIGH:
		st = client_dest_high(s);
		break;
	case C_DEREG_BUSY:
		st = client_dereg_busy(s);
		break;
	case C_DEREG_READ:
	case C_READ_LOCAL_DEREG:
		st = client_read_dereg(s, s->n == C_READ_LOCAL_DEREG);
		break;
	case C_UNSOLICITED:
	case C_SOLICITED: {
		struct ibv_sge sg = { (uintptr_t)s->buf, 64, s->mr[0]->lkey };
		struct ibv_send_wr wr = {
			.wr_id = 0x10, .sg_list = &sg, .num_sge = 1,
			.opcode = IBV_WR_SEND,
			.send_flags = IBV_SEND_SIGNALED |
				      (s->n == C_SOLICITED ? IBV_SEND_SOLICITED : 0),
		}, *bad = NULL;

		rc = ibv_post_send(s->qp, &wr, &bad);
		if (rc) {
			vfail(&s->v, "ibv_post_send: %s", strerror(rc));
			break;
		}
		st = expect_wc(s, 0x10, "Send", IBV_WC_SUCCESS, -1);
		break;
	}
	case C_SEND_AFTER:
	case C_SEND_AFTER2:
		fill(s->buf, 64, key_of(s->n, 5));
		rc = post_send1(s->qp, 0x10, IBV_WR_SEND, s->buf, 64,
				s->mr[0]->lkey, 0, 0, NULL);
		if (rc) {
			vfail(&s->v, "ibv_post_send: %s", strerror(rc));
			break;
		}
		st = expect_wc(s, 0x10, "Send", IBV_WC_SUCCESS, -1);
		break;
	case C_SEND_LONG: {
		uint32_t len = 3 * D.mtu_bytes + 17;

		rc = post_send1(s->qp, 0x10, IBV_WR_SEND, s->buf, len,
				s->mr[0]->lkey, 0, 0, NULL);
		if (rc) {
			vfail(&s->v, "ibv_post_send: %s", strerror(rc));
			break;
		}
		/* judged with the receiver's result, in client_merge */
		struct ibv_wc wc;
		int p = poll_one(s->cq, &wc, deadline());

		if (p < 0)
			die("ibv_poll_cq failed");
		if (p == 0)
			vfail(&s->v, "no completion for the Send within %d s",
			      cfg.timeout_s);
		else
			st = wc.status;
		break;
	}
	}
	res[0] = st < 0 ? UINT64_MAX : (uint64_t)st;
}

/* The client's verdict given the server's RESULT. */
static void client_merge(struct cs *s, const struct wire *r)
{
	if (s->n != C_SEND_LONG)
		return;
	uint64_t snd = s->me.f[0], rcv = r->f[0];
	char rnone[64];

	snprintf(rnone, sizeof(rnone), "no completion within %d s",
		 cfg.timeout_s);
	const char *ss = snd == UINT64_MAX ? rnone : wc_name((int)snd);
	const char *rs = rcv == UINT64_MAX ? rnone : wc_name((int)rcv);

	if (rcv != IBV_WC_LOC_LEN_ERR && snd != IBV_WC_REM_INV_REQ_ERR)
		vfail(&s->v, "neither side reported the length error: requester "
		      "%s, receiver %s (want the receiver's "
		      "IBV_WC_LOC_LEN_ERR or the requester's "
		      "IBV_WC_REM_INV_REQ_ERR)", ss, rs);
	else if (snd == IBV_WC_SUCCESS)
		vnote(&s->v, "the requester's Send completed with "
		      "IBV_WC_SUCCESS; the receiver reported %s", rs);
	else if (rcv != IBV_WC_LOC_LEN_ERR)
		vnote(&s->v, "requester %s, receiver %s", ss, rs);
}

/* ---------- running one case ---------- */

static void on_alarm(int sig)
{
	static const char m[] = "Bail out! " PROG ": watchdog: no progress "
				"for too long (a verb or the peer is stuck)\n";
	(void)sig;
	if (write(1, m, sizeof(m) - 1) < 0)
		_exit(1);
	_exit(1);
}

static void print_line(const char *line, const char *notes, int n)
{
	printf("%s\n", line);
	if (notes && *notes)
		printf("# %d %s: note: %s\n", n, case_name[n], notes);
	fflush(stdout);
}

/* Returns true if the case passed. */
static bool run_case(int n)
{
	struct cs s;
	struct wire w;

	memset(&s, 0, sizeof(s));
	s.n = n;
	D.cur_case = n;
	alarm((unsigned)cfg.timeout_s * 8 + 60);

	cs_create(&s);
	if (D.is_server)
		server_prepare(&s);
	else
		client_prepare(&s);

	s.me.type = M_INFO;
	s.me.cas = (uint32_t)n;
	s.me.f[0] = s.qp->qp_num;
	s.me.f[1] = s.psn;
	s.me.f[2] = D.dev.port.lid;
	memcpy(s.me.gid, D.dev.gid.raw, 16);
	wire_send(&s.me);
	wire_recv(&s.peer, M_INFO);
	cs_connect(&s);
	vmsg("case %d: qpn 0x%06x psn 0x%06x -> peer qpn 0x%06" PRIx64,
	     n, s.qp->qp_num, s.psn, s.peer.f[0]);

	/* both connected before the client acts */
	memset(&w, 0, sizeof(w));
	w.type = M_SYNC;
	w.cas = (uint32_t)n;
	wire_send(&w);
	wire_recv(&w, M_SYNC);

	char line[3 * TEXT_LEN + 64];
	bool pass;

	if (D.is_server && n == C_FENCE)
		server_fence(&s);
	if (D.is_server && n == C_RNR_LATE)
		server_rnr_late(&s);
	if (D.is_server && n == C_DEREG_READ) {
		/* the client's Read is streaming now: take its source away */
		usleep(30000);
		if (ibv_dereg_mr(s.mr[0]))
			msg("warning: ibv_dereg_mr failed");
		s.mr[0] = NULL;
	}
	if (!D.is_server) {
		struct wire r, fin;

		client_act(&s);
		memset(&w, 0, sizeof(w));
		w.type = M_DONE;
		w.cas = (uint32_t)n;
		w.f[0] = s.me.f[0];
		wire_send(&w);
		wire_recv(&r, M_RESULT);
		if (r.status) {
			/* the server's reasons after the client's */
			s.v.fail = true;
			vfail(&s.v, "%s", r.why);
		}
		if (r.note[0])
			vnote(&s.v, "%s", r.note);
		client_merge(&s, &r);
		pass = !s.v.fail;
		if (pass)
			snprintf(line, sizeof(line), "ok %d %s", n, case_name[n]);
		else
			snprintf(line, sizeof(line), "not ok %d %s: %s", n,
				 case_name[n], s.v.why);
		memset(&fin, 0, sizeof(fin));
		fin.type = M_FINAL;
		fin.cas = (uint32_t)n;
		fin.status = !pass;
		memcpy(fin.why, line, strnlen(line, TEXT_LEN - 1));
		memcpy(fin.note, s.v.note, TEXT_LEN);
		wire_send(&fin);
		print_line(line, s.v.note, n);
	} else {
		struct wire done, fin;

		wire_recv(&done, M_DONE);
		memset(s.me.f, 0, sizeof(s.me.f));
		server_check(&s, &done);
		s.me.type = M_RESULT;
		s.me.status = s.v.fail;
		memcpy(s.me.why, s.v.why, TEXT_LEN);
		memcpy(s.me.note, s.v.note, TEXT_LEN);
		wire_send(&s.me);
		wire_recv(&fin, M_FINAL);
		pass = !fin.status;
		print_line(fin.why, fin.note, n);
	}
	cs_destroy(&s);
	D.cur_case = 0;
	return pass;
}

/* ---------- main ---------- */

static void usage(FILE *f)
{
	fprintf(f,
"usage: " PROG " [options]              (server)\n"
"       " PROG " [options] SERVER_HOST  (client)\n"
"       " PROG " -l                     (list the cases)\n"
"  -d DEV    RDMA device (default: the first)\n"
"  -i PORT   its port (default 1)\n"
"  -g IDX    GID index (default: a RoCEv2 IPv4 one)\n"
"  -p PORT   TCP port (default " DEFAULT_PORT ")\n"
"  -t SEC    deadline of every completion wait (default 10)\n"
"  -c LIST   run only these cases, e.g. 1,3,8 (the client decides)\n"
"  -v        say more on stderr\n");
}

static int parse_int(const char *s, const char *what)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 0);
	if (errno || *end || end == s || v < 0 || v > 1000000) {
		msg("bad %s: %s", what, s);
		exit(2);
	}
	return (int)v;
}

/* One item of -c: bit N - 1 for case N. */
static uint32_t case_bit(const char *tok)
{
	int n = parse_int(tok, "case");

	if (n < 1 || n > NCASES) {
		msg("no case %d (1..%d)", n, NCASES);
		exit(2);
	}
	return 1u << (n - 1);
}

int main(int argc, char **argv)
{
	int c;

	die_context = case_context;
	while ((c = getopt(argc, argv, "d:i:g:p:t:c:lvh")) != -1) {
		switch (c) {
		case 'd': cfg.dev_name = optarg; break;
		case 'i': cfg.ib_port = parse_int(optarg, "port"); break;
		case 'g': cfg.gid_idx = parse_int(optarg, "GID index"); break;
		case 'p': cfg.tcp_port = optarg; break;
		case 't': cfg.timeout_s = parse_int(optarg, "timeout"); break;
		case 'c':
			cfg.cases = parse_list(optarg, case_bit,
					       "no case chosen");
			break;
		case 'l':
			for (int n = 1; n <= NCASES; n++)
				printf("%d %s\n", n, case_name[n]);
			return 0;
		case 'v': verbose = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	cfg.server = server_arg(argc, argv, usage);
	if (cfg.timeout_s < 1 || cfg.ib_port < 1) {
		msg("-t must be >= 1, -i >= 1");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	alarm((unsigned)cfg.timeout_s * 4 + 90);
	D.is_server = !cfg.server;
	setvbuf(stdout, NULL, _IOLBF, 0);

	setup_device();
	D.sock = D.is_server ? tcp_server(cfg.tcp_port, cfg.timeout_s) :
		 tcp_client(cfg.server, cfg.tcp_port,
			    cfg.timeout_s < 20 ? 20 : cfg.timeout_s);

	/* HELLO: the client's case list and seed, both sides' MTU. */
	struct wire h, ph;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	memset(&h, 0, sizeof(h));
	h.type = M_HELLO;
	h.f[0] = PROTO_VERSION;
	h.f[1] = cfg.cases;
	h.f[2] = mix64((uint64_t)ts.tv_sec * 1000000000ull +
		       (uint64_t)ts.tv_nsec) ^ (uint64_t)getpid();
	h.f[3] = D.dev.port.active_mtu;
	wire_send(&h);
	wire_recv(&ph, M_HELLO);
	if (ph.f[0] != PROTO_VERSION)
		die("the peer speaks another protocol version");
	if (D.is_server) {
		cfg.cases = (uint32_t)ph.f[1];
		D.seed = ph.f[2];
	} else {
		D.seed = h.f[2];
	}
	D.mtu = h.f[3] < ph.f[3] ? (uint32_t)h.f[3] : (uint32_t)ph.f[3];
	if (D.mtu < IBV_MTU_256 || D.mtu > IBV_MTU_4096)
		die("bad path MTU %u", D.mtu);
	D.mtu_bytes = 128u << D.mtu;

	int total = 0, failed = 0;

	for (int n = 1; n <= NCASES; n++)
		if (cfg.cases & (1u << (n - 1)))
			total++;
	printf("TAP version 13\n1..%d\n", total);
	for (int n = 1; n <= NCASES; n++) {
		if (!(cfg.cases & (1u << (n - 1))))
			continue;
		if (!run_case(n))
			failed++;
	}
	alarm(0);
	msg("%d of %d case(s) failed (%s side, path MTU %u)", failed, total,
	    D.is_server ? "server" : "client", D.mtu_bytes);
	ibv_dealloc_pd(D.pd);
	ibv_close_device(D.dev.ctx);
	close(D.sock);
	return failed ? 1 : 0;
}
