"""Discounts and coupons."""

COUPONS = {'SPRING10': 10, 'VIP20': 20}


def apply_discount(amount, percent):
    """The amount after a percentage discount."""
    return round(amount * (1 - percent / 100), 2)


def coupon_value(code):
    """The percentage a coupon code is worth."""
    return COUPONS.get(code.strip().upper(), 0)
