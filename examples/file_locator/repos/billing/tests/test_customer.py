"""Tests of customers/customer.py."""

from customers.customer import create_customer, customer_email


def test_create_customer():
    result = create_customer('Ada', 'ADA@x.org')
    assert result is not None


def test_customer_email():
    result = customer_email({'email': 'a@x.org'})
    assert result is not None
