/* SPDX-License-Identifier: GPL-2.0 */
/*
 * MetaRoCE's tracepoints (tracefs events/metaroce/): the events worth
 * tracing one by one. Only their definitions are C; the module's Rust code
 * raises them through the one-line functions of trace.c
 * (rust/abstractions/trace.rs). Documentation/observability.md lists them.
 */
#undef TRACE_SYSTEM
#define TRACE_SYSTEM metaroce

#if !defined(_METAROCE_TRACE_H) || defined(TRACE_HEADER_MULTI_READ)
#define _METAROCE_TRACE_H

#include <linux/tracepoint.h>

/* Events about one path of the connection to a peer. */
DECLARE_EVENT_CLASS(metaroce_path_class,
	TP_PROTO(const u8 *peer, u16 path, u32 a, u32 b, u32 c),
	TP_ARGS(peer, path, a, b, c),
	TP_STRUCT__entry(
		__array(u8, peer, 4)
		__field(u16, path)
		__field(u32, a)
		__field(u32, b)
		__field(u32, c)
	),
	TP_fast_assign(
		memcpy(__entry->peer, peer, 4);
		__entry->path = path;
		__entry->a = a;
		__entry->b = b;
		__entry->c = c;
	),
	TP_printk("peer=%pI4 path=%u a=%u b=%u c=%u", __entry->peer,
		  __entry->path, __entry->a, __entry->b, __entry->c)
);

/* A packet found lost was resent on its path. */
DEFINE_EVENT_PRINT(metaroce_path_class, metaroce_resend,
	TP_PROTO(const u8 *peer, u16 path, u32 a, u32 b, u32 c),
	TP_ARGS(peer, path, a, b, c),
	TP_printk("peer=%pI4 path=%u psn=%u sport=%u", __entry->peer,
		  __entry->path, __entry->a, __entry->b)
);

/* A packet of a failed path was moved to another path. */
DEFINE_EVENT_PRINT(metaroce_path_class, metaroce_relocate,
	TP_PROTO(const u8 *peer, u16 path, u32 a, u32 b, u32 c),
	TP_ARGS(peer, path, a, b, c),
	TP_printk("peer=%pI4 path=%u psn=%u to_path=%u", __entry->peer,
		  __entry->path, __entry->a, __entry->b)
);

/* A path moved to a new UDP source port (a new route). */
DEFINE_EVENT_PRINT(metaroce_path_class, metaroce_path_moved,
	TP_PROTO(const u8 *peer, u16 path, u32 a, u32 b, u32 c),
	TP_ARGS(peer, path, a, b, c),
	TP_printk("peer=%pI4 path=%u from_sport=%u to_sport=%u", __entry->peer,
		  __entry->path, __entry->a, __entry->b)
);

/* An ACK echoed CE marks: the windows after the response, in packets. */
DEFINE_EVENT_PRINT(metaroce_path_class, metaroce_ecn,
	TP_PROTO(const u8 *peer, u16 path, u32 a, u32 b, u32 c),
	TP_ARGS(peer, path, a, b, c),
	TP_printk("peer=%pI4 path=%u marks=%u path_window=%u conn_window=%u",
		  __entry->peer, __entry->path, __entry->a, __entry->b, __entry->c)
);

/* The peer's rate hint for us changed (Mbit/s, 0: none). */
DEFINE_EVENT_PRINT(metaroce_path_class, metaroce_rate_hint,
	TP_PROTO(const u8 *peer, u16 path, u32 a, u32 b, u32 c),
	TP_ARGS(peer, path, a, b, c),
	TP_printk("peer=%pI4 from_mbps=%u to_mbps=%u", __entry->peer,
		  __entry->a, __entry->b)
);

/* The peer restarted (a new incarnation): the connection starts again. */
DEFINE_EVENT_PRINT(metaroce_path_class, metaroce_peer_restart,
	TP_PROTO(const u8 *peer, u16 path, u32 a, u32 b, u32 c),
	TP_ARGS(peer, path, a, b, c),
	TP_printk("peer=%pI4 qps=%u", __entry->peer, __entry->a)
);

/* The peer was silent too long: waiting queue pairs failed. */
DEFINE_EVENT_PRINT(metaroce_path_class, metaroce_peer_silence,
	TP_PROTO(const u8 *peer, u16 path, u32 a, u32 b, u32 c),
	TP_ARGS(peer, path, a, b, c),
	TP_printk("peer=%pI4 silent_ms=%u qps_failed=%u", __entry->peer,
		  __entry->a, __entry->b)
);

/* A queue pair entered the error state. */
DEFINE_EVENT_PRINT(metaroce_path_class, metaroce_qp_error,
	TP_PROTO(const u8 *peer, u16 path, u32 a, u32 b, u32 c),
	TP_ARGS(peer, path, a, b, c),
	TP_printk("peer=%pI4 qpn=%#x dest_qpn=%#x from_state=%u", __entry->peer,
		  __entry->a, __entry->b, __entry->c)
);

#endif /* _METAROCE_TRACE_H */

#undef TRACE_INCLUDE_PATH
#define TRACE_INCLUDE_PATH .
#undef TRACE_INCLUDE_FILE
#define TRACE_INCLUDE_FILE metaroce_trace
#include <trace/define_trace.h>
