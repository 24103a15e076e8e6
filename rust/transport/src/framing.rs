// SPDX-License-Identifier: GPL-2.0

//! Framing: how MetaRoCE packets sit in UDP datagrams.

/// The UDP destination port of MetaRoCE. It is not RoCEv2's 4791, so that
/// `rdma_rxe` and MetaRoCE can run side by side on one host.
pub const UDP_PORT: u16 = 4792;

/// The RoCEv2 port, which MetaRoCE must never use.
pub const ROCEV2_UDP_PORT: u16 = 4791;

/// Bytes of IP header budgeted per packet: IPv6's 40, the larger of the two.
pub const IP_HEADER: u32 = 40;

/// Bytes of UDP header.
pub const UDP_HEADER: u32 = 8;

/// Bytes reserved for the widest MetaRoCE header (a relocated atomic: common,
/// data, remote, operands and origin parts).
pub const TRANSPORT_HEADER_MAX: u32 = 72;

/// All header bytes below the payload of one packet.
pub const HEADER_OVERHEAD: u32 = IP_HEADER + UDP_HEADER + TRANSPORT_HEADER_MAX;

/// The largest payload one packet can carry on a link with MTU `link_mtu`
/// (0 when the link cannot even carry the headers).
pub const fn max_payload(link_mtu: u32) -> u32 {
    link_mtu.saturating_sub(HEADER_OVERHEAD)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_differs_from_rocev2() {
        assert_ne!(UDP_PORT, ROCEV2_UDP_PORT);
    }

    #[test]
    fn payload_of_standard_ethernet() {
        assert_eq!(max_payload(1500), 1500 - 120);
        assert_eq!(HEADER_OVERHEAD, 120);
    }

    #[test]
    fn payload_never_underflows() {
        assert_eq!(max_payload(0), 0);
        assert_eq!(max_payload(HEADER_OVERHEAD), 0);
        assert_eq!(max_payload(HEADER_OVERHEAD + 1), 1);
    }
}
