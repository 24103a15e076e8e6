// SPDX-License-Identifier: GPL-2.0
/*
 * The tracepoints of metaroce_trace.h, and one-line functions that raise
 * them for the Rust code (rust/abstractions/trace.rs). No logic lives here.
 */
#define CREATE_TRACE_POINTS
#include "metaroce_trace.h"
#include "helpers.h"

void mr_trace_resend(const u8 *peer, u16 path, u32 psn, u16 sport)
{
	trace_metaroce_resend(peer, path, psn, sport);
}

void mr_trace_relocate(const u8 *peer, u16 path, u32 psn, u16 to_path)
{
	trace_metaroce_relocate(peer, path, psn, to_path);
}

void mr_trace_path_moved(const u8 *peer, u16 path, u16 from_sport, u16 to_sport)
{
	trace_metaroce_path_moved(peer, path, from_sport, to_sport);
}

void mr_trace_ecn(const u8 *peer, u16 path, u16 marks, u32 path_window, u32 conn_window)
{
	trace_metaroce_ecn(peer, path, marks, path_window, conn_window);
}

void mr_trace_rate_hint(const u8 *peer, u32 from_kbps, u32 to_kbps)
{
	trace_metaroce_rate_hint(peer, from_kbps, to_kbps);
}

void mr_trace_peer_restart(const u8 *peer, u32 qps)
{
	trace_metaroce_peer_restart(peer, qps);
}

void mr_trace_peer_silence(const u8 *peer, u32 silent_ms, u32 qps_failed)
{
	trace_metaroce_peer_silence(peer, silent_ms, qps_failed);
}

void mr_trace_qp_error(const u8 *peer, u32 qpn, u32 dest_qpn, u32 from_state)
{
	trace_metaroce_qp_error(peer, qpn, dest_qpn, from_state);
}
