"""Customer records."""


def create_customer(name, email):
    """A new customer record."""
    return {'name': name, 'email': email.lower()}


def customer_email(customer):
    """The address invoices are sent to."""
    return customer.get('billing_email') or customer['email']
