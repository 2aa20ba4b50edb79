"""Tax rates by region."""

RATES = {'DE': 0.19, 'FR': 0.2, 'UK': 0.2}


def tax_rate_for(region):
    """The VAT rate of a region (0 when unknown)."""
    return RATES.get(region.upper(), 0.0)


def apply_tax(amount, rate):
    """The amount with tax added."""
    return round(amount * (1 + rate), 2)
