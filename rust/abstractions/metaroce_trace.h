/* SPDX-License-Identifier: GPL-2.0 */
/*
 * MetaRoCE's tracepoints (tracefs events/metaroce/): the events worth
 * tracing one by one. Only their definitions are C; the module's Rust code
 * raises them through the one-line functions of trace.c
 * (rust/abstractions/trace.rs). Documentation/observability.md lists them.
 * Every event names the peer host (`peer`, 16 bytes: an IPv6 address or an
 * IPv4-mapped one, printed as ::ffff:a.b.c.d).
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM metaroce

#if !defined(_METAROCE_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _METAROCE_TRACE_H

#include <linux/tracepoint.h>

/* A packet found lost was resent on its path. */
TRACE_EVENT(metaroce_resend,
	TP_PROTO(const u8 *peer, u16 path, u32 psn, u16 sport),
	TP_ARGS(peer, path, psn, sport),
	TP_STRUCT__entry(
		__array(u8, peer, 16)
		__field(u16, path)
		__field(u32, psn)
		__field(u16, sport)
	),
	TP_fast_assign(
		memcpy(__entry->peer, peer, 16);
		__entry->path = path;
		__entry->psn = psn;
		__entry->sport = sport;
	),
	TP_printk("peer=%pI6c path=%u psn=%u sport=%u", __entry->peer, __entry->path, __entry->psn, __entry->sport)
);

/* A packet of a failed path was moved to another path. */
TRACE_EVENT(metaroce_relocate,
	TP_PROTO(const u8 *peer, u16 path, u32 psn, u16 to_path),
	TP_ARGS(peer, path, psn, to_path),
	TP_STRUCT__entry(
		__array(u8, peer, 16)
		__field(u16, path)
		__field(u32, psn)
		__field(u16, to_path)
	),
	TP_fast_assign(
		memcpy(__entry->peer, peer, 16);
		__entry->path = path;
		__entry->psn = psn;
		__entry->to_path = to_path;
	),
	TP_printk("peer=%pI6c path=%u psn=%u to_path=%u", __entry->peer, __entry->path, __entry->psn, __entry->to_path)
);

/* A path moved to a new UDP source port (a new route). */
TRACE_EVENT(metaroce_path_moved,
	TP_PROTO(const u8 *peer, u16 path, u16 from_sport, u16 to_sport),
	TP_ARGS(peer, path, from_sport, to_sport),
	TP_STRUCT__entry(
		__array(u8, peer, 16)
		__field(u16, path)
		__field(u16, from_sport)
		__field(u16, to_sport)
	),
	TP_fast_assign(
		memcpy(__entry->peer, peer, 16);
		__entry->path = path;
		__entry->from_sport = from_sport;
		__entry->to_sport = to_sport;
	),
	TP_printk("peer=%pI6c path=%u from_sport=%u to_sport=%u", __entry->peer, __entry->path, __entry->from_sport, __entry->to_sport)
);

/* An ACK echoed CE marks: the windows after the response, in packets. */
TRACE_EVENT(metaroce_ecn,
	TP_PROTO(const u8 *peer, u16 path, u16 marks, u32 path_window, u32 conn_window),
	TP_ARGS(peer, path, marks, path_window, conn_window),
	TP_STRUCT__entry(
		__array(u8, peer, 16)
		__field(u16, path)
		__field(u16, marks)
		__field(u32, path_window)
		__field(u32, conn_window)
	),
	TP_fast_assign(
		memcpy(__entry->peer, peer, 16);
		__entry->path = path;
		__entry->marks = marks;
		__entry->path_window = path_window;
		__entry->conn_window = conn_window;
	),
	TP_printk("peer=%pI6c path=%u marks=%u path_window=%u conn_window=%u", __entry->peer, __entry->path, __entry->marks, __entry->path_window, __entry->conn_window)
);

/* The peer's rate hint for us changed (kbit/s, 0: none). */
TRACE_EVENT(metaroce_rate_hint,
	TP_PROTO(const u8 *peer, u32 from_kbps, u32 to_kbps),
	TP_ARGS(peer, from_kbps, to_kbps),
	TP_STRUCT__entry(
		__array(u8, peer, 16)
		__field(u32, from_kbps)
		__field(u32, to_kbps)
	),
	TP_fast_assign(
		memcpy(__entry->peer, peer, 16);
		__entry->from_kbps = from_kbps;
		__entry->to_kbps = to_kbps;
	),
	TP_printk("peer=%pI6c from_kbps=%u to_kbps=%u", __entry->peer, __entry->from_kbps, __entry->to_kbps)
);

/* The peer restarted (a new incarnation): the connection starts again. */
TRACE_EVENT(metaroce_peer_restart,
	TP_PROTO(const u8 *peer, u32 qps),
	TP_ARGS(peer, qps),
	TP_STRUCT__entry(
		__array(u8, peer, 16)
		__field(u32, qps)
	),
	TP_fast_assign(
		memcpy(__entry->peer, peer, 16);
		__entry->qps = qps;
	),
	TP_printk("peer=%pI6c qps=%u", __entry->peer, __entry->qps)
);

/* The peer was silent too long: waiting queue pairs failed. */
TRACE_EVENT(metaroce_peer_silence,
	TP_PROTO(const u8 *peer, u32 silent_ms, u32 qps_failed),
	TP_ARGS(peer, silent_ms, qps_failed),
	TP_STRUCT__entry(
		__array(u8, peer, 16)
		__field(u32, silent_ms)
		__field(u32, qps_failed)
	),
	TP_fast_assign(
		memcpy(__entry->peer, peer, 16);
		__entry->silent_ms = silent_ms;
		__entry->qps_failed = qps_failed;
	),
	TP_printk("peer=%pI6c silent_ms=%u qps_failed=%u", __entry->peer, __entry->silent_ms, __entry->qps_failed)
);

/* A queue pair entered the error state (from_state: enum ib_qp_state). */
TRACE_EVENT(metaroce_qp_error,
	TP_PROTO(const u8 *peer, u32 qpn, u32 dest_qpn, u32 from_state),
	TP_ARGS(peer, qpn, dest_qpn, from_state),
	TP_STRUCT__entry(
		__array(u8, peer, 16)
		__field(u32, qpn)
		__field(u32, dest_qpn)
		__field(u32, from_state)
	),
	TP_fast_assign(
		memcpy(__entry->peer, peer, 16);
		__entry->qpn = qpn;
		__entry->dest_qpn = dest_qpn;
		__entry->from_state = from_state;
	),
	TP_printk("peer=%pI6c qpn=%#x dest_qpn=%#x from_state=%u", __entry->peer, __entry->qpn, __entry->dest_qpn, __entry->from_state)
);

#endif /* _METAROCE_TRACE_H */

#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE metaroce_trace
#include <trace/define_trace.h>
