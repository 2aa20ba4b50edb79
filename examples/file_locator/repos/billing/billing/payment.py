"""Payments against invoices."""


def record_payment(invoice, amount):
    """Add a payment to an invoice."""
    invoice.setdefault('payments', []).append(amount)
    return invoice


def is_paid(invoice):
    """Whether the payments cover the invoice's total."""
    return sum(invoice.get('payments', [])) >= invoice.get('total', 0)
