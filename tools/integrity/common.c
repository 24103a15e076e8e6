// SPDX-License-Identifier: GPL-2.0
/*
 * What the tools of tools/integrity share (see common.h).
 */
#define _GNU_SOURCE
#include "common.h"

#include <endian.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

bool verbose;
void (*die_context)(FILE *f);

/* ---------- messages ---------- */

void msg(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog_name);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "%s: FAIL ", prog_name);
	if (die_context)
		die_context(stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

const char *server_arg(int argc, char **argv, void (*usage)(FILE *f))
{
	if (optind < argc - 1) {
		usage(stderr);
		exit(2);
	}
	return optind == argc - 1 ? argv[optind] : NULL;
}

uint32_t parse_list(const char *s, uint32_t (*item)(const char *tok),
		    const char *none)
{
	uint32_t m = 0;
	char *dup = strdup(s), *save = NULL;

	for (char *t = strtok_r(dup, ",", &save); t;
	     t = strtok_r(NULL, ",", &save))
		m |= item(t);
	free(dup);
	if (!m) {
		msg("%s", none);
		exit(2);
	}
	return m;
}

/* ---------- time ---------- */

double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------- TCP ---------- */

int io_full(int fd, void *buf, size_t len, bool wr, double deadline)
{
	uint8_t *p = buf;

	while (len) {
		struct pollfd pfd = { .fd = fd, .events = wr ? POLLOUT : POLLIN };
		double left = deadline - now_s();

		if (left <= 0) {
			errno = ETIMEDOUT;
			return -1;
		}
		int rc = poll(&pfd, 1, (int)(left * 1000) + 1);
		if (rc < 0 && errno == EINTR)
			continue;
		if (rc < 0)
			return -1;
		if (rc == 0)
			continue;
		ssize_t n = wr ? send(fd, p, len, MSG_NOSIGNAL)
			       : recv(fd, p, len, 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n < 0)
			return -1;
		if (n == 0) {
			errno = ECONNRESET;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int tcp_server(const char *port, int timeout_s)
{
	struct addrinfo hints = { .ai_flags = AI_PASSIVE, .ai_family = AF_INET6,
				  .ai_socktype = SOCK_STREAM }, *res;
	int fd = -1, one = 1, zero = 0;

	if (getaddrinfo(NULL, port, &hints, &res)) {
		hints.ai_family = AF_INET;
		if (getaddrinfo(NULL, port, &hints, &res))
			die("bad TCP port %s", port);
	}
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (a->ai_family == AF_INET6)
			setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero,
				   sizeof(zero));
		if (!bind(fd, a->ai_addr, a->ai_addrlen) && !listen(fd, 1))
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		die("cannot listen on TCP port %s: %s", port, strerror(errno));

	/* Never wait forever for a client either. */
	int wait_s = timeout_s < 60 ? 60 : timeout_s;
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int rc;

	vmsg("server: waiting up to %d s for a client on port %s", wait_s,
	     port);
	do
		rc = poll(&pfd, 1, wait_s * 1000);
	while (rc < 0 && errno == EINTR);
	if (rc <= 0)
		die("no client connected within %d s", wait_s);
	int s = accept(fd, NULL, NULL);
	if (s < 0)
		die("accept: %s", strerror(errno));
	close(fd);
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return s;
}

int tcp_client(const char *host, const char *port, int wait_s)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM }, *res;
	double deadline = now_s() + wait_s;
	int one = 1, err = 0;

	int gai = getaddrinfo(host, port, &hints, &res);
	if (gai)
		die("cannot resolve %s: %s", host, gai_strerror(gai));
	/* The server may still be starting: retry until the deadline. */
	for (;;) {
		for (struct addrinfo *a = res; a; a = a->ai_next) {
			int fd = socket(a->ai_family, a->ai_socktype,
					a->ai_protocol);

			if (fd < 0)
				continue;
			if (!connect(fd, a->ai_addr, a->ai_addrlen)) {
				freeaddrinfo(res);
				setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one,
					   sizeof(one));
				return fd;
			}
			err = errno;
			close(fd);
		}
		if (now_s() > deadline)
			die("cannot connect to %s:%s: %s", host, port,
			    strerror(err));
		usleep(200000);
	}
}

void put32(uint8_t **p, uint32_t v)
{
	v = htobe32(v);
	memcpy(*p, &v, 4);
	*p += 4;
}

void put64(uint8_t **p, uint64_t v)
{
	v = htobe64(v);
	memcpy(*p, &v, 8);
	*p += 8;
}

uint32_t get32(const uint8_t **p)
{
	uint32_t v;

	memcpy(&v, *p, 4);
	*p += 4;
	return be32toh(v);
}

uint64_t get64(const uint8_t **p)
{
	uint64_t v;

	memcpy(&v, *p, 8);
	*p += 8;
	return be64toh(v);
}

/* ---------- device ---------- */

static bool gid_is_v4_mapped(const uint8_t *g)
{
	static const uint8_t pre[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
					 0xff, 0xff };
	return !memcmp(g, pre, 12);
}

bool gid_is_zero(const uint8_t *g)
{
	for (int i = 0; i < 16; i++)
		if (g[i])
			return false;
	return true;
}

/* A RoCEv2 IPv4-mapped GID if there is one, else any RoCEv2 one, else 0.
 * Without the extended query (old kernels) the first IPv4-mapped GID. */
static int pick_gid(const struct rdma_dev *d, int ib_port)
{
	int any_v2 = -1, legacy_v4 = -1;

	for (int i = 0; i < d->port.gid_tbl_len; i++) {
		struct ibv_gid_entry e;

		if (ibv_query_gid_ex(d->ctx, ib_port, i, &e, 0)) {
			union ibv_gid g;

			if (legacy_v4 < 0 &&
			    !ibv_query_gid(d->ctx, ib_port, i, &g) &&
			    gid_is_v4_mapped(g.raw))
				legacy_v4 = i;
			continue;
		}
		if (e.gid_type != IBV_GID_TYPE_ROCE_V2)
			continue;
		if (gid_is_v4_mapped(e.gid.raw))
			return i;
		if (any_v2 < 0)
			any_v2 = i;
	}
	if (any_v2 >= 0)
		return any_v2;
	return legacy_v4 >= 0 ? legacy_v4 : 0;
}

void open_device(struct rdma_dev *d, const char *name, int ib_port,
		 int gid_idx, struct ibv_device_attr *da)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_device *dev = NULL;

	if (!list)
		die("ibv_get_device_list: %s", strerror(errno));
	for (int i = 0; list[i]; i++)
		if (!name || !strcmp(ibv_get_device_name(list[i]), name)) {
			dev = list[i];
			break;
		}
	if (!dev)
		die("no RDMA device %s", name ? name : "found");
	d->ctx = ibv_open_device(dev);
	if (!d->ctx)
		die("cannot open %s", ibv_get_device_name(dev));
	ibv_free_device_list(list);

	if (da && ibv_query_device(d->ctx, da))
		die("ibv_query_device");
	if (ibv_query_port(d->ctx, ib_port, &d->port))
		die("ibv_query_port %d", ib_port);
	if (d->port.state != IBV_PORT_ACTIVE)
		msg("warning: port %d is not ACTIVE (state %d)", ib_port,
		    d->port.state);
	d->gid_idx = gid_idx >= 0 ? gid_idx : pick_gid(d, ib_port);
	if (ibv_query_gid(d->ctx, ib_port, d->gid_idx, &d->gid))
		die("cannot read GID %d", d->gid_idx);
	if (d->port.link_layer == IBV_LINK_LAYER_ETHERNET &&
	    gid_is_zero(d->gid.raw))
		die("GID %d of %s is empty (RoCE needs one: -g, or give the "
		    "netdev an IP address)", d->gid_idx, dev_name(d));
}

/* ---------- RC QPs ---------- */

int qp_to_init(struct ibv_qp *qp, int ib_port, int access)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .pkey_index = 0,
		.port_num = (uint8_t)ib_port,
		.qp_access_flags = (unsigned)access,
	};

	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
			     IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int qp_to_rtr(struct ibv_qp *qp, int ib_port, enum ibv_mtu mtu,
	      const struct qp_info *peer, int sgid_idx, uint8_t max_dest_rd)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = mtu,
		.dest_qp_num = peer->qpn,
		.rq_psn = peer->psn,
		.max_dest_rd_atomic = max_dest_rd,
		.min_rnr_timer = 12,
		.ah_attr = {
			.dlid = (uint16_t)peer->lid,
			.sl = 0,
			.port_num = (uint8_t)ib_port,
		},
	};

	if (!gid_is_zero(peer->gid)) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)sgid_idx;
		a.ah_attr.grh.hop_limit = 64;
	}
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV |
			     IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			     IBV_QP_MIN_RNR_TIMER);
}

int qp_to_rts(struct ibv_qp *qp, uint32_t sq_psn, uint8_t rnr_retry,
	      uint8_t max_rd)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTS,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = rnr_retry,
		.sq_psn = sq_psn,
		.max_rd_atomic = max_rd,
	};

	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
			     IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

int connect_loopback(const struct rdma_dev *d, struct ibv_qp *a,
		     struct ibv_qp *b, int access)
{
	struct qp_info ia = { .qpn = a->qp_num, .lid = d->port.lid };
	struct qp_info ib = { .qpn = b->qp_num, .lid = d->port.lid };
	int rc;

	memcpy(ia.gid, d->gid.raw, 16);
	memcpy(ib.gid, d->gid.raw, 16);
	if ((rc = qp_to_init(a, 1, access)) || (rc = qp_to_init(b, 1, access)) ||
	    (rc = qp_to_rtr(a, 1, IBV_MTU_1024, &ib, d->gid_idx, 1)) ||
	    (rc = qp_to_rtr(b, 1, IBV_MTU_1024, &ia, d->gid_idx, 1)) ||
	    (rc = qp_to_rts(a, 0, 7, 1)) || (rc = qp_to_rts(b, 0, 7, 1)))
		return rc;
	return 0;
}

void check_tool_args(int argc, char **argv, const char *const *checks,
		     size_t nchecks, const char **dev, int *gid)
{
	int c;

	*dev = NULL;
	*gid = -1;
	while ((c = getopt(argc, argv, "d:g:lvh")) != -1) {
		switch (c) {
		case 'd': *dev = optarg; break;
		case 'g': *gid = atoi(optarg); break;
		case 'v': verbose = true; break;
		case 'l':
			for (size_t i = 0; i < nchecks; i++)
				printf("%s\n", checks[i]);
			exit(0);
		case 'h':
		default:
			fprintf(c == 'h' ? stdout : stderr,
				"usage: %s -d DEVICE [-g GID_INDEX] [-v]\n"
				"       %s -l\n", prog_name, prog_name);
			exit(c == 'h' ? 0 : 2);
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
}

int check_failures;

void check_result(const char *name, const char *fmt, ...)
{
	char why[256] = "";
	va_list ap;

	if (!fmt) {
		printf("PASS %s\n", name);
	} else {
		va_start(ap, fmt);
		vsnprintf(why, sizeof(why), fmt, ap);
		va_end(ap);
		printf("FAIL %s: %s\n", name, why);
		check_failures++;
	}
	fflush(stdout);
}

void expect(const char *name, int rc, int want)
{
	if (rc == want)
		check_result(name, NULL);
	else
		check_result(name, "%s, want %s", rc ? strerror(rc) : "accepted",
			     want ? strerror(want) : "success");
}

/* ---------- completions ---------- */

static int poll1_cq(void *cq, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, 1, wc);
}

int poll_until(struct ibv_cq *cq, struct ibv_wc *wc, double deadline,
	       unsigned spins, long nap_ns)
{
	return poll_until_fn(poll1_cq, cq, wc, deadline, spins, nap_ns);
}

int poll_until_fn(int (*poll1)(void *arg, struct ibv_wc *wc), void *arg,
		  struct ibv_wc *wc, double deadline, unsigned spins,
		  long nap_ns)
{
	unsigned n_empty = 0;

	for (;;) {
		int n = poll1(arg, wc);

		if (n < 0)
			return n;
		if (n == 1)
			return 1;
		if (now_s() >= deadline)
			return 0;
		if (++n_empty > spins) {
			struct timespec ts = { 0, nap_ns };

			nanosleep(&ts, NULL);
		}
	}
}
