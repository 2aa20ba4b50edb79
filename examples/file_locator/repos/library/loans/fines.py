"""Late fees."""


def late_fee(days_late):
    """The fee for returning a book late."""
    return max(0, days_late) * 0.25


def total_fines(fees):
    """What a member owes in total."""
    return round(sum(fees), 2)
