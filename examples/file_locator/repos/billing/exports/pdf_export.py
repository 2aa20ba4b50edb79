"""PDF export of invoices."""


def render_pdf(invoice):
    """The invoice as PDF bytes."""
    lines = [f"{i['name']}: {i['price']}" for i in invoice.get('items', [])]
    return ('%PDF-1.4\n' + '\n'.join(lines)).encode()


def pdf_filename(invoice):
    """The file name of an exported invoice."""
    return f"invoice-{invoice.get('number', 'draft')}.pdf"
