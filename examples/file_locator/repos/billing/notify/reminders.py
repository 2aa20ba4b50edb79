"""Payment reminders."""


def send_reminder(invoice, customer):
    """Queue a reminder e-mail for an unpaid invoice."""
    return {'to': customer['email'], 'subject': f"Invoice {invoice.get('number')} is due"}


def overdue_invoices(invoices, today):
    """Invoices past their due date."""
    return [i for i in invoices if i.get('due', today) < today]
