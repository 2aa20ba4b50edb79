"""Order receipts."""


def send_receipt(order, address):
    """Queue the receipt e-mail of an order."""
    return {'to': address, 'body': receipt_text(order)}


def receipt_text(order):
    """The text of an order's receipt."""
    return f"Thank you for order {order['number']}."
