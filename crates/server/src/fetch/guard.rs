//! The SSRF guard: which addresses a media URL may reach.
//!
//! A URL's host is checked where it becomes an address: names in the DNS resolver reqwest uses for
//! every connection (the first and each redirect, so a name cannot resolve to a public address when
//! checked and a private one when used), IP literals in the URL before the request and in the
//! redirect policy on every hop.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Which addresses media URLs may reach: public ones, plus the networks an operator allows.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    /// `--media-allow-private`: anything goes.
    pub allow_all: bool,
    /// `--media-allowed-networks`: internal networks that are allowed anyway.
    pub allowed: Vec<IpNet>,
}

impl Guard {
    pub fn permits(&self, ip: IpAddr) -> bool {
        self.allow_all || is_public(ip) || self.allowed.iter().any(|n| n.contains(&ip))
    }
}

/// Whether a client-supplied URL may connect to `ip`: public unicast addresses only.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            // An IPv4 address in IPv6 clothing is judged as IPv4.
            if let Some(v4) = v6.to_ipv4_mapped().or_else(|| embedded_v4(v6)) {
                return is_public_v4(v4);
            }
            let seg = v6.segments();
            !(v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || (seg[0] & 0xfe00) == 0xfc00 // unique local (incl. cloud metadata fd00:ec2::254)
                || (seg[0] & 0xffc0) == 0xfe80 // link-local
                || (seg[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
                || (seg[0] == 0x2001 && seg[1] == 0x0db8)) // documentation
        }
    }
}

/// IPv4 carried by IPv4-compatible (`::a.b.c.d`) and NAT64 (`64:ff9b::a.b.c.d`) addresses.
fn embedded_v4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let compat = s[..6].iter().all(|&x| x == 0) && (s[6] != 0 || s[7] > 1);
    let nat64 = s[0] == 0x64 && s[1] == 0xff9b && s[2..6].iter().all(|&x| x == 0);
    (compat || nat64).then(|| Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8))
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local() // 169.254/16: cloud metadata endpoints
        || ip.is_broadcast()
        || ip.is_multicast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b)) // carrier-grade NAT
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || a >= 240) // reserved
}

/// The refusal message for an address.
pub fn refused(ip: IpAddr) -> String {
    format!(
        "refused to fetch from {ip}: private, loopback, link-local and metadata addresses are not allowed \
         (see --media-allowed-networks)"
    )
}

/// A resolver that drops addresses the guard refuses, and fails when none is left.
pub struct GuardedResolver(pub Guard);

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let guard = self.0.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = all.iter().copied().filter(|a| guard.permits(a.ip())).collect();
            if allowed.is_empty() {
                let msg = match all.first() {
                    Some(a) => format!("{host}: {}", refused(a.ip())),
                    None => format!("{host} did not resolve"),
                };
                return Err(msg.into());
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_internal_addresses() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.100.100.200",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            "::7f00:1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip} should be refused");
        }
        for ip in ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"] {
            assert!(is_public(ip.parse().unwrap()), "{ip} should be allowed");
        }
    }

    #[test]
    fn allowed_networks_open_only_themselves() {
        let g = Guard { allow_all: false, allowed: vec!["127.0.0.0/8".parse().unwrap()] };
        assert!(g.permits("127.0.0.2".parse().unwrap()));
        assert!(g.permits("8.8.8.8".parse().unwrap()));
        assert!(!g.permits("169.254.169.254".parse().unwrap()));
        assert!(!g.permits("::1".parse().unwrap()));
        assert!(Guard { allow_all: true, allowed: vec![] }.permits("10.0.0.1".parse().unwrap()));
    }
}
