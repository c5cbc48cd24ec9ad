"""Population sizes as they may leave a site: a power-of-two range, never the exact count.

An exact patient count (or a count that changes by one between two rounds) tells the server
whether one patient joined or left; the site's own audit log keeps the exact figures.
"""

from __future__ import annotations


def bucket_floor(n: int) -> int:
    """The largest power of two ≤ n (0 for n ≤ 0): a weight the server may use instead of n."""
    return 0 if n <= 0 else 1 << (int(n).bit_length() - 1)


def size_bucket(n: int) -> str:
    """'0', '1', '2-3', '4-7', …: the range of n as text for records the server copies."""
    low = bucket_floor(n)
    return str(low) if low <= 1 else f"{low}-{2 * low - 1}"
