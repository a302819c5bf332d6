"""Cryptographic building blocks (docs/protocol.md §3): narrow, validated primitives."""

from reshuffle.crypto.channel import Channel, DHKeyPair
from reshuffle.crypto.encoding import Encoded, FixedPoint
from reshuffle.crypto.group import Element, Group, available_groups, get_group
from reshuffle.crypto.ot import OTReceiver, OTRequest, OTResponse, OTSender, OTTable
from reshuffle.crypto.prg import PRG
from reshuffle.crypto.rand import OS_RANDOM, SeededRandom
from reshuffle.crypto.shamir import Shamir, Share
from reshuffle.crypto.signatures import Certificate, CertificateAuthority, SigningKey, VerifyKey

__all__ = [
    "Certificate", "CertificateAuthority", "Channel", "DHKeyPair", "Element", "Encoded",
    "FixedPoint", "Group", "OS_RANDOM", "OTReceiver", "OTRequest", "OTResponse", "OTSender",
    "OTTable", "PRG", "SeededRandom", "Shamir", "Share", "SigningKey", "VerifyKey",
    "available_groups", "get_group",
]
