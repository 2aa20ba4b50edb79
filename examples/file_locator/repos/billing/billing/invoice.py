"""Invoices: line items and totals."""


def invoice_total(items, tax_rate=0.0):
    """Sum of the line items plus tax."""
    net = sum(i['price'] * i.get('qty', 1) for i in items)
    return round(net * (1 + tax_rate), 2)


def add_line_item(invoice, name, price, qty=1):
    """Append a line item to an invoice."""
    invoice.setdefault('items', []).append({'name': name, 'price': price, 'qty': qty})
    return invoice
