// SPDX-License-Identifier: GPL-2.0
/*
 * The tracepoints of metaroce_trace.h, and one-line functions that raise
 * them for the Rust code (rust/abstractions/trace.rs). No logic lives here.
 */
#define CREATE_TRACE_POINTS
#include "metaroce_trace.h"
#include "helpers.h"

void mr_trace_resend(const u8 *peer, u16 path, u32 psn, u32 sport)
{
	trace_metaroce_resend(peer, path, psn, sport, 0);
}

void mr_trace_relocate(const u8 *peer, u16 path, u32 psn, u32 to)
{
	trace_metaroce_relocate(peer, path, psn, to, 0);
}

void mr_trace_path_moved(const u8 *peer, u16 path, u32 from, u32 to)
{
	trace_metaroce_path_moved(peer, path, from, to, 0);
}

void mr_trace_ecn(const u8 *peer, u16 path, u32 marks, u32 pw, u32 cw)
{
	trace_metaroce_ecn(peer, path, marks, pw, cw);
}

void mr_trace_rate_hint(const u8 *peer, u32 from, u32 to)
{
	trace_metaroce_rate_hint(peer, 0, from, to, 0);
}

void mr_trace_peer_restart(const u8 *peer, u32 qps)
{
	trace_metaroce_peer_restart(peer, 0, qps, 0, 0);
}

void mr_trace_peer_silence(const u8 *peer, u32 silent_ms, u32 failed)
{
	trace_metaroce_peer_silence(peer, 0, silent_ms, failed, 0);
}

void mr_trace_qp_error(const u8 *peer, u32 qpn, u32 dest_qpn, u32 from_state)
{
	trace_metaroce_qp_error(peer, 0, qpn, dest_qpn, from_state);
}
