// SPDX-License-Identifier: GPL-2.0

//! KUnit tests of the addresses a queue pair is given: QP numbers
//! (`shared::next_free_qpn`) and the IP address classes that decide where a
//! QP may send (`abstractions::types::IpAddr`).

use kernel::prelude::*;

#[kunit_tests(metaroce_addresses)]
mod tests {
    use crate::abstractions::types::IpAddr;
    use crate::driver::shared::{next_free_qpn, FIRST_QPN, QPN_MASK};
    use kernel::{prelude::*, str::CString};

    #[test]
    fn qp_numbers_have_24_bits_and_are_unique() {
        assert_eq!(next_free_qpn(0, |_| false), Some(FIRST_QPN));
        assert_eq!(next_free_qpn(0x20, |_| false), Some(0x21));
        // Past 2^24 - 1 they wrap to the first ordinary number, skipping
        // 0, 1 and the live ones.
        assert_eq!(next_free_qpn(QPN_MASK, |_| false), Some(FIRST_QPN));
        assert_eq!(
            next_free_qpn(QPN_MASK, |q| q == FIRST_QPN),
            Some(FIRST_QPN + 1)
        );
        assert_eq!(next_free_qpn(u32::MAX, |_| false), Some(FIRST_QPN));
        assert_eq!(next_free_qpn(0x80, |q| q == 0x81 || q == 0x82), Some(0x83));
        // The multicast QP number is never handed out.
        assert_eq!(next_free_qpn(QPN_MASK - 1, |_| false), Some(FIRST_QPN));
    }

    fn v6(groups: [u16; 8]) -> IpAddr {
        let mut a = [0u8; 16];
        for (i, g) in groups.iter().enumerate() {
            a[2 * i..2 * i + 2].copy_from_slice(&g.to_be_bytes());
        }
        IpAddr(a)
    }

    #[test]
    fn multicast_addresses_are_told_apart() {
        assert!(IpAddr::from_v4([239, 1, 2, 3]).is_multicast());
        assert!(IpAddr::from_v4([224, 0, 0, 1]).is_multicast());
        assert!(!IpAddr::from_v4([10, 0, 0, 1]).is_multicast());
        assert!(!IpAddr::from_v4([240, 0, 0, 1]).is_multicast());
        assert!(v6([0xff02, 0, 0, 0, 0, 0, 0, 1]).is_multicast());
        assert!(!v6([0xfe80, 0, 0, 0, 0, 0, 0, 1]).is_multicast());
        assert!(!IpAddr::default().is_multicast());
    }

    #[test]
    fn destinations_are_unicast() {
        assert!(IpAddr::from_v4([10, 0, 0, 1]).is_unicast());
        assert!(!IpAddr::from_v4([0, 0, 0, 0]).is_unicast());
        assert!(!IpAddr::from_v4([224, 0, 0, 1]).is_unicast());
        assert!(!IpAddr::from_v4([255, 255, 255, 255]).is_unicast());
        assert!(!IpAddr::default().is_unicast());
        assert!(v6([0, 0, 0, 0, 0, 0, 0, 1]).is_unicast());
        assert!(v6([0xfe80, 0, 0, 0, 0x1234, 0, 0, 1]).is_unicast());
        assert!(v6([0xfd00, 0, 0, 0, 0, 0, 0, 2]).is_unicast());
        assert!(!v6([0xff02, 0, 0, 0, 0, 0, 0, 1]).is_unicast());
        // IPv4-compatible (deprecated) and other ::/96 forms.
        assert!(!v6([0, 0, 0, 0, 0, 0, 0x0a00, 1]).is_unicast());
        assert!(v6([0xfe80, 0, 0, 0, 0, 0, 0, 1]).is_link_local());
        assert!(v6([0xfebf, 0, 0, 0, 0, 0, 0, 1]).is_link_local());
        assert!(!v6([0xfec0, 0, 0, 0, 0, 0, 0, 1]).is_link_local());
        assert!(!IpAddr::from_v4([169, 254, 0, 1]).is_link_local());
        // An IPv6 datagram from the IPv4-mapped form of a peer's address
        // must not pass for that IPv4 peer.
        assert_eq!(
            IpAddr::from_ipv6_header(IpAddr::from_v4([10, 0, 0, 2]).0),
            None
        );
        let global = v6([0xfd00, 0, 0, 0, 0, 0, 0, 2]);
        assert_eq!(IpAddr::from_ipv6_header(global.0), Some(global));
    }

    #[test]
    fn addresses_print_in_rfc_5952_form() -> Result {
        let text = |a: IpAddr| CString::try_from_fmt(fmt!("{}", a));
        let cases = [
            (IpAddr::from_v4([10, 0, 0, 2]), c"10.0.0.2"),
            (
                v6([0xfe80, 0, 0, 0, 0x1234, 0x56ff, 0xfe78, 0x9abc]),
                c"fe80::1234:56ff:fe78:9abc",
            ),
            (v6([0xfd00, 0, 0, 0, 0, 0, 0, 2]), c"fd00::2"),
            (v6([0, 0, 0, 0, 0, 0, 0, 1]), c"::1"),
            (v6([0, 0, 0, 0, 0, 0, 0, 0]), c"::"),
            (v6([0x2001, 0xdb8, 0, 1, 0, 0, 0, 1]), c"2001:db8:0:1::1"),
            (v6([0x2001, 0xdb8, 0, 0, 1, 0, 0, 1]), c"2001:db8::1:0:0:1"),
            (v6([1, 2, 3, 4, 5, 6, 7, 0]), c"1:2:3:4:5:6:7:0"),
            (v6([0xff02, 0, 0, 0, 0, 0, 0, 0]), c"ff02::"),
        ];
        for (a, want) in cases {
            assert_eq!(text(a)?.to_bytes(), want.to_bytes());
        }
        Ok(())
    }
}
