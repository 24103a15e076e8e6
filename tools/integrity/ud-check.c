// SPDX-License-Identifier: GPL-2.0
/*
 * ud-check: UD queue pairs and address handles through the public
 * libibverbs API, on one device: two UD QPs send to each other over the
 * device's own GID (loopback). Each check prints "PASS name" or
 * "FAIL name: why"; the exit status is the number of failures.
 *
 *   ud-check -d DEVICE [-g GID_INDEX] [-v]
 *   ud-check -l          (the names of the checks, in order)
 *
 * A datagram must arrive whole after the 40-byte GRH verbs reserve, with
 * the sender's QP number, its immediate data and a GRH whose IPv4 header
 * names the sender; one with a wrong Q_Key must not arrive (and is counted
 * where the device has the ud_drop_qkey counter) nor use up the receive; a
 * Q_Key with its high bit set sends with the QP's own; a message over the
 * port's MTU is refused at post time; a datagram too big for the receive
 * at the head of the queue is dropped and that receive kept; an address
 * handle of another PD is refused.
 */
#define _GNU_SOURCE
#include "common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

const char prog_name[] = "ud-check";

#define GRH 40
#define QKEY 0x11110000u
#define BUF 8192		/* bytes of each buffer */

static const char *const checks[] = {
	"datagram_arrives_after_grh",
	"wrong_qkey_dropped",
	"high_qkey_bit_sends_own",
	"over_mtu_refused",
	"too_small_receive_kept",
	"ah_of_other_pd_refused",
};

static struct rdma_dev dev;
static struct ibv_pd *pd, *pd2;
static struct ibv_cq *scq, *rcq;	/* sends', receives' */
static struct ibv_qp *qa, *qb;
static struct ibv_ah *ah, *ah2;
static uint8_t *sbuf, *rbuf;
static struct ibv_mr *smr, *rmr;

static struct ibv_qp *ud_qp(void)
{
	struct ibv_qp_init_attr a = {
		.send_cq = scq, .recv_cq = rcq,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_UD,
	};
	struct ibv_qp_attr m = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qkey = QKEY };
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	int rc;

	if (!qp)
		die("ibv_create_qp(UD): %s", strerror(errno));
	rc = ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			   IBV_QP_PORT | IBV_QP_QKEY);
	m.qp_state = IBV_QPS_RTR;
	rc = rc ? rc : ibv_modify_qp(qp, &m, IBV_QP_STATE);
	m.qp_state = IBV_QPS_RTS;
	m.sq_psn = 0;
	rc = rc ? rc : ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_SQ_PSN);
	if (rc)
		die("UD QP %u to RTS: %s", qp->qp_num, strerror(rc));
	return qp;
}

static struct ibv_ah *make_ah(struct ibv_pd *in)
{
	struct ibv_ah_attr a = {
		.is_global = 1, .port_num = 1,
		.grh = { .dgid = dev.gid, .sgid_index = dev.gid_idx,
			 .hop_limit = 64 },
	};
	struct ibv_ah *h = ibv_create_ah(in, &a);

	if (!h)
		die("ibv_create_ah: %s", strerror(errno));
	return h;
}

/* Posts a receive of LEN bytes at OFF in rbuf, with wr_id ID. */
static void post_recv(uint64_t id, size_t off, uint32_t len)
{
	struct ibv_sge s = { .addr = (uintptr_t)rbuf + off, .length = len,
			     .lkey = rmr->lkey };
	struct ibv_recv_wr wr = { .wr_id = id, .sg_list = &s, .num_sge = 1 },
			   *bad;

	if (ibv_post_recv(qb, &wr, &bad))
		die("ibv_post_recv: %s", strerror(errno));
}

/* Sends LEN bytes of sbuf from QA to QB through address handle H with
 * Q_Key QKEY (and IMM, if non-zero): ibv_post_send's errno value, EIO if
 * its completion is not a success, or 0 once it came. */
static int send_to_b(struct ibv_ah *h, uint32_t len, uint32_t qkey,
		     uint32_t imm)
{
	struct ibv_sge s = { .addr = (uintptr_t)sbuf, .length = len,
			     .lkey = smr->lkey };
	struct ibv_send_wr wr = {
		.wr_id = 1, .sg_list = &s, .num_sge = 1,
		.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED, .imm_data = htobe32(imm),
		.wr.ud = { .ah = h, .remote_qpn = qb->qp_num,
			   .remote_qkey = qkey },
	}, *bad;
	struct ibv_wc wc;
	int rc = ibv_post_send(qa, &wr, &bad);

	if (rc)
		return rc;
	if (poll_until(scq, &wc, now_s() + 5, 1000, 100000) != 1)
		die("no send completion within 5 s");
	if (wc.qp_num != qa->qp_num)
		die("a send completion of QP %u", wc.qp_num);
	if (wc.status != IBV_WC_SUCCESS) {
		msg("send completion: %s", ibv_wc_status_str(wc.status));
		return EIO;
	}
	return 0;
}

/* The next receive completion within 1 s: 1, or 0 if none came. */
static int recv_wc(struct ibv_wc *wc)
{
	int n = poll_until(rcq, wc, now_s() + 1, 1000, 100000);

	if (n < 0)
		die("ibv_poll_cq: %d", n);
	if (n == 1)
		vmsg("receive %llu: %s, %u bytes, src_qp %u, flags %#x",
		     (unsigned long long)wc->wr_id,
		     ibv_wc_status_str(wc->status), wc->byte_len, wc->src_qp,
		     wc->wc_flags);
	return n;
}

/* Starts a check afresh: a new receiving QP (no receive a check before
 * left posted), and nothing left in the receive CQ (a device that failed a
 * check may have delivered what it should not have). */
static void fresh(void)
{
	struct ibv_wc wc;

	if (ibv_destroy_qp(qb))
		die("ibv_destroy_qp: %s", strerror(errno));
	while (poll_until(rcq, &wc, now_s() + 0.2, 1000, 100000) == 1)
		vmsg("left over: receive %llu, %s",
		     (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	qb = ud_qp();
}

/* Counter NAME of the device's port 1, or -1 if it has none. */
static long long counter(const char *name)
{
	char path[256];
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof(path),
		 "/sys/class/infiniband/%s/ports/1/hw_counters/%s",
		 dev_name(&dev), name);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%lld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

/* What is wrong with receive WC of LEN bytes with IMM at OFF, or NULL. */
static const char *bad_datagram(const struct ibv_wc *wc, size_t off,
				uint32_t len, uint32_t imm)
{
	const uint8_t *ip = rbuf + off + 20;
	static char why[160];

	if (wc->status != IBV_WC_SUCCESS || wc->opcode != IBV_WC_RECV)
		snprintf(why, sizeof(why), "receive %llu: status %s, opcode %d",
			 (unsigned long long)wc->wr_id,
			 ibv_wc_status_str(wc->status), wc->opcode);
	else if (wc->byte_len != GRH + len)
		snprintf(why, sizeof(why), "byte_len %u, want %u", wc->byte_len,
			 GRH + len);
	else if (wc->src_qp != qa->qp_num)
		snprintf(why, sizeof(why), "src_qp %u, want %u", wc->src_qp,
			 qa->qp_num);
	else if (!(wc->wc_flags & IBV_WC_GRH))
		snprintf(why, sizeof(why), "no IBV_WC_GRH flag");
	else if (imm && (!(wc->wc_flags & IBV_WC_WITH_IMM) ||
			 be32toh(wc->imm_data) != imm))
		snprintf(why, sizeof(why), "immediate %#x (flags %#x), want %#x",
			 be32toh(wc->imm_data), wc->wc_flags, imm);
	else if (memcmp(rbuf + off + GRH, sbuf, len))
		snprintf(why, sizeof(why), "the bytes after the GRH differ");
	else if (ip[0] != 0x45 || ip[9] != 17 ||
		 memcmp(ip + 12, dev.gid.raw + 12, 4) ||
		 memcmp(ip + 16, dev.gid.raw + 12, 4) ||
		 (uint32_t)(ip[2] << 8 | ip[3]) < 28 + len)
		snprintf(why, sizeof(why),
			 "GRH: IPv4 header %#x, protocol %u, length %u, "
			 "%u.%u.%u.%u to %u.%u.%u.%u", ip[0], ip[9],
			 ip[2] << 8 | ip[3], ip[12], ip[13], ip[14], ip[15],
			 ip[16], ip[17], ip[18], ip[19]);
	else
		return NULL;
	return why;
}

int main(int argc, char **argv)
{
	const char *name = NULL, *why;
	struct ibv_ah_attr from;
	struct ibv_wc wc;
	long long before, after;
	uint32_t mtu;
	int gid, rc;

	check_tool_args(argc, argv, checks, sizeof(checks) / sizeof(*checks),
			&name, &gid);
	open_device(&dev, name, 1, gid, NULL);
	mtu = 128u << dev.port.active_mtu;
	pd = ibv_alloc_pd(dev.ctx);
	pd2 = ibv_alloc_pd(dev.ctx);
	scq = ibv_create_cq(dev.ctx, 32, NULL, NULL, 0);
	rcq = ibv_create_cq(dev.ctx, 32, NULL, NULL, 0);
	sbuf = calloc(1, BUF);
	rbuf = calloc(1, BUF);
	if (!pd || !pd2 || !scq || !rcq || !sbuf || !rbuf)
		die("setting up: %s", strerror(errno));
	smr = ibv_reg_mr(pd, sbuf, BUF, IBV_ACCESS_LOCAL_WRITE);
	rmr = ibv_reg_mr(pd, rbuf, BUF, IBV_ACCESS_LOCAL_WRITE);
	if (!smr || !rmr)
		die("ibv_reg_mr: %s", strerror(errno));
	qa = ud_qp();
	qb = ud_qp();
	ah = make_ah(pd);
	ah2 = make_ah(pd2);
	for (int i = 0; i < BUF; i++)
		sbuf[i] = (uint8_t)(i * 7 + 3);
	vmsg("QPs %u -> %u, port MTU %u", qa->qp_num, qb->qp_num, mtu);

	/* datagram_arrives_after_grh */
	post_recv(10, 0, GRH + 512);
	if ((rc = send_to_b(ah, 300, QKEY, 0xabcd)))
		check_result(checks[0], "sending: %s", strerror(rc));
	else if (!recv_wc(&wc))
		check_result(checks[0], "nothing arrived within 1 s");
	else if ((why = bad_datagram(&wc, 0, 300, 0xabcd)))
		check_result(checks[0], "%s", why);
	else if (ibv_init_ah_from_wc(dev.ctx, 1, &wc, (void *)rbuf, &from))
		check_result(checks[0], "ibv_init_ah_from_wc: %s",
			     strerror(errno));
	else if (memcmp(from.grh.dgid.raw, dev.gid.raw, 16))
		check_result(checks[0],
			     "the address from the GRH is not the sender's GID");
	else
		check_result(checks[0], NULL);

	fresh();
	/* wrong_qkey_dropped: nothing arrives, the receive stays for the
	 * next datagram with the right key. */
	post_recv(20, 0, GRH + 512);
	before = counter("ud_drop_qkey");
	if ((rc = send_to_b(ah, 64, QKEY + 1, 0)))
		check_result(checks[1], "sending: %s", strerror(rc));
	else if (recv_wc(&wc))
		check_result(checks[1], "it arrived: %s",
			     ibv_wc_status_str(wc.status));
	else if (after = counter("ud_drop_qkey"),
		 before >= 0 && after != before + 1)
		check_result(checks[1], "ud_drop_qkey went from %lld to %lld",
			     before, after);
	else if ((rc = send_to_b(ah, 64, QKEY, 0)))
		check_result(checks[1], "sending: %s", strerror(rc));
	else if (!recv_wc(&wc))
		check_result(checks[1], "the right key did not arrive after");
	else if (wc.wr_id != 20 || (why = bad_datagram(&wc, 0, 64, 0)))
		check_result(checks[1], "the one after: wr_id %llu, %s",
			     (unsigned long long)wc.wr_id,
			     wc.wr_id != 20 ? "not the kept receive" : why);
	else
		check_result(checks[1], NULL);

	fresh();
	/* high_qkey_bit_sends_own */
	post_recv(30, 0, GRH + 512);
	if ((rc = send_to_b(ah, 32, 0x80000000u, 0)))
		check_result(checks[2], "sending: %s", strerror(rc));
	else if (!recv_wc(&wc))
		check_result(checks[2], "nothing arrived within 1 s");
	else if ((why = bad_datagram(&wc, 0, 32, 0)))
		check_result(checks[2], "%s", why);
	else
		check_result(checks[2], NULL);

	fresh();
	/* over_mtu_refused: refused at post time; a datagram of exactly the
	 * MTU arrives. */
	post_recv(40, 0, GRH + mtu);
	if ((rc = send_to_b(ah, mtu + 1, QKEY, 0)) != EINVAL)
		check_result(checks[3], "ibv_post_send of %u bytes: %s, want %s",
			     mtu + 1, rc ? strerror(rc) : "accepted",
			     strerror(EINVAL));
	else if (recv_wc(&wc))
		check_result(checks[3], "something arrived: %u bytes",
			     wc.byte_len);
	else if ((rc = send_to_b(ah, mtu, QKEY, 0)))
		check_result(checks[3], "sending %u bytes: %s", mtu,
			     strerror(rc));
	else if (!recv_wc(&wc))
		check_result(checks[3], "%u bytes did not arrive", mtu);
	else if ((why = bad_datagram(&wc, 0, mtu, 0)))
		check_result(checks[3], "%s", why);
	else
		check_result(checks[3], NULL);

	fresh();
	/* too_small_receive_kept: a receive with room for 16 bytes after the
	 * GRH; 100 bytes are dropped, 16 then land in it. */
	post_recv(50, 0, GRH + 16);
	if ((rc = send_to_b(ah, 100, QKEY, 0)))
		check_result(checks[4], "sending: %s", strerror(rc));
	else if (recv_wc(&wc))
		check_result(checks[4], "the receive completed: %s, %u bytes "
			     "(receive %llu)", ibv_wc_status_str(wc.status),
			     wc.byte_len, (unsigned long long)wc.wr_id);
	else if ((rc = send_to_b(ah, 16, QKEY, 0)))
		check_result(checks[4], "sending: %s", strerror(rc));
	else if (!recv_wc(&wc))
		check_result(checks[4], "16 bytes did not arrive after");
	else if (wc.wr_id != 50 || (why = bad_datagram(&wc, 0, 16, 0)))
		check_result(checks[4], "wr_id %llu: %s",
			     (unsigned long long)wc.wr_id,
			     wc.wr_id != 50 ? "not the kept receive" : why);
	else
		check_result(checks[4], NULL);

	fresh();
	/* ah_of_other_pd_refused */
	post_recv(60, 0, GRH + 512);
	if ((rc = send_to_b(ah2, 8, QKEY, 0)) != EINVAL)
		check_result(checks[5], "sending: %s, want %s",
			     rc ? strerror(rc) : "accepted", strerror(EINVAL));
	else if (recv_wc(&wc))
		check_result(checks[5], "something arrived");
	else
		check_result(checks[5], NULL);

	if (ibv_destroy_ah(ah) || ibv_destroy_ah(ah2) || ibv_destroy_qp(qa) ||
	    ibv_destroy_qp(qb) || ibv_dereg_mr(smr) || ibv_dereg_mr(rmr) ||
	    ibv_destroy_cq(scq) || ibv_destroy_cq(rcq) || ibv_dealloc_pd(pd) ||
	    ibv_dealloc_pd(pd2))
		die("tearing down: %s", strerror(errno));
	ibv_close_device(dev.ctx);
	return check_failures;
}
