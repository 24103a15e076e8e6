// SPDX-License-Identifier: GPL-2.0
/*
 * mr-integrity: end-to-end data-integrity test for an RDMA device over RC,
 * using only the public libibverbs API.
 *
 *   mr-integrity [options]              server
 *   mr-integrity [options] SERVER_HOST  client
 *
 * The two sides exchange their QP numbers, PSNs, GIDs and the address and
 * rkey of their target buffers over TCP, connect one or more RC QPs and then
 * run every requested operation for every iteration on every QP. The side
 * that initiates alternates with the iteration (even: client, odd: server),
 * so both directions of the data path are covered.
 *
 * Each step (one iteration, one op, all QPs at once) goes:
 *   target:    pre-fill its windows (guard pattern around, the complement of
 *              the expected data inside), post receives, send READY (TCP);
 *   initiator: fill the source with the step's pattern, post the op on every
 *              QP, poll every completion (with a deadline), verify its local
 *              result bytes, send DONE (TCP);
 *   target:    poll its receive completions (deadline), verify every byte of
 *              its windows, send RESULT (TCP).
 * Every byte of data comes from a hash of (seed, qp, iteration, op, offset);
 * every guard byte from a hash of (seed, qp, iteration, op, buffer offset).
 *
 * With -x the same steps run over the extended verbs API: the CQ made by
 * ibv_create_cq_ex and polled with ibv_start_poll / ibv_end_poll and the
 * ibv_wc_read_* calls, the QPs made by ibv_create_qp_ex with send_ops_flags
 * and every request posted with ibv_wr_start, ibv_wr_<op>, ibv_wr_set_sge_list
 * or ibv_wr_set_inline_data_list, and ibv_wr_complete.
 *
 * Exit status: 0 all verified, 1 a failure (data, completion, timeout, peer),
 * 2 bad usage.
 */
#define _GNU_SOURCE
#include "common.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROG "mr-integrity"
const char prog_name[] = PROG;

enum op { OP_WRITE, OP_WRITE_IMM, OP_SEND, OP_SEND_IMM, OP_READ, OP_CAS,
	  OP_FAA, OP_COUNT };
static const char *const op_name[OP_COUNT] = {
	"write", "write_imm", "send", "send_imm", "read", "cas", "faa",
};
#define OPS_ATOMIC ((1u << OP_CAS) | (1u << OP_FAA))
#define OPS_ALL ((1u << OP_COUNT) - 1)

/* Buffer geometry (bytes). */
#define PAGE 4096u
#define GUARD 256u		/* guard bytes checked each side of a window */
#define OFF_SPAN (PAGE + 64u)	/* random start offsets: GUARD + [0, OFF_SPAN) */
#define PAGE_X_BASE (3 * PAGE)	/* the page-crossing class straddles this */
#define GAP_MAX 64u		/* gap between two SGEs of one message */
#define SLACK_MAX 64u		/* receive space past the end of a send */
#define MAX_SGE 3
#define RB_LEN 40u		/* atomic read-back: 16 before, the value, 16 after */

#define DEFAULT_PORT "18517"

struct config {
	const char *dev_name;
	int ib_port;
	int gid_idx; /* -1: pick one */
	const char *tcp_port;
	uint32_t iters;
	uint32_t max_size;
	uint32_t ops;
	bool ops_explicit;
	uint32_t nqp;
	uint64_t seed;
	bool seed_set;
	int timeout_s;
	bool use_event;
	bool ex; /* -x: the extended verbs API */
	int64_t corrupt_step; /* -X: self-test of the checker, -1 off */
	uint32_t overwrites; /* -O: Writes (Reads) of other bytes before each Write (Read) */
	const char *server;
};

static struct config cfg = {
	.ib_port = 1,
	.gid_idx = -1,
	.tcp_port = DEFAULT_PORT,
	.iters = 16,
	.max_size = 1u << 20,
	.ops = OPS_ALL,
	.nqp = 2,
	.timeout_s = 30,
	.corrupt_step = -1,
};

/* The parameters of the run and what the device can do. */
struct hello {
	uint32_t iters, max_size, ops, ops_explicit, nqp;
	uint64_t seed;
	uint32_t max_inline, max_sge, max_msg, mtu, atomic;
};

struct qpctx {
	struct ibv_qp *qp;
	uint8_t *lbuf, *rbuf, *vbuf; /* local work, remote target, receive */
	struct ibv_mr *lmr, *rmr, *vmr;
	struct qp_info me, peer;
};

struct ctx {
	struct rdma_dev dev;
	struct ibv_pd *pd;
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
	struct ibv_cq_ex *cqx; /* -x: the same CQ */
	bool cq_armed;
	struct qpctx *q;
	uint32_t nqp;
	size_t bufsz;
	struct hello mine, common;
	int sock;
	bool is_server;
	uint64_t bytes_verified;
	int64_t step; /* steps run so far */
};

static struct ctx C;

/* ---------- hashing: the patterns and the per-step plan ---------- */

enum salt { SALT_DATA = 1, SALT_GUARD_L, SALT_GUARD_R, SALT_GUARD_V,
	    SALT_PLAN, SALT_PSN };

static uint64_t step_key(uint32_t qp, uint32_t iter, uint32_t op,
			 enum salt salt)
{
	uint64_t w = ((uint64_t)(qp & 0xffff) << 48) |
		     ((uint64_t)(op & 0xff) << 40) |
		     ((uint64_t)(salt & 0xff) << 32) | iter;

	return mix64(C.common.seed ^ mix64(w));
}

/* Byte OFF of the stream KEY (offset: message offset for data, buffer
 * offset for guards). */
static inline uint8_t stream_byte(uint64_t key, uint64_t off)
{
	return (uint8_t)(mix64(key + (off >> 3)) >> ((off & 7) * 8));
}

/* buf[0..len) = stream KEY from offset OFF, complemented if INV. */
static void fill_stream(uint8_t *buf, uint32_t len, uint64_t key, uint64_t off,
			bool inv)
{
	uint64_t blk = UINT64_MAX, w = 0;
	uint8_t x = inv ? 0xff : 0;

	for (uint32_t i = 0; i < len; i++) {
		uint64_t o = off + i;

		if ((o >> 3) != blk) {
			blk = o >> 3;
			w = mix64(key + blk);
		}
		buf[i] = (uint8_t)(w >> ((o & 7) * 8)) ^ x;
	}
}

struct rng { uint64_t s; };

static uint64_t rnd(struct rng *r)
{
	r->s += 0x9e3779b97f4a7c15ull;
	return mix64(r->s);
}

/* A uniformly chosen value in [0, n), 0 when n is 0. */
static uint32_t rnd_below(struct rng *r, uint32_t n)
{
	return n ? (uint32_t)(rnd(r) % n) : 0;
}

/* One piece of a message in a buffer: [boff, boff + len) holds message
 * bytes [moff, moff + len). */
struct seg { uint32_t boff, len, moff; };

struct plan {
	uint32_t len;
	int nl, nr;		/* initiator's (local) and target's segments */
	struct seg l[MAX_SGE], r[MAX_SGE];
	uint32_t slack;		/* receive space after the last r segment */
	bool inl;
	uint32_t imm;
	/* atomics: target offset, local result offset, read-back offset */
	uint32_t aoff, loff, rboff;
	uint64_t init, cmp_add, swap, expect;
};

/* Message length classes, chosen in turn so that a few iterations see them
 * all: 0, 1, small odd, across a page boundary, around page multiples,
 * random, the maximum, medium odd. */
#define N_CLASSES 8

static uint32_t pick_len(struct rng *r, uint32_t cls, uint32_t max,
			 bool zero_ok, bool *page_x)
{
	static const uint32_t around[] = { PAGE - 1, PAGE + 1, 2 * PAGE + 1,
					   PAGE, 3 * PAGE - 3 };
	uint32_t len = 1;

	*page_x = false;
	switch (cls) {
	case 0: len = zero_ok ? 0 : 1; break;
	case 1: len = 1; break;
	case 2: len = 3 + 2 * rnd_below(r, 126); break;
	case 3: len = 2 + rnd_below(r, 2 * PAGE - 2); *page_x = true; break;
	case 4: len = around[rnd_below(r, 5)]; break;
	case 5: len = 1 + rnd_below(r, max); break;
	case 6: len = max; break;
	case 7: len = (256 + rnd_below(r, 65536)) | 1; break;
	}
	if (len > max)
		len = max;
	if (len < 2)
		*page_x = false;
	return len;
}

/* Split LEN message bytes into N segments starting at buffer offset START,
 * with a random gap between segments. Returns the number of segments. */
static int split(struct rng *r, struct seg *s, uint32_t len, int n,
		 uint32_t start, bool gaps)
{
	uint32_t cut[MAX_SGE + 1];

	if (len == 0)
		return 0;
	if ((uint32_t)n > len)
		n = 1;
	cut[0] = 0;
	cut[n] = len;
	/* strictly increasing cuts: no zero-length SGE */
	for (int i = 1; i < n; i++) {
		uint32_t lo = cut[i - 1] + 1, hi = len - (uint32_t)(n - i);

		cut[i] = lo + rnd_below(r, hi - lo + 1);
	}
	uint32_t b = start;
	for (int i = 0; i < n; i++) {
		s[i].boff = b;
		s[i].moff = cut[i];
		s[i].len = cut[i + 1] - cut[i];
		b += s[i].len + (gaps ? rnd_below(r, GAP_MAX) : 0);
	}
	return n;
}

static uint32_t pick_off(struct rng *r, bool page_x, uint32_t len)
{
	uint32_t x = rnd_below(r, OFF_SPAN);

	if (page_x) /* the message straddles PAGE_X_BASE */
		return PAGE_X_BASE - 1 - rnd_below(r, len - 1);
	return GUARD + x;
}

static int pick_nsge(struct rng *r)
{
	uint32_t v = rnd_below(r, 4);
	int n = v < 2 ? 1 : (int)v;

	return n > (int)C.common.max_sge ? (int)C.common.max_sge : n;
}

/* The plan of one step on one QP; both sides compute the same one. Every
 * random draw happens unconditionally so the sequence never diverges. */
static void make_plan(struct plan *p, uint32_t qp, uint32_t iter,
		      enum op op)
{
	struct rng r = { step_key(qp, iter, op, SALT_PLAN) };
	uint32_t cls = (iter + (iter >> 3) + qp + op) % N_CLASSES;
	bool page_x, zero_ok = op != OP_CAS && op != OP_FAA;
	int nl = pick_nsge(&r), nr = pick_nsge(&r);
	uint32_t v;

	memset(p, 0, sizeof(*p));
	p->len = pick_len(&r, cls, C.common.max_size, zero_ok, &page_x);
	/* which side straddles a page boundary */
	v = rnd_below(&r, 2);
	uint32_t loff = pick_off(&r, page_x && v == 0, p->len);
	uint32_t roff = pick_off(&r, page_x && v == 1, p->len);
	bool want_inline = rnd_below(&r, 2);
	p->imm = (uint32_t)rnd(&r);
	p->slack = rnd_below(&r, SLACK_MAX);
	p->init = rnd(&r);
	uint64_t a = rnd(&r), b = rnd(&r);
	bool hit = rnd_below(&r, 4) != 0;
	p->aoff = (GUARD + 16 + rnd_below(&r, OFF_SPAN)) & ~7u;
	p->loff = GUARD + rnd_below(&r, OFF_SPAN);
	if (rnd_below(&r, 2))
		p->loff &= ~7u;
	p->rboff = p->loff + 8 + 2 * GUARD + rnd_below(&r, 64);

	switch (op) {
	case OP_WRITE:
	case OP_WRITE_IMM:
	case OP_READ:
		p->nl = split(&r, p->l, p->len, nl, loff, true);
		p->nr = split(&r, p->r, p->len, 1, roff, false);
		if (p->nr == 0) { /* zero length: the window is all guard */
			p->nr = 1;
			p->r[0] = (struct seg){ roff, 0, 0 };
		}
		break;
	case OP_SEND:
	case OP_SEND_IMM:
		p->nl = split(&r, p->l, p->len, nl, loff, true);
		p->nr = split(&r, p->r, p->len, nr, roff, true);
		if (p->nr == 0 && p->slack) { /* room but no data */
			p->nr = 1;
			p->r[0] = (struct seg){ roff, 0, 0 };
		}
		break;
	case OP_CAS:
		p->cmp_add = hit ? p->init : p->init ^ (a | 1);
		p->swap = b;
		p->expect = hit ? p->swap : p->init;
		break;
	case OP_FAA:
		p->cmp_add = a;
		p->expect = p->init + a;
		break;
	default:
		break;
	}
	p->inl = want_inline && op <= OP_SEND_IMM && p->len > 0 &&
		 p->len <= C.common.max_inline;
}

/* End (exclusive) of a segment list, plus SLACK. */
static uint32_t segs_end(const struct seg *s, int n, uint32_t slack)
{
	return n ? s[n - 1].boff + s[n - 1].len + slack : 0;
}

/* ---------- window fill and verification ---------- */

struct where {
	uint32_t qp, iter;
	enum op op;
	const char *buf; /* which buffer, for the message */
};

/* Guard pattern over [lo, hi), the complement of the data in the segments
 * (so that any byte the op fails to write is caught). */
static void prefill(uint8_t *buf, uint32_t lo, uint32_t hi, const struct seg *s,
		    int n, uint64_t dkey, uint64_t gkey)
{
	fill_stream(buf + lo, hi - lo, gkey, lo, false);
	for (int i = 0; i < n; i++)
		fill_stream(buf + s[i].boff, s[i].len, dkey, s[i].moff, true);
}

static void fill_data(uint8_t *buf, const struct seg *s, int n, uint64_t dkey)
{
	for (int i = 0; i < n; i++)
		fill_stream(buf + s[i].boff, s[i].len, dkey, s[i].moff, false);
}

/* Check buf[lo, hi) byte by byte: inside the segments the data stream, in
 * between the guard stream. Returns the number of mismatches and reports
 * the first. DATA_BYTES is increased by the data bytes checked. */
static uint64_t verify(const uint8_t *buf, uint32_t lo, uint32_t hi,
		       const struct seg *s, int n, uint64_t dkey, uint64_t gkey,
		       const struct where *w, uint64_t *data_bytes)
{
	uint64_t bad = 0;
	uint32_t pos = lo;
	int i = 0;

	while (pos < hi) {
		bool in = i < n && pos >= s[i].boff;
		uint32_t end = in ? s[i].boff + s[i].len :
			       (i < n ? s[i].boff : hi);

		for (uint32_t b = pos; b < end; b++) {
			uint8_t want = in ? stream_byte(dkey, s[i].moff + (b - s[i].boff))
					  : stream_byte(gkey, b);

			if (buf[b] == want)
				continue;
			if (!bad) {
				if (in)
					msg("FAIL qp=%u iter=%u op=%s: %s: message byte %u "
					    "(buffer offset %u): got 0x%02x want 0x%02x",
					    w->qp, w->iter, op_name[w->op], w->buf,
					    s[i].moff + (b - s[i].boff), b, buf[b], want);
				else
					msg("FAIL qp=%u iter=%u op=%s: %s: guard byte at "
					    "buffer offset %u (%s the data) changed: got "
					    "0x%02x want 0x%02x", w->qp, w->iter,
					    op_name[w->op], w->buf, b,
					    i == 0 ? "before" : i < n ? "between" : "after",
					    buf[b], want);
			}
			bad++;
		}
		if (in) {
			*data_bytes += s[i].len;
			i++;
		}
		pos = end;
	}
	if (bad)
		msg("FAIL qp=%u iter=%u op=%s: %s: %" PRIu64
		    " bad bytes in window [%u, %u)", w->qp, w->iter,
		    op_name[w->op], w->buf, bad, lo, hi);
	return bad;
}

/* The GUARD bytes either side of buf[off, off + len) are intact. */
static uint64_t verify_guards(const uint8_t *buf, uint32_t off, uint32_t len,
			      uint64_t gkey, const struct where *w)
{
	uint64_t none = 0;

	return verify(buf, off - GUARD, off, NULL, 0, 0, gkey, w, &none) +
	       verify(buf, off + len, off + len + GUARD, NULL, 0, 0, gkey, w,
		      &none);
}

/* The u64 at buf[off] is WANT (it was BEFORE ahead of the atomic), and the
 * guards around it are intact. */
static uint64_t verify_u64(const uint8_t *buf, uint32_t off, uint64_t want,
			   uint64_t before, uint64_t gkey, const struct where *w)
{
	uint64_t v, bad = 0;

	memcpy(&v, buf + off, 8);
	if (v != want) {
		msg("FAIL qp=%u iter=%u op=%s: %s: 0x%016" PRIx64 ", want 0x%016"
		    PRIx64 " (0x%016" PRIx64 " before the op)", w->qp, w->iter,
		    op_name[w->op], w->buf, v, want, before);
		bad++;
	}
	return bad + verify_guards(buf, off, 8, gkey, w);
}

/* ---------- completions ---------- */

enum wr_kind { WR_OP = 1, WR_READBACK = 2, WR_RECV = 3, WR_OVERWRITE = 4 };
#define WRID(qp, kind) (((uint64_t)(qp) << 8) | (kind))

/* -x: completions through ibv_start_poll, ibv_next_poll and the
 * ibv_wc_read_* calls, as ibv_poll_cq would give them: each poll takes all
 * the CQ has (up to XQ_LEN) into a queue, and hands them out one by one. */
#define XQ_LEN 64
static struct {
	struct ibv_wc wc[XQ_LEN];
	unsigned head, len;
} xq;

static void read_wc_ex(struct ibv_cq_ex *cq, struct ibv_wc *wc)
{
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = cq->wr_id;
	wc->status = cq->status;
	wc->opcode = ibv_wc_read_opcode(cq);
	wc->vendor_err = ibv_wc_read_vendor_err(cq);
	wc->wc_flags = ibv_wc_read_wc_flags(cq);
	wc->byte_len = ibv_wc_read_byte_len(cq);
	wc->qp_num = ibv_wc_read_qp_num(cq);
	if (wc->wc_flags & IBV_WC_WITH_IMM)
		wc->imm_data = ibv_wc_read_imm_data(cq);
}

static int poll1_ex(struct ibv_cq_ex *cq, struct ibv_wc *wc)
{
	if (!xq.len) {
		struct ibv_poll_cq_attr attr = {};
		int rc = ibv_start_poll(cq, &attr);

		if (rc == ENOENT)
			return 0;
		if (rc)
			return -rc;
		xq.head = 0;
		do
			read_wc_ex(cq, &xq.wc[xq.len++]);
		while (xq.len < XQ_LEN && !(rc = ibv_next_poll(cq)));
		ibv_end_poll(cq);
		if (rc && rc != ENOENT)
			return -rc;
	}
	*wc = xq.wc[xq.head++];
	xq.len--;
	return 1;
}

static int poll1(void *arg, struct ibv_wc *wc)
{
	return cfg.ex ? poll1_ex(arg, wc) : ibv_poll_cq(arg, 1, wc);
}

/* Wait for one completion with the deadline, in polling or event mode.
 * Returns 1 with *wc filled, 0 on timeout, -1 on error. */
static int next_wc(struct ibv_wc *wc, double deadline)
{
	for (;;) {
		/* polling: until the deadline; events: once, then wait */
		int n = poll_until_fn(poll1, cfg.ex ? (void *)C.cqx :
						      (void *)C.cq, wc,
				      cfg.use_event ? 0 : deadline, 200, 50000);

		if (n < 0) {
			msg("FAIL %s: %d", cfg.ex ? "ibv_start_poll/ibv_next_poll" :
			    "ibv_poll_cq", n);
			return -1;
		}
		if (n == 1)
			return 1;
		double left = deadline - now_s();
		if (left <= 0)
			return 0;
		if (!C.cq_armed) {
			if (ibv_req_notify_cq(C.cq, 0)) {
				msg("FAIL ibv_req_notify_cq");
				return -1;
			}
			C.cq_armed = true;
			continue; /* poll once more: closes the race */
		}
		struct pollfd pfd = { .fd = C.ch->fd, .events = POLLIN };
		int ms = (int)(left * 1000) + 1;
		int rc = poll(&pfd, 1, ms);

		if (rc < 0 && errno != EINTR) {
			msg("FAIL poll on the completion channel: %s",
			    strerror(errno));
			return -1;
		}
		if (rc <= 0)
			continue;
		struct ibv_cq *ev_cq;
		void *ev_ctx;

		if (ibv_get_cq_event(C.ch, &ev_cq, &ev_ctx)) {
			msg("FAIL ibv_get_cq_event");
			return -1;
		}
		if (ev_cq != C.cq) {
			msg("FAIL event for an unknown CQ");
			return -1;
		}
		ibv_ack_cq_events(ev_cq, 1);
		C.cq_armed = false;
	}
}

/* Collect one completion of KIND from every QP; check status, opcode and
 * the QP. WCS[qp] receives each. Returns 0 or -1. */
static int collect(enum wr_kind kind, enum ibv_wc_opcode opc,
		   struct ibv_wc *wcs, uint32_t iter, enum op op)
{
	bool seen[C.nqp];
	uint32_t got = 0;

	memset(seen, 0, sizeof(seen));
	while (got < C.nqp) {
		struct ibv_wc wc;
		int rc = next_wc(&wc, now_s() + cfg.timeout_s);

		if (rc < 0)
			return -1;
		if (rc == 0) {
			msg("FAIL iter=%u op=%s: no %s completion within %d s "
			    "(%u of %u arrived)", iter, op_name[op],
			    kind == WR_RECV ? "receive" : "send-queue",
			    cfg.timeout_s, got, C.nqp);
			return -1;
		}
		uint32_t qi = (uint32_t)(wc.wr_id >> 8);
		if (qi >= C.nqp || (wc.wr_id & 0xff) != kind || seen[qi]) {
			msg("FAIL iter=%u op=%s: unexpected completion wr_id "
			    "0x%" PRIx64 " status %s", iter, op_name[op],
			    wc.wr_id, ibv_wc_status_str(wc.status));
			return -1;
		}
		if (wc.status != IBV_WC_SUCCESS) {
			msg("FAIL qp=%u iter=%u op=%s: completion status %s "
			    "(%d, vendor_err 0x%x)", qi, iter, op_name[op],
			    ibv_wc_status_str(wc.status), wc.status,
			    wc.vendor_err);
			return -1;
		}
		if (wc.opcode != opc) {
			msg("FAIL qp=%u iter=%u op=%s: completion opcode %d, "
			    "want %d", qi, iter, op_name[op], wc.opcode, opc);
			return -1;
		}
		if (wc.qp_num != C.q[qi].qp->qp_num) {
			msg("FAIL qp=%u iter=%u op=%s: completion for qp_num "
			    "0x%x, want 0x%x", qi, iter, op_name[op],
			    wc.qp_num, C.q[qi].qp->qp_num);
			return -1;
		}
		seen[qi] = true;
		wcs[qi] = wc;
		got++;
	}
	return 0;
}

/* ---------- TCP ---------- */

/* How long to wait for the peer over TCP: its step may wait for a few
 * rounds of completions, each with its own deadline. */
static double peer_deadline(void)
{
	return now_s() + (double)cfg.timeout_s * (2 * C.nqp + 4);
}

/* The longest any single phase may take: a step waits for a few rounds of
 * completions and for the peer, each bounded by -t. */
static unsigned watchdog_s(void)
{
	return (unsigned)cfg.timeout_s * (2 * (C.nqp ? C.nqp : 1) + 8);
}

#define MAGIC_HELLO 0x4d524954u /* "MRIT" */
#define MAGIC_STEP 0x4d525354u /* "MRST" */
#define PROTO_VERSION 1u
#define HELLO_LEN (4 * 2 + 4 * 5 + 8 + 4 * 5)
#define QPINFO_LEN (4 * 4 + 8 + 16)

static void send_hello(const struct hello *h, const struct qpctx *q, uint32_t n)
{
	size_t len = HELLO_LEN + (size_t)n * QPINFO_LEN;
	uint8_t *buf = malloc(len), *p = buf;

	if (!buf)
		die("out of memory");
	put32(&p, MAGIC_HELLO);
	put32(&p, PROTO_VERSION);
	put32(&p, h->iters);
	put32(&p, h->max_size);
	put32(&p, h->ops);
	put32(&p, h->ops_explicit);
	put32(&p, h->nqp);
	put64(&p, h->seed);
	put32(&p, h->max_inline);
	put32(&p, h->max_sge);
	put32(&p, h->max_msg);
	put32(&p, h->mtu);
	put32(&p, h->atomic);
	for (uint32_t i = 0; i < n; i++) {
		put32(&p, q[i].me.qpn);
		put32(&p, q[i].me.psn);
		put32(&p, q[i].me.lid);
		put32(&p, q[i].me.rkey);
		put64(&p, q[i].me.raddr);
		memcpy(p, q[i].me.gid, 16);
		p += 16;
	}
	if (io_full(C.sock, buf, len, true, now_s() + cfg.timeout_s))
		die("sending the connection parameters: %s", strerror(errno));
	free(buf);
}

static void recv_hello_head(struct hello *h)
{
	uint8_t buf[HELLO_LEN];
	const uint8_t *p = buf;

	if (io_full(C.sock, buf, sizeof(buf), false, now_s() + cfg.timeout_s))
		die("receiving the peer's parameters: %s", strerror(errno));
	if (get32(&p) != MAGIC_HELLO)
		die("the peer is not " PROG);
	if (get32(&p) != PROTO_VERSION)
		die("the peer speaks another protocol version");
	h->iters = get32(&p);
	h->max_size = get32(&p);
	h->ops = get32(&p);
	h->ops_explicit = get32(&p);
	h->nqp = get32(&p);
	h->seed = get64(&p);
	h->max_inline = get32(&p);
	h->max_sge = get32(&p);
	h->max_msg = get32(&p);
	h->mtu = get32(&p);
	h->atomic = get32(&p);
	if (h->nqp == 0 || h->nqp > 1024)
		die("the peer asks for %u QPs", h->nqp);
}

static void recv_hello_qps(struct qpctx *q, uint32_t n)
{
	uint8_t buf[QPINFO_LEN];

	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *p = buf;

		if (io_full(C.sock, buf, sizeof(buf), false,
			    now_s() + cfg.timeout_s))
			die("receiving the peer's QP %u: %s", i,
			    strerror(errno));
		q[i].peer.qpn = get32(&p);
		q[i].peer.psn = get32(&p);
		q[i].peer.lid = get32(&p);
		q[i].peer.rkey = get32(&p);
		q[i].peer.raddr = get64(&p);
		memcpy(q[i].peer.gid, p, 16);
	}
}

enum step_type { ST_READY = 1, ST_DONE, ST_RESULT, ST_GO };

struct step_msg {
	uint32_t type, iter, op, status;
	uint64_t bytes;
};

static int send_step(const struct step_msg *m)
{
	uint8_t buf[32], *p = buf;

	put32(&p, MAGIC_STEP);
	put32(&p, m->type);
	put32(&p, m->iter);
	put32(&p, m->op);
	put32(&p, m->status);
	put32(&p, 0);
	put64(&p, m->bytes);
	if (io_full(C.sock, buf, sizeof(buf), true, peer_deadline())) {
		msg("FAIL sending to the peer: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* Receive a step message of TYPE for (ITER, OP); -1 when it does not come
 * or the peer reports a failure. */
static int recv_step(struct step_msg *m, enum step_type type, uint32_t iter,
		     uint32_t op)
{
	uint8_t buf[32];
	const uint8_t *p = buf;

	if (io_full(C.sock, buf, sizeof(buf), false, peer_deadline())) {
		msg("FAIL iter=%u op=%s: waiting for the peer: %s", iter,
		    op < OP_COUNT ? op_name[op] : "-", strerror(errno));
		return -1;
	}
	uint32_t magic = get32(&p);
	m->type = get32(&p);
	m->iter = get32(&p);
	m->op = get32(&p);
	m->status = get32(&p);
	(void)get32(&p);
	m->bytes = get64(&p);
	if (magic != MAGIC_STEP || m->type != type || m->iter != iter ||
	    m->op != op) {
		msg("FAIL iter=%u op=%s: out of step with the peer (got "
		    "type %u iter %u op %u)", iter,
		    op < OP_COUNT ? op_name[op] : "-", m->type, m->iter, m->op);
		return -1;
	}
	if (m->status) {
		msg("FAIL iter=%u op=%s: the peer reports a failure (see "
		    "its output)", iter, op < OP_COUNT ? op_name[op] : "-");
		return -1;
	}
	return 0;
}

/* ---------- device and QPs ---------- */

/* The device, what it can do, its PD and completion channel. */
static void setup_device(void)
{
	struct ibv_device_attr da;

	open_device(&C.dev, cfg.dev_name, cfg.ib_port, cfg.gid_idx, &da);

	int sge = da.max_sge < da.max_sge_rd || !da.max_sge_rd ?
		  da.max_sge : da.max_sge_rd;
	C.mine.max_sge = sge < MAX_SGE ? (uint32_t)sge : MAX_SGE;
	C.mine.max_msg = C.dev.port.max_msg_sz;
	C.mine.mtu = C.dev.port.active_mtu;
	C.mine.atomic = da.atomic_cap != IBV_ATOMIC_NONE;
	vmsg("device %s port %d gid %d (%s), max_sge %d max_sge_rd %d "
	     "atomic_cap %d max_msg %u mtu %d", dev_name(&C.dev),
	     cfg.ib_port, C.dev.gid_idx,
	     inet_ntop(AF_INET6, C.dev.gid.raw, (char[64]){0}, 64), da.max_sge,
	     da.max_sge_rd, da.atomic_cap, C.dev.port.max_msg_sz,
	     128 << C.dev.port.active_mtu);

	C.pd = ibv_alloc_pd(C.dev.ctx);
	if (!C.pd)
		die("ibv_alloc_pd");
	if (cfg.use_event) {
		C.ch = ibv_create_comp_channel(C.dev.ctx);
		if (!C.ch)
			die("ibv_create_comp_channel");
	}
}

/* -x: the QP of IA by ibv_create_qp_ex, for the ibv_wr_* calls of every
 * operation the run may use; IA's caps are updated as ibv_create_qp would. */
static struct ibv_qp *create_qp_ex(struct ibv_qp_init_attr *ia, bool atomic)
{
	struct ibv_qp_init_attr_ex ax = {
		.send_cq = ia->send_cq, .recv_cq = ia->recv_cq,
		.cap = ia->cap, .qp_type = ia->qp_type, .pd = C.pd,
		.comp_mask = IBV_QP_INIT_ATTR_PD |
			     IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE |
				  IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
				  IBV_QP_EX_WITH_SEND |
				  IBV_QP_EX_WITH_SEND_WITH_IMM |
				  IBV_QP_EX_WITH_RDMA_READ |
				  (atomic ? IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
					    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD :
					    0),
	};
	struct ibv_qp *qp = ibv_create_qp_ex(C.dev.ctx, &ax);

	if (qp) {
		ia->cap = ax.cap;
		if (!ibv_qp_to_qp_ex(qp))
			die("ibv_create_qp_ex made a QP without ibv_qp_ex");
	}
	return qp;
}

/* Post WR (one request, no list) with ibv_post_send, or with -x through
 * the ibv_wr_* calls. Returns 0 or an errno. */
static int post_one(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;

	if (!cfg.ex)
		return ibv_post_send(qp, wr, &bad);

	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	uint32_t rkey = wr->wr.rdma.rkey;
	uint64_t raddr = wr->wr.rdma.remote_addr;

	ibv_wr_start(x);
	x->wr_id = wr->wr_id;
	x->wr_flags = wr->send_flags & ~(unsigned)IBV_SEND_INLINE;
	switch (wr->opcode) {
	case IBV_WR_RDMA_WRITE:
		ibv_wr_rdma_write(x, rkey, raddr);
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		ibv_wr_rdma_write_imm(x, rkey, raddr, wr->imm_data);
		break;
	case IBV_WR_SEND:
		ibv_wr_send(x);
		break;
	case IBV_WR_SEND_WITH_IMM:
		ibv_wr_send_imm(x, wr->imm_data);
		break;
	case IBV_WR_RDMA_READ:
		ibv_wr_rdma_read(x, rkey, raddr);
		break;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		ibv_wr_atomic_cmp_swp(x, wr->wr.atomic.rkey,
				      wr->wr.atomic.remote_addr,
				      wr->wr.atomic.compare_add,
				      wr->wr.atomic.swap);
		break;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		ibv_wr_atomic_fetch_add(x, wr->wr.atomic.rkey,
					wr->wr.atomic.remote_addr,
					wr->wr.atomic.compare_add);
		break;
	default:
		ibv_wr_abort(x);
		return EINVAL;
	}
	if (wr->send_flags & IBV_SEND_INLINE) {
		struct ibv_data_buf bufs[MAX_SGE];

		for (int i = 0; i < wr->num_sge && i < MAX_SGE; i++)
			bufs[i] = (struct ibv_data_buf){
				(void *)(uintptr_t)wr->sg_list[i].addr,
				wr->sg_list[i].length };
		ibv_wr_set_inline_data_list(x, (size_t)wr->num_sge, bufs);
	} else {
		ibv_wr_set_sge_list(x, (size_t)wr->num_sge, wr->sg_list);
	}
	return ibv_wr_complete(x);
}

/* CQ, buffers, MRs and QPs for N QPs with messages up to MAX_SIZE. */
static void create_qps(uint32_t n, uint32_t max_size, bool atomic)
{
	int cqe = (int)(8 * n + 8);

	C.nqp = n;
	if (cfg.ex) {
		struct ibv_cq_init_attr_ex ca = {
			.cqe = (uint32_t)cqe, .channel = C.ch,
			.wc_flags = IBV_WC_EX_WITH_BYTE_LEN |
				    IBV_WC_EX_WITH_IMM |
				    IBV_WC_EX_WITH_QP_NUM,
		};

		C.cqx = ibv_create_cq_ex(C.dev.ctx, &ca);
		if (!C.cqx)
			die("ibv_create_cq_ex(%d): %s", cqe, strerror(errno));
		C.cq = ibv_cq_ex_to_cq(C.cqx);
	} else {
		C.cq = ibv_create_cq(C.dev.ctx, cqe, NULL, C.ch, 0);
	}
	if (!C.cq)
		die("ibv_create_cq(%d)", cqe);
	if (cfg.use_event) {
		if (ibv_req_notify_cq(C.cq, 0))
			die("ibv_req_notify_cq");
		C.cq_armed = true;
	}
	C.bufsz = ((size_t)PAGE_X_BASE + max_size + MAX_SGE * GAP_MAX +
		   SLACK_MAX + 2 * GUARD + 2 * PAGE - 1) & ~(size_t)(PAGE - 1);
	C.q = calloc(n, sizeof(*C.q));
	if (!C.q)
		die("out of memory");

	uint32_t inl = UINT32_MAX;
	for (uint32_t i = 0; i < n; i++) {
		struct qpctx *q = &C.q[i];
		int racc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			   IBV_ACCESS_REMOTE_READ |
			   (atomic ? IBV_ACCESS_REMOTE_ATOMIC : 0);
		uint8_t **bufs[3] = { &q->lbuf, &q->rbuf, &q->vbuf };

		for (int b = 0; b < 3; b++) {
			if (posix_memalign((void **)bufs[b], PAGE, C.bufsz))
				die("out of memory");
			memset(*bufs[b], 0, C.bufsz);
		}
		q->lmr = ibv_reg_mr(C.pd, q->lbuf, C.bufsz, IBV_ACCESS_LOCAL_WRITE);
		q->rmr = ibv_reg_mr(C.pd, q->rbuf, C.bufsz, racc);
		q->vmr = ibv_reg_mr(C.pd, q->vbuf, C.bufsz, IBV_ACCESS_LOCAL_WRITE);
		if (!q->lmr || !q->rmr || !q->vmr)
			die("ibv_reg_mr (%zu bytes): %s", C.bufsz,
			    strerror(errno));

		/* Ask for inline data, less and less until the device agrees. */
		static const uint32_t try_inl[] = { 256, 128, 64, 32, 0 };
		for (unsigned t = 0; t < sizeof(try_inl) / sizeof(*try_inl); t++) {
			struct ibv_qp_init_attr ia = {
				.send_cq = C.cq, .recv_cq = C.cq,
				.qp_type = IBV_QPT_RC,
				.cap = { .max_send_wr = 4 + cfg.overwrites,
					 .max_recv_wr = 4,
					 .max_send_sge = C.mine.max_sge,
					 .max_recv_sge = C.mine.max_sge,
					 .max_inline_data = try_inl[t] },
			};

			q->qp = cfg.ex ? create_qp_ex(&ia, atomic) :
					 ibv_create_qp(C.pd, &ia);
			if (q->qp) {
				if (ia.cap.max_inline_data < inl)
					inl = ia.cap.max_inline_data;
				break;
			}
		}
		if (!q->qp)
			die("ibv_create_qp: %s", strerror(errno));

		if (qp_to_init(q->qp, cfg.ib_port, IBV_ACCESS_REMOTE_WRITE |
			       IBV_ACCESS_REMOTE_READ |
			       (atomic ? IBV_ACCESS_REMOTE_ATOMIC : 0)))
			die("QP %u to INIT: %s", i, strerror(errno));

		q->me.qpn = q->qp->qp_num;
		/* Every other QP starts just below the 24-bit PSN wrap. */
		uint64_t h = mix64(cfg.seed ^ ((uint64_t)i << 8) ^
				   (C.is_server ? 0x5e : 0xc1));
		q->me.psn = (i & 1) ? (uint32_t)h & 0xffffff
				    : 0xffffff - (uint32_t)(h % 48);
		q->me.lid = C.dev.port.lid;
		q->me.rkey = q->rmr->rkey;
		q->me.raddr = (uintptr_t)q->rbuf;
		memcpy(q->me.gid, C.dev.gid.raw, 16);
		vmsg("qp %u: qpn 0x%06x psn 0x%06x rkey 0x%08x addr %p", i,
		     q->me.qpn, q->me.psn, q->me.rkey, (void *)q->rbuf);
	}
	C.mine.max_inline = inl;
}

static void connect_qps(void)
{
	enum ibv_mtu mtu = (enum ibv_mtu)C.common.mtu;
	/* -O with Reads: Reads in flight together, so that their answers can
	 * cross (8: MetaRoCE allows 16, rdma_rxe more). */
	uint8_t rd = cfg.overwrites && (C.common.ops & (1u << OP_READ)) ? 8 : 1;

	for (uint32_t i = 0; i < C.nqp; i++) {
		struct qpctx *q = &C.q[i];

		if (qp_to_rtr(q->qp, cfg.ib_port, mtu, &q->peer, C.dev.gid_idx, rd))
			die("QP %u to RTR: %s", i, strerror(errno));
		if (qp_to_rts(q->qp, q->me.psn, 6, rd))
			die("QP %u to RTS: %s", i, strerror(errno));
	}
}

/* ---------- one step ---------- */

static void to_sges(struct ibv_sge *sg, const struct seg *s, int n,
		    const uint8_t *base, uint32_t lkey, uint32_t extra_last)
{
	for (int i = 0; i < n; i++) {
		sg[i].addr = (uintptr_t)(base + s[i].boff);
		sg[i].length = s[i].len + (i == n - 1 ? extra_last : 0);
		sg[i].lkey = lkey;
	}
}

/* The four streams of one step on one QP: its data, and the guards of the
 * local work buffer, the remote target buffer and the receive buffer. */
struct keys { uint64_t data, gl, gr, gv; };

static struct keys keys_of(uint32_t qp, uint32_t iter, enum op op)
{
	return (struct keys){
		step_key(qp, iter, op, SALT_DATA),
		step_key(qp, iter, op, SALT_GUARD_L),
		step_key(qp, iter, op, SALT_GUARD_R),
		step_key(qp, iter, op, SALT_GUARD_V),
	};
}

static struct where W(uint32_t qp, uint32_t iter, enum op op, const char *b)
{
	return (struct where){ qp, iter, op, b };
}

/* Target side, before READY. */
static int target_prepare(uint32_t iter, enum op op, struct plan *pl)
{
	for (uint32_t i = 0; i < C.nqp; i++) {
		struct qpctx *q = &C.q[i];
		struct plan *p = &pl[i];
		const struct keys k = keys_of(i, iter, op);

		switch (op) {
		case OP_WRITE:
		case OP_WRITE_IMM:
		case OP_READ: {
			uint32_t lo = p->r[0].boff - GUARD;
			uint32_t hi = p->r[0].boff + p->len + GUARD;

			if (op == OP_READ) { /* the source */
				fill_stream(q->rbuf + lo, hi - lo, k.gr, lo, false);
				fill_data(q->rbuf, p->r, p->nr, k.data);
			} else {
				prefill(q->rbuf, lo, hi, p->r, p->nr, k.data, k.gr);
			}
			break;
		}
		case OP_SEND:
		case OP_SEND_IMM: {
			uint32_t lo = (p->nr ? p->r[0].boff : 0) - GUARD;
			uint32_t hi = segs_end(p->r, p->nr, p->slack) + GUARD;

			if (!p->nr)
				break;
			prefill(q->vbuf, lo, hi, p->r, p->nr, k.data, k.gv);
			break;
		}
		case OP_CAS:
		case OP_FAA: {
			uint32_t lo = p->aoff - GUARD, hi = p->aoff + 8 + GUARD;

			fill_stream(q->rbuf + lo, hi - lo, k.gr, lo, false);
			memcpy(q->rbuf + p->aoff, &p->init, 8);
			break;
		}
		default:
			break;
		}

		if (op == OP_SEND || op == OP_SEND_IMM || op == OP_WRITE_IMM) {
			struct ibv_sge sg[MAX_SGE];
			struct ibv_recv_wr wr = { .wr_id = WRID(i, WR_RECV),
						  .sg_list = sg }, *bad;

			if (op != OP_WRITE_IMM) {
				to_sges(sg, p->r, p->nr, q->vbuf, q->vmr->lkey,
					p->slack);
				wr.num_sge = p->nr;
			}
			int rc = ibv_post_recv(q->qp, &wr, &bad);

			if (rc) {
				msg("FAIL qp=%u iter=%u op=%s: ibv_post_recv: %s",
				    i, iter, op_name[op], strerror(rc));
				return -1;
			}
		}
	}
	return 0;
}

/* Target side, after DONE: completions and every byte. */
static int target_verify(uint32_t iter, enum op op, struct plan *pl,
			 uint64_t *bytes)
{
	uint64_t bad = 0;

	if (op == OP_SEND || op == OP_SEND_IMM || op == OP_WRITE_IMM) {
		struct ibv_wc wcs[C.nqp];

		if (collect(WR_RECV, op == OP_WRITE_IMM ?
			    IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV, wcs, iter, op))
			return -1;
		for (uint32_t i = 0; i < C.nqp; i++) {
			struct ibv_wc *wc = &wcs[i];
			bool want_imm = op != OP_SEND;

			if (wc->byte_len != pl[i].len) {
				msg("FAIL qp=%u iter=%u op=%s: byte_len %u, want %u",
				    i, iter, op_name[op], wc->byte_len, pl[i].len);
				bad++;
			}
			if (!!(wc->wc_flags & IBV_WC_WITH_IMM) != want_imm) {
				msg("FAIL qp=%u iter=%u op=%s: IBV_WC_WITH_IMM %s",
				    i, iter, op_name[op], want_imm ? "missing" :
				    "set on a plain send");
				bad++;
			} else if (want_imm && be32toh(wc->imm_data) != pl[i].imm) {
				msg("FAIL qp=%u iter=%u op=%s: imm_data 0x%08x, "
				    "want 0x%08x", i, iter, op_name[op],
				    be32toh(wc->imm_data), pl[i].imm);
				bad++;
			}
		}
	}

	if (C.step == cfg.corrupt_step) {
		/* -X: damage one byte of QP 0's window, as a bad transfer
		 * would; the checks below must catch it */
		struct plan *p = &pl[0];
		bool recv = op == OP_SEND || op == OP_SEND_IMM;
		uint8_t *b = recv ? C.q[0].vbuf : C.q[0].rbuf;
		uint32_t at = op >= OP_CAS ? p->aoff + 3 :
			      p->r[0].boff + p->r[0].len / 2;

		if (!recv || p->nr) {
			b[at] ^= 0x10;
			msg("note: -X: flipped a bit of byte %u of the %s buffer "
			    "of qp 0 at iter %u op %s", at,
			    recv ? "receive" : "target", iter, op_name[op]);
		}
	}

	for (uint32_t i = 0; i < C.nqp; i++) {
		struct qpctx *q = &C.q[i];
		struct plan *p = &pl[i];
		const struct keys k = keys_of(i, iter, op);
		struct where w;

		switch (op) {
		case OP_WRITE:
		case OP_WRITE_IMM:
		case OP_READ: { /* a read must leave its source alone */
			uint64_t dummy = 0;

			w = W(i, iter, op, op == OP_READ ? "read source (remote)" :
			      "write target (remote)");
			bad += verify(q->rbuf, p->r[0].boff - GUARD,
				      p->r[0].boff + p->len + GUARD, p->r, p->nr,
				      k.data, k.gr, &w, op == OP_READ ? &dummy : bytes);
			break;
		}
		case OP_SEND:
		case OP_SEND_IMM:
			if (!p->nr)
				break;
			w = W(i, iter, op, "receive buffer");
			bad += verify(q->vbuf, p->r[0].boff - GUARD,
				      segs_end(p->r, p->nr, p->slack) + GUARD,
				      p->r, p->nr, k.data, k.gv, &w, bytes);
			break;
		case OP_CAS:
		case OP_FAA:
			w = W(i, iter, op, "atomic target value");
			bad += verify_u64(q->rbuf, p->aoff, p->expect, p->init,
					  k.gr, &w);
			*bytes += 8;
			break;
		default:
			break;
		}
	}
	return bad ? -1 : 0;
}

/*
 * -O N: before a step's Write, N unsignaled Writes to the step's peer bytes
 * (all of them, or their last or first three quarters, in turn, so that
 * they overlap each other in part), each byte the step's data xor 0x5a
 * (neither the data nor the target's prefill, its complement). Their
 * source is q->vbuf, which the initiator does not use during a step. The
 * target then verifies as usual: a byte of an earlier Write that lands
 * after the step's own (a transport that places packets of different
 * messages in any order and lets a late one win) reads data ^ 0x5a there.
 */
/* The bytes [*lo, *hi) of a step's len that -O's n-th extra Write or Read
 * covers: all of them, the last three quarters, the first three quarters,
 * in turn, so that they overlap each other in part. */
static void overlap_range(uint32_t n, uint32_t len, uint32_t *lo, uint32_t *hi)
{
	*lo = n % 3 == 1 ? len / 4 : 0;
	*hi = n % 3 == 2 ? len - len / 4 : len;
}

static int overwrite_first(uint32_t i, uint32_t iter, enum op op,
			   const struct plan *p)
{
	struct qpctx *q = &C.q[i];
	uint32_t at = 0;

	for (int s = 0; s < p->nl; s++) {
		for (uint32_t b = 0; b < p->l[s].len; b++)
			q->vbuf[at + b] = q->lbuf[p->l[s].boff + b] ^ 0x5a;
		at += p->l[s].len;
	}
	for (uint32_t n = 0; n < cfg.overwrites; n++) {
		uint32_t lo, hi;

		overlap_range(n, p->len, &lo, &hi);
		struct ibv_sge sg = { (uintptr_t)(q->vbuf + lo), hi - lo,
				      q->vmr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = WRID(i, WR_OVERWRITE), .sg_list = &sg,
			.num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
		};
		int rc;

		wr.wr.rdma.remote_addr = q->peer.raddr + lo +
			(p->nr ? p->r[0].boff : 0);
		wr.wr.rdma.rkey = q->peer.rkey;
		rc = post_one(q->qp, &wr);
		if (rc) {
			msg("FAIL qp=%u iter=%u op=%s: ibv_post_send of overwrite "
			    "%u (bytes %u..%u): %s", i, iter, op_name[op], n, lo,
			    hi, strerror(rc));
			return -1;
		}
	}
	return 0;
}

/*
 * -O N with a Read into one local buffer: before the step's Read, N
 * unsignaled Reads into the same local bytes (all of them, or their last or
 * first three quarters, in turn) of the peer's bytes one further on (the
 * step's data shifted by a byte, and a guard byte: the peer's region has
 * GUARD bytes past the window). The local bytes then verify as usual: a
 * late packet of an earlier Read's answer that lands after the step's own
 * leaves shifted bytes there. A Read into several buffers is not given
 * them: MetaRoCE orders answers into one buffer only.
 */
static int overread_first(uint32_t i, uint32_t iter, const struct plan *p)
{
	struct qpctx *q = &C.q[i];

	for (uint32_t n = 0; n < cfg.overwrites; n++) {
		uint32_t lo, hi;

		overlap_range(n, p->len, &lo, &hi);
		struct ibv_sge sg = { (uintptr_t)(q->lbuf + p->l[0].boff + lo),
				      hi - lo, q->lmr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = WRID(i, WR_OVERWRITE), .sg_list = &sg,
			.num_sge = 1, .opcode = IBV_WR_RDMA_READ,
		};
		int rc;

		wr.wr.rdma.remote_addr = q->peer.raddr + 1 + lo +
			(p->nr ? p->r[0].boff : 0);
		wr.wr.rdma.rkey = q->peer.rkey;
		rc = post_one(q->qp, &wr);
		if (rc) {
			msg("FAIL qp=%u iter=%u op=read: ibv_post_send of "
			    "overread %u (bytes %u..%u): %s", i, iter, n, lo,
			    hi, strerror(rc));
			return -1;
		}
	}
	return 0;
}

/* Initiator side, after READY: post, complete, verify the local bytes. */
static int initiate(uint32_t iter, enum op op, struct plan *pl,
		    uint64_t *bytes)
{
	static const enum ibv_wr_opcode wr_op[OP_COUNT] = {
		IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND,
		IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_READ,
		IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD,
	};
	static const enum ibv_wc_opcode wc_op[OP_COUNT] = {
		IBV_WC_RDMA_WRITE, IBV_WC_RDMA_WRITE, IBV_WC_SEND, IBV_WC_SEND,
		IBV_WC_RDMA_READ, IBV_WC_COMP_SWAP, IBV_WC_FETCH_ADD,
	};
	struct ibv_wc wcs[C.nqp];
	uint64_t bad = 0;

	for (uint32_t i = 0; i < C.nqp; i++) {
		struct qpctx *q = &C.q[i];
		struct plan *p = &pl[i];
		const struct keys k = keys_of(i, iter, op);
		struct ibv_sge sg[MAX_SGE];
		struct ibv_send_wr wr = {
			.wr_id = WRID(i, WR_OP), .sg_list = sg,
			.opcode = wr_op[op], .send_flags = IBV_SEND_SIGNALED,
		};

		switch (op) {
		case OP_READ:
			if (p->nl)
				prefill(q->lbuf, p->l[0].boff - GUARD,
					segs_end(p->l, p->nl, 0) + GUARD, p->l,
					p->nl, k.data, k.gl);
			break;
		case OP_CAS:
		case OP_FAA:
			fill_stream(q->lbuf + p->loff - GUARD, 8 + 2 * GUARD, k.gl,
				    p->loff - GUARD, false);
			break;
		default:
			fill_data(q->lbuf, p->l, p->nl, k.data);
			break;
		}
		if ((op == OP_WRITE || op == OP_WRITE_IMM) && p->len &&
		    overwrite_first(i, iter, op, p))
			return -1;
		if (op == OP_READ && p->len && p->nl == 1 &&
		    overread_first(i, iter, p))
			return -1;

		switch (op) {
		case OP_CAS:
		case OP_FAA:
			sg[0] = (struct ibv_sge){ (uintptr_t)(q->lbuf + p->loff),
						  8, q->lmr->lkey };
			wr.num_sge = 1;
			wr.wr.atomic.remote_addr = q->peer.raddr + p->aoff;
			wr.wr.atomic.rkey = q->peer.rkey;
			wr.wr.atomic.compare_add = p->cmp_add;
			wr.wr.atomic.swap = p->swap;
			break;
		default:
			to_sges(sg, p->l, p->nl, q->lbuf, q->lmr->lkey, 0);
			wr.num_sge = p->nl;
			wr.wr.rdma.remote_addr = q->peer.raddr +
				(p->nr ? p->r[0].boff : 0);
			wr.wr.rdma.rkey = q->peer.rkey;
			if (op == OP_WRITE_IMM || op == OP_SEND_IMM)
				wr.imm_data = htobe32(p->imm);
			if (p->inl)
				wr.send_flags |= IBV_SEND_INLINE;
			break;
		}
		int rc = post_one(q->qp, &wr);

		if (rc) {
			msg("FAIL qp=%u iter=%u op=%s: ibv_post_send (len %u, "
			    "%d sge%s): %s", i, iter, op_name[op], p->len,
			    wr.num_sge, p->inl ? ", inline" : "", strerror(rc));
			return -1;
		}
		/* Inline data belongs to the WR once posted: scribble over the
		 * source so that a provider still reading it gets caught. */
		if (p->inl)
			for (int s = 0; s < p->nl; s++)
				memset(q->lbuf + p->l[s].boff, 0xa5, p->l[s].len);
	}

	if (collect(WR_OP, wc_op[op], wcs, iter, op))
		return -1;

	for (uint32_t i = 0; i < C.nqp; i++) {
		struct qpctx *q = &C.q[i];
		struct plan *p = &pl[i];
		const struct keys k = keys_of(i, iter, op);
		struct where w;

		if (op == OP_READ && p->nl) {
			w = W(i, iter, op, "read destination (local)");
			bad += verify(q->lbuf, p->l[0].boff - GUARD,
				      segs_end(p->l, p->nl, 0) + GUARD, p->l,
				      p->nl, k.data, k.gl, &w, bytes);
		} else if (op == OP_CAS || op == OP_FAA) {
			w = W(i, iter, op, "returned old value (local)");
			bad += verify_u64(q->lbuf, p->loff, p->init, p->init, k.gl,
					  &w);
			*bytes += 8;
		}
	}
	if (bad || (op != OP_CAS && op != OP_FAA))
		return bad ? -1 : 0;

	/* Atomics: read the value and 16 bytes either side back. */
	for (uint32_t i = 0; i < C.nqp; i++) {
		struct qpctx *q = &C.q[i];
		struct plan *p = &pl[i];
		const struct keys k = keys_of(i, iter, op);
		struct ibv_sge sg = { (uintptr_t)(q->lbuf + p->rboff), RB_LEN,
				      q->lmr->lkey };
		struct ibv_send_wr wr = {
			.wr_id = WRID(i, WR_READBACK), .sg_list = &sg,
			.num_sge = 1, .opcode = IBV_WR_RDMA_READ,
			.send_flags = IBV_SEND_SIGNALED,
		};

		fill_stream(q->lbuf + p->rboff - GUARD, RB_LEN + 2 * GUARD, k.gl,
			    p->rboff - GUARD, false);
		wr.wr.rdma.remote_addr = q->peer.raddr + p->aoff - 16;
		wr.wr.rdma.rkey = q->peer.rkey;
		int rc = post_one(q->qp, &wr);

		if (rc) {
			msg("FAIL qp=%u iter=%u op=%s: read-back post: %s", i,
			    iter, op_name[op], strerror(rc));
			return -1;
		}
	}
	if (collect(WR_READBACK, IBV_WC_RDMA_READ, wcs, iter, op))
		return -1;
	for (uint32_t i = 0; i < C.nqp; i++) {
		struct plan *p = &pl[i];
		const struct keys k = keys_of(i, iter, op);
		const uint8_t *rb = C.q[i].lbuf + p->rboff;
		struct where w = W(i, iter, op, "atomic read-back (local)");
		uint64_t v;

		bad += verify_guards(C.q[i].lbuf, p->rboff, RB_LEN, k.gl, &w);
		memcpy(&v, rb + 16, 8);
		if (v != p->expect) {
			msg("FAIL qp=%u iter=%u op=%s: value read back 0x%016"
			    PRIx64 ", want 0x%016" PRIx64 " (was 0x%016" PRIx64
			    ", operand 0x%016" PRIx64 ")", i, iter, op_name[op],
			    v, p->expect, p->init, p->cmp_add);
			bad++;
		}
		for (uint32_t b = 0; b < RB_LEN; b++) {
			uint32_t roff = p->aoff - 16 + b;

			if (b >= 16 && b < 24)
				continue;
			if (rb[b] != stream_byte(k.gr, roff)) {
				msg("FAIL qp=%u iter=%u op=%s: read back: remote "
				    "guard byte at value%+d changed: 0x%02x, want "
				    "0x%02x", i, iter, op_name[op], (int)b - 16,
				    rb[b], stream_byte(k.gr, roff));
				bad++;
				break;
			}
		}
		*bytes += RB_LEN;
	}
	return bad ? -1 : 0;
}

static int run_step(uint32_t iter, enum op op)
{
	struct plan pl[C.nqp];
	bool initiator = (iter & 1) == (C.is_server ? 1u : 0u);
	struct step_msg m = { .iter = iter, .op = op };
	uint64_t bytes = 0;
	int rc;

	/* Whatever blocks (a verb stuck in a driver included) ends the run. */
	alarm(watchdog_s());
	for (uint32_t i = 0; i < C.nqp; i++) {
		struct plan *p = &pl[i];

		make_plan(p, i, iter, op);
		if (op == OP_CAS || op == OP_FAA)
			vmsg("iter %u %s qp %u: %s target offset %u, result "
			     "offset %u, old 0x%016" PRIx64 " operand 0x%016"
			     PRIx64 " -> 0x%016" PRIx64, iter, op_name[op], i,
			     initiator ? "initiator" : "target", p->aoff,
			     p->loff, p->init, p->cmp_add, p->expect);
		else
			vmsg("iter %u %s qp %u: %s len %u, sges %d local at %u "
			     "/ %d remote at %u (+%u slack)%s", iter,
			     op_name[op], i, initiator ? "initiator" : "target",
			     p->len, p->nl, p->nl ? p->l[0].boff : 0, p->nr,
			     p->nr ? p->r[0].boff : 0,
			     op == OP_SEND || op == OP_SEND_IMM ? p->slack : 0,
			     p->inl ? ", inline" : "");
	}

	if (initiator) {
		if (recv_step(&m, ST_READY, iter, op))
			return -1;
		rc = initiate(iter, op, pl, &bytes);
		m = (struct step_msg){ ST_DONE, iter, op, rc != 0, bytes };
		if (send_step(&m) || rc)
			return -1;
		if (recv_step(&m, ST_RESULT, iter, op))
			return -1;
		C.bytes_verified += bytes + m.bytes;
	} else {
		rc = target_prepare(iter, op, pl);
		m = (struct step_msg){ ST_READY, iter, op, rc != 0, 0 };
		if (send_step(&m) || rc)
			return -1;
		if (recv_step(&m, ST_DONE, iter, op))
			return -1;
		uint64_t peer_bytes = m.bytes;
		rc = target_verify(iter, op, pl, &bytes);
		m = (struct step_msg){ ST_RESULT, iter, op, rc != 0, bytes };
		if (send_step(&m) || rc)
			return -1;
		C.bytes_verified += bytes + peer_bytes;
	}
	return 0;
}

/* ---------- main ---------- */

static void on_alarm(int sig)
{
	static const char m[] = PROG ": FAIL watchdog: no progress for too "
				"long (a verb or the peer is stuck)\n";
	(void)sig;
	if (write(2, m, sizeof(m) - 1) < 0)
		_exit(1);
	_exit(1);
}

static void usage(FILE *f)
{
	fprintf(f,
"usage: " PROG " [options]              (server)\n"
"       " PROG " [options] SERVER_HOST  (client)\n"
"  -d DEV     RDMA device (default: the first one)\n"
"  -i PORT    device port (default 1)\n"
"  -g IDX     GID index (default: a RoCEv2 IPv4-mapped GID, else 0)\n"
"  -p PORT    TCP port (default " DEFAULT_PORT ")\n"
"  -n N       iterations (default 16)\n"
"  -s BYTES   maximum message size (default 1048576; K/M suffixes)\n"
"  -o OPS     comma-separated: write,write_imm,send,send_imm,read,cas,faa\n"
"             (default: all)\n"
"  -q N       number of QPs (default 2)\n"
"  -S SEED    seed of the patterns and sizes (default: from the clock)\n"
"  -t SEC     fail when a completion or the peer takes longer (default 30)\n"
"  -e         wait for completions on a completion channel\n"
"  -x         the extended verbs API: ibv_create_cq_ex and ibv_start_poll,\n"
"             ibv_create_qp_ex and the ibv_wr_* calls\n"
"  -v         verbose\n"
"  -O N       before each Write (and Write with Immediate), N Writes of\n"
"             other bytes to the same place, and before each Read into one\n"
"             buffer, N Reads of other bytes into it (max_rd_atomic 8):\n"
"             the step's bytes must win (give it to both sides)\n"
"  -X STEP    test the checker: the target side flips a bit in its window\n"
"             at step STEP (0, 1, ...: iterations x ops); the run must FAIL\n"
"The client's -n -s -o -q -S apply to both sides. Iterations alternate the\n"
"initiating side (even: client, odd: server).\n");
}

static uint32_t parse_u32(const char *s, const char *what, bool suffix)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (suffix && (*end == 'k' || *end == 'K'))
		v <<= 10, end++;
	else if (suffix && (*end == 'm' || *end == 'M'))
		v <<= 20, end++;
	if (errno || *end || end == s || v > UINT32_MAX) {
		msg("bad %s: %s", what, s);
		exit(2);
	}
	return (uint32_t)v;
}

/* One item of -o: its bit, or OPS_ALL. */
static uint32_t op_bits(const char *tok)
{
	int i;

	if (!strcmp(tok, "all"))
		return OPS_ALL;
	for (i = 0; i < OP_COUNT && strcmp(tok, op_name[i]); i++)
		;
	if (i == OP_COUNT) {
		msg("unknown op '%s'", tok);
		exit(2);
	}
	return 1u << i;
}

static const char *ops_str(uint32_t ops)
{
	static char buf[128];

	buf[0] = 0;
	for (int i = 0; i < OP_COUNT; i++)
		if (ops & (1u << i)) {
			if (buf[0])
				strcat(buf, ",");
			strcat(buf, op_name[i]);
		}
	return buf;
}

static uint32_t min32(uint32_t a, uint32_t b) { return a < b ? a : b; }

int main(int argc, char **argv)
{
	int c;

	while ((c = getopt(argc, argv, "d:i:g:p:n:s:o:q:S:t:evxhX:O:")) != -1) {
		switch (c) {
		case 'd': cfg.dev_name = optarg; break;
		case 'i': cfg.ib_port = (int)parse_u32(optarg, "port", false); break;
		case 'g': cfg.gid_idx = (int)parse_u32(optarg, "GID index", false); break;
		case 'p': cfg.tcp_port = optarg; break;
		case 'n': cfg.iters = parse_u32(optarg, "iterations", false); break;
		case 's': cfg.max_size = parse_u32(optarg, "size", true); break;
		case 'o':
			cfg.ops = parse_list(optarg, op_bits, "no ops given");
			cfg.ops_explicit = true;
			break;
		case 'q': cfg.nqp = parse_u32(optarg, "QP count", false); break;
		case 'S': {
			char *end;

			errno = 0;
			cfg.seed = strtoull(optarg, &end, 0);
			if (errno || *end || end == optarg) {
				msg("bad seed: %s", optarg);
				return 2;
			}
			cfg.seed_set = true;
			break;
		}
		case 't': cfg.timeout_s = (int)parse_u32(optarg, "timeout", false); break;
		case 'e': cfg.use_event = true; break;
		case 'x': cfg.ex = true; break;
		case 'X': cfg.corrupt_step = parse_u32(optarg, "step", false); break;
		case 'O': cfg.overwrites = parse_u32(optarg, "overwrites", false); break;
		case 'v': verbose = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	cfg.server = server_arg(argc, argv, usage);
	if (cfg.nqp < 1 || cfg.nqp > 1024 || cfg.max_size < 1 ||
	    cfg.max_size > (1u << 30) || cfg.timeout_s < 1 || cfg.ib_port < 1 ||
	    cfg.overwrites > 64) {
		msg("-q must be 1..1024, -s 1..1G, -t >= 1, -i >= 1, -O 0..64");
		return 2;
	}
	if (!cfg.seed_set) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		cfg.seed = mix64(((uint64_t)ts.tv_sec * 1000000000ull +
				  (uint64_t)ts.tv_nsec) ^ (uint64_t)getpid());
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	/* set-up: the server may wait up to max(60, -t) s for its client */
	alarm(watchdog_s() + 60);
	C.is_server = !cfg.server;
	setvbuf(stdout, NULL, _IOLBF, 0);

	setup_device();
	struct hello peer;

	if (!C.is_server) {
		C.mine.iters = cfg.iters;
		C.mine.max_size = min32(cfg.max_size, C.mine.max_msg);
		C.mine.ops = cfg.ops;
		C.mine.ops_explicit = cfg.ops_explicit;
		C.mine.nqp = cfg.nqp;
		C.mine.seed = cfg.seed;
		create_qps(cfg.nqp, C.mine.max_size, C.mine.atomic);
		C.sock = tcp_client(cfg.server, cfg.tcp_port, cfg.timeout_s);
		send_hello(&C.mine, C.q, C.nqp);
		recv_hello_head(&peer);
		if (peer.nqp != C.nqp)
			die("the server set up %u QPs, not %u", peer.nqp, C.nqp);
		recv_hello_qps(C.q, C.nqp);
	} else {
		C.sock = tcp_server(cfg.tcp_port, cfg.timeout_s);
		recv_hello_head(&peer);
		C.mine.iters = peer.iters;
		C.mine.max_size = min32(peer.max_size, C.mine.max_msg);
		C.mine.ops = peer.ops;
		C.mine.ops_explicit = peer.ops_explicit;
		C.mine.nqp = peer.nqp;
		C.mine.seed = peer.seed;
		cfg.seed = peer.seed;
		create_qps(peer.nqp, C.mine.max_size,
			   C.mine.atomic && peer.atomic);
		recv_hello_qps(C.q, C.nqp);
		send_hello(&C.mine, C.q, C.nqp);
	}

	/* What both sides can do. */
	C.common = C.mine;
	C.common.max_size = min32(C.mine.max_size, peer.max_size);
	C.common.max_inline = min32(C.mine.max_inline, peer.max_inline);
	C.common.max_sge = min32(C.mine.max_sge, peer.max_sge);
	C.common.mtu = min32(C.mine.mtu, peer.mtu);
	C.common.atomic = C.mine.atomic && peer.atomic;
	if ((C.common.ops & OPS_ATOMIC) && !C.common.atomic) {
		if (C.common.ops_explicit)
			die("atomics were asked for but %s device has none",
			    C.mine.atomic ? "the peer's" : "this");
		msg("note: no atomics on %s device: skipping cas,faa",
		    C.mine.atomic ? "the peer's" : "this");
		C.common.ops &= ~OPS_ATOMIC;
	}
	if (!C.common.ops)
		die("no op left to run");
	if (C.common.max_sge < 1)
		C.common.max_sge = 1;
	vmsg("common: max_size %u max_inline %u max_sge %u mtu %d ops %s "
	     "seed 0x%" PRIx64, C.common.max_size, C.common.max_inline,
	     C.common.max_sge, 128 << C.common.mtu, ops_str(C.common.ops),
	     C.common.seed);

	connect_qps();
	struct step_msg m = { ST_GO, 0, UINT32_MAX, 0, 0 };
	if (send_step(&m) || recv_step(&m, ST_GO, 0, UINT32_MAX))
		die("the peer did not get ready");

	for (uint32_t it = 0; it < C.common.iters; it++)
		for (int op = 0; op < OP_COUNT; op++) {
			if (!(C.common.ops & (1u << op)))
				continue;
			int rc = run_step(it, (enum op)op);

			C.step++;
			if (rc) {
				msg("FAIL at iteration %u op %s (qps=%u seed=0x%"
				    PRIx64 ")", it, op_name[op], C.nqp,
				    C.common.seed);
				return 1;
			}
		}

	alarm(watchdog_s());
	printf(PROG ": PASS ops=%s iterations=%u bytes verified=%" PRIu64
	       " qps=%u max_size=%u inline<=%u sge<=%u %s seed=0x%" PRIx64 "\n",
	       ops_str(C.common.ops), C.common.iters, C.bytes_verified, C.nqp,
	       C.common.max_size, C.common.max_inline, C.common.max_sge,
	       cfg.use_event ? "events" : "polling", C.common.seed);

	for (uint32_t i = 0; i < C.nqp; i++) {
		ibv_destroy_qp(C.q[i].qp);
		ibv_dereg_mr(C.q[i].lmr);
		ibv_dereg_mr(C.q[i].rmr);
		ibv_dereg_mr(C.q[i].vmr);
		free(C.q[i].lbuf);
		free(C.q[i].rbuf);
		free(C.q[i].vbuf);
	}
	free(C.q);
	ibv_destroy_cq(C.cq);
	if (C.ch)
		ibv_destroy_comp_channel(C.ch);
	ibv_dealloc_pd(C.pd);
	ibv_close_device(C.dev.ctx);
	close(C.sock);
	return 0;
}
