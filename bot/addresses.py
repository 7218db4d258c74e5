"""Which IP addresses are public, and which network an address belongs to, by our own lists (not the
interpreter's `is_global`, whose answers change between Python versions and miss some ranges).

    is_public_address(a)  IPv4: not in NON_PUBLIC_V4 (IANA's IPv4 Special-Purpose Address Registry,
                          plus multicast and the reserved 240/4).
                          IPv6: an address that carries an IPv4 one (IPv4-mapped ::ffff:0:0/96,
                          IPv4-translated ::ffff:0:0:0/96, IPv4-compatible ::/96, NAT64 64:ff9b::/96, 6to4
                          2002::/16) is public only when that IPv4 address is; any other only inside global
                          unicast 2000::/3 and outside NON_PUBLIC_V6 (IANA's IPv6 Special-Purpose Address
                          Registry, plus site-local fec0::/10 and multicast).
    network_of(address)   the /24 (IPv4) or /64 (IPv6) it is in: what one client can be assumed to hold, for
                          limits per client (an IPv6 user usually has a whole /64).

The feed's redirects (`bot.feed`) are followed only to public addresses; the install flow (`bot.server`)
counts install pages per network.
"""

from __future__ import annotations

import ipaddress
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

# https://www.iana.org/assignments/iana-ipv4-special-registry: every block not globally reachable, and the
# ones that are but never host a web server (6to4 relay anycast, deprecated), as one list.
NON_PUBLIC_V4 = tuple(IPv4Network(block) for block in (
    "0.0.0.0/8",           # "this network"
    "10.0.0.0/8",          # private use
    "100.64.0.0/10",       # shared address space (carrier-grade NAT; some clouds' metadata)
    "127.0.0.0/8",         # loopback
    "169.254.0.0/16",      # link local (cloud metadata at 169.254.169.254)
    "172.16.0.0/12",       # private use
    "192.0.0.0/24",        # IETF protocol assignments
    "192.0.2.0/24",        # documentation (TEST-NET-1)
    "192.88.99.0/24",      # 6to4 relay anycast (deprecated)
    "192.168.0.0/16",      # private use
    "198.18.0.0/15",       # benchmarking
    "198.51.100.0/24",     # documentation (TEST-NET-2)
    "203.0.113.0/24",      # documentation (TEST-NET-3)
    "224.0.0.0/4",         # multicast
    "240.0.0.0/4",         # reserved (and 255.255.255.255, limited broadcast)
))

# https://www.iana.org/assignments/iana-ipv6-special-registry: every block not globally reachable (most lie
# outside 2000::/3 and are refused by that rule too; listed so the list reads as the registry does).
NON_PUBLIC_V6 = tuple(IPv6Network(block) for block in (
    "::/128",              # unspecified
    "::1/128",             # loopback
    "64:ff9b:1::/48",      # local-use IPv4/IPv6 translation (RFC 8215)
    "100::/64",            # discard-only
    "100:0:0:1::/64",      # dummy prefix
    "2001::/23",           # IETF protocol assignments (Teredo 2001::/32, ORCHID, benchmarking ...)
    "2001:db8::/32",       # documentation
    "3fff::/20",           # documentation
    "5f00::/16",           # segment routing (SRv6) SIDs
    "fc00::/7",            # unique local
    "fe80::/10",           # link local
    "fec0::/10",           # site local (deprecated by RFC 3879, never global)
    "ff00::/8",            # multicast
))
GLOBAL_UNICAST = IPv6Network("2000::/3")

# IPv6 blocks whose addresses carry an IPv4 address in their last 32 bits.
CARRY_V4_LOW = tuple(IPv6Network(block) for block in (
    "::ffff:0:0/96",       # IPv4-mapped
    "::ffff:0:0:0/96",     # IPv4-translated (SIIT)
    "64:ff9b::/96",        # NAT64, the well-known prefix
    "::/96",               # IPv4-compatible (deprecated); :: and ::1 are refused above
))
SIX_TO_FOUR = IPv6Network("2002::/16")  # 6to4: the IPv4 address in bits 16-48


def carried_ipv4(address: IPv6Address) -> IPv4Address | None:
    """The IPv4 address an IPv6 address carries (see CARRY_V4_LOW and SIX_TO_FOUR), or None."""
    if any(address in block for block in CARRY_V4_LOW) and address not in NON_PUBLIC_V6:
        return IPv4Address(int(address) & 0xFFFFFFFF)
    if address in SIX_TO_FOUR:
        return IPv4Address((int(address) >> 80) & 0xFFFFFFFF)
    return None


def is_public_address(address: IPv4Address | IPv6Address) -> bool:
    """Whether `address` is public by our lists (see the module's docstring)."""
    if isinstance(address, IPv4Address):
        return not any(address in block for block in NON_PUBLIC_V4)
    if address.scope_id:  # fe80::1%eth0: a zone only a local address has
        return False
    carried = carried_ipv4(address)
    if carried is not None:
        return is_public_address(carried)
    return address in GLOBAL_UNICAST and not any(address in block for block in NON_PUBLIC_V6)


def network_of(address: str) -> str:
    """The /24 (IPv4, also IPv4-mapped IPv6) or /64 (IPv6) network `address` is in, as text; a value that is
    not an IP address (a Unix socket's peer, "-") stands for itself."""
    try:
        ip = ipaddress.ip_address(address.strip().strip("[]").partition("%")[0])
    except ValueError:
        return address[:64]
    if isinstance(ip, IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    prefix = 24 if isinstance(ip, IPv4Address) else 64
    return str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))
