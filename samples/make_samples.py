# ruff: noqa: E501, RUF001, W293
"""Write the bundled sample transcripts in ``samples/`` (run from the repo root: ``python samples/make_samples.py``).

Every sample is a small, coherent agent session written for ctxc (nothing is copied from real logs); only the
record shapes follow what real tools write (see ``../shared/corpus/FORMATS.md``). Output is deterministic: ids
come from seeded ``random.Random`` instances and every timestamp from a fixed start, so re-running the script
rewrites identical bytes. After writing, the script checks its own output (JSON per line, call/result pairing,
sizes, Korean text, an error and a >= 20 KB tool result per sample) and exits non-zero if a check fails.
"""

from __future__ import annotations

import base64
import difflib
import json
import random
import re
import string
import struct
import sys
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import orjson

OUT = Path(__file__).resolve().parent
B62 = string.digits + string.ascii_letters

# ------------------------------------------------------------------------------------------------ helpers


class Gen:
    """Deterministic ids and a clock for one sample."""

    def __init__(self, seed: int, start: str) -> None:
        self.rng = random.Random(seed)
        self.t = datetime.fromisoformat(start)

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def b62(self, n: int) -> str:
        return "".join(self.rng.choice(B62) for _ in range(n))

    def hex(self, n: int) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(n))

    def tick(self, lo: float, hi: float | None = None) -> str:
        self.t += timedelta(seconds=lo if hi is None else self.rng.uniform(lo, hi))
        return self.now()

    def now(self) -> str:
        return self.t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.t.microsecond // 1000:03d}Z"


def approx_tokens(text: str) -> int:
    """A rough token estimate, used only to make recorded usage numbers grow plausibly."""
    return max(1, round(len(text.encode("utf-8")) / 3.6))


def numbered(text: str, start: int = 1) -> str:
    """Claude Code's Read tool output: right-aligned line numbers and an arrow."""
    return "\n".join(f"{n:>6}→{line}" for n, line in enumerate(text.split("\n"), start))


def line_of(text: str, needle: str) -> int:
    for n, line in enumerate(text.split("\n"), 1):
        if needle in line:
            return n
    raise ValueError(needle)


def esc(value: str) -> str:
    """How pytest shows non-ASCII parametrize ids."""
    return value.encode("unicode_escape").decode("ascii")


def unified(path: str, old: str, new: str) -> str:
    return "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=3
        )
    )


def structured_patch(old: str, new: str) -> list[dict[str, Any]]:
    """Claude Code's ``structuredPatch``: the hunks of a 3-line-context unified diff."""
    hunks: list[dict[str, Any]] = []
    for line in difflib.unified_diff(old.split("\n"), new.split("\n"), lineterm="", n=3):
        m = re.match(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", line)
        if m:
            hunks.append(
                {
                    "oldStart": int(m[1]),
                    "oldLines": int(m[2] or 1),
                    "newStart": int(m[3]),
                    "newLines": int(m[4] or 1),
                    "lines": [],
                }
            )
        elif hunks:
            hunks[-1]["lines"].append(line)
    return hunks


def snippet(text: str, needle: str, before: int = 4, after: int = 6) -> str:
    lines = text.split("\n")
    at = line_of(text, needle) - 1
    lo, hi = max(0, at - before), min(len(lines), at + after + 1)
    return numbered("\n".join(lines[lo:hi]), lo + 1)


def git_counts(plus: int, minus: int) -> str:
    """The tail of git's shortstat line, singular where git uses the singular."""
    return f"{plus} insertion{'s' * (plus != 1)}(+), {minus} deletion{'s' * (minus != 1)}(-)"


def pytest_sep(ch: str, title: str = "", width: int = 80) -> str:
    if not title:
        return ch * width
    n = max((width - len(title) - 2) // 2, 1)
    line = f"{ch * n} {title} {ch * n}"
    return line + ch if len(line) < width else line


def pytest_verbose_lines(results: list[tuple[str, str]], width: int = 80) -> list[str]:
    out = []
    for i, (nodeid, status) in enumerate(results, 1):
        left, pct = f"{nodeid} {status}", f"[{i * 100 // len(results):3d}%]"
        out.append(left + " " * max(width - len(left) - len(pct), 1) + pct)
    return out


def pytest_quiet_lines(results: list[str], width: int = 80) -> list[str]:
    per = width - 7
    out = []
    for start in range(0, len(results), per):
        chunk = "".join(results[start : start + per])
        done = min(start + per, len(results))
        out.append(f"{chunk:<{per}} [{done * 100 // len(results):3d}%]")
    return out


def png(width: int, height: int, pixel: Callable[[int, int], tuple[int, int, int]]) -> bytes:
    """A real RGB PNG built with zlib and struct (filter 0 on every row)."""
    rows = b"".join(b"\x00" + bytes(c for x in range(width) for c in pixel(x, y)) for y in range(height))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    )


def spreadsheet_png() -> bytes:
    """64x48: a spreadsheet with a green header row and noisy 'garbled' cell text."""
    noise = random.Random(7)
    dots = {(x, y) for x in range(64) for y in range(10, 48) if noise.random() < 0.12}

    def pixel(x: int, y: int) -> tuple[int, int, int]:
        if y < 8:
            return (33, 115, 70) if x > 2 else (255, 255, 255)
        if y % 8 == 0 or x % 16 == 0:
            return (212, 212, 212)
        if (x, y) in dots and y % 8 in (3, 4, 5):
            return (40, 40, 40)
        return (255, 255, 255)

    return png(64, 48, pixel)


def error_graph_png() -> bytes:
    """64x48: a dark dashboard panel whose 5xx line spikes in the last third."""

    def level(x: int) -> int:
        return 40 if x < 42 else 40 - min(30, (x - 42) * 4)

    def pixel(x: int, y: int) -> tuple[int, int, int]:
        if y in (0, 47) or x in (0, 63):
            return (60, 63, 70)
        if abs(y - level(x)) <= 0 or (x > 42 and level(x - 1) >= y >= level(x)):
            return (242, 73, 92)
        if y % 12 == 0:
            return (44, 47, 54)
        return (24, 27, 31)

    return png(64, 48, pixel)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def write_jsonl(path: Path, lines: Iterable[bytes]) -> None:
    with path.open("wb") as f:
        for line in lines:
            f.write(line + b"\n")


def compact(records: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    for r in records:
        yield orjson.dumps(r)


def spaced(records: Iterable[dict[str, Any]], *, ascii_only: bool) -> Iterator[bytes]:
    """Python ``json.dumps`` style (``", "`` separators), as files written by Python scripts look."""
    for r in records:
        yield json.dumps(r, ensure_ascii=ascii_only).encode("utf-8")


# ================================================================================================
# Sample 1: Claude Code session, Korean-speaking user, KRW coupon rounding bug in a small shop app
# ================================================================================================

PRICING_PY = r'''"""Cart pricing: line totals, coupons, shipping, VAT and the final breakdown.

Money is always a ``Decimal`` rounded to the currency's minor unit (the ISO 4217
exponent). KRW and JPY have no minor unit, so their amounts are whole numbers.
Each step (discount, shipping, tax) is rounded once, so the numbers printed on
the receipt add up exactly to the total that is charged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, Decimal
from enum import Enum

from minishop.errors import CouponError, PricingError
from minishop.models import Cart, CartLine, Coupon

log = logging.getLogger(__name__)

__all__ = [
    "CURRENCY_EXPONENTS",
    "DiscountKind",
    "PriceBreakdown",
    "coupon_discount",
    "format_money",
    "line_total",
    "minor_unit",
    "price_cart",
    "shipping_fee",
    "split_evenly",
    "tax_for",
]

CURRENCY_EXPONENTS: dict[str, int] = {
    "KRW": 0,
    "JPY": 0,
    "USD": 2,
    "EUR": 2,
}

CURRENCY_SYMBOLS: dict[str, str] = {
    "KRW": "₩",
    "JPY": "¥",
    "USD": "$",
    "EUR": "€",
}

#: Orders at or above this amount (after discounts) ship for free.
FREE_SHIPPING_OVER: dict[str, Decimal] = {
    "KRW": Decimal("50000"),
    "JPY": Decimal("5000"),
    "USD": Decimal("49.00"),
    "EUR": Decimal("45.00"),
}

FLAT_SHIPPING: dict[str, Decimal] = {
    "KRW": Decimal("3000"),
    "JPY": Decimal("500"),
    "USD": Decimal("5.99"),
    "EUR": Decimal("4.90"),
}

#: Islands pay a surcharge on top of flat shipping (도서산간 추가 배송비).
REMOTE_SURCHARGE_KRW = Decimal("3000")
REMOTE_REGIONS = ("KR-49", "KR-47-ULL")

# VAT by destination region. Korea is a flat 10%, but duty-free pickup at the
# Jeju airport shop is exempt, so rates are keyed by region and not by country.
REGION_VAT: dict[str, Decimal] = {
    "KR-11": Decimal("0.10"),  # 서울특별시
    "KR-26": Decimal("0.10"),  # 부산광역시
    "KR-27": Decimal("0.10"),  # 대구광역시
    "KR-28": Decimal("0.10"),  # 인천광역시
    "KR-29": Decimal("0.10"),  # 광주광역시
    "KR-30": Decimal("0.10"),  # 대전광역시
    "KR-31": Decimal("0.10"),  # 울산광역시
    "KR-50": Decimal("0.10"),  # 세종특별자치시
    "KR-41": Decimal("0.10"),  # 경기도
    "KR-42": Decimal("0.10"),  # 강원특별자치도
    "KR-43": Decimal("0.10"),  # 충청북도
    "KR-44": Decimal("0.10"),  # 충청남도
    "KR-45": Decimal("0.10"),  # 전북특별자치도
    "KR-46": Decimal("0.10"),  # 전라남도
    "KR-47": Decimal("0.10"),  # 경상북도
    "KR-47-ULL": Decimal("0.10"),  # 울릉군 (도서산간)
    "KR-48": Decimal("0.10"),  # 경상남도
    "KR-49": Decimal("0.10"),  # 제주특별자치도
    "KR-49-DF": Decimal("0"),  # 제주 지정면세점: 부가세 면제
    "JP-13": Decimal("0.10"),  # Tokyo
    "JP-27": Decimal("0.10"),  # Osaka
    "US-CA": Decimal("0.0725"),
    "US-NY": Decimal("0.04"),
    "US-OR": Decimal("0"),
    "US-WA": Decimal("0.065"),
    "DE-BE": Decimal("0.19"),
    "FR-75": Decimal("0.20"),
}


class DiscountKind(str, Enum):
    PERCENT = "percent"
    FIXED = "fixed"
    BUY_X_GET_Y = "bxgy"


@dataclass(frozen=True)
class PriceBreakdown:
    """What the receipt shows. ``total`` is exactly the sum of the other parts."""

    subtotal: Decimal
    discount: Decimal
    shipping: Decimal
    tax: Decimal
    total: Decimal
    currency: str
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, str]:
        return {
            "subtotal": str(self.subtotal),
            "discount": str(self.discount),
            "shipping": str(self.shipping),
            "tax": str(self.tax),
            "total": str(self.total),
            "currency": self.currency,
        }


def minor_unit(currency: str) -> Decimal:
    """The smallest amount of ``currency``: ``Decimal("1")`` for KRW, ``Decimal("0.01")`` for USD."""
    try:
        exponent = CURRENCY_EXPONENTS[currency]
    except KeyError:
        raise PricingError(f"unsupported currency: {currency!r}") from None
    return Decimal(1).scaleb(-exponent)


def _quantize(amount: Decimal, currency: str) -> Decimal:
    """Round ``amount`` to the currency's minor unit."""
    return amount.quantize(minor_unit(currency))


def line_total(line: CartLine, currency: str) -> Decimal:
    if line.quantity <= 0:
        raise PricingError(f"quantity must be positive for {line.sku}, got {line.quantity}")
    return _quantize(line.unit_price * line.quantity, currency)


def subtotal(lines: Iterable[CartLine], currency: str) -> Decimal:
    return sum((line_total(line, currency) for line in lines), Decimal(0))


def _eligible_lines(cart: Cart, coupon: Coupon) -> list[CartLine]:
    if not coupon.skus:
        return list(cart.lines)
    return [line for line in cart.lines if line.sku in coupon.skus]


def coupon_discount(cart: Cart, coupon: Coupon | None) -> Decimal:
    """The discount ``coupon`` gives on ``cart``; never more than the eligible amount."""
    if coupon is None:
        return Decimal(0)
    if coupon.currency is not None and coupon.currency != cart.currency:
        raise CouponError(f"coupon {coupon.code} is for {coupon.currency}, cart is {cart.currency}")
    lines = _eligible_lines(cart, coupon)
    eligible = subtotal(lines, cart.currency)
    if eligible < coupon.minimum_spend:
        raise CouponError(
            f"coupon {coupon.code} needs a minimum spend of {coupon.minimum_spend}, cart has {eligible}"
        )
    kind = DiscountKind(coupon.kind)
    if kind is DiscountKind.PERCENT:
        raw = eligible * coupon.value / Decimal(100)
    elif kind is DiscountKind.FIXED:
        raw = coupon.value
    else:
        raw = _buy_x_get_y(lines, coupon)
    if coupon.max_discount is not None:
        raw = min(raw, coupon.max_discount)
    return min(_quantize(raw, cart.currency), eligible)


def _buy_x_get_y(lines: Sequence[CartLine], coupon: Coupon) -> Decimal:
    """The cheapest units are free: for every ``buy`` units bought, ``get`` more cost nothing."""
    buy, get = int(coupon.value), coupon.free_units
    prices = sorted(p for line in lines for p in [line.unit_price] * line.quantity)
    free_count = (len(prices) // (buy + get)) * get
    return sum(prices[:free_count], Decimal(0))


def shipping_fee(currency: str, amount_after_discount: Decimal, region: str) -> Decimal:
    if amount_after_discount >= FREE_SHIPPING_OVER[currency]:
        fee = Decimal(0)
    else:
        fee = FLAT_SHIPPING[currency]
    if currency == "KRW" and region in REMOTE_REGIONS:
        fee += REMOTE_SURCHARGE_KRW
    return fee


def tax_for(region: str, taxable: Decimal, currency: str) -> Decimal:
    try:
        rate = REGION_VAT[region]
    except KeyError:
        raise PricingError(f"no VAT rate configured for region {region!r}") from None
    return _quantize(taxable * rate, currency)


def price_cart(cart: Cart, *, coupon: Coupon | None = None, region: str) -> PriceBreakdown:
    """Price ``cart`` for delivery to ``region``.

    Tax is charged on the goods after the discount. Shipping is not taxed here:
    the carrier invoices its own VAT.
    """
    if not cart.lines:
        raise PricingError("cannot price an empty cart")
    currency = cart.currency
    sub = subtotal(cart.lines, currency)
    discount = coupon_discount(cart, coupon)
    after_discount = sub - discount
    shipping = shipping_fee(currency, after_discount, region)
    tax = tax_for(region, after_discount, currency)
    notes: list[str] = []
    if coupon is not None and discount:
        notes.append(f"coupon {coupon.code}: -{format_money(discount, currency)}")
    if shipping == 0:
        notes.append("free shipping")
    total = after_discount + shipping + tax
    log.debug("priced cart %s for %s: %s", cart.id, region, total)
    return PriceBreakdown(sub, discount, shipping, tax, total, currency, tuple(notes))


def format_money(amount: Decimal, currency: str, *, locale: str = "en") -> str:
    """``₩12,345`` in English, ``12,345원`` in Korean; other currencies keep their symbol."""
    amount = _quantize(amount, currency)
    exponent = CURRENCY_EXPONENTS[currency]
    sign = "-" if amount < 0 else ""
    digits = f"{abs(amount):,.{exponent}f}"
    if locale == "ko" and currency == "KRW":
        return f"{sign}{digits}원"
    return f"{sign}{CURRENCY_SYMBOLS[currency]}{digits}"


def split_evenly(amount: Decimal, parts: int, currency: str) -> list[Decimal]:
    """Split ``amount`` into ``parts`` shares that add up exactly (분할 결제).

    Shares are floored to the minor unit and the remainder goes to the first
    shares, one minor unit each, so that nobody pays more than one unit extra.
    """
    if parts <= 0:
        raise PricingError("parts must be positive")
    unit = minor_unit(currency)
    share = (amount / parts).quantize(unit, rounding=ROUND_DOWN)
    remainder = amount - share * parts
    extra = int(remainder / unit)
    return [share + unit if i < extra else share for i in range(parts)]
'''

PRICING_OLD_QUANTIZE = '''def _quantize(amount: Decimal, currency: str) -> Decimal:
    """Round ``amount`` to the currency's minor unit."""
    return amount.quantize(minor_unit(currency))'''

PRICING_NEW_QUANTIZE = '''def _quantize(amount: Decimal, currency: str) -> Decimal:
    """Round ``amount`` to the currency's minor unit, halves away from zero.

    ``Decimal.quantize`` defaults to banker's rounding (ROUND_HALF_EVEN), which
    turns a 1,234.5원 discount into 1,234원. Receipts and the points ledger
    round half up, so money must too.
    """
    return amount.quantize(minor_unit(currency), rounding=ROUND_HALF_UP)'''

PRICING_OLD_IMPORT = "from decimal import ROUND_DOWN, Decimal"
PRICING_NEW_IMPORT = "from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal"

MINISHOP_GREP = """minishop/pricing.py:{q}:    return amount.quantize(minor_unit(currency))
minishop/pricing.py:{s}:    share = (amount / parts).quantize(unit, rounding=ROUND_DOWN)
minishop/points.py:38:    return (amount * rate).quantize(Decimal("1"), rounding=ROUND_HALF_UP)
minishop/points.py:57:        earned = (order.total * POINT_RATE).quantize(Decimal("1"), rounding=ROUND_HALF_UP)
minishop/reports/settlement.py:112:        fee = (gross * row.fee_rate).quantize(Decimal("1"), rounding=ROUND_HALF_UP)
minishop/reports/settlement.py:148:    return {k: v.quantize(Decimal("0.01")) for k, v in totals.items()}"""


def _minishop_tests() -> list[str]:
    """Node ids of the minishop test suite, in collection order."""
    ids: list[str] = []
    f = "tests/test_api_orders.py::"
    ids += [
        f + n
        for n in (
            "test_create_order_returns_201",
            "test_create_order_requires_login",
            "test_create_order_rejects_empty_cart",
            "test_create_order_is_idempotent_with_key",
            "test_create_order_reserves_stock",
            "test_create_order_rejects_unknown_region",
        )
    ]
    ids += [f + f"test_get_order[{c}]" for c in ("own-200", "other_user-403", "missing-404", "admin-200")]
    ids += [f + f"test_list_orders_pagination[{p}]" for p in range(1, 6)]
    ids += [
        f + f"test_cancel_order[{s}]"
        for s in ("pending", "paid", "preparing", "shipped", "delivered", "refunded")
    ]
    ids += [f + f"test_partial_refund[{a}]" for a in ("1000", "5000", "12345", "full")]
    ids += [f + "test_order_webhook_signature", f + "test_order_export_requires_admin"]
    f = "tests/test_auth.py::"
    ids += [
        f + n
        for n in (
            "test_login_ok",
            "test_login_wrong_password",
            "test_login_locked_after_five_failures",
            "test_logout_clears_session",
            "test_password_reset_token_expires",
            "test_password_reset_token_single_use",
            "test_session_cookie_flags",
            "test_csrf_required_on_post",
            "test_social_login_kakao_callback",
            "test_social_login_naver_callback",
        )
    ]
    ids += [f + f"test_password_policy[{p}]" for p in ("short", "no_digit", "common", "ok")]
    f = "tests/test_cart.py::"
    skus = ("SKU-1001", "SKU-1002", "SKU-1040", "SKU-2002", "SKU-2210", "SKU-3100", "SKU-3105", "SKU-4420")
    ids += [f + f"test_add_item[{s}-{q}]" for s in skus for q in (1, 2, 5, 10)]
    ids += [f + f"test_update_quantity[{s}-{q}]" for s in skus[:5] for q in (0, 3)]
    ids += [
        f + n
        for n in (
            "test_remove_item",
            "test_remove_missing_item_is_noop",
            "test_merge_guest_cart_on_login",
            "test_cart_expires_after_30_days",
            "test_cart_rejects_inactive_product",
            "test_cart_quantity_limit_per_customer",
        )
    ]
    f = "tests/test_catalog.py::"
    queries = ("패딩", "니트 가디건", "운동화", "우산", "텀블러", "mug", "tote bag", "키링")
    ids += [f + f"test_search_finds[{esc(q)}]" for q in queries]
    ids += [
        f + f"test_category_label[ko-{k}-{esc(v)}]"
        for k, v in (("outer", "아우터"), ("top", "상의"), ("bottom", "하의"), ("acc", "액세서리"))
    ]
    ids += [
        f + n
        for n in (
            "test_category_tree",
            "test_product_slug_unique",
            "test_product_hidden_when_out_of_stock",
            "test_product_images_ordered",
            "test_sitemap_lists_active_products",
        )
    ]
    f = "tests/test_checkout.py::"
    ids += [
        f + n
        for n in (
            "test_checkout_happy_path",
            "test_checkout_with_coupon",
            "test_checkout_expired_coupon",
            "test_checkout_coupon_minimum_spend",
            "test_checkout_coupon_other_currency",
            "test_checkout_points_and_coupon",
            "test_checkout_remote_region_surcharge",
            "test_checkout_duty_free_jeju",
            "test_checkout_payment_declined",
            "test_checkout_payment_timeout_retries",
            "test_checkout_sends_receipt_email",
            "test_checkout_receipt_totals_add_up",
        )
    ]
    ids += [
        f + f"test_checkout_payment_method[{m}]"
        for m in ("card", "kakaopay", "naverpay", "toss", "bank_transfer")
    ]
    f = "tests/test_i18n.py::"
    money = (
        ("KRW-12345-en", "₩12,345"),
        ("KRW-12345-ko", "12,345원"),
        ("KRW-0-ko", "0원"),
        ("JPY-500-en", "¥500"),
        ("USD-5.99-en", "$5.99"),
        ("EUR-45-en", "€45.00"),
    )
    ids += [f + f"test_format_money[{a}-{esc(b)}]" for a, b in money]
    ids += [f + f"test_translations_complete[{lang}]" for lang in ("ko", "en", "ja")]
    ids += [f + "test_plural_rules_ko_has_no_plural", f + "test_date_format_ko"]
    f = "tests/test_inventory.py::"
    ids += [
        f + n
        for n in (
            "test_reserve_stock",
            "test_release_reservation_on_cancel",
            "test_reservation_expires",
            "test_oversell_guard",
            "test_restock_notification",
            "test_low_stock_alert_threshold",
        )
    ]
    ids += [f + f"test_stock_levels[{s}]" for s in skus]
    f = "tests/test_points.py::"
    ids += [f + f"test_earn_points[{a}]" for a in ("9900", "12345", "50000", "99999")]
    ids += [
        f + n
        for n in (
            "test_points_expire_after_one_year",
            "test_points_cannot_go_negative",
            "test_points_refund_on_cancel",
        )
    ]
    f = "tests/test_pricing.py::"
    ids += [
        f + n
        for n in (
            "test_minor_unit[KRW]",
            "test_minor_unit[JPY]",
            "test_minor_unit[USD]",
            "test_minor_unit_unknown_currency",
            "test_line_total",
            "test_line_total_rejects_zero_quantity",
            "test_subtotal_sums_lines",
            "test_fixed_coupon",
            "test_fixed_coupon_capped_at_eligible",
            "test_percent_coupon",
            "test_krw_coupon_rounds_half_up",
        )
    ]
    ids += [
        f + f"test_percent_coupon_rounding[{c}]"
        for c in (
            "USD-19.99-15-3.00",
            "USD-10.10-25-2.53",
            "USD-4.10-50-2.05",
            "KRW-9900-5-495",
            "KRW-15900-15-2385",
            "EUR-0.30-50-0.15",
        )
    ]
    ids += [
        f + n
        for n in (
            "test_coupon_max_discount",
            "test_coupon_sku_restricted",
            "test_coupon_minimum_spend",
            "test_coupon_wrong_currency",
            "test_bxgy_coupon[2-1]",
            "test_bxgy_coupon[3-1]",
            "test_bxgy_coupon_not_enough_items",
            "test_tax_on_discounted_amount",
            "test_tax_unknown_region",
            "test_duty_free_region_has_no_vat",
            "test_free_shipping_threshold_inclusive",
            "test_remote_region_surcharge",
            "test_price_cart_empty",
            "test_price_cart_total_adds_up",
            "test_format_money_negative",
            "test_split_evenly[10000-3]",
            "test_split_evenly[100-7]",
            "test_split_evenly[0.10-3]",
            "test_split_evenly_rejects_zero_parts",
        )
    ]
    f = "tests/test_shipping.py::"
    regions = (
        "KR-11",
        "KR-26",
        "KR-27",
        "KR-28",
        "KR-29",
        "KR-30",
        "KR-31",
        "KR-50",
        "KR-41",
        "KR-42",
        "KR-43",
        "KR-44",
        "KR-45",
        "KR-46",
        "KR-47",
        "KR-47-ULL",
        "KR-48",
        "KR-49",
        "KR-49-DF",
    )
    ids += [f + f"test_shipping_fee[{r}-{a}]" for r in regions for a in ("29000", "50000")]
    ids += [f + f"test_tracking_url[{c}]" for c in ("cj", "hanjin", "lotte", "post", "logen")]
    f = "tests/test_webhooks.py::"
    ids += [
        f + n
        for n in (
            "test_payment_webhook_marks_paid",
            "test_payment_webhook_bad_signature",
            "test_payment_webhook_replay_rejected",
            "test_shipping_webhook_updates_status",
            "test_webhook_unknown_event_ignored",
        )
    ]
    return ids


MINISHOP_FAILURES = {
    "tests/test_pricing.py::test_krw_coupon_rounds_half_up": """\
____________________________ test_krw_coupon_rounds_half_up ____________________________

cart_factory = <function cart_factory.<locals>._make at 0x7f3c91b4e2a0>

    def test_krw_coupon_rounds_half_up(cart_factory):
        \"\"\"12,345원 장바구니에 10% 쿠폰: 할인 1,234.5원은 1,235원으로 올림.\"\"\"
        cart = cart_factory(currency="KRW", lines=[("SKU-1001", Decimal("12345"), 1)])
        coupon = Coupon(code="WELCOME10", kind="percent", value=Decimal("10"))
    
        breakdown = price_cart(cart, coupon=coupon, region="KR-11")
    
>       assert breakdown.discount == Decimal("1235")
E       AssertionError: assert Decimal('1234') == Decimal('1235')
E        +  where Decimal('1234') = PriceBreakdown(subtotal=Decimal('12345'), discount=Decimal('1234'), shipping=Decimal('3000'), tax=Decimal('1111'), total=Decimal('15222'), currency='KRW', notes=('coupon WELCOME10: -₩1,234',)).discount
E        +  and   Decimal('1235') = Decimal('1235')

tests/test_pricing.py:97: AssertionError""",
    "tests/test_pricing.py::test_percent_coupon_rounding[USD-10.10-25-2.53]": """\
___________________ test_percent_coupon_rounding[USD-10.10-25-2.53] ____________________

cart_factory = <function cart_factory.<locals>._make at 0x7f3c91b4f1a0>, currency = 'USD'
price = '10.10', percent = 25, expected = '2.53'

    @pytest.mark.parametrize(
        ("currency", "price", "percent", "expected"),
        [
            ("USD", "19.99", 15, "3.00"),
            ("USD", "10.10", 25, "2.53"),
            ("USD", "4.10", 50, "2.05"),
            ("KRW", "9900", 5, "495"),
            ("KRW", "15900", 15, "2385"),
            ("EUR", "0.30", 50, "0.15"),
        ],
    )
    def test_percent_coupon_rounding(cart_factory, currency, price, percent, expected):
        cart = cart_factory(currency=currency, lines=[("SKU-2002", Decimal(price), 1)])
        coupon = Coupon(code="PCT", kind="percent", value=Decimal(percent))
>       assert coupon_discount(cart, coupon) == Decimal(expected)
E       AssertionError: assert Decimal('2.52') == Decimal('2.53')
E        +  where Decimal('2.52') = coupon_discount(Cart(id='cart-test', currency='USD', lines=(CartLine(sku='SKU-2002', unit_price=Decimal('10.10'), quantity=1),), customer_id=None), Coupon(code='PCT', kind='percent', value=Decimal('25'), currency=None, skus=(), minimum_spend=Decimal('0'), max_discount=None, free_units=0))
E        +  and   Decimal('2.53') = Decimal('2.53')

tests/test_pricing.py:131: AssertionError""",
}


def _check_minishop_numbers() -> None:
    """The failure text above quotes amounts; make sure they are what the buggy code computes."""
    sub = Decimal("12345")
    disc = (sub * Decimal(10) / 100).quantize(Decimal(1), rounding=ROUND_HALF_EVEN)
    tax = ((sub - disc) * Decimal("0.10")).quantize(Decimal(1), rounding=ROUND_HALF_EVEN)
    assert (disc, tax, sub - disc + 3000 + tax) == (Decimal(1234), Decimal(1111), Decimal(15222))
    assert (Decimal("10.10") * 25 / 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_EVEN) == Decimal(
        "2.52"
    )
    assert (Decimal("10.10") * 25 / 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP) == Decimal("2.53")


def minishop_pytest_verbose() -> str:
    ids = _minishop_tests()
    results = [(i, "FAILED" if i in MINISHOP_FAILURES else "PASSED") for i in ids]
    failed = len(MINISHOP_FAILURES)
    lines = [
        pytest_sep("=", "test session starts"),
        "platform linux -- Python 3.12.3, pytest-8.3.2, pluggy-1.5.0 -- /home/jiwoo/src/minishop/.venv/bin/python",
        "cachedir: .pytest_cache",
        "rootdir: /home/jiwoo/src/minishop",
        "configfile: pyproject.toml",
        "testpaths: tests",
        "plugins: anyio-4.4.0, cov-5.0.0, freezegun-0.4.2",
        f"collecting ... collected {len(ids)} items",
        "",
        *pytest_verbose_lines(results),
        "",
        pytest_sep("=", "FAILURES"),
    ]
    for body in MINISHOP_FAILURES.values():
        title, rest = body.split("\n", 1)
        name = title.strip("_ ")
        lines += [pytest_sep("_", name), rest]
    lines += [pytest_sep("=", "short test summary info")]
    lines += [
        "FAILED tests/test_pricing.py::test_krw_coupon_rounds_half_up - AssertionError: assert Decimal('1234') == Decimal('1235')",
        "FAILED tests/test_pricing.py::test_percent_coupon_rounding[USD-10.10-25-2.53] - AssertionError: assert Decimal('2.52') == Decimal('2.53')",
        pytest_sep("=", f"{failed} failed, {len(ids) - failed} passed in 4.87s"),
    ]
    return "\n".join(lines)


class ClaudeLog:
    """Builds a Claude Code session log: envelopes, parent chain, split assistant records, usage."""

    def __init__(self, g: Gen, *, cwd: str, branch: str, version: str, slug: str, model: str) -> None:
        self.g, self.cwd, self.branch, self.version, self.slug, self.model = (
            g,
            cwd,
            branch,
            version,
            slug,
            model,
        )
        self.session_id = g.uuid()
        self.records: list[dict[str, Any]] = []
        self.last: str | None = None
        # The system prompt and tool definitions are already cached from earlier sessions.
        self.cache_read = 15268
        self.pending = 2954  # CLAUDE.md, git status and environment text written to cache on the first call

    def _env(self, parent: str | None, type_: str) -> dict[str, Any]:
        return {
            "parentUuid": parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "version": self.version,
            "gitBranch": self.branch,
            "slug": self.slug,
            "type": type_,
        }

    def add(self, record: dict[str, Any]) -> dict[str, Any]:
        self.records.append(record)
        return record

    def snapshot(self, message_id: str, backups: dict[str, Any], *, update: bool) -> None:
        self.add(
            {
                "type": "file-history-snapshot",
                "messageId": message_id,
                "snapshot": {
                    "messageId": message_id,
                    "trackedFileBackups": backups,
                    "timestamp": self.g.now(),
                },
                "isSnapshotUpdate": update,
            }
        )

    def progress(
        self, data: dict[str, Any], tool_use_id: str, *, parent: str | None = None, chain: bool = False
    ) -> str:
        uid = self.g.uuid()
        rec = self._env(parent if parent is not None else self.last, "progress")
        rec.update(
            {
                "data": data,
                "toolUseID": tool_use_id,
                "parentToolUseID": tool_use_id,
                "uuid": uid,
                "timestamp": self.g.tick(0.002, 0.02),
            }
        )
        self.add(rec)
        if chain:
            self.last = uid
        return uid

    def prompt(self, text: str, *, uid: str | None = None, dt: float = 20.0) -> str:
        uid = uid or self.g.uuid()
        rec = self._env(self.last, "user")
        rec.update(
            {
                "message": {"role": "user", "content": text},
                "uuid": uid,
                "timestamp": self.g.tick(dt * 0.5, dt),
                "thinkingMetadata": {"maxThinkingTokens": 31999},
                "todos": [],
                "permissionMode": "acceptEdits",
            }
        )
        self.add(rec)
        self.pending += approx_tokens(text)
        self.last = uid
        return uid

    def assistant(self, blocks: list[dict[str, Any]], *, stop: str | None) -> list[str]:
        msg_id, req_id = "msg_01" + self.g.b62(22), "req_011C" + self.g.b62(20)
        out_tokens = sum(approx_tokens(orjson.dumps(b).decode()) for b in blocks)
        creation = self.pending
        usage = {
            "input_tokens": self.g.rng.randint(1, 8),
            "cache_creation_input_tokens": creation,
            "cache_read_input_tokens": self.cache_read,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": creation},
            "output_tokens": out_tokens,
            "service_tier": "standard",
            "inference_geo": "not_available",
        }
        self.cache_read += creation
        self.pending = out_tokens
        self.g.tick(1.5, 4.0)
        uids = []
        for n, block in enumerate(blocks):
            uid = self.g.uuid()
            rec = self._env(self.last, "assistant")
            del rec["type"]
            rec["message"] = {
                "model": self.model,
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "content": [block],
                "stop_reason": stop if n == len(blocks) - 1 else None,
                "stop_sequence": None,
                "usage": usage,
            }
            rec.update(
                {"requestId": req_id, "type": "assistant", "uuid": uid, "timestamp": self.g.tick(0.3, 1.2)}
            )
            self.add(rec)
            self.last = uid
            uids.append(uid)
        return uids

    def result(
        self,
        tool: dict[str, Any],
        source: str,
        content: str,
        tool_use_result: Any,
        *,
        is_error: bool = False,
        parent: str | None = None,
        dt: float = 0.4,
    ) -> str:
        uid = self.g.uuid()
        rec = self._env(parent if parent is not None else source, "user")
        rec.update(
            {
                "message": {
                    "role": "user",
                    "content": [
                        {
                            "tool_use_id": tool["id"],
                            "type": "tool_result",
                            "content": content,
                            "is_error": is_error,
                        }
                    ],
                },
                "uuid": uid,
                "timestamp": self.g.tick(dt * 0.6, dt * 1.4),
                "toolUseResult": tool_use_result,
                "sourceToolAssistantUUID": source,
            }
        )
        self.add(rec)
        self.pending += approx_tokens(content)
        self.last = uid
        return uid

    def thinking(self, text: str) -> dict[str, Any]:
        sig = b"\x12" + self.g.rng.randbytes(self.g.rng.randint(220, 420))
        return {"type": "thinking", "thinking": text, "signature": b64(sig)}

    def tool(self, name: str, inp: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "tool_use",
            "id": "toolu_01" + self.g.b62(22),
            "name": name,
            "input": inp,
            "caller": {"type": "direct"},
        }

    @staticmethod
    def text(text: str) -> dict[str, Any]:
        return {"type": "text", "text": text}

    def hook(self, tool: dict[str, Any], event: str = "PreToolUse") -> dict[str, Any]:
        return {
            "type": "hook_progress",
            "hookEvent": event,
            "hookName": f"{event}:{tool['name']}",
            "command": "$CLAUDE_PROJECT_DIR/.claude/hooks/guard-secrets.sh",
        }


def bash_result(stdout: str, stderr: str = "") -> dict[str, Any]:
    return {
        "stdout": stdout,
        "stderr": stderr,
        "interrupted": False,
        "isImage": False,
        "noOutputExpected": False,
    }


def build_claude_code() -> list[dict[str, Any]]:
    _check_minishop_numbers()
    g = Gen(1101, "2026-03-14T01:12:40.118000")
    cwd = "/home/jiwoo/src/minishop"
    path = f"{cwd}/minishop/pricing.py"
    log = ClaudeLog(
        g,
        cwd=cwd,
        branch="fix/krw-coupon-rounding",
        version="2.1.42",
        slug="gentle-rounding-otter",
        model="claude-sonnet-4-5-20250929",
    )
    title_at = len(log.records)
    log.add(
        {"type": "summary", "summary": "", "leafUuid": ""}
    )  # filled in at the end, once the leaf is known

    first_prompt = g.uuid()
    log.snapshot(first_prompt, {}, update=False)
    start_hook = g.uuid()
    log.progress(
        {
            "type": "hook_progress",
            "hookEvent": "SessionStart",
            "hookName": "SessionStart:startup",
            "command": "$CLAUDE_PROJECT_DIR/.claude/hooks/session-start.sh",
        },
        start_hook,
        parent=None,
    )
    log.records[-1]["parentUuid"] = None
    log.last = log.records[-1]["uuid"]
    log.prompt(
        "tests/test_pricing.py 에서 test_krw_coupon_rounds_half_up 테스트가 계속 실패해요. "
        "원화 쿠폰 할인 금액이 1원씩 모자라게 나오는 것 같습니다. 원인 찾아서 고쳐 주세요. "
        "다른 테스트는 깨지면 안 되고, 수정 후에 전체 테스트도 한 번 돌려 주세요.",
        uid=first_prompt,
    )

    # 1. run the suite
    run_all = log.tool(
        "Bash", {"command": "python -m pytest -v", "description": "Run the full test suite verbosely"}
    )
    a = log.assistant(
        [
            log.thinking(
                "The user reports that test_krw_coupon_rounds_half_up fails and KRW coupon discounts come out "
                "one won short. A one-unit shortfall on a percentage discount smells like rounding: 10% of an "
                "odd amount ending in 5 gives a .5 remainder. Before guessing, run the whole suite to see the "
                "exact assertion and whether other tests fail for the same reason."
            ),
            log.text("먼저 전체 테스트를 돌려서 실패 내용을 확인하겠습니다."),
            run_all,
        ],
        stop="tool_use",
    )
    pre = log.progress(log.hook(run_all), run_all["id"], parent=a[-1], chain=True)
    partial = "\n".join(pytest_verbose_lines([(i, "PASSED") for i in _minishop_tests()])[:6])
    log.progress(
        {
            "type": "bash_progress",
            "output": partial,
            "fullOutput": partial,
            "elapsedTimeSeconds": 3,
            "totalLines": 6,
            "totalBytes": len(partial.encode()),
            "taskId": "b" + g.hex(6),
        },
        run_all["id"],
        parent=pre,
        chain=False,
    )
    out = minishop_pytest_verbose()
    log.result(
        run_all, a[-1], "Exit code 1\n" + out, "Error: Exit code 1\n" + out, is_error=True, parent=pre, dt=5.2
    )

    # 2. read the module and grep for other quantize() calls, in parallel
    read = log.tool("Read", {"file_path": path})
    grep = log.tool(
        "Grep", {"pattern": r"\.quantize\(", "path": f"{cwd}/minishop", "output_mode": "content", "-n": True}
    )
    b = log.assistant(
        [
            log.thinking(
                "Two failures, both percentage coupons whose exact discount ends in a half: 1234.5 KRW -> got 1234, "
                "2.525 USD -> got 2.52. Both went to the even neighbour, which is ROUND_HALF_EVEN, the default "
                "rounding of Decimal.quantize. Read pricing.py to find where the discount is rounded, and grep "
                "for other quantize calls to see which rounding mode the rest of the code base uses."
            ),
            log.text(
                "실패한 테스트가 2개인데 둘 다 할인액이 정확히 .5로 끝나는 경우입니다(1,234.5원 → 1,234원, "
                "$2.525 → $2.52). 반올림 방식 문제로 보여서 `pricing.py`와 다른 `quantize()` 호출을 같이 확인하겠습니다."
            ),
            read,
            grep,
        ],
        stop="tool_use",
    )
    q_line, s_line = (
        line_of(PRICING_PY, "return amount.quantize(minor_unit"),
        line_of(PRICING_PY, "share = (amount / parts)"),
    )
    grep_out = MINISHOP_GREP.replace("{q}", str(q_line)).replace("{s}", str(s_line))
    log.result(
        grep,
        b[3],
        grep_out,
        {
            "mode": "content",
            "numFiles": 0,
            "filenames": [],
            "content": grep_out,
            "numLines": grep_out.count("\n") + 1,
        },
        dt=0.3,
    )
    total_lines = PRICING_PY.count("\n")
    body = PRICING_PY[:-1]
    log.result(
        read,
        b[2],
        numbered(body),
        {
            "type": "text",
            "file": {
                "filePath": path,
                "content": body,
                "numLines": total_lines,
                "startLine": 1,
                "totalLines": total_lines,
            },
        },
        parent=b[2],
        dt=0.2,
    )

    # 3. first edit attempt misquotes the docstring
    wrong_old = PRICING_OLD_QUANTIZE.replace("``amount``", "amount")
    edit_bad = log.tool(
        "Edit",
        {
            "file_path": path,
            "old_string": wrong_old,
            "new_string": PRICING_NEW_QUANTIZE,
            "replace_all": False,
        },
    )
    c = log.assistant(
        [
            log.thinking(
                "Confirmed: _quantize() calls amount.quantize(minor_unit(currency)) with no rounding argument, so "
                "the context default ROUND_HALF_EVEN applies. Every money step goes through _quantize (line totals, "
                "coupon discount, tax, format_money), so fixing it there fixes both failures. points.py and "
                "settlement.py already pass rounding=ROUND_HALF_UP explicitly, which tells me half-up is the house "
                "rule. split_evenly deliberately floors with ROUND_DOWN and distributes the remainder; leave it. "
                "Line totals are exact products of minor units so they are unaffected."
            ),
            log.text(
                "원인을 찾았습니다. `_quantize()`가 `Decimal.quantize()`를 `rounding` 인자 없이 호출하고 있어서 "
                "기본값인 `ROUND_HALF_EVEN`(은행가 반올림)이 적용됩니다. `points.py`와 정산 리포트는 이미 "
                "`ROUND_HALF_UP`을 명시하고 있으니 같은 방식으로 맞추겠습니다."
            ),
            edit_bad,
        ],
        stop="tool_use",
    )
    err = f"String to replace not found in file.\nString: {wrong_old}"
    log.result(
        edit_bad, c[-1], f"<tool_use_error>{err}</tool_use_error>", f"Error: {err}", is_error=True, dt=0.2
    )

    # 4. correct edits
    edit_fn = log.tool(
        "Edit",
        {
            "file_path": path,
            "old_string": PRICING_OLD_QUANTIZE,
            "new_string": PRICING_NEW_QUANTIZE,
            "replace_all": False,
        },
    )
    d = log.assistant(
        [log.text("docstring의 백틱을 빠뜨렸네요. 파일 내용 그대로 다시 지정하겠습니다."), edit_fn],
        stop="tool_use",
    )
    backup = g.hex(16)  # Claude Code names backups by a hash of the path plus @vN
    log.snapshot(
        first_prompt,
        {"minishop/pricing.py": {"backupFileName": backup + "@v1", "version": 1, "backupTime": g.tick(0.05)}},
        update=True,
    )
    step1 = PRICING_PY.replace(PRICING_OLD_QUANTIZE, PRICING_NEW_QUANTIZE)
    log.result(
        edit_fn,
        d[-1],
        f"The file {path} has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n"
        + snippet(step1, "def _quantize", 2, 9),
        {
            "filePath": path,
            "oldString": PRICING_OLD_QUANTIZE,
            "newString": PRICING_NEW_QUANTIZE,
            "originalFile": PRICING_PY,
            "structuredPatch": structured_patch(PRICING_PY, step1),
            "userModified": False,
            "replaceAll": False,
        },
    )
    edit_imp = log.tool(
        "Edit",
        {
            "file_path": path,
            "old_string": PRICING_OLD_IMPORT,
            "new_string": PRICING_NEW_IMPORT,
            "replace_all": False,
        },
    )
    e = log.assistant([log.text("`ROUND_HALF_UP` import도 추가합니다."), edit_imp], stop="tool_use")
    step2 = step1.replace(PRICING_OLD_IMPORT, PRICING_NEW_IMPORT)
    log.result(
        edit_imp,
        e[-1],
        f"The file {path} has been updated. Here's the result of running `cat -n` on a snippet of the edited file:\n"
        + snippet(step2, PRICING_NEW_IMPORT, 4, 4),
        {
            "filePath": path,
            "oldString": PRICING_OLD_IMPORT,
            "newString": PRICING_NEW_IMPORT,
            "originalFile": step1,
            "structuredPatch": structured_patch(step1, step2),
            "userModified": False,
            "replaceAll": False,
        },
    )

    # 5. re-run the pricing tests, then the whole suite
    ids = _minishop_tests()
    pricing_ids = [i for i in ids if i.startswith("tests/test_pricing.py")]
    run_p = log.tool(
        "Bash",
        {"command": "python -m pytest tests/test_pricing.py -q", "description": "Re-run the pricing tests"},
    )
    f = log.assistant([run_p], stop="tool_use")
    q = "\n".join(pytest_quiet_lines(["."] * len(pricing_ids))) + f"\n{len(pricing_ids)} passed in 0.41s"
    log.result(run_p, f[-1], q, bash_result(q), dt=1.6)
    run_q = log.tool("Bash", {"command": "python -m pytest -q", "description": "Run the full test suite"})
    h = log.assistant(
        [log.text("가격 테스트는 모두 통과합니다. 전체 테스트도 돌려 보겠습니다."), run_q], stop="tool_use"
    )
    log.progress(log.hook(run_q), run_q["id"], parent=h[-1])
    q = "\n".join(pytest_quiet_lines(["."] * len(ids))) + f"\n{len(ids)} passed in 4.71s"
    log.result(run_q, h[-1], q, bash_result(q), parent=h[-1], dt=5.0)
    done = (
        "수정했습니다.\n\n"
        "**원인**\n"
        "`minishop/pricing.py`의 `_quantize()`가 `Decimal.quantize()`를 `rounding` 인자 없이 호출해서, "
        "기본값인 `ROUND_HALF_EVEN`(은행가 반올림)이 적용되고 있었습니다. 12,345원의 10%는 1,234.5원인데 "
        "짝수 쪽인 1,234원으로 내려가서 테스트가 기대한 1,235원과 1원 차이가 났습니다. "
        "USD 케이스(10.10달러의 25% = 2.525 → 2.52)도 같은 원인입니다.\n\n"
        "**수정 내용**\n"
        "- `_quantize()`에 `rounding=ROUND_HALF_UP`을 명시하고, 이유를 docstring에 남겼습니다.\n"
        "- `ROUND_HALF_UP` import 추가.\n\n"
        "`_quantize()`는 할인·세금·금액 표시에서 공통으로 쓰이므로 한 곳만 고치면 됩니다. "
        "`split_evenly()`(분할 결제)는 의도적으로 내림 후 나머지를 분배하는 방식이라 그대로 두었습니다.\n\n"
        f"**확인**\n`tests/test_pricing.py` {len(pricing_ids)}개, 전체 {len(ids)}개 테스트 모두 통과합니다.\n\n"
        "참고로 `points.py`와 정산 리포트는 이미 `ROUND_HALF_UP`을 쓰고 있어서, 이번 수정으로 "
        "쿠폰 할인과 포인트 적립의 반올림 방식이 같아졌습니다."
    )
    end1 = log.assistant([log.text(done)], stop="end_turn")
    log.add(
        {
            **log._env(end1[-1], "system"),
            "subtype": "turn_duration",
            "durationMs": round(
                (g.t - datetime.fromisoformat(log.records[3]["timestamp"].rstrip("Z"))).total_seconds() * 1000
            ),
            "timestamp": g.tick(0.1),
            "uuid": g.uuid(),
            "isMeta": False,
        }
    )
    log.last = log.records[-1]["uuid"]

    # second turn: commit
    second = g.uuid()
    log.snapshot(
        second,
        {"minishop/pricing.py": {"backupFileName": backup + "@v2", "version": 2, "backupTime": g.now()}},
        update=False,
    )
    log.prompt("고마워요! 커밋까지 해 주세요. 커밋 메시지는 영어로 부탁해요.", uid=second, dt=40)
    diff_cmd = log.tool(
        "Bash", {"command": "git status --short && git diff", "description": "Show working tree changes"}
    )
    i = log.assistant([diff_cmd], stop="tool_use")
    diff = unified("minishop/pricing.py", PRICING_PY, step2)
    diff = f"diff --git a/minishop/pricing.py b/minishop/pricing.py\nindex 3f2a9c1..8b71e0d 100644\n{diff}"
    status_diff = " M minishop/pricing.py\n" + diff
    log.result(diff_cmd, i[-1], status_diff.rstrip("\n"), bash_result(status_diff.rstrip("\n")))
    added = sum(1 for ln in diff.split("\n") if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in diff.split("\n") if ln.startswith("-") and not ln.startswith("---"))
    commit_cmd = (
        'git commit -am "Round money half-up to the currency\'s minor unit" '
        "-m \"Decimal.quantize() defaults to banker's rounding, so a 10% coupon on 12,345 KRW gave 1,234 "
        'instead of 1,235 and 25% of \\$10.10 gave \\$2.52. Points and settlement already round half-up."'
    )
    commit = log.tool("Bash", {"command": commit_cmd, "description": "Commit the rounding fix"})
    j = log.assistant(
        [log.text("변경 사항은 `pricing.py` 한 파일입니다. 커밋하겠습니다."), commit], stop="tool_use"
    )
    commit_out = (
        "[fix/krw-coupon-rounding 4e1c2a7] Round money half-up to the currency's minor unit\n"
        f" 1 file changed, {git_counts(added, removed)}"
    )
    log.result(commit, j[-1], commit_out, bash_result(commit_out), dt=0.8)
    end2 = log.assistant(
        [
            log.text(
                "`fix/krw-coupon-rounding` 브랜치에 커밋했습니다 (`4e1c2a7`).\n\n"
                "```\nRound money half-up to the currency's minor unit\n```\n\n"
                "본문에는 은행가 반올림 때문에 12,345원 × 10% 쿠폰이 1,234원이 되던 문제와, "
                "포인트·정산 쪽이 이미 half-up을 쓰고 있다는 점을 적어 두었습니다. 푸시는 하지 않았습니다."
            )
        ],
        stop="end_turn",
    )
    log.records[title_at] = {
        "type": "summary",
        "summary": "KRW 쿠폰 할인 반올림 버그 수정 및 커밋",
        "leafUuid": end2[-1],
    }
    return log.records


# ================================================================================================
# Sample 2: Codex rollout, English user, slugify() drops Hangul in a small blog engine
# ================================================================================================

TEXT_PY = r'''"""Text helpers used by the templates and the publishing pipeline."""

from __future__ import annotations

import html
import math
import re
import unicodedata
from collections.abc import Iterable

WORDS_PER_MINUTE = 230
#: Korean reading speed is measured in syllables, not words (about 500자/분).
HANGUL_CHARS_PER_MINUTE = 500

_SLUG_STRIP = re.compile(r"[^\w\s-]")
_SLUG_HYPHENATE = re.compile(r"[-\s]+")
_TAG_RE = re.compile(r"<[^>]+>")
_WS_RE = re.compile(r"\s+")
_HANGUL_RE = re.compile(r"[\uac00-\ud7a3]")
_SENTENCE_END = re.compile(r"(?<=[.!?。])\s+")


def slugify(value: str, *, max_length: int = 80) -> str:
    """Turn a post title into the slug used in ``/posts/<slug>/``.

    Accents are folded so that "Crème brûlée" and "Creme brulee" share a slug.
    """
    value = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode("ascii")
    value = _SLUG_STRIP.sub("", value).strip().lower()
    slug = _SLUG_HYPHENATE.sub("-", value)
    return slug[:max_length].strip("-")


def unique_slug(title: str, taken: Iterable[str], *, max_length: int = 80) -> str:
    """``slugify(title)``, with ``-2``, ``-3``... appended until it is not in ``taken``."""
    base = slugify(title, max_length=max_length) or "post"
    taken = set(taken)
    if base not in taken:
        return base
    for n in range(2, 10_000):
        suffix = f"-{n}"
        candidate = base[: max_length - len(suffix)].rstrip("-") + suffix
        if candidate not in taken:
            return candidate
    raise ValueError(f"no free slug for {title!r}")


def strip_tags(markup: str) -> str:
    """Plain text of an HTML fragment, entities decoded and whitespace collapsed."""
    text = _TAG_RE.sub(" ", markup)
    return _WS_RE.sub(" ", html.unescape(text)).strip()


def excerpt(markup: str, *, max_chars: int = 160, ellipsis: str = "…") -> str:
    """The first sentences of ``markup`` that fit in ``max_chars``, for previews and meta tags."""
    text = strip_tags(markup)
    if len(text) <= max_chars:
        return text
    out = ""
    for sentence in _SENTENCE_END.split(text):
        if len(out) + len(sentence) + 1 > max_chars - len(ellipsis):
            break
        out = f"{out} {sentence}".strip()
    if not out:
        out = text[: max_chars - len(ellipsis)].rsplit(" ", 1)[0]
    return out + ellipsis


def reading_time(markup: str) -> int:
    """Minutes to read ``markup``, at least 1.

    Hangul syllables are counted separately: Korean text has few spaces per
    idea, so a word count underestimates it badly.
    """
    text = strip_tags(markup)
    hangul = len(_HANGUL_RE.findall(text))
    words = len(_HANGUL_RE.sub("", text).split())
    minutes = words / WORDS_PER_MINUTE + hangul / HANGUL_CHARS_PER_MINUTE
    return max(1, math.ceil(minutes))


def truncate_words(text: str, count: int, *, tail: str = " …") -> str:
    words = text.split()
    if len(words) <= count:
        return text
    return " ".join(words[:count]) + tail


def title_case(value: str, *, keep_upper: Iterable[str] = ("API", "CLI", "CSS", "HTML", "URL")) -> str:
    """Title-case English headings without lowering acronyms; other scripts are left alone."""
    upper = {w.lower(): w for w in keep_upper}
    small = {"a", "an", "and", "as", "at", "but", "by", "for", "in", "of", "on", "or", "the", "to", "vs"}
    out = []
    for i, word in enumerate(value.split(" ")):
        low = word.lower()
        if low in upper:
            out.append(upper[low])
        elif i and low in small:
            out.append(low)
        elif word[:1].isascii():
            out.append(word[:1].upper() + word[1:])
        else:
            out.append(word)
    return " ".join(out)


def tag_key(tag: str) -> str:
    """Tags are matched case- and width-insensitively: "Ｐｙｔｈｏｎ", "python" and "Python" are one tag."""
    return unicodedata.normalize("NFKC", tag).casefold().strip()
'''

TEXT_OLD_SLUG = """    value = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode("ascii")
    value = _SLUG_STRIP.sub("", value).strip().lower()"""
TEXT_MID_SLUG = """    value = unicodedata.normalize("NFKC", value)
    value = _SLUG_STRIP.sub("", value).strip().lower()"""
TEXT_NEW_SLUG = """    value = _fold_latin(value)
    value = _SLUG_STRIP.sub("", value).strip().lower()"""
TEXT_FOLD_FN = '''

def _fold_latin(value: str) -> str:
    """Strip accents from Latin letters (é -> e) and keep every other script as it is.

    Folding the whole title to ASCII also deleted Hangul, kana and CJK, so Korean
    titles got an empty slug. Only characters whose decomposition starts with an
    ASCII letter are folded; everything else is NFKC-normalized and kept.
    """
    out = []
    for ch in unicodedata.normalize("NFC", value):
        decomposed = unicodedata.normalize("NFKD", ch)
        if decomposed[:1].isascii():
            out.append("".join(c for c in decomposed if not unicodedata.combining(c)))
        else:
            out.append(unicodedata.normalize("NFKC", ch))
    return "".join(out)
'''

SLUG_CASES: list[tuple[str, str, str]] = [
    # (title, expected, which code fails it: "ascii" = original, "nfkc" = first patch, "" = none)
    ("Hello, World!", "hello-world", ""),
    ("  leading and trailing  ", "leading-and-trailing", ""),
    ("multiple   spaces\tand\ttabs", "multiple-spaces-and-tabs", ""),
    ("already-a-slug", "already-a-slug", ""),
    ("Under_score stays", "under_score-stays", ""),
    ("", "", ""),
    ("---", "", ""),
    ("C++ templates in 10 minutes", "c-templates-in-10-minutes", ""),
    ("100% test coverage is a lie", "100-test-coverage-is-a-lie", ""),
    ("What's new in Django 5.1?", "whats-new-in-django-51", ""),
    ("Crème brûlée for beginners", "creme-brulee-for-beginners", "nfkc"),
    ("Café & Bar reviews", "cafe-bar-reviews", "nfkc"),
    ("naïve Bayes, explained", "naive-bayes-explained", "nfkc"),
    ("Zürich meetup recap", "zurich-meetup-recap", "nfkc"),
    ("São Paulo travel notes", "sao-paulo-travel-notes", "nfkc"),
    ("Ｆｕｌｌｗｉｄｔｈ Ｔｅｘｔ", "fullwidth-text", ""),
    ("ﬁnally, ligatures", "finally-ligatures", ""),
    ("서울 맛집 추천", "서울-맛집-추천", "ascii"),
    ("파이썬으로 웹 크롤러 만들기", "파이썬으로-웹-크롤러-만들기", "ascii"),
    ("Python 3.13 릴리스 노트", "python-313-릴리스-노트", "ascii"),
    ("Docker 컨테이너 로그 보는 법", "docker-컨테이너-로그-보는-법", "ascii"),
    ("  앞뒤 공백  ", "앞뒤-공백", "ascii"),
    ("제주도 3박 4일 여행기", "제주도-3박-4일-여행기", "ascii"),
    ("React vs Vue: 무엇을 고를까?", "react-vs-vue-무엇을-고를까", "ascii"),
    ("한글", "한글", "ascii"),
    ("🚀 출시 소식", "출시-소식", "ascii"),
    ("東京ラーメン ブログ", "東京ラーメン-ブログ", "ascii"),
    ("北京烤鸭 做法", "北京烤鸭-做法", "ascii"),
    ("Rust와 Go 비교: 동시성 모델", "rust와-go-비교-동시성-모델", "ascii"),
    ("Kubernetes 입문 (1/3)", "kubernetes-입문-13", "ascii"),
    ("Git 브랜치 전략 — trunk-based", "git-브랜치-전략-trunk-based", "ascii"),
    ("Postgres 인덱스 튜닝 101", "postgres-인덱스-튜닝-101", "ascii"),
    ("주니어 개발자 회고 2025", "주니어-개발자-회고-2025", "ascii"),
    ("Ça va? Notes from PyCon FR", "ca-va-notes-from-pycon-fr", "nfkc"),
    ("Why I stopped using ORMs", "why-i-stopped-using-orms", ""),
    ("TypeScript 5.4: what changed", "typescript-54-what-changed", ""),
    ("The 12-factor app, revisited", "the-12-factor-app-revisited", ""),
    ("Async Python: a field guide", "async-python-a-field-guide", ""),
    ("Self-hosting Git with Forgejo", "self-hosting-git-with-forgejo", ""),
    ("Tabs vs. spaces (again)", "tabs-vs-spaces-again", ""),
]


def _slug_ascii(value: str, max_length: int = 80) -> str:
    """What the original slugify returns, used only to write truthful test output below."""
    import unicodedata

    value = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode("ascii")
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)[:max_length].strip("-")


def _slug_nfkc(value: str, max_length: int = 80) -> str:
    import unicodedata

    value = unicodedata.normalize("NFKC", value)
    value = re.sub(r"[^\w\s-]", "", value).strip().lower()
    return re.sub(r"[-\s]+", "-", value)[:max_length].strip("-")


def _slug_fixed(value: str, max_length: int = 80) -> str:
    import unicodedata

    out = []
    for ch in unicodedata.normalize("NFC", value):
        d = unicodedata.normalize("NFKD", ch)
        out.append(
            "".join(c for c in d if not unicodedata.combining(c))
            if d[:1].isascii()
            else unicodedata.normalize("NFKC", ch)
        )
    value = re.sub(r"[^\w\s-]", "", "".join(out)).strip().lower()
    return re.sub(r"[-\s]+", "-", value)[:max_length].strip("-")


def _check_slug_cases() -> None:
    """The narrative (which cases fail at which step) must match what the code would really do."""
    for title, expected, fails in SLUG_CASES:
        assert (_slug_ascii(title) != expected) == (fails == "ascii"), title
        assert (_slug_nfkc(title) != expected) == (fails == "nfkc"), title
        assert _slug_fixed(title) == expected, title


def _pyrepr(value: str) -> str:
    """Python's repr of a str (what pytest prints in assertion messages)."""
    return repr(value)


def inkpost_pytest(mode: str, *, verbose: bool) -> tuple[str, int]:
    """Output of ``pytest tests/test_text.py`` against the given slugify version; returns (text, exit code)."""
    slug = {"ascii": _slug_ascii, "nfkc": _slug_nfkc, "fixed": _slug_fixed}[mode]
    nodes: list[tuple[str, bool, str]] = []  # (node id, passed, failure section)
    for title, expected, _ in SLUG_CASES:
        got = slug(title)
        node = f"tests/test_text.py::test_slugify[{esc(title)}-{esc(expected)}]"
        section = ""
        if got != expected:
            section = "\n".join(
                [
                    pytest_sep("_", f"test_slugify[{esc(title)}-{esc(expected)}]"),
                    "",
                    f"title = {_pyrepr(title)}, expected = {_pyrepr(expected)}",
                    "",
                    '    @pytest.mark.parametrize(("title", "expected"), SLUG_CASES)',
                    "    def test_slugify(title: str, expected: str) -> None:",
                    ">       assert slugify(title) == expected",
                    f"E       AssertionError: assert {_pyrepr(got)} == {_pyrepr(expected)}",
                    "E         ",
                    f"E         - {expected}",
                    f"E         + {got}" if got else "E         + ",
                    "",
                    "tests/test_text.py:48: AssertionError",
                ]
            )
        nodes.append((node, got == expected, section))
    for n in (10, 20, 40, 80):
        got = slug("가" * 100, n)
        ok = got == "가" * n
        sec = ""
        if not ok:
            sec = "\n".join(
                [
                    pytest_sep("_", f"test_slugify_max_length_hangul[{n}]"),
                    "",
                    f"n = {n}",
                    "",
                    '    @pytest.mark.parametrize("n", [10, 20, 40, 80])',
                    "    def test_slugify_max_length_hangul(n: int) -> None:",
                    '>       assert slugify("가" * 100, max_length=n) == "가" * n',
                    f"E       AssertionError: assert '' == '{'가' * n}'",
                    "E         ",
                    f"E         - {'가' * n}",
                    "E         + ",
                    "",
                    "tests/test_text.py:56: AssertionError",
                ]
            )
        nodes.append((f"tests/test_text.py::test_slugify_max_length_hangul[{n}]", ok, sec))
    for n in (5, 12, 30, 80):
        nodes.append((f"tests/test_text.py::test_slugify_max_length_ascii[{n}]", True, ""))
    unique = ok_unique = slug("서울 맛집 추천") == "서울-맛집-추천"
    nodes.append(("tests/test_text.py::test_unique_slug_appends_counter", True, ""))
    nodes.append(("tests/test_text.py::test_unique_slug_respects_max_length", True, ""))
    sec = ""
    if not unique:
        sec = "\n".join(
            [
                pytest_sep("_", "test_unique_slug_korean_titles_do_not_collide"),
                "",
                "    def test_unique_slug_korean_titles_do_not_collide() -> None:",
                '        taken = {unique_slug("서울 맛집 추천", [])}',
                '>       assert unique_slug("부산 맛집 추천", taken) == "부산-맛집-추천"',
                "E       AssertionError: assert 'post-2' == '부산-맛집-추천'",
                "E         ",
                "E         - 부산-맛집-추천",
                "E         + post-2",
                "",
                "tests/test_text.py:71: AssertionError",
            ]
        )
    nodes.append(("tests/test_text.py::test_unique_slug_korean_titles_do_not_collide", ok_unique, sec))
    html_cases = [
        "<p>Hello</p>-Hello",
        "<b>a</b> &amp; <i>b</i>-a & b",
        "<br/>line<br>break-line break",
        "&lt;script&gt;-<script>",
        "<p>안녕하세요</p>-안녕하세요",
    ]
    nodes += [(f"tests/test_text.py::test_strip_tags[{esc(c)}]", True, "") for c in html_cases]
    for n in (40, 80, 160, 300):
        nodes.append((f"tests/test_text.py::test_excerpt_respects_max_chars[{n}]", True, ""))
    nodes += [
        ("tests/test_text.py::test_excerpt_prefers_sentence_boundary", True, ""),
        ("tests/test_text.py::test_excerpt_korean_sentences", True, ""),
        ("tests/test_text.py::test_excerpt_no_spaces_falls_back_to_cut", True, ""),
    ]
    for w, h, m in ((100, 0, 1), (460, 0, 2), (0, 500, 1), (0, 1600, 4), (230, 1000, 3), (2300, 0, 10)):
        nodes.append((f"tests/test_text.py::test_reading_time[{w}-{h}-{m}]", True, ""))
    for t in (
        "a-tale-of-two-cities",
        "the-api-guide",
        "vs-code-vs-vim",
        "html-and-css",
        "url-design",
        "한국어-제목",
    ):
        nodes.append((f"tests/test_text.py::test_title_case[{esc(t)}]", True, ""))
    for t in ("Python", "ｐｙｔｈｏｎ", "PYTHON", " python ", "파이썬", "Straße"):
        nodes.append((f"tests/test_text.py::test_tag_key[{esc(t)}]", True, ""))
    nodes += [(f"tests/test_text.py::test_truncate_words[{n}]", True, "") for n in (1, 3, 10, 50)]

    failed = [n for n in nodes if not n[1]]
    if verbose:
        lines = [
            pytest_sep("=", "test session starts"),
            "platform linux -- Python 3.11.9, pytest-8.2.2, pluggy-1.5.0 -- /home/dev/inkpost/.venv/bin/python3",
            "cachedir: .pytest_cache",
            "rootdir: /home/dev/inkpost",
            "configfile: pyproject.toml",
            "plugins: xdist-3.6.1",
            f"collecting ... collected {len(nodes)} items",
            "",
            *pytest_verbose_lines([(n, "PASSED" if ok else "FAILED") for n, ok, _ in nodes]),
        ]
    else:  # -q prints no session header and a bare closing line
        lines = pytest_quiet_lines(["." if ok else "F" for _, ok, _ in nodes])
    seconds = 0.31 + 0.02 * len(failed)
    if failed:
        lines += [
            "",
            pytest_sep("=", "FAILURES"),
            *(sec for _, _, sec in failed),
            pytest_sep("=", "short test summary info"),
        ]
        for node, _, sec in failed:
            first_e = next(ln for ln in sec.split("\n") if ln.startswith("E       "))
            lines.append(f"FAILED {node} - {first_e[8:]}")
    closing = (
        f"{len(failed)} failed, " if failed else ""
    ) + f"{len(nodes) - len(failed)} passed in {seconds:.2f}s"
    lines.append(pytest_sep("=", closing) if verbose else closing)
    return "\n".join(lines) + "\n", 1 if failed else 0


class CodexLog:
    """Builds a Codex CLI rollout: envelopes, response items, event mirrors and token counts."""

    def __init__(self, g: Gen, *, cwd: str, model: str) -> None:
        self.g, self.cwd, self.model = g, cwd, model
        self.records: list[dict[str, Any]] = []
        self.context = 0  # tokens in the prompt the next model call sees
        self.prev_input = 0
        self.total = {
            "input_tokens": 0,
            "cached_input_tokens": 0,
            "output_tokens": 0,
            "reasoning_output_tokens": 0,
            "total_tokens": 0,
        }
        self.used = 9.0

    def rec(self, type_: str, payload: dict[str, Any], dt: float = 0.0) -> None:
        self.records.append(
            {"timestamp": self.g.tick(dt) if dt else self.g.now(), "type": type_, "payload": payload}
        )

    def item(self, payload: dict[str, Any], dt: float = 0.0) -> None:
        self.rec("response_item", payload, dt)
        if payload["type"] in ("message", "function_call_output"):
            self.context += approx_tokens(orjson.dumps(payload).decode())

    def rate_limits(self) -> dict[str, Any]:
        return {
            "primary": {"used_percent": round(self.used, 1), "window_minutes": 300, "resets_at": 1774330000},
            "secondary": {"used_percent": 22.0, "window_minutes": 10080, "resets_at": 1774771200},
        }

    def token_count(self, out_text: str, reasoning: int) -> None:
        output = approx_tokens(out_text) + reasoning
        cached = (self.prev_input // 256) * 256
        last = {
            "input_tokens": self.context,
            "cached_input_tokens": cached,
            "output_tokens": output,
            "reasoning_output_tokens": reasoning,
            "total_tokens": self.context + output,
        }
        for k, v in last.items():
            self.total[k] += v
        self.prev_input = self.context
        self.context += output - reasoning
        self.used += 0.4
        self.rec(
            "event_msg",
            {
                "type": "token_count",
                "info": {
                    "total_token_usage": dict(self.total),
                    "last_token_usage": last,
                    "model_context_window": 272000,
                },
                "rate_limits": self.rate_limits(),
            },
            0.4,
        )

    def turn_context(self) -> None:
        self.rec(
            "turn_context",
            {
                "cwd": self.cwd,
                "approval_policy": "on-request",
                "sandbox_policy": {
                    "mode": "workspace-write",
                    "network_access": False,
                    "exclude_tmpdir_env_var": False,
                    "exclude_slash_tmp": False,
                },
                "model": self.model,
                "effort": "medium",
                "summary": "auto",
            },
        )

    def user(self, text: str) -> None:
        self.item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}, 30)
        self.rec("event_msg", {"type": "user_message", "message": text, "images": []})
        self.turn_context()

    def reasoning(self, summary: str, reasoning_tokens: int) -> int:
        enc = (
            "gAAAAAB" + base64.urlsafe_b64encode(self.g.rng.randbytes(self.g.rng.randint(700, 1300))).decode()
        )
        self.rec("event_msg", {"type": "agent_reasoning", "text": summary}, 1.6)
        self.item(
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": summary}],
                "content": None,
                "encrypted_content": enc,
            }
        )
        return reasoning_tokens

    def shell(
        self,
        summary: str,
        script: str,
        output: str,
        exit_code: int,
        seconds: float,
        *,
        reasoning: int = 64,
        timeout: int | None = None,
    ) -> None:
        self.reasoning(summary, reasoning)
        args: dict[str, Any] = {"command": ["bash", "-lc", script], "workdir": self.cwd}
        if timeout:
            args["timeout_ms"] = timeout
        arguments = orjson.dumps(args).decode()
        self.token_count(summary + arguments, reasoning)
        call_id = "call_" + self.g.b62(24)
        self.item({"type": "function_call", "name": "shell", "arguments": arguments, "call_id": call_id})
        out = orjson.dumps(
            {"output": output, "metadata": {"exit_code": exit_code, "duration_seconds": seconds}}
        ).decode()
        self.item({"type": "function_call_output", "call_id": call_id, "output": out}, seconds + 0.05)
        self.turn_context()

    def say(self, text: str, reasoning_summary: str | None = None) -> None:
        reasoning = self.reasoning(reasoning_summary, 192) if reasoning_summary else 0
        self.token_count(text, reasoning)
        self.item(
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}, 0.2
        )
        self.rec("event_msg", {"type": "agent_message", "message": text})


def build_codex() -> list[dict[str, Any]]:
    _check_slug_cases()
    g = Gen(2202, "2026-03-23T08:41:07.512000")
    cwd = "/home/dev/inkpost"
    log = CodexLog(g, cwd=cwd, model="gpt-5-codex")
    session = str(uuid.UUID(int=g.rng.getrandbits(128), version=4))
    log.rec(
        "session_meta",
        {
            "id": session,
            "timestamp": g.now(),
            "cwd": cwd,
            "originator": "codex_cli_rs",
            "cli_version": "0.58.0",
            "instructions": None,
            "source": "cli",
            "model_provider": "openai",
            "git": {
                "commit_hash": g.hex(40),
                "branch": "main",
                "repository_url": "git@github.com:inkpost/inkpost.git",
            },
        },
    )
    log.context = 7420  # base instructions and tool schema
    agents = (
        "<user_instructions>\n\n# AGENTS.md\n\n- Python 3.11, dependencies in `pyproject.toml`; run `python -m pytest -q` before finishing.\n"
        "- Content lives in `content/posts/*.md` with TOML front matter; never edit published posts.\n"
        "- Slugs are permanent URLs: a change that renames existing slugs needs a redirect entry in `redirects.toml`.\n"
        "- Keep `inkpost/text.py` dependency-free (stdlib only).\n\n</user_instructions>"
    )
    log.item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": agents}]}, 0.5)
    env = (
        f"<environment_context>\n  <cwd>{cwd}</cwd>\n  <approval_policy>on-request</approval_policy>\n  <sandbox_mode>workspace-write</sandbox_mode>\n"
        "  <network_access>restricted</network_access>\n  <shell>bash</shell>\n</environment_context>"
    )
    log.item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": env}]})
    log.user(
        "tests/test_text.py started failing after I added Korean titles to the slug fixtures. Korean posts get an "
        "empty slug, so their links go to /posts// and 404. Please fix slugify without changing the slugs of the "
        "existing English/accented titles, and run the tests when you're done."
    )
    log.rec("event_msg", {"type": "token_count", "info": None, "rate_limits": log.rate_limits()}, 0.1)

    rg = (
        f"inkpost/text.py:{line_of(TEXT_PY, 'def slugify(')}:def slugify(value: str, *, max_length: int = 80) -> str:\n"
        f'inkpost/text.py:{line_of(TEXT_PY, "base = slugify(")}:    base = slugify(title, max_length=max_length) or "post"\n'
        "inkpost/build.py:14:from inkpost.text import excerpt, reading_time, slugify, unique_slug\n"
        'inkpost/build.py:88:        slug = post.meta.get("slug") or unique_slug(post.title, seen)\n'
        'inkpost/build.py:131:    return f"/posts/{slugify(post.title)}/"\n'
        "inkpost/feeds.py:9:from inkpost.text import excerpt, slugify\n"
        'inkpost/feeds.py:47:            "link": f"{site.base_url}/posts/{slugify(post.title)}/",\n'
        'inkpost/tags.py:22:    return f"/tags/{slugify(tag_key(tag))}/"\n'
        "tests/test_text.py:7:from inkpost.text import excerpt, reading_time, slugify, strip_tags, tag_key, title_case, truncate_words, unique_slug\n"
        "tests/test_text.py:46:def test_slugify(title: str, expected: str) -> None:\n"
        "tests/test_text.py:47:    assert slugify(title) == expected\n"
        'tests/test_text.py:55:    assert slugify("가" * 100, max_length=n) == "가" * n\n'
        'tests/test_build.py:61:    assert permalink(post) == f"/posts/{slugify(post.title)}/"\n'
    )
    log.shell("**Locating slugify and its callers**", 'rg -n "slugify" inkpost tests', rg, 0, 0.0)
    log.shell("**Reading the text helpers**", "sed -n '1,200p' inkpost/text.py", TEXT_PY, 0, 0.0)
    out, code = inkpost_pytest("ascii", verbose=True)
    log.shell(
        "**Running the slug tests verbosely**",
        "python -m pytest -vv tests/test_text.py",
        out,
        code,
        1.4,
        timeout=120000,
    )
    log.say(
        'The ASCII fold in `slugify` (`NFKD` then `.encode("ascii", "ignore")`) deletes every non-Latin '
        "character, so Korean, Japanese and Chinese titles end up empty. I'll switch the normalization so "
        "other scripts survive.",
        "**Diagnosing empty slugs for Hangul titles**",
    )
    ascii_line, strip_line = TEXT_OLD_SLUG.split("\n")
    nfkc_line, fold_line = TEXT_MID_SLUG.split("\n", maxsplit=1)[0], TEXT_NEW_SLUG.split("\n", maxsplit=1)[0]
    head = "apply_patch <<'PATCH'\n*** Begin Patch\n*** Update File: inkpost/text.py\n"
    hunk = "@@ def slugify(value: str, *, max_length: int = 80) -> str:\n"
    patch1 = f"{head}{hunk}-{ascii_line}\n+{nfkc_line}\n {strip_line}\n*** End Patch\nPATCH"
    log.shell(
        "**Switching slug normalization to NFKC**",
        patch1,
        "Success. Updated the following files:\nM inkpost/text.py\n",
        0,
        0.0,
    )
    out, code = inkpost_pytest("nfkc", verbose=False)
    log.shell("**Re-running the slug tests**", "python -m pytest -q tests/test_text.py", out, code, 0.9)
    tail = ' {strip_line}\n     slug = _SLUG_HYPHENATE.sub("-", value)\n     return slug[:max_length].strip("-")\n'
    added = "\n".join("+" + ln for ln in TEXT_FOLD_FN.rstrip("\n").split("\n"))
    patch2 = f"{head}{hunk}-{nfkc_line}\n+{fold_line}\n{tail.format(strip_line=strip_line)}{added}\n*** End Patch\nPATCH"
    log.say(
        f"NFKC keeps Hangul but no longer strips accents, so {sum(c[2] == 'nfkc' for c in SLUG_CASES)} accented titles changed slug (`crème-brûlée` "
        "instead of `creme-brulee`). Those URLs are already published, so I'll fold accents only for Latin "
        "letters and keep every other script as is.",
        "**Keeping accent folding for Latin letters**",
    )
    log.shell(
        "**Adding Latin-only accent folding**",
        patch2,
        "Success. Updated the following files:\nM inkpost/text.py\n",
        0,
        0.0,
        reasoning=320,
    )
    out, code = inkpost_pytest("fixed", verbose=False)
    log.shell("**Verifying the slug tests pass**", "python -m pytest -q tests/test_text.py", out, code, 0.8)
    full = "\n".join(pytest_quiet_lines(["."] * 214)) + "\n214 passed in 3.02s\n"
    log.shell("**Running the full suite**", "python -m pytest -q", full, 0, 3.4, timeout=300000)
    ret = '    return slug[:max_length].strip("-")\n'
    final = TEXT_PY.replace(TEXT_OLD_SLUG, TEXT_NEW_SLUG).replace(ret, ret + TEXT_FOLD_FN, 1)
    diff = unified("inkpost/text.py", TEXT_PY, final).split("\n")
    plus = sum(1 for ln in diff if ln.startswith("+") and not ln.startswith("+++"))
    minus = sum(1 for ln in diff if ln.startswith("-") and not ln.startswith("---"))
    stat = f" inkpost/text.py | {plus + minus} {'+' * plus}{'-' * minus}\n 1 file changed, {git_counts(plus, minus)}\n"
    log.shell("**Checking the diff size**", "git diff --stat", stat, 0, 0.0)
    summary = (
        "Fixed `slugify` in `inkpost/text.py`.\n\n"
        '- **Cause:** it normalized with NFKD and then encoded to ASCII with `errors="ignore"`, which folds '
        'accents but also deletes every Hangul, kana and CJK character. `서울 맛집 추천` became `""`, so '
        "`permalink()` produced `/posts//`.\n"
        "- **Fix:** a new `_fold_latin()` strips combining marks only from characters whose decomposition starts "
        "with an ASCII letter (é → e, ü → u) and NFKC-normalizes everything else, so `서울 맛집 추천` → "
        "`서울-맛집-추천` and fullwidth/ligature forms still fold (`Ｆｕｌｌｗｉｄｔｈ` → `fullwidth`).\n"
        "- **Compatibility:** all English and accented fixtures keep their old slugs (`creme-brulee-for-beginners`, "
        "`cafe-bar-reviews`, …). A plain NFKC switch would have renamed them, which I tried first and reverted.\n\n"
        "`tests/test_text.py` passes and the full suite is green (214 passed)."
    )
    log.say(summary)
    log.rec("event_msg", {"type": "task_complete", "last_agent_message": summary}, 0.1)

    log.user("Will any already-published URLs change? We have ~150 posts in content/posts.")
    check = (
        "python - <<'PY'\nimport pathlib, tomllib, subprocess\nfrom inkpost.text import slugify\n"
        "old = subprocess.run(['git', 'show', 'HEAD:inkpost/text.py'], capture_output=True, text=True).stdout\n"
        "ns = {}; exec(old, ns)\nchanged, empty_before = [], []\n"
        "for p in sorted(pathlib.Path('content/posts').glob('*.md')):\n"
        "    meta = tomllib.loads(p.read_text().split('+++')[1])\n"
        "    if 'slug' in meta: continue\n"
        "    a, b = ns['slugify'](meta['title']), slugify(meta['title'])\n"
        "    if not a: empty_before.append((p.name, b))\n"
        "    elif a != b: changed.append((p.name, a, b))\n"
        "print('changed:', changed)\nprint('empty before:', len(empty_before))\n"
        "for name, b in empty_before: print(' ', name, '->', b)\nPY"
    )
    korean = [
        ("2025-11-02-seoul-food.md", "서울-맛집-추천"),
        ("2025-11-19-crawler.md", "파이썬으로-웹-크롤러-만들기"),
        ("2025-12-04-docker-logs.md", "docker-컨테이너-로그-보는-법"),
        ("2026-01-08-jeju.md", "제주도-3박-4일-여행기"),
        ("2026-02-14-react-vue.md", "react-vs-vue-무엇을-고를까"),
        ("2026-03-01-rust-go.md", "rust와-go-비교-동시성-모델"),
    ]
    check_out = "changed: []\nempty before: 6\n" + "".join(f"  {a} -> {b}\n" for a, b in korean)
    log.shell("**Comparing old and new slugs for every post**", check, check_out, 0, 0.6, reasoning=256)
    log.say(
        "No published URL changes: every post that had a slug before keeps exactly the same one (`changed: []`). "
        "The only difference is the 6 Korean posts, which had an empty slug (and a broken `/posts//` link) and "
        "now get a real one, e.g. `2025-11-02-seoul-food.md` → `/posts/서울-맛집-추천/`. Since their old URL never "
        "worked, no entry in `redirects.toml` is needed.",
        "**Summarizing the slug comparison**",
    )
    log.rec(
        "event_msg",
        {"type": "task_complete", "last_agent_message": log.records[-1]["payload"]["message"]},
        0.1,
    )
    return log.records


# ================================================================================================
# Sample 3: Anthropic-shape chat log, Korean user, CSV export is garbled in Excel (missing BOM)
# ================================================================================================

EXPORTS_PY = r'''"""CSV exports for the back office (주문 내역, 정산, 재고)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from datetime import date, datetime

from flask import Blueprint, Response, abort, request

from backoffice.auth import admin_required
from backoffice.db import Order, OrderLine, session_scope

bp = Blueprint("exports", __name__, url_prefix="/admin")

ORDER_COLUMNS = (
    ("order_id", "주문번호"),
    ("ordered_at", "주문일시"),
    ("customer", "주문자"),
    ("product", "상품명"),
    ("option", "옵션"),
    ("quantity", "수량"),
    ("unit_price", "판매가"),
    ("discount", "할인"),
    ("total", "결제금액"),
    ("status", "주문상태"),
    ("region", "배송지"),
)

STATUS_LABELS = {
    "paid": "결제완료",
    "preparing": "상품준비중",
    "shipped": "배송중",
    "delivered": "배송완료",
    "cancelled": "취소",
    "refunded": "환불",
}


def _parse_day(value: str | None, default: date) -> date:
    if not value:
        return default
    try:
        return date.fromisoformat(value)
    except ValueError:
        abort(400, f"invalid date: {value}")


def _mask_name(name: str) -> str:
    """김민지 -> 김*지; two-letter names keep the first letter only (이수 -> 이*)."""
    if len(name) <= 1:
        return name
    if len(name) == 2:
        return name[0] + "*"
    return name[0] + "*" * (len(name) - 2) + name[-1]


def _region(address: str) -> str:
    """Only the first two address parts (시/도 and 시/군/구) leave the building."""
    return " ".join(address.split()[:2])


def order_rows(lines: Iterable[OrderLine]) -> Iterator[list[str]]:
    for line in lines:
        order: Order = line.order
        yield [
            order.number,
            order.created_at.strftime("%Y-%m-%d %H:%M"),
            _mask_name(order.customer_name),
            line.product_name,
            line.option_label or "",
            str(line.quantity),
            str(line.unit_price),
            str(line.discount),
            str(line.total),
            STATUS_LABELS.get(order.status, order.status),
            _region(order.shipping_address),
        ]


def render_csv(header: Iterable[str], rows: Iterable[list[str]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def csv_response(body: str, filename: str) -> Response:
    return Response(
        body,
        mimetype="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@bp.get("/orders/export.csv")
@admin_required
def export_orders() -> Response:
    today = date.today()
    start = _parse_day(request.args.get("from"), today.replace(day=1))
    end = _parse_day(request.args.get("to"), today)
    if end < start:
        abort(400, "to must not be before from")
    with session_scope() as db:
        lines = (
            db.query(OrderLine)
            .join(Order)
            .filter(Order.created_at >= datetime.combine(start, datetime.min.time()))
            .filter(Order.created_at <= datetime.combine(end, datetime.max.time()))
            .order_by(Order.created_at, OrderLine.id)
            .all()
        )
        body = render_csv([label for _, label in ORDER_COLUMNS], order_rows(lines))
    return csv_response(body, f"orders-{start:%Y%m%d}-{end:%Y%m%d}.csv")


@bp.get("/settlements/export.csv")
@admin_required
def export_settlements() -> Response:
    month = request.args.get("month") or date.today().strftime("%Y-%m")
    with session_scope() as db:
        rows = db.settlement_rows(month)
        body = render_csv(["정산월", "결제수단", "건수", "매출", "수수료", "정산금액"], rows)
    return csv_response(body, f"settlement-{month}.csv")
'''

EXPORTS_OLD = """def csv_response(body: str, filename: str) -> Response:
    return Response(
        body,
        mimetype="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )"""

EXPORTS_NEW = '''def csv_response(body: str, filename: str) -> Response:
    """A CSV download that Excel opens as UTF-8.

    Excel on Korean Windows reads a CSV without a byte order mark as CP949, so
    every Hangul cell turns into mojibake. The BOM (utf-8-sig) tells it the
    file is UTF-8; Google Sheets and pandas ignore it.
    """
    return Response(
        body.encode("utf-8-sig"),
        content_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )'''

EXPORT_TEST = """

def test_order_export_has_utf8_bom(admin_client, sample_orders):
    res = admin_client.get("/admin/orders/export.csv?from=2024-05-01&to=2024-05-31")
    assert res.status_code == 200
    assert res.headers["Content-Type"] == "text/csv; charset=utf-8"
    assert res.data.startswith(b"\\xef\\xbb\\xbf")
    header = res.data.decode("utf-8-sig").splitlines()[0]
    assert header.startswith("주문번호,주문일시,주문자")
"""

PRODUCTS = [
    ("오버핏 후드 집업", ["블랙 / M", "블랙 / L", "멜란지 그레이 / L", "네이비 / XL"], 59000),
    ("경량 패딩 조끼", ["블랙 / 95", "카키 / 100", "베이지 / 105"], 45900),
    ("캐시미어 블렌드 니트", ["아이보리 / FREE", "차콜 / FREE"], 79000),
    ("와이드 데님 팬츠", ["연청 / 28", "중청 / 30", "흑청 / 32"], 49900),
    ("스테인리스 텀블러 473ml", ["실버", "매트 블랙", "세이지 그린"], 18900),
    ("접이식 3단 우산", ["네이비", "체크"], 15900),
    ("가죽 카드지갑", ["브라운", "블랙"], 32000),
    ("러닝화 에어 쿠션", ["250", "260", "270", "280"], 89000),
    ("면 100% 양말 5족 세트", ["혼합 색상"], 12900),
    ("캔버스 토트백", ["내추럴", "블랙"], 27900),
    ("무선 키보드 (한글 각인)", ["화이트", "그레이"], 46000),
    ("도자기 머그컵 350ml", ["화이트", "소라색"], 11000),
]
SURNAMES = "김이박최정강조윤장임한오서신권황안송류홍"
GIVEN = [
    "민지",
    "서연",
    "지훈",
    "도윤",
    "하은",
    "예준",
    "수빈",
    "지우",
    "현우",
    "유진",
    "태양",
    "나래",
    "준서",
    "소윤",
    "은호",
    "가람",
]
REGIONS = [
    "서울특별시 강남구",
    "서울특별시 마포구",
    "서울특별시 송파구",
    "부산광역시 해운대구",
    "대구광역시 수성구",
    "인천광역시 연수구",
    "광주광역시 북구",
    "대전광역시 유성구",
    "경기도 성남시",
    "경기도 수원시",
    "경기도 고양시",
    "강원특별자치도 춘천시",
    "충청남도 천안시",
    "전북특별자치도 전주시",
    "경상남도 창원시",
    "제주특별자치도 제주시",
]
STATUSES = [("배송완료", 60), ("배송중", 14), ("상품준비중", 8), ("결제완료", 8), ("취소", 6), ("환불", 4)]


def orders_csv(rows: int, seed: int) -> str:
    rng = random.Random(seed)
    out = ["주문번호,주문일시,주문자,상품명,옵션,수량,판매가,할인,결제금액,주문상태,배송지"]
    t = datetime(2024, 5, 1, 0, 7)
    number = 240501000
    for _ in range(rows):
        t += timedelta(minutes=rng.randint(3, 140))
        number += rng.randint(1, 4)
        product, options, price = rng.choice(PRODUCTS)
        qty = rng.choices([1, 1, 1, 2, 3], k=1)[0]
        discount = rng.choice([0, 0, 0, 1000, 3000, round(price * qty * 0.1)])
        name = rng.choice(SURNAMES) + rng.choice(GIVEN)
        masked = name[0] + "*" + name[-1]
        status = rng.choices([s for s, _ in STATUSES], [w for _, w in STATUSES])[0]
        cells = [
            f"{t:%y%m%d}-{number % 100000:05d}",
            f"{t:%Y-%m-%d %H:%M}",
            masked,
            f'"{product}"' if "," in product else product,
            rng.choice(options),
            str(qty),
            str(price),
            str(discount),
            str(price * qty - discount),
            status,
            rng.choice(REGIONS),
        ]
        out.append(",".join(cells))
    return "\r\n".join(out) + "\r\n"


def build_chat_anthropic() -> list[dict[str, Any]]:
    g = Gen(3303, "2026-02-05T05:20:00")
    ids: list[str] = []

    def tid() -> str:
        ids.append("toolu_01" + g.b62(22))
        return ids[-1]

    def sig() -> str:
        return b64(b"\x12" + g.rng.randbytes(g.rng.randint(200, 360)))

    recs: list[dict[str, Any]] = []
    recs.append(
        {
            "role": "system",
            "content": (
                "You are a coding assistant working in the repository /srv/backoffice (a Flask back-office app for an "
                "online shop). Use the tools to read files, search the code and run commands; the virtualenv is in "
                ".venv. The user is Korean: answer in Korean, keep code identifiers and commit messages in English."
            ),
        }
    )
    recs.append(
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": (
                        "주문 내역 CSV 내보내기(/admin/orders/export.csv)로 받은 파일을 엑셀에서 열면 한글이 전부 깨져요. "
                        "메모장에서는 정상으로 보이고요. 스크린샷 첨부합니다. 원인 찾아서 고쳐 주세요."
                    ),
                },
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": b64(spreadsheet_png())},
                },
            ],
        }
    )
    t1 = tid()
    recs.append(
        {
            "role": "assistant",
            "content": [
                {
                    "type": "thinking",
                    "thinking": (
                        "Garbled Hangul in Excel but fine in Notepad: the file is valid UTF-8, but Excel guesses the "
                        "encoding. On Korean Windows it assumes CP949 unless there is a UTF-8 BOM. Find the export code "
                        "and check how the response body is encoded."
                    ),
                    "signature": sig(),
                },
                {
                    "type": "text",
                    "text": "메모장에서는 정상이라면 파일 자체는 UTF-8로 제대로 저장된 것 같습니다. 내보내기 코드부터 찾아볼게요.",
                },
                {
                    "type": "tool_use",
                    "id": t1,
                    "name": "grep",
                    "input": {"pattern": "export.csv|def csv_response|text/csv", "path": "backoffice"},
                },
            ],
        }
    )
    recs.append(
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": t1,
                    "content": (
                        f"backoffice/exports.py:{line_of(EXPORTS_PY, 'def csv_response')}:def csv_response(body: str, filename: str) -> Response:\n"
                        f'backoffice/exports.py:{line_of(EXPORTS_PY, "mimetype=")}:        mimetype="text/csv",\n'
                        f'backoffice/exports.py:{line_of(EXPORTS_PY, "/orders/export.csv")}:@bp.get("/orders/export.csv")\n'
                        f'backoffice/exports.py:{line_of(EXPORTS_PY, "/settlements/export.csv")}:@bp.get("/settlements/export.csv")\n'
                        'backoffice/templates/admin/orders.html:41:  <a class="btn" href="{{ url_for(\'exports.export_orders\', **request.args) }}">엑셀 다운로드</a>'
                    ),
                }
            ],
        }
    )
    t2 = tid()
    recs.append(
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": t2,
                    "name": "read_file",
                    "input": {"path": "backoffice/exports.py"},
                }
            ],
        }
    )
    recs.append(
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": t2,
                    "content": "\n".join(
                        f"{n:>4}  {ln}" for n, ln in enumerate(EXPORTS_PY.rstrip("\n").split("\n"), 1)
                    ),
                }
            ],
        }
    )
    t3 = tid()
    recs.append(
        {
            "role": "assistant",
            "content": [
                {
                    "type": "text",
                    "text": "`csv_response()`가 문자열을 그대로 넘기고 있네요. 실제 응답의 첫 바이트를 확인해 보겠습니다.",
                },
                {
                    "type": "tool_use",
                    "id": t3,
                    "name": "run_command",
                    "input": {
                        "command": "curl -s -b 'session=dev-admin' -o /tmp/orders.csv 'http://127.0.0.1:5000/admin/orders/export.csv?from=2024-05-01&to=2024-05-31' && head -c 16 /tmp/orders.csv | xxd"
                    },
                },
            ],
        }
    )
    recs.append(
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": t3,
                    "content": "exit code 7\ncurl: (7) Failed to connect to 127.0.0.1 port 5000 after 0 ms: Couldn't connect to server",
                    "is_error": True,
                }
            ],
        }
    )
    t4 = tid()
    csv_text = orders_csv(300, 33)
    recs.append(
        {
            "role": "assistant",
            "content": [
                {
                    "type": "text",
                    "text": "개발 서버가 꺼져 있습니다. 서버를 띄우는 대신 Flask 테스트 클라이언트로 같은 응답을 만들어 확인하겠습니다.",
                },
                {
                    "type": "tool_use",
                    "id": t4,
                    "name": "run_command",
                    "input": {
                        "command": (
                            ".venv/bin/python scripts/dump_export.py orders --from 2024-05-01 --to 2024-05-31 > /tmp/orders.csv "
                            "&& head -c 16 /tmp/orders.csv | xxd && head -n 300 /tmp/orders.csv"
                        )
                    },
                },
            ],
        }
    )
    head = csv_text.encode("utf-8")[:16]
    xxd = (
        "00000000: "
        + " ".join(head[i : i + 2].hex() for i in range(0, 16, 2))
        + "  "
        + "".join(chr(b) if 32 <= b < 127 else "." for b in head)
    )
    listing = "\n".join(csv_text.split("\r\n")[:300])
    recs.append(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": t4, "content": xxd + "\n" + listing}],
        }
    )
    t5 = tid()
    recs.append(
        {
            "role": "assistant",
            "content": [
                {
                    "type": "thinking",
                    "thinking": (
                        "First bytes are ec a3 bc = '주' in UTF-8, no EF BB BF. So the body is UTF-8 without a BOM, and the "
                        "Content-Type has no charset. Excel opens BOM-less CSV with the system ANSI code page (CP949 on "
                        "Korean Windows). Fix in csv_response so both exports get it: encode with utf-8-sig and declare the "
                        "charset. Google Sheets and pandas (read_csv with utf-8 or utf-8-sig) cope with a BOM; pandas with "
                        "encoding='utf-8' would keep \\ufeff in the first column name, worth mentioning."
                    ),
                    "signature": sig(),
                },
                {
                    "type": "text",
                    "text": (
                        "원인을 찾았습니다. 파일 첫 바이트가 `ec a3 bc`(UTF-8의 '주')로 시작하고 BOM(`ef bb bf`)이 없습니다. "
                        "한국어 윈도우의 엑셀은 BOM 없는 CSV를 CP949로 읽기 때문에 UTF-8 한글이 깨져 보입니다. "
                        "`csv_response()`에서 `utf-8-sig`로 인코딩하고 charset을 명시하겠습니다. 정산 내보내기도 같은 함수를 쓰니 함께 해결됩니다."
                    ),
                },
                {
                    "type": "tool_use",
                    "id": t5,
                    "name": "edit_file",
                    "input": {
                        "path": "backoffice/exports.py",
                        "old_str": EXPORTS_OLD,
                        "new_str": EXPORTS_NEW,
                    },
                },
            ],
        }
    )
    recs.append(
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": t5,
                    "content": "Edited backoffice/exports.py: replaced 1 occurrence (6 lines -> 12 lines).",
                }
            ],
        }
    )
    t6 = tid()
    recs.append(
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "회귀 테스트를 추가합니다."},
                {
                    "type": "tool_use",
                    "id": t6,
                    "name": "append_file",
                    "input": {"path": "tests/test_exports.py", "content": EXPORT_TEST},
                },
            ],
        }
    )
    recs.append(
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": t6,
                    "content": "Appended 9 lines to tests/test_exports.py.",
                }
            ],
        }
    )
    t7 = tid()
    recs.append(
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": t7,
                    "name": "run_command",
                    "input": {"command": ".venv/bin/python -m pytest tests/test_exports.py -q"},
                }
            ],
        }
    )
    recs.append(
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": t7,
                    "content": "......                                                                   [100%]\n6 passed in 0.52s",
                }
            ],
        }
    )
    recs.append(
        {
            "role": "assistant",
            "content": [
                {
                    "type": "text",
                    "text": (
                        "수정 완료했습니다.\n\n"
                        "**원인**: CSV가 BOM 없는 UTF-8로 내려가고 `Content-Type`에 charset도 없었습니다. 엑셀(한국어 윈도우)은 "
                        "이런 파일을 CP949로 해석해서 한글이 깨집니다. 메모장은 UTF-8을 자동 감지해서 정상으로 보였던 것이고요.\n\n"
                        "**수정** (`backoffice/exports.py`의 `csv_response()`):\n"
                        "- 본문을 `utf-8-sig`로 인코딩해서 맨 앞에 BOM(`EF BB BF`)을 붙입니다.\n"
                        "- `Content-Type: text/csv; charset=utf-8`을 명시합니다.\n\n"
                        "주문 내역과 정산 내보내기가 모두 이 함수를 쓰므로 둘 다 고쳐집니다. "
                        "`tests/test_exports.py`에 BOM과 헤더를 확인하는 테스트를 추가했고 6개 모두 통과합니다.\n\n"
                        '참고: pandas에서 이 파일을 `encoding="utf-8"`로 읽으면 첫 열 이름 앞에 `\\ufeff`가 붙습니다. '
                        '스크립트에서 읽을 때는 `encoding="utf-8-sig"`를 쓰세요.'
                    ),
                }
            ],
        }
    )
    recs.append({"role": "user", "content": "구글 시트로 가져오는 경우에도 문제 없나요?"})
    recs.append(
        {
            "role": "assistant",
            "content": [
                {
                    "type": "text",
                    "text": (
                        "네, 문제 없습니다. 구글 시트의 파일 가져오기는 UTF-8 BOM을 인식하고 제거하기 때문에 첫 셀이 "
                        "`주문번호` 그대로 들어갑니다. 다만 `=IMPORTDATA()`로 URL을 직접 불러오는 경우에는 관리자 로그인이 "
                        "필요한 이 주소에 접근할 수 없으니, 파일을 내려받아 업로드하는 방식으로 쓰셔야 합니다."
                    ),
                }
            ],
        }
    )
    return recs


# ================================================================================================
# Sample 4: OpenAI-shape chat log, search endpoint returns 500 for Korean queries
# ================================================================================================

SEARCH_ROUTES_PY = r"""from __future__ import annotations

import logging

from fastapi import APIRouter, Depends, Query

from app.deps import get_cache, get_index
from app.search.cache import SearchCache, cache_key
from app.search.index import SearchIndex
from app.search.schemas import SearchPage

router = APIRouter(prefix="/api/v1")
log = logging.getLogger("app.search")

PAGE_SIZE = 24


@router.get("/search", response_model=SearchPage)
async def search(
    q: str = Query(..., min_length=1, max_length=200),
    page: int = Query(1, ge=1, le=50),
    category: str | None = None,
    sort: str = Query("relevance", pattern="^(relevance|price_asc|price_desc|newest)$"),
    index: SearchIndex = Depends(get_index),
    cache: SearchCache = Depends(get_cache),
) -> SearchPage:
    filters = {"category": category or "", "sort": sort}
    key = cache_key(q, page, filters)
    if (hit := await cache.get(key)) is not None:
        return hit
    result = await index.query(q, offset=(page - 1) * PAGE_SIZE, limit=PAGE_SIZE, **filters)
    await cache.set(key, result, ttl=300)
    log.info("search q=%r page=%d hits=%d", q, page, result.total)
    return result
"""

SEARCH_CACHE_PY = r'''"""Redis-backed cache for search result pages."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from redis.asyncio import Redis

from app.search.schemas import SearchPage

KEY_PREFIX = "search:v2:"


def cache_key(query: str, page: int, filters: dict[str, str]) -> str:
    """A short, stable Redis key for one result page.

    The query is normalized (trimmed, lower-cased, inner whitespace collapsed) so
    "Wireless  Keyboard" and "wireless keyboard" share a cache entry.
    """
    normalized = " ".join(query.lower().split())
    raw = f"{normalized}|{page}|{sorted(filters.items())}".encode("latin-1")
    return KEY_PREFIX + hashlib.sha1(raw).hexdigest()


class SearchCache:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis

    async def get(self, key: str) -> SearchPage | None:
        data = await self._redis.get(key)
        if data is None:
            return None
        return SearchPage.model_validate(json.loads(data))

    async def set(self, key: str, page: SearchPage, *, ttl: int) -> None:
        payload: dict[str, Any] = page.model_dump(mode="json")
        await self._redis.set(key, json.dumps(payload, ensure_ascii=False), ex=ttl)
'''

KO_QUERIES = [
    "무선 키보드",
    "텀블러",
    "캠핑 의자",
    "아이폰 케이스",
    "에어프라이어",
    "운동화 260",
    "가습기",
    "노트북 거치대",
    "전기포트",
    "블루투스 스피커",
]
EN_QUERIES = [
    "wireless keyboard",
    "usb-c hub",
    "standing desk",
    "mechanical keyboard",
    "coffee grinder",
    "yoga mat",
    "monitor arm",
    "desk lamp",
    "backpack",
    "phone stand",
    "café table",
]


def api_log(lines: int, seed: int) -> str:
    """Access and error log of the catalog API: Korean queries fail with UnicodeEncodeError after the deploy."""
    from urllib.parse import quote

    rng = random.Random(seed)
    t = datetime(2026, 1, 20, 14, 2, 11, 80000)
    out: list[str] = []
    deployed = False
    while len(out) < lines:
        t += timedelta(milliseconds=rng.randint(40, 2600))
        stamp = f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d}"
        worker = rng.choice(["1842", "1843", "1844", "1845"])
        ip = f"10.20.{rng.randint(0, 3)}.{rng.randint(2, 250)}"
        if not deployed and len(out) > lines // 6:
            deployed = True
            out.append(
                f"{stamp} INFO  [{worker}] app.main: starting catalog-api 2.14.0 (git 9c41e7b) workers=4"
            )
            out.append(f"{stamp} INFO  [{worker}] app.search: search cache key prefix search:v2:")
            continue
        kind = rng.random()
        if kind < 0.28:
            q = rng.choice(KO_QUERIES)
            url = f"/api/v1/search?q={quote(q)}&page={rng.randint(1, 3)}"
            if deployed:
                out.append(
                    f"{stamp} ERROR [{worker}] uvicorn.error: Exception in ASGI application (GET {url} from {ip})"
                )
                out += [
                    "Traceback (most recent call last):",
                    '  File "/srv/catalog-api/.venv/lib/python3.12/site-packages/uvicorn/protocols/http/httptools_impl.py", line 409, in run_asgi',
                    "    result = await app(  # type: ignore[func-returns-value]",
                    '  File "/srv/catalog-api/.venv/lib/python3.12/site-packages/fastapi/routing.py", line 212, in run_endpoint_function',
                    "    return await dependant.call(**values)",
                    '  File "/srv/catalog-api/app/search/routes.py", line 28, in search',
                    "    key = cache_key(q, page, filters)",
                    '  File "/srv/catalog-api/app/search/cache.py", line 22, in cache_key',
                    '    raw = f"{normalized}|{page}|{sorted(filters.items())}".encode("latin-1")',
                    f"UnicodeEncodeError: 'latin-1' codec can't encode characters in position 0-{len(q.split()[0]) - 1}: ordinal not in range(256)",
                ]
                out.append(f'{stamp} INFO  [{worker}] uvicorn.access: {ip} - "GET {url} HTTP/1.1" 500')
            else:
                out.append(
                    f"{stamp} INFO  [{worker}] app.search: search q='{q}' page=1 hits={rng.randint(3, 900)}"
                )
                out.append(f'{stamp} INFO  [{worker}] uvicorn.access: {ip} - "GET {url} HTTP/1.1" 200')
        elif kind < 0.55:
            q = rng.choice(EN_QUERIES)
            url = f"/api/v1/search?q={quote(q)}&page=1"
            if rng.random() < 0.7:
                out.append(
                    f"{stamp} INFO  [{worker}] app.search: search q='{q}' page=1 hits={rng.randint(3, 900)}"
                )
            out.append(f'{stamp} INFO  [{worker}] uvicorn.access: {ip} - "GET {url} HTTP/1.1" 200')
        elif kind < 0.8:
            pid = rng.randint(10000, 99999)
            out.append(
                f'{stamp} INFO  [{worker}] uvicorn.access: {ip} - "GET /api/v1/products/{pid} HTTP/1.1" {rng.choice([200, 200, 200, 200, 404])}'
            )
        elif kind < 0.9:
            out.append(
                f'{stamp} INFO  [{worker}] uvicorn.access: {ip} - "GET /api/v1/categories HTTP/1.1" 200'
            )
        elif kind < 0.96:
            out.append(f'{stamp} INFO  [{worker}] uvicorn.access: 10.20.0.1 - "GET /healthz HTTP/1.1" 200')
        else:
            out.append(
                f"{stamp} WARNING [{worker}] app.index: slow query {rng.randint(800, 2400)} ms (shard=products-{rng.randint(0, 5)})"
            )
    return "\n".join(out[:lines])


def build_chat_openai() -> list[dict[str, Any]]:
    g = Gen(4404, "2026-01-21T09:03:00")

    def cid() -> str:
        return "call_" + g.b62(24)

    def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": cid(),
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
        }

    recs: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": (
                "You are an autonomous software engineer with shell access to the catalog-api repository at "
                "/srv/catalog-api (FastAPI, Python 3.12, Redis cache). Investigate before changing code, keep fixes "
                "minimal, and run the relevant tests after every change."
            ),
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": (
                        "Since yesterday's deploy (2.14.0) the search endpoint returns 500 for a chunk of requests; the "
                        "error-rate panel is attached. Support says it's mostly Korean customers searching for things "
                        "like 무선 키보드. I added a failing test, test_search_non_latin_query. Can you find and fix it?"
                    ),
                },
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64," + b64(error_graph_png()), "detail": "low"},
                },
            ],
        },
    ]
    c_log, c_routes = (
        call("run_command", {"command": "tail -n 380 logs/api.log"}),
        call("read_file", {"path": "app/search/routes.py"}),
    )
    recs.append(
        {
            "role": "assistant",
            "content": "I'll check the API log and the search route at the same time.",
            "tool_calls": [c_log, c_routes],
        }
    )
    recs.append({"role": "tool", "tool_call_id": c_log["id"], "content": api_log(380, 44)})
    recs.append({"role": "tool", "tool_call_id": c_routes["id"], "content": SEARCH_ROUTES_PY})
    c_cache = call("read_file", {"path": "app/search/cache.py"})
    recs.append(
        {
            "role": "assistant",
            "content": (
                "Every 500 is a UnicodeEncodeError from cache_key() encoding the query as latin-1; English queries are "
                "fine, Korean ones can't be encoded. Let me read the cache module."
            ),
            "tool_calls": [c_cache],
        }
    )
    recs.append({"role": "tool", "tool_call_id": c_cache["id"], "content": SEARCH_CACHE_PY})
    c_test = call("run_command", {"command": ".venv/bin/python -m pytest tests/test_search.py -q"})
    recs.append({"role": "assistant", "content": None, "tool_calls": [c_test]})
    fail = "\n".join(
        [
            "..........F.......                                                       [100%]",
            "",
            pytest_sep("=", "FAILURES"),
            pytest_sep("_", "test_search_non_latin_query"),
            "",
            "client = <starlette.testclient.TestClient object at 0x7f0d6c2a8b90>",
            "",
            "    def test_search_non_latin_query(client):",
            '        res = client.get("/api/v1/search", params={"q": "무선 키보드"})',
            ">       assert res.status_code == 200",
            "",
            "tests/test_search.py:88: ",
            "_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ ",
            "app/search/routes.py:28: in search",
            "    key = cache_key(q, page, filters)",
            "_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ ",
            "",
            "query = '무선 키보드', page = 1, filters = {'category': '', 'sort': 'relevance'}",
            "",
            "    def cache_key(query: str, page: int, filters: dict[str, str]) -> str:",
            '        """A short, stable Redis key for one result page.',
            "    ",
            "        The query is normalized (trimmed, lower-cased, inner whitespace collapsed) so",
            '        "Wireless  Keyboard" and "wireless keyboard" share a cache entry.',
            '        """',
            '        normalized = " ".join(query.lower().split())',
            '>       raw = f"{normalized}|{page}|{sorted(filters.items())}".encode("latin-1")',
            "E       UnicodeEncodeError: 'latin-1' codec can't encode characters in position 0-1: ordinal not in range(256)",
            "",
            "app/search/cache.py:22: UnicodeEncodeError",
            pytest_sep("=", "short test summary info"),
            "FAILED tests/test_search.py::test_search_non_latin_query - UnicodeEncodeError: 'latin-1' codec can't encode characters in position 0-1: ordinal not in range(256)",
            "1 failed, 17 passed in 0.91s",
            "",
            "[exit code 1]",
        ]
    )
    recs.append({"role": "tool", "tool_call_id": c_test["id"], "content": fail})
    c_edit = call(
        "edit_file",
        {
            "path": "app/search/cache.py",
            "old": '    raw = f"{normalized}|{page}|{sorted(filters.items())}".encode("latin-1")',
            "new": '    raw = f"{normalized}|{page}|{sorted(filters.items())}".encode("utf-8")',
        },
    )
    c_git = call(
        "run_command", {"command": "git log -L '/def cache_key/,+12:app/search/cache.py' --oneline -n 2"}
    )
    recs.append(
        {
            "role": "assistant",
            "content": (
                "Reproduced. The fix is to hash the UTF-8 bytes. I'll also check when latin-1 was introduced, to know "
                "whether the key change invalidates anything important."
            ),
            "tool_calls": [c_edit, c_git],
        }
    )
    recs.append(
        {"role": "tool", "tool_call_id": c_edit["id"], "content": "app/search/cache.py: 1 replacement"}
    )
    gitlog = "\n".join(
        [
            "9c41e7b Normalize search cache keys (collapse whitespace, lower-case)",
            "diff --git a/app/search/cache.py b/app/search/cache.py",
            "--- a/app/search/cache.py",
            "+++ b/app/search/cache.py",
            "@@ -11,6 +15,12 @@",
            " def cache_key(query: str, page: int, filters: dict[str, str]) -> str:",
            '-    raw = f"{query}|{page}|{sorted(filters.items())}"',
            '-    return "search:" + hashlib.sha1(raw.encode()).hexdigest()',
            '+    """A short, stable Redis key for one result page.',
            "+",
            "+    The query is normalized (trimmed, lower-cased, inner whitespace collapsed) so",
            '+    "Wireless  Keyboard" and "wireless keyboard" share a cache entry.',
            '+    """',
            '+    normalized = " ".join(query.lower().split())',
            '+    raw = f"{normalized}|{page}|{sorted(filters.items())}".encode("latin-1")',
            "+    return KEY_PREFIX + hashlib.sha1(raw).hexdigest()",
        ]
    )
    recs.append({"role": "tool", "tool_call_id": c_git["id"], "content": gitlog})
    c_test2 = call(
        "run_command", {"command": ".venv/bin/python -m pytest tests/test_search.py tests/test_cache.py -q"}
    )
    recs.append({"role": "assistant", "content": None, "tool_calls": [c_test2]})
    recs.append(
        {
            "role": "tool",
            "tool_call_id": c_test2["id"],
            "content": "..........................                                               [100%]\n26 passed in 1.07s",
        }
    )
    recs.append(
        {
            "role": "assistant",
            "content": (
                "Fixed. The 500s came from `cache_key()` in `app/search/cache.py`:\n\n"
                "- Commit 9c41e7b (shipped in 2.14.0) added query normalization and changed the encoding to "
                '`.encode("latin-1")`. Latin-1 can only represent U+0000–U+00FF, so any Hangul query (무선 키보드, '
                "텀블러, …) raised `UnicodeEncodeError` before the search ran. Before that commit it used `.encode()`, "
                "i.e. UTF-8, which is why this only started with the deploy.\n"
                '- I changed it to `.encode("utf-8")`. Keys for ASCII queries are byte-for-byte the same as now; only '
                'queries with characters in U+0080–U+00FF (e.g. "café table") get a new key, which just means one cache '
                "miss each, and the `search:v2:` prefix is unchanged.\n\n"
                "`tests/test_search.py` (including `test_search_non_latin_query`) and `tests/test_cache.py` pass: 26 passed. "
                "The graph should drop back to baseline once this is deployed."
            ),
        }
    )
    return recs


# ================================================================================================
# Sample 5: dataset, one conversation per line
# ================================================================================================


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required},
    }


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": _fn(name, description, properties, required)}


STR = {"type": "string"}


def etl_log(lines: int, seed: int) -> str:
    rng = random.Random(seed)
    t = datetime(2026, 2, 11, 2, 0, 3, 114000)
    out = [
        f"{t:%Y-%m-%d %H:%M:%S},114 INFO  etl.run: job import_supplier_prices started (run_id=7f3e2c91, trigger=cron)"
    ]
    suppliers = [("hanbit-trade", 48), ("north-wind", 75), ("acme-kr", 64)]
    for name, pages in suppliers:
        out.append(
            f"{t:%Y-%m-%d %H:%M:%S},{rng.randint(100, 999)} INFO  etl.fetch: supplier={name} pages={pages} format=json"
        )
        for page in range(1, pages + 1):
            t += timedelta(milliseconds=rng.randint(300, 1400))
            ms = f"{rng.randint(100, 999)}"
            rows = 250 if page < pages else rng.randint(20, 249)
            out.append(
                f"{t:%Y-%m-%d %H:%M:%S},{ms} INFO  etl.fetch: supplier={name} page {page}/{pages} rows={rows} in {rng.randint(180, 1300)} ms"
            )
            if name != "acme-kr" or page < 58:
                out.append(
                    f"{t:%Y-%m-%d %H:%M:%S},{ms} DEBUG etl.load: supplier={name} page {page}: staged {rows - rng.randint(0, 3)} rows into tmp_supplier_prices ({rng.randint(0, 40)} price changes)"
                )
            if rng.random() < 0.08:
                out.append(
                    f"{t:%Y-%m-%d %H:%M:%S},{ms} WARNING etl.validate: supplier={name} page {page}: {rng.randint(1, 4)} rows without barcode skipped"
                )
            if name == "acme-kr" and page == 58:
                out += [
                    f"{t:%Y-%m-%d %H:%M:%S},{ms} ERROR etl.transform: supplier={name} page 58: failed to map row 0",
                    "Traceback (most recent call last):",
                    '  File "/opt/etl/etl/transform.py", line 71, in map_rows',
                    '    yield PriceRow(sku=row["sku"], unit_price=Decimal(row["unit_price"]), currency=row.get("currency", "KRW"))',
                    "KeyError: 'unit_price'",
                    f"{t:%Y-%m-%d %H:%M:%S},{ms} ERROR etl.run: job import_supplier_prices failed after {page + 3} pages; 0 rows committed (transaction rolled back)",
                    f"{t:%Y-%m-%d %H:%M:%S},{ms} INFO  etl.notify: sent failure notice to #data-alerts",
                ]
                return "\n".join(out)
    return "\n".join(out)


def postgres_log(seed: int) -> str:
    rng = random.Random(seed)
    t = datetime(2026, 2, 12, 9, 40, 2)
    out = []
    for _ in range(70):
        t += timedelta(seconds=rng.randint(5, 90))
        pid = rng.randint(100, 999)
        out.append(
            rng.choice(
                [
                    f"db-1  | {t:%Y-%m-%d %H:%M:%S}.{rng.randint(100, 999)} UTC [{pid}] LOG:  checkpoint starting: time",
                    f"db-1  | {t:%Y-%m-%d %H:%M:%S}.{rng.randint(100, 999)} UTC [{pid}] LOG:  checkpoint complete: wrote {rng.randint(3, 400)} buffers ({rng.random():.1f}%); 0 WAL file(s) added, 0 removed, 1 recycled; write={rng.random() * 30:.3f} s, sync=0.004 s, total={rng.random() * 30:.3f} s",
                    f'db-1  | {t:%Y-%m-%d %H:%M:%S}.{rng.randint(100, 999)} UTC [{pid}] LOG:  automatic vacuum of table "shop.public.order_lines": index scans: 1',
                    f"db-1  | {t:%Y-%m-%d %H:%M:%S}.{rng.randint(100, 999)} UTC [{pid}] LOG:  duration: {rng.randint(1000, 9000)}.{rng.randint(100, 999)} ms  statement: SELECT count(*) FROM order_lines WHERE created_at > now() - interval '30 days'",
                ]
            )
        )
    stamp = f"{t:%Y-%m-%d %H:%M:%S}.{rng.randint(100, 999)} UTC"
    out += [
        f"db-1  | {stamp} [1] LOG:  received fast shutdown request",
        f"db-1  | {stamp} [1] LOG:  aborting any active transactions",
        f'db-1  | {stamp} [88] PANIC:  could not write to file "pg_wal/xlogtemp.88": No space left on device',
        f"db-1  | {stamp} [1] LOG:  WAL writer process (PID 88) was terminated by signal 6: Aborted",
        f"db-1  | {stamp} [1] LOG:  terminating any other active server processes",
        f"db-1  | {stamp} [1] LOG:  all server processes terminated; reinitializing",
        f'db-1  | {stamp} [1] FATAL:  could not write lock file "postmaster.pid": No space left on device',
        f"db-1  | {stamp} [1] LOG:  database system is shut down",
        "db-1 exited with code 1",
    ]
    return "\n".join(out)


def build_dataset() -> list[dict[str, Any]]:
    g = Gen(5505, "2026-02-11T00:00:00")

    def cid() -> str:
        return "call_" + g.b62(24)

    def call(name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": cid(),
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
        }

    convs: list[dict[str, Any]] = []

    # 1. a failed nightly ETL job: one very long log result
    tools1 = [
        _tool(
            "get_job_logs",
            "Fetch the log of the latest run of a scheduled job.",
            {"job": STR, "tail": {"type": "integer"}},
            ["job"],
        ),
        _tool("read_file", "Read a file from the ETL repository.", {"path": STR}, ["path"]),
    ]
    c1, c2 = (
        call("get_job_logs", {"job": "import_supplier_prices", "tail": 400}),
        call("read_file", {"path": "etl/transform.py"}),
    )
    transform = (
        "from decimal import Decimal\n\nfrom etl.schema import PriceRow\n\n\n"
        "def map_rows(rows):\n    for row in rows:\n"
        '        yield PriceRow(sku=row["sku"], unit_price=Decimal(row["unit_price"]), currency=row.get("currency", "KRW"))\n'
    )
    convs.append(
        {
            "messages": [
                {
                    "role": "system",
                    "content": "You are an on-call assistant for the data platform team. Use the tools to investigate; be concise.",
                },
                {"role": "user", "content": "The nightly import_supplier_prices job failed. What happened?"},
                {"role": "assistant", "content": None, "tool_calls": [c1]},
                {"role": "tool", "tool_call_id": c1["id"], "content": etl_log(400, 51)},
                {
                    "role": "assistant",
                    "content": "The run died on acme-kr page 58 with KeyError: 'unit_price'. Let me look at the mapping code.",
                    "tool_calls": [c2],
                },
                {"role": "tool", "tool_call_id": c2["id"], "content": transform},
                {
                    "role": "assistant",
                    "content": (
                        'The job failed on supplier acme-kr, page 58 of 64: `map_rows` reads `row["unit_price"]`, but from that '
                        "page on the supplier sends the field as `unitPrice` (their API moved to camelCase mid-pagination, "
                        "which suggests a rolling deploy on their side). Because the import runs in one transaction, nothing "
                        "was committed; yesterday's prices are still live.\n\nShort-term fix: accept both keys, e.g. "
                        '`row.get("unit_price", row.get("unitPrice"))`, and fail loudly if both are missing. Then re-run the job '
                        "manually; the other two suppliers were never reached and will import normally."
                    ),
                },
            ],
            "tools": tools1,
        }
    )

    # 2. Korean user: add type hints to a function
    tools2 = [
        _tool("read_file", "파일 내용을 읽습니다.", {"path": STR}, ["path"]),
        _tool(
            "write_file",
            "파일 전체를 새 내용으로 씁니다.",
            {"path": STR, "content": STR},
            ["path", "content"],
        ),
    ]
    src = (
        "def group_by_day(events, tz=None):\n"
        "    out = {}\n"
        "    for e in events:\n"
        "        day = e.at.astimezone(tz).date() if tz else e.at.date()\n"
        "        out.setdefault(day, []).append(e)\n"
        "    return out\n"
    )
    new_src = (
        "from collections.abc import Iterable\nfrom datetime import date, tzinfo\n\nfrom app.models import Event\n\n\n"
        "def group_by_day(events: Iterable[Event], tz: tzinfo | None = None) -> dict[date, list[Event]]:\n"
        '    """이벤트를 날짜별로 묶습니다.\n\n'
        "    ``tz``를 주면 그 시간대 기준 날짜로, 없으면 이벤트에 저장된 시간대 기준으로 나눕니다.\n"
        '    결과 딕셔너리는 처음 등장한 날짜 순서를 유지합니다.\n    """\n'
        "    out: dict[date, list[Event]] = {}\n"
        "    for e in events:\n"
        "        day = e.at.astimezone(tz).date() if tz else e.at.date()\n"
        "        out.setdefault(day, []).append(e)\n"
        "    return out\n"
    )
    r1, w1 = (
        call("read_file", {"path": "app/reports/grouping.py"}),
        call("write_file", {"path": "app/reports/grouping.py", "content": new_src}),
    )
    convs.append(
        {
            "messages": [
                {
                    "role": "user",
                    "content": "app/reports/grouping.py 에 있는 group_by_day 함수에 타입 힌트랑 docstring 좀 추가해 줘. docstring은 한국어로.",
                },
                {"role": "assistant", "content": None, "tool_calls": [r1]},
                {"role": "tool", "tool_call_id": r1["id"], "content": src},
                {
                    "role": "assistant",
                    "content": "`events`는 `Event` 객체의 iterable이고 `tz`는 선택적인 `tzinfo`네요. 반환 타입은 `dict[date, list[Event]]`로 지정하겠습니다.",
                    "tool_calls": [w1],
                },
                {
                    "role": "tool",
                    "tool_call_id": w1["id"],
                    "content": "wrote 17 lines to app/reports/grouping.py",
                },
                {
                    "role": "assistant",
                    "content": (
                        "추가했습니다.\n\n- `events: Iterable[Event]`, `tz: tzinfo | None = None`, 반환값 `dict[date, list[Event]]`\n"
                        "- 한국어 docstring: 시간대 처리 방식과 결과의 순서(처음 등장한 날짜 순)를 설명했습니다.\n"
                        "- 빈 딕셔너리 `out`에도 타입을 붙여서 mypy가 추론할 수 있게 했습니다.\n\n동작은 바뀌지 않았습니다."
                    ),
                },
            ],
            "tools": tools2,
        }
    )

    # 3. rename across the repository: parallel calls, one failing edit
    tools3 = [
        _tool(
            "search",
            "Search the repository with a regular expression.",
            {"pattern": STR, "glob": STR},
            ["pattern"],
        ),
        _tool("list_files", "List files under a directory.", {"path": STR}, ["path"]),
        _tool(
            "replace_in_file",
            "Replace every occurrence of a string in a file.",
            {"path": STR, "old": STR, "new": STR},
            ["path", "old", "new"],
        ),
        _tool("run_command", "Run a shell command in the repository root.", {"command": STR}, ["command"]),
    ]
    hits = [
        ("app/users/service.py", [12, 40]),
        ("app/api/users.py", [5, 31, 58]),
        ("app/api/admin.py", [9, 77]),
        ("app/jobs/digest.py", [3, 22]),
        ("tests/test_users.py", [4, 19, 27, 35, 52]),
        ("docs/api.md", [118]),
    ]
    search_out = "\n".join(
        f"{p}:{n}:    user = await fetch_user(db, user_id)"
        if n > 10
        else f"{p}:{n}:from app.users.service import fetch_user"
        for p, ns in hits
        for n in ns
    )
    s1, l1 = call("search", {"pattern": r"\bfetch_user\b"}), call("list_files", {"path": "app/users"})
    edits = [
        call("replace_in_file", {"path": p, "old": "fetch_user", "new": "get_user"}) for p, _ in hits[:5]
    ]
    bad = call("replace_in_file", {"path": "docs/api.md", "old": "fetch_user(", "new": "get_user("})
    t1, t2 = (
        call("run_command", {"command": "python -m pytest -q tests/test_users.py"}),
        call("run_command", {"command": "python -m pytest -q"}),
    )
    msgs3: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": "You are a careful refactoring assistant. Change only what is asked and keep the tests green.",
        },
        {"role": "user", "content": "Rename fetch_user to get_user everywhere (code, tests and docs)."},
        {
            "role": "assistant",
            "content": "Searching for every use and listing the module first.",
            "tool_calls": [s1, l1],
        },
        {"role": "tool", "tool_call_id": s1["id"], "content": search_out},
        {
            "role": "tool",
            "tool_call_id": l1["id"],
            "content": "app/users/__init__.py\napp/users/models.py\napp/users/service.py\napp/users/schemas.py",
        },
        {"role": "assistant", "content": None, "tool_calls": [*edits, bad]},
    ]
    msgs3 += [
        {
            "role": "tool",
            "tool_call_id": e["id"],
            "content": f"{json.loads(e['function']['arguments'])['path']}: {len(ns)} replacement(s)",
        }
        for e, (_, ns) in zip(edits, hits, strict=False)
    ]
    msgs3 += [
        {
            "role": "tool",
            "tool_call_id": bad["id"],
            "content": "error: 'fetch_user(' not found in docs/api.md (the doc mentions `fetch_user` without parentheses)",
        },
        {
            "role": "assistant",
            "content": "The docs mention it without parentheses; retrying with the bare name, then running the tests.",
            "tool_calls": [
                call("replace_in_file", {"path": "docs/api.md", "old": "fetch_user", "new": "get_user"})
            ],
        },
    ]
    msgs3.append(
        {
            "role": "tool",
            "tool_call_id": msgs3[-1]["tool_calls"][0]["id"],
            "content": "docs/api.md: 1 replacement(s)",
        }
    )
    msgs3 += [
        {"role": "assistant", "content": None, "tool_calls": [t1]},
        {
            "role": "tool",
            "tool_call_id": t1["id"],
            "content": "..........                                                               [100%]\n10 passed in 0.63s",
        },
        {"role": "assistant", "content": None, "tool_calls": [t2]},
        {
            "role": "tool",
            "tool_call_id": t2["id"],
            "content": "\n".join(pytest_quiet_lines(["."] * 187)) + "\n187 passed in 5.18s",
        },
        {
            "role": "assistant",
            "content": "Renamed `fetch_user` → `get_user` in 5 source/test files (14 occurrences) and `docs/api.md`. No other symbol contained the name, so nothing else changed. The full suite passes (187 tests).",
        },
    ]
    convs.append({"messages": msgs3, "tools": tools3})

    # 4. legacy function calling (function_call / role "function"), no ids
    functions4 = [
        _fn("get_order", "Look up an order by its number.", {"order_number": STR}, ["order_number"]),
        _fn(
            "track_shipment",
            "Get the latest tracking events for a carrier tracking number.",
            {"carrier": STR, "tracking_number": STR},
            ["carrier", "tracking_number"],
        ),
    ]
    order = {
        "order_number": "10482",
        "status": "shipped",
        "placed_at": "2026-02-07T13:22:05+09:00",
        "items": [{"sku": "SKU-2210", "name": "Canvas tote bag", "qty": 1}],
        "carrier": "cj",
        "tracking_number": "6891 2207 4415",
    }
    track = {
        "carrier": "cj",
        "tracking_number": "6891 2207 4415",
        "events": [
            {"at": "2026-02-08T09:14:00+09:00", "where": "곤지암 Hub", "what": "Departed hub"},
            {
                "at": "2026-02-08T21:40:00+09:00",
                "where": "부산 사하 대리점",
                "what": "Arrived at delivery office",
            },
            {"at": "2026-02-09T08:02:00+09:00", "where": "부산 사하 대리점", "what": "Out for delivery"},
        ],
    }
    convs.append(
        {
            "messages": [
                {"role": "system", "content": "You are a customer support assistant for an online shop."},
                {"role": "user", "content": "Hi, where is my order 10482? It said shipped two days ago."},
                {
                    "role": "assistant",
                    "content": None,
                    "function_call": {
                        "name": "get_order",
                        "arguments": json.dumps({"order_number": "10482"}),
                    },
                },
                {"role": "function", "name": "get_order", "content": json.dumps(order, ensure_ascii=False)},
                {
                    "role": "assistant",
                    "content": None,
                    "function_call": {
                        "name": "track_shipment",
                        "arguments": json.dumps({"carrier": "cj", "tracking_number": "6891 2207 4415"}),
                    },
                },
                {
                    "role": "function",
                    "name": "track_shipment",
                    "content": json.dumps(track, ensure_ascii=False),
                },
                {
                    "role": "assistant",
                    "content": (
                        "Your order 10482 (canvas tote bag) is out for delivery: it reached the CJ delivery office in Saha-gu, "
                        "Busan last night and left with the driver at 8:02 this morning, so it should arrive today. "
                        "Tracking number: 6891 2207 4415."
                    ),
                },
            ],
            "functions": functions4,
        }
    )

    # 5. migration fails: traceback, then a long container log
    tools5 = [_tool("run_command", "Run a shell command on the staging host.", {"command": STR}, ["command"])]
    m1, m2, m3 = (
        call("run_command", {"command": "alembic upgrade head"}),
        call("run_command", {"command": "docker compose ps -a"}),
        call("run_command", {"command": "docker compose logs --tail=80 db"}),
    )
    tb = "\n".join(
        [
            "INFO  [alembic.runtime.migration] Context impl PostgresqlImpl.",
            "Traceback (most recent call last):",
            '  File "/srv/shop/.venv/lib/python3.12/site-packages/sqlalchemy/engine/base.py", line 145, in __init__',
            "    self._dbapi_connection = engine.raw_connection()",
            '  File "/srv/shop/.venv/lib/python3.12/site-packages/psycopg/connection.py", line 748, in connect',
            "    raise last_ex.with_traceback(None)",
            'psycopg.OperationalError: connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection refused',
            "\tIs the server running on that host and accepting TCP/IP connections?",
            "",
            "The above exception was the direct cause of the following exception:",
            "",
            'sqlalchemy.exc.OperationalError: (psycopg.OperationalError) connection failed: connection to server at "127.0.0.1", port 5432 failed: Connection refused',
            "(Background on this error at: https://sqlalche.me/e/20/e3q8)",
            "[exit code 1]",
        ]
    )
    ps = (
        "NAME          IMAGE                COMMAND                  SERVICE   CREATED       STATUS                     PORTS\n"
        'shop-api-1    shop-api:2026.02.1   "gunicorn app.main:a…"   api       3 weeks ago   Up 2 days                  0.0.0.0:8000->8000/tcp\n'
        'shop-db-1     postgres:16.2        "docker-entrypoint.s…"   db        3 weeks ago   Exited (1) 41 minutes ago\n'
        'shop-redis-1  redis:7.2            "docker-entrypoint.s…"   redis     3 weeks ago   Up 2 days                  6379/tcp'
    )
    convs.append(
        {
            "messages": [
                {
                    "role": "user",
                    "content": "Please run the database migrations on staging (alembic upgrade head).",
                },
                {"role": "assistant", "content": None, "tool_calls": [m1]},
                {"role": "tool", "tool_call_id": m1["id"], "content": tb},
                {
                    "role": "assistant",
                    "content": "Postgres refused the connection, so the migration never started. Checking the containers.",
                    "tool_calls": [m2],
                },
                {"role": "tool", "tool_call_id": m2["id"], "content": ps},
                {
                    "role": "assistant",
                    "content": "The db container exited 41 minutes ago. Reading its last log lines.",
                    "tool_calls": [m3],
                },
                {"role": "tool", "tool_call_id": m3["id"], "content": postgres_log(55)},
                {
                    "role": "assistant",
                    "content": (
                        "I did not run the migration: the staging database is down. Postgres crashed 41 minutes ago because the "
                        'disk is full (`could not write to file "pg_wal/...": No space left on device`) and it cannot restart for '
                        'the same reason (`could not write lock file "postmaster.pid"`).\n\nNext steps: free space on the '
                        "volume (check `df -h` and old WAL archives or backups on it), then `docker compose up -d db`, and "
                        "re-run `alembic upgrade head`. Want me to look at what is using the disk?"
                    ),
                },
            ],
            "tools": tools5,
        }
    )
    return convs


# ------------------------------------------------------------------------------------------------ checks

HANGUL = re.compile(r"[\uac00-\ud7a3]")


def _calls_and_results(name: str, rec: dict[str, Any]) -> Iterator[tuple[str, str, str, bool]]:
    """(kind "call"|"result", id, result text, is_error) found in one record of sample ``name``."""
    if name in ("claude-code", "chat-anthropic"):
        msg = rec.get("message", rec) if name == "claude-code" else rec
        content = msg.get("content") if isinstance(msg, dict) else None
        for b in content if isinstance(content, list) else []:
            if b.get("type") == "tool_use":
                yield "call", b["id"], "", False
            elif b.get("type") == "tool_result":
                c = b["content"]
                text = c if isinstance(c, str) else "".join(p.get("text", "") for p in c)
                yield "result", b["tool_use_id"], text, bool(b.get("is_error"))
    elif name == "codex":
        p = rec.get("payload", {})
        if p.get("type") == "function_call":
            yield "call", p["call_id"], "", False
        elif p.get("type") == "function_call_output":
            out = orjson.loads(p["output"])
            yield "result", p["call_id"], out["output"], out["metadata"]["exit_code"] != 0
    else:  # openai-shape chat line or one dataset message
        for c in rec.get("tool_calls") or []:
            yield "call", c["id"], "", False
        if rec.get("role") == "tool":
            text = rec["content"]
            yield (
                "result",
                rec["tool_call_id"],
                text,
                "exit code" in text or "Traceback" in text or text.startswith("error"),
            )


def check_sample(name: str, path: Path) -> list[str]:
    data = path.read_bytes()
    problems = []
    if not 40_000 <= len(data) <= 200_000:
        problems.append(f"size {len(data)} outside 40-200 KB")
    if not data.endswith(b"\n") or b"\r\n" in data.replace(b"\\r\\n", b""):
        problems.append("line endings")
    records = [orjson.loads(line) for line in data.split(b"\n")[:-1]]
    if not all(isinstance(r, dict) for r in records):
        problems.append("a line is not a JSON object")
    groups = [r["messages"] for r in records] if name == "dataset" else [records]
    longest, errors, korean = (
        0,
        0,
        bool(HANGUL.search(data.decode("utf-8")) or HANGUL.search(json.dumps(records, ensure_ascii=False))),
    )
    for group in groups:
        open_calls: dict[str, int] = {}
        answered: set[str] = set()
        legacy_pending = 0
        for rec in group:
            if rec.get("function_call"):
                legacy_pending += 1
            if rec.get("role") == "function":
                if legacy_pending != 1:
                    problems.append("legacy function result without exactly one pending call")
                legacy_pending = 0
                longest = max(longest, len(rec["content"].encode()))
            for kind, cid, text, is_error in _calls_and_results(name, rec):
                if kind == "call":
                    if cid in open_calls or cid in answered:
                        problems.append(f"duplicate call id {cid}")
                    open_calls[cid] = 1
                else:
                    if cid not in open_calls:
                        problems.append(f"result {cid} answers no earlier open call")
                    open_calls.pop(cid, None)
                    answered.add(cid)
                    longest = max(longest, len(text.encode("utf-8")))
                    errors += is_error
        if open_calls or legacy_pending:
            problems.append(f"unanswered calls: {sorted(open_calls)} legacy={legacy_pending}")
    if longest < 20_000:
        problems.append(f"longest tool result is only {longest} bytes")
    if not errors:
        problems.append("no tool error")
    if not korean:
        problems.append("no Korean text")
    print(
        f"{path.name:24} {len(data):>7} bytes {len(records):>4} lines  longest result {longest:>6} B  errors {errors}"
    )
    return problems


def main() -> int:
    samples: list[
        tuple[str, str, Callable[[], list[dict[str, Any]]], Callable[[list[dict[str, Any]]], Iterator[bytes]]]
    ] = [
        ("claude-code", "claude-code.jsonl", build_claude_code, compact),
        ("codex", "codex.jsonl", build_codex, compact),
        ("chat-anthropic", "chat-anthropic.jsonl", build_chat_anthropic, compact),
        ("chat-openai", "chat-openai.jsonl", build_chat_openai, lambda rs: spaced(rs, ascii_only=False)),
        ("dataset", "dataset.jsonl", build_dataset, lambda rs: spaced(rs, ascii_only=True)),
    ]
    problems = []
    for name, filename, build, encode in samples:
        path = OUT / filename
        write_jsonl(path, encode(build()))
        problems += [f"{filename}: {p}" for p in check_sample(name, path)]
    for p in problems:
        print("PROBLEM:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
