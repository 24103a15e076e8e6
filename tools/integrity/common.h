/* SPDX-License-Identifier: GPL-2.0 */
/*
 * What the tools share: messages, time, the TCP connection between the two
 * sides, big-endian fields on it, opening the device and choosing its GID,
 * RC QP state transitions (and loopback connection), PASS/FAIL check lines
 * and polling a CQ with a deadline. Public libibverbs API only.
 */
#ifndef MR_COMMON_H
#define MR_COMMON_H

#include <infiniband/verbs.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---------- messages ---------- */

/* Each tool defines its name, the prefix of every message. */
extern const char prog_name[];
/* vmsg() prints only when set (-v). */
extern bool verbose;
/* When set, die() calls it after "FAIL " to say where it failed. */
extern void (*die_context)(FILE *f);

/* "PROG: ..." on stderr. */
void msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define vmsg(...) do { if (verbose) msg(__VA_ARGS__); } while (0)
/* "PROG: FAIL ..." on stderr, exit status 1. */
void __attribute__((noreturn, format(printf, 1, 2))) die(const char *fmt, ...);

/* The SERVER_HOST after the options (getopt's optind), NULL when there is
 * none; with more than one argument left, USAGE on stderr and exit 2. */
const char *server_arg(int argc, char **argv, void (*usage)(FILE *f));

/* The union of ITEM(token) over the comma-separated tokens of S (ITEM exits
 * on a bad one); when it is empty, NONE and exit 2. */
uint32_t parse_list(const char *s, uint32_t (*item)(const char *tok),
		    const char *none);

/* ---------- hashing and time ---------- */

/* splitmix64's finaliser. */
static inline uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* CLOCK_MONOTONIC in seconds. */
double now_s(void);

/* ---------- TCP ---------- */

/* Send (WR) or receive all LEN bytes before DEADLINE (now_s() time).
 * 0, or -1 with errno (ETIMEDOUT, ECONNRESET when the peer closed). */
int io_full(int fd, void *buf, size_t len, bool wr, double deadline);

/* Listen on PORT (IPv6 and IPv4) and accept one client, waiting at most
 * max(60, TIMEOUT_S) seconds for it. Dies on failure. */
int tcp_server(const char *port, int timeout_s);
/* Connect to HOST:PORT, retrying for WAIT_S seconds while the server is
 * starting. Dies on failure. */
int tcp_client(const char *host, const char *port, int wait_s);

/* Big-endian fields on the TCP stream; each advances *p. */
void put32(uint8_t **p, uint32_t v);
void put64(uint8_t **p, uint64_t v);
uint32_t get32(const uint8_t **p);
uint64_t get64(const uint8_t **p);

/* ---------- device ---------- */

struct rdma_dev {
	struct ibv_context *ctx;
	struct ibv_port_attr port;
	int gid_idx;
	union ibv_gid gid;
};

/* Open device NAME (NULL: the first one), query its port IB_PORT (a warning
 * when it is not ACTIVE) and read GID GID_IDX (-1: pick_gid()), which must
 * not be empty on Ethernet. DA, unless NULL, receives ibv_query_device's
 * answer. Dies on failure. */
void open_device(struct rdma_dev *d, const char *name, int ib_port,
		 int gid_idx, struct ibv_device_attr *da);
static inline const char *dev_name(const struct rdma_dev *d)
{
	return ibv_get_device_name(d->ctx->device);
}

bool gid_is_zero(const uint8_t *g);

/* ---------- RC QPs ---------- */

/* What the peer needs to know about one of our QPs. */
struct qp_info {
	uint32_t qpn, psn, lid, rkey;
	uint64_t raddr;
	uint8_t gid[16];
};

/* The transitions of an RC QP, with one RDMA Read or atomic in flight each
 * way. Each returns ibv_modify_qp's result (0 or an errno value). */
int qp_to_init(struct ibv_qp *qp, int ib_port, int access);
/* Towards PEER's qpn, psn and lid, over its GID (from our SGID_IDX) unless
 * that is zero, answering at most MAX_DEST_RD of its Reads and atomics at
 * once. */
int qp_to_rtr(struct ibv_qp *qp, int ib_port, enum ibv_mtu mtu,
	      const struct qp_info *peer, int sgid_idx, uint8_t max_dest_rd);
/* With at most MAX_RD of our Reads and atomics outstanding. */
int qp_to_rts(struct ibv_qp *qp, uint32_t sq_psn, uint8_t rnr_retry,
	      uint8_t max_rd);

/* Connects RC QPs A and B of device D to each other over D's own GID
 * (loopback), both granting ACCESS to the other and answering one Read or
 * atomic at a time. 0, or ibv_modify_qp's errno value. */
int connect_loopback(const struct rdma_dev *d, struct ibv_qp *a,
		     struct ibv_qp *b, int access);

/* ---------- checks (srq-check, rereg-check, limits-check) ---------- */

/* The options of a check tool, "PROG -d DEVICE [-g GID_INDEX] [-v]" or
 * "PROG -l": sets *DEV and *GID (-1 when not given) and verbose; -l prints
 * the NCHECKS names CHECKS and exits 0, -h the usage and exits 0, anything
 * else the usage on stderr and exits 2. Also makes stdout line-buffered. */
void check_tool_args(int argc, char **argv, const char *const *checks,
		     size_t nchecks, const char **dev, int *gid);

/* Failures reported by check_result() so far. */
extern int check_failures;

/* "PASS NAME", or with FMT "FAIL NAME: why" (counted in check_failures),
 * on stdout. */
void check_result(const char *name, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
/* check_result: PASS NAME when RC is WANT (0 or an errno value), else a
 * FAIL saying what came instead (udata-check, cq-ring-check). */
void expect(const char *name, int rc, int want);

/* ---------- completions ---------- */

/* Poll CQ for one completion until DEADLINE (now_s() time; one poll when it
 * has passed): 1 with *wc filled, 0 none came, or ibv_poll_cq's negative
 * result. After SPINS empty polls it sleeps NAP_NS between polls. */
int poll_until(struct ibv_cq *cq, struct ibv_wc *wc, double deadline,
	       unsigned spins, long nap_ns);

/* As poll_until, with POLL1(ARG, WC) for ibv_poll_cq(cq, 1, wc) (another
 * verbs API's poll, say). */
int poll_until_fn(int (*poll1)(void *arg, struct ibv_wc *wc), void *arg,
		  struct ibv_wc *wc, double deadline, unsigned spins,
		  long nap_ns);

#endif
