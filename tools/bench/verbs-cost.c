// SPDX-License-Identifier: GPL-2.0
/*
 * verbs-cost: what one data-path verb costs a process on a device, without
 * any network traffic: ibv_poll_cq on an empty CQ and ibv_post_recv of one
 * receive on a QP in INIT. With shared rings (rxe's; MetaRoCE's CQ ring)
 * these stay in user space; otherwise (MetaRoCE's post_recv, and its
 * poll_cq with METAROCE_NO_RINGS=1) they are one system call each. Used to
 * weigh the data-path choice in Documentation/abi.md.
 *
 *   verbs-cost -d DEVICE [-n ITERATIONS]
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void die(const char *what)
{
	fprintf(stderr, "verbs-cost: %s failed\n", what);
	exit(1);
}

int main(int argc, char **argv)
{
	const char *name = NULL;
	long n = 200000, i;
	int opt;

	while ((opt = getopt(argc, argv, "d:n:")) != -1) {
		if (opt == 'd')
			name = optarg;
		else if (opt == 'n')
			n = atol(optarg);
		else
			return 2;
	}
	if (!name || n <= 0) {
		fprintf(stderr, "usage: verbs-cost -d DEVICE [-n ITERATIONS]\n");
		return 2;
	}

	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_device *dev = NULL;

	for (i = 0; list && list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			dev = list[i];
	if (!dev)
		die("finding the device");
	struct ibv_context *ctx = ibv_open_device(dev);
	if (!ctx)
		die("ibv_open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[4096];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_cq *cq = ibv_create_cq(ctx, 4096, NULL, NULL, 0);
	if (!mr || !cq)
		die("creating the PD, MR and CQ");
	struct ibv_qp_init_attr qa = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 16, .max_recv_wr = 1024, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	if (!qp)
		die("ibv_create_qp");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("ibv_modify_qp to INIT");

	struct ibv_wc wc;
	double t0 = now_ns();
	for (i = 0; i < n; i++)
		if (ibv_poll_cq(cq, 1, &wc) != 0)
			die("ibv_poll_cq (expected an empty CQ)");
	double poll = (now_ns() - t0) / n;

	/* Receives in batches the queue can hold; a reset between batches
	 * empties it (not timed). */
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;
	double spent = 0;
	long posted = 0;
	while (posted < n / 10) {
		double t1 = now_ns();
		for (i = 0; i < 1000; i++)
			if (ibv_post_recv(qp, &wr, &bad))
				die("ibv_post_recv");
		spent += now_ns() - t1;
		posted += 1000;
		struct ibv_qp_attr r = { .qp_state = IBV_QPS_RESET };
		if (ibv_modify_qp(qp, &r, IBV_QP_STATE) || ibv_modify_qp(qp, &a,
		    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
			die("resetting the QP");
	}
	printf("verbs-cost: %s: ibv_poll_cq (empty) %.0f ns, ibv_post_recv %.0f ns\n",
	       name, poll, spent / posted);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
