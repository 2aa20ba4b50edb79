"""Parcel labels and tracking."""


def print_label(order):
    """The text of a parcel label."""
    return f"Order {order['number']}\nTo: {order['customer']}"


def tracking_url(order):
    """The carrier's tracking page for an order."""
    return f"https://track.example/{order['number']}"
