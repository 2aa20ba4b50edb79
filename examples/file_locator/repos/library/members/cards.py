"""Library cards."""


def issue_card(member, year):
    """A library card for a member."""
    return {'member': member['name'], 'expires': year + 2}


def card_expiry(card):
    """The year a card expires."""
    return card['expires']
