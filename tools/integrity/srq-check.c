// SPDX-License-Identifier: GPL-2.0
/*
 * srq-check: shared receive queues through the public libibverbs API, on
 * one device, with RC QPs connected to each other over the device's own
 * GID (loopback). Each check prints "PASS name" or "FAIL name: why"; the
 * exit status is the number of failures (0: all passed).
 *
 *   srq-check -d DEVICE [-g GID_INDEX] [-v]
 *   srq-check -l          (the names of the checks, in order)
 *
 * Senders A1..A3 have their own receive queues; receivers B1 and B2 take
 * their receives from one SRQ, B3 from a second one. The QPs, the first SRQ
 * and its receive buffers are in one PD; the second SRQ is in another: an
 * SRQ's receives are checked against the SRQ's PD, so a buffer of the QPs'
 * PD posted to it must be refused.
 * Last, B1 is destroyed and A1 sends to it: verbs answers nothing, so the
 * Send fails with RETRY_EXC_ERR once A1's patience has passed, not at once.
 */
#define _GNU_SOURCE
#include "common.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

const char prog_name[] = "srq-check";

#define SLOT 4096		/* bytes per receive buffer */
#define NSLOTS 512		/* receive buffers (reused round-robin) */
#define SRQ_WR 64		/* the first SRQ's size */
#define MSG 3000		/* bytes per message */

static const char *const checks[] = {
	"srq_caps",
	"post_recv_on_srq_qp_refused",
	"two_qps_share_receives",
	"limit_event",
	"limit_above_size_refused",
	"srq_full",
	"resize_keeps_receives",
	"srq_pd_governs_receive_buffers",
	"destroy_srq_in_use_refused",
	"send_to_destroyed_qp_times_out",
};

static struct rdma_dev dev;
static struct ibv_pd *pd_q, *pd_s;
static struct ibv_cq *scq, *rcq;
static struct ibv_srq *srq, *srq2;
static struct ibv_qp *qa[3], *qb[3];
static uint8_t *rbuf, *sbuf, *qbuf;
static struct ibv_mr *rmr, *smr, *qmr, *pdsmr;
static uint8_t *pdsbuf;
static int posted_total;
static uint32_t granted;	/* the first SRQ's max_wr as granted */

/* The payload of message ID: its id, then bytes derived from it. */
static void fill_msg(uint8_t *p, uint64_t id)
{
	for (size_t i = 0; i < MSG; i += 8) {
		uint64_t v = i ? mix64(id * 1000003 + i) : id;

		memcpy(p + i, &v, MSG - i < 8 ? MSG - i : 8);
	}
}

static bool msg_ok(const uint8_t *p, uint64_t id)
{
	uint8_t want[MSG];

	fill_msg(want, id);
	return !memcmp(p, want, MSG);
}

static struct ibv_qp *make_qp(struct ibv_srq *q)
{
	struct ibv_qp_init_attr a = {
		.send_cq = scq, .recv_cq = rcq, .srq = q,
		.cap = { .max_send_wr = 128, .max_recv_wr = q ? 0 : 16,
			 .max_send_sge = 1, .max_recv_sge = q ? 0 : 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(pd_q, &a);

	if (!qp)
		die("ibv_create_qp (srq %p): %s", (void *)q, strerror(errno));
	return qp;
}

static void connect_pair(struct ibv_qp *a, struct ibv_qp *b)
{
	if (connect_loopback(&dev, a, b, IBV_ACCESS_LOCAL_WRITE))
		die("connecting QPs %u and %u: %s", a->qp_num, b->qp_num,
		    strerror(errno));
}

static int post_srq(struct ibv_srq *q, int slot, struct ibv_mr *mr,
		    uint8_t *base)
{
	slot %= NSLOTS;
	struct ibv_sge sge = {
		.addr = (uintptr_t)(base + (size_t)slot * SLOT),
		.length = SLOT, .lkey = mr->lkey,
	};
	struct ibv_recv_wr wr = { .wr_id = 1000 + slot, .sg_list = &sge,
				  .num_sge = 1 }, *bad;

	return ibv_post_srq_recv(q, &wr, &bad);
}

/* Sends message ID from QP A, from the next of 32 send buffers in turn
 * (at most 32 sends are outstanding at once). */
static int send_msg(struct ibv_qp *a, uint64_t id)
{
	static unsigned next;
	uint8_t *p = sbuf + (next++ % 32) * SLOT;
	struct ibv_sge sge = { .addr = (uintptr_t)p, .length = MSG,
			       .lkey = smr->lkey };
	struct ibv_send_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;

	fill_msg(p, id);
	return ibv_post_send(a, &wr, &bad);
}

/* Waits for N send completions; the first failure's status, or -1 if one
 * is missing, or 0. */
static int sends_done(int n)
{
	struct ibv_wc wc;
	int bad = 0;

	for (int i = 0; i < n; i++) {
		if (poll_until(scq, &wc, now_s() + 10, 1000, 100000) != 1)
			return -1;
		if (wc.status != IBV_WC_SUCCESS && !bad)
			bad = wc.status;
	}
	return bad;
}

/* Receives N messages sent by send_msg: each a success on B1 or B2 (or
 * B3), its bytes in the buffer its wr_id names, in order per QP. NULL, or
 * what was wrong. */
static const char *receive_msgs(int n, char *why, size_t len)
{
	uint64_t last[3] = { 0, 0, 0 };
	struct ibv_wc wc;

	for (int i = 0; i < n; i++) {
		const uint8_t *base;
		int k, slot;
		uint64_t id;

		if (poll_until(rcq, &wc, now_s() + 10, 1000, 100000) != 1) {
			snprintf(why, len, "receive %d of %d missing", i + 1, n);
			return why;
		}
		if (wc.status != IBV_WC_SUCCESS || wc.byte_len != MSG) {
			snprintf(why, len, "receive status %d, %u bytes",
				 wc.status, wc.byte_len);
			return why;
		}
		for (k = 0; k < 3 && (!qb[k] || qb[k]->qp_num != wc.qp_num); k++)
			;
		slot = (int)wc.wr_id - 1000;
		if (k == 3 || slot < 0 || slot >= NSLOTS || (k == 2 && slot)) {
			snprintf(why, len, "completion of qp %u, wr_id %llu",
				 wc.qp_num, (unsigned long long)wc.wr_id);
			return why;
		}
		/* B3's receives (second SRQ) land in the buffer of PD S. */
		base = (k == 2 ? pdsbuf : rbuf) + (size_t)slot * SLOT;
		memcpy(&id, base, 8);
		if (!msg_ok(base, id) ||
		    (id >> 16) != (uint64_t)k + 1 || id <= last[k]) {
			snprintf(why, len,
				 "slot %d on qp %u holds message %#llx (after %#llx)",
				 slot, wc.qp_num, (unsigned long long)id,
				 (unsigned long long)last[k]);
			return why;
		}
		last[k] = id;
	}
	return NULL;
}

/* Sends N messages from A (message numbers FIRST..FIRST+N-1 of its
 * sender), waits for their send completions and checks their receives.
 * NULL, or what was wrong. */
static const char *take_n(struct ibv_qp *a, int first, int n, char *why,
			  size_t len);

/* Message number I of sender K (1-based): K in the high bits. */
static uint64_t msg_id(int k, int i)
{
	return ((uint64_t)k << 16) | (uint64_t)(i + 1);
}

static const char *take_n(struct ibv_qp *a, int first, int n, char *why,
			  size_t len)
{
	int rc = 0, st;

	for (int i = 0; i < n && !rc; i++)
		rc = send_msg(a, msg_id(a == qa[0] ? 1 : 2, first + i));
	if (rc) {
		snprintf(why, len, "sending: %s", strerror(rc));
		return why;
	}
	if ((st = sends_done(n))) {
		snprintf(why, len, "send status %d", st);
		return why;
	}
	return receive_msgs(n, why, len);
}

static bool limit_event(double wait_s)
{
	struct pollfd p = { .fd = dev.ctx->async_fd, .events = POLLIN };
	double end = now_s() + wait_s;

	while (now_s() < end) {
		struct ibv_async_event ev;
		bool hit;

		if (poll(&p, 1, 100) <= 0)
			continue;
		if (ibv_get_async_event(dev.ctx, &ev))
			continue;
		hit = ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED &&
		      ev.element.srq == srq;
		vmsg("async event %d", ev.event_type);
		ibv_ack_async_event(&ev);
		if (hit)
			return true;
	}
	return false;
}

int main(int argc, char **argv)
{
	struct ibv_device_attr da;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = SRQ_WR,
						  .max_sge = 1 } };
	struct ibv_srq_attr q;
	const char *name = NULL, *why = NULL;
	char buf[256];
	int gid, rc;

	check_tool_args(argc, argv, checks, sizeof(checks) / sizeof(*checks),
			&name, &gid);
	open_device(&dev, name, 1, gid, &da);
	pd_q = ibv_alloc_pd(dev.ctx);
	pd_s = ibv_alloc_pd(dev.ctx);
	scq = ibv_create_cq(dev.ctx, 512, NULL, NULL, 0);
	rcq = ibv_create_cq(dev.ctx, 512, NULL, NULL, 0);
	rbuf = calloc(NSLOTS, SLOT);
	sbuf = calloc(32, SLOT);
	qbuf = calloc(1, SLOT);
	if (!pd_q || !pd_s || !scq || !rcq || !rbuf || !sbuf || !qbuf)
		die("setting up: %s", strerror(errno));
	rmr = ibv_reg_mr(pd_q, rbuf, (size_t)NSLOTS * SLOT, IBV_ACCESS_LOCAL_WRITE);
	smr = ibv_reg_mr(pd_q, sbuf, 32 * SLOT, 0);
	qmr = ibv_reg_mr(pd_q, qbuf, SLOT, IBV_ACCESS_LOCAL_WRITE);
	pdsbuf = calloc(1, SLOT);
	pdsmr = pdsbuf ? ibv_reg_mr(pd_s, pdsbuf, SLOT, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!rmr || !smr || !qmr || !pdsmr)
		die("ibv_reg_mr: %s", strerror(errno));

	/* srq_caps */
	srq = ibv_create_srq(pd_q, &sa);
	if (!srq)
		die("ibv_create_srq: %s", strerror(errno));
	if (ibv_query_srq(srq, &q))
		check_result(checks[0], "ibv_query_srq: %s", strerror(errno));
	else if (da.max_srq < 1 || da.max_srq_wr < SRQ_WR || da.max_srq_sge < 1)
		check_result(checks[0], "device: max_srq %d, max_srq_wr %d, max_srq_sge %d",
			     da.max_srq, da.max_srq_wr, da.max_srq_sge);
	else if (q.max_wr < SRQ_WR || q.srq_limit != 0)
		check_result(checks[0], "query: max_wr %u, limit %u", q.max_wr,
			     q.srq_limit);
	else
		check_result(checks[0], NULL);
	granted = q.max_wr;
	sa.attr.max_wr = 8;
	srq2 = ibv_create_srq(pd_s, &sa);
	if (!srq2)
		die("ibv_create_srq (second): %s", strerror(errno));
	for (int k = 0; k < 3; k++) {
		qa[k] = make_qp(NULL);
		qb[k] = make_qp(k < 2 ? srq : srq2);
		connect_pair(qa[k], qb[k]);
	}

	/* post_recv_on_srq_qp_refused */
	{
		struct ibv_sge sge = { .addr = (uintptr_t)qbuf, .length = SLOT,
				       .lkey = qmr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 7, .sg_list = &sge,
					  .num_sge = 1 }, *bad;

		rc = ibv_post_recv(qb[0], &wr, &bad);
		if (rc == 0)
			check_result(checks[1], "ibv_post_recv on a QP with an SRQ succeeded");
		else
			check_result(checks[1], NULL);
	}

	/* two_qps_share_receives: 32 receives, 16 messages from each sender,
	 * interleaved. */
	rc = 0;
	for (int i = 0; i < 32 && !rc; i++)
		rc = post_srq(srq, posted_total++, rmr, rbuf);
	for (int i = 0; i < 16 && !rc; i++)
		rc = send_msg(qa[0], msg_id(1, i)) ?: send_msg(qa[1], msg_id(2, i));
	if (rc)
		check_result(checks[2], "posting: %s", strerror(rc));
	else if ((rc = sends_done(32)))
		check_result(checks[2], "send completion status %d", rc);
	else if ((why = receive_msgs(32, buf, sizeof(buf))))
		check_result(checks[2], "%s", why);
	else
		check_result(checks[2], NULL);

	/* limit_event: 8 receives, limit 4. 4 taken leave 4 (not below the
	 * limit): no event. The 5th leaves 3: one event, the limit disarmed.
	 * The 6th leaves 2: no second event. */
	rc = 0;
	for (int i = 0; i < 8 && !rc; i++)
		rc = post_srq(srq, posted_total++, rmr, rbuf);
	q.srq_limit = 4;
	if (rc || (rc = ibv_modify_srq(srq, &q, IBV_SRQ_LIMIT))) {
		check_result(checks[3], "posting or arming: %s", strerror(rc));
	} else if (ibv_query_srq(srq, &q) || q.srq_limit != 4) {
		check_result(checks[3], "armed limit reads back as %u", q.srq_limit);
	} else if ((why = take_n(qa[0], 100, 4, buf, sizeof(buf)))) {
		check_result(checks[3], "the first 4 messages: %s", why);
	} else if (limit_event(1)) {
		check_result(checks[3], "the event came with 4 receives left, limit 4");
	} else if ((why = take_n(qa[0], 104, 1, buf, sizeof(buf)))) {
		check_result(checks[3], "the 5th message: %s", why);
	} else if (!limit_event(5)) {
		check_result(checks[3], "no IBV_EVENT_SRQ_LIMIT_REACHED within 5 s of 3 left");
	} else if (ibv_query_srq(srq, &q) || q.srq_limit != 0) {
		check_result(checks[3], "limit still armed after the event (%u)",
			     q.srq_limit);
	} else if ((why = take_n(qa[0], 105, 1, buf, sizeof(buf)))) {
		check_result(checks[3], "the 6th message: %s", why);
	} else if (limit_event(1)) {
		check_result(checks[3], "a second event without the limit armed again");
	} else {
		check_result(checks[3], NULL);
	}

	/* limit_above_size_refused */
	q.srq_limit = granted + 1;
	rc = ibv_modify_srq(srq, &q, IBV_SRQ_LIMIT);
	if (rc != EINVAL)
		check_result(checks[4], "a limit of %u on an SRQ of %u: %s, want EINVAL",
			     granted + 1, granted, rc ? strerror(rc) : "accepted");
	else
		check_result(checks[4], NULL);

	/* srq_full: 2 receives are left; fill to the size granted, then one
	 * more. */
	rc = 0;
	for (uint32_t i = 2; i < granted && !rc; i++)
		rc = post_srq(srq, posted_total++, rmr, rbuf);
	if (rc)
		check_result(checks[5], "receive %d of %u refused: %s",
			     posted_total, granted, strerror(rc));
	else if (!post_srq(srq, posted_total, rmr, rbuf))
		check_result(checks[5], "receive %u accepted by an SRQ of %u",
			     granted + 1, granted);
	else
		check_result(checks[5], NULL);

	/* resize_keeps_receives: double the size while full, post one more;
	 * shrinking below what is posted is refused; 3 messages land. */
	q.max_wr = 2 * granted;
	if ((rc = ibv_modify_srq(srq, &q, IBV_SRQ_MAX_WR))) {
		check_result(checks[6], "growing to %u: %s", 2 * granted, strerror(rc));
	} else if (ibv_query_srq(srq, &q) || q.max_wr < 2 * granted) {
		check_result(checks[6], "max_wr reads back as %u", q.max_wr);
	} else if ((rc = post_srq(srq, posted_total++, rmr, rbuf))) {
		check_result(checks[6], "posting after the resize: %s", strerror(rc));
	} else {
		struct ibv_srq_attr s = { .max_wr = granted / 2 };
		bool shrank = !ibv_modify_srq(srq, &s, IBV_SRQ_MAX_WR);
		int st = 0;

		rc = send_msg(qa[1], msg_id(2, 200)) ?:
		     send_msg(qa[1], msg_id(2, 201)) ?:
		     send_msg(qa[0], msg_id(1, 200));
		if (!rc)
			st = sends_done(3);
		if (shrank)
			check_result(checks[6], "shrinking to %u with %u receives posted succeeded",
			             granted / 2, granted + 1);
		else if (rc || st)
			check_result(checks[6], "the 3 messages after it: %s",
			             rc ? strerror(rc) : st < 0 ? "a send completion is missing" :
			             "a send failed");
		else if ((why = receive_msgs(3, buf, sizeof(buf))))
			check_result(checks[6], "the 3 messages after it: %s", why);
		else
			check_result(checks[6], NULL);
		vmsg("send status %d", st);
	}

	/* srq_pd_governs_receive_buffers: on the second SRQ (PD S), a receive
	 * whose buffer is a region of PD S must work for B3 (in the QPs' PD
	 * Q); then one whose buffer is a region of PD Q must fail the Send
	 * with an error and write nothing. */
	memset(qbuf, 0x5a, SLOT);
	if ((rc = post_srq(srq2, 0, pdsmr, pdsbuf))) {
		check_result(checks[7], "posting: %s", strerror(rc));
	} else if ((rc = send_msg(qa[2], msg_id(3, 1)))) {
		check_result(checks[7], "sending: %s", strerror(rc));
	} else if ((rc = sends_done(1)) ||
		   (why = receive_msgs(1, buf, sizeof(buf)))) {
		check_result(checks[7], "a receive of the SRQ's own PD: %s",
			     rc ? "the Send failed" : why);
	} else if ((rc = post_srq(srq2, 0, qmr, qbuf))) {
		check_result(checks[7], "posting: %s", strerror(rc));
	} else if ((rc = send_msg(qa[2], msg_id(3, 2)))) {
		check_result(checks[7], "sending: %s", strerror(rc));
	} else {
		int st = sends_done(1);
		bool clean = true;

		for (int i = 0; i < SLOT; i++)
			clean &= qbuf[i] == 0x5a;
		if (st == 0)
			check_result(checks[7], "the Send succeeded into a region of another PD");
		else if (st < 0)
			check_result(checks[7], "the Send never completed");
		else if (!clean)
			check_result(checks[7], "bytes of the refused Send landed");
		else
			check_result(checks[7], NULL);
		vmsg("send status %d", st);
	}

	/* destroy_srq_in_use_refused */
	if (!ibv_destroy_srq(srq)) {
		srq = NULL;
		check_result(checks[8], "an SRQ with QPs was destroyed");
	} else {
		check_result(checks[8], NULL);
	}

	/* send_to_destroyed_qp_times_out: B1 is destroyed, then A1 sends to
	 * it. As in verbs, a request to a QP that is gone is not answered: it
	 * must not fail at once, but with RETRY_EXC_ERR once A1's patience
	 * (timeout 14, retry_cnt 7: 0.5 s; at least 10 s on MetaRoCE) has
	 * passed. */
	if (ibv_destroy_qp(qb[0]))
		die("ibv_destroy_qp: %s", strerror(errno));
	qb[0] = NULL;
	if ((rc = send_msg(qa[0], msg_id(1, 300)))) {
		check_result(checks[9], "sending: %s", strerror(rc));
	} else {
		struct ibv_wc wc;
		double t0 = now_s();
		int got = poll_until(scq, &wc, t0 + 0.3, 1000, 100000);

		if (got == 1)
			check_result(checks[9], "completed after %.3f s with status %d",
			             now_s() - t0, wc.status);
		else if (poll_until(scq, &wc, t0 + 40, 1000, 1000000) != 1)
			check_result(checks[9], "no completion within 40 s");
		else if (wc.status != IBV_WC_RETRY_EXC_ERR ||
			 wc.wr_id != msg_id(1, 300))
			check_result(checks[9], "status %d, wr_id %#llx after %.1f s, want RETRY_EXC_ERR",
			             wc.status, (unsigned long long)wc.wr_id, now_s() - t0);
		else
			check_result(checks[9], NULL);
		vmsg("failed after %.1f s", now_s() - t0);
	}

	for (int k = 0; k < 3; k++)
		if (ibv_destroy_qp(qa[k]) || (qb[k] && ibv_destroy_qp(qb[k])))
			die("ibv_destroy_qp: %s", strerror(errno));
	if ((srq && ibv_destroy_srq(srq)) || ibv_destroy_srq(srq2))
		die("ibv_destroy_srq: %s", strerror(errno));
	ibv_dereg_mr(rmr);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(qmr);
	ibv_dereg_mr(pdsmr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dealloc_pd(pd_q);
	ibv_dealloc_pd(pd_s);
	ibv_close_device(dev.ctx);
	return check_failures;
}
