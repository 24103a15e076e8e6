// SPDX-License-Identifier: GPL-2.0
/*
 * udata-check: the kernel refuses driver data that the device's ABI does
 * not define. MetaRoCE's ABI (uapi/rdma/metaroce-abi.h) defines none for
 * ALLOC_PD, RESIZE_CQ and REG_MR, and for CREATE_CQ only struct
 * metaroce_create_cq_cmd with known flags (cq-ring-check tests that one);
 * so each of these, sent as a raw uverbs write() command on the device's
 * command file with 8 bytes of 0xa5 after the request (for CREATE_CQ,
 * unknown flags and a non-zero reserved word), must fail with EINVAL; the
 * same request without them must succeed (the control, which shows the
 * refusal is the driver data's). The MetaRoCE provider sends no such data,
 * so only a raw command reaches these checks. (That a refused call left no
 * object behind is not checked here.)
 *
 *   udata-check -d DEVICE [-g GID_INDEX] [-v]
 *   udata-check -l          (the names of the checks, in order)
 *
 * Each check prints "PASS name" or "FAIL name: why"; the exit status is the
 * number of failures. Needs <rdma/ib_user_verbs.h> (linux-libc-dev).
 */
#define _GNU_SOURCE
#include "common.h"

#include <rdma/ib_user_verbs.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char prog_name[] = "udata-check";

static const char *const checks[] = {
	"pd_driver_data_refused",
	"pd_without_driver_data",
	"cq_driver_data_refused",
	"cq_without_driver_data",
	"resize_cq_driver_data_refused",
	"resize_cq_without_driver_data",
	"mr_driver_data_refused",
	"mr_without_driver_data",
};

#define EXTRA 8			/* bytes of driver data sent */

static struct rdma_dev dev;

/*
 * Writes command CMD with request REQ (LEN bytes, RESP its response of
 * RESP_LEN bytes or none) to the command file, followed by EXTRA bytes of
 * driver data when EXTRA_DATA: 0 or the errno value.
 */
static int command(uint32_t cmd, const void *req, size_t len, size_t resp_len,
		   bool extra_data)
{
	uint8_t buf[sizeof(struct ib_uverbs_cmd_hdr) + 128 + EXTRA];
	struct ib_uverbs_cmd_hdr hdr = { .command = cmd };
	size_t total = sizeof(hdr) + len + (extra_data ? EXTRA : 0);
	ssize_t n;

	if (len > 128 || total % 4 || resp_len % 4)
		die("command %u: a request of %zu bytes, a response of %zu",
		    cmd, len, resp_len);
	hdr.in_words = total / 4;
	hdr.out_words = resp_len / 4;
	memcpy(buf, &hdr, sizeof(hdr));
	memcpy(buf + sizeof(hdr), req, len);
	memset(buf + sizeof(hdr) + len, 0xa5, EXTRA);
	n = write(dev.ctx->cmd_fd, buf, total);
	if (n < 0)
		return errno;
	return (size_t)n == total ? 0 : EIO;
}

/* COMMAND without driver data, releasing an object: a failure ends the run
 * (WHAT names the command). */
static void release(const char *what, uint32_t cmd, const void *req,
		    size_t len, size_t resp_len)
{
	int rc = command(cmd, req, len, resp_len, false);

	if (rc)
		die("%s: %s", what, strerror(rc));
}

static int alloc_pd(bool extra, uint32_t *handle)
{
	struct ib_uverbs_alloc_pd_resp resp = {};
	struct ib_uverbs_alloc_pd req = { .response = (uintptr_t)&resp };
	int rc = command(IB_USER_VERBS_CMD_ALLOC_PD, &req, sizeof(req),
			 sizeof(resp), extra);

	*handle = resp.pd_handle;
	return rc;
}

static void dealloc_pd(uint32_t handle)
{
	struct ib_uverbs_dealloc_pd req = { .pd_handle = handle };

	release("DEALLOC_PD", IB_USER_VERBS_CMD_DEALLOC_PD, &req, sizeof(req), 0);
}

static int create_cq(bool extra, uint32_t *handle)
{
	struct ib_uverbs_create_cq_resp resp = {};
	struct ib_uverbs_create_cq req = {
		.response = (uintptr_t)&resp,
		.cqe = 16,
		.comp_channel = -1,
	};
	int rc = command(IB_USER_VERBS_CMD_CREATE_CQ, &req, sizeof(req),
			 sizeof(resp), extra);

	*handle = resp.cq_handle;
	return rc;
}

static int resize_cq(uint32_t handle, bool extra)
{
	struct ib_uverbs_resize_cq_resp resp = {};
	struct ib_uverbs_resize_cq req = {
		.response = (uintptr_t)&resp,
		.cq_handle = handle,
		.cqe = 64,
	};

	return command(IB_USER_VERBS_CMD_RESIZE_CQ, &req, sizeof(req),
		       sizeof(resp), extra);
}

static void destroy_cq(uint32_t handle)
{
	struct ib_uverbs_destroy_cq_resp resp = {};
	struct ib_uverbs_destroy_cq req = {
		.response = (uintptr_t)&resp,
		.cq_handle = handle,
	};

	release("DESTROY_CQ", IB_USER_VERBS_CMD_DESTROY_CQ, &req, sizeof(req),
		sizeof(resp));
}

static int reg_mr(uint32_t pd, void *buf, size_t len, bool extra,
		  uint32_t *handle)
{
	struct ib_uverbs_reg_mr_resp resp = {};
	struct ib_uverbs_reg_mr req = {
		.response = (uintptr_t)&resp,
		.start = (uintptr_t)buf,
		.length = len,
		.hca_va = (uintptr_t)buf,
		.pd_handle = pd,
		.access_flags = IB_UVERBS_ACCESS_LOCAL_WRITE,
	};
	int rc = command(IB_USER_VERBS_CMD_REG_MR, &req, sizeof(req),
			 sizeof(resp), extra);

	*handle = resp.mr_handle;
	return rc;
}

static void dereg_mr(uint32_t handle)
{
	struct ib_uverbs_dereg_mr req = { .mr_handle = handle };

	release("DEREG_MR", IB_USER_VERBS_CMD_DEREG_MR, &req, sizeof(req), 0);
}

int main(int argc, char **argv)
{
	const char *name = NULL;
	uint32_t pd, cq, mr, h;
	size_t len = 4096;
	void *buf;
	bool havepd;
	int gid, rc;

	check_tool_args(argc, argv, checks, sizeof(checks) / sizeof(*checks),
			&name, &gid);
	open_device(&dev, name, 1, gid, NULL);
	buf = aligned_alloc(len, len);
	if (!buf)
		die("aligned_alloc: %s", strerror(errno));
	memset(buf, 0, len);

	rc = alloc_pd(true, &h);
	expect(checks[0], rc, EINVAL);
	if (!rc)
		dealloc_pd(h);
	rc = alloc_pd(false, &pd);
	expect(checks[1], rc, 0);
	havepd = !rc;

	rc = create_cq(true, &h);
	expect(checks[2], rc, EINVAL);
	if (!rc)
		destroy_cq(h);
	rc = create_cq(false, &cq);
	expect(checks[3], rc, 0);
	if (!rc) {
		expect(checks[4], resize_cq(cq, true), EINVAL);
		expect(checks[5], resize_cq(cq, false), 0);
		destroy_cq(cq);
	} else {
		check_result(checks[4], "no CQ to resize");
		check_result(checks[5], "no CQ to resize");
	}

	if (havepd) {
		rc = reg_mr(pd, buf, len, true, &h);
		expect(checks[6], rc, EINVAL);
		if (!rc)
			dereg_mr(h);
		rc = reg_mr(pd, buf, len, false, &mr);
		expect(checks[7], rc, 0);
		if (!rc)
			dereg_mr(mr);
		dealloc_pd(pd);
	} else {
		check_result(checks[6], "no PD to register in");
		check_result(checks[7], "no PD to register in");
	}

	ibv_close_device(dev.ctx);
	free(buf);
	return check_failures;
}
