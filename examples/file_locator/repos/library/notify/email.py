"""E-mails to members."""

TEMPLATES = {'due': 'Your book is due soon.'}


def send_due_notice(loan):
    """An e-mail reminding a member that a loan is due."""
    return {'to': loan['member'], 'body': email_template('due')}


def email_template(kind):
    """The text of an e-mail template."""
    return TEMPLATES.get(kind, '')
