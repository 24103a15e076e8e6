-- SPDX-License-Identifier: GPL-2.0
--
-- Wireshark / tshark dissector for the MetaRoCE wire format, version 4
-- (Documentation/wire-format.md; the codec is rust/transport/src/wire.rs).
-- UDP destination port 4792. Every packet type, flag and optional part is
-- shown; what the Rust decoder would reject is marked as malformed (expert
-- info, group "Malformed"), with the reason.
--
--   tshark -X lua_script:tools/dissector/metaroce.lua -r capture.pcap -V
--   cp tools/dissector/metaroce.lua ~/.local/lib/wireshark/plugins/
--
-- Kept in step with the codec by scripts/tests/test_dissector.py, which
-- dissects packets the Rust encoder made (every type and optional part) and
-- compares each field with the value encoded.

local PORT = 4792

local p = Proto("metaroce", "MetaRoCE")

local ptypes = { [1] = "Data", [2] = "ACK", [3] = "NAK", [4] = "Hello", [5] = "Datagram" }
local opcodes = {
	[0] = "Send", [1] = "Send with immediate", [2] = "RDMA Write",
	[3] = "RDMA Write with immediate", [4] = "RDMA Read request",
	[5] = "RDMA Read response", [6] = "Compare and swap", [7] = "Fetch and add",
	[8] = "Send with invalidate",
}
local nak_codes = {
	[1] = "Remote access error", [2] = "Invalid request",
	[3] = "Receiver not ready", [4] = "Remote operation error",
	[5] = "No queue pair",
}
local ack_status = {
	[0] = "OK (progress)", [1] = "Remote access error", [2] = "Invalid request",
	[3] = "Receiver not ready", [4] = "Remote operation error",
	[5] = "No queue pair",
}

local f = p.fields
-- common header
f.version = ProtoField.uint8("metaroce.version", "Version", base.DEC, nil, 0xf0)
f.type = ProtoField.uint8("metaroce.type", "Type", base.DEC, ptypes, 0x0f)
f.flags = ProtoField.uint8("metaroce.flags", "Flags", base.HEX)
f.f_first = ProtoField.bool("metaroce.flags.first", "FIRST", 8, nil, 0x01)
f.f_last = ProtoField.bool("metaroce.flags.last", "LAST", 8, nil, 0x02)
f.f_retransmit = ProtoField.bool("metaroce.flags.retransmit", "RETRANSMIT", 8, nil, 0x04)
f.f_ack_req = ProtoField.bool("metaroce.flags.ack_req", "ACK_REQ", 8, nil, 0x08)
f.f_relocated = ProtoField.bool("metaroce.flags.relocated", "RELOCATED", 8, nil, 0x10)
f.f_void = ProtoField.bool("metaroce.flags.void", "VOID", 8, nil, 0x20)
f.f_solicited = ProtoField.bool("metaroce.flags.solicited", "SOLICITED", 8, nil, 0x40)
f.f_dry = ProtoField.bool("metaroce.flags.dry", "DRY", 8, nil, 0x80)
f.f_duplicate = ProtoField.bool("metaroce.flags.duplicate", "DUPLICATE", 8, nil, 0x01)
f.f_challenge = ProtoField.bool("metaroce.flags.challenge", "CHALLENGE", 8, nil, 0x01)
f.f_imm = ProtoField.bool("metaroce.flags.imm", "IMM", 8, nil, 0x01)
f.path = ProtoField.uint16("metaroce.path", "Path id", base.DEC)
-- datagram (UD): the common header's words read otherwise
f.dest_qpn = ProtoField.uint32("metaroce.dgram.dest_qpn", "Destination QP", base.HEX)
f.src_qpn = ProtoField.uint32("metaroce.dgram.src_qpn", "Source QP", base.HEX)
f.qkey = ProtoField.uint32("metaroce.dgram.qkey", "Q_Key", base.HEX)
f.conn = ProtoField.uint32("metaroce.conn", "Connection id (receiver's)", base.HEX)
f.psn = ProtoField.uint32("metaroce.psn", "PSN", base.DEC)
f.cumulative = ProtoField.uint32("metaroce.cumulative", "Cumulative ack (first PSN not received)", base.DEC)
f.timestamp = ProtoField.uint32("metaroce.timestamp", "Timestamp (us)", base.DEC)
f.word3 = ProtoField.uint32("metaroce.unused", "Unused", base.HEX)
-- data
f.opcode = ProtoField.uint8("metaroce.opcode", "Opcode", base.DEC, opcodes)
f.rsn = ProtoField.uint8("metaroce.rsn", "Receive sequence number", base.DEC)
f.paylen = ProtoField.uint16("metaroce.paylen", "Payload length", base.DEC)
f.stream = ProtoField.uint32("metaroce.stream", "Stream id", base.HEX)
f.msn = ProtoField.uint32("metaroce.msn", "Message sequence number", base.DEC)
f.offset = ProtoField.uint32("metaroce.offset", "Offset in message", base.DEC)
f.msglen = ProtoField.uint32("metaroce.msglen", "Message length", base.DEC)
f.rkey = ProtoField.uint32("metaroce.rkey", "Remote key", base.HEX)
f.raddr = ProtoField.uint64("metaroce.raddr", "Remote address", base.HEX)
f.imm = ProtoField.uint32("metaroce.imm", "Immediate data", base.HEX)
f.invkey = ProtoField.uint32("metaroce.invalidate_key", "Key to invalidate", base.HEX)
f.swap_add = ProtoField.uint64("metaroce.swap_add", "Swap / add", base.HEX)
f.compare = ProtoField.uint64("metaroce.compare", "Compare", base.HEX)
f.origin_path = ProtoField.uint16("metaroce.origin_path", "Origin path", base.DEC)
f.origin_reserved = ProtoField.uint16("metaroce.origin_reserved", "Reserved", base.HEX)
f.origin_psn = ProtoField.uint32("metaroce.origin_psn", "Origin PSN", base.DEC)
f.payload = ProtoField.bytes("metaroce.payload", "Payload")
-- ACK
f.sack = ProtoField.bytes("metaroce.ack.sack", "SACK bitmap (256 PSNs after the cumulative one)")
f.sack_count = ProtoField.uint16("metaroce.ack.sacked", "PSNs selectively acknowledged", base.DEC)
f.ecn_ce = ProtoField.uint16("metaroce.ack.ecn_ce", "ECN CE marks", base.DEC)
f.status = ProtoField.uint8("metaroce.ack.status", "Status", base.DEC, ack_status)
f.ack_reserved = ProtoField.uint8("metaroce.ack.reserved", "Reserved", base.HEX)
f.rate_hint = ProtoField.uint32("metaroce.ack.rate_hint", "Receiver fair-share rate hint (kbit/s)", base.DEC)
f.ack_stream = ProtoField.uint32("metaroce.ack.stream", "Stream id", base.HEX)
f.ack_msn = ProtoField.uint32("metaroce.ack.stream_msn", "Stream MSN", base.DEC)
-- NAK
f.nak_code = ProtoField.uint8("metaroce.nak.code", "Code", base.DEC, nak_codes)
f.nak_rnr_timer = ProtoField.uint8("metaroce.nak.rnr_timer", "RNR timer (min_rnr_timer code, receiver not ready only)", base.DEC)
f.nak_reserved = ProtoField.uint16("metaroce.nak.reserved", "Reserved", base.HEX)
f.nak_stream = ProtoField.uint32("metaroce.nak.stream", "Stream id", base.HEX)
f.nak_msn = ProtoField.uint32("metaroce.nak.msn", "MSN of the failed message", base.DEC)
-- hello
f.epoch = ProtoField.uint32("metaroce.hello.epoch", "Sender's epoch", base.HEX)
f.isn = ProtoField.uint32("metaroce.hello.isn", "Sender's initial PSN", base.HEX)

local e_malformed = ProtoExpert.new("metaroce.malformed", "Malformed MetaRoCE packet",
	expert.group.MALFORMED, expert.severity.ERROR)
local e_rejection = ProtoExpert.new("metaroce.rejection", "The receiver rejected a message",
	expert.group.RESPONSE_CODE, expert.severity.NOTE)
p.experts = { e_malformed, e_rejection }

local COMMON, DATA_FIXED = 16, 20
local ACK_LEN, NAK_LEN, HELLO_LEN = 48, 12, 8
local DATA_FLAGS, ACK_FLAGS, HELLO_FLAGS = 0xff, 0x01, 0x01

local function bad(tree, item, why)
	(item or tree):add_proto_expert_info(e_malformed, why)
end

-- Bit operations on a byte, in plain arithmetic (Lua 5.2's bit32 library
-- and 5.4's operators are each missing in one of the Lua versions Wireshark
-- ships).
local function band8(a, b)
	local r, bit = 0, 1
	for _ = 1, 8 do
		if a % 2 == 1 and b % 2 == 1 then
			r = r + bit
		end
		a, b, bit = math.floor(a / 2), math.floor(b / 2), bit * 2
	end
	return r
end

local function has(flags, bit)
	return band8(flags, bit) ~= 0
end

local function popcount8(b)
	local n = 0
	while b > 0 do
		n = n + (b % 2)
		b = math.floor(b / 2)
	end
	return n
end

local function has_remote(op) return op == 2 or op == 3 or op == 4 or op == 6 or op == 7 end
local function has_imm(op) return op == 1 or op == 3 or op == 8 end
local function is_atomic(op) return op == 6 or op == 7 end
local function has_payload(op) return not (op == 4 or op == 6 or op == 7) end
local function consumes_receive(op) return op == 0 or op == 1 or op == 3 or op == 8 end

local function data(buf, tree, flags)
	local len = buf:len()
	if len < COMMON + DATA_FIXED then
		bad(tree, nil, "data header truncated")
		return "Data (truncated)"
	end
	local op = buf(16, 1):uint()
	local paylen = buf(18, 2):uint()
	local o = COMMON
	local opi = tree:add(f.opcode, buf(o, 1))
	tree:add(f.rsn, buf(o + 1, 1))
	tree:add(f.paylen, buf(o + 2, 2))
	tree:add(f.stream, buf(o + 4, 4))
	tree:add(f.msn, buf(o + 8, 4))
	local offset, msglen = buf(o + 12, 4):uint(), buf(o + 16, 4):uint()
	tree:add(f.offset, buf(o + 12, 4))
	tree:add(f.msglen, buf(o + 16, 4))
	if not opcodes[op] then
		bad(tree, opi, "unknown opcode " .. op)
		return "Data (unknown opcode)"
	end
	if buf(o + 1, 1):uint() ~= 0 and not consumes_receive(op) then
		bad(tree, opi, "a receive sequence number on an operation that consumes no receive")
	end
	o = o + DATA_FIXED
	local need = o + (has_remote(op) and 12 or 0) + (has_imm(op) and 4 or 0)
		+ (is_atomic(op) and 16 or 0) + (has(flags, 0x10) and 8 or 0)
	if len < need then
		bad(tree, nil, "optional parts truncated")
		return "Data (truncated)"
	end
	if has_remote(op) then
		tree:add(f.rkey, buf(o, 4))
		tree:add(f.raddr, buf(o + 4, 8))
		o = o + 12
	end
	if has_imm(op) then
		tree:add(op == 8 and f.invkey or f.imm, buf(o, 4))
		o = o + 4
	end
	if is_atomic(op) then
		tree:add(f.swap_add, buf(o, 8))
		tree:add(f.compare, buf(o + 8, 8))
		o = o + 16
	end
	if has(flags, 0x10) then
		tree:add(f.origin_path, buf(o, 2))
		local r = tree:add(f.origin_reserved, buf(o + 2, 2))
		if buf(o + 2, 2):uint() ~= 0 then
			bad(tree, r, "reserved field not zero")
		end
		tree:add(f.origin_psn, buf(o + 4, 4))
		o = o + 8
	end
	if len ~= o + paylen then
		bad(tree, nil, string.format("payload length %d, but %d bytes follow the header",
			paylen, len - o))
	elseif paylen > 0 then
		tree:add(f.payload, buf(o, paylen))
	end
	if has(flags, 0x20) and paylen ~= 0 then
		bad(tree, nil, "a void packet carries bytes")
	end
	if has(flags, 0x40) and not consumes_receive(op) then
		bad(tree, opi, "only a Send or a Write with Immediate is solicited")
	end
	if has(flags, 0x80) and not has(flags, 0x08) then
		bad(tree, nil, "DRY without ACK_REQ")
	end
	if not has_payload(op) and paylen ~= 0 then
		bad(tree, opi, "this operation carries no bytes")
	end
	if is_atomic(op) and msglen ~= 8 then
		bad(tree, opi, "an atomic's message length is 8")
	end
	if offset + paylen > msglen then
		bad(tree, nil, "payload outside its message")
	end
	return opcodes[op]
end

local function ack(buf, tree)
	if buf:len() ~= COMMON + ACK_LEN then
		bad(tree, nil, string.format("an ACK is %d bytes, not %d", COMMON + ACK_LEN, buf:len()))
		return "ACK (bad length)"
	end
	local o = COMMON
	tree:add(f.sack, buf(o, 32))
	local n = 0
	for i = 0, 31 do
		n = n + popcount8(buf(o + i, 1):uint())
	end
	tree:add(f.sack_count, n):set_generated()
	tree:add(f.ecn_ce, buf(o + 32, 2))
	local status = buf(o + 34, 1):uint()
	local si = tree:add(f.status, buf(o + 34, 1))
	local r = tree:add(f.ack_reserved, buf(o + 35, 1))
	tree:add(f.rate_hint, buf(o + 36, 4))
	tree:add(f.ack_stream, buf(o + 40, 4))
	tree:add(f.ack_msn, buf(o + 44, 4))
	if buf(o + 35, 1):uint() ~= 0 then
		bad(tree, r, "reserved field not zero")
	end
	if not ack_status[status] then
		bad(tree, si, "unknown status " .. status)
	elseif status ~= 0 then
		si:add_proto_expert_info(e_rejection, "message rejected: " .. ack_status[status])
	end
	return "ACK"
end

local function nak(buf, tree)
	if buf:len() ~= COMMON + NAK_LEN then
		bad(tree, nil, string.format("a NAK is %d bytes, not %d", COMMON + NAK_LEN, buf:len()))
		return "NAK (bad length)"
	end
	local o = COMMON
	local code = buf(o, 1):uint()
	local ci = tree:add(f.nak_code, buf(o, 1))
	local ti = tree:add(f.nak_rnr_timer, buf(o + 1, 1))
	local r = tree:add(f.nak_reserved, buf(o + 2, 2))
	tree:add(f.nak_stream, buf(o + 4, 4))
	tree:add(f.nak_msn, buf(o + 8, 4))
	local timer = buf(o + 1, 1):uint()
	if timer > 31 or (timer ~= 0 and code ~= 3) then
		bad(tree, ti, "RNR timer " .. timer .. " (a 5-bit code, on a receiver-not-ready NAK only)")
	end
	if buf(o + 2, 2):uint() ~= 0 then
		bad(tree, r, "reserved field not zero")
	end
	if not nak_codes[code] then
		bad(tree, ci, "unknown NAK code " .. code)
	else
		ci:add_proto_expert_info(e_rejection, nak_codes[code])
	end
	return "NAK"
end

local function hello(buf, tree)
	if buf:len() ~= COMMON + HELLO_LEN then
		bad(tree, nil, string.format("a hello is %d bytes, not %d", COMMON + HELLO_LEN, buf:len()))
		return "Hello (bad length)"
	end
	tree:add(f.epoch, buf(COMMON, 4))
	tree:add(f.isn, buf(COMMON + 4, 4))
	return "Hello"
end

local function datagram(buf, tree, flags)
	local o = COMMON
	if band8(flags, 1) ~= 0 then
		if buf:len() < o + 4 then
			bad(tree, nil, "the immediate data the IMM flag announces is missing")
			return "Datagram (truncated)"
		end
		tree:add(f.imm, buf(o, 4))
		o = o + 4
	end
	if buf:len() > o then
		tree:add(f.payload, buf(o))
	end
	return string.format("Datagram QP 0x%06x > QP 0x%06x, %d bytes", buf(8, 4):uint(),
		buf(4, 4):uint(), buf:len() - o)
end

function p.dissector(buf, pinfo, root)
	pinfo.cols.protocol = "MetaRoCE"
	local tree = root:add(p, buf())
	if buf:len() < COMMON then
		bad(tree, nil, "shorter than the 16-byte common header")
		pinfo.cols.info = "MetaRoCE (truncated)"
		return
	end
	local version = math.floor(buf(0, 1):uint() / 16)
	local ptype = buf(0, 1):uint() % 16
	local flags = buf(1, 1):uint()
	local vi = tree:add(f.version, buf(0, 1))
	local ti = tree:add(f.type, buf(0, 1))
	local fi = tree:add(f.flags, buf(1, 1))
	local allowed = 0
	if ptype == 1 then
		allowed = DATA_FLAGS
		for _, b in ipairs({ f.f_first, f.f_last, f.f_retransmit, f.f_ack_req, f.f_relocated, f.f_void, f.f_solicited, f.f_dry }) do
			fi:add(b, buf(1, 1))
		end
	elseif ptype == 2 then
		allowed = ACK_FLAGS
		fi:add(f.f_duplicate, buf(1, 1))
	elseif ptype == 4 then
		allowed = HELLO_FLAGS
		fi:add(f.f_challenge, buf(1, 1))
	elseif ptype == 5 then
		allowed = 0x41
		fi:add(f.f_imm, buf(1, 1))
		fi:add(f.f_solicited, buf(1, 1))
	end
	tree:add(f.path, buf(2, 2))
	if ptype == 5 then
		tree:add(f.dest_qpn, buf(4, 4))
		tree:add(f.src_qpn, buf(8, 4))
		tree:add(f.qkey, buf(12, 4))
	else
		tree:add(f.conn, buf(4, 4))
	end
	if ptype == 5 then
		-- read above
	elseif ptype == 1 then
		tree:add(f.psn, buf(8, 4))
		tree:add(f.timestamp, buf(12, 4))
	elseif ptype == 2 or ptype == 3 then
		tree:add(f.cumulative, buf(8, 4))
		tree:add(f.timestamp, buf(12, 4))
	else
		tree:add(f.psn, buf(8, 4))
		tree:add(f.word3, buf(12, 4))
	end
	if version ~= 4 then
		bad(tree, vi, "unknown version " .. version)
	end
	local unknown = band8(flags, 255 - allowed)
	if unknown ~= 0 then
		bad(tree, fi, string.format("unknown flags 0x%02x", unknown))
	end
	local what
	if ptype == 1 then
		what = data(buf, tree, flags)
	elseif ptype == 2 then
		what = ack(buf, tree)
	elseif ptype == 3 then
		what = nak(buf, tree)
	elseif ptype == 4 then
		what = hello(buf, tree)
	elseif ptype == 5 then
		what = datagram(buf, tree, flags)
	else
		bad(tree, ti, "unknown type " .. ptype)
		what = "unknown type"
	end
	pinfo.cols.info = string.format("%s path %d conn 0x%08x", what, buf(2, 2):uint(), buf(4, 4):uint())
end

DissectorTable.get("udp.port"):add(PORT, p)
